"""The wide layout at 120 columns: room for the command, the health line's "since" whole."""

from __future__ import annotations

import re

from textual.geometry import Region

from gputui.transports.sim import LAUNCHER_PID, SCHEDULER_PID_BASE
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.health_panel import HealthPanel
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for


def _lines(widget) -> list[str]:  # type: ignore[no-untyped-def]
    region = Region(0, 0, widget.size.width, widget.size.height)
    return [strip.text for strip in widget.render_lines(region)]


async def test_at_120_columns_the_command_and_the_health_state_are_readable(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        procs = app.query_one(ProcessTable)
        health = app.query_one(HealthPanel)
        await wait_for(pilot, lambda: procs.row_count > 0 and health.samples, "rows and health")
        await wait_for(pilot, lambda: health.samples[0].state == "UNHEALTHY", "the wedged health")
        await pilot.pause(0.2)
        command_width = procs.columns["command"].get_render_width(procs)
        assert command_width >= 33
        # Rendered with the border: "│   4200  root  …", cut at the panel's right edge.
        rows = {line.strip("│ ").split()[0]: line for line in _lines(procs)[2:] if line.strip("│ ")}
        assert "python3 -m sglang.launch_serv" in rows[str(LAUNCHER_PID)]
        assert "[sglang::scheduler_TP0] <de" in rows[str(SCHEDULER_PID_BASE)]
        assert "0:41236" in rows[str(SCHEDULER_PID_BASE)]  # the per-GPU column, "gpu:MiB"
        state_line = _lines(health)[2].strip("│")
        assert re.match(r"  UNHEALTHY 503 since \d\d:\d\d:\d\d \([0-9.]+ s\)", state_line), state_line
        gpu_lines = [line.strip("│") for line in _lines(app.query_one(GpuPanel))[1:-1]]
        assert gpu_lines[0].split() == ["#", "memory", "used/total", "mem", "util", "temp", "hist"]
        assert "41239/49152" in gpu_lines[1]
        assert all(not line.rstrip().endswith("…") for line in gpu_lines)
