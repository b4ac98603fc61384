"""A confirmed kill as the TUI runs it: pending escalations, quitting during one, the receipt after it.

Over the simulated wedged host (``gputui.transports.sim``), whose detokenizer ignores TERM: a tree kill sends
TERM, the collector KILLs the detokenizer when the escalation delay is up, and every stage is audited.
"""

from __future__ import annotations

import json
from pathlib import Path

from gputui.transports.sim import DETOKENIZER_PID, DRAIN_S, LAUNCHER_PID, ManualClock
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for

WIDE = (120, 40)


def _audit(app: GpuTuiApp) -> list[dict]:
    assert app.audit is not None
    path = app.audit.path
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _stages(app: GpuTuiApp, pid: int) -> list[tuple[str, str]]:
    return [(line["stage"], line["result"]) for line in _audit(app) if line["pid"] == pid]


async def _tree_kill_confirmed(pilot, app: GpuTuiApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
    assert app.query_one(ProcessTable).select_pid(LAUNCHER_PID)
    await pilot.press("T")
    assert isinstance(app.screen, ConfirmKillScreen)
    await pilot.press("y")


async def _tree_kill(pilot, app: GpuTuiApp) -> None:  # type: ignore[no-untyped-def]
    await _tree_kill_confirmed(pilot, app)
    await wait_for(pilot, lambda: any("KILL after" in n[2] for n in app.notices), "the pending escalation")


async def _until_exit(pilot, app: GpuTuiApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: app.return_code is not None, "the app to leave")


async def test_q_during_an_escalation_says_what_is_pending_and_leaves_once_it_is_done(make_app) -> None:
    app = make_app(escalate_s=1.0)
    async with app.run_test(size=WIDE) as pilot:
        await _tree_kill(pilot, app)
        await pilot.press("q")
        severity, title, message = app.notices[-1]
        assert (severity, title) == ("warning", "kill under way")
        assert "KILL in" in message
        assert f"{DETOKENIZER_PID} sglang::detokenizer" in message
        assert message.endswith("q again to abandon it")
        assert app.return_code is None  # still here: the escalation is not done
        await _until_exit(pilot, app)
    assert app.return_code == 0
    assert _stages(app, DETOKENIZER_PID) == [
        ("intent", "requested"),
        ("signal", "sent"),
        ("escalate", "sent"),
        ("confirm", "killed"),
    ]
    assert any("killed (KILL): 4250 sglang::detokenizer" in n[2] for n in app.notices)
    with app.factory.links["gpu-node-07"].processes() as procs:
        assert DETOKENIZER_PID not in procs


async def test_q_twice_abandons_the_escalation_and_says_what_was_left(make_app) -> None:
    app = make_app(escalate_s=60.0)
    async with app.run_test(size=WIDE) as pilot:
        await _tree_kill(pilot, app)
        await pilot.press("q", "q")
        await _until_exit(pilot, app)
    assert any(n[2] == "abandoning the escalation; quitting" for n in app.notices)
    (left,) = [n for n in app.notices if n[2].startswith("escalation abandoned")]
    assert f"abandoned: {DETOKENIZER_PID} sglang::detokenizer – alive after TERM; KILL not sent" in left[2]
    stages = _stages(app, DETOKENIZER_PID)
    assert stages == [("intent", "requested"), ("signal", "sent"), ("abandon", "abandoned")]
    with app.factory.links["gpu-node-07"].processes() as procs:
        assert DETOKENIZER_PID in procs  # left alive, and said so


async def test_a_single_term_says_after_the_delay_whether_the_process_is_still_alive(make_app) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        assert app.query_one(ProcessTable).select_pid(DETOKENIZER_PID)
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmKillScreen)
        assert app.screen.plan.wait_s == 0.2
        await pilot.press("y")
        await wait_for(pilot, lambda: any(n[2].startswith("still_alive") for n in app.notices), "the look")
    severity, _title, message = next(n for n in app.notices if n[2].startswith("still_alive"))
    assert severity == "warning"
    assert message == f"still_alive: {DETOKENIZER_PID} sglang::detokenizer – still alive 0.2 s after TERM"


async def test_the_receipt_waits_for_the_kill_to_finish(make_app, clock: ManualClock) -> None:
    """The GPUs drain long before the TERM-ignoring detokenizer is KILLed: no CLEAN until it is."""
    app = make_app(escalate_s=1.5)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        await pilot.press("X", "y")
        await wait_for(pilot, lambda: any("KILL after" in n[2] for n in app.notices), "the escalation")
        clock.advance(DRAIN_S + 1.0)
        line = app.query_one(CleanSlateLine)
        await wait_for(pilot, lambda: "waiting for the kill to finish" in str(line.render()), "the wait")
        assert "CLEAN" not in str(line.render())
        assert app.hosts[0].kills
        await wait_for(pilot, lambda: "verified by a full sample" in str(line.render()), "the receipt")
        assert not app.hosts[0].kills
        snapshot = app.hosts[0].snapshot
        assert snapshot is not None
        assert snapshot.process(DETOKENIZER_PID) is None
        receipt = str(line.render())
        assert "workers gone 3.0 s after the signal" in receipt  # the KILL ended the job then
        assert " later · drain " in receipt
        assert " MiB → baseline" in receipt
    assert not any("None" in message for _, _, message in app.notices)


