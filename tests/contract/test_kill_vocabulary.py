"""The same kill against the real collector on real processes and against the simulator: one vocabulary.

A tree kill with escalation that also names pid 1, over a launcher with a defunct child (a real zombie) and a
TERM-ignoring child. The collector runs as SSH runs it, on the oldest Python it supports when one is
installed; the simulator is the ``--demo`` host. Both must report
the same stages, signals and results for the same roles, in replies of the same shape, from the names in the
collector's kill vocabulary block; and the UI's summary of either must read the same.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

import pytest

from gputui import agent
from gputui.core.actions import parse_outcomes
from gputui.transports.base import LinkOptions
from gputui.transports.sim import DETOKENIZER_PID, LAUNCHER_PID, SCHEDULER_PID_BASE, ManualClock, SimLink
from gputui.ui.killflow import outcome_summary
from tests.integration._procs import agent_process, start_ticks
from tests.integration.procs import Worker, launcher

pytestmark = pytest.mark.timeout(120)

ESCALATE_S = 3.0
"""Longer than init takes to reap the launcher's orphaned zombie (some container inits reap every ~2 s), so
the zombie is reaped within the wait stage on both sides."""
ROLES = ("init", "launcher", "zombie", "ignorer")


def _oldest_python() -> str:
    found = sorted(glob.glob("/root/.pyenv/versions/3.8*/bin/python3.8") + glob.glob("/usr/bin/python3.8"))
    return next((p for p in found if os.access(p, os.X_OK)), sys.executable)


def _command(boot_id: str | None, targets: list[dict[str, Any]], detach: bool) -> dict[str, Any]:
    return {"cmd": agent.KILL_COMMAND, "boot_id": boot_id, "signal": "TERM", "tree": True,
            "escalate_s": ESCALATE_S, "detach": detach, "targets": targets}


def _wait(since: int, op: int) -> dict[str, Any]:
    return {"cmd": agent.KILL_WAIT_COMMAND, "op": op, "since": since, "timeout_s": 10}


def _by_role(outcomes: list[dict[str, Any]], pids: dict[str, int]) -> dict[str, list[tuple[Any, ...]]]:
    roles = {pid: role for role, pid in pids.items()}
    found: dict[str, list[tuple[Any, ...]]] = {}
    for outcome in outcomes:
        if outcome["pid"] in roles:
            found.setdefault(roles[outcome["pid"]], []).append(
                (outcome["stage"], outcome["signal"], outcome["result"])
            )
    return found


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    """The real collector's replies (detached kill, then kill_wait) and the pids of each role."""
    workers = [Worker("scheduler_TP0", mode="exit"), Worker("detokenizer", mode="ignore_term")]
    with launcher(workers) as server, agent_process(python=_oldest_python()) as collector:
        pids = {"init": 1, "launcher": server.pid, "zombie": server["scheduler_TP0"],
                "ignorer": server["detokenizer"]}
        targets = [{"pid": 1, "start_ticks": start_ticks(1)},
                   {"pid": server.pid, "start_ticks": start_ticks(server.pid)}]
        first = collector.result(_command(collector.hello["boot_id"], targets, detach=True))
        rest = collector.result(_wait(first["count"], first["op"]))
    return {"first": first, "rest": rest, "pids": pids}


@pytest.fixture(scope="module")
def simulated() -> dict[str, Any]:
    link = SimLink("gpu-node-07", LinkOptions(memory_interval_s=0.01), clock=ManualClock())
    link.open()
    ticks = link.request({"cmd": "sample"}, 1)["snapshot"]["processes"]
    launcher_ticks = next(p["start_ticks"] for p in ticks if p["pid"] == LAUNCHER_PID)
    targets = [{"pid": 1, "start_ticks": 1}, {"pid": LAUNCHER_PID, "start_ticks": launcher_ticks}]
    first = link.request(_command(link.boot_id, targets, detach=True), 5)
    rest = link.request(_wait(first["count"], first["op"]), 15)
    pids = {"init": 1, "launcher": LAUNCHER_PID, "zombie": SCHEDULER_PID_BASE, "ignorer": DETOKENIZER_PID}
    return {"first": first, "rest": rest, "pids": pids}


