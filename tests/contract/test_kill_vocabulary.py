"""The real collector and the simulator through the same operations: one vocabulary, one shape of every
message.

The collector runs as SSH runs it (its bundle on stdin) on Python 3.8, the oldest it supports, over the fake
NVML and real processes: a launcher with a defunct child (a real zombie) and a TERM-ignoring child that holds
GPU memory. The simulator is the ``--demo`` host. Both are asked for a sample, for their health, and for a
tree kill with escalation that also names pid 1; both must answer with the names of ``gputui.agent.protocol``
in dicts of the same keys, which the client's model reads, and the UI's summary of either must read the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gputui.agent import protocol
from gputui.agent.kill import messages as kill_messages
from gputui.agent.servers import messages as endpoint_messages
from gputui.agent.wire import PROCESS_KEYS_LEFT_OUT_WHEN_EMPTY
from gputui.core.actions import parse_outcomes
from gputui.core.link import LinkOptions
from gputui.core.model import HostSnapshot, Proc, fields
from gputui.transports.sim import DETOKENIZER_PID, LAUNCHER_PID, SCHEDULER_PID_BASE, ManualClock, SimLink
from gputui.ui.session.killflow import outcome_summary
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import agent_process, start_ticks, wait_for
from tests.integration.httpserver import HttpPeer
from tests.integration.procs import Worker, launcher
from tests.interpreters import python38

pytestmark = pytest.mark.timeout(120)

ESCALATE_S = 3.0
"""Longer than init takes to reap the launcher's orphaned zombie (some container inits reap every ~2 s), so
the zombie is reaped within the wait stage on both sides."""
ROLES = ("init", "launcher", "zombie", "ignorer")


def _command(boot_id: str | None, targets: list[tuple[int, int | None]], detach: bool) -> dict[str, Any]:
    return kill_messages.kill_command(targets, [], boot_id, "TERM", True, ESCALATE_S, None, detach)


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
def real(fake_nvml_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The real collector's answers: a sample, its health, a detached kill and its kill_wait."""
    fake = FakeNvml(lib_dir=fake_nvml_lib, state_path=tmp_path_factory.mktemp("nvml") / "state")
    peer = HttpPeer()
    workers = [Worker("scheduler_TP0", mode="exit"), Worker("detokenizer", mode="ignore_term")]
    try:
        with launcher(workers) as server:
            fake.state.add_holder(0, server["detokenizer"], 2048)
            fake.write()
            url = peer.url("/status/503")
            args = ("--health", url, "--no-discover")
            with agent_process(*args, python=python38(), env=fake.env()) as collector:
                pids = {
                    "init": 1,
                    "launcher": server.pid,
                    "zombie": server["scheduler_TP0"],
                    "ignorer": server["detokenizer"],
                }
                wait_for(lambda: _probed(collector.result({"cmd": protocol.CMD_HEALTH})), "the first probe")
                health = collector.result({"cmd": protocol.CMD_HEALTH})
                sample = collector.result({"cmd": protocol.CMD_SAMPLE})["snapshot"]
                targets = [(1, start_ticks(1)), (server.pid, start_ticks(server.pid))]
                first = collector.result(_command(collector.hello["boot_id"], targets, detach=True))
                rest = collector.result(kill_messages.kill_wait_command(first["op"], first["count"], 10))
                hello = collector.hello
    finally:
        peer.close()
    return {"hello": hello, "sample": sample, "health": health, "first": first, "rest": rest, "pids": pids}


def _probed(health: dict[str, Any]) -> bool:
    return bool(health["samples"]) and all(s["state"] is not None for s in health["samples"])


@pytest.fixture(scope="module")
def simulated() -> dict[str, Any]:
    link = SimLink("gpu-node-07", LinkOptions(memory_interval_s=0.01), clock=ManualClock())
    link.open()
    sample = link.request({"cmd": protocol.CMD_SAMPLE}, 1)["snapshot"]
    health = link.request({"cmd": protocol.CMD_HEALTH}, 1)
    launcher_ticks = next(p["start_ticks"] for p in sample["processes"] if p["pid"] == LAUNCHER_PID)
    targets = [(1, 1), (LAUNCHER_PID, launcher_ticks)]
    first = link.request(_command(link.boot_id, targets, detach=True), 5)
    rest = link.request(kill_messages.kill_wait_command(first["op"], first["count"], 10), 15)
    pids = {"init": 1, "launcher": LAUNCHER_PID, "zombie": SCHEDULER_PID_BASE, "ignorer": DETOKENIZER_PID}
    return {"sample": sample, "health": health, "first": first, "rest": rest, "pids": pids}


def test_the_real_collector_runs_on_python38_with_nvml(real: dict[str, Any]) -> None:
    assert real["hello"]["python"].startswith("3.8.")
    assert real["hello"]["mode"] == protocol.MODE_NVML
    assert real["hello"]["protocol"] == protocol.PROTOCOL_VERSION


