"""One order for a host's findings in every view (``verdict.order``): GPU memory held, then what blocks the
next job, then age; and the verdict engine hands every view its findings in that order."""

from __future__ import annotations

from gputui.core.model import Finding, FindingFacts, Gpu, GpuProcess, HostSnapshot, LiveThreads, Proc
from gputui.core.verdict import Baselines, held_mib, judge, ordered_findings

NOW_S = 1_800_000_000.0


def _finding(kind: str, pid: int | None = None, since: float | None = None, **facts: object) -> Finding:
    return Finding(
        kind=kind, target="h", detail=f"{kind} {pid}", pid=pid, since=since, facts=FindingFacts(**facts)
    )


def test_memory_then_blocking_then_age() -> None:
    zombie = _finding("zombie", 1, NOW_S - 3600)
    xid = Finding(kind="xid", target="h", detail="GPU1 Xid 13 (does not block the next launch)")
    health = Finding(kind="gpu_health", target="h", detail="GPU2 needs a reset (row remap pending)")
    stuck_old = _finding("uninterruptible", 2, NOW_S - 600)
    stuck_new = _finding("uninterruptible", 3, NOW_S - 60)
    orphan = _finding("orphan", 4, None, memory_mib=((0, 1024),))
    leader = _finding("defunct_leader", 5, NOW_S - 20, memory_mib=((1, 41236), (2, 41228)))
    ghost = _finding("ghost_memory", None, None, gpu=3, excess_mib=2048)
    invisible = _finding("invisible_pid", 77, None, gpu=4, used_mib=512)
    found = [zombie, xid, health, stuck_new, stuck_old, orphan, invisible, ghost, leader]
    assert ordered_findings(found) == (
        leader,  # 82464 MiB
        ghost,  # 2048 MiB no process accounts for
        orphan,  # 1024 MiB
        invisible,  # 512 MiB
        stuck_old,  # blocking, oldest first
        stuck_new,
        health,  # blocking, no start known
        zombie,  # holds nothing, blocks nothing
        xid,
    )
    assert [held_mib(f) for f in (leader, ghost, orphan, invisible, zombie, xid)] == [
        82464,
        2048,
        1024,
        512,
        0,
        0,
    ]
    assert ordered_findings([]) == ()
    unknown = _finding("zombie", 9, float("nan"))  # a hostile collector's start: last, never a crash
    assert ordered_findings([unknown, zombie]) == (zombie, unknown)


def test_the_engine_lists_the_defunct_leader_holding_memory_before_the_harmless_zombie() -> None:
    """The issue's host: a true zombie (memory already freed) was listed first, the defunct leader holding
    its GPU's memory below it."""
    launcher = Proc(pid=10, ppid=1, state="S", name="launcher", start_ticks=4)
    zombie = Proc(pid=20, ppid=10, state="Z", name="scheduler_TP0", start_ticks=5, state_since=NOW_S - 30)
    leader = Proc(
        pid=21,
        ppid=10,
        state="Z",
        name="scheduler_TP1",
        start_ticks=6,
        gpu_memory_mib={1: 41236},
        state_since=NOW_S - 30,
        live_threads=LiveThreads(2, {"D": 2}),
    )
    gpus = (
        Gpu(index=0, memory_used_mib=3),
        Gpu(index=1, memory_used_mib=41239, processes=(GpuProcess(pid=21, used_mib=41236),)),
    )
    host = HostSnapshot(target="h", time=NOW_S, gpus=gpus, processes=(launcher, zombie, leader))
    judged = judge(host, Baselines())
    assert [(f.kind, f.pid) for f in judged.findings] == [("defunct_leader", 21), ("zombie", 20)]
