"""A defunct leader (state Z, threads alive) against a true zombie: findings and kill plans."""

from __future__ import annotations

from gputui.core.actions import plan_kill
from gputui.core.model import Gpu, GpuProcess, HostSnapshot, LiveThreads, Proc
from gputui.core.text import age_since
from gputui.core.verdict import Baselines, find_problems

NOW_S = 1_800_000_000.0


def _host(threads: LiveThreads | None, defunct_for_s: float) -> HostSnapshot:
    leader = Proc(
        pid=40,
        ppid=10,
        state="Z",
        name="scheduler",
        start_ticks=5,
        gpu_memory_mib={0: 2048},
        state_since=NOW_S - defunct_for_s,
        live_threads=threads,
    )
    parent = Proc(pid=10, ppid=1, state="S", name="launcher", start_ticks=4)
    gpu = Gpu(index=0, memory_used_mib=2051, processes=(GpuProcess(pid=40, used_mib=2048),))
    return HostSnapshot(target="h", time=NOW_S, gpus=(gpu,), processes=(parent, leader))


def test_threads_in_the_driver_past_the_reset_window_ask_for_a_reset() -> None:
    (finding,) = [f for f in find_problems(_host(LiveThreads(2, {"D": 2}), 720), Baselines()) if f.pid == 40]
    assert finding.kind == "defunct_leader"
    assert "2 threads live on (2 in D (uninterruptible))" in finding.detail
    assert "its leader is defunct but" in finding.detail
    assert finding.since == NOW_S - 720
    assert age_since(finding.since, NOW_S) == "for 12 min"
    assert finding.action.startswith("held past 10 minutes")
    assert "reset the GPU" in finding.action
    assert "parent 10" not in finding.action
    (soon,) = [f for f in find_problems(_host(LiveThreads(1, {"D": 1}), 30), Baselines()) if f.pid == 40]
    assert soon.action.startswith("wait for the threads to leave the driver")


def test_live_threads_not_in_d_and_a_true_zombie() -> None:
    (sleeping,) = [f for f in find_problems(_host(LiveThreads(1, {"S": 1}), 30), Baselines()) if f.pid == 40]
    assert sleeping.kind == "defunct_leader"
    assert "threads stuck in the driver" not in sleeping.detail
    assert sleeping.action_pid == 40
    for threads in (LiveThreads(0), None):
        (zombie,) = [f for f in find_problems(_host(threads, 30), Baselines()) if f.pid == 40]
        assert zombie.kind == "zombie"
        assert zombie.action_pid == 10


def test_a_kill_signals_a_defunct_leader_itself_and_a_zombie_s_parent() -> None:
    plan = plan_kill(_host(LiveThreads(1, {"D": 1}), 30), [40], "TERM")
    assert [t.pid for t in plan.targets] == [40]
    assert not plan.zombies
    zombie_plan = plan_kill(_host(LiveThreads(0), 30), [40], "TERM")
    assert [t.pid for t in zombie_plan.targets] == [10]
