"""Inference-server health of the shown host: one block (or one line) per probed endpoint."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from gputui.core.model import EndpointSample
from gputui.core.servers import BUSY, DOWN, ERROR, STALLED, STARTING, TIMEOUT, UNHEALTHY, UP, worst_state
from gputui.core.text import clock_time
from gputui.ui.legend import SERVER_GLYPHS, SERVER_STYLES
from gputui.ui.widgets.fmt import DASH, SPARK_CHARS, duration, safe_text, screen_rows

STATE_STYLES: dict[str | None, str] = dict(SERVER_STYLES)
"""Colour of each state (``legend.SERVER_MARKS``); a state this client does not know is shown like ERROR.
STALLED and BUSY are reversed, to stand out: one hangs requests behind a 200, the other must not be killed
for its 503."""

HISTORY_GLYPHS: dict[str | None, str] = {
    UP: "▁",
    STARTING: "▂",
    BUSY: "▃",
    UNHEALTHY: "▅",
    TIMEOUT: "▆",
    ERROR: "▇",
    STALLED: "█",
    DOWN: "█",
    None: "·",
}
"""One cell per probe in the history strip: the worse, the taller (readable without colour too)."""

NONE_TEXT = "no health endpoints (none set or found)"
LOOKING_TEXT = "looking for endpoints… (the collector reads the launchers' command lines, then probes)"
STATE_COLUMN_CELLS = 9  # len("UNHEALTHY")
STRIP_MIN_CELLS = 3
"""A history strip narrower than this says nothing: left out."""
COMPACT_STRIP_CELLS = 4
BLOCK_LINES_MAX = 6
"""More lines than this in full form and the panel shows one line per endpoint instead."""


TOKENS_STRIP_CELLS = 12
"""Tokens/s readings shown in a block's sparkline (the tracker keeps a few more)."""


def _state_style(state: str | None) -> str:
    return STATE_STYLES.get(state, STATE_STYLES[ERROR])


def _plain_style(state: str | None) -> str:
    """The state's colour without bold or a background: for strips of history cells."""
    style = _state_style(state).replace("bold ", "")
    return style.split(" on ", 1)[0] if " on " in style else style


def tokens_strip(history: Sequence[float | None], width_cells: int) -> Text:
    """Tokens/s readings as a sparkline scaled to the largest, "·" where a reading had no rate."""
    recent = list(history)[-width_cells:] if width_cells > 0 else []
    top = max((v for v in recent if v is not None), default=0.0)
    strip = Text(" " * (width_cells - len(recent)))
    for value in recent:
        if value is None:
            strip.append("·", style="dim")
            continue
        level = 0 if top <= 0 else min(len(SPARK_CHARS) - 1, int(len(SPARK_CHARS) * value / (top * 1.0001)))
        strip.append(SPARK_CHARS[level], style="cyan")
    return strip


def metrics_text(
    sample: EndpointSample, history: Sequence[float | None] = (), compact: bool = False, width: int = 10_000
) -> Text | None:
    """What the server is doing: ``vllm · 2 running · 1 waiting · KV 45% · 1234 tok/s ▁▃▅▇`` (compact:
    ``2r 1w KV45% 1234t/s``); None when it has no metrics endpoint. The sparkline takes what is left of
    ``width`` after the figures (indented by two), and is left out when fewer than ``STRIP_MIN_CELLS`` are."""
    metrics = sample.metrics or {}
    if sample.metrics_url is None and not metrics.get("engine"):
        return None
    if not metrics.get("engine"):
        why = sample.metrics_error or "not read yet"
        return safe_text(f"metrics: {why}", 80, style="dim italic")
    running, waiting = metrics.get("running"), metrics.get("waiting")
    kv, rate = metrics.get("kv_cache_usage"), metrics.get("generation_tokens_per_s")
    figures = (
        DASH if running is None else str(running),
        DASH if waiting is None else str(waiting),
        DASH if kv is None else f"{kv * 100:.0f}%",
        DASH if rate is None else f"{rate:.0f}",
    )
    line = Text()
    if compact:
        line.append("{}r {}w KV{} {}t/s".format(*figures), style="dim")
        return line
    line.append_text(safe_text(str(metrics["engine"]), 10, style="bold"))
    line.append(" · {} running · {} waiting · KV {} · {} tok/s".format(*figures))
    room = min(len(history), TOKENS_STRIP_CELLS, width - 2 - line.cell_len - 1)
    if room >= STRIP_MIN_CELLS and any(value is not None for value in history[-room:]):
        line.append(" ")
        line.append_text(tokens_strip(history, room))
    return line


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
        strip.append(glyph, style=_plain_style(state))
    return strip


def health_dot(samples: Iterable[EndpointSample]) -> Text:
    """One cell for the multi-host overview: the worst endpoint state of a host, one glyph per state
    (``legend.SERVER_MARKS``: ● UP, ◌ STARTING, ◆ BUSY, ▲ UNHEALTHY, ◔ TIMEOUT, ◇ ERROR, ■ STALLED, ✖ DOWN,
    ○ not probed yet); the dash when the host has no endpoint."""
    samples = list(samples)
    if not samples:
        return Text(DASH, style="dim")
    worst = worst_state(samples)
    return Text(SERVER_GLYPHS.get(worst, SERVER_GLYPHS[ERROR]), style=_state_style(worst))


