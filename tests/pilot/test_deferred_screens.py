"""What the first screen does not need stays unloaded: the dialogs, the help, the GPU view and the fleet view
are imported when first shown (each module loaded is resident for the whole run), and still open on their
keys. The Footer keeps no keys of its earlier compositions.

Checked in a fresh interpreter: this one has imported every screen already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from gputui.ui.widgets.key_footer import WATCHERS, KeyFooter

from .conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
DEFERRED = (
    "gputui.ui.screens.help",
    "gputui.ui.screens.gpu_detail",
    "gputui.ui.screens.confirm_kill",
    "gputui.ui.screens.confirm_reset",
    "gputui.ui.screens.choose_owner",
    "gputui.ui.screens.host_key",
    "gputui.ui.screens.fleet",
)

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys

    from gputui.core.link import LinkOptions
    from gputui.transports.sim import ManualClock, SimLink
    from gputui.ui.app import GpuTuiApp

    DEFERRED = {deferred!r}
    clock = ManualClock()
    options = LinkOptions(memory_interval_s=0.05, process_interval_s=0.05)
    app = GpuTuiApp(
        ["gpu-node-07"], lambda t: SimLink(t, options, clock=clock), clock=clock, audit=False,
        memory_interval_s=0.05, process_interval_s=0.05,
    )
    print("built:", sorted(m for m in DEFERRED if m in sys.modules))

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                if app.monitor.query_one("#procs").row_count:
                    break
            print("running:", sorted(m for m in DEFERRED if m in sys.modules))
            await pilot.press("question_mark")
            await pilot.pause()
            print("help:", type(app.screen).__name__)
            await pilot.press("escape", "g", "enter")
            for _ in range(40):
                await pilot.pause(0.05)
                if type(app.screen).__name__ == "GpuDetailScreen":
                    break
            print("gpu:", type(app.screen).__name__)

    asyncio.run(main())
    """
)


def test_the_first_screen_loads_no_dialog_help_gpu_or_fleet_view_and_their_keys_still_open_them(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(deferred=DEFERRED)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "built: []" in lines
    assert "running: []" in lines
    assert "help: HelpScreen" in lines
    assert "gpu: GpuDetailScreen" in lines


async def test_the_footer_holds_only_the_keys_it_shows(make_app) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        footer = app.monitor.query_one(KeyFooter)
        await wait_for(pilot, lambda: bool(footer.children), "the footer's keys")
        for _ in range(3):  # each change of the bindings recomposes: new keys, the old ones removed
            app.monitor.refresh_bindings()
            await pilot.pause(0.1)
        watched = [node for node, _callback in getattr(footer, WATCHERS, {}).get("compact", [])]
        assert watched
        assert all(node.parent is footer for node in watched)
        assert len(watched) <= len(footer.children)
