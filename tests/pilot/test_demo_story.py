"""The demo tells its story truthfully: the wedged host's GPU1 took a contained ECC error, so after the kill
it stays NOT READY until ``R`` resets it (the simulated collector plans and "runs" the reset as the real one
answers; nothing real is run), and its GPU view shows the fitness that says so."""

from __future__ import annotations

import json
from pathlib import Path

from gputui.agent.protocol import RESET_GO
from gputui.transports.sim import DRAIN_S, IDLE_MIB, LAUNCHER_PID, ManualClock
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.confirm_reset import ConfirmResetScreen
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.gpu_panel import GpuPanel

from .conftest import CountingSimLink, SimFactory, wait_for

WIDE = (120, 40)


class DemoFactory(SimFactory):
    """The demo's hosts as ``gputui --demo`` opens them: the wedge starts with GPU1's fault."""

    def __call__(self, target: str) -> CountingSimLink:
        link = CountingSimLink(target, self.options, clock=self.clock, gpu_fault=True)
        self.links[target] = link
        return link


def _line(app) -> str:  # type: ignore[no-untyped-def]
    return app.query_one(CleanSlateLine).shown.plain


async def _drain(pilot, clock: ManualClock) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(DRAIN_S / 0.5) + 2):
        clock.advance(0.5)
        await pilot.pause(0.1)


async def test_the_faulted_gpu_stays_not_ready_after_the_kill_until_r_resets_it(
    make_app, clock: ManualClock, tmp_path: Path
) -> None:
    app = make_app(factory_type=DemoFactory)
    async with app.run_test(size=WIDE) as pilot:
        host = app.hosts[0]
        await wait_for(pilot, lambda: host.snapshot is not None and host.snapshot.verdict is not None, "data")
        assert host.snapshot.verdict.not_ready[0].startswith("GPU1 needs a reset (row remap pending;")
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: host.snapshot.process(LAUNCHER_PID) is None, "the kill")
        await _drain(pilot, clock)
        await wait_for(pilot, lambda: host.check is not None and not host.check.running, "the check's end")
        await wait_for(
            pilot, lambda: all(g.memory_used_mib == IDLE_MIB for g in host.snapshot.gpus), "memory back"
        )
        # Every worker gone, memory back: still NOT READY, for GPU1's own fitness, never CLEAN.
        assert host.check.clean is False
        verdict = host.snapshot.verdict
        assert not verdict.clean
        assert verdict.gpus_at_baseline == 8  # memory: every GPU's is back, GPU1's fitness is its own reason
        assert [r.split(" (")[0] for r in verdict.not_ready] == ["GPU1 needs a reset"]
        assert verdict.reasons == verdict.not_ready
        assert _line(app).startswith("NOT READY after ")
        assert "GPU1 needs a reset" in _line(app)
        assert not any("CLEAN ✓" in n[2] for n in app.notices)

        await pilot.press("g", "down", "R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmResetScreen), "the reset plan")
        plan = app.screen.plan
        link = app.factory.links["gpu-node-07"]
        assert link.commands[-1] == {"cmd": "reset_plan", "gpus": ["1"]}
        assert plan.verdict == RESET_GO
        uuid = plan.gpus[0]["uuid"]
        assert plan.step_argvs == [
            ["/usr/bin/nvidia-smi", "-pm", "0", "-i", uuid],
            ["/usr/bin/nvidia-smi", "-r", "-i", uuid],
            ["/usr/bin/nvidia-smi", "-pm", "1", "-i", uuid],
        ]
        await pilot.press("y")
        await wait_for(pilot, lambda: any(n[1] == "reset" for n in app.notices), "the reset's outcome")
        assert [n for n in app.notices if n[1] == "reset"][-1][2] == (
            "gpu-node-07: reset done, verified clean after"
        )
        clock.advance(0.5)
        await wait_for(pilot, lambda: host.snapshot.verdict.clean, "the clean verdict")
        await wait_for(
            pilot, lambda: _line(app).startswith("CLEAN: 8/8 GPUs at baseline"), "CLEAN on the line"
        )
        fitness = host.snapshot.gpus[1].fitness
        assert fitness.recovery_action == 0
        assert fitness.remap_pending is False
        assert [x.cleared for x in fitness.xids] == ["GPU reset since"]
    audit = [json.loads(line) for line in (tmp_path / "audit" / "audit.jsonl").read_text().splitlines()]
    resets = [line for line in audit if line.get("action") == "gpu_reset"]
    assert [line["stage"] for line in resets] == ["intent"] * 3 + ["reset"] * 3


async def test_a_reset_before_the_kill_is_a_reboot_for_the_stuck_holders(make_app) -> None:
    """The plan is the collector's own rule: a defunct rank with threads in the driver holds the GPU."""
    app = make_app(factory_type=DemoFactory)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: len(app.query_one(GpuPanel).gpus) > 0, "GPU rows")
        await pilot.press("g", "down", "R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmResetScreen), "the reset plan")
        assert app.screen.plan.verdict == "reboot"
        text = "\n".join(str(w.render()) for w in app.screen.query("Static"))
        assert "4241" in text
        assert "stuck in the driver (state Z)" in text
        await pilot.press("y")
        await pilot.pause(0.2)
        assert isinstance(app.screen, ConfirmResetScreen)  # nothing to confirm
        assert not [c for c in app.factory.links["gpu-node-07"].commands if c["cmd"] == "reset_run"]


async def test_the_gpu_view_shows_each_simulated_gpus_fitness(make_app) -> None:
    app = make_app(factory_type=DemoFactory)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: len(app.query_one(GpuPanel).gpus) > 0, "GPU rows")
        await pilot.press("g", "down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        await pilot.pause(0.2)
        section = app.screen.query_one("#gpu-fitness")
        assert section.display
        text = str(section.render())
        assert "needs a reset" in text
        assert "Xid 94" in text
        await pilot.press("escape", "up", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "GPU0's view")
        await pilot.pause(0.2)
        section = app.screen.query_one("#gpu-fitness")
        assert section.display
        assert "needs a reset" not in str(section.render())


async def test_at_50_columns_each_figure_line_keeps_to_its_row(make_app, clock: ManualClock) -> None:
    """The GPU view in a 50-column pane: a figures line never wraps a word onto its chart's row."""
    app = make_app(factory_type=DemoFactory, targets=("gpu-node-08",))
    async with app.run_test(size=(50, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.query_one(GpuPanel).gpus) > 0, "GPU rows")
        for _ in range(12):
            clock.advance(1.0)
            await pilot.pause(0.05)
        await pilot.press("g", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        await pilot.pause(0.3)
        for label in ("memory", "utilisation", "power", "temperature"):
            figures = app.screen.query_one(f"#gpu-{label}-figures")
            chart = app.screen.query_one(f"#gpu-{label}")
            assert figures.size.height == 1, label
            assert chart.region.y == figures.region.y + 1, label
            assert str(figures.render()).startswith(f"{label} ")
