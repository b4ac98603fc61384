"""The collector's argument rules: what a command's numbers must be, which GPUs its words name, and the
error a malformed one gets.

Shared by the collector's own commands, its kill operations, its command line, and the simulated host of
``--demo``, so that the demo accepts exactly what a real collector accepts.
"""

from __future__ import annotations

import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable


class CommandError(Exception):
    """A command the collector refuses as malformed; its text is the reply's one-line error."""


def finite_positive(value: Any) -> float | None:
    """``value`` as a positive finite number, else None (booleans are not numbers here)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not number > 0 or math.isinf(number) or math.isnan(number):
        return None
    return number


def seconds_in_range(value: Any, low: float, high: float) -> float | None:
    """``value`` as seconds when it is a number in [``low``, ``high``], else None."""
    number = finite_positive(value)
    return number if number is not None and low <= number <= high else None


def optional_seconds(command: dict[str, Any], key: str) -> float | None:
    """A command's optional duration: None when absent or null, else a positive finite number of seconds."""
    value = command.get(key)
    if value is None:
        return None
    seconds = finite_positive(value)
    if seconds is None:
        raise CommandError(f"{key} must be a positive number of seconds or null")
    return seconds


def select_gpus(gpus: list[dict[str, Any]], words: Iterable[str] | None) -> list[dict[str, Any]]:
    """The GPUs named by index or UUID (every GPU for None). Raises ValueError naming a word that is none."""
    if words is None:
        return list(gpus)
    chosen: list[dict[str, Any]] = []
    for word in words:
        text = str(word).strip()
        found = [
            g
            for g in gpus
            if (text.isdigit() and g.get("index") == int(text))
            or (g.get("uuid") and str(g["uuid"]).lower() == text.lower())
        ]
        if not found:
            from gputui.agent.wire import wire_text

            raise ValueError(f"no GPU {wire_text(text, 80)!r} on this host (an index or a UUID)")
        if found[0] not in chosen:
            chosen.append(found[0])
    return chosen
