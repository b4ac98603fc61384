"""Small formatting helpers shared by the widgets: dashes for missing values, bars, sparklines, safe text.

Every string that came from a machine goes through ``safe_text``: control characters are made visible
(``gputui.core.textsafe.visible``) and the result is a ``Text``, which Textual never parses as markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from gputui.core.textsafe import ELLIPSIS, visible, visible_cmdline

DASH = "–"
"""Shown for a value that could not be read (None in the model)."""

SPARK_CHARS = "▁▂▃▄▅▆▇█"
BAR_FULL = "█"
BAR_EMPTY = "░"


def dash(value: object, suffix: str = "") -> str:
    """``value`` as text with ``suffix``, or the dash when it is None."""
    return DASH if value is None else f"{value}{suffix}"


def safe_text(value: str | None, max_len: int | None = None, style: str = "") -> Text:
    """A machine-supplied string as a ``Text`` with every control character visible; None → dash."""
    if value is None:
        return Text(DASH, style=style)
    return Text(visible(value, max_len), style=style)


def command_text(argv: Sequence[str], name: str | None, max_len: int, truncated: bool = False) -> str:
    """The visible command line of a process, or its name in brackets when it has no argv (zombies).

    ``truncated``: the collector cut the command line (``Proc.cmdline_truncated``); it then always ends with
    the ellipsis, even when what arrived fits in ``max_len``.
    """
    if argv:
        shown = visible_cmdline(argv, max_len)
        if truncated and not shown.endswith(ELLIPSIS):
            # One more (empty) argument makes a line that filled the width exactly one character too long.
            shown = shown + ELLIPSIS if len(shown) < max_len else visible_cmdline([*argv, ""], max_len)
        return shown
    return "[" + visible(name or "?", max(1, max_len - 2)) + "]"


def mem_pct(used_mib: int | None, total_mib: int | None) -> int | None:
    """Memory use in whole percent, or None when either figure is missing."""
    if used_mib is None or not total_mib:
        return None
    return round(100 * used_mib / total_mib)


def bar(used_mib: int | None, total_mib: int | None, width_cells: int, style: str) -> Text:
    """A memory bar ``width_cells`` wide; a dash-filled bar when the figures are missing."""
    width_cells = max(1, width_cells)
    if used_mib is None or not total_mib:
        return Text(DASH * width_cells, style="dim")
    filled = round(width_cells * min(1.0, max(0.0, used_mib / total_mib)))
    return Text.assemble((BAR_FULL * filled, style), (BAR_EMPTY * (width_cells - filled), "dim"))


def sparkline(values: Sequence[int], top: int, width_cells: int) -> str:
    """The last ``width_cells`` values as block characters scaled to ``top``; padded on the left."""
    recent = list(values)[-width_cells:] if width_cells > 0 else []
    chars = []
    for value in recent:
        level = 0 if top <= 0 else min(len(SPARK_CHARS) - 1, int(len(SPARK_CHARS) * value / (top + 1)))
        chars.append(SPARK_CHARS[max(0, level)])
    return " " * (width_cells - len(chars)) + "".join(chars)


def duration(seconds: float) -> str:
    """A short human duration: 0.4 s, 12 s, 3 min 05 s, 2 h 03 min."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
