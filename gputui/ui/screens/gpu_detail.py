"""One GPU up close: its last ten minutes (memory, utilisation, power, temperature) and who holds it.

Opened with Enter on a GPU of the monitor. The history is the host's ``GpuHistory`` (one point a second,
bounded); the processes are those the GPU lists, with what each holds on it and its whole command line
(read again from the host when the collector cut it on the wire). Below them, what each process held on the
GPU over the whole session (over the whole recording, in a replay), so a slow leak shows as a slope. The
screen follows new snapshots of its host until Esc.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import partial

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static

from gputui.core.link import HostLink, process_text
from gputui.core.model import Gpu, GpuPoint, HostSnapshot, Proc
from gputui.ui import keymap
from gputui.ui.session.context import Session
from gputui.ui.session.hosts import REQUEST_TIMEOUT_S, HostState
from gputui.ui.session.tasks import spawn
from gputui.ui.widgets.fitness_text import fitness_text
from gputui.ui.widgets.fmt import DASH, command_text, dash, duration, figure_text, safe_text
from gputui.ui.widgets.history_chart import HistoryChart
from gputui.ui.widgets.key_footer import KeyFooter
from gputui.ui.widgets.process_memory import process_memory_text
from gputui.ui.widths import NARROW_MAX_CELLS, STACKED_BELOW_CELLS

COMMAND_CHARS = 600
"""A holder's command is shown whole, wrapped, up to this many characters."""
TEMPERATURE_TOP_C = 100.0
"""The temperature chart's top (GPUs throttle below it)."""


@dataclass(frozen=True)
class Series:
    """One figure of the history: its label, how to read it off a point, its unit, and the top of its
    chart for a GPU (None: the largest value shown)."""

    label: str
    read: Callable[[GpuPoint], float | None]
    unit: str
    top: Callable[[Gpu], float | None]


SERIES = (
    Series("memory", lambda p: p.memory_used_mib, "MiB", lambda gpu: gpu.memory_total_mib),
    Series("utilisation", lambda p: p.utilization_pct, "%", lambda _gpu: 100.0),
    Series("power", lambda p: p.power_w, "W", lambda gpu: gpu.power_limit_w),
    Series("temperature", lambda p: p.temperature_c, "°C", lambda _gpu: TEMPERATURE_TOP_C),
)


def series_text(series: Series, points: Sequence[GpuPoint], narrow: bool = False) -> Text:
    """``memory  41236 MiB now · 3–41240 over 10 min 00 s``; the dash when the driver never said.

    ``narrow``: the figures have a row of their own above the chart (a 50-column pane), so the label is not
    padded into a column; the line never wraps (a wrapped word would sit on the chart's row): what does not
    fit ends in an ellipsis.
    """
    values = [v for v in (series.read(p) for p in points) if v is not None]
    line = Text(f"{series.label} " if narrow else f"{series.label:<12}", style="bold")
    line.no_wrap = True
    line.overflow = "ellipsis"
    if not values:
        line.append(DASH, style="dim")
        return line
    line.append(f"{_figure(values[-1])} {series.unit} now", style="bold")
    span_s = points[-1].at_s - points[0].at_s if len(points) > 1 else 0.0
    line.append(f" · {_figure(min(values))}–{_figure(max(values))} over {duration(span_s)}", style="dim")
    return line


_figure = figure_text


def holders_table(gpu: Gpu, snapshot: HostSnapshot, texts: dict[int, tuple[str, ...]]) -> Table:
    """pid, user, state, MiB held on this GPU and the whole command of every process the GPU lists."""
    table = Table(box=None, padding=(0, 1), show_edge=False, expand=True)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("user", no_wrap=True, max_width=12)
    table.add_column("S", no_wrap=True)
    table.add_column("MiB", justify="right", no_wrap=True)
    table.add_column("command", overflow="fold", ratio=1)
    for holder in sorted(gpu.processes, key=lambda p: -(p.used_mib or 0)):
        proc = snapshot.process(holder.pid)
        used = Text(dash(holder.used_mib), style="yellow" if holder.used_mib else "dim")
        if proc is None:
            note = "not visible here (another PID namespace)" if not holder.visible else "not listed"
            table.add_row(Text(str(holder.pid)), Text(DASH), Text(DASH), used, Text(note, style="dim"))
            continue
        whole = texts.get(proc.pid)
        cut = whole is None and proc.cmdline_truncated
        argv = proc.cmdline if whole is None else whole
        table.add_row(
            Text(str(proc.pid)),
            safe_text(proc.user, 12),
            safe_text(proc.state, 1, style="bold red" if proc.is_zombie else ""),
            used,
            Text(command_text(argv, proc.name, COMMAND_CHARS, cut)),
        )
    if not gpu.processes:
        table.add_row(Text(""), Text(""), Text(""), Text(""), Text("no process holds this GPU", style="dim"))
    return table


