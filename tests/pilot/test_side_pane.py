"""The incident at every width class: a 50-column tmux side pane, a laptop, a wide screen. Every answer
stays on screen, one operation is one notification that covers neither the process cursor nor the
clean-slate line, and every key that does nothing says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.geometry import Region
from textual.widgets import Footer, Static

from gputui.core.text import command_words
from gputui.transports.sim import DETOKENIZER_PID, DRAIN_S, LAUNCHER_PID, ManualClock
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.screens.help import CLOSE_HINT, HelpScreen
from gputui.ui.screens.monitor_view import CLEAN_ROWS_WITH_FOOTER, PANEL_ROWS_WITH_FOOTER
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.endpoint_panel import EndpointPanel
from gputui.ui.widgets.fmt import screen_rows
from gputui.ui.widgets.history_chart import HistoryChart
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for

WIDTHS = [50, 80, 120]


def _procs(app: GpuTuiApp) -> ProcessTable:
    return app.query_one(ProcessTable)


async def _ready(pilot, app: GpuTuiApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: all(h.snapshot is not None for h in app.hosts), "first snapshots")
    await wait_for(pilot, lambda: _procs(app).row_count > 0, "process rows")


def _toasts(app: GpuTuiApp) -> list[Region]:
    return [toast.region for toast in app.screen.query("Toast") if toast.region.area]


def _lines(widget: Static) -> list[str]:
    return [strip.text for strip in widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))]


def _cursor_row(app: GpuTuiApp) -> Region:
    table = _procs(app)
    region = table.content_region
    y = region.y + 1 + table.cursor_row - round(table.scroll_offset.y)  # under the header
    return Region(region.x, y, region.width, 1)


@pytest.mark.parametrize("columns", WIDTHS)
async def test_x_y_is_one_notification_that_covers_neither_cursor_nor_receipt(
    make_app, clock, columns
) -> None:
    app = make_app()
    async with app.run_test(size=(columns, 40), notifications=True) as pilot:
        await _ready(pilot, app)
        host = app.hosts[0]
        said = len(app.notices)
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        await pilot.press("y")
        most = 0
        waited = 0
        while not (host.check is not None and host.check.clean and not host.kills):
            clock.advance(0.25)
            await pilot.pause(0.1)
            toasts = _toasts(app)
            most = max(most, len(toasts))
            clean = app.query_one(CleanSlateLine).region
            for toast in toasts:
                assert not toast.overlaps(clean), "a notification over the clean-slate line"
                assert not toast.overlaps(_cursor_row(app)), "a notification over the process cursor"
            waited += 1
            assert waited < 200, "no clean slate"
        await pilot.pause(0.3)
        assert most == 1
        assert len(_toasts(app)) == 1  # the operation's last word: the clean slate, in the same place
        operation = [n for n in list(app.notices)[said:]]
        assert [title for _, title, _ in operation][-1] == "clean slate"
        assert any(text.startswith("sent (TERM)") for _, _, text in operation)
        # The server's state changes went to the health panel, not to a toast each.
        assert not any(title == "health" for _, title, _ in operation)
        assert host.endpoint_changes
        assert "→" in str(app.query_one(EndpointPanel).border_subtitle)


async def test_a_single_k_says_its_outcome_once(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await _ready(pilot, app)
        assert _procs(app).select_pid(DETOKENIZER_PID)
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        await pilot.press("y")
        host = app.hosts[0]
        await wait_for(pilot, lambda: any(n[2].startswith("sent (TERM)") for n in app.notices), "the signal")
        await wait_for(pilot, lambda: not host.kills, "the kill's end")
        await pilot.pause(0.3)
        toasts = list(app.screen.query("Toast"))
        assert len(toasts) == 1  # sent, then what became of it, in one place
        assert "sent (TERM)" not in str(toasts[0].render())


def _footer_stays(line: CleanSlateLine, columns: int, rows: int) -> bool:
    taken = screen_rows(line.shown, columns)
    return taken <= CLEAN_ROWS_WITH_FOOTER or rows - taken >= PANEL_ROWS_WITH_FOOTER


@pytest.mark.parametrize("rows", [40, 24])
async def test_the_receipt_wraps_whole_at_50_columns_and_the_footer_yields_on_a_short_pane(
    make_app, clock, rows
) -> None:
    app = make_app()
    async with app.run_test(size=(50, rows)) as pilot:
        await _ready(pilot, app)
        host = app.hosts[0]
        line = app.query_one(CleanSlateLine)
        assert screen_rows(line.shown, 50) > CLEAN_ROWS_WITH_FOOTER
        assert app.query_one(Footer).display == (rows == 40)  # a 40-row pane keeps its keys
        await pilot.press("X", "y")
        await wait_for(pilot, lambda: host.snapshot.process(LAUNCHER_PID) is None, "the kill")
        await wait_for(pilot, lambda: not host.kills, "the kill's end")
        clock.advance(DRAIN_S + 1.0)
        await wait_for(pilot, lambda: "verified" in line.shown.plain, "the receipt")
        await pilot.pause(0.3)
        shown = " ".join(_lines(line))
        assert "port 30000 free" in shown
        assert shown.split() == line.shown.plain.split()  # every word, none cut
        assert app.query_one(Footer).display == _footer_stays(line, 50, rows)
        if rows == 24:
            assert not app.query_one(Footer).display


async def test_the_gpu_view_at_50_columns_draws_one_chart_per_row(make_app, clock) -> None:
    app = make_app()
    async with app.run_test(size=(50, 40)) as pilot:
        await _ready(pilot, app)
        for _ in range(8):
            clock.advance(1.0)
            await pilot.pause(0.1)
        await pilot.press("g", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        await pilot.pause(0.3)
        charts = list(app.screen.query(HistoryChart))
        assert len(charts) == 4
        rows = [chart.region for chart in charts]
        for chart, region in zip(charts, rows, strict=True):
            assert region.width >= 40, "a chart with the pane's width"
            assert any(ch not in " " for text in _lines(chart) for ch in text), "a chart drawn"  # type: ignore[arg-type]
        assert len({r.y for r in rows}) == 4  # one per row
        for figures in app.screen.query(".gpu-series-figures"):
            assert not any(figures.region.overlaps(r) for r in rows)


async def test_health_at_50_columns_keeps_state_url_and_reason(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(50, 40)) as pilot:
        await _ready(pilot, app)
        panel = app.query_one(EndpointPanel)
        await wait_for(pilot, lambda: bool(panel.samples) and panel.samples[0].state is not None, "a probe")
        await pilot.pause(0.3)
        sample = panel.samples[0]
        region = Region(0, 1, panel.size.width, panel.rows)  # under the border
        lines = [strip.text.strip("│ ") for strip in panel.render_lines(region)]
        text = " ".join(lines)
        assert lines[0].startswith(str(sample.state))
        assert sample.url in text
        if sample.detail and sample.state != "UP":
            assert " ".join(sample.detail.split()) in " ".join(text.split())
        assert "…" not in text


async def test_the_confirmation_at_50_columns_breaks_no_argument(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(50, 40)) as pilot:
        await _ready(pilot, app)
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        await pilot.pause(0.3)
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        table = screen.query_one("#confirm-table", Static)
        lines = _lines(table)
        width = table.size.width
        for target in screen.plan.targets:
            for word in command_words(target.cmdline, target.name):
                if len(word) < width - 2:
                    assert any(word in line for line in lines), word


async def test_t_toggles_the_tree_view_and_capital_t_kills_the_tree(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, app)
        monitor = app.monitor
        assert monitor.sort_mode == "tree"
        await pilot.press("t")
        assert monitor.sort_mode == "gpu"
        assert not isinstance(app.screen, ConfirmKillScreen)
        await pilot.press("s")  # gpu → pid
        await pilot.press("t")
        assert monitor.sort_mode == "tree"
        await pilot.press("t")
        assert monitor.sort_mode == "pid"  # back to the last flat order
        await pilot.press("t")
        assert _procs(app).select_pid(LAUNCHER_PID)
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        assert screen.plan.tree
        assert screen.plan.signal == "TERM"
        assert screen.plan.escalate_s is not None


async def test_keys_that_do_nothing_say_why(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, app)
        said = len(app.notices)
        await pilot.press("tab")
        assert list(app.notices)[said:] == [("warning", "", "Tab: only one host is open")]
        await pilot.press("2")
        assert app.notices[-1][2] == "1–9: only one host is open"
        # A filter that hides every process: k and Space have nothing to act on.
        await pilot.press("slash", *"nothing-matches", "enter")
        await wait_for(pilot, lambda: _procs(app).row_count == 0, "an empty list")
        said = len(app.notices)
        await pilot.press("k", "space")
        assert [text for _, _, text in list(app.notices)[said:]] == [
            "no GPU process is listed: nothing to signal",
            "no process selected: nothing to tag",
        ]


async def test_escape_clears_the_filter_first(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, app)
        await pilot.press("slash", *str(DETOKENIZER_PID), "enter")
        await wait_for(pilot, lambda: _procs(app).row_count == 1, "the filtered list")
        assert app.focused is _procs(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.monitor.filter_text == ""
        assert _procs(app).row_count > 1
        assert app.screen is app.monitor


@pytest.mark.parametrize("columns", [50, 120])
async def test_the_help_says_how_to_close_it(make_app, columns: int) -> None:
    app = make_app()
    async with app.run_test(size=(columns, 40)) as pilot:
        await _ready(pilot, app)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        dialog = app.screen.query_one("#help-dialog")
        assert str(dialog.border_subtitle) == CLOSE_HINT
        assert dialog.region.right <= columns
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.monitor, "the monitor")


async def test_the_fleet_hosts_footer_is_whole_at_120_columns(tmp_path: Path, monkeypatch) -> None:
    from tests.data.prometheus import fetcher_of, load_answer, recorded_fleet_app

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    app, fleet = recorded_fleet_app(fetcher_of(load_answer()), ManualClock(), tmp_path / "audit")
    async with app.run_test(size=(120, 40)) as pilot:
        from gputui.ui.widgets.fleet_table import FleetTable

        table = fleet.query_one(FleetTable)
        await wait_for(pilot, lambda: table.row_count == 4, "the fleet's rows")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is app.monitor and _procs(app).row_count > 0, "the host")
        await pilot.pause(0.3)
        footer = app.monitor.query_one(Footer)
        assert footer.virtual_size.width <= 120
        labels = [key.description for key in footer.query("FooterKey")]  # type: ignore[attr-defined]
        assert "Back" in labels
        assert "Quit" in labels
