"""The GPU panel repaints when what it draws changes, not when a steady figure comes again."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult

from gputui.core.model import Gpu
from gputui.ui.widgets.fmt import sparkline
from gputui.ui.widgets.gpu_panel import GpuPanel, _columns

TOTAL_MIB = 81_559


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield GpuPanel(id="gpus")


def _gpus(used_mib: int) -> tuple[Gpu, ...]:
    return tuple(Gpu(index=i, memory_used_mib=used_mib, memory_total_mib=TOTAL_MIB) for i in range(2))


@pytest.mark.asyncio
async def test_a_steady_host_stops_repainting_once_the_sparkline_is_full_and_a_resize_draws_the_latest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = PanelApp()
    async with app.run_test(size=(60, 12)) as pilot:
        await pilot.pause()
        panel = app.query_one(GpuPanel)
        refreshed: list[int] = []
        refresh = panel.refresh

        def counting(*args: Any, **kwargs: Any) -> Any:
            refreshed.append(1)
            return refresh(*args, **kwargs)

        cells = _columns(panel.size.width)[3]
        history: dict[int, list[int]] = {0: [40_000], 1: [40_000]}
        panel.show(_gpus(40_000), history, {})  # the rows are laid out
        await pilot.pause()
        monkeypatch.setattr(panel, "refresh", counting)
        for step in range(1, cells + 6):
            for samples in history.values():
                samples.append(40_000)
            before = len(refreshed)
            panel.show(_gpus(40_000), history, {})
            # Until the sparkline is full each sample moves it; then the same figures draw the same line.
            assert len(refreshed) == before + (1 if step < cells else 0), step
            await pilot.pause()
        history[1].append(60_000)
        before = len(refreshed)
        panel.show(_gpus(40_000), history, {})
        assert len(refreshed) == before + 1
        await pilot.pause()
        # Wider: more of the history is drawn, the latest the panel was given included.
        await pilot.resize_terminal(160, 12)
        await pilot.pause()
        wide_cells = _columns(panel.size.width)[3]
        assert wide_cells > cells
        lines = panel.render().plain.splitlines()
        assert lines[2].endswith(sparkline(history[1], TOTAL_MIB, wide_cells))
        assert lines[1].endswith(sparkline(history[0], TOTAL_MIB, wide_cells))
