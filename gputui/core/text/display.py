"""How figures and text read on a screen, in the TUI and on the command line alike: the dash for a missing
value, durations, times of day, memory sizes, text cut to a width.

Plain strings only (no UI library): the widgets and the commands both use these, so a value reads the same
wherever it is shown.
"""

from __future__ import annotations

import math
import re
import time

from gputui.core.text.safe import ELLIPSIS, SafeText, visible

DASH = "–"
"""Shown for a value that could not be read (None in the model)."""
DAY_S = 86400.0


def dash(value: object, suffix: str = "") -> str:
    """``value`` as text with ``suffix``, or the dash when it is None."""
    return DASH if value is None else f"{value}{suffix}"


def duration(seconds: float) -> str:
    """A short human duration: 0.4 s, 12 s, 3 min 05 s, 2 h 03 min."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def age_text(seconds: float) -> str:
    """A short age for reasons and findings: "12 s", "3 min", "1.5 h".

    Every age is cut down to its unit, never rounded up: a state 10 min 40 s old is "10 min" wherever it is
    said (a finding beside the verdict's reason, read a moment apart), and never older than it is, so a
    threshold ("held past 10 minutes") and the age beside it agree.
    """
    if not math.isfinite(seconds):
        return DASH  # a remote clock's garbage
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    return f"{int(seconds / 360) / 10:.1f} h"


def age_since(since_s: float | None, now_s: float) -> str:
    """How long a finding's state has lasted, for every view to show beside its sentence: "for 3 min";
    "" when its start is not known, or under a second old (the collector only knows when *it* first saw
    the state: an age under a second says nothing)."""
    if since_s is None or now_s - since_s < 1:
        return ""
    return f"for {age_text(now_s - since_s)}"


def clock_time(epoch_s: float | None, now_s: float | None = None) -> str:
    """Local time of day (HH:MM:SS); with ``now_s``, the date too when the two are a day or more apart.

    The dash for None and for a time the platform cannot represent (a remote clock's garbage).
    """
    if epoch_s is None:
        return DASH
    try:
        local = time.localtime(epoch_s)
        if now_s is not None and abs(now_s - epoch_s) >= DAY_S:
            return time.strftime("%Y-%m-%d %H:%M:%S", local)
        return time.strftime("%H:%M:%S", local)
    except (OverflowError, OSError, ValueError):
        return DASH


def size_text(mib: int | None) -> str:
    """ "24M", "9.5G", "312G": memory in narrow columns (MiB below 1 GiB, else GiB)."""
    if mib is None:
        return DASH
    if mib < 1024:
        return f"{mib}M"
    gib = mib / 1024
    return f"{gib:.1f}G" if gib < 10 else f"{gib:.0f}G"


_ESCAPE_RE = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[tnr])")
"""The escapes ``safe.visible`` writes; the longest is ten characters."""
_ESCAPE_MAX_CHARS = 10


def fit(text: str, max_chars: int) -> SafeText:
    """``text`` in at most ``max_chars`` characters: cut at a character or escape boundary, ending with "…".

    ``text`` is visible text (the model's); an escape in it (``\\x1b``) is kept whole or left out, never cut
    in half. Anything not yet visible is made so first, so what this returns is always safe to show.
    """
    if max_chars <= 0:
        return SafeText("")
    # Only the head can be shown: a 2 MB argv shown in 40 columns costs 40 characters of work.
    head = visible(text[: max_chars + _ESCAPE_MAX_CHARS])
    if len(head) <= max_chars and len(text) <= max_chars:
        return head
    cut = max_chars - 1  # room for the ellipsis
    for match in _ESCAPE_RE.finditer(head, max(0, cut - _ESCAPE_MAX_CHARS + 1), cut + _ESCAPE_MAX_CHARS):
        if match.start() < cut < match.end():
            cut = match.start()
            break
    return SafeText(head[:cut] + ELLIPSIS)
