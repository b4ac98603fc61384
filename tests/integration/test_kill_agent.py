"""The agent's kill command against real processes (RELIABILITY 13-18, 20).

The agent runs in a subprocess started the way SSH starts it; targets are real children of this test
process, each in its own session so the agent's own-session/own-group refusal does not apply to them.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from tests.integration._procs import (
    SLEEPER,
    TERM_IGNORER,
    TREE,
    ZOMBIE_MAKER,
    Binary,
    agent_process,
    build_vfork_waiter,
    is_gone,
    script,
    start_ticks,
    state_of,
    wait_for,
)

SYSTEM_PYTHON = "/usr/bin/python3"
"""A Python any user can run (the test venv may live under a private home)."""
OTHER_UID = 65534  # nobody
AGENT_UID = 65533  # an unprivileged uid that is not nobody


def kill(agent, targets, **options):
    command = {
        "cmd": "kill",
        "boot_id": agent.hello["boot_id"],
        "signal": "TERM",
        "tree": False,
        "escalate_s": None,
        "targets": targets,
    }
    command.update(options)
    return agent.result(command)["outcomes"]


def target(pid: int) -> dict[str, int]:
    return {"pid": pid, "start_ticks": start_ticks(pid)}


def test_term_is_sent_and_the_process_exits() -> None:
    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process() as agent:
        pid = sleeper.pids["sleeper"]
        ticks = start_ticks(pid)
        outcomes = kill(agent, [target(pid)])
        assert [(o["pid"], o["start_ticks"], o["stage"], o["signal"], o["result"]) for o in outcomes] == [
            (pid, ticks, "signal", "TERM", "sent")
        ]
        assert outcomes[0]["cmdline"] == sleeper.argv  # read before the signal, as an argv list
        assert outcomes[0]["user"] == pwd.getpwuid(os.geteuid()).pw_name
        wait_for(lambda: is_gone(pid), "the sleeper to die of TERM")


def test_identity_mismatch_is_refused_as_changed_and_nothing_is_signalled() -> None:
    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process() as agent:
        pid = sleeper.pids["sleeper"]
        outcomes = kill(agent, [{"pid": pid, "start_ticks": start_ticks(pid) + 1}])
        assert [o["result"] for o in outcomes] == ["changed"]
        assert "process changed" in outcomes[0]["detail"]
        assert state_of(pid) == "S"


def test_other_boot_id_is_refused_as_changed() -> None:
    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process() as agent:
        pid = sleeper.pids["sleeper"]
        outcomes = kill(agent, [target(pid)], boot_id="00000000-0000-0000-0000-000000000000")
        assert [o["result"] for o in outcomes] == ["changed"]
        assert "boot id" in outcomes[0]["detail"]
        assert state_of(pid) == "S"


def test_gone_process_is_reported_gone() -> None:
    with script(SLEEPER, ["sleeper"]) as sleeper:
        pid = sleeper.pids["sleeper"]
        ticks = start_ticks(pid)
    with agent_process() as agent:
        outcomes = kill(agent, [{"pid": pid, "start_ticks": ticks}])
        assert [o["result"] for o in outcomes] in (["gone"], ["changed"])  # "changed" only if pid was reused


def test_pid_1_the_agent_and_its_ancestors_are_refused() -> None:
    with agent_process() as agent:
        agent_pid = agent.hello["pid"]
        protected = [1, agent_pid, os.getpid()]  # this test process is the agent's parent
        # No tree here: a regression would make the tree of pid 1 the whole host.
        outcomes = kill(agent, [target(p) for p in protected], signal="TERM")
        by_pid = {o["pid"]: o for o in outcomes}
        assert set(by_pid) == set(protected)
        assert all(o["result"] == "refused" for o in outcomes), outcomes
        assert "pid 1" in by_pid[1]["detail"]
        assert "collector itself" in by_pid[agent_pid]["detail"]
        assert "ancestor" in by_pid[os.getpid()]["detail"]
        assert agent.proc.poll() is None  # still alive and answering
        assert agent.sample()["agent_pid"] == agent_pid


def test_a_refused_tree_root_is_never_expanded() -> None:
    # The tree of this test process (the agent's parent) holds the sleeper: it must not be reached.
    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process() as agent:
        outcomes = kill(agent, [target(os.getpid())], tree=True)
        assert [(o["pid"], o["result"]) for o in outcomes] == [(os.getpid(), "refused")]
        assert state_of(sleeper.pids["sleeper"]) == "S"


def test_a_sibling_in_the_agents_process_group_can_be_killed() -> None:
    # A script without job control: `server &` then `gputui kill --all-gpu --yes | tee` puts the server, the
    # script's gputui and tee in one process group. Only gputui and its ancestors are spared.
    with (
        script(SLEEPER, ["sleeper"], new_session=False) as sibling,
        agent_process(new_session=False) as agent,
    ):
        pid = sibling.pids["sleeper"]
        assert os.getpgid(pid) == os.getpgid(agent.proc.pid)
        outcomes = kill(agent, [target(pid)], signal="KILL")
        assert outcomes[0]["result"] != "refused", outcomes
        wait_for(lambda: state_of(pid) in (None, "Z"), "the sibling to die")
        refused = kill(agent, [target(os.getpid())], signal="TERM")  # the agent's parent: never
        assert [o["result"] for o in refused] == ["refused"]


def test_a_job_of_the_agents_session_in_its_own_group_can_be_killed() -> None:
    # `python -m sglang.launch_server ... &` from the shell that later runs gputui: same session, its own
    # process group (job control). It is not gputui's ancestor, so it is the user's to kill.
    with (
        script(SLEEPER, ["sleeper"], new_session=False, new_group=True) as job,
        agent_process(new_session=False) as agent,
    ):
        pid = job.pids["sleeper"]
        assert os.getsid(pid) == os.getsid(0)
        assert os.getpgid(pid) != os.getpgid(0)
        outcomes = kill(agent, [target(pid)], signal="KILL")
        assert [o["result"] for o in outcomes] == ["sent"]
        wait_for(lambda: state_of(pid) in (None, "Z"), "the job to die")


def test_zombie_is_refused_naming_its_parent() -> None:
    with script(ZOMBIE_MAKER, ["parent", "zombie"]) as maker, agent_process() as agent:
        parent, zombie = maker.pids["parent"], maker.pids["zombie"]
        wait_for(lambda: state_of(zombie) == "Z", "the child to become a zombie")
        outcomes = kill(agent, [target(zombie)], signal="KILL")
        assert [o["result"] for o in outcomes] == ["refused"]
        assert outcomes[0]["detail"].startswith(f"zombie: cannot be killed; signal its parent {parent} (")
        assert state_of(parent) == "S"  # the parent was not touched


def test_tree_kill_signals_children_first_including_a_double_forked_grandchild() -> None:
    with script(TREE, ["root", "A", "B", "G"]) as tree, agent_process() as agent:
        root, a, g = tree.pids["root"], tree.pids["A"], tree.pids["G"]
        wait_for(lambda: is_gone(tree.pids["B"]), "the middle parent to be reaped")
        assert proc_ppid(g) != root  # reparented: only the process group ties it to the tree
        ticks = {p: start_ticks(p) for p in (root, a, g)}
        outcomes = kill(agent, [target(root)], tree=True)
        signalled = [o["pid"] for o in outcomes if o["stage"] == "signal"]
        assert sorted(signalled) == sorted([root, a, g]), outcomes
        assert signalled[-1] == root  # the root last, after all its descendants
        assert all(o["result"] == "sent" for o in outcomes), outcomes
        for pid in (root, a, g):
            wait_for(lambda pid=pid: is_gone(pid, ticks[pid]), f"pid {pid} to die")


def proc_ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def test_term_ignoring_process_is_escalated_to_kill_with_each_stage_reported() -> None:
    with script(TERM_IGNORER, ["ignorer"]) as ignorer, agent_process() as agent:
        pid = ignorer.pids["ignorer"]
        ticks = start_ticks(pid)
        outcomes = kill(agent, [target(pid)], escalate_s=0.5)
        stages = [(o["stage"], o["signal"], o["result"]) for o in outcomes]
        assert stages == [
            ("signal", "TERM", "sent"),
            ("escalate", "KILL", "sent"),
            ("confirm", "KILL", "killed"),
        ]
        assert all(o["pid"] == pid and o["start_ticks"] == ticks for o in outcomes)
        assert is_gone(pid, ticks)


def test_escalation_reports_exited_when_term_was_enough() -> None:
    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process() as agent:
        pid = sleeper.pids["sleeper"]
        outcomes = kill(agent, [target(pid)], escalate_s=20.0)
        assert [(o["stage"], o["result"]) for o in outcomes] == [("signal", "sent"), ("wait", "exited")]


def test_kill_with_a_deadline_reports_exited() -> None:
    with script(TERM_IGNORER, ["ignorer"]) as ignorer, agent_process() as agent:
        pid = ignorer.pids["ignorer"]
        outcomes = kill(agent, [target(pid)], signal="KILL", escalate_s=20.0)
        assert [(o["stage"], o["signal"], o["result"]) for o in outcomes] == [
            ("signal", "KILL", "sent"),
            ("wait", None, "exited"),
        ]


def test_a_bare_pid_without_start_time_is_refused_while_the_rest_proceeds() -> None:
    with (
        script(SLEEPER, ["sleeper"]) as bare,
        script(SLEEPER, ["sleeper"]) as checked,
        agent_process() as agent,
    ):
        bare_pid, checked_pid = bare.pids["sleeper"], checked.pids["sleeper"]
        outcomes = kill(agent, [{"pid": bare_pid}, target(checked_pid)])
        by_pid = {o["pid"]: o for o in outcomes}
        assert by_pid[bare_pid]["result"] == "refused"
        assert "start time" in by_pid[bare_pid]["detail"]
        assert by_pid[checked_pid]["result"] == "sent"
        assert state_of(bare_pid) == "S"


def test_read_only_agent_refuses_every_kill() -> None:
    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process("--read-only") as agent:
        pid = sleeper.pids["sleeper"]
        outcomes = kill(agent, [target(pid)], signal="KILL")
        assert [o["result"] for o in outcomes] == ["refused"]
        assert "read-only" in outcomes[0]["detail"]
        assert state_of(pid) == "S"


def test_malformed_kill_commands_get_one_line_errors() -> None:
    with agent_process() as agent:
        for bad in (
            {"cmd": "kill", "targets": []},
            {"cmd": "kill", "targets": [{"pid": "1; rm -rf ~"}]},
            {"cmd": "kill", "targets": [{"pid": 12345, "start_ticks": "soon"}]},
            {"cmd": "kill", "targets": [{"pid": 1, "start_ticks": 1}], "signal": "HUP"},
            {"cmd": "kill", "targets": [{"pid": 1, "start_ticks": 1}], "escalate_s": -1},
            {"cmd": "no-such-command"},
        ):
            reply = agent.send(bad)
            assert reply["ok"] is False
            assert reply["error"]
            assert "\n" not in reply["error"]
        assert agent.proc.poll() is None


def foreign_root_process() -> int:
    """A process of another user (root) that is neither pid 1 nor an ancestor of this test."""
    mine = set()
    pid = os.getpid()
    while pid > 1:
        mine.add(pid)
        pid = proc_ppid(pid)
    for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
        if name.isdigit() and int(name) not in mine and int(name) != 1:
            try:
                if os.stat(f"/proc/{name}").st_uid == 0 and state_of(int(name)) not in (None, "Z"):
                    return int(name)
            except OSError:
                continue
    raise AssertionError("no process of another user (root) found on this host to be denied")


def test_another_users_process_is_denied_while_the_rest_of_the_batch_proceeds() -> None:
    """The agent runs unprivileged; one target belongs to another user, the other to the agent's own uid.

    As root the test makes that situation: the agent drops to AGENT_UID, the foreign target runs as nobody.
    Unprivileged, the agent runs as this user and the foreign target is an existing root process (TERM to
    it is refused by the kernel with EPERM, so nothing is delivered).
    """
    if os.geteuid() == 0:
        with (
            script(SLEEPER, ["sleeper"], python=SYSTEM_PYTHON, user=OTHER_UID) as foreign,
            script(SLEEPER, ["sleeper"], python=SYSTEM_PYTHON, user=AGENT_UID) as own,
            agent_process(python=SYSTEM_PYTHON, user=AGENT_UID) as agent,
        ):
            assert pwd.getpwuid(OTHER_UID).pw_uid == OTHER_UID
            check_denied_and_proceeds(agent, foreign.pids["sleeper"], own.pids["sleeper"])
    else:
        with script(SLEEPER, ["sleeper"]) as own, agent_process() as agent:
            check_denied_and_proceeds(agent, foreign_root_process(), own.pids["sleeper"])


def check_denied_and_proceeds(agent, foreign_pid: int, own_pid: int) -> None:
    foreign_state = state_of(foreign_pid)
    outcomes = kill(agent, [target(foreign_pid), target(own_pid)])
    by_pid = {o["pid"]: o for o in outcomes}
    assert by_pid[foreign_pid]["result"] == "denied", outcomes
    assert "permission denied" in by_pid[foreign_pid]["detail"]
    assert by_pid[own_pid]["result"] == "sent"
    wait_for(lambda: is_gone(own_pid), "the agent user's own process to die")
    assert state_of(foreign_pid) == foreign_state


def test_d_state_target_is_signalled_and_reported_as_uninterruptible(tmp_path: Path) -> None:
    waiter = Binary(build_vfork_waiter(tmp_path), ["waiter"])
    try:
        pid = waiter.pids["waiter"]
        wait_for(lambda: state_of(pid) == "D", "the vfork parent to wait in state D")
        with agent_process() as agent:
            outcomes = kill(agent, [target(pid)], signal="KILL")
        assert [(o["stage"], o["result"]) for o in outcomes] == [("signal", "sent")]
        assert "uninterruptible" in outcomes[0]["detail"]
        # This D state is killable (a vfork wait), so KILL does end it; a disk wait would not.
        wait_for(lambda: is_gone(pid), "the vfork parent to die of KILL")
    finally:
        waiter.kill()


def test_members_listed_with_the_plan_are_signalled_when_their_root_died_meanwhile() -> None:
    """The confirmation listed root, A and G; the root exits before the command arrives, init adopts A. The
    plan's members travel with the command: A and G are signalled all the same, the root is gone."""
    with script(TREE, ["root", "A", "B", "G"]) as tree, agent_process() as agent:
        root, a, g = tree.pids["root"], tree.pids["A"], tree.pids["G"]
        wait_for(lambda: is_gone(tree.pids["B"]), "the middle parent to be reaped")
        ticks = {p: start_ticks(p) for p in (root, a, g)}
        os.kill(root, 9)
        tree.proc.wait(timeout=10)  # reaped: gone for good, its children adopted by init
        wait_for(lambda: proc_ppid(a) != root, "init to adopt A")
        members = [{"pid": p, "start_ticks": ticks[p]} for p in (a, g)]
        outcomes = kill(agent, [{"pid": root, "start_ticks": ticks[root]}], tree=True, members=members)
        finals = {o["pid"]: (o["stage"], o["result"]) for o in outcomes}
        assert finals == {root: ("check", "gone"), a: ("signal", "sent"), g: ("signal", "sent")}
        for pid in (a, g):
            wait_for(lambda pid=pid: is_gone(pid, ticks[pid]), f"pid {pid} to die")
        # Without a tree, members mean nothing: only the targets are looked at.
        alone = kill(agent, [{"pid": root, "start_ticks": ticks[root]}], members=members)
        assert [o["pid"] for o in alone] == [root]


def test_a_process_that_moved_to_another_owner_since_the_listing_is_refused_as_changed() -> None:
    """RELIABILITY 49: the plan listed the process under one owner; at the signal it belongs to another (here
    the listing says a container, the process is the test's own): refused as changed, never signalled. Held
    to the owner it really has, it is signalled."""
    from gputui.agent.proc.owners import OwnerReader

    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process() as agent:
        pid = sleeper.pids["sleeper"]
        elsewhere = {"kind": "container", "id": "f" * 64}
        outcomes = kill(agent, [dict(target(pid), owner=elsewhere)])
        assert [o["result"] for o in outcomes] == ["changed"]
        assert "belongs to another owner" in outcomes[0]["detail"]
        assert state_of(pid) == "S"
        real = OwnerReader().owner(pid, start_ticks(pid), None, None)
        outcomes = kill(agent, [dict(target(pid), owner={"kind": real["kind"], "id": real.get("id")})])
        assert [o["result"] for o in outcomes] == ["sent"]
        wait_for(lambda: is_gone(pid), "the sleeper to die of TERM")
