"""The layout uses the width: at 120 and 200 columns the panels share it, commands read whole up to their
useful arguments, and no health state or finding is cut."""

from __future__ import annotations

import re

import pytest
from textual.app import App, ComposeResult
from textual.geometry import Region

from gputui.core.jobs import ProcNode
from gputui.core.model import Proc
from gputui.transports.sim import LAUNCHER_PID, NSYS_PID, SCHEDULER_PID_BASE
from gputui.ui.widgets.endpoint_panel import EndpointPanel
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for

LAUNCHER = "python3 -m sglang.launch_server --model-path /models/GLM-5-NVFP4 --tp 8"
WHOLE_LAUNCHER = LAUNCHER + " --port 30000 --enable-layerwise-nvtx-marker"


def _lines(widget) -> list[str]:  # type: ignore[no-untyped-def]
    region = Region(0, 0, widget.size.width, widget.size.height)
    return [strip.text for strip in widget.render_lines(region)]


@pytest.mark.parametrize("columns", [120, 200])
async def test_the_panels_share_the_width_and_nothing_important_is_cut(make_app, columns: int) -> None:
    app = make_app()
    async with app.run_test(size=(columns, 40)) as pilot:
        procs = app.query_one(ProcessTable)
        health = app.query_one(EndpointPanel)
        findings = app.query_one(FindingsList)
        gpus = app.query_one(GpuPanel)
        await wait_for(pilot, lambda: procs.row_count > 0 and health.samples, "rows and health")
        await wait_for(pilot, lambda: health.samples[0].state == "UNHEALTHY", "the wedged health")
        await wait_for(pilot, lambda: findings.findings, "the findings")
        await pilot.pause(0.3)
        # The GPUs and the health over the findings share the width in halves; the processes take all of it.
        assert abs(gpus.outer_size.width - health.outer_size.width) <= 1
        assert gpus.outer_size.width + health.outer_size.width == columns
        assert procs.outer_size.width == columns
        # Commands read from the program's name on, far enough to tell the processes apart.
        rows = {line.strip("│ ").split()[0]: line for line in _lines(procs)[2:] if line.strip("│ ")}
        assert (WHOLE_LAUNCHER if columns >= 200 else LAUNCHER) in rows[str(LAUNCHER_PID)]
        assert "nsys profile --trace=cuda,nvtx" in rows[str(NSYS_PID)]
        assert "[sglang::scheduler_TP0] <defunct>" in rows[str(SCHEDULER_PID_BASE)]
        assert "1:41228" in rows[str(SCHEDULER_PID_BASE + 1)]  # the per-GPU column, "gpu:MiB"
        # The health state line comes first and whole.
        state_line = _lines(health)[1].strip("│")
        assert re.match(r"UNHEALTHY 503 since \d\d:\d\d:\d\d \([0-9.]+ s\) · 20\.0 s", state_line), state_line
        assert not any(line.strip("│ ").endswith("…") for line in _lines(health))
        # Every finding is whole: its lines wrap inside the panel instead of ending in "…" at its edge.
        width = findings.scrollable_content_region.width
        texts = [findings.render_line(y).text for y in range(findings.lines)]
        assert all(len(text) <= width for text in texts)
        assert "signal or kill its parent 4200" in "".join(texts)
        # Every finding's lines are in the list: shown whole, or (past half the screen) scrolled to.
        assert findings.outer_size.height >= findings.lines + 2 or findings.max_scroll_y > 0
        gpu_lines = [line.strip("│") for line in _lines(gpus)[1:-1]]
        assert gpu_lines[0].split()[:7] == ["#", "memory", "used/total", "mem", "util", "temp", "power"]
        assert "3/49152" in gpu_lines[1]  # GPU0: its scheduler exited whole, its memory is back
        assert "41231/49152" in gpu_lines[2]
        assert all(not line.rstrip().endswith("…") for line in gpu_lines)


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ProcessTable(id="procs")


async def test_a_command_that_arrives_after_the_name_widens_its_column() -> None:
    """A first sample may list a process by name only; when its command line comes, the column grows.

    The rows are updated in place (same pids): the cells change, and so must the column's width, or every
    command stays clipped to the width of ``[python3]`` until something rebuilds the rows (a new sort).
    """
    app = TableApp()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(ProcessTable)
        argv = ("/root/.pyenv/versions/3.11.7/bin/python3", "-m", "sglang.launch_server", "--tp", "8")
        table.show([ProcNode(Proc(pid=10 + i, name="python3")) for i in range(3)])
        await pilot.pause()
        table.show([ProcNode(Proc(pid=10 + i, name="python3", cmdline=argv)) for i in range(3)])
        await pilot.pause()
        assert "python3 -m sglang.launch_server --tp 8" in table.render_line(1).text
