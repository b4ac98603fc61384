"""An unreachable host's cause, said once where a person reads it: ``check`` prints the verdict (the same
sentence as every view: "cannot tell: no data: CAUSE") on stdout, and the error line on stderr, except where
both streams are one terminal, which would show the cause twice."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CAUSE = "Could not resolve hostname nosuch.invalid"


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ,
        PYTHONPATH=str(REPO),
        HOME=str(tmp_path),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )


def test_piped_streams_each_carry_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gputui.cli", "check", "--ssh-client", "openssh", "nosuch.invalid"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(tmp_path),
        cwd=REPO,
    )
    assert done.returncode == 2
    assert done.stdout.startswith("cannot tell: no data: nosuch.invalid: ")
    assert CAUSE in done.stdout
    assert done.stderr.count(CAUSE) == 1


def test_one_terminal_shows_it_once(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gputui.cli", "check", "--ssh-client", "openssh", "nosuch.invalid"],
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            env=_env(tmp_path),
            cwd=REPO,
        )
        os.close(slave)
        slave = -1
        screen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
        assert proc.wait(timeout=60) == 2
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    text = screen.decode("utf-8", "replace")
    assert text.count(CAUSE) == 1, text
    assert "cannot tell: no data: nosuch.invalid: " in text
