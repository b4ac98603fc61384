"""Typed values from what a collector sent: every field of the model is read through these, so a value of the
wrong type becomes a missing value (None), never an exception or a fake zero."""

from __future__ import annotations

from typing import Any


def opt_int(value: Any) -> int | None:
    """A whole number from a collector, None when absent or not a number (booleans are not numbers)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinity
        return None


def ports_of(value: Any) -> tuple[int, ...] | None:
    """TCP ports from a collector: the valid ones (1..65535), sorted and distinct; None when not a list."""
    if not isinstance(value, (list, tuple)):
        return None
    valid = {p for p in value if isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536}
    return tuple(sorted(valid))


def opt_float(value: Any) -> float | None:
    """A number from a collector, None when absent or not a number (booleans are not numbers)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def opt_str(value: Any) -> str | None:
    """A string from a collector, None when absent."""
    return None if value is None else str(value)