class GpuDetailScreen(Screen[None]):
    """GPU ``index`` of host ``target``.

    Args:
        target: The host.
        index: The GPU's index (``Gpu.index``).
    """

    BINDINGS = keymap.bindings(keymap.GPU_VIEW)

    @dataclass
    class TextFetched(Message):
        """A holder's whole command line came back."""

        pid: int
        argv: tuple[str, ...]

    def __init__(self, session: Session, target: str, index: int) -> None:
        super().__init__()
        self.session = session
        self.target = target
        self.index = index
        self._texts: dict[int, tuple[str, ...]] = {}
        self._asked: set[tuple[int, int | None]] = set()
        """(pid, start ticks) whose whole command line was asked for (once each)."""

    def compose(self) -> ComposeResult:
        with Vertical(id="gpu-detail"):
            yield Static(id="gpu-detail-title")
            for series in SERIES:
                with Horizontal(classes="gpu-series"):
                    yield Static(id=f"gpu-{series.label}-figures", classes="gpu-series-figures")
                    yield HistoryChart(id=f"gpu-{series.label}", classes="gpu-series-line")
            yield Static(id="gpu-fitness")
            yield Static(id="gpu-process-memory")
            with VerticalScroll(id="gpu-holders-box"):
                yield Static(id="gpu-holders")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#gpu-holders-box").border_title = f"Processes on GPU {self.index}"
        self.session.data_changed.subscribe(self, self.hosts_changed)
        self._layout_for(self.app.size.width)
        self._show()

    def on_resize(self, event: events.Resize) -> None:
        self._layout_for(event.size.width)

    def _layout_for(self, width: int) -> None:
        """At 60 columns and less every chart gets a row of its own under its figures; up to 100, the figures
        wrap in a narrower column beside their chart."""
        self.set_class(width <= NARROW_MAX_CELLS, "-narrow")
        self.set_class(NARROW_MAX_CELLS < width < STACKED_BELOW_CELLS, "-medium")

    def hosts_changed(self, changed: Sequence[tuple[HostState, bool]]) -> None:
        """New data: redraw when it is this screen's host."""
        if any(host.target == self.target for host, _ in changed):
            with suppress(NoMatches):  # pushed, not composed yet: on_mount shows it
                self._show()

    def _show(self) -> None:
        host = self.session.hosts.get(self.target)
        snapshot = None if host is None else host.snapshot
        gpu = None if snapshot is None else next((g for g in snapshot.gpus if g.index == self.index), None)
        title = Text(f"GPU {self.index}", style="bold")
        title.append(" · ")
        title.append_text(safe_text(None if gpu is None else gpu.name, 60))
        title.append(" · ")
        title.append_text(safe_text(self.target, 40, style="bold"))
        self.query_one("#gpu-detail-title", Static).update(title)
        points = host.history.points(self.index) if host is not None else ()
        for series in SERIES:
            self.query_one(f"#gpu-{series.label}-figures", Static).update(
                series_text(series, points, self.has_class("-narrow"))
            )
            values = tuple(float(v) for v in (series.read(p) for p in points) if v is not None)
            chart = self.query_one(f"#gpu-{series.label}", HistoryChart)
            chart.data = values
            chart.top = (None if gpu is None else series.top(gpu)) or max(values, default=1.0)
        fitness = self.query_one("#gpu-fitness", Static)
        said = None if gpu is None or snapshot is None else fitness_text(gpu, snapshot)
        fitness.display = said is not None
        fitness.update(said or "")
        if host is not None:
            what = "the recording" if self.session.settings.replay else "the session"
            memory = process_memory_text(host.process_memory.series(self.index), self.app.size.width, what)
            self.query_one("#gpu-process-memory", Static).update(memory)
        holders = self.query_one("#gpu-holders", Static)
        if gpu is None or snapshot is None or host is None:
            holders.update(Text("no data for this GPU", style="dim"))
            return
        if gpu.error is not None:
            holders.update(safe_text(f"error: {gpu.error}", 300, style="red"))
            return
        holders.update(holders_table(gpu, snapshot, self._texts))
        self._fetch_cut_texts(host, gpu, snapshot)

    def _fetch_cut_texts(self, host: HostState, gpu: Gpu, snapshot: HostSnapshot) -> None:
        link = host.link
        for holder in gpu.processes:
            proc = snapshot.process(holder.pid)
            if link is None or proc is None or not proc.cmdline_truncated:
                continue
            identity = (proc.pid, proc.start_ticks)
            if identity not in self._asked:
                self._asked.add(identity)
                spawn("process-text", partial(self._fetch, link, proc))

    def _fetch(self, link: HostLink, proc: Proc) -> None:
        try:
            whole = process_text(link, proc, REQUEST_TIMEOUT_S)
        except Exception:  # noqa: BLE001, S110 - gone or changed: the cut text stays, marked as cut
            return
        self.post_message(self.TextFetched(proc.pid, tuple(whole.cmdline)))

    def on_gpu_detail_screen_text_fetched(self, message: TextFetched) -> None:
        self._texts[message.pid] = message.argv
        self._show()

    def action_close(self) -> None:
        self.app.pop_screen()
