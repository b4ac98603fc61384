"""A kill from the TUI records what the job had in /dev/shm before its signals, for `gputui check`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gputui.transports.sim import LAUNCHER_PID
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import CountingSimLink, SimFactory, wait_for

WIDE = (120, 40)
SEGMENT = {
    "path": "/dev/shm/sgl_shm_7",
    "name": "sgl_shm_7",
    "kind": "segment",
    "dev": 5,
    "inode": 77,
    "uid": 0,
}


class ShmSimLink(CountingSimLink):
    """A simulated host whose collector answers the leftovers scan: the job maps one segment."""

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if command.get("cmd") == "leftovers_scan":
            self.commands.append(dict(command))
            return {"segments": [dict(SEGMENT, size_bytes=1 << 20, open_by=[LAUNCHER_PID])], "mps": []}
        return super().request(command, timeout_s)


class ShmFactory(SimFactory):
    def __call__(self, target: str) -> Any:
        link = ShmSimLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link


async def test_a_tui_tree_kill_records_the_jobs_segments_first(make_app, tmp_path: Path) -> None:
    app = make_app(factory_type=ShmFactory)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        assert app.query_one(ProcessTable).select_pid(LAUNCHER_PID)
        await pilot.press("T")
        assert isinstance(app.screen, ConfirmKillScreen)
        await pilot.press("y")
        record = tmp_path / "state" / "gputui" / "leftovers.json"
        await wait_for(pilot, record.exists, "the leftovers record")
        link = app.factory.links["gpu-node-07"]
        names = [c["cmd"] for c in link.commands]
        assert names.index("leftovers_scan") < names.index("kill")
        assert LAUNCHER_PID in link.commands[names.index("leftovers_scan")]["pids"]
    entry = json.loads(record.read_text())["gpu-node-07"]
    assert entry["segments"] == [dict(SEGMENT, size_bytes=1 << 20)]
