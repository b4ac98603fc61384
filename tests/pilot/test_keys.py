"""The keys people expect from a terminal monitor: Esc leaves a list, Ctrl+C quits, Home/End jump, and the
footer of a narrow pane still says where the help is."""

from __future__ import annotations

import pytest
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from gputui.transports.sim import DETOKENIZER_PID, NSYS_PID
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for

WIDE = (120, 40)


async def _ready(pilot, app) -> ProcessTable:  # type: ignore[no-untyped-def]
    procs = app.query_one(ProcessTable)
    await wait_for(pilot, lambda: procs.row_count > 0, "process rows")
    return procs


@pytest.mark.parametrize(("key", "panel"), [("f", FindingsList), ("g", GpuPanel)], ids=["findings", "gpus"])
async def test_escape_leaves_a_panel_for_the_process_list(make_app, key: str, panel: type) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        procs = await _ready(pilot, app)
        await pilot.press(key)
        assert isinstance(app.focused, panel)
        await pilot.press("escape")
        assert app.focused is procs


async def test_ctrl_c_quits(make_app) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to leave")
    assert app.return_code == 0


async def test_ctrl_c_in_the_kill_confirmation_quits_without_signalling(make_app) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        procs = await _ready(pilot, app)
        assert procs.select_pid(NSYS_PID)
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmKillScreen)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: app.return_code is not None, "the app to leave")
    assert not any(c["cmd"] == "kill" for c in app.factory.links["gpu-node-07"].commands)


async def test_home_and_end_move_the_selection(make_app) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        procs = await _ready(pilot, app)
        await pilot.press("end")
        assert procs.selected_pid == DETOKENIZER_PID  # the last row of the tree
        await pilot.press("home")
        assert procs.selected_pid == NSYS_PID
        await pilot.press("end", "up")
        assert procs.selected_pid == DETOKENIZER_PID - 3  # the scheduler above it


async def test_left_and_right_scroll_a_long_command_sideways(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(80, 40)) as pilot:
        procs = await _ready(pilot, app)
        await pilot.pause(0.2)
        assert procs.max_scroll_x > 0  # the nsys command line is wider than the pane
        await pilot.press("right", "right", "right")
        await wait_for(pilot, lambda: procs.scroll_x > 0, "scrolled right")
        await pilot.press("left", "left", "left")
        await wait_for(pilot, lambda: procs.scroll_x == 0, "back")


async def test_enter_on_a_gpu_opens_its_history_and_escape_comes_back(make_app) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("g", "down", "down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        assert app.screen.index == 2
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.monitor, "the monitor again")
        assert isinstance(app.focused, GpuPanel)


async def test_the_narrow_footer_keeps_help(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(50, 40)) as pilot:
        await _ready(pilot, app)
        await pilot.pause(0.3)
        # A side pane's footer keeps the keys that matter, each whole: help, TERM, kill all, clean?, quit.
        assert app.query_one(Footer).display
        shown = {key.key: key.region for key in app.query(FooterKey) if key.region.width}
        assert set(shown) == {"question_mark", "k", "X", "c", "q"}
        assert all(region.right <= 50 for region in shown.values())
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: app.screen is not app.monitor, "the help")