async def test_no_receipt_while_a_zombie_of_the_killed_tree_is_listed(make_app, clock: ManualClock) -> None:
    """An init that does not reap: the killed launcher's defunct scheduler stays listed (parent init). The
    GPUs are back and the verdict alone is clean, but the receipt waits until that zombie is gone."""
    from gputui.transports.sim import SCHEDULER_PID_BASE

    app = make_app(escalate_s=0.1)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        link = app.factory.links["gpu-node-07"]
        with link.processes() as procs:
            zombie = procs[SCHEDULER_PID_BASE]
        await pilot.press("X", "y")
        await wait_for(pilot, lambda: not app.hosts[0].kills and app.hosts[0].killed_jobs, "the kill to end")
        with link.processes() as procs:
            zombie.ppid, zombie.gpu_mib = 1, {}  # its memory went back when its parent died
            procs[zombie.pid] = zombie  # back in the table: never reaped
        clock.advance(DRAIN_S + 1.0)
        line = app.query_one(CleanSlateLine)
        await wait_for(pilot, lambda: app.hosts[0].snapshot.process(zombie.pid) is not None, "the zombie")
        await wait_for(pilot, lambda: app.hosts[0].snapshot.verdict.clean, "a clean verdict")
        await pilot.pause(0.5)
        assert "CLEAN" not in str(line.render())
        assert app.hosts[0].check is not None
        assert app.hosts[0].check.finished_s is None
        with link.processes() as procs:
            del procs[zombie.pid]
        await wait_for(pilot, lambda: "verified by a full sample" in str(line.render()), "the receipt")


async def test_no_receipt_while_the_killed_servers_port_is_still_listening(
    make_app, clock: ManualClock
) -> None:
    """A process that escaped the job keeps the launcher's listening socket: the GPUs are back, but the
    verdict (as ``check`` would say it) and the check name the port and its listener until it is free."""
    from gputui.transports.sim import SGLANG_PORT, SimProc

    app = make_app(escalate_s=0.1)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        link = app.factory.links["gpu-node-07"]
        await pilot.press("X", "y")
        await wait_for(pilot, lambda: not app.hosts[0].kills and app.hosts[0].killed_jobs, "the kill to end")
        with link.processes() as procs:  # started before the kill, so not the server restarted
            procs[4400] = SimProc(
                4400, 1, "lingering", ("lingering",), start_offset_s=80_005.0, listen_ports=(SGLANG_PORT,)
            )
        clock.advance(DRAIN_S + 1.0)
        line = app.query_one(CleanSlateLine)
        held = f"port {SGLANG_PORT} still listening (pid 4400 lingering)"
        await wait_for(pilot, lambda: held in str(line.render()), "the port named")
        verdict = app.hosts[0].snapshot.verdict
        assert not verdict.clean
        assert verdict.reasons == (held,)
        assert "CLEAN" not in str(line.render())
        with link.processes() as procs:
            del procs[4400]
        await wait_for(pilot, lambda: "verified by a full sample" in str(line.render()), "the receipt")
        assert f" · port {SGLANG_PORT} free " in str(line.render())
        assert app.hosts[0].watched_ports == ()


async def test_a_process_that_escaped_the_killed_job_is_shown_as_its_survivor(make_app) -> None:
    """After the kill, a daemon the job had started with setsid (adopted by init) still holds GPU1."""
    from gputui.transports.sim import SimProc
    from gputui.ui.widgets.findings_list import FindingsList

    app = make_app(escalate_s=0.1)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        await pilot.press("X", "y")
        await wait_for(pilot, lambda: not app.hosts[0].kills and app.hosts[0].killed_jobs, "the kill to end")
        link = app.factory.links["gpu-node-07"]
        with link.processes() as procs:
            procs[4300] = SimProc(
                4300, 1, "cache_daemon", ("cache_daemon",), gpu_mib={1: 2048}, start_offset_s=80_020.0
            )

        def survivors() -> list:  # type: ignore[type-arg]
            snapshot = app.hosts[0].snapshot
            return [] if snapshot is None else [f for f in snapshot.findings if f.kind == "survivor"]

        await wait_for(pilot, survivors, "the survivor finding")
        (finding,) = survivors()
        assert (finding.pid, finding.action_pid) == (4300, 4300)
        assert [f.kind for f in app.hosts[0].snapshot.findings if f.pid == 4300] == ["survivor"]
        assert f"a survivor of the job of pid {LAUNCHER_PID - 100} (nsys)" in finding.detail
        shown = app.query_one(FindingsList)
        await wait_for(pilot, lambda: any(r.findings[0].kind == "survivor" for r in shown.rows), "its row")
        row = next(i for i, r in enumerate(shown.rows) if r.findings[0].kind == "survivor")
        shown.highlighted = row  # scrolled into view
        await pilot.pause(0.3)
        assert any(" survivor " in shown.render_line(y).text for y in range(shown.size.height))


async def test_an_audit_log_that_cannot_be_written_refuses_the_kill(make_app, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("the audit directory cannot be made here")
    app = make_app(audit_dir=blocker)
    async with app.run_test(size=WIDE) as pilot:
        await _tree_kill_confirmed(pilot, app)
        await wait_for(pilot, lambda: any(n[1] == "kill failed" for n in app.notices), "the refusal")
        severity, _title, message = next(n for n in app.notices if n[1] == "kill failed")
        assert severity == "error"
        assert message.startswith("gpu-node-07: kill refused, nothing signalled: audit log: ")
        assert message.endswith("(start gputui with --no-audit to kill without it)")
        assert not any(c["cmd"] == "kill" for c in app.factory.links["gpu-node-07"].commands)
        with app.factory.links["gpu-node-07"].processes() as procs:
            assert LAUNCHER_PID in procs
        assert not app.hosts[0].kills