def _state_cell(sample: EndpointSample) -> Text:
    """The state, padded to one column width so that endpoints line up."""
    label = DASH if sample.state is None else sample.state
    cell = safe_text(label, STATE_COLUMN_CELLS, style=_state_style(sample.state))
    cell.append(" " * (STATE_COLUMN_CELLS - len(cell.plain)))
    return cell


def state_line(
    sample: EndpointSample, states: Sequence[str | None], now_s: float, width: int, strip_max: int = 12
) -> Text:
    """What the endpoint is, first: ``UNHEALTHY 503 since 16:41:02 (3 min 05 s) · 20.0 s ▁▁▁▅▅▅``.

    The state, the code and since when come first and are never cut short by the rest; the probe latency
    follows, and the history strip takes what is left of ``width`` (up to ``strip_max`` probes).
    """
    line = Text()
    line.append_text(_state_cell(sample))
    line.append(" ")
    line.append(DASH if sample.code is None else str(sample.code))
    if sample.state is None:
        line.append(" not probed yet", style="dim")
        return line
    if sample.since is not None:
        line.append(f" since {clock_time(sample.since, now_s)}", style=_state_style(sample.state))
        line.append(f" ({duration(max(0.0, now_s - sample.since))})", style="dim")
    line.append(" · ", style="dim")
    line.append(latency_text(sample.latency_ms), style="dim")
    room = min(strip_max, len(states), width - line.cell_len - 1)
    if room >= STRIP_MIN_CELLS:
        line.append(" ")
        line.append_text(history_strip(states, room))
    return line


def endpoint_block(
    sample: EndpointSample,
    states: Sequence[str | None],
    now_s: float,
    width: int,
    tokens: Sequence[float | None] = (),
) -> Text:
    """One endpoint in full: its state line, its URL, what the server is doing, then what is wrong (if
    anything).

    ``UNHEALTHY 503 since 16:41:02 (3 min 05 s) · 20.0 s  ▁▁▁▅▅▅``
    ``  http://127.0.0.1:30000/health (discovered)``
    ``  sglang · 0 running · 3 waiting · KV 0% · 0 tok/s ▇▇▅▁▁▁``
    ``  HTTP 503: Service Unavailable · last ok 16:40:55 · 37 failures``
    """
    block = state_line(sample, states, now_s, width)
    block.append("\n  ")
    block.append_text(safe_text(sample.url, 200, style="bold"))
    if sample.discovered:
        block.append(" (discovered)", style="dim")
    doing = metrics_text(sample, tokens, width=width)
    if doing is not None:
        block.append("\n  ")
        block.append_text(doing)
    if sample.state not in (None, UP):
        block.append("\n  ")
        block.append_text(safe_text(sample.detail, 160, style="italic"))
        failures = sample.consecutive_failures
        if failures:  # a state judged from the metrics (STALLED behind a 200) has no failed probe to count
            block.append(" · last ok ", style="dim")
            block.append(DASH if sample.last_ok is None else clock_time(sample.last_ok, now_s), style="dim")
            block.append(f" · {failures} failure{'' if failures == 1 else 's'}", style="dim")
    elif sample.state is None and sample.detail:
        block.append("\n  ")
        block.append_text(safe_text(sample.detail, 120, style="dim italic"))
    return block


def endpoint_line(sample: EndpointSample, states: Sequence[str | None], now_s: float) -> Text:
    """One endpoint on one line, state first, its URL last (where a narrow panel cuts it):

    ``STALLED 200 since 16:41:02 (3 min 05 s) · 20 ms ▁▁██ 2r 3w KV45% 0t/s http://127.0.0.1:30000/health``
    """
    line = state_line(sample, states, now_s, width=10_000, strip_max=COMPACT_STRIP_CELLS)
    doing = metrics_text(sample, compact=True)
    if doing is not None:
        line.append(" ")
        line.append_text(doing)
    line.append(" ")
    line.append_text(safe_text(sample.url, 200))
    return line


def endpoint_compact_block(
    sample: EndpointSample, states: Sequence[str | None], now_s: float, width: int
) -> Text:
    """One endpoint for a narrow pane: the state line, then the URL and what is wrong, each on its own lines
    (wrapped, never cut): the answer to "is it up, which one, why not" survives any width.

    ``BUSY      503 since 16:41:02 (20 s) · 20.0 s ▃▃▃``
    ``  http://127.0.0.1:30000/health (discovered)``
    ``  2r 3w KV45% 0t/s``
    ``  busy: health HTTP 503 but generating 1800 tokens/s; not dead, do not kill``
    """
    block = state_line(sample, states, now_s, width, strip_max=COMPACT_STRIP_CELLS)
    block.append("\n  ")
    block.append_text(safe_text(sample.url, 200, style="bold"))
    if sample.discovered:
        block.append(" (discovered)", style="dim")
    doing = metrics_text(sample, compact=True)
    if doing is not None:
        block.append("\n  ")
        block.append_text(doing)
    if sample.state is not None and sample.state != UP and sample.detail:
        block.append("\n  ")
        block.append_text(safe_text(sample.detail, 160, style="italic"))
    return block


