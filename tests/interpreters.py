"""The interpreters the suite runs the collector under, found on this machine rather than assumed."""

from __future__ import annotations

import functools
import glob
import os
import shutil
from pathlib import Path

import pytest


@functools.cache
def _find_python38() -> str | None:
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    found = sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.8*", "bin", "python3.8")))
    found = [path for path in found if os.access(path, os.X_OK)]
    if found:
        return found[0]
    return shutil.which("python3.8")


def python38() -> str:
    """A Python 3.8 interpreter: the oldest the collector supports, which the suite must run it under.

    Looked for in pyenv's versions directory (``$PYENV_ROOT``, else ``~/.pyenv``), then as ``python3.8`` on
    PATH; the test fails, with one line naming what is missing, where there is none.
    """
    python = _find_python38()
    if python is None:
        pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
        pytest.fail(
            f"no Python 3.8: none in {pyenv_root}/versions/3.8*/bin and no python3.8 on PATH "
            "(install one, e.g. pyenv install 3.8)",
            pytrace=False,
        )
    return python
