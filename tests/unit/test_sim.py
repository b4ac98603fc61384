"""The simulated hosts: deterministic story, the kill protocol, the drain back to the idle baseline."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import HostSnapshot, LiveThreads
from gputui.core.servers import parse_server_metrics
from gputui.core.text import visible
from gputui.transports.sim import (
    DETOKENIZER_PID,
    DRAIN_S,
    GPU_TOTAL_MIB,
    HOSTILE_TEXTS,
    IDLE_MIB,
    LAUNCHER_PID,
    NSYS_PID,
    SCHEDULER_PID_BASE,
    VLLM_PID,
    ManualClock,
    SimLink,
)


def _link(target: str = "gpu-node-07", **kwargs) -> tuple[SimLink, ManualClock]:
    clock = ManualClock()
    link = SimLink(target, LinkOptions(memory_interval_s=0.01), clock=clock, **kwargs)
    link.open()
    return link, clock


def _snap(link: SimLink) -> HostSnapshot:
    return HostSnapshot.from_dict(link.request({"cmd": "sample"}, timeout_s=1)["snapshot"])


def _kill(link: SimLink, snap: HostSnapshot, pids, **kwargs) -> list[dict]:
    targets = [{"pid": pid, "start_ticks": snap.process(pid).start_ticks} for pid in pids]
    command = {"cmd": "kill", "boot_id": snap.boot_id, "targets": targets, "signal": "TERM", **kwargs}
    return link.request(command, timeout_s=10)["outcomes"]


def test_wedged_host_matches_the_story():
    link, _ = _link()
    snap = link.next_snapshot(1.0)
    assert snap is not None
    assert len(snap.gpus) == 8
    assert {g.name for g in snap.gpus} == {"NVIDIA RTX PRO 6000 Blackwell"}
    assert {g.memory_total_mib for g in snap.gpus} == {GPU_TOTAL_MIB}
    # TP0 exited whole (a true zombie: its memory is back); the other seven are defunct leaders whose threads
    # are stuck in the driver, holding theirs.
    assert snap.gpus[0].memory_used_mib == IDLE_MIB
    assert all(40_000 < g.memory_used_mib < 42_000 for g in snap.gpus[1:])
    schedulers = [snap.process(SCHEDULER_PID_BASE + i) for i in range(8)]
    assert [p.name for p in schedulers] == [f"sglang::scheduler_TP{i}" for i in range(8)]
    assert all(p.state == "Z" and p.ppid == LAUNCHER_PID for p in schedulers)
    assert [p.is_defunct_leader for p in schedulers] == [False] + [True] * 7
    assert schedulers[0].live_threads == LiveThreads(0)
    assert schedulers[1].live_threads == LiveThreads(2, {"D": 2})
    assert schedulers[0].gpu_memory_mib == {}
    launcher = snap.process(LAUNCHER_PID)
    assert launcher.cmdline[:3] == ("python3", "-m", "sglang.launch_server")
    assert "--tp" in launcher.cmdline
    assert launcher.ppid == NSYS_PID
    assert snap.process(NSYS_PID).name == "nsys"
    assert snap.endpoints[0].code == 503
    # Its metrics: requests pending, the token counter flat.
    reading = parse_server_metrics(snap.endpoints[0].metrics_text or "", 1.0)
    assert (reading.engine, reading.running, reading.waiting) == ("sglang", 8, 5)


def test_snapshots_are_deterministic_under_a_frozen_clock():
    first, _ = _link()
    second, _ = _link()
    assert _snap(first).to_json() == _snap(second).to_json()


def test_serves_then_wedges_on_the_scenario_clock():
    link, clock = _link(wedged_at_s=5.0)
    serving = _snap(link)
    assert all(serving.process(SCHEDULER_PID_BASE + i).state != "Z" for i in range(8))
    assert serving.endpoints[0].state == "UP"
    clock.advance(5.0)
    wedged = _snap(link)
    assert all(wedged.process(SCHEDULER_PID_BASE + i).state == "Z" for i in range(8))
    assert wedged.endpoints[0].state == "UNHEALTHY"
    # Memory stays held by the defunct schedulers.
    assert [g.memory_used_mib for g in wedged.gpus] == [g.memory_used_mib for g in serving.gpus]


def test_zombie_kill_is_refused_and_names_the_parent_but_a_defunct_leader_is_signalled():
    link, _ = _link()
    snap = _snap(link)
    [outcome] = _kill(link, snap, [SCHEDULER_PID_BASE])
    assert outcome["result"] == "refused"
    assert str(LAUNCHER_PID) in outcome["detail"]
    [outcome] = _kill(link, snap, [SCHEDULER_PID_BASE + 3])
    assert outcome["result"] == "sent"
    assert _snap(link).process(SCHEDULER_PID_BASE + 3) is None


def test_killing_the_launcher_frees_nothing_of_the_defunct_leaders_killing_them_drains_it():
    link, clock = _link()
    snap = _snap(link)
    outcomes = _kill(link, snap, [LAUNCHER_PID], wait_s=0.5)
    assert [(o["stage"], o["result"]) for o in outcomes] == [("signal", "sent"), ("wait", "exited")]
    after = _snap(link)
    assert after.process(LAUNCHER_PID) is None
    assert after.process(SCHEDULER_PID_BASE) is None  # the true zombie, reaped with its parent
    leaders = [after.process(SCHEDULER_PID_BASE + i) for i in range(1, 8)]
    assert all(p is not None and p.is_defunct_leader and p.ppid == 1 for p in leaders)
    # The hung detokenizer ignored nothing here (not signalled): it is orphaned to init.
    assert after.process(DETOKENIZER_PID).ppid == 1
    clock.advance(DRAIN_S * 2)
    assert all(g.memory_used_mib > 40_000 for g in _snap(link).gpus[1:])  # the parent freed nothing
    _kill(link, _snap(link), [SCHEDULER_PID_BASE + i for i in range(1, 8)], wait_s=0.5)
    gone = _snap(link)
    assert all(g.memory_used_mib > 40_000 for g in gone.gpus[1:])
    assert all(g.processes == () for g in gone.gpus)
    clock.advance(DRAIN_S / 2)
    half = _snap(link)
    assert all(IDLE_MIB < g.memory_used_mib < 40_000 for g in half.gpus[1:])
    clock.advance(DRAIN_S)
    assert [g.memory_used_mib for g in _snap(link).gpus] == [IDLE_MIB] * 8


def test_tree_kill_signals_children_first_and_escalates_the_term_ignorer():
    link, _ = _link()
    snap = _snap(link)
    outcomes = _kill(link, snap, [LAUNCHER_PID], tree=True, escalate_s=0.05)
    by_pid = {o["pid"]: o for o in outcomes}
    order = [o["pid"] for o in outcomes]
    assert by_pid[DETOKENIZER_PID]["result"] == "killed"
    assert by_pid[DETOKENIZER_PID]["signal"] == "KILL"
    assert by_pid[LAUNCHER_PID]["result"] == "exited"
    # The true zombie is not signalled: it is reaped with the launcher. The defunct leaders are signalled.
    zombie = by_pid[SCHEDULER_PID_BASE]
    assert (zombie["stage"], zombie["signal"], zombie["result"]) == ("wait", None, "reaped")
    assert zombie["detail"] == f"reaped with its parent {LAUNCHER_PID}"
    for i in range(1, 8):
        signalled = [o["result"] for o in outcomes if o["pid"] == SCHEDULER_PID_BASE + i]
        assert signalled == ["sent", "exited"]
    assert order.index(DETOKENIZER_PID) < order.index(LAUNCHER_PID)  # children are signalled first
    stages = [(o["pid"], o["stage"]) for o in outcomes]
    assert stages.index((LAUNCHER_PID, "wait")) < stages.index((DETOKENIZER_PID, "escalate"))
    after = _snap(link)
    assert {p.pid for p in after.processes} == {NSYS_PID}


def test_without_escalation_a_term_ignorer_is_reported_still_running():
    link, _ = _link()
    snap = _snap(link)
    [outcome] = _kill(link, snap, [DETOKENIZER_PID])
    assert outcome["result"] == "sent"
    assert _snap(link).process(DETOKENIZER_PID) is not None
    # With a wait, the agent says after it that the process is still there.
    outcomes = _kill(link, _snap(link), [DETOKENIZER_PID], wait_s=0.05)
    assert [(o["stage"], o["signal"], o["result"]) for o in outcomes] == [
        ("signal", "TERM", "sent"),
        ("wait", None, "still_alive"),
    ]
    assert outcomes[-1]["detail"] == "still alive 0.05 s after TERM"


def _detached_tree_kill(link: SimLink, escalate_s: float) -> dict:
    """The launcher's tree, TERM then KILL after ``escalate_s``; the first answer, right after the signals."""
    snap = _snap(link)
    launcher = {"pid": LAUNCHER_PID, "start_ticks": snap.process(LAUNCHER_PID).start_ticks}
    command = {
        "cmd": "kill",
        "boot_id": snap.boot_id,
        "signal": "TERM",
        "tree": True,
        "escalate_s": escalate_s,
        "detach": True,
        "targets": [launcher],
    }
    return link.request(command, 5)


