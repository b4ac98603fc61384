"""The README's screenshots are written by the app through ``screenshots/make_screenshots.py``: the script
runs whole into a temporary folder and writes every picture it names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_screenshot_script_writes_every_picture(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "screenshots" / "make_screenshots.py"), str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    written = [Path(line) for line in done.stdout.splitlines()]
    assert {p.name for p in written} == {p.name for p in (REPO / "screenshots").glob("*.svg")}
    assert all(p.parent == tmp_path and p.stat().st_size > 10_000 for p in written)
