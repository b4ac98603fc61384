"""Typed values from what a collector sent, and the model's own objects back as JSON-ready values: every field
of the model is read through these, so a value of the wrong type becomes a missing value (None), never an
exception or a fake zero, and every string is made visible (``core.text.safe``) on its way into the model."""

from __future__ import annotations

from gputui.core.model.record import fields, is_record
from gputui.core.text import SafeText, visible

TYPE_CHECKING = False
if TYPE_CHECKING:
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
    """A string from a collector, None when absent, as it came: for text the client parses further (a
    metrics body), never for text it shows (``opt_safe``)."""
    return None if value is None else str(value)


def opt_safe(value: Any) -> SafeText | None:
    """Text from a machine, None when absent, made visible (``text.visible``): how the model takes in
    every string it will show, so each object of the model holds only display-safe text."""
    return None if value is None else visible(value)


def safe(value: Any, default: str = "") -> SafeText:
    """``opt_safe`` for a field that is never None: ``default`` when absent or empty."""
    return visible(default if value is None or value == "" else value)


def safe_list(value: Any) -> tuple[SafeText, ...]:
    """The strings of a list from a machine (an argv, a list of notes), each made visible; () when none."""
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(visible(item) for item in value)


def plain(obj: Any) -> dict[str, Any]:
    """A record as a dict of JSON-ready values, nested records included, without a deep copy of every leaf
    (the model is frozen and its leaves immutable; lists and dicts are new containers)."""
    keys = obj.JSON_KEYS
    if keys is None:
        return {name: plain_value(getattr(obj, name)) for name in fields(obj)}
    return {keys.get(name, name): plain_value(getattr(obj, name)) for name in fields(obj)}


def plain_value(value: Any) -> Any:
    """A field's value as a JSON-ready value: tuples as lists, records as dicts (``plain``), leaves as
    they are."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (tuple, list)):
        return [plain_value(item) for item in value]
    if isinstance(value, dict):
        return {key: plain_value(item) for key, item in value.items()}
    if is_record(value):
        return plain(value)
    return value
