"""A 50-column side pane keeps what tells workers apart: their titles and rank arguments in view, the keys
that matter whole, a dialog that says what is out of view; and the keys a newcomer tries first answer."""

from __future__ import annotations

from typing import Any

import pytest

from gputui.core.model import HostSnapshot, replace
from gputui.transports.sim import GPU_COUNT, SCHEDULER_PID_BASE
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.monitor_view import DISCOVERY_FIND_MAX_S, DISCOVERY_SWEEP_S
from gputui.ui.widgets.endpoint_panel import LOOKING_TEXT, NONE_TEXT, EndpointPanel
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import CountingSimLink, SimFactory, wait_for

RANKED = (
    "/opt/venv/bin/python3 -u -m sglang.srt.managers.scheduler --tp-rank {rank} --model-path /models/GLM-5"
)


def _procs(app: GpuTuiApp) -> ProcessTable:
    return app.query_one(ProcessTable)


async def _ready(pilot, app: GpuTuiApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: all(h.snapshot is not None for h in app.hosts), "first snapshots")
    await wait_for(pilot, lambda: _procs(app).row_count > 0, "process rows")


def _in_view(app: GpuTuiApp, pid: int) -> str:
    """The command as the pane shows it: the row's text up to the table's right edge."""
    table = _procs(app)
    row = table.get_row_index(str(pid))
    line = table.render_line(row + 1 - round(table.scroll_offset.y)).text
    return line[: table.content_region.width]


class RankedFactory(SimFactory):
    """The schedulers as ``python3 -m … --tp-rank N`` (no process title), as a plain launch has them."""

    def __call__(self, target: str) -> Any:
        # Serving, not wedged: a live process reads its command line.
        link = CountingSimLink(target, self.options, clock=self.clock, wedged_at_s=3600.0)
        self.links[target] = link
        with link.processes() as procs:
            for rank in range(GPU_COUNT):
                procs[SCHEDULER_PID_BASE + rank].cmdline = tuple(RANKED.format(rank=rank).split())
        return link


async def test_titles_are_whole_in_a_side_pane(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(50, 40)) as pilot:
        await _ready(pilot, app)
        await wait_for(pilot, lambda: "scheduler_TP7" in _in_view(app, SCHEDULER_PID_BASE + 7), "the titles")
        for rank in range(1, GPU_COUNT):  # defunct: each its own title, with the mark
            shown = _in_view(app, SCHEDULER_PID_BASE + rank)
            assert f"scheduler_TP{rank}" in shown
            assert "<defunct>" in shown


async def test_rank_arguments_are_in_view_in_a_side_pane(make_app) -> None:
    app = make_app(factory_type=RankedFactory)
    async with app.run_test(size=(50, 40)) as pilot:
        await _ready(pilot, app)
        await wait_for(pilot, lambda: "--tp-rank 7" in _in_view(app, SCHEDULER_PID_BASE + 7), "the ranks")
        seen = {_in_view(app, SCHEDULER_PID_BASE + rank) for rank in range(1, GPU_COUNT)}
        assert len(seen) == GPU_COUNT - 1  # every row tells itself apart
        for rank in range(1, GPU_COUNT):
            assert f"--tp-rank {rank}" in _in_view(app, SCHEDULER_PID_BASE + rank)
        # Wide, the whole command reads as before.
        await pilot.resize_terminal(200, 40)
        await wait_for(
            pilot,
            lambda: (
                "python3 -m sglang.srt.managers.scheduler --tp-rank 3"
                in _in_view(app, SCHEDULER_PID_BASE + 3)
            ),
            "the whole command",
        )


async def test_the_kill_confirmation_says_what_is_below(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(50, 40)) as pilot:
        await _ready(pilot, app)
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        more = app.screen.query_one("#confirm-more")
        await wait_for(pilot, lambda: "more rows below" in str(more.render()), "the indicator")
        assert more.region.area
        listed = app.screen.query_one("#confirm-list")
        listed.scroll_end(animate=False)
        await wait_for(pilot, lambda: "below" not in str(more.render()), "scrolled to the end")
        assert "more rows above" in str(more.render())
        await pilot.press("escape")


async def test_esc_clears_the_tags(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await _ready(pilot, app)
        await pilot.press("space", "space")
        host = app.hosts[0]
        assert len(host.tagged) == 2
        await pilot.press("escape")
        await wait_for(pilot, lambda: not host.tagged, "tags cleared")
        assert app.notices[-1][2] == "2 tags cleared"
        assert "tagged" not in str(_procs(app).border_title)


async def test_a_host_number_past_the_last_says_so(make_app) -> None:
    app = make_app(targets=("gpu-node-07", "gpu-node-08"))
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, app)
        await pilot.press("5")
        await wait_for(pilot, lambda: bool(app.notices), "an answer")
        assert app.notices[-1][2] == "5: no such host (2 are open: 1–2)"
        assert app.monitor.active_index == 0
        await pilot.press("2")
        await wait_for(pilot, lambda: app.monitor.active_index == 1, "host 2")


async def test_an_unreachable_host_shows_no_other_hosts_health_change(make_app, clock) -> None:
    app = make_app(targets=("gpu-node-07", "broken-node"))
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready_first(pilot, app)
        health = app.query_one(EndpointPanel)
        app.hosts[0].endpoint_changes.append((clock(), "http://127.0.0.1:30000/health UP → UNHEALTHY (503)"))
        app.host_changed(app.hosts[0])
        await wait_for(pilot, lambda: "UNHEALTHY" in str(health.border_subtitle), "host 1's change")
        await pilot.press("2")
        await wait_for(pilot, lambda: app.monitor.active_index == 1, "host 2")
        await wait_for(pilot, lambda: "UNHEALTHY" not in str(health.border_subtitle), "its own border")
        assert not str(health.border_subtitle)


async def _ready_first(pilot, app: GpuTuiApp) -> None:  # type: ignore[no-untyped-def]
    await wait_for(pilot, lambda: app.hosts[0].snapshot is not None, "first snapshot")
    await wait_for(pilot, lambda: _procs(app).row_count > 0, "process rows")


class SilentHealthFactory(SimFactory):
    """A host whose collector has not reported an endpoint yet (discovery under way)."""

    def __call__(self, target: str) -> Any:
        link = super().__call__(target)
        assert isinstance(link, CountingSimLink)
        snapshot = link._snapshot

        def without_endpoints() -> HostSnapshot:
            return replace(snapshot(), endpoints=())

        link._snapshot = without_endpoints  # type: ignore[method-assign]
        return link


@pytest.mark.parametrize("columns", [50, 120])
async def test_before_discovery_has_looked_the_health_panel_says_it_is_looking(
    make_app, clock, columns
) -> None:
    app = make_app(factory_type=SilentHealthFactory)
    async with app.run_test(size=(columns, 40)) as pilot:
        await _ready(pilot, app)
        health = app.query_one(EndpointPanel)
        await wait_for(pilot, lambda: str(health.render()).startswith(LOOKING_TEXT[:20]), "looking")
        clock.advance(DISCOVERY_SWEEP_S + 1.0)
        await pilot.pause(0.3)
        # The wedge's launcher is in the process list: discovery will probe it, so still looking.
        assert str(health.render()).startswith(LOOKING_TEXT[:20])
        clock.advance(DISCOVERY_FIND_MAX_S)
        await wait_for(pilot, lambda: str(health.render()) == NONE_TEXT, "none found")
