"""The replay's time bar: where the replay stands in the recording, its speed, and the incident's moments.

Two lines under the monitor's panels: the first says play or pause, the speed, the time shown, how far into
the recording and the nearest moment; the second is the recording's span with a mark where a moment falls (a
kill ``×``, a verdict ``◆``, a server state or a finding ``•``, an error ``!``) and the replay's place as a
block. Every text from the recording is visible text already (``core.recording.reader``), shown as ``Text``.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from gputui.core.recording.reader import (
    MOMENT_AUDIT,
    MOMENT_ERROR,
    MOMENT_FINDING,
    MOMENT_KILL,
    MOMENT_REBOOT,
    MOMENT_STATE,
    MOMENT_VERDICT,
    Moment,
)
from gputui.core.text import clock_time, duration, fit
from gputui.transports.replay import ReplayControl

REDRAW_S = 0.25
MARKS = (
    (MOMENT_KILL, "×", "bold red"),
    (MOMENT_AUDIT, "×", "bold red"),
    (MOMENT_ERROR, "!", "bold red"),
    (MOMENT_REBOOT, "!", "bold yellow"),
    (MOMENT_VERDICT, "◆", "bold yellow"),
    (MOMENT_STATE, "•", "cyan"),
    (MOMENT_FINDING, "•", "magenta"),
)
"""Which mark a column gets when moments of several kinds fall in it: the first kind of this table there."""
KEYS_HINT = "p pause · < > step · [ ] moment · + - speed"


def _speed_text(speed: float) -> str:
    return "¼×" if speed == 0.25 else "½×" if speed == 0.5 else f"{speed:g}×"


class TimeBar(Widget):
    """The replay's place in the recording (``ReplayControl``), redrawn a few times a second."""

    DEFAULT_CSS = """
    TimeBar {
        height: 2;
        padding: 0 1;
    }
    """

    def __init__(self, control: ReplayControl, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.control = control
        self._columns: tuple[int, list[tuple[str, str] | None]] | None = None
        """The marks of each column, for the width they were made for."""

    def on_mount(self) -> None:
        self.set_interval(REDRAW_S, self.refresh)

    def _marks(self, width: int) -> list[tuple[str, str] | None]:
        if self._columns is not None and self._columns[0] == width:
            return self._columns[1]
        recording = self.control.recording
        start, span = recording.start_s, max(recording.end_s - recording.start_s, 1e-9)
        rank = {kind: i for i, (kind, _mark, _style) in enumerate(MARKS)}
        best: list[int | None] = [None] * width
        for moment in recording.moments:
            order = rank.get(moment.kind)
            if order is None:
                continue
            column = min(width - 1, max(0, int((moment.t - start) / span * width)))
            now = best[column]
            if now is None or order < now:
                best[column] = order
        marks: list[tuple[str, str] | None] = [
            None if order is None else (MARKS[order][1], MARKS[order][2]) for order in best
        ]
        self._columns = (width, marks)
        return marks

    def _nearest(self, now: float) -> Moment | None:
        """The last moment at or before ``now``."""
        moments = self.control.recording.moments_between(self.control.recording.start_s, now)
        return moments[-1] if moments else None

    def render(self) -> Text:
        clock = self.control.clock
        recording = self.control.recording
        now = clock.now()
        state = "▶" if clock.playing else "■ end" if clock.at_end else "⏸"
        head = Text(f"{state} {_speed_text(clock.speed)} ", style="bold")
        head.append(clock_time(now, recording.start_s), style="bold")
        into, span = max(0.0, now - recording.start_s), recording.end_s - recording.start_s
        head.append(f" · {duration(into)} of {duration(span)}", style="dim")
        moment = self._nearest(now)
        if moment is not None:
            where = f"{moment.target} " if moment.target else ""
            head.append(f" · {clock_time(moment.t)} {where}{moment.kind}: ")
            head.append(fit(moment.text, 120))
        head.append(f"  ({KEYS_HINT})", style="dim")
        width = max(1, self.size.width - 2)
        marks = self._marks(width)
        span = max(recording.end_s - recording.start_s, 1e-9)
        here = min(width - 1, max(0, int((now - recording.start_s) / span * width)))
        bar = Text(no_wrap=True)
        for column, mark in enumerate(marks):
            if column == here:
                bar.append("█", style="bold reverse" if mark else "bold")
            elif mark is None:
                bar.append("─", style="dim")
            else:
                bar.append(mark[0], style=mark[1])
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append_text(head)
        text.append("\n")
        text.append_text(bar)
        return text
