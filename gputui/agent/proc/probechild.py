"""Readiness-probe children of any gputui on this host, known by what they are (``gpu.probe``).

A collector hides its own probe children by pid. Another gputui's collector (the TUI's while a Slurm prolog
runs ``gputui check --probe``, or the reverse) does not know those pids, so every child carries ``MARKER`` in
its argv: ``python -I -S -c <source> gputui-probe-child <bus id> <MiB> <hold s> <end s>``. A marker alone can
be written by anyone, so a process is taken for a probe child only when, besides the argv's shape:

- its parent is alive and is gputui by its command line (``protocol.is_gputui_command``): a child whose
  collector died is reparented, and is listed as usual;
- it is younger than the deadline it names (at most ``PROBE_DEADLINE_MAX_S``) plus a grace: a child past it
  has ended itself or been killed, so one still there is stuck, and listed;
- the driver lists it on one GPU only, holding at most the buffer it names plus ``CONTEXT_ALLOWANCE_MIB`` (a
  context's own memory): a real job that copies the marker hides at most that much, for at most that long.

What is recognised is never listed as a job, a survivor, a leftover or a device holder, never a kill target,
and its memory is the probe's: left out of its GPU's used memory as it is out of the process list.
"""

from __future__ import annotations

from gputui.agent.proc.procfs import CLOCK_TICKS_PER_S, read_cmdline, read_stat
from gputui.agent.protocol import (
    PROBE_BUFFER_MAX_MIB,
    PROBE_BUFFER_MIN_MIB,
    PROBE_DEADLINE_MAX_S,
    is_gputui_command,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.agent.proc.procfs import ProcStat

MARKER = "gputui-probe-child"
"""The word after the child's program in its argv (``argv[5]``)."""
MARKER_AT = 5
CONTEXT_ALLOWANCE_MIB = 1024
"""What a probe child may hold beyond its buffer: a CUDA context's own memory (hundreds of MiB on an H100)."""
AGE_GRACE_S = 3.0
"""Beyond the deadline a child names, how old it may be and still be taken for one (the kill's grace)."""


def child_argv(
    executable: str, source: str, bus_id: str, buffer_mib: int, hold_s: float, end_s: float
) -> list[str]:
    """The argv of a probe child: what ``recognised`` reads back."""
    return [
        executable,
        "-I",
        "-S",
        "-c",
        source,
        MARKER,
        bus_id,
        str(buffer_mib),
        str(hold_s),
        f"{end_s:.3f}",
    ]


def _claim(cmdline: list[str] | None) -> tuple[int, float] | None:
    """(buffer MiB, seconds to its end) from a probe child's argv; None when it is not one's shape."""
    if cmdline is None or len(cmdline) != MARKER_AT + 5 or cmdline[MARKER_AT] != MARKER:
        return None
    if cmdline[1:4] != ["-I", "-S", "-c"] or not cmdline[0].rsplit("/", 1)[-1].startswith("python"):
        return None
    try:
        buffer_mib, end_s = int(cmdline[MARKER_AT + 2]), float(cmdline[MARKER_AT + 4])
    except ValueError:
        return None
    if (
        not PROBE_BUFFER_MIN_MIB <= buffer_mib <= PROBE_BUFFER_MAX_MIB
        or not 0.0 <= end_s <= PROBE_DEADLINE_MAX_S + 1
    ):
        return None
    return buffer_mib, end_s


def recognised(
    gpus: list[dict[str, Any]], table: dict[int, ProcStat], now: float, boot_time: float | None
) -> dict[int, int]:
    """Pid -> GPU memory (MiB) of each process the GPUs list that is another gputui's probe child (above).

    ``gpus`` are a sample's GPU dicts with their NVML process lists; ``table`` the sample's /proc table (a
    pid missing from it is read here); ``now`` epoch seconds; ``boot_time`` epoch seconds of the boot.
    Reads the command line of listed processes named like python only, and of their parents.
    """
    where: dict[int, list[tuple[Any, Any]]] = {}
    for gpu in gpus:
        for proc in gpu.get("processes") or ():
            pid = proc.get("pid")
            if isinstance(pid, int) and pid > 1:
                where.setdefault(pid, []).append((gpu.get("index"), proc.get("used_mib")))
    found: dict[int, int] = {}
    for pid, places in where.items():
        mib = _probe_mib(pid, places, table, now, boot_time)
        if mib is not None:
            found[pid] = mib
    return found


def _probe_mib(
    pid: int, places: list[tuple[Any, Any]], table: dict[int, ProcStat], now: float, boot_time: float | None
) -> int | None:
    if len({index for index, _ in places}) != 1:
        return None  # a probe child holds one GPU
    used = max((mib for _, mib in places if isinstance(mib, int)), default=None)
    stat = table.get(pid) or read_stat(pid)
    if used is None or used < 0 or stat is None or not stat.name.startswith("python") or boot_time is None:
        return None
    claim = _claim(read_cmdline(pid))
    if claim is None:
        return None
    buffer_mib, end_s = claim
    age_s = now - (boot_time + stat.start_ticks / float(CLOCK_TICKS_PER_S))
    if used > buffer_mib + CONTEXT_ALLOWANCE_MIB or age_s > end_s + AGE_GRACE_S:
        return None
    parent = table.get(stat.ppid) or read_stat(stat.ppid)
    if stat.ppid <= 1 or parent is None or parent.state in ("Z", "X"):
        return None
    if not is_gputui_command(read_cmdline(stat.ppid) or []):
        return None
    return used
