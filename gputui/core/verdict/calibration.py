"""Which GPUs ``check --calibrate`` may record as idle: only from idle evidence.

A calibrated baseline is what "clean" means for that GPU from then on, so recording a GPU that still holds a
job's memory would bless that memory forever. A GPU is refused when:

* it lists a process, or a listed process holds memory on it;
* a finding names it (a defunct leader, an invisible pid, a survivor, an Xid, …); ghost memory alone is
  not one (memory above the old baseline with no process is what a calibration records): the size rule
  below judges it;
* its used memory is above a plausible idle footprint for its size: ``IDLE_SHARE`` (1 %) of its total
  memory, at least ``IDLE_FLOOR_MIB`` (512 MiB). An idle datacenter GPU uses a few MiB (up to a few hundred
  with a display, MIG or persistence state); 1 % of an 80 GiB GPU is 819 MiB, far below any model's weights;
* its figures cannot be read (that one is never forced: there is nothing to record).

``--force`` records the refused GPUs anyway and says so for each. Pure: no I/O.
"""

from __future__ import annotations

from gputui.core.model import Gpu, HostSnapshot, Record

IDLE_SHARE = 0.01
IDLE_FLOOR_MIB = 512
_MEMORY_FINDINGS = frozenset({"ghost_memory"})
"""Findings about the memory figure itself, judged by the size rule instead."""


def idle_limit_mib(gpu: Gpu) -> int:
    """The most memory an idle GPU of this size plausibly uses (see the module docstring), MiB."""
    total = gpu.memory_total_mib
    if total is None or total <= 0:
        return IDLE_FLOOR_MIB
    return max(IDLE_FLOOR_MIB, int(total * IDLE_SHARE))


class Refusal(Record):
    """Why one GPU is not idle evidence.

    Attributes:
        index: The GPU.
        reason: One clause ("lists pid 4242", "holds 40000 MiB, more than an idle 819 MiB").
        forcible: ``--force`` may record it anyway (False: nothing could be recorded).
    """

    index: int
    reason: str
    forcible: bool = True


def refusals(snapshot: HostSnapshot) -> list[Refusal]:
    """Every GPU of an analysed snapshot that is not idle evidence, by index, one refusal each."""
    holders: dict[int, set[int]] = {}
    for proc in snapshot.processes:
        for index in proc.gpu_memory_mib:
            holders.setdefault(index, set()).add(proc.pid)
    found: list[Refusal] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        used = gpu.memory_used_mib
        if gpu.error is not None or used is None:
            found.append(Refusal(gpu.index, "cannot be read", forcible=False))
            continue
        pids = sorted({p.pid for p in gpu.processes} | holders.get(gpu.index, set()))
        if pids:
            named = ", ".join(str(p) for p in pids[:4]) + (", …" if len(pids) > 4 else "")
            found.append(Refusal(gpu.index, f"lists pid {named}"))
            continue
        kinds = sorted(
            {f.kind for f in snapshot.findings if f.kind not in _MEMORY_FINDINGS and f.gpu_index == gpu.index}
        )
        if kinds:
            found.append(Refusal(gpu.index, f"has a finding ({', '.join(kinds)})"))
            continue
        limit = idle_limit_mib(gpu)
        if used > limit:
            why = f"holds {used} MiB, more than an idle GPU of its size ({limit} MiB)"
            found.append(Refusal(gpu.index, why))
    return found
