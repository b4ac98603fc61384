"""The fleet view over a host that runs ``gputui exporter``, beside recorded DCGM hosts: its row counts the
findings and the memory dead processes hold, the ``dead`` sort puts it first, and its notes carry the
findings in the monitor's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.transports.sim import ManualClock
from gputui.ui.widgets.fleet_notes import FleetNotes
from gputui.ui.widgets.fleet_table import FleetTable
from tests.data.prometheus import eval_time, load_answer
from tests.data.prometheus.exported import exposition_text, scraped_answer, wedged_host
from tests.pilot.conftest import wait_for
from tests.pilot.test_fleet import fleet_app


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path


async def test_an_exporter_host_is_sorted_by_dead_memory_and_its_findings_shown(
    clock: ManualClock, state_dir: Path
) -> None:
    document = load_answer()
    now = eval_time(document)
    host = wedged_host(now=now, hostname="gpu-x")
    ours = scraped_answer(exposition_text(host, now=now, hostname="gpu-x"), "gpu-x:10191", now=now)
    document["data"]["result"] += ours["data"]["result"]
    app, fleet, _ = fleet_app(clock, state_dir, document)
    async with app.run_test(size=(200, 40)) as pilot:
        table = fleet.query_one(FleetTable)
        await wait_for(pilot, lambda: table.row_count == 5, "the recorded hosts and gpu-x")
        while fleet.sort_mode != "dead":
            await pilot.press("s")
        await wait_for(
            pilot, lambda: table.coordinate_to_cell_key((0, 0)).row_key.value == "gpu-x", "gpu-x on top"
        )
        cells = [cell.plain for cell in table.cells("gpu-x")]
        assert " 5, 3.0G dead" in cells  # 2048 MiB held by the defunct leader, 1000 MiB ghost memory
        table.select_host("gpu-x")
        notes = fleet.query_one(FleetNotes)
        wanted = {f.detail for f in host.findings}

        def shown() -> str:
            return str(notes.render())

        # A defunct leader whose threads have been in the driver for 10 min: the monitor says NOT READY too.
        await wait_for(pilot, lambda: "gputui exporter: NOT READY: " in shown(), "the exporter's verdict")
        assert all(detail[:60] in shown() for detail in wanted), shown()
