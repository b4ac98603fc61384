"""The driver's command-line tools as this host's PATH finds them."""

from __future__ import annotations

import os


def which(name: str) -> str | None:
    """The executable ``name`` on PATH, as a shell would find it."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None
