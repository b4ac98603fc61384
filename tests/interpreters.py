"""The interpreters the suite runs the collector under, found on this machine rather than assumed."""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
from pathlib import Path


def _pyenv_roots() -> list[str]:
    roots = [os.environ.get("PYENV_ROOT") or "", str(Path.home() / ".pyenv")]
    return sorted({root for root in roots if root})


@functools.cache
def find_python38() -> str | None:
    """A Python 3.8 interpreter, or None where there is none.

    Looks in pyenv's versions directory (``$PYENV_ROOT``, ``~/.pyenv``), then for ``python3.8`` on PATH and
    in /usr/bin, and keeps the first that really is 3.8 (a pyenv shim may not be).
    """
    pattern = "versions/3.8*/bin/python3.8"
    candidates = sorted(p for root in _pyenv_roots() for p in glob.glob(os.path.join(root, pattern)))
    candidates += [p for p in (shutil.which("python3.8"), "/usr/bin/python3.8") if p]
    for candidate in candidates:
        try:
            done = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.stdout.strip() == "True":
            return candidate
    return None


def python38() -> str:
    """A Python 3.8 interpreter: the oldest the collector supports, which the suite must run it under.

    The test fails, with one line naming what is missing, where there is none (``find_python38``).
    """
    python = find_python38()
    if python is None:
        import pytest  # only where a test asks: the benchmarks use find_python38 without pytest

        roots = " or ".join(_pyenv_roots())
        pytest.fail(
            f"no Python 3.8: none in {roots} versions/3.8*/bin and no python3.8 on PATH (install one, e.g. "
            "pyenv install 3.8): the collector must be checked on the oldest Python it supports",
            pytrace=False,
        )
    return python