class EndpointPanel(Widget):
    """Health endpoints of one host, as the agent last probed them, with a client-kept history strip.

    Feed it with :meth:`show` on every snapshot of the shown host.
    """

    DEFAULT_CSS = """
    EndpointPanel {
        height: auto;
    }
    EndpointPanel.-condensed {
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    class RowsChanged(Message):
        """The panel needs another number of rows (more endpoints, a resize that wraps a line)."""

    compact: reactive[bool] = reactive(False, layout=True)
    """Short blocks for a narrow pane (``endpoint_compact_block``: state, URL, reason, each on its own
    lines). Wide, with more endpoints than ``BLOCK_LINES_MAX`` lines can hold in full, the panel uses one
    line per endpoint."""

    def __init__(
        self,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,  # noqa: A002
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._samples: tuple[EndpointSample, ...] = ()
        self._no_data: str | None = None
        self._looking = False
        self._history: dict[str, tuple[str | None, ...]] = {}
        self._tokens: dict[str, tuple[float | None, ...]] = {}
        self._now_s: float | None = None
        self._shown: Text | None = None
        """The text of the last ``show``: an equal one is not repainted."""
        self._shown_key: tuple[object, ...] | None = None
        """``_shown`` as its plain text, base style and spans (``Text ==`` ignores the base style)."""
        self.rows = 0
        """Screen rows the text takes at the panel's width (0 before the first ``show``)."""

    @property
    def samples(self) -> tuple[EndpointSample, ...]:
        """The samples now shown."""
        return self._samples

    def show(
        self,
        samples: Sequence[EndpointSample],
        history: Mapping[str, Sequence[str | None]] | None = None,
        now_s: float | None = None,
        tokens: Mapping[str, Sequence[float | None]] | None = None,
        no_data: str | None = None,
        looking: bool = False,
    ) -> None:
        """Show these samples.

        Args:
            samples: The host's endpoint samples (``HostSnapshot.endpoints``), judged (``core.servers``).
            history: URL → its last probe states, oldest first (``EndpointHistory.as_dict()``).
            tokens: URL → its server's tokens/s readings, oldest first (``EndpointHistory.tokens_per_s()``).
            now_s: The time to measure "since" against (epoch seconds); default: the clock when rendered.
            no_data: The host has no fresh data: this line ("no data since …") instead of stale states.
            looking: No endpoint yet, and the collector's discovery has not had its first sweep: said so,
                rather than "none".
        """
        self._no_data = no_data
        self._looking = looking
        self._samples = tuple(samples)
        self._history = {url: tuple(states) for url, states in (history or {}).items()}
        self._tokens = {url: tuple(values) for url, values in (tokens or {}).items()}
        self._now_s = now_s
        self._redraw()

    def watch_compact(self) -> None:
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        text = self._text()
        key = (text.plain, str(text.style), tuple(text.spans))
        if key == self._shown_key:
            return  # the same lines (no endpoints, or the same states and ages): nothing to repaint
        self._shown, self._shown_key = text, key
        rows = screen_rows(text, self.content_size.width or 80, wrap=not self.has_class("-condensed"))
        # The height follows the rows: a relayout of the screen only when they change.
        changed = rows != self.rows
        self.rows = rows
        self.refresh(layout=changed)
        if changed:
            self.post_message(self.RowsChanged())

    def render(self) -> Text:
        return self._shown if self._shown is not None else self._text()

    def _text(self) -> Text:
        now_s = time.time() if self._now_s is None else self._now_s
        if self._no_data is not None:
            self.set_class(False, "-condensed")
            return Text(self._no_data, style="dim")
        if not self._samples:
            self.set_class(False, "-condensed")
            return Text(LOOKING_TEXT if self._looking else NONE_TEXT, style="dim")
        width = self.content_size.width or 80
        history = self._history
        if self.compact:
            # A narrow pane: short blocks that wrap, never one cut line per endpoint.
            self.set_class(False, "-condensed")
            compact = [endpoint_compact_block(s, history.get(s.url, ()), now_s, width) for s in self._samples]
            return Text("\n").join(compact)
        blocks = [
            endpoint_block(s, history.get(s.url, ()), now_s, width, self._tokens.get(s.url, ()))
            for s in self._samples
        ]
        lines = sum(block.plain.count("\n") + 1 for block in blocks)
        full = not self.compact and lines <= BLOCK_LINES_MAX
        # In full, a long URL or detail wraps: nothing is cut. Condensed, every line is cut at the width.
        self.set_class(not full, "-condensed")
        if full:
            return Text("\n").join(blocks)
        return Text("\n").join(endpoint_line(s, self._history.get(s.url, ()), now_s) for s in self._samples)
