"""In the TUI, a kill whose audit log is planted (a FIFO, a symlink) is refused in one line, nothing sent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputui.transports.sim import LAUNCHER_PID
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for


@pytest.mark.parametrize("planted", ["fifo", "symlink"])
async def test_a_planted_audit_log_refuses_the_kill(make_app, tmp_path: Path, planted: str) -> None:
    audit_dir = tmp_path / "planted"
    audit_dir.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    if planted == "fifo":
        os.mkfifo(audit_dir / "audit.jsonl")
    else:
        elsewhere.write_text("")
        (audit_dir / "audit.jsonl").symlink_to(elsewhere)
    app = make_app(audit_dir=audit_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        assert app.query_one(ProcessTable).select_pid(LAUNCHER_PID)
        await pilot.press("T")
        assert isinstance(app.screen, ConfirmKillScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: any("kill refused" in n[2] for n in app.notices), "the refusal")
        (message,) = [n[2] for n in app.notices if "kill refused" in n[2]]
        kind = "a FIFO, not a regular file" if planted == "fifo" else "a symbolic link (not followed)"
        assert f"audit.jsonl: {kind}" in message
        assert "\n" not in message
        assert not app.hosts[0].kills  # nothing under way: nothing was sent
        snapshot = app.hosts[0].snapshot
        assert snapshot is not None
        assert snapshot.process(LAUNCHER_PID) is not None  # still there
    if planted == "symlink":
        assert elsewhere.read_text() == ""
