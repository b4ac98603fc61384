"""Notifications answer without hiding an answer: one per kind (replaced, never stacked), over the GPU panel
only (never the verdict line or the health panel's state), and never over a dialog."""

from __future__ import annotations

import pytest
from textual.geometry import Region

from gputui.transports.sim import LAUNCHER_PID
from gputui.ui.app import NOTIFICATIONS_SHOWN, GpuTuiApp
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.help import HelpScreen
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.endpoint_panel import EndpointPanel
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for


async def _ready(pilot, app: GpuTuiApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: all(h.snapshot is not None for h in app.hosts), "first snapshots")
    await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")


def _toasts(app: GpuTuiApp) -> list[Region]:
    """The regions of the toasts the user can see on the current screen."""
    return [
        toast.region
        for toast in app.screen.query("Toast")
        if toast.region.area and toast.styles.visibility != "hidden"
    ]


def _answers(app: GpuTuiApp) -> list[Region]:
    """What a toast must never cover: the health panel and the verdict line."""
    return [app.query_one(EndpointPanel).region, app.query_one(CleanSlateLine).region]


def _over_the_gpus_only(app: GpuTuiApp) -> None:
    gpus = app.query_one(GpuPanel).region
    for toast in _toasts(app):
        assert gpus.contains_region(toast), (toast, gpus)
        assert not any(toast.overlaps(answer) for answer in _answers(app))


@pytest.mark.parametrize("columns", [50, 120, 200])
async def test_refused_keys_in_read_only_are_one_notification_over_the_gpus(make_app, columns) -> None:
    app = make_app(read_only=True)
    async with app.run_test(size=(columns, 40), notifications=True) as pilot:
        await _ready(pilot, app)
        for key in ("X", "k", "K", "T", "R"):
            await pilot.press(key)
        await wait_for(pilot, lambda: len(_toasts(app)) == 1, "one toast")
        await pilot.pause(0.2)
        assert len([n for n in app.notices if n[1] == "refused"]) == 5  # each key answered
        assert len(list(app._notifications)) == 1  # the latest refusal replaced the others
        assert list(app._notifications)[0].message == "read-only: no GPU is reset"  # R, the last key
        _over_the_gpus_only(app)


@pytest.mark.parametrize("columns", [50, 120, 200])
async def test_a_cancelled_kill_does_not_cover_the_health_state(make_app, columns) -> None:
    app = make_app()
    async with app.run_test(size=(columns, 40), notifications=True) as pilot:
        await _ready(pilot, app)
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.monitor, "back on the monitor")
        await wait_for(pilot, lambda: len(_toasts(app)) == 1, "the cancel notice")
        assert "cancelled: nothing was signalled" in app.notices[-1][2]
        _over_the_gpus_only(app)


async def test_kinds_stack_no_higher_than_the_gpu_panel(make_app) -> None:
    app = make_app(targets=("gpu-node-07", "gpu-node-08"))
    async with app.run_test(size=(50, 40), notifications=True) as pilot:
        await _ready(pilot, app)
        for index, title in enumerate(("one", "two", "three", "four", "five")):
            app.say(f"notice {index}", title=title)
        await pilot.pause(0.3)
        assert len(list(app._notifications)) == NOTIFICATIONS_SHOWN
        assert list(app._notifications)[-1].message == "notice 4"  # the newest stay
        _over_the_gpus_only(app)


async def test_a_dialog_is_never_covered_and_its_notices_show_after_it(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await _ready(pilot, app)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        app.say("gpu-node-09: connection refused", severity="error", title="host error")
        app.say("gpu-node-10: connection refused", severity="error", title="host error")
        await pilot.pause(0.3)
        assert list(app.screen.query("Toast"))  # said, but hidden while the dialog is up
        assert _toasts(app) == []
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.monitor, "back on the monitor")
        await wait_for(pilot, lambda: len(_toasts(app)) == 1, "the newest host error")
        assert [n.message for n in app._notifications] == ["gpu-node-10: connection refused"]
        _over_the_gpus_only(app)


async def test_a_kill_still_shows_its_own_notification(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await _ready(pilot, app)
        app.query_one(ProcessTable).select_pid(LAUNCHER_PID)
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: any(n[1].startswith("TERM") for n in app.notices), "kill outcome")
        await wait_for(pilot, lambda: bool(_toasts(app)), "its toast")
        _over_the_gpus_only(app)