def test_each_role_goes_through_the_same_stages(real: dict[str, Any], simulated: dict[str, Any]) -> None:
    real_roles = _by_role(real["first"]["outcomes"] + real["rest"]["outcomes"], real["pids"])
    sim_roles = _by_role(simulated["first"]["outcomes"] + simulated["rest"]["outcomes"], simulated["pids"])
    assert real_roles == sim_roles
    assert real_roles == {
        "init": [("check", None, "refused")],
        "launcher": [("signal", "TERM", "sent"), ("wait", None, "exited")],
        "zombie": [("wait", None, "reaped")],
        "ignorer": [("signal", "TERM", "sent"), ("escalate", "KILL", "sent"), ("confirm", "KILL", "killed")],
    }


def test_the_first_answer_says_what_is_pending_the_same_way(
    real: dict[str, Any], simulated: dict[str, Any]
) -> None:
    for side in (real, simulated):
        first, rest = side["first"], side["rest"]
        assert set(first) == set(rest) == {
            "op", "outcomes", "count", "done", "pending", "escalate_s", "wait_s", "elapsed_s"
        }
        assert first["done"] is False
        assert rest["done"] is True
        (pending,) = first["pending"]
        assert set(pending) == {"pid", "start_ticks", "name", "signal", "due_in_s"}
        assert (pending["pid"], pending["signal"]) == (side["pids"]["ignorer"], "KILL")
        assert 0 < pending["due_in_s"] <= ESCALATE_S
        assert rest["count"] == first["count"] + len(rest["outcomes"])


def test_every_name_comes_from_the_vocabulary_and_details_agree(
    real: dict[str, Any], simulated: dict[str, Any]
) -> None:
    details = {}
    for side in (real, simulated):
        outcomes = side["first"]["outcomes"] + side["rest"]["outcomes"]
        assert {o["stage"] for o in outcomes} <= set(agent.KILL_STAGES)
        assert {o["result"] for o in outcomes} <= set(agent.KILL_RESULTS)
        assert {o["signal"] for o in outcomes} <= {None, "TERM", "KILL"}
        assert all(set(o) == set(outcomes[0]) for o in outcomes)
        by_pid = {(o["pid"], o["stage"]): o["detail"] for o in outcomes}
        pids = side["pids"]
        details[id(side)] = (
            by_pid[(pids["init"], "check")],
            by_pid[(pids["zombie"], "wait")].replace(str(pids["launcher"]), "LAUNCHER"),
            by_pid[(pids["ignorer"], "escalate")],
        )
    assert details[id(real)] == details[id(simulated)] == (
        "pid 1 (init) is never signalled",
        "reaped with its parent LAUNCHER",
        f"still alive after {ESCALATE_S:g} s: escalated",
    )


def test_the_ui_reads_both_the_same_and_never_says_none(
    real: dict[str, Any], simulated: dict[str, Any]
) -> None:
    from gputui.core.actions import KillPlan

    plan = KillPlan(target="t", boot_id=None, signal="TERM", tree=True, escalate_s=ESCALATE_S, targets=())
    kinds = []
    for side in (real, simulated):
        outcomes = parse_outcomes({"outcomes": side["first"]["outcomes"] + side["rest"]["outcomes"]})
        text, severity = outcome_summary(plan, outcomes)
        assert "None" not in text
        assert severity == "error"  # pid 1 was refused
        kinds.append(sorted(line.split(":", 1)[0] for line in text.splitlines()))
    assert kinds[0] == kinds[1] == ["exited", "killed (KILL)", "reaped", "refused"]
