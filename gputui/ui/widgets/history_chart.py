"""A bar chart of one figure over time, a few rows tall, on a fixed scale (0 to the figure's top).

Textual's ``Sparkline`` scales each series to its own minimum and maximum, so a GPU whose memory stays at
41 GiB of 48 draws an empty line; here 0 is the bottom and the figure's limit (total memory, 100 %, the power
limit) the top, so a flat line sits where it belongs. The newest value is at the right; with more values than
columns, each column shows the largest of its stretch.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from gputui.ui.widgets.fmt import SPARK_CHARS, resample

FULL = SPARK_CHARS[-1]


def chart_rows(values: Sequence[float], top: float, width: int, height: int) -> list[str]:
    """The chart's rows, top row first; each column is one value (or stretch), filled from the bottom.

    A value of 0 still gets the lowest mark, so the chart shows where the data starts; columns before that
    stay blank.
    """
    columns = resample(values, width)
    levels = len(SPARK_CHARS)
    rows = []
    for row in range(height - 1, -1, -1):  # from the top row down
        line = []
        for value in columns:
            eighths = 0 if top <= 0 else round(min(1.0, max(0.0, value / top)) * height * levels)
            filled = max(eighths, 1) - row * levels
            line.append(" " if filled <= 0 else FULL if filled >= levels else SPARK_CHARS[filled - 1])
        rows.append("".join(line).rjust(width))
    return rows


class HistoryChart(Widget):
    """``data`` on a scale of 0 to ``top``, as tall as the widget."""

    DEFAULT_CSS = """
    HistoryChart {
        height: 3;
        color: $primary;
    }
    """

    data: reactive[tuple[float, ...]] = reactive(())
    """The values, oldest first."""
    top: reactive[float] = reactive(1.0)
    """The value drawn as a full column."""

    def render(self) -> Text:
        rows = chart_rows(self.data, self.top, self.size.width, max(1, self.size.height))
        return Text("\n".join(rows), no_wrap=True)
