"""A job with hundreds of alike idle helpers, folded into one row under their parent, in each width class
(a side pane, stacked, side by side), compared against stored SVGs; the cursor on the fold."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gputui.transports.sim import ManualClock
from gputui.ui.widgets.process_table import ProcessTable
from tests.pilot.bigjob import HELPER_PIDS, TARGET, BigJobLink
from tests.snapshot.test_snapshots import _app, _until


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Times of day are printed in local time: pin the zone. Audit lines go to the test's directory."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


async def _on_the_fold(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    await _until(pilot, lambda: app.hosts[0].snapshot is not None, "the first snapshot")
    procs = app.query_one(ProcessTable)
    await _until(pilot, lambda: procs.select_pid(HELPER_PIDS[0]), "the helpers' row")
    await pilot.pause(0.2)


@pytest.mark.parametrize(("columns", "rows"), [(50, 40), (120, 40), (200, 50)])
def test_a_folded_job(snap_compare, tmp_path: Path, columns: int, rows: int) -> None:
    """292 idle data loaders as ``⋯ 292 × python3 dataloader.py --worker (idle)``, with their RSS and CPU
    together where the optional columns fit; the one that runs keeps its own row."""
    app = _app((TARGET,), ManualClock(), tmp_path, BigJobLink)
    assert snap_compare(app, terminal_size=(columns, rows), run_before=_on_the_fold)
