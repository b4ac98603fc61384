"""A terminal that reports no size (a pty opened without a window size, as some harnesses and ssh setups
give): the TUI draws its screen once at 80×24 and then only what changes, not the whole screen without end,
and ``q`` leaves."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_sizeless_terminal_is_drawn_once_not_for_ever(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        TERM="xterm-256color",
        HOME=str(tmp_path),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    master, slave = pty.openpty()  # no TIOCSWINSZ: the pty says 0×0
    app = subprocess.Popen(
        [sys.executable, "-m", "gputui.cli", "--demo"],
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    try:
        drawn: list[tuple[float, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < 8.0:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                chunk = os.read(master, 65536)
                assert chunk, "the TUI exited"
                drawn.append((time.monotonic() - started, len(chunk)))
        late = sum(size for at, size in drawn if at >= 4.0)
        # Four seconds of the demo's changes are a few tens of kB; a screen redrawn without end is megabytes.
        assert late < 400_000, late
        os.write(master, b"q")
        assert app.wait(10) == 0
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        os.close(master)
