"""The host bar: every target with its state (live, stale with the age of its data, error)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from gputui.core.model import HostSnapshot
from gputui.ui.widgets.fmt import duration, safe_text


@dataclass(frozen=True)
class HostStatus:
    """What the host bar and the overview show about one host.

    Attributes:
        target: The target word.
        state: connecting, live, stale or error.
        age_s: Seconds since its last snapshot arrived, None before the first one.
        error: The last error line, if any.
        snapshot: The latest analysed snapshot, if any.
        halted: Retrying cannot fix the error: nothing happens until the user presses ``r``.
    """

    target: str
    state: str
    age_s: float | None = None
    error: str | None = None
    snapshot: HostSnapshot | None = None
    halted: bool = False


_STATE_STYLES = {"live": "green", "stale": "yellow", "error": "red", "connecting": "dim"}


def status_text(status: HostStatus) -> Text:
    """``live``, ``stale 12 s``, ``error: …`` or ``connecting…`` with its colour."""
    style = _STATE_STYLES.get(status.state, "")
    if status.state == "live":
        return Text("● live", style=style)
    if status.state == "stale":
        age = "" if status.age_s is None else f" {duration(status.age_s)}"
        return Text(f"● stale{age}", style=style)
    if status.state == "error":
        line = Text("● ", style=style)
        if status.age_s is not None:
            line.append(f"stale {duration(status.age_s)} ", style="yellow")
        if status.halted:
            # Before the error text, which may be cut: the user must see that nothing retries by itself.
            line.append("not retrying (r) ", style="bold " + style)
        line.append_text(safe_text(status.error or "error", 80, style=style))
        return line
    return Text("○ connecting…", style=style)


class HostBar(Static):
    """One line: ``1 gpu-node-07 ● live │ 2 gpu-node-08 ● stale 12 s``; the shown host is highlighted."""

    _shown: Text | None = None
    """The text shown now (None before the first ``show``)."""
    _shown_keys: tuple[object, ...] | None = None
    """What the shown text was built from: equal keys draw an equal bar."""

    def show(self, statuses: Sequence[HostStatus], active_index: int, paused: bool = False) -> None:
        """Show every host's state; ``active_index`` is the one the panels show."""
        keys = (paused, active_index) + tuple(_status_key(status) for status in statuses)
        if keys == self._shown_keys:
            return  # nothing it shows changed (the app redraws this a few times a second)
        self._shown_keys = keys
        line = Text(no_wrap=True, overflow="ellipsis")
        for index, status in enumerate(statuses):
            if index:
                line.append(" │ ", style="dim")
            label = Text(f" {index + 1} ", style="bold reverse" if index == active_index else "bold")
            label.append_text(safe_text(status.target, 40, style="bold" if index == active_index else ""))
            label.append(" ")
            line.append_text(label)
            line.append_text(status_text(status))
        if paused:
            line.append("  ⏸ PAUSED", style="bold yellow")
        if line == self._shown:
            return
        self._shown = line
        self.update(line)


def _status_key(status: HostStatus) -> tuple[object, ...]:
    """What ``status_text`` and the label show of ``status`` (the age only where it is shown, as text)."""
    age = None
    if status.state in ("stale", "error") and status.age_s is not None:
        age = duration(status.age_s)
    return status.target, status.state, age, status.error, status.halted
