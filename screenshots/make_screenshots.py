"""Regenerate the README screenshots: the app itself, run from ``--demo`` and driven with Pilot.

    .venv/bin/python screenshots/make_screenshots.py [OUTPUT_DIR]

Writes wedged.svg (the wedged sglang host, the three demo hosts open), confirm.svg (the confirmation ``X``
opens), not-ready.svg (after confirming: every worker gone, memory drained, and still NOT READY: GPU1 needs a
reset), reset.svg (``R`` on GPU1: the collector's reset plan), clean.svg (the reset done, then ``c``: the
clean-slate receipt), gpu.svg (Enter on GPU1 then: its history through the wedge, the kill, the drain and the
reset, and its fitness), narrow.svg (a 50-column tmux pane), narrow-clean.svg (the same pane after ``X``,
``y``, ``R``, ``y``: CLEAN, its notifications at the top) and fleet.svg (the fleet view over an answer
recorded from a real Prometheus).
The demo's clock is frozen and moved by the script, so the pictures are the same on every run.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputui.commands.grammar.parser import build_parser  # noqa: E402
from gputui.commands.tui import DEMO_WEDGE_AFTER_S, build_app  # noqa: E402
from gputui.core.servers import DEFAULT_STALL_AFTER_S  # noqa: E402
from gputui.transports.sim import DRAIN_S, LAUNCHER_PID, ManualClock  # noqa: E402
from gputui.ui.screens.confirm_reset import ConfirmResetScreen  # noqa: E402
from gputui.ui.screens.gpu_detail import GpuDetailScreen  # noqa: E402

DEADLINE_S = 30.0


async def _until(pilot, condition, what: str) -> None:  # type: ignore[no-untyped-def]
    waited_s = 0.0
    while not condition():
        if waited_s > DEADLINE_S:
            raise SystemExit(f"make_screenshots: timed out waiting for {what}")
        await pilot.pause(0.05)
        waited_s += 0.05
    await pilot.pause(0.3)


async def _serve_then_wedge(pilot, clock: ManualClock) -> None:  # type: ignore[no-untyped-def]
    """Let the demo host serve for a few (simulated) seconds, then wedge, and stay until its server has
    generated nothing for the stall window: the history shows both, the server reads STALLED."""
    app = pilot.app
    await _until(pilot, lambda: all(h.snapshot is not None for h in app.hosts), "first snapshots")
    for _ in range(int(DEMO_WEDGE_AFTER_S + DEFAULT_STALL_AFTER_S) + 4):
        clock.advance(1.0)
        await pilot.pause(0.15)
    host = app.hosts[0]
    await _until(pilot, lambda: host.snapshot.process(LAUNCHER_PID + 40).state == "Z", "the wedge")
    await _until(pilot, lambda: host.snapshot.endpoints[0].state == "STALLED", "the stalled server")


async def _kill_then_reset(pilot, clock: ManualClock, out_dir: Path | None) -> None:  # type: ignore[no-untyped-def]
    """``X`` confirmed and drained (NOT READY: GPU1's fitness), then ``R`` on GPU1 confirmed (the simulated
    reset); with ``out_dir``, not-ready.svg and reset.svg on the way."""
    app = pilot.app
    host = app.hosts[0]
    await _until(pilot, lambda: host.snapshot.process(LAUNCHER_PID) is None, "the kill")
    for _ in range(int(DRAIN_S / 0.5) + 1):
        clock.advance(0.5)
        await pilot.pause(0.2)
    await _until(pilot, lambda: host.check is not None and host.check.clean is False, "NOT READY")
    if out_dir is not None:
        app.save_screenshot("not-ready.svg", str(out_dir))
    await pilot.press("g", "down", "R")
    await _until(pilot, lambda: isinstance(app.screen, ConfirmResetScreen), "the reset plan")
    if out_dir is not None:
        app.save_screenshot("reset.svg", str(out_dir))
    await pilot.press("y")
    await _until(pilot, lambda: any(n[1] == "reset" for n in app.notices), "the reset")
    clock.advance(0.5)
    await _until(pilot, lambda: host.snapshot.verdict.clean, "the clean verdict")


async def fleet_screenshot(out_dir: Path) -> None:
    """The fleet view over an answer recorded from a real Prometheus (``tests/data/prometheus/demo.json``):
    sixteen hosts sorted by memory, the busiest one's GPUs below."""
    from gputui.ui.widgets.fleet_table import FleetTable
    from tests.data.prometheus import fetcher_of, load_answer, recorded_fleet_app

    app, fleet = recorded_fleet_app(
        fetcher_of(load_answer("demo.json")), ManualClock(), Path(os.environ["XDG_STATE_HOME"]) / "audit"
    )
    async with app.run_test(size=(120, 40)) as pilot:
        table = fleet.query_one(FleetTable)
        await _until(pilot, lambda: table.row_count == 16, "the fleet's rows")
        await pilot.press("s")
        table.move_cursor(row=0)
        await pilot.pause(0.3)
        app.save_screenshot("fleet.svg", str(out_dir))


async def main(out_dir: Path) -> None:
    os.environ.setdefault("TZ", "UTC")
    time.tzset()
    # The demo's kill is audited like any other: keep those lines out of the user's real audit log.
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="gputui-screenshots-")
    args = build_parser(None).parse_args(["--demo", "--interval", "0.1", "--process-interval", "0.1"])

    clock = ManualClock()
    app = build_app(args, clock=clock)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await _serve_then_wedge(pilot, clock)
        app.save_screenshot("wedged.svg", str(out_dir))
        await pilot.press("X")
        await pilot.pause(0.3)
        app.save_screenshot("confirm.svg", str(out_dir))
        await pilot.press("enter")
        host = app.hosts[0]
        await _kill_then_reset(pilot, clock, out_dir)
        await pilot.press("c")
        await _until(pilot, lambda: host.check is not None and host.check.clean, "the clean slate")
        await pilot.pause(0.3)
        app.save_screenshot("clean.svg", str(out_dir))
        await pilot.press("enter")  # the GPUs keep the focus and GPU1 the cursor since R
        await _until(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        if app.screen.index != 1:
            raise SystemExit(f"make_screenshots: the GPU view opened GPU {app.screen.index}, not GPU1")
        app.save_screenshot("gpu.svg", str(out_dir))

    clock = ManualClock()
    args = build_parser(None).parse_args(["--demo", "--interval", "0.1", "gpu-node-07"])
    app = build_app(args, clock=clock)
    async with app.run_test(size=(50, 40), notifications=True) as pilot:
        await _serve_then_wedge(pilot, clock)
        app.save_screenshot("narrow.svg", str(out_dir))
        await pilot.press("X", "y")
        await _kill_then_reset(pilot, clock, None)
        await pilot.pause(0.3)
        app.save_screenshot("narrow-clean.svg", str(out_dir))
    await fleet_screenshot(out_dir)
    names = (
        "wedged.svg",
        "confirm.svg",
        "not-ready.svg",
        "reset.svg",
        "clean.svg",
        "gpu.svg",
        "narrow.svg",
        "narrow-clean.svg",
        "fleet.svg",
    )
    for name in names:
        print(out_dir / name)


if __name__ == "__main__":
    target_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    target_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target_dir))