def test_a_sample_has_one_shape_and_the_model_reads_both(
    real: dict[str, Any], simulated: dict[str, Any]
) -> None:
    proc_fields = set(fields(Proc))
    for side in (real, simulated):
        sample = side["sample"]
        assert tuple(sample) == protocol.SNAPSHOT_FIELDS
        assert sample["mode"] in (protocol.MODE_NVML, protocol.MODE_SIM)
        always = proc_fields - set(PROCESS_KEYS_LEFT_OUT_WHEN_EMPTY)
        assert [set(p) - proc_fields for p in sample["processes"]] == [set()] * len(sample["processes"])
        assert [always - set(p) for p in sample["processes"]] == [set()] * len(sample["processes"])
        assert len(sample["gpus"]) == 8
        snapshot = HostSnapshot.from_dict(sample)
        assert snapshot.to_dict().keys() == sample.keys()
        assert any(proc.gpu_total_mib for proc in snapshot.processes)
        assert snapshot.process(side["pids"]["launcher"]) is not None


def test_health_has_one_vocabulary_and_shape(real: dict[str, Any], simulated: dict[str, Any]) -> None:
    configs = []
    for side in (real, simulated):
        health = side["health"]
        assert set(health) == {"config", "samples"}
        configs.append(set(health["config"]))
        for sample in health["samples"] + side["sample"]["health"]:
            assert tuple(sample) == endpoint_messages.ENDPOINT_SAMPLE_FIELDS
            assert sample["state"] in protocol.ENDPOINT_STATES
    assert configs[0] == configs[1]
    (probed,) = real["health"]["samples"]
    assert (probed["state"], probed["code"]) == (protocol.ENDPOINT_STATE_UNHEALTHY, 503)


def test_each_role_goes_through_the_same_stages(real: dict[str, Any], simulated: dict[str, Any]) -> None:
    real_roles = _by_role(real["first"]["outcomes"] + real["rest"]["outcomes"], real["pids"])
    sim_roles = _by_role(simulated["first"]["outcomes"] + simulated["rest"]["outcomes"], simulated["pids"])
    assert real_roles == sim_roles
    assert real_roles == {
        "init": [(protocol.STAGE_CHECK, None, protocol.RESULT_REFUSED)],
        "launcher": [
            (protocol.STAGE_SIGNAL, "TERM", protocol.RESULT_SENT),
            (protocol.STAGE_WAIT, None, protocol.RESULT_EXITED),
        ],
        "zombie": [(protocol.STAGE_WAIT, None, protocol.RESULT_REAPED)],
        "ignorer": [
            (protocol.STAGE_SIGNAL, "TERM", protocol.RESULT_SENT),
            (protocol.STAGE_ESCALATE, "KILL", protocol.RESULT_SENT),
            (protocol.STAGE_CONFIRM, "KILL", protocol.RESULT_KILLED),
        ],
    }


def test_the_first_answer_says_what_is_pending_the_same_way(
    real: dict[str, Any], simulated: dict[str, Any]
) -> None:
    for side in (real, simulated):
        first, rest = side["first"], side["rest"]
        assert tuple(first) == tuple(rest) == kill_messages.KILL_REPLY_FIELDS
        assert first["done"] is False
        assert rest["done"] is True
        # The ignorer is always pending; on a loaded machine the real launcher may not have finished exiting
        # by the first answer either, and is then pending in the same shape.
        by_pid = {entry["pid"]: entry for entry in first["pending"]}
        assert side["pids"]["ignorer"] in by_pid
        assert set(by_pid) <= {side["pids"]["ignorer"], side["pids"]["launcher"]}
        for entry in by_pid.values():
            assert tuple(entry) == ("pid", "start_ticks", "name", "signal", "due_in_s")
            assert entry["signal"] == "KILL"
            assert 0 < entry["due_in_s"] <= ESCALATE_S
        assert rest["count"] == first["count"] + len(rest["outcomes"])


def test_every_name_comes_from_the_protocol_and_details_agree(
    real: dict[str, Any], simulated: dict[str, Any]
) -> None:
    details = {}
    for side in (real, simulated):
        outcomes = side["first"]["outcomes"] + side["rest"]["outcomes"]
        assert {o["stage"] for o in outcomes} <= set(protocol.KILL_STAGES)
        assert {o["result"] for o in outcomes} <= set(protocol.KILL_RESULTS)
        assert {o["signal"] for o in outcomes} <= {None, *protocol.SIGNAL_NAMES}
        assert all(tuple(o) == kill_messages.OUTCOME_FIELDS for o in outcomes)
        by_pid = {(o["pid"], o["stage"]): o["detail"] for o in outcomes}
        pids = side["pids"]
        details[id(side)] = (
            by_pid[(pids["init"], protocol.STAGE_CHECK)],
            by_pid[(pids["zombie"], protocol.STAGE_WAIT)].replace(str(pids["launcher"]), "LAUNCHER"),
            by_pid[(pids["ignorer"], protocol.STAGE_ESCALATE)],
        )
    assert (
        details[id(real)]
        == details[id(simulated)]
        == (
            "pid 1 (init) is never signalled",
            "reaped with its parent LAUNCHER",
            f"still alive after {ESCALATE_S:g} s: escalated",
        )
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
