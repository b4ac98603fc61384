"""What each process held on one GPU over the whole session (the whole recording in a replay), a line each.

A slow leak is a few MiB a minute over hours, lost on a chart of the GPU's total: each process's line is
scaled from its own lowest figure to its highest, with both said in MiB, so a rise shows as a slope whatever
its size (``core.recording.memory`` keeps the series).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from gputui.core.recording import MemorySeries
from gputui.core.text import duration, fit
from gputui.ui.widgets.fmt import SPARK_CHARS, resample

LINES_MAX = 8
"""Processes listed: the largest peaks."""
NAME_CHARS = 18


def _figure(mib: int) -> str:
    return f"{mib:,}".replace(",", " ")


def series_line(series: MemorySeries, width: int) -> Text:
    """``4240 sglang::sched  ▁▁▂▃▄▅▆█  41 236 → 41 980 MiB over 2 h 10 min``."""
    values = [float(mib) for _t, mib in series.points]
    low, high = min(values), max(values)
    line = Text(f"{series.pid:>8} ", style="bold")
    line.append(f"{fit(series.name or '?', NAME_CHARS):<{NAME_CHARS}} ")
    levels = len(SPARK_CHARS) - 1
    for value in resample(values, width):
        level = 0 if high <= low else round((value - low) / (high - low) * levels)
        line.append(SPARK_CHARS[level], style="yellow" if high > low else "dim")
    span_s = series.points[-1][0] - series.points[0][0]
    first, last = series.points[0][1], series.points[-1][1]
    line.append(f"  {_figure(first)} → {_figure(last)} MiB", style="bold" if last > first else "")
    line.append(f" over {duration(span_s)}", style="dim")
    if high > low:
        line.append(f" (low {_figure(int(low))}, high {_figure(int(high))})", style="dim")
    return line


def process_memory_text(series: Sequence[MemorySeries], width: int, what: str) -> Text:
    """The GPU's processes, largest peak first, each over ``what`` ("the session", "the recording")."""
    text = Text(f"Memory by process over {what}", style="bold")
    shown = [s for s in series if s.points][:LINES_MAX]
    if not shown:
        text.append("\n  no process held memory on this GPU", style="dim")
        return text
    chart = max(8, min(60, width - 70))
    for one in shown:
        text.append("\n")
        text.append_text(series_line(one, chart))
    if len(series) > len(shown):
        text.append(f"\n  and {len(series) - len(shown)} more", style="dim")
    return text
