"""Kill plans, the agent command, outcome parsing and the audit log, on hand-built snapshots."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from gputui.actions import (
    KillOutcome,
    PlanError,
    ReadOnlyError,
    all_handled,
    append_audit,
    final_outcomes,
    kill_command,
    parse_outcomes,
    plan_kill,
)
from gputui.model import Gpu, GpuProcess, HostSnapshot, Proc

MIB = 40960


def proc(pid: int, ppid: int, name: str, state: str = "S", gpu: dict[int, int] | None = None,
         cmdline: tuple[str, ...] = ()) -> Proc:
    return Proc(pid=pid, ppid=ppid, user="alice", state=state, name=name, cmdline=cmdline or (name, "--x"),
                start_ticks=pid * 7, gpu_memory_mib=dict(gpu or {}))


def host(extra: list[Proc] | None = None, invisible: bool = False) -> HostSnapshot:
    """bash 50 -> launcher 100 -> workers 101, 102 (GPU0/1) -> 102 has child 201; zombie 103; plus init."""
    procs = [
        proc(1, 0, "systemd"),
        proc(50, 1, "bash", cmdline=("-bash",)),
        proc(100, 50, "python3"),
        proc(101, 100, "scheduler_TP0", gpu={0: MIB}),
        proc(102, 100, "scheduler_TP1", gpu={1: MIB}),
        proc(201, 102, "compile_worker"),
        proc(103, 100, "detokenizer", state="Z"),
        proc(300, 1, "orphan", gpu={2: 100}),
        *(extra or []),
    ]
    gpu_list = [
        Gpu(index=0, memory_used_mib=MIB + 3, processes=(GpuProcess(101, MIB),)),
        Gpu(index=1, memory_used_mib=MIB + 3, processes=(GpuProcess(102, MIB),)),
        Gpu(index=2, memory_used_mib=103, processes=(GpuProcess(300, 100),)),
    ]
    if invisible:
        hidden = (GpuProcess(9999, 1024, visible=False),)
        gpu_list.append(Gpu(index=3, memory_used_mib=1027, processes=hidden))
    return HostSnapshot(target="node7", boot_id="boot-1", time=1.0, agent_pid=4000, gpus=tuple(gpu_list),
                        processes=tuple(procs))


def test_single_pid_plan_carries_identity_and_listing_fields() -> None:
    plan = plan_kill(host(), [101])
    assert plan.target == "node7"
    assert plan.boot_id == "boot-1"
    assert plan.signal == "TERM"
    assert not plan.tree
    (target,) = plan.targets
    assert (target.pid, target.start_ticks, target.name, target.user, target.gpu_mib) == (
        101, 707, "scheduler_TP0", "alice", MIB)
    assert target.cmdline == ("scheduler_TP0", "--x")
    assert kill_command(plan) == {
        "cmd": "kill",
        "boot_id": "boot-1",
        "targets": [{"pid": 101, "start_ticks": 707}],
        "signal": "TERM",
        "tree": False,
        "escalate_s": None,
    }


def test_tree_lists_descendants_children_first_and_commands_only_the_root() -> None:
    plan = plan_kill(host(), [100], signal="KILL", tree=True, escalate_s=2.5)
    assert [t.pid for t in plan.targets] == [201, 101, 102, 100]
    assert [t.descendant_of for t in plan.targets] == [100, 100, 100, None]
    assert [t.pid for t in plan.roots] == [100]
    command = kill_command(plan)
    assert command["targets"] == [{"pid": 100, "start_ticks": 700}]
    assert (command["tree"], command["signal"], command["escalate_s"]) == (True, "KILL", 2.5)
    # The zombie child is not listed as something to signal, but the plan says why.
    assert 103 not in [t.pid for t in plan.targets]
    assert any("pid 103 is a zombie" in n for n in plan.notes)


def test_zombie_is_replaced_by_its_parent_with_a_note() -> None:
    plan = plan_kill(host(), [103])
    assert [t.pid for t in plan.targets] == [100]
    assert plan.notes == ("pid 103 is a zombie: its parent 100 will be signalled instead",)


def test_zombie_and_its_parent_requested_together_signal_the_parent_once() -> None:
    plan = plan_kill(host(), [103, 100])
    assert [t.pid for t in plan.targets] == [100]


def test_zombie_of_init_leaves_nothing_to_do() -> None:
    with pytest.raises(PlanError, match="nothing to signal.*zombie whose parent is init"):
        plan_kill(host([proc(400, 1, "x", state="Z")]), [400])


def test_all_gpu_takes_every_tree_root_and_skips_invisible_pids() -> None:
    plan = plan_kill(host(invisible=True), [], all_gpu=True)
    assert plan.tree
    assert sorted(t.pid for t in plan.roots) == [100, 300]
    assert sorted(t.pid for t in plan.targets) == [100, 101, 102, 201, 300]
    assert any("pid 9999 on GPU3 is not visible here" in n for n in plan.notes)
    assert 9999 not in [t["pid"] for t in kill_command(plan)["targets"]]


@pytest.mark.parametrize("pid", [1, 0])
def test_pid_1_refused_early(pid: int) -> None:
    with pytest.raises(PlanError, match=f"pid {pid} is .*never signalled"):
        plan_kill(host(), [101, pid])


def test_agent_itself_refused_early() -> None:
    snapshot = host([proc(4000, 50, "gputui")])
    with pytest.raises(PlanError, match="gputui agent itself"):
        plan_kill(snapshot, [4000])


def test_pid_not_in_the_snapshot_is_refused() -> None:
    with pytest.raises(PlanError, match="pid 31337 is not a GPU process"):
        plan_kill(host(), [31337])


def test_read_only_refuses() -> None:
    with pytest.raises(ReadOnlyError, match="read-only"):
        plan_kill(host(), [101], read_only=True)


@pytest.mark.parametrize(("kwargs", "match"), [({"signal": "HUP"}, "unknown signal"),
                                               ({"escalate_s": 0.0}, "positive")])
def test_bad_signal_or_escalation(kwargs: dict, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        plan_kill(host(), [101], **kwargs)


def test_gpu_mib_is_none_when_the_driver_will_not_say() -> None:
    snapshot = HostSnapshot(
        target="t", gpus=(Gpu(index=0, memory_used_mib=10, processes=(GpuProcess(5, None),)),),
        processes=(proc(5, 1, "x"),),
    )
    assert plan_kill(snapshot, [5]).targets[0].gpu_mib is None
    assert plan_kill(host(), [100]).targets[0].gpu_mib == 0


REPLY = {
    "outcomes": [
        {"pid": 101, "start_ticks": 707, "name": "w", "user": "alice", "cmdline": ["python3", "w.py"],
         "gpu_mib": MIB, "stage": "signal", "signal": "TERM", "result": "sent", "detail": ""},
        {"pid": 101, "start_ticks": 707, "name": "w", "stage": "escalate", "signal": "KILL",
         "result": "sent"},
        {"pid": 101, "start_ticks": 707, "name": "w", "stage": "confirm", "signal": "KILL",
         "result": "killed"},
        {"pid": 102, "start_ticks": 714, "name": "v", "stage": "check", "signal": None, "result": "changed",
         "detail": "process changed: pid 102 now belongs to another process"},
    ]
}


def test_parse_outcomes_and_final_results() -> None:
    outcomes = parse_outcomes(REPLY)
    assert [(o.pid, o.stage, o.result) for o in outcomes] == [
        (101, "signal", "sent"),
        (101, "escalate", "sent"),
        (101, "confirm", "killed"),
        (102, "check", "changed"),
    ]
    assert outcomes[0].cmdline == ("python3", "w.py")
    assert outcomes[0].gpu_mib == MIB
    assert outcomes[3].signal is None
    final = final_outcomes(outcomes)
    assert (final[101].result, final[102].result) == ("killed", "changed")
    assert not all_handled(outcomes)
    assert all_handled(outcomes[:3])
    assert not all_handled([])


@pytest.mark.parametrize(
    "bad", [{}, {"outcomes": 3}, {"outcomes": [{"result": "sent"}]}, {"outcomes": ["x"]}]
)
def test_parse_outcomes_rejects_malformed_replies(bad: dict) -> None:
    with pytest.raises(ValueError, match="the agent's kill reply"):
        parse_outcomes(bad)


def test_audit_log_one_json_line_per_outcome(tmp_path: Path) -> None:
    plan = plan_kill(host(), [101, 102])
    outcomes = parse_outcomes(REPLY)
    path = append_audit(plan, outcomes, state_dir=tmp_path / "state", now=123.0)
    assert path == tmp_path / "state" / "audit.jsonl"
    append_audit(plan, outcomes[:1], state_dir=tmp_path / "state", now=124.0)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 5
    first = lines[0]
    assert first["time"] == 123.0
    assert first["host"] == "node7"
    assert first["boot_id"] == "boot-1"
    assert first["local_user"]
    assert (first["pid"], first["start_ticks"]) == (101, 707)
    assert (first["signal"], first["result"]) == ("TERM", "sent")
    assert first["command"] == ["python3", "w.py"]
    # An outcome without a cmdline falls back to the plan's listing.
    assert lines[3]["command"] == ["scheduler_TP1", "--x"]
    assert (lines[3]["signal"], lines[3]["requested_signal"]) == (None, "TERM")
    assert lines[3]["result"] == "changed"


def test_audit_without_outcomes_logs_unknown(tmp_path: Path) -> None:
    plan = plan_kill(host(), [100], tree=True)
    path = append_audit(plan, [], state_dir=tmp_path)
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert (line["pid"], line["result"]) == (100, "unknown")


def test_audit_defaults_to_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    outcome = KillOutcome(pid=101, start_ticks=707, name="w", stage="signal", signal="TERM", result="sent")
    path = append_audit(plan_kill(host(), [101]), [outcome])
    assert path == tmp_path / "gputui" / "audit.jsonl"
    assert json.loads(path.read_text())["command"] == ["scheduler_TP0", "--x"]


@dataclass(frozen=True)
class GroupedProc(Proc):
    """A Proc as a collector that reports process groups would send it."""

    pgid: int | None = None


def test_tree_listing_includes_a_double_forked_group_member() -> None:
    """The agent signals members of groups led by tree members; the confirmation must list them too."""
    procs = (
        GroupedProc(pid=100, ppid=1, name="launcher", start_ticks=1, pgid=100),
        GroupedProc(pid=101, ppid=100, name="worker", start_ticks=2, pgid=100, gpu_memory_mib={0: 10}),
        # Its middle parent exited: reparented to init, still in the launcher's group.
        GroupedProc(pid=102, ppid=1, name="grandchild", start_ticks=3, pgid=100, gpu_memory_mib={1: 10}),
        GroupedProc(pid=200, ppid=1, name="other", start_ticks=4, pgid=200, gpu_memory_mib={2: 10}),
    )
    snapshot = HostSnapshot(target="t", processes=procs)
    plan = plan_kill(snapshot, [100], tree=True)
    assert [t.pid for t in plan.targets] == [101, 102, 100]
    assert [t.pid for t in plan.roots] == [100]
