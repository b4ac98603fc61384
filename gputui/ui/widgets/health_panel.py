"""Inference-server health of the shown host: one block (or one line) per probed endpoint."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from gputui.core.health_view import (
    DOWN,
    ERROR,
    TIMEOUT,
    UNHEALTHY,
    UP,
    clock_time,
    since_text,
    worst_state,
)
from gputui.core.model import HealthSample
from gputui.ui.widgets.fmt import DASH, duration, safe_text

STATE_STYLES: dict[str | None, str] = {
    UP: "bold green",
    UNHEALTHY: "bold yellow",
    TIMEOUT: "bold dark_orange",
    DOWN: "bold red",
    ERROR: "bold magenta",
    None: "dim",
}
"""Colour of each state; a state this client does not know is shown like ERROR."""

HISTORY_GLYPHS: dict[str | None, str] = {
    UP: "▁",
    UNHEALTHY: "▅",
    TIMEOUT: "▆",
    ERROR: "▇",
    DOWN: "█",
    None: "·",
}
"""One cell per probe in the history strip: the worse, the taller (readable without colour too)."""

STATE_COLUMN_CELLS = 9  # len("UNHEALTHY")


def _state_style(state: str | None) -> str:
    return STATE_STYLES.get(state, STATE_STYLES[ERROR])


def latency_text(latency_ms: float | None) -> str:
    """A probe latency: "12 ms", "20.0 s", or the dash."""
    if latency_ms is None:
        return DASH
    if latency_ms < 1000:
        return f"{latency_ms:.0f} ms"
    return f"{latency_ms / 1000:.1f} s"


def history_strip(states: Sequence[str | None], width_cells: int) -> Text:
    """The last ``width_cells`` probe states as coloured cells, oldest left, padded on the left."""
    recent = list(states)[-width_cells:] if width_cells > 0 else []
    strip = Text(" " * (width_cells - len(recent)))
    for state in recent:
        glyph = HISTORY_GLYPHS.get(state, HISTORY_GLYPHS[ERROR])
        strip.append(glyph, style=_state_style(state).replace("bold ", ""))
    return strip


def health_dot(samples: Iterable[HealthSample]) -> Text:
    """One cell for the multi-host overview: the worst endpoint state of a host.

    ● green all UP, ▲ (yellow/orange/magenta) unhealthy, timing out or erroring, ✖ red down, ○ not probed yet,
    the dash when the host has no endpoint.
    """
    samples = list(samples)
    if not samples:
        return Text(DASH, style="dim")
    worst = worst_state(samples)
    if worst == UP:
        glyph = "●"
    elif worst is None:
        glyph = "○"
    elif worst == DOWN:
        glyph = "✖"
    else:
        glyph = "▲"
    return Text(glyph, style=_state_style(worst))


def _state_cell(sample: HealthSample) -> Text:
    """The state, padded to one column width so that endpoints line up."""
    label = DASH if sample.state is None else sample.state
    cell = safe_text(label, STATE_COLUMN_CELLS, style=_state_style(sample.state))
    cell.append(" " * (STATE_COLUMN_CELLS - len(cell.plain)))
    return cell


def endpoint_block(
    sample: HealthSample, states: Sequence[str | None], now_s: float, history_cells: int = 12
) -> Text:
    """The full rendering of one endpoint: its URL, then its state line, then what is wrong (if anything).

    ``http://127.0.0.1:30000/health (discovered)``
    ``  UNHEALTHY 503 since 16:41:02 (3 min 05 s)  20.0 s  ▁▁▁▅▅▅``
    ``  HTTP 503: Service Unavailable · last ok 16:40:55 · 37 failures``

    The state line leads with what is wrong and since when (it fits a 44-cell panel); the probe latency and
    the history strip come last, where a narrow panel cuts them.
    """
    block = safe_text(sample.url, 200, style="bold")
    if sample.discovered:
        block.append(" (discovered)", style="dim")
    block.append("\n  ")
    block.append_text(_state_cell(sample))
    block.append(" ")
    block.append(DASH if sample.code is None else str(sample.code))
    if sample.state is None:
        block.append(" not probed yet", style="dim")
    elif sample.since is not None:
        block.append(f" since {clock_time(sample.since, now_s)}", style=_state_style(sample.state))
        block.append(f" ({duration(max(0.0, now_s - sample.since))})", style="dim")
    block.append("  ")
    block.append(latency_text(sample.latency_ms), style="dim")
    block.append("  ")
    block.append_text(history_strip(states, history_cells))
    if sample.state not in (None, UP):
        block.append("\n  ")
        block.append_text(safe_text(sample.detail, 120, style="italic"))
        block.append(" · last ok ", style="dim")
        block.append(DASH if sample.last_ok is None else clock_time(sample.last_ok, now_s), style="dim")
        failures = sample.consecutive_failures
        block.append(f" · {failures} failure{'' if failures == 1 else 's'}", style="dim")
    elif sample.state is None and sample.detail:
        block.append("\n  ")
        block.append_text(safe_text(sample.detail, 120, style="dim italic"))
    return block


def endpoint_line(
    sample: HealthSample, states: Sequence[str | None], now_s: float, history_cells: int = 6
) -> Text:
    """The compact rendering of one endpoint, for narrow layouts: one line.

    ``UNHEALTHY 503 20.0 s ▁▅▅▅ 503 since 16:41:02 http://127.0.0.1:30000/health``
    """
    line = _state_cell(sample)
    line.append(" ")
    line.append(DASH if sample.code is None else str(sample.code))
    line.append(" ")
    line.append(latency_text(sample.latency_ms), style="dim")
    line.append(" ")
    line.append_text(history_strip(states, history_cells))
    line.append(" ")
    line.append_text(safe_text(since_text(sample, now_s), 40, style=_state_style(sample.state)))
    line.append(" ")
    line.append_text(safe_text(sample.url, 200))
    return line


class HealthPanel(Widget):
    """Health endpoints of one host, as the agent last probed them, with a client-kept history strip.

    Feed it with :meth:`show` on every snapshot of the shown host.
    """

    DEFAULT_CSS = """
    HealthPanel {
        height: auto;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    compact: reactive[bool] = reactive(False, layout=True)
    """One line per endpoint (narrow layouts) instead of a two- or three-line block."""

    def __init__(
        self,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,  # noqa: A002
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._samples: tuple[HealthSample, ...] = ()
        self._history: dict[str, tuple[str | None, ...]] = {}
        self._now_s: float | None = None
        self._shown: Text | None = None
        """The text of the last ``show``: an equal one is not repainted."""
        self._shown_key: tuple[object, ...] | None = None
        """``_shown`` as its plain text, base style and spans (``Text ==`` ignores the base style)."""

    @property
    def samples(self) -> tuple[HealthSample, ...]:
        """The samples now shown."""
        return self._samples

    def show(
        self,
        samples: Sequence[HealthSample],
        history: Mapping[str, Sequence[str | None]] | None = None,
        now_s: float | None = None,
    ) -> None:
        """Show these samples.

        Args:
            samples: The host's health samples (``HostSnapshot.health``).
            history: URL → its last probe states, oldest first (``HealthHistory.as_dict()``).
            now_s: The time to measure "since" against (epoch seconds); default: the clock when rendered.
        """
        self._samples = tuple(samples)
        self._history = {url: tuple(states) for url, states in (history or {}).items()}
        self._now_s = now_s
        text = self._text()
        key = (text.plain, str(text.style), tuple(text.spans))
        if key == self._shown_key:
            return  # the same lines (no endpoints, or the same states and ages): nothing to repaint
        shown = self._shown
        self._shown, self._shown_key = text, key
        # The height follows the line count: a relayout of the screen only when that changes.
        self.refresh(layout=shown is None or text.plain.count("\n") != shown.plain.count("\n"))

    def render(self) -> Text:
        return self._text()

    def _text(self) -> Text:
        now_s = time.time() if self._now_s is None else self._now_s
        if not self._samples:
            return Text("no health endpoints (none set or found)", style="dim")
        parts = []
        for sample in self._samples:
            states = self._history.get(sample.url, ())
            if self.compact:
                parts.append(endpoint_line(sample, states, now_s))
            else:
                parts.append(endpoint_block(sample, states, now_s))
        text = Text("\n").join(parts)
        text.no_wrap = True
        text.overflow = "ellipsis"
        return text
