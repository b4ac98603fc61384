"""The verdict's four levels and their exit codes (``verdicts`` says each; the model names a verdict's level
from its three facts with ``level_of``)."""

from __future__ import annotations

CLEAN = "CLEAN"
NOT_CLEAN = "NOT CLEAN"
NOT_READY = "NOT READY"
CANNOT_TELL = "CANNOT TELL"
LEVELS = (CLEAN, NOT_CLEAN, NOT_READY, CANNOT_TELL)
"""Least severe first: a headline names the most severe level that applies."""
EXIT_CODES = {CLEAN: 0, NOT_CLEAN: 1, NOT_READY: 1, CANNOT_TELL: 2}


def level_of(clean: bool, known: bool, not_ready: bool) -> str:
    """The level of a verdict from its three facts (the most severe that applies)."""
    if not known:
        return CANNOT_TELL
    if not_ready:
        return NOT_READY
    return CLEAN if clean else NOT_CLEAN
