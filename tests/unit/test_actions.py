"""Kill plans, the agent command, outcome parsing and the audit log, on hand-built snapshots."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gputui.core.actions import (
    AuditLog,
    KillOutcome,
    KillRun,
    PlanError,
    ReadOnlyError,
    all_gone,
    final_outcomes,
    kill_command,
    killed_jobs,
    parse_outcomes,
    parse_reply,
    plan_kill,
)
from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import Gpu, GpuProcess, HostSnapshot, Proc, replace
from gputui.core.store import StoreError
from gputui.transports.sim import DETOKENIZER_PID, LAUNCHER_PID, SCHEDULER_PID_BASE, ManualClock, SimLink

MIB = 40960


def proc(
    pid: int,
    ppid: int,
    name: str,
    state: str = "S",
    gpu: dict[int, int] | None = None,
    cmdline: tuple[str, ...] = (),
) -> Proc:
    return Proc(
        pid=pid,
        ppid=ppid,
        user="alice",
        state=state,
        name=name,
        cmdline=cmdline or (name, "--x"),
        start_ticks=pid * 7,
        gpu_memory_mib=dict(gpu or {}),
    )


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
    return HostSnapshot(
        target="node7",
        boot_id="boot-1",
        time=1.0,
        agent_pid=4000,
        gpus=tuple(gpu_list),
        processes=tuple(procs),
    )


def test_single_pid_plan_carries_identity_and_listing_fields() -> None:
    plan = plan_kill(host(), [101])
    assert plan.target == "node7"
    assert plan.boot_id == "boot-1"
    assert plan.signal == "TERM"
    assert not plan.tree
    (target,) = plan.targets
    assert (target.pid, target.start_ticks, target.name, target.user, target.gpu_mib) == (
        101,
        707,
        "scheduler_TP0",
        "alice",
        MIB,
    )
    assert target.cmdline == ("scheduler_TP0", "--x")
    assert kill_command(plan) == {
        "cmd": "kill",
        "boot_id": "boot-1",
        "targets": [{"pid": 101, "start_ticks": 707}],
        "signal": "TERM",
        "tree": False,
        "escalate_s": None,
        "wait_s": None,
        "detach": True,
        "members": [],
    }


def test_tree_lists_descendants_children_first_and_commands_only_the_root() -> None:
    plan = plan_kill(host(), [100], signal="KILL", tree=True, escalate_s=2.5)
    assert [t.pid for t in plan.targets] == [201, 101, 102, 100]
    assert [t.descendant_of for t in plan.targets] == [100, 100, 100, None]
    assert [t.pid for t in plan.roots] == [100]
    command = kill_command(plan)
    assert command["targets"] == [{"pid": 100, "start_ticks": 700}]
    # The listed members go along: should the root die before the command runs, they are still signalled.
    assert command["members"] == [{"pid": p, "start_ticks": p * 7} for p in (201, 101, 102)]
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
    with pytest.raises(PlanError, match="gputui collector itself"):
        plan_kill(snapshot, [4000])


def test_pid_not_in_the_snapshot_is_refused() -> None:
    with pytest.raises(PlanError, match="pid 31337 is not a GPU process"):
        plan_kill(host(), [31337])


def test_read_only_refuses() -> None:
    with pytest.raises(ReadOnlyError, match="read-only"):
        plan_kill(host(), [101], read_only=True)


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"signal": "HUP"}, "unknown signal"), ({"escalate_s": 0.0}, "positive")]
)
def test_bad_signal_or_escalation(kwargs: dict, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        plan_kill(host(), [101], **kwargs)


def test_gpu_mib_is_none_when_the_driver_will_not_say() -> None:
    snapshot = HostSnapshot(
        target="t",
        gpus=(Gpu(index=0, memory_used_mib=10, processes=(GpuProcess(5, None),)),),
        processes=(proc(5, 1, "x"),),
    )
    assert plan_kill(snapshot, [5]).targets[0].gpu_mib is None
    assert plan_kill(host(), [100]).targets[0].gpu_mib == 0


REPLY = {
    "outcomes": [
        {
            "pid": 101,
            "start_ticks": 707,
            "name": "w",
            "user": "alice",
            "cmdline": ["python3", "w.py"],
            "gpu_mib": MIB,
            "stage": "signal",
            "signal": "TERM",
            "result": "sent",
            "detail": "",
        },
        {
            "pid": 101,
            "start_ticks": 707,
            "name": "w",
            "stage": "escalate",
            "signal": "KILL",
            "result": "sent",
        },
        {
            "pid": 101,
            "start_ticks": 707,
            "name": "w",
            "stage": "confirm",
            "signal": "KILL",
            "result": "killed",
        },
        {
            "pid": 102,
            "start_ticks": 714,
            "name": "v",
            "stage": "check",
            "signal": None,
            "result": "changed",
            "detail": "process changed: pid 102 now belongs to another process",
        },
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
    assert not all_gone(outcomes)
    assert all_gone(outcomes[:3])
    assert not all_gone(outcomes[:2])  # KILL sent is not gone yet
    assert not all_gone([])


@pytest.mark.parametrize(
    "bad", [{}, {"outcomes": 3}, {"outcomes": [{"result": "sent"}]}, {"outcomes": ["x"]}]
)
def test_parse_outcomes_rejects_malformed_replies(bad: dict) -> None:
    with pytest.raises(ValueError, match="the agent's kill reply"):
        parse_outcomes(bad)


def test_audit_log_one_json_line_per_outcome(tmp_path: Path) -> None:
    plan = plan_kill(host(), [101, 102])
    outcomes = parse_outcomes(REPLY)
    path = AuditLog(tmp_path / "state", lambda: 123.0).outcomes(plan, outcomes)
    assert path == tmp_path / "state" / "audit.jsonl"
    AuditLog(tmp_path / "state", lambda: 124.0).outcomes(plan, outcomes[:1])
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


def test_audit_of_a_request_without_answer_logs_unknown(tmp_path: Path) -> None:
    plan = plan_kill(host(), [100], tree=True)
    path = AuditLog(tmp_path).unknown(plan, [100], "no answer")
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert (line["pid"], line["stage"], line["result"]) == (100, "request", "unknown")
    assert line["detail"] == "no answer"


def test_audit_intent_lists_every_planned_process_with_what_will_follow(tmp_path: Path) -> None:
    plan = plan_kill(host(), [100], tree=True, escalate_s=5.0)
    path = AuditLog(tmp_path, lambda: 9.0).intent(plan)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [line["pid"] for line in lines] == [201, 101, 102, 100]
    assert {(line["stage"], line["signal"], line["result"]) for line in lines} == {
        ("intent", "TERM", "requested")
    }
    assert {(line["tree"], line["escalate_s"], line["wait_s"]) for line in lines} == {(True, 5.0, None)}
    assert lines[0]["detail"] == "TERM to the whole tree, then KILL after 5 s to what is still alive"
    assert lines[0]["time"] == 9.0


def test_audit_defaults_to_xdg_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    outcome = KillOutcome(pid=101, start_ticks=707, name="w", stage="signal", signal="TERM", result="sent")
    audit = AuditLog()
    path = audit.outcomes(plan_kill(host(), [101]), [outcome])
    assert path == audit.path == tmp_path / "gputui" / "audit.jsonl"
    assert json.loads(path.read_text())["command"] == ["scheduler_TP0", "--x"]


def test_tree_listing_includes_a_double_forked_group_member() -> None:
    """The agent signals members of groups led by tree members; the confirmation must list them too."""
    procs = (
        Proc(pid=100, ppid=1, name="launcher", start_ticks=1, pgid=100),
        Proc(pid=101, ppid=100, name="worker", start_ticks=2, pgid=100, gpu_memory_mib={0: 10}),
        # Its middle parent exited: reparented to init, still in the launcher's group.
        Proc(pid=102, ppid=1, name="grandchild", start_ticks=3, pgid=100, gpu_memory_mib={1: 10}),
        Proc(pid=200, ppid=1, name="other", start_ticks=4, pgid=200, gpu_memory_mib={2: 10}),
    )
    snapshot = HostSnapshot(target="t", processes=procs)
    plan = plan_kill(snapshot, [100], tree=True)
    assert [t.pid for t in plan.targets] == [101, 102, 100]
    assert [t.pid for t in plan.roots] == [100]


# -- what kill-all takes ---------------------------------------------------------------------------------


def test_pid_1_holding_gpu_memory_is_never_in_a_kill_all_plan() -> None:
    """A container whose init is the server: shown as a tree, never planned (today's "(in tree of 1)")."""
    snapshot = HostSnapshot(
        target="c",
        boot_id="b",
        gpus=(
            Gpu(index=0, memory_used_mib=MIB, processes=(GpuProcess(1, MIB),)),
            Gpu(index=1, memory_used_mib=MIB, processes=(GpuProcess(7, MIB),)),
        ),
        processes=(proc(1, 0, "python3", gpu={0: MIB}), proc(7, 1, "worker", gpu={1: MIB})),
    )
    plan = plan_kill(snapshot, [], all_gpu=True)
    assert [t.pid for t in plan.targets] == [7]
    assert all(t.descendant_of != 1 for t in plan.targets)
    assert any("pid 1 (python3) holds GPU memory: init is never signalled" in n for n in plan.notes)


def desktop() -> HostSnapshot:
    """gdm3 -> session worker -> Xorg + gnome-shell (graphics memory), and a compute job from a terminal."""
    procs = (
        proc(1, 0, "systemd"),
        proc(800, 1, "gdm3"),
        proc(810, 800, "gdm-session-wor"),
        proc(820, 810, "Xorg", gpu={0: 300}),
        proc(830, 810, "gnome-shell", gpu={0: 200}),
        proc(900, 830, "gnome-terminal-"),
        proc(910, 900, "bash", cmdline=("bash",)),
        proc(920, 910, "python3", gpu={0: MIB}, cmdline=("python3", "train.py")),
    )
    graphics = (GpuProcess(820, 300, type="graphics"), GpuProcess(830, 200, type="graphics"))
    gpu = Gpu(index=0, memory_used_mib=MIB + 503, processes=(*graphics, GpuProcess(920, MIB)))
    return HostSnapshot(target="desk", boot_id="b", gpus=(gpu,), processes=procs)


def test_kill_all_leaves_graphics_only_holders_and_the_display_stack_out() -> None:
    plan = plan_kill(desktop(), [], all_gpu=True)
    assert [t.pid for t in plan.targets] == [920]
    assert any("pid 820 (Xorg) holds graphics memory only" in n for n in plan.notes)
    assert any("pid 830 (gnome-shell) holds graphics memory only" in n for n in plan.notes)
    with_graphics = plan_kill(desktop(), [], all_gpu=True, include_graphics=True)
    # Each display process is a job of its own: never the display manager above them, nor the terminal below.
    assert sorted(t.pid for t in with_graphics.roots) == [820, 830, 920]
    assert {t.pid for t in with_graphics.targets} == {820, 830, 900, 910, 920}
    assert {t.pid for t in with_graphics.targets if t.graphics_only} == {820, 830}


def test_a_graphics_holder_picked_by_hand_is_planned() -> None:
    plan = plan_kill(desktop(), [820])
    assert [(t.pid, t.graphics_only) for t in plan.targets] == [(820, True)]


def test_a_cron_daemons_job_is_planned_without_the_daemon_or_its_other_children() -> None:
    procs = (
        proc(1, 0, "systemd"),
        proc(700, 1, "cron"),
        proc(710, 700, "sh", cmdline=("sh", "-c", "python3 nightly.py; exit")),
        proc(711, 710, "python3", gpu={0: MIB}),
        proc(720, 700, "sh", cmdline=("sh", "-c", "backup.sh")),
    )
    snapshot = HostSnapshot(
        target="t",
        boot_id="b",
        gpus=(Gpu(index=0, memory_used_mib=MIB, processes=(GpuProcess(711, MIB),)),),
        processes=procs,
    )
    plan = plan_kill(snapshot, [], all_gpu=True)
    assert [t.pid for t in plan.targets] == [711, 710]


# -- replies and runs ------------------------------------------------------------------------------------


def test_parse_reply_with_pending_escalation() -> None:
    reply = parse_reply(
        {
            "op": 3,
            "outcomes": REPLY["outcomes"][:1],
            "count": 1,
            "done": False,
            "elapsed_s": 0.01,
            "pending": [
                {"pid": 101, "start_ticks": 707, "name": "w", "signal": "KILL", "due_in_s": 4.5},
                {"nonsense": True},
            ],
        }
    )
    assert (reply.op, reply.count, reply.done, reply.elapsed_s) == (3, 1, False, 0.01)
    assert [(p.pid, p.signal, p.due_in_s) for p in reply.pending] == [(101, "KILL", 4.5)]
    # A kill answered at its end (no "done" key) is done.
    assert parse_reply({"outcomes": []}).done


class RecordingSim(SimLink):
    """A simulated host that records, for each command, the audit lines written before it arrived."""

    def __init__(self, audit: AuditLog) -> None:
        super().__init__("gpu-node-07", LinkOptions(memory_interval_s=0.01), clock=ManualClock())
        self.audit = audit
        self.seen: list[tuple[str, int]] = []

    def request(self, command: dict, timeout_s: float) -> dict:
        lines = self.audit.path.read_text().splitlines() if self.audit.path.exists() else []
        self.seen.append((command["cmd"], len(lines)))
        return super().request(command, timeout_s)


def test_a_run_writes_the_intent_before_the_kill_and_every_outcome_after(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path)
    link = RecordingSim(audit)
    link.open()
    snapshot = HostSnapshot.from_dict(link.request({"cmd": "sample"}, 1)["snapshot"])
    plan = plan_kill(snapshot, [LAUNCHER_PID], tree=True, escalate_s=0.1)
    run = KillRun(link, plan, audit)
    first = run.start()
    assert link.seen[-1] == ("kill", len(plan.targets))  # the intent was on disk before the command left
    assert not first.done
    assert [p.pid for p in first.pending] == [DETOKENIZER_PID]
    while not run.done:
        run.wait(1.0)
    lines = [json.loads(x) for x in audit.path.read_text().splitlines()]
    assert [line["stage"] for line in lines[: len(plan.targets)]] == ["intent"] * len(plan.targets)
    logged = [(line["pid"], line["stage"], line["result"]) for line in lines[len(plan.targets) :]]
    assert logged == [(o.pid, o.stage, o.result) for o in run.outcomes]
    assert (DETOKENIZER_PID, "confirm", "killed") in logged
    finals = final_outcomes(run.outcomes).values()
    assert all(final.result in ("exited", "killed", "reaped") for final in finals)
    # What the kill took down: one job, its members, its GPUs (those its defunct leaders held; TP0 exited
    # whole at the wedge and held none).
    (job,) = killed_jobs(plan, run.outcomes, snapshot)
    assert job.root_pid == LAUNCHER_PID
    assert (SCHEDULER_PID_BASE, snapshot.process(SCHEDULER_PID_BASE).start_ticks) in job.members
    assert job.gpus == frozenset(range(1, 8))


def test_a_run_whose_audit_log_cannot_be_written_sends_nothing(tmp_path: Path) -> None:
    (tmp_path / "gputui").write_text("a file where the state directory should be")
    audit = AuditLog(tmp_path / "gputui")
    link = RecordingSim(audit)
    link.open()
    snapshot = HostSnapshot.from_dict(link.request({"cmd": "sample"}, 1)["snapshot"])
    run = KillRun(link, plan_kill(snapshot, [DETOKENIZER_PID]), audit)
    with pytest.raises(StoreError, match="not a folder"):
        run.start()
    assert [cmd for cmd, _ in link.seen] == ["sample"]


class _EndlessHost:
    """A collector that is not gputui's: every answer names thousands of pids never asked, with escapes in
    their names, and says it is not done, for ever."""

    def __init__(self, asked: int) -> None:
        self.asked = asked
        self.requests = 0

    def request(self, command: dict[str, object], timeout_s: float) -> dict[str, object]:
        self.requests += 1
        junk = [
            {"pid": 100000 + i, "name": "\x1b[31mkilled", "stage": "signal", "result": "killed"}
            for i in range(2000)
        ]
        mine = {"pid": self.asked, "stage": "signal", "signal": "TERM", "result": "signalled"}
        return {
            "op": 7,
            "outcomes": [mine, *junk],
            "count": 2001 * self.requests,
            "done": False,
            "pending": [{"pid": 100001, "due_in_s": 1.0}, {"pid": self.asked, "due_in_s": 1.0}],
        }


@pytest.mark.parametrize("tree", [False, True])
def test_a_collector_that_answers_for_ever_with_unasked_pids_is_held_to_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tree: bool
) -> None:
    from gputui.core.actions import run as run_module

    monkeypatch.setattr(run_module, "FINISH_MARGIN_S", 0.3)
    sim = SimLink("gpu-node-07", LinkOptions(memory_interval_s=0.01), clock=ManualClock())
    sim.open()
    snapshot = HostSnapshot.from_dict(sim.request({"cmd": "sample"}, 1)["snapshot"])
    plan = plan_kill(snapshot, [DETOKENIZER_PID], tree=tree)
    audit = AuditLog(tmp_path / "gputui")
    hostile = _EndlessHost(DETOKENIZER_PID)
    run = KillRun(hostile, plan, audit)  # type: ignore[arg-type]
    run.start()

    def wait_until_done() -> None:
        for _ in range(10_000):
            run.wait(0.05)
            time.sleep(0.01)

    with pytest.raises(LinkError, match="did not finish the kill within"):
        wait_until_done()
    assert run.done
    # Each pid once per stage; a kill of one process believes no other pid, a tree kill a bounded few (the
    # members it may have found since the listing): the audit log and the screen stay bounded.
    unasked = run_module.UNASKED_MAX if tree else 0
    assert (DETOKENIZER_PID, "signal") == (run.outcomes[0].pid, run.outcomes[0].stage)
    assert len(run.outcomes) == 1 + unasked
    assert len({(o.pid, o.stage) for o in run.outcomes}) == len(run.outcomes)
    assert DETOKENIZER_PID in [p.pid for p in run.pending]
    assert len(run.pending) <= 2
    assert run.ignored >= 2000 * hostile.requests - unasked
    lines = audit.path.read_text().splitlines()
    assert len(lines) < 2 + unasked + 10, len(lines)
    assert ("100001" in audit.path.read_text()) is tree
    assert "did not finish the kill" in lines[-1]


