"""The sample's index (``jobs.sample_index``) gives the answers a scan of every process gives, and the verdict
engine's per-GPU rules read it rather than every process of the sample for every GPU.

Each ``scan_*`` below is the direct scan the index replaced, kept here as the reference: on hostile samples
(a pid listed twice, a process on two GPUs, a GPU listed twice, defunct leaders, stuck threads, pids not
visible here, loops of parents, pids 0 and 1 in a line, no process at all) both must agree.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.core.jobs import build_forest, flatten, proc_label, proc_table, sample_index
from gputui.core.model import (
    STATE_UNINTERRUPTIBLE,
    Gpu,
    GpuProcess,
    HostSnapshot,
    LiveThreads,
    Proc,
    ThreadWait,
    replace,
)
from gputui.core.servers import ServerWatch, job_facts
from gputui.core.servers.jobs import _job_members
from gputui.core.text import age_text
from gputui.core.verdict import Baselines, judge
from gputui.core.verdict.findings import DEFUNCT_RESET_AFTER_S
from gputui.core.verdict.fitness import ACTION_REBOOT, ACTION_WORDS
from gputui.core.verdict.readiness import stuck_in_driver
from gputui.core.verdict.slate import gpu_holders
from gputui.core.verdict.stuck import in_driver_too_long, place_text, reboot_reason

NOW = 1_800_000_000.0

# --- the direct scans, as the engine made them before it had the index ------------------------------------


def scan_reboot_reason(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
    now_s = snapshot.time
    if now_s is None:
        return None
    for proc in snapshot.processes:
        if not proc.gpu_memory_mib.get(gpu.index):
            continue
        for wait in in_driver_too_long(proc.waits, now_s):
            if wait.killed and wait.since is not None:
                age = age_text(now_s - wait.since)
                return (
                    f"GPU{gpu.index} {ACTION_WORDS[ACTION_REBOOT]}: pid {proc_label(proc)} was killed and "
                    f"its thread {wait.tid} is still {place_text(wait)} after {age}"
                )
    return None


def scan_stuck_in_driver(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
    if snapshot.time is None:
        return None
    reboot = scan_reboot_reason(snapshot, gpu)
    if reboot is not None:
        return reboot
    for proc in snapshot.processes:
        threads = proc.live_threads
        if not proc.is_defunct_leader or threads is None or not threads.states.get(STATE_UNINTERRUPTIBLE):
            continue
        if not proc.gpu_memory_mib.get(gpu.index) or proc.state_since is None:
            continue
        age_s = snapshot.time - proc.state_since
        if age_s >= DEFUNCT_RESET_AFTER_S:
            return (
                f"GPU{gpu.index} needs a reset: pid {proc_label(proc)} has held its memory with threads "
                f"stuck in the driver for {age_text(age_s)}"
            )
    return None


def scan_gpu_holders(gpu: Gpu, table: dict[int, Proc]) -> list[tuple[int, Proc | None, int | None, bool]]:
    holders: dict[int, tuple[int, Proc | None, int | None, bool]] = {}
    for listed in gpu.processes:
        proc = table.get(listed.pid) if listed.visible else None
        mib = listed.used_mib
        if listed.pid in holders and holders[listed.pid][3] == listed.visible:
            previous = holders[listed.pid][2]
            mib = None if mib is None or previous is None else max(mib, previous)
        holders[listed.pid] = (listed.pid, proc, mib, listed.visible)
    for pid, proc in table.items():
        mib = proc.gpu_memory_mib.get(gpu.index)
        if mib is not None and pid not in holders:
            holders[pid] = (pid, proc, mib, True)
    return sorted(holders.values(), key=lambda h: (-(h[2] or 0), h[0]))


def scan_members(snapshot: HostSnapshot, launcher_pid: int) -> list[Proc]:
    table = {proc.pid: proc for proc in snapshot.processes}
    members = []
    for proc in table.values():
        pid: int | None = proc.pid
        seen: set[int] = set()
        while pid is not None and pid not in seen and pid > 1:
            if pid == launcher_pid:
                members.append(proc)
                break
            seen.add(pid)
            parent = table.get(pid)
            pid = None if parent is None else parent.ppid
    return members


# --- hostile samples ----------------------------------------------------------------------------------------

_PIDS = st.integers(min_value=0, max_value=14)
_WAITS = st.lists(
    st.builds(
        ThreadWait,
        tid=st.integers(min_value=1, max_value=99),
        state=st.sampled_from("DR"),
        symbol=st.sampled_from([None, "uvm_spin_loop"]),
        module=st.sampled_from([None, "nvidia_uvm", "ext4"]),
        stack=st.booleans(),
        since=st.sampled_from([None, NOW - 10, NOW - 400]),
        killed=st.sampled_from([None, True, False]),
    ),
    max_size=2,
).map(tuple)
_PROCS = st.lists(
    st.builds(
        Proc,
        pid=st.integers(min_value=1, max_value=14),
        ppid=st.none() | _PIDS,
        state=st.sampled_from(["S", "R", "Z", "Z", "D"]),
        name=st.sampled_from([None, "python3", "bash"]),
        start_ticks=st.sampled_from([None, 5, 7]),
        state_since=st.sampled_from([None, NOW - 1, NOW - 700]),
        gpu_memory_mib=st.dictionaries(st.integers(0, 3), st.sampled_from([0, 1, 500]), max_size=2),
        sid=st.none() | _PIDS,
        live_threads=st.none()
        | st.builds(
            LiveThreads,
            live=st.integers(0, 2),
            states=st.sampled_from([{}, {"D": 1}, {"S": 1, "D": 2}]),
            omitted=st.integers(0, 1),
        ),
        waits=_WAITS,
    ),
    max_size=16,
)
_LISTED = st.builds(
    GpuProcess,
    pid=st.integers(min_value=1, max_value=20),
    used_mib=st.sampled_from([None, 0, 300]),
    type=st.sampled_from(["compute", "graphics"]),
    visible=st.booleans(),
)
_GPUS = st.lists(
    st.builds(
        Gpu,
        index=st.integers(0, 3),
        memory_used_mib=st.sampled_from([None, 3, 900]),
        processes=st.lists(_LISTED, max_size=4).map(tuple),
    ),
    max_size=4,
)


def _sample(gpus: list[Gpu], procs: list[Proc], now: float | None) -> HostSnapshot:
    return HostSnapshot(
        target="edge", boot_id="b", time=now, gpus=tuple(gpus), processes=tuple(procs), agent_pid=None
    )


@settings(max_examples=300, deadline=None)
@given(_GPUS, _PROCS, st.sampled_from([NOW, None]))
def test_the_index_answers_as_the_scans_do(gpus: list[Gpu], procs: list[Proc], now: float | None) -> None:
    snapshot = _sample(gpus, procs, now)
    index = sample_index(snapshot)
    table = proc_table(snapshot)
    assert index.table == table
    assert index.listed == {proc.pid: proc for proc in snapshot.processes}
    assert index.defunct_leaders == tuple(p for p in snapshot.processes if p.is_defunct_leader)
    assert index.stuck == tuple(p for p in snapshot.processes if p.waits)
    assert index.tree_pids == {node.proc.pid for node in flatten(build_forest(snapshot))}
    assert [[node.proc for node in nodes] for nodes in index.jobs] == [
        [node.proc for node in flatten([root])] for root in build_forest(snapshot)
    ]
    for gpu in snapshot.gpus:
        assert gpu_holders(gpu, index) == scan_gpu_holders(gpu, table)
        assert stuck_in_driver(snapshot, gpu) == scan_stuck_in_driver(snapshot, gpu)
        assert reboot_reason(snapshot, gpu) == scan_reboot_reason(snapshot, gpu)
    for launcher in (None, -1, 0, 1, 2, 3, 7, 14, 99):
        if launcher is None:
            continue
        expected = sorted(scan_members(snapshot, launcher), key=lambda p: p.pid)
        assert sorted(index.members(launcher), key=lambda p: p.pid) == expected
        assert sorted(_job_members(snapshot, launcher), key=lambda p: p.pid) == expected
    tree = [p for pid, p in index.listed.items() if pid in index.tree_pids]
    assert _job_members(snapshot, None) == tree


# --- the edges, each said ----------------------------------------------------------------------------------


def _leader(pid: int, ppid: int, gpu: int, since: float) -> Proc:
    """A defunct leader whose two threads have been in the driver since ``since``, holding GPU memory."""
    return Proc(
        pid=pid,
        ppid=ppid,
        state="Z",
        name="scheduler",
        state_since=since,
        gpu_memory_mib={gpu: 2048},
        live_threads=LiveThreads(live=2, states={"D": 2}),
    )


def test_a_sample_without_processes_has_an_empty_index_and_no_reason() -> None:
    gpu = Gpu(index=0, memory_used_mib=900, processes=(GpuProcess(pid=77, used_mib=890, visible=False),))
    snapshot = _sample([gpu], [], NOW)
    index = sample_index(snapshot)
    assert (index.listed, index.defunct_leaders, index.stuck, index.held_on) == ({}, (), (), {})
    assert stuck_in_driver(snapshot, gpu) is None
    assert index.members(77) == []
    # Not visible here: the number means nothing in this namespace, so it never names a process.
    assert gpu_holders(gpu, index) == [(77, None, 890, False)]


def test_a_pid_listed_twice_is_its_later_entry_and_each_entry_counts_where_it_holds() -> None:
    first = Proc(pid=40, ppid=10, state="S", name="old", start_ticks=5, gpu_memory_mib={0: 100})
    again = _leader(40, 10, 1, NOW - DEFUNCT_RESET_AFTER_S - 60)
    launcher = Proc(pid=10, ppid=1, state="S", name="launcher")
    gpus = [Gpu(index=0, memory_used_mib=103), Gpu(index=1, memory_used_mib=2051)]
    snapshot = _sample(gpus, [first, launcher, again], NOW)
    index = sample_index(snapshot)
    assert index.listed[40] is again
    assert index.held_on == {0: (first,), 1: (again,)}
    assert index.defunct_leaders == (again,)
    assert stuck_in_driver(snapshot, gpus[0]) is None
    assert stuck_in_driver(snapshot, gpus[1]) == scan_stuck_in_driver(snapshot, gpus[1])
    assert "GPU1 needs a reset: pid 40 (scheduler)" in (stuck_in_driver(snapshot, gpus[1]) or "")
    assert index.members(10) == [launcher, again]


def test_a_process_on_two_gpus_is_a_holder_of_each() -> None:
    worker = Proc(
        pid=41,
        ppid=10,
        state="S",
        name="worker",
        gpu_memory_mib={0: 500, 2: 700},
        waits=(ThreadWait(tid=41, state="R", module="nvidia_uvm", stack=True, since=NOW - 400, killed=True),),
    )
    gpus = [Gpu(index=i, memory_used_mib=900) for i in (0, 1, 2)]
    snapshot = _sample(gpus, [worker], NOW)
    index = sample_index(snapshot)
    assert index.held_on == {0: (worker,), 2: (worker,)}
    assert [h[0] for h in gpu_holders(gpus[0], index)] == [41]
    assert gpu_holders(gpus[1], index) == []
    assert reboot_reason(snapshot, gpus[1]) is None
    for gpu in (gpus[0], gpus[2]):
        assert reboot_reason(snapshot, gpu) == scan_reboot_reason(snapshot, gpu)
        assert f"GPU{gpu.index} needs a reboot of the host: pid 41 (worker) was killed" in (
            reboot_reason(snapshot, gpu) or ""
        )


@pytest.mark.parametrize("launcher", [0, 1, 20, 30])
def test_a_line_of_parents_is_never_walked_through_init_nor_round_a_loop(launcher: int) -> None:
    procs = [
        Proc(pid=20, ppid=30, state="S"),  # 20 and 30: each the other's parent
        Proc(pid=30, ppid=20, state="S"),
        Proc(pid=31, ppid=30, state="S"),
        Proc(pid=1, ppid=20, state="S"),  # init listed under 20: nothing below it is 20's
        Proc(pid=50, ppid=1, state="S"),
    ]
    snapshot = _sample([], procs, NOW)
    expected = sorted(scan_members(snapshot, launcher), key=lambda p: p.pid)
    assert sorted(sample_index(snapshot).members(launcher), key=lambda p: p.pid) == expected
    assert {p.pid for p in expected} == ({20, 30, 31} if launcher in (20, 30) else set())


def _job(members: int, gpus: int) -> HostSnapshot:
    """A launcher, a worker on each of the first two GPUs, and idle helpers: ``members`` processes, on a
    host of ``gpus`` GPUs."""
    procs = [Proc(pid=1000, ppid=1, state="S", name="launcher", sid=1000)]
    procs += [
        Proc(pid=1001 + i, ppid=1000, state="S", name="worker", sid=1000, gpu_memory_mib={i: 70_000})
        for i in range(2)
    ]
    procs += [Proc(pid=1003 + n, ppid=1000, state="S", name="helper", sid=1000) for n in range(members - 3)]
    cards = [
        Gpu(
            index=i,
            memory_used_mib=70_003 if i < 2 else 3,
            processes=(GpuProcess(pid=1001 + i, used_mib=70_000),) if i < 2 else (),
        )
        for i in range(gpus)
    ]
    return _sample(cards, procs, NOW)


def test_more_gpus_do_not_make_the_verdict_read_every_process_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = Proc.is_defunct_leader

    def counted(proc: Proc) -> bool:
        asked.append(proc.pid)
        return bool(real.fget(proc))  # type: ignore[attr-defined]

    monkeypatch.setattr(Proc, "is_defunct_leader", property(counted))
    counts = []
    for gpus in (2, 16):
        asked.clear()
        snapshot = _job(300, gpus)
        judged = judge(snapshot, Baselines(), servers=ServerWatch())
        assert judged.verdict is not None
        assert not judged.verdict.clean
        counts.append(len(asked))
    assert counts[0] == counts[1]
    assert counts[1] <= 3 * 300  # once per process for the index, the findings, and the server's job


def test_a_judged_sample_and_its_source_share_one_index() -> None:
    snapshot = _job(20, 4)
    judged = judge(snapshot, Baselines(), servers=ServerWatch())
    assert sample_index(judged) is sample_index(snapshot)
    resampled = replace(snapshot, processes=tuple(list(snapshot.processes)))  # the next process sample
    assert sample_index(resampled) is not sample_index(snapshot)
    assert job_facts(judged, 1000) == job_facts(snapshot, 1000)