def test_a_detached_kill_reports_pending_escalation_then_the_rest():
    link, _ = _link()
    first = _detached_tree_kill(link, 0.3)
    assert first["done"] is False
    assert [(p["pid"], p["signal"]) for p in first["pending"]] == [(DETOKENIZER_PID, "KILL")]
    assert 0 < first["pending"][0]["due_in_s"] <= 0.3
    assert {o["stage"] for o in first["outcomes"]} == {"signal"}
    rest = link.request({"cmd": "kill_wait", "op": first["op"], "since": first["count"], "timeout_s": 5}, 10)
    assert rest["done"] is True
    assert rest["pending"] == []
    tail = [(o["pid"], o["stage"], o["result"]) for o in rest["outcomes"] if o["pid"] == DETOKENIZER_PID]
    assert tail == [(DETOKENIZER_PID, "escalate", "sent"), (DETOKENIZER_PID, "confirm", "killed")]
    assert rest["count"] == first["count"] + len(rest["outcomes"])


def test_an_abandoned_escalation_leaves_the_term_ignorer_and_says_so():
    link, _ = _link()
    first = _detached_tree_kill(link, 30.0)
    left = link.request({"cmd": "kill_abandon", "op": first["op"], "since": first["count"]}, 5)
    assert left["done"] is True
    final = {o["pid"]: o for o in left["outcomes"]}
    assert (final[DETOKENIZER_PID]["stage"], final[DETOKENIZER_PID]["result"]) == ("abandon", "abandoned")
    assert "KILL not sent" in final[DETOKENIZER_PID]["detail"]
    assert _snap(link).process(DETOKENIZER_PID) is not None


