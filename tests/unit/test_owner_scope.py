"""Kill plans never cross an owner nobody picked: a tree stops at another owner's member, a kill-all takes the
jobs of the owner named (or all, when asked in so many words) and is refused on a host with several."""

from __future__ import annotations

import pytest

from gputui.core.actions import OwnersError, plan_kill
from gputui.core.model import Gpu, GpuProcess, HostSnapshot, Owner, Proc

STEP = Owner("slurm", "4242.0", "train", (("job", "4242"), ("step", "0")))
POD = Owner("pod", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "infer-0", (("namespace", "prod"),))
ALICE = Owner("user", "alice", "alice")


def _proc(pid: int, ppid: int, owner: Owner | None, mib: int = 0, sid: int | None = None) -> Proc:
    return Proc(
        pid=pid,
        ppid=ppid,
        user="alice",
        state="S",
        name=f"p{pid}",
        cmdline=(f"p{pid}",),
        start_ticks=pid * 10,
        gpu_memory_mib={0: mib} if mib else {},
        pgid=sid or pid,
        sid=sid or pid,
        owner=owner,
    )


def _host(*procs: Proc) -> HostSnapshot:
    holders = tuple(GpuProcess(p.pid, p.gpu_total_mib) for p in procs if p.gpu_total_mib)
    gpu = Gpu(
        index=0,
        memory_used_mib=sum(p.gpu_total_mib for p in procs),
        memory_total_mib=80000,
        processes=holders,
    )
    return HostSnapshot(target="h", boot_id="b", gpus=(gpu,), processes=procs)


def test_a_tree_never_takes_another_owners_member() -> None:
    launcher = _proc(100, 1, STEP, mib=1000)
    worker = _proc(101, 100, STEP, sid=100)
    escaped = _proc(102, 100, POD, sid=100)  # same session and process group, another owner
    below = _proc(103, 102, POD, sid=100)
    plan = plan_kill(_host(launcher, worker, escaped, below), [100], tree=True)
    assert {t.pid for t in plan.targets} == {100, 101}
    assert any("pid 102 belongs to another owner (pod:prod/infer-0)" in note for note in plan.notes)
    assert all(t.owner == STEP for t in plan.targets)


def test_users_are_one_owner_and_unknown_owners_decide_nothing() -> None:
    root = _proc(100, 1, ALICE, mib=1000)
    child = _proc(101, 100, Owner("user", "root", "root"), sid=100)
    old = _proc(102, 100, None, sid=100)
    plan = plan_kill(_host(root, child, old), [100], tree=True)
    assert {t.pid for t in plan.targets} == {100, 101, 102}


def test_kill_all_needs_an_owner_on_a_host_with_several() -> None:
    snapshot = _host(
        _proc(100, 1, STEP, mib=1000), _proc(200, 1, POD, mib=2000), _proc(300, 1, ALICE, mib=300)
    )
    with pytest.raises(OwnersError) as refused:
        plan_kill(snapshot, [], all_gpu=True)
    line = str(refused.value)
    assert "3 owners" in line
    assert "slurm:4242.0" in line
    assert "pod:prod/infer-0" in line
    assert "user:alice" in line
    assert "--owner" in line
    assert {o.key for o in refused.value.owners} == {STEP.key, POD.key, ALICE.key}
    assert [t.pid for t in plan_kill(snapshot, [], all_gpu=True, owner=("slurm", "4242")).targets] == [100]
    assert [t.pid for t in plan_kill(snapshot, [], all_gpu=True, owner=("pod", "infer-0")).targets] == [200]
    assert [t.pid for t in plan_kill(snapshot, [], all_gpu=True, owner=("user", "alice")).targets] == [300]
    every = plan_kill(snapshot, [], all_gpu=True, owner=("all", ""))
    assert {t.pid for t in every.targets} == {100, 200, 300}
    assert set(every.owners) == {STEP, POD, ALICE}
    with pytest.raises(OwnersError, match="no GPU job of slurm:7"):
        plan_kill(snapshot, [], all_gpu=True, owner=("slurm", "7"))


def test_one_owner_needs_no_choice() -> None:
    snapshot = _host(_proc(100, 1, STEP, mib=1000), _proc(101, 1, STEP, mib=1000))
    assert {t.pid for t in plan_kill(snapshot, [], all_gpu=True).targets} == {100, 101}
    legacy = _host(_proc(100, 1, None, mib=1000), _proc(200, 1, None, mib=1000))  # an older collector
    assert {t.pid for t in plan_kill(legacy, [], all_gpu=True).targets} == {100, 200}
