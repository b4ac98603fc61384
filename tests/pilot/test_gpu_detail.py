"""The GPU view (Enter on a GPU): ten minutes of history, bounded, and the processes holding the GPU with
their whole command lines, read again from the host when the collector cut them on the wire."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from gputui.core.model import HostSnapshot, replace
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.widgets.history_chart import HistoryChart, chart_rows
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import CountingSimLink, SimFactory, wait_for

WIDE = (120, 40)
CUT_PID = 5400
"""The healthy demo host's process on GPU 6, whose command line the link below cuts."""
WHOLE = ("python3", "serve.py", "--model", "/models/Qwen3-32B", "--tp-rank", "3")


class CuttingLink(CountingSimLink):
    """Streams pid 5400 with its command line cut (as the collector cuts a long one on the wire) and
    answers the ``process`` command with the whole of it."""

    def _cut(self, snapshot: HostSnapshot) -> HostSnapshot:
        procs = tuple(
            replace(p, cmdline=WHOLE[:2], cmdline_truncated=True) if p.pid == CUT_PID else p
            for p in snapshot.processes
        )
        return replace(snapshot, processes=procs)

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        snapshot = super().next_snapshot(timeout_s)
        return None if snapshot is None else self._cut(snapshot)

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if command.get("cmd") == "process":
            self.commands.append(dict(command))
            return {"pid": command["pid"], "cmdline": list(WHOLE), "cmdline_truncated": False}
        result = super().request(command, timeout_s)
        if command.get("cmd") == "sample":
            snapshot = self._cut(HostSnapshot.from_dict(result["snapshot"]))
            result = {"snapshot": snapshot.to_dict()}
        return result


class CuttingFactory(SimFactory):
    def __call__(self, target: str) -> CountingSimLink:
        link = CuttingLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link


def _text(screen: GpuDetailScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def _on_screen(app) -> str:  # type: ignore[no-untyped-def]
    return app.export_screenshot().replace("&#160;", " ")


async def test_the_gpu_view_shows_history_and_the_whole_command_of_each_holder(make_app, clock) -> None:
    app = make_app(targets=("gpu-node-08",), factory_type=CuttingFactory)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        for _ in range(5):  # five seconds of samples: five points of history
            clock.advance(1.0)
            await pilot.pause(0.1)
        await pilot.press("g", *["down"] * 6, "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        screen = app.screen
        assert isinstance(screen, GpuDetailScreen)
        assert screen.index == 6
        assert "GPU 6 · NVIDIA RTX PRO 6000 Blackwell · gpu-node-08" in _text(screen, "#gpu-detail-title")
        memory = _text(screen, "#gpu-memory-figures")
        assert memory.startswith("memory      1027 MiB now")
        assert "over 5.0 s" in memory
        chart = screen.query_one("#gpu-memory", HistoryChart)
        assert len(chart.data) >= 5
        assert chart.top == 49152  # on the scale of the GPU's memory: a flat line sits at 2 %
        assert _text(screen, "#gpu-power-figures").startswith("power       ")
        link = app.factory.links["gpu-node-08"]
        await wait_for(pilot, lambda: "--tp-rank 3" in _on_screen(app), "the whole command")
        holders = _on_screen(app)
        assert "python3 serve.py --model /models/Qwen3-32B --tp-rank 3" in holders
        assert "1024" in holders  # what it holds on this GPU
        asked = [c for c in link.commands if c.get("cmd") == "process"]
        assert [c["pid"] for c in asked] == [CUT_PID]  # asked once, however many snapshots came since
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.monitor, "the monitor")


async def test_the_kill_confirmation_reads_the_whole_command_of_a_cut_one(make_app, clock) -> None:
    app = make_app(targets=("gpu-node-08",), factory_type=CuttingFactory)
    async with app.run_test(size=WIDE) as pilot:
        procs = app.query_one(ProcessTable)
        await wait_for(pilot, lambda: procs.row_count > 0, "process rows")
        assert procs.select_pid(CUT_PID)
        await pilot.pause()
        assert "python3 serve.py…" in procs.get_cell(str(CUT_PID), "command").plain  # cut: said so
        await pilot.press("k")
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        await wait_for(pilot, lambda: CUT_PID in screen.texts, "the whole command line")
        await pilot.pause()
        assert "python3 serve.py --model /models/Qwen3-32B --tp-rank 3" in _on_screen(app)
        await pilot.press("escape")


def test_a_chart_is_on_a_fixed_scale_and_keeps_the_peak_of_each_stretch() -> None:
    assert chart_rows([50.0, 50.0], top=100.0, width=4, height=2) == ["    ", "  ██"]
    assert chart_rows([100.0], top=100.0, width=2, height=2) == [" █", " █"]
    assert chart_rows([0.0, 2.0, 0.0, 0.0], top=8.0, width=2, height=1) == ["▂▁"]  # 4 values in 2 columns
    assert chart_rows([0.0, 0.0], top=8.0, width=4, height=2) == ["    ", "  ▁▁"]  # where the data starts
    assert chart_rows([], top=0.0, width=3, height=1) == ["   "]