def test_identity_checks_refuse_changed_processes():
    link, _ = _link()
    snap = _snap(link)
    command = {
        "cmd": "kill",
        "boot_id": snap.boot_id,
        "signal": "KILL",
        "targets": [{"pid": LAUNCHER_PID, "start_ticks": 1}],
    }
    assert link.request(command, 1)["outcomes"][0]["result"] == "changed"
    command = {
        "cmd": "kill",
        "boot_id": "another-boot",
        "signal": "KILL",
        "targets": [{"pid": LAUNCHER_PID, "start_ticks": snap.process(LAUNCHER_PID).start_ticks}],
    }
    assert link.request(command, 1)["outcomes"][0]["result"] == "changed"
    command = {"cmd": "kill", "boot_id": snap.boot_id, "signal": "KILL", "targets": [{"pid": 1}]}
    assert link.request(command, 1)["outcomes"][0]["result"] == "refused"
    command = {"cmd": "kill", "boot_id": snap.boot_id, "signal": "KILL", "targets": [{"pid": 31337}]}
    assert link.request(command, 1)["outcomes"][0]["result"] == "gone"
    assert _snap(link).process(LAUNCHER_PID) is not None


def test_read_only_refuses_every_kill():
    clock = ManualClock()
    link = SimLink("gpu-node-07", LinkOptions(read_only=True), clock=clock)
    link.open()
    snap = _snap(link)
    [outcome] = _kill(link, snap, [LAUNCHER_PID], tree=True)
    assert outcome["result"] == "refused"
    assert _snap(link).process(LAUNCHER_PID) is not None