def test_an_abandoned_run_says_what_it_left(tmp_path: Path) -> None:
    link = SimLink("gpu-node-07", LinkOptions(memory_interval_s=0.01), clock=ManualClock())
    link.open()
    snapshot = HostSnapshot.from_dict(link.request({"cmd": "sample"}, 1)["snapshot"])
    run = KillRun(link, plan_kill(snapshot, [LAUNCHER_PID], tree=True, escalate_s=60.0), None)
    run.start()
    run.abandon()
    assert run.done
    assert [(o.pid, o.result) for o in run.left] == [(DETOKENIZER_PID, "abandoned")]


def test_a_plan_records_the_jobs_ports_from_port_options_and_listeners() -> None:
    snapshot = host()
    procs = {p.pid: p for p in snapshot.processes}
    procs[100] = replace(procs[100], cmdline=("python3", "-m", "sglang.launch_server", "--port", "30000"))
    worker_argv = ("python3", "--port=31000", "--port=31001")
    procs[101] = replace(procs[101], cmdline=worker_argv, listen_ports=(5557,))
    procs[300] = replace(procs[300], cmdline=("orphan", "--port", "40000"), listen_ports=(40001,))
    snapshot = replace(snapshot, processes=tuple(procs.values()))
    plan = plan_kill(snapshot, [100], tree=True)
    # argparse's reading: the last --port counts; the orphan outside the tree is not the job's.
    assert plan.ports == (5557, 30000, 31001)
    bad = replace(
        snapshot,
        processes=tuple(
            replace(p, cmdline=("python3", "--port", "99999")) if p.pid == 100 else p
            for p in snapshot.processes
        ),
    )
    assert plan_kill(bad, [100]).ports == ()  # not a port: nothing to wait for
