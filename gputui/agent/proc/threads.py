"""The threads of a zombie-state process: a true zombie, or a defunct leader whose threads live on.

``ps`` shows both as ``<defunct>``, and they mean opposite things for GPU memory:

- a true zombie has no live thread left. Its exit already ran, its ``/dev/nvidia*`` files are closed and its
  device memory freed; only its exit status waits for the parent to reap it.
- a thread-group leader that called ``pthread_exit`` (or died alone) is in state Z while other threads of
  the process still run. The process has not exited: it still holds its files and its GPU memory. When those
  threads sit in the driver in state D, memory is released only when they come out of it, and signalling
  the parent frees nothing.

The difference is in ``/proc/PID/task/*/stat``: :func:`zombie_live_threads` reads it with the same readers
as the process scan (``procfs``).
"""

from __future__ import annotations

import os

from gputui.agent.proc.procfs import EXITED_STATES, ProcStat, parse_stat, read_small
from gputui.agent.protocol import live_threads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

THREADS_PROBE_MAX = 4096
"""At most this many threads' stat files are read for one process; the rest are counted as ``omitted``."""


def _task_stat(task_dir: str, tid: int) -> ProcStat | None:
    """One thread's stat line parsed, or None when it is gone, unreadable or malformed."""
    data = read_small(f"{task_dir}/{tid}/stat")
    return None if data is None else parse_stat(tid, data)


def zombie_live_threads(
    pid: int,
    start_ticks: int | None = None,
    proc_root: str = "/proc",
    max_threads: int = THREADS_PROBE_MAX,
) -> dict[str, Any] | None:
    """The live threads of process ``pid``, whose thread-group leader is in state Z.

    Args:
        pid: The process (its thread-group leader's id).
        start_ticks: The leader's start time (``/proc/PID/stat`` field 22) when known: a pid reused by
            another process since it was seen then reads as gone.
        proc_root: Where procfs is mounted.
        max_threads: At most this many threads are read.

    Returns:
        None when the process is gone, reused, unreadable, or its leader is not in state Z; else
        ``{"threads": [{"tid": T, "state": S}, ...], "omitted": N}``: its threads that have not exited
        (leader excluded), by thread id, with their state letters (``D`` is uninterruptible sleep, usually
        in a driver), and how many thread entries were not read (over ``max_threads``). A true zombie has
        ``threads == []`` and ``omitted == 0``.
    """
    task_dir = f"{proc_root}/{pid}/task"
    leader = _task_stat(task_dir, pid)
    if leader is None or leader.state != "Z":
        return None
    if start_ticks is not None and leader.start_ticks != start_ticks:
        return None
    try:
        entries = os.listdir(task_dir)
    except OSError:
        return None
    tids = sorted(int(entry) for entry in entries if entry.isdigit() and int(entry) != pid)
    threads: list[dict[str, Any]] = []
    for tid in tids[:max_threads]:
        stat = _task_stat(task_dir, tid)
        if stat is not None and stat.state not in EXITED_STATES:
            threads.append({"tid": tid, "state": stat.state})
    return {"threads": threads, "omitted": max(0, len(tids) - max_threads)}


def zombie_threads_summary(
    pid: int, start_ticks: int | None = None, proc_root: str = "/proc"
) -> dict[str, Any] | None:
    """What a snapshot carries of a zombie-state process's threads (``protocol.live_threads``): counts.

    Returns:
        None when :func:`zombie_live_threads` is None; else ``{"live": N, "states": {letter: count},
        "omitted": M}``. A true zombie is ``{"live": 0, "states": {}, "omitted": 0}``.
    """
    found = zombie_live_threads(pid, start_ticks, proc_root)
    if found is None:
        return None
    states: dict[str, int] = {}
    for thread in found["threads"]:
        states[thread["state"]] = states.get(thread["state"], 0) + 1
    return live_threads(len(found["threads"]), states, found["omitted"])