def test_healthy_host_and_hostile_names():
    link, _ = _link("gpu-node-08")
    snap = _snap(link)
    assert [g.memory_used_mib > 40_000 for g in snap.gpus] == [True] * 4 + [False] * 4
    assert snap.gpus[4].memory_used_mib == IDLE_MIB
    texts = {p.name for p in snap.processes} | {p.user for p in snap.processes}
    texts |= {arg for p in snap.processes for arg in p.cmdline}
    for hostile in ("[bold]x[/]", "[@click=app.quit]x[/]", "\\x1b]0;t\\x07\\x1b[2J"):
        assert hostile in texts  # the simulated host's text enters the model made visible, like any host's
    assert {visible(t) for t in HOSTILE_TEXTS} <= texts
    assert max(len(a) for a in texts) >= 100_000
    assert snap.endpoints[0].state == "UP"


@pytest.mark.parametrize(("target", "server"), [("gpu-node-08", VLLM_PID), ("gpu-node-07", LAUNCHER_PID)])
def test_a_killed_servers_endpoint_goes_down(target: str, server: int):
    """Whichever host it is, once the process serving /health is gone, nothing answers there any more."""
    link, clock = _link(target)
    before = _snap(link)
    assert before.endpoints[0].state in ("UP", "UNHEALTHY")
    _kill(link, before, [server], tree=True, escalate_s=0.1)
    clock.advance(1.0)
    (sample,) = _snap(link).endpoints
    assert (sample.state, sample.detail) == ("DOWN", "connection refused")
    assert sample.since is not None
    assert sample.since <= clock()


def test_calibrate_and_configure():
    link, _ = _link()
    used = link.request({"cmd": "calibrate"}, 1)["memory_used_mib"]
    assert len(used) == 8
    assert sorted(v > 40_000 for v in used.values()) == [False] + [True] * 7  # GPU0's true zombie freed it
    assert link.request({"cmd": "configure", "memory_interval_s": 0.2}, 1) == {}
    assert link.memory_interval_s == 0.2
    with pytest.raises(LinkError):
        link.request({"cmd": "bogus"}, 1)


def test_next_snapshot_paces_and_close_unblocks_a_waiting_reader():
    link = SimLink("gpu-node-07", LinkOptions(memory_interval_s=30.0), clock=ManualClock())
    link.open()
    assert link.next_snapshot(1.0) is not None
    assert link.next_snapshot(0.01) is None  # the next one is not due for 30 s
    errors: list[Exception] = []

    def reader() -> None:
        try:
            link.next_snapshot(60.0)
        except LinkError as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.05)
    link.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert len(errors) == 1


def test_sim_imports_without_textual_or_rich():
    code = (
        "import sys, gputui.transports.sim; assert 'textual' not in sys.modules and 'rich' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_gpus_come_back_one_after_another():
    link, clock = _link()
    snap = _snap(link)
    _kill(link, snap, [LAUNCHER_PID], tree=True)
    clock.advance(1.45)
    used = [g.memory_used_mib for g in _snap(link).gpus]
    assert used[:2] == [IDLE_MIB, IDLE_MIB]  # GPU0 and GPU1 release within 1.3 and 1.4 s
    assert all(mib > IDLE_MIB for mib in used[2:])


def _judged_states(target: str, seconds: int, **kwargs) -> list[str | None]:
    """The server's judged state after each simulated second, as the TUI's watch sees it."""
    from gputui.core.servers import ServerWatch

    link, clock = _link(target, **kwargs)
    watch = ServerWatch()
    states = []
    for _ in range(seconds):
        (sample,) = watch.apply(_snap(link)).endpoints
        states.append(sample.state)
        clock.advance(1.0)
    return states


def test_the_wedged_server_stalls_and_the_healthy_one_is_busy_for_a_while():
    wedged = _judged_states("gpu-node-07", 50, wedged_at_s=6.0)
    assert wedged[:6] == ["UP"] * 6
    # The counter stops at the wedge, and its schedulers are defunct leaders holding memory: health failing
    # with tokens a moment ago is never BUSY ("not dead, do not kill") then, but UNHEALTHY, then STALLED.
    assert wedged[6] == "UNHEALTHY"
    assert "BUSY" not in wedged
    assert "STALLED" in wedged
    assert set(wedged[wedged.index("STALLED") :]) == {"STALLED"}
    healthy = _judged_states("gpu-node-08", 100)
    assert set(healthy[:15]) == {"UP"}
    assert set(healthy[16:90]) == {"BUSY"}  # /health times out while tokens keep flowing
    assert healthy[-1] == "UP"
