"""``/etc/hosts`` planted as a FIFO or grown huge (RELIABILITY 53): the typo hint that reads it
(``gputui chek`` is "check" unless a host of that name is known) answers at once, in one line, in a mount
namespace of the test's own where the planted file is bind-mounted over ``/etc/hosts``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PLANT = r"""
set -e
case "$PLANTED" in
  fifo) mkfifo "$WORK/hosts" ;;
  huge) truncate -s 600M "$WORK/hosts" ;;
esac
mount --bind "$WORK/hosts" /etc/hosts
exec "$@"
"""


@pytest.mark.parametrize("planted", ["fifo", "huge"])
def test_a_planted_etc_hosts_never_holds_the_typo_hint(tmp_path: Path, planted: str) -> None:
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux unshare is needed for a mount namespace"
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        PLANTED=planted,
        WORK=str(tmp_path),
        HOME=str(tmp_path),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    started = time.monotonic()
    done = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", PLANT, "plant"]
        + [sys.executable, "-m", "gputui.cli", "chek"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    assert time.monotonic() - started < 20
    said = (done.stdout + done.stderr).strip().splitlines()
    assert said == ["gputui: unknown command 'chek' (did you mean check?)"], said
