"""Every key of the app, driven through Pilot over simulated hosts (real SimLink, analysis and actions)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

from gputui.core.link import LinkError, LinkOptions
from gputui.transports.sim import (
    DETOKENIZER_PID,
    DRAIN_S,
    LAUNCHER_PID,
    NSYS_PID,
    SCHEDULER_PID_BASE,
    ManualClock,
)
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.help import HelpScreen
from gputui.ui.session.cleancheck import FAST_MEMORY_INTERVAL_S
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.filter_bar import FilterBar
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.host_bar import HostBar
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import CountingSimLink, wait_for

WIDE = (120, 40)


def _procs(app: GpuTuiApp) -> ProcessTable:
    return app.query_one(ProcessTable)


def _row_pids(app: GpuTuiApp) -> list[int]:
    table = _procs(app)
    return [int(key.value) for key in table.rows]  # type: ignore[arg-type]


def _listed(app: GpuTuiApp, pid: int, host: int = 0) -> bool:
    snapshot = app.hosts[host].snapshot
    return snapshot is not None and snapshot.process(pid) is not None


DIALOG_S = 10.0
"""How long the user reads the kill confirmation before pressing y."""


def _clean_line(app: GpuTuiApp) -> str:
    return str(app.query_one(CleanSlateLine).render())


async def _ready(pilot, app: GpuTuiApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: all(h.snapshot is not None for h in app.hosts), "first snapshots")
    await wait_for(pilot, lambda: _procs(app).row_count > 0, "process rows")


async def _select(pilot, app: GpuTuiApp, pid: int) -> None:  # type: ignore[no-untyped-def]
    assert _procs(app).select_pid(pid)
    await pilot.pause()
    assert _procs(app).selected_pid == pid


def _audit_lines(app: GpuTuiApp) -> list[dict]:
    assert app.audit is not None
    path = app.audit.path
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_shows_the_wedged_host(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        pids = _row_pids(app)
        assert pids[:2] == [NSYS_PID, LAUNCHER_PID]  # tree order: nsys, then the launcher under it
        assert set(range(SCHEDULER_PID_BASE, SCHEDULER_PID_BASE + 8)) <= set(pids)
        state = _procs(app).get_cell(str(SCHEDULER_PID_BASE), "state")
        assert state.plain.strip() == "Z"
        assert "red" in str(state.style)  # zombies stand out
        # The headline every view prints, then the first reason: GPU0's scheduler exited whole (freed).
        assert _clean_line(app).startswith("NOT CLEAN: 1/8 GPUs at baseline (3 MiB + 2) · workers: GPU1 ")
        assert len(app.query_one(FindingsList).findings) >= 8
        gpu_text = str(app.query_one(GpuPanel).render())
        assert "41239/49152" in gpu_text
        assert gpu_text.count("\n") == 8  # header + eight GPUs, no scrolling


async def test_arrow_keys_move_the_selection(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        # The cursor starts on the first GPU process (TP0 is a true zombie: it holds nothing), not the root.
        assert _procs(app).selected_pid == SCHEDULER_PID_BASE + 1
        await pilot.press("up")
        assert _procs(app).selected_pid == SCHEDULER_PID_BASE
        await pilot.press("up", "up")
        assert _procs(app).selected_pid == NSYS_PID
        await pilot.press("down")
        assert _procs(app).selected_pid == LAUNCHER_PID


async def test_space_tags_and_k_signals_every_tagged_process(make_app):
    app = make_app(targets=("gpu-node-08",))
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await _select(pilot, app, 5120)
        await pilot.press("space")  # tags 5120 and moves to 5121
        assert _procs(app).selected_pid == 5121
        await pilot.press("space")
        assert app.hosts[0].tagged == {5120, 5121}
        assert _procs(app).get_cell("5120", "pid").plain.startswith("●")
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmKillScreen)
        assert {t.pid for t in app.screen.plan.targets} == {5120, 5121}
        assert app.screen.plan.signal == "TERM"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not _listed(app, 5120) and not _listed(app, 5121), "tagged gone")
        assert app.hosts[0].tagged == set()
        assert _listed(app, 5122)
        await wait_for(pilot, lambda: not app.hosts[0].kills, "the kill to finish")
        for pid in (5120, 5121):
            # The intent before the signal, then each stage: sent, and gone when the agent looked again.
            stages = [(line["stage"], line["result"]) for line in _audit_lines(app) if line["pid"] == pid]
            assert stages == [("intent", "requested"), ("signal", "sent"), ("wait", "exited")]


async def test_cancel_sends_nothing(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await _select(pilot, app, LAUNCHER_PID)
        for cancel_key in ("escape", "n"):
            await pilot.press("k")
            assert isinstance(app.screen, ConfirmKillScreen)
            await pilot.press(cancel_key)
            assert not isinstance(app.screen, ConfirmKillScreen)
        await pilot.pause(0.3)
        assert _listed(app, LAUNCHER_PID)
        assert not any(c["cmd"] == "kill" for c in app.factory.links["gpu-node-07"].commands)
        assert _audit_lines(app) == []
        assert app.notices[-1][2].startswith("cancelled")


async def test_confirmation_lists_pid_user_command_and_gpu_memory(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await _select(pilot, app, SCHEDULER_PID_BASE)  # a true zombie: its parent is offered instead
        await pilot.press("K")
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        assert screen.plan.signal == "KILL"
        assert [t.pid for t in screen.plan.targets] == [LAUNCHER_PID]
        assert any("zombie" in note and str(LAUNCHER_PID) in note for note in screen.plan.notes)
        text = app.export_screenshot().replace("&#160;", " ")
        assert "4200" in text
        assert "root" in text
        assert "sglang.launch_server" in text
        notes = str(screen.query_one("#confirm-notes").render())
        assert "zombie" in notes
        await pilot.press("y")
        await wait_for(pilot, lambda: not _listed(app, LAUNCHER_PID), "launcher gone")
        assert any(line["signal"] == "KILL" and line["pid"] == LAUNCHER_PID for line in _audit_lines(app))


async def test_t_kills_the_tree_and_escalates(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await _select(pilot, app, LAUNCHER_PID)
        await pilot.press("T")
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        assert screen.plan.tree
        assert screen.plan.escalate_s == 0.2
        assert DETOKENIZER_PID in {t.pid for t in screen.plan.targets}
        await pilot.press("enter")
        await wait_for(pilot, lambda: not _listed(app, DETOKENIZER_PID) and not _listed(app, LAUNCHER_PID))
        await wait_for(pilot, lambda: any("killed (KILL)" in n[2] for n in app.notices), "escalation notice")
        assert _listed(app, NSYS_PID)  # not part of the launcher's tree


async def test_x_then_drain_gives_the_clean_receipt(make_app, clock: ManualClock):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("X")
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        assert LAUNCHER_PID in {t.pid for t in screen.plan.targets}
        clock.advance(
            DIALOG_S
        )  # the time spent reading the confirmation counts "since X", not "since the kill"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not _listed(app, LAUNCHER_PID), "launcher gone")
        assert app.hosts[0].check is not None
        assert app.factory.links["gpu-node-07"].memory_interval_s == FAST_MEMORY_INTERVAL_S
        # GPU0 is back already: its scheduler exited whole at the wedge.
        await wait_for(pilot, lambda: "checking… 1/8 GPUs at baseline" in _clean_line(app), "progress line")
        clock.advance(DRAIN_S / 2)
        await pilot.pause(0.3)
        assert "checking… 1/8" in _clean_line(app)  # half drained: nothing else at baseline yet
        clock.advance(DRAIN_S)
        await wait_for(pilot, lambda: "CLEAN ✓ 8/8 GPUs at baseline" in _clean_line(app), "receipt")
        # The receipt's times are the events' (tests/pilot/test_receipt_times.py), not the dialog's.
        assert " after the signal · " in _clean_line(app)
        assert "since the kill" not in _clean_line(app)
        assert "memory back " in _clean_line(app)
        assert "verified" in _clean_line(app)
        # The receipt says the other two facts as every view does (the simulator remembers no job).
        assert _clean_line(app).endswith(" · workers: no GPU process left · residue: none left")
        # Fast sampling ends with the check.
        await wait_for(pilot, lambda: app.factory.links["gpu-node-07"].memory_interval_s == 0.05, "interval")


async def test_c_checks_with_fast_sampling_and_reports_progress(make_app):
    app = make_app(targets=("gpu-node-08",))
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("c")
        await wait_for(pilot, lambda: "checking… 3/8 GPUs at baseline" in _clean_line(app), "progress")
        commands = app.factory.links["gpu-node-08"].commands
        fast = {
            "cmd": "configure",
            "memory_interval_s": FAST_MEMORY_INTERVAL_S,
            "process_interval_s": 0.5,
            "watch_exits": True,  # a GPU holder's exit is sampled at once
            "fitness_interval_s": FAST_MEMORY_INTERVAL_S,  # a GPU turning unfit: seen with the next sample
        }
        assert fast in commands
        assert FAST_MEMORY_INTERVAL_S < 0.1  # the clean slate seen within ~0.1 s, as check --wait sees it


async def test_c_times_out_with_a_not_clean_receipt(make_app, clock: ManualClock):
    app = make_app(targets=("gpu-node-08",), check_timeout_s=30.0)
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("c")
        clock.advance(31.0)
        await wait_for(pilot, lambda: "NOT CLEAN after 31 s" in _clean_line(app), "timeout receipt")


async def test_filter_narrows_and_escape_clears(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("slash")
        assert isinstance(app.focused, FilterBar)
        await pilot.press(*"detok")
        await wait_for(pilot, lambda: _row_pids(app) == [DETOKENIZER_PID], "filtered rows")
        await pilot.press("enter")
        assert isinstance(app.focused, ProcessTable)
        assert _row_pids(app) == [DETOKENIZER_PID]
        await pilot.press("slash", "escape")
        await wait_for(pilot, lambda: len(_row_pids(app)) == 11, "all rows back")


async def test_s_cycles_the_sort(make_app):
    app = make_app(targets=("gpu-node-08",))
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        assert app.monitor.sort_mode == "tree"
        await pilot.press("s")
        assert app.monitor.sort_mode == "gpu"
        pids = _row_pids(app)
        assert pids[0] == 5100  # the vLLM server's tree holds the most
        await pilot.press("s")
        assert app.monitor.sort_mode == "pid"
        assert _row_pids(app) == sorted(_row_pids(app))
        await pilot.press("s")
        assert app.monitor.sort_mode == "tree"


async def test_r_asks_for_a_sample_now(make_app):
    app = make_app(memory_interval_s=30.0)
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        link = app.factory.links["gpu-node-07"]
        await pilot.press("r")
        await wait_for(pilot, lambda: {"cmd": "sample"} in link.commands, "sample request")


async def test_p_pauses_the_display(make_app):
    app = make_app(targets=("gpu-node-08",))
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("p")
        assert app.monitor.paused
        assert "PAUSED" in str(app.query_one(HostBar).render())
        host = app.hosts[0]
        shown = app.monitor.shown_snapshot(host)
        assert shown is not None
        app.factory.links["gpu-node-08"].request(
            {"cmd": "kill", "boot_id": shown.boot_id, "signal": "KILL", "targets": [{"pid": 5123}]}, 5
        )
        await wait_for(pilot, lambda: not host.snapshot.process(5123), "the host's data without 5123")
        assert app.monitor.shown_snapshot(host) is shown  # the panels froze on what they showed
        assert 5123 in _row_pids(app)
        await pilot.press("p")
        assert not app.monitor.paused
        await wait_for(pilot, lambda: 5123 not in _row_pids(app), "resumed")


async def test_help_lists_the_keys(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        shown = app.export_screenshot().replace("&#160;", " ")
        keys = [key for key, _ in app.screen.keys]
        for key in (
            "k",
            "K",
            "t",
            "T",
            "X",
            "c",
            "/",
            "s",
            "g",
            "Home",
            "End",
            "←/→",
            "r",
            "p",
            "?",
            "q",
            "Ctrl+C",
        ):
            assert key in keys
        assert "Tab" not in keys  # one host: nothing to switch to
        assert "clear the filter, then the tags; then, from the fleet view, back to it" in shown
        assert "scroll a long command line sideways" in shown
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_keys_do_nothing_under_a_modal(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("question_mark")
        await pilot.press("k", "X", "s", "c", "g")
        assert isinstance(app.screen, HelpScreen)
        assert app.monitor.sort_mode == "tree"
        assert app.hosts[0].check is None


async def test_q_quits(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, "exit")
    assert app.return_value == 0


async def test_quit_does_not_wait_on_a_hung_host(make_app):
    app = make_app(targets=("gpu-node-07", "hung-node"))

    async def run() -> None:
        async with app.run_test(size=WIDE) as pilot:
            await wait_for(pilot, lambda: app.hosts[0].snapshot is not None)
            await pilot.press("q")

    # A hung host's calls stay blocked until the test ends: an app that joined them would never return.
    await asyncio.wait_for(run(), timeout=15)
    assert app.return_value == 0


async def test_read_only_removes_and_refuses_destructive_keys(make_app):
    app = make_app(read_only=True)
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        shown = {key for key, active in app.active_bindings.items() if active.binding.show}
        for key in ("k", "K", "T", "X"):
            assert key not in shown  # out of the footer
        for key in ("c", "s", "q"):
            assert key in shown
        await _select(pilot, app, LAUNCHER_PID)
        for key in ("k", "K", "T", "X"):
            said = len(app.notices)
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmKillScreen)
            # The key says why it does nothing, in one line.
            assert list(app.notices)[said:] == [
                (
                    "warning",
                    "refused",
                    f"read-only: {key} signals nothing (gputui was started with --read-only)",
                )
            ]
        host = app.hosts[0]
        app.kills.request(host, host.snapshot, [], "TERM", tree=True, all_gpu=True)  # the flow refuses too
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmKillScreen)
        assert [n for n in app.notices if n[1] == "refused"][-1][2] == "read-only: nothing is signalled"
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert not any(t.startswith("Kill") for t in titles)
        assert "Clean-slate check" in titles
        assert _listed(app, LAUNCHER_PID)
        assert not any(c["cmd"] == "kill" for c in app.factory.links["gpu-node-07"].commands)


async def test_every_action_is_in_the_command_palette(make_app):
    app = make_app(targets=("gpu-node-07", "gpu-node-08"))
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for title in (
            "Kill: SIGTERM selected",
            "Kill: SIGKILL selected",
            "Kill: tree",
            "Kill: every GPU process tree",
            "Tag / untag process",
            "Clean-slate check",
            "Filter processes",
            "Sort processes",
            "Refresh now",
            "Pause / resume",
            "Help",
            "Quit",
            "Next host",
            "Host 2: gpu-node-08",
        ):
            assert title in titles
        await pilot.press("ctrl+p")
        await pilot.press(*"Sort processes")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.monitor.sort_mode == "gpu", "sort via the palette")


async def test_host_switching_with_tab_and_numbers(make_app):
    app = make_app(targets=("gpu-node-07", "gpu-node-08"))
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        assert LAUNCHER_PID in _row_pids(app)
        await pilot.press("tab")
        assert app.monitor.active_index == 1
        await wait_for(pilot, lambda: 5100 in _row_pids(app), "second host's rows")
        assert "gpu-node-08" in str(app.query_one(GpuPanel).border_title)
        await pilot.press("1")
        assert app.monitor.active_index == 0
        assert LAUNCHER_PID in _row_pids(app)
        await pilot.press("2")
        assert app.monitor.active_index == 1
        await pilot.press("tab")
        assert app.monitor.active_index == 0


async def test_a_failing_host_shows_its_error_and_the_others_keep_updating(make_app, clock: ManualClock):
    app = make_app(targets=("gpu-node-07", "broken-node"))
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.hosts[0].snapshot is not None and app.hosts[1].error is not None)
        bar = str(app.query_one(HostBar).render())
        assert "broken-node: connection refused" in bar
        first_time = app.hosts[0].snapshot.time
        clock.advance(1.0)
        await wait_for(pilot, lambda: app.hosts[0].snapshot.time != first_time, "the healthy host updates")
        await pilot.press("2")
        assert "connection refused" in str(app.query_one(GpuPanel).render())


async def test_findings_jump_to_the_process(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        findings = app.query_one(FindingsList)
        await pilot.press("f")
        assert app.focused is findings
        first = findings.findings[0]
        findings.highlighted = 0
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.focused, ProcessTable), "focus back on the table")
        assert _procs(app).selected_pid in (first.pid, first.action_pid)


async def test_resize_switches_layouts_live(make_app):
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        body = app.monitor.query_one("#body")
        assert not body.has_class("-stacked")
        assert not _procs(app).compact
        await pilot.resize_terminal(50, 40)
        await pilot.pause(0.2)
        assert body.has_class("-narrow")
        assert body.has_class("-stacked")
        await wait_for(pilot, lambda: _procs(app).compact, "compact columns")
        assert len(_row_pids(app)) == 11
        await pilot.resize_terminal(40, 30)
        await pilot.pause(0.2)
        assert app.query_one(CleanSlateLine).region.height >= 1  # still visible when tiny
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.2)
        assert not body.has_class("-narrow")
        await wait_for(pilot, lambda: not _procs(app).compact, "wide columns")


HOSTILE_TARGET = "[@click=app.quit]evil[/]\x1b]0;t\x07"


async def test_hostile_names_are_shown_literally_and_clicking_does_nothing(make_app):
    """RELIABILITY 22: markup, escapes and bidi overrides from machines are text, never markup or escapes."""
    app = make_app(targets=("gpu-node-08", HOSTILE_TARGET))
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        table = _procs(app)
        command = table.get_cell("5400", "command").plain
        assert "[bold]x[/]" in command
        assert "[@click=app.quit]x[/]" in command
        assert "\\x1b]0;t\\x07" in command
        assert "\\x1b[2J" in command
        assert "\\u202eexe.txt" in command
        assert "\\x9bJ" in command
        assert len(command) <= 420  # the 100 KB argument is cut
        child = table.get_cell("5401", "command").plain
        assert "\\u202eexe.txt [$x]" in child
        assert table.get_cell("5401", "user").plain.strip() == "[Bold]"
        for key in ("5400", "5401"):
            for column in ("pid", "user", "state", "gpu", "tree", "command"):
                cell = table.get_cell(key, column)
                assert not any(
                    ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch == "\u202e" for ch in cell.plain
                )
        bar = str(app.query_one(HostBar).render())
        assert "[@click=app.quit]evil[/]\\x1b]0;t\\x07" in bar
        svg = app.export_screenshot()
        assert "click=app.quit" in svg
        # Click every hostile cell on screen, and the host bar's hostile name: nothing may act on it.
        row = table.get_row_index("5400")
        for x in (3, 12, 20, 30, 45, 55, 62):
            await pilot.click(ProcessTable, offset=(x, 2 + row))
        await pilot.click(HostBar, offset=(10, 0))
        await pilot.click(HostBar, offset=(60, 0))
        await pilot.pause(0.2)
        assert app.is_running
        assert app.return_value is None
        # Kill it: the confirmation and the outcome notification carry the same names as text.
        await _select(pilot, app, 5400)
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmKillScreen)
        await pilot.pause()
        assert "[@click=app.quit]x[/]" in app.export_screenshot().replace("&#160;", " ")
        await pilot.press("enter")
        await wait_for(pilot, lambda: not _listed(app, 5400), "hostile process gone")
        await wait_for(pilot, lambda: any("[bold]x[/]" in n[2] for n in app.notices), "outcome notice")
        await pilot.pause(0.3)
        assert app.is_running
        assert app.return_value is None
        await pilot.press("2")
        await pilot.pause(0.2)
        assert app.is_running


class _FlakySimLink(CountingSimLink):
    """Delivers a few snapshots, then breaks (as a cut network would), or stalls while ``stall`` is set."""

    def __init__(self, *args, break_after: int | None = None, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.break_after = break_after
        self.delivered = 0
        self.stall = threading.Event()

    def next_snapshot(self, timeout_s: float):  # type: ignore[no-untyped-def]
        if self.stall.is_set():
            time.sleep(min(timeout_s, 0.05))
            return None
        if self.break_after is not None and self.delivered >= self.break_after:
            raise LinkError(f"{self.target}: connection reset by peer")
        snapshot = super().next_snapshot(timeout_s)
        if snapshot is not None:
            self.delivered += 1
        return snapshot


def _flaky_app(clock: ManualClock, tmp_path: Path, links: list[_FlakySimLink], **link_kwargs) -> GpuTuiApp:  # type: ignore[no-untyped-def]
    options = LinkOptions(memory_interval_s=0.05, process_interval_s=0.05)

    def factory(target: str) -> _FlakySimLink:
        kwargs = dict(link_kwargs) if not links else {}
        link = _FlakySimLink(target, options, clock=clock, **kwargs)
        if links:
            link.boot_id = "boot-after-the-reboot"
        links.append(link)
        return link

    return GpuTuiApp(
        ["gpu-node-08"],
        factory,
        clock=clock,
        memory_interval_s=0.05,
        notify_timeout_s=60.0,
        audit_dir=tmp_path,
    )


async def test_a_silent_host_is_marked_stale_with_the_age_of_its_data(clock: ManualClock, tmp_path: Path):
    links: list[_FlakySimLink] = []
    app = _flaky_app(clock, tmp_path, links)
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        links[0].stall.set()
        await pilot.pause(0.2)
        clock.advance(12.0)
        await wait_for(pilot, lambda: "stale 12 s" in str(app.query_one(HostBar).render()), "stale mark")
        assert app.session.host_status(app.hosts[0]).state == "stale"
        links[0].stall.clear()
        await wait_for(pilot, lambda: app.session.host_status(app.hosts[0]).state == "live", "live again")


async def test_a_broken_link_reconnects_and_a_new_boot_forgets_tagged_pids(
    clock: ManualClock, tmp_path: Path
):
    links: list[_FlakySimLink] = []
    app = _flaky_app(clock, tmp_path, links, break_after=1_000_000)
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await _select(pilot, app, 5120)
        await pilot.press("space")
        assert app.hosts[0].tagged == {5120}
        links[0].break_after = 0  # the network goes away
        await wait_for(pilot, lambda: any("connection reset" in n[2] for n in app.notices), "the error")
        await wait_for(
            pilot,
            lambda: len(links) >= 2 and app.hosts[0].snapshot.boot_id == "boot-after-the-reboot",
            "the reconnect",
        )
        assert app.hosts[0].error is None
        assert app.hosts[0].tagged == set()
        assert any("rebooted" in n[2] for n in app.notices)


async def test_a_process_that_changed_since_the_listing_is_refused(make_app):
    """RELIABILITY 13 as the user sees it: the pid now belongs to another process, the agent refuses."""
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("p")  # freeze the listing the user is looking at
        link = app.factory.links["gpu-node-07"]
        with link.processes() as procs:
            procs[LAUNCHER_PID].start_offset_s += 500.0  # pid 4200 was reused by a new process
        await _select(pilot, app, LAUNCHER_PID)
        await pilot.press("k", "enter")
        await wait_for(pilot, lambda: any("process changed" in n[2] for n in app.notices), "the refusal")
        severity, _title, message = next(n for n in app.notices if "process changed" in n[2])
        assert severity == "error"
        assert message.startswith("changed: 4200")
        with link.processes() as procs:
            assert procs.get(LAUNCHER_PID) is not None  # nothing was signalled
        assert [line["result"] for line in _audit_lines(app)] == ["requested", "changed"]
