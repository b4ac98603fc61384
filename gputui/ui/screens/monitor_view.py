"""What the monitor shows: its layout, and every panel drawn from the shown host's snapshot.

Wide (100 columns and more): the GPUs and, beside them, the health endpoints over the findings share the
width in halves; the process tree takes the whole width below them, so its commands have room. Narrower,
everything is stacked; at 60 columns and less (a tmux side pane) lines are compact.

The view holds what is shown (which host, pause, sort, filter, the layout) as reactives; the app holds the
hosts and tells the screen when one changed (``hosts_changed``). While paused, the panels keep the snapshots
they showed (a kill is planned from what is on screen); the host bar and the clean-slate line stay live. The
keys that change it are ``screens.monitor``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress

from textual import events
from textual.app import ComposeResult
from textual.containers import Container, Horizontal, Vertical
from textual.css.query import NoMatches
from textual.geometry import Region
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._toast import ToastRack

from gputui.agent.servers.discovery import discover_health_urls
from gputui.core.jobs import ProcNode, build_forest, finding_pids, flatten, outside_rows
from gputui.core.model import HostSnapshot, Proc, Verdict
from gputui.core.text import clock_time, fit, visible
from gputui.core.verdict import no_data_text
from gputui.transports.freshness import LIVE
from gputui.ui.session.context import Session
from gputui.ui.session.hosts import HostState
from gputui.ui.widgets.border import set_border_subtitle, set_border_title
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.endpoint_panel import EndpointPanel
from gputui.ui.widgets.filter_bar import FilterBar
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.fmt import screen_rows
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.host_bar import HostBar
from gputui.ui.widgets.hosts_overview import HostsOverview
from gputui.ui.widgets.key_footer import KeyFooter
from gputui.ui.widgets.process_table import SORT_MODES, ProcessTable
from gputui.ui.widths import NARROW_MAX_CELLS, STACKED_BELOW_CELLS

DISCOVERY_SWEEP_S = 12.0
"""The collector's first look for launchers and the first probe of what it found take up to this long (a full
process sweep, then a probe within its deadline): until then, no endpoint is "looking", not "none"."""
DISCOVERY_FIND_MAX_S = 60.0
"""With a launcher in the process list, "looking" lasts up to this long before it reads "none found"."""
HOSTS_REDRAW_S = 0.25
"""The host bar and the overview are redrawn at most this often: with many hosts, redrawing them on every
snapshot of every host costs O(hosts²) per second."""
FINDINGS_MIN_ROWS = 7
"""Rows (border included) the findings get at least beside the GPUs."""
FOOTER_ROOMY_CELLS = 140
"""Narrower than this, the footer packs its keys tighter (Textual's compact footer)."""
CLEAN_ROWS_WITH_FOOTER = 2
"""The clean-slate line takes up to this many rows beside the footer; a longer one hides the footer unless the
panels keep ``PANEL_ROWS_WITH_FOOTER`` rows."""
PANEL_ROWS_WITH_FOOTER = 28
"""Rows the panels keep above a long clean-slate line for the footer to stay (a 40-row side pane keeps it)."""


def table_nodes(snapshot: HostSnapshot) -> list[ProcNode]:
    """The GPU process trees in pre-order, then the other processes the panel lists (``outside_rows``: a
    zombie or D-state process outside those trees, what a finding names) as roots of their own; never the
    ancestors above a job's root."""
    nodes = flatten(build_forest(snapshot))
    shown = {node.proc.pid for node in nodes}
    nodes.extend(ProcNode(proc) for proc in outside_rows(snapshot, shown))
    return nodes


def _last_change(host: HostState, endpoints: int) -> str:
    """The newest state change of the host's endpoints, with its time (the URL left out when there is only
    one endpoint: the panel shows it)."""
    if not host.endpoint_changes:
        return ""
    at_s, line = host.endpoint_changes[-1]
    if endpoints == 1 and " " in line:
        line = line.split(" ", 1)[1]
    return f"{clock_time(at_s)} {line}"


def _looking(host: HostState, snapshot: HostSnapshot, now_s: float) -> bool:
    """Whether the host's collector may still be finding its endpoints: none reported yet, and either a
    launcher it will probe is in the process list (until ``DISCOVERY_FIND_MAX_S``) or the host's data is
    younger than ``DISCOVERY_SWEEP_S``."""
    if snapshot.endpoints or host.first_data_s is None or host.endpoint_changes:
        return False
    age_s = now_s - host.first_data_s
    if age_s < DISCOVERY_SWEEP_S:
        return True
    return age_s < DISCOVERY_FIND_MAX_S and _has_launcher(snapshot.processes)


_launcher_seen: list[tuple[tuple[Proc, ...], bool]] = []
"""The last process list asked about and its answer: a list stays the same object over the memory samples
between two process lists, and a job's hundreds of command lines are read once per list."""


def _has_launcher(processes: tuple[Proc, ...]) -> bool:
    """Whether an inference-server launcher the collector will probe is among ``processes``."""
    for seen, answer in _launcher_seen:
        if seen is processes:
            return answer
    answer = bool(discover_health_urls(processes))
    _launcher_seen[:] = [(processes, answer)]
    return answer


class MonitorView(Screen[None]):
    """The monitor's panels and what they show (``MonitorScreen`` adds its keys)."""

    active_index: reactive[int] = reactive(0)
    """The host the panels show, an index into the app's hosts."""
    paused: reactive[bool] = reactive(False)
    """The panels keep what they show (the host bar and the clean-slate line stay live)."""
    sort_mode: reactive[str] = reactive(SORT_MODES[0])
    """The process order, one of ``SORT_MODES``."""
    filter_text: reactive[str] = reactive("")
    """Only processes whose pid, user or command contain this are listed (case-insensitive)."""
    narrow: reactive[bool] = reactive(False)
    """A tmux side pane: compact lines everywhere."""
    stacked: reactive[bool] = reactive(False)
    """Too narrow for panels side by side: one above the other."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self._shown: dict[str, HostSnapshot | None] = {}
        """Per host, the snapshot the panels show: the newest one, or the one they froze on while paused."""
        self._hosts_dirty = False
        """The host bar and overview lag behind the hosts' state (see ``HOSTS_REDRAW_S``)."""
        self._hosts_timer_pending = False
        self._active_live: bool | None = None
        """Whether the shown host was live when its panels were last drawn (None: not drawn yet)."""
        self._toasts_over: Region | None = None
        """The screen region the notifications were last placed over (the GPU panel's)."""

    @property
    def active(self) -> HostState | None:
        """The host the panels show (None before any host, in the fleet view)."""
        hosts = self.session.hosts
        return hosts[self.active_index] if 0 <= self.active_index < len(hosts) else None

    def shown_snapshot(self, host: HostState) -> HostSnapshot | None:
        """What the panels show (or would show) of ``host``."""
        return self._shown.get(host.target, host.snapshot)

    # -- composition and layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Vertical(id="body"):
            yield HostBar(id="hostbar")
            yield HostsOverview(id="overview")
            with Container(id="main"):
                with Horizontal(id="top"):
                    yield GpuPanel(id="gpus", selectable=True)
                    with Vertical(id="side"):
                        yield EndpointPanel(id="health")
                        yield FindingsList(id="findings")
                # A container of its own: Textual renders again every widget whose clip meets a repainted
                # region, and the table's clip would otherwise be #main's, which the GPU panel repaints
                # every sample (the table itself changes only with the process list).
                with Container(id="procs-box"):
                    yield ProcessTable(id="procs")
            yield CleanSlateLine(id="clean")
            yield FilterBar(id="filter")
        yield KeyFooter(compact=self.app.size.width < FOOTER_ROOMY_CELLS)

    def on_mount(self) -> None:
        self.query_one(GpuPanel).border_title = "GPUs"
        self.query_one(EndpointPanel).border_title = "Health"
        self.query_one(FindingsList).border_title = "Findings"
        self._layout_for(self.app.size.width)
        self.query_one(ProcessTable).focus()
        self._show_active()

    def on_resize(self, event: events.Resize) -> None:
        self._layout_for(event.size.width)
        self.call_after_refresh(self._place_toasts)

    def _place_toasts(self) -> None:
        """Notifications go over the GPU panel, no taller than it: the health panel's state, the process
        list and the clean-slate line stay in view whatever is said (the newest shows when they overflow)."""
        try:
            region = self.query_one(GpuPanel).region
            rack = self.get_child_by_type(ToastRack)
        except NoMatches:
            return
        if not region or region == self._toasts_over:
            return
        self._toasts_over = region
        rack.styles.margin = (region.y, 0, 0, region.x)
        rack.styles.width = region.width
        rack.styles.max_height = max(1, region.height - 1)

    def _layout_for(self, width: int) -> None:
        self.narrow = width <= NARROW_MAX_CELLS
        self.stacked = width < STACKED_BELOW_CELLS
        # Every key label fits from 120 columns on, the fleet's Esc included, when packed tighter.
        self.query_one(Footer).compact = width < FOOTER_ROOMY_CELLS

    def watch_narrow(self, narrow: bool) -> None:
        self.query_one("#body").set_class(narrow, "-narrow")
        self.query_one(EndpointPanel).compact = narrow
        self._show_active()

    def watch_stacked(self, stacked: bool) -> None:
        self.query_one("#body").set_class(stacked, "-stacked")
        self._size_top()

    def watch_active_index(self) -> None:
        self._show_active()

    def watch_sort_mode(self) -> None:
        self._show_active()

    def watch_filter_text(self) -> None:
        self.refresh_bindings()  # Esc clears it, and then means something else
        self._show_active()

    def watch_paused(self, paused: bool) -> None:
        if paused:
            self._shown = {host.target: host.snapshot for host in self.session.hosts}
        else:
            self._shown.clear()  # back to the newest data of every host
        self._show_active()

    def _size_top(self) -> None:
        """Beside each other, the GPUs and the health over the findings are as tall as the taller needs."""
        top = self.query_one("#top")
        height: str | int = "auto"
        if not self.stacked:
            gpu_rows = 3 + max(1, len(self.query_one(GpuPanel).gpus))
            health_rows = 2 + max(1, self.query_one(EndpointPanel).rows)
            findings_rows = 2 + max(FINDINGS_MIN_ROWS - 2, self.query_one(FindingsList).lines)
            # Findings may take the band up to half the screen; past that they scroll.
            most = max(gpu_rows, self.size.height // 2)
            height = max(gpu_rows, min(most, health_rows + findings_rows))
        if str(top.styles.height) != str(height):
            top.styles.height = height
        self.call_after_refresh(self._place_toasts)

    # -- what the app tells the screen -----------------------------------------------------------------

    def hosts_changed(self, changed: Sequence[tuple[HostState, bool]]) -> None:
        """New data for these hosts (each with whether the user asked for it: shown even while paused)."""
        active = self.active
        for host, forced in changed:
            if self.paused and forced:
                self._shown[host.target] = host.snapshot
        if any(host is active for host, _ in changed):
            self._show_active(hosts_now=False)
        else:
            self._show_hosts()

    def host_changed(self, host: HostState) -> None:
        """Something but data changed about ``host`` (an error, tags, a kill, a check)."""
        if host is self.active:
            self._show_active()
        else:
            self._show_hosts_now()

    def tick(self) -> None:
        """Once a second: ages in the host bar, the progress of a running check, and the panels again when the
        shown host's data went stale (or came back): they say "no data since …" without waiting for data."""
        self._show_hosts_now()
        self._place_toasts()  # the host bar or the overview may have moved the panel
        host = self.active
        live = host is not None and self.session.host_status(host).state == LIVE
        if host is not None and live != self._active_live:
            self._active_live = live
            self._show_active()
            return
        if host is not None and host.check is not None and host.check.running:
            verdict = None if host.snapshot is None else host.snapshot.verdict
            with suppress(NoMatches):
                self._show_clean(verdict, host)

    # -- drawing ---------------------------------------------------------------------------------------

    def _show_hosts(self) -> None:
        """Redraw the host bar and overview soon: many snapshots within ``HOSTS_REDRAW_S`` cost one redraw."""
        self._hosts_dirty = True
        if self._hosts_timer_pending:
            return
        # One timer at a time: a redraw in between (the tick, a key) clears the flag but not the timer, and a
        # fresh timer per cleared flag would let every tick start another chain of redraws.
        self._hosts_timer_pending = True
        self.set_timer(HOSTS_REDRAW_S, self._flush_hosts)

    def _flush_hosts(self) -> None:
        self._hosts_timer_pending = False
        if self._hosts_dirty:
            self._show_hosts_now()

    def _show_hosts_now(self) -> None:
        self._hosts_dirty = False
        session = self.session
        statuses = [session.host_status(h) for h in session.hosts]
        try:
            self.query_one("#body").set_class(len(statuses) > 1, "-multi")
            self.query_one(HostBar).show(statuses, self.active_index, self.paused)
            self.query_one(HostsOverview).show(statuses, self.active_index)
        except NoMatches:  # not composed yet, or being torn down (quitting): nothing to show
            pass

    def _show_active(self, hosts_now: bool = True) -> None:
        """Redraw every panel from the shown host's snapshot.

        Args:
            hosts_now: Redraw the host bar and overview now (a key was pressed), else soon (new data).
        """
        try:
            self._show_active_now(hosts_now)
        except NoMatches:  # not composed yet, or being torn down (quitting): nothing to show
            pass

    def _show_active_now(self, hosts_now: bool) -> None:
        host = self.active
        if host is None:
            return
        session = self.session
        snapshot = self.shown_snapshot(host)
        now_s = session.clock()
        gpus = self.query_one(GpuPanel)
        procs = self.query_one(ProcessTable)
        health = self.query_one(EndpointPanel)
        # What the panels say depends on it ("no data since …"): the tick redraws them only when it changed
        # since this draw, not once more after the sample that brought a host back.
        self._active_live = session.host_status(host).state == LIVE
        with self.app.batch_update():
            if hosts_now:
                self._show_hosts_now()
            else:
                self._show_hosts()
            title = visible(host.target, 40)
            if snapshot is not None and snapshot.driver_version:
                title += f" · driver {fit(snapshot.driver_version, 20)}"
            title += f" · {snapshot.mode_label}" if snapshot is not None and snapshot.mode_label else ""
            settings = session.settings
            read_only = " · REPLAY" if settings.replay else " · READ-ONLY" if settings.read_only else ""
            flags = read_only + (" · ⏸ PAUSED" if self.paused else "")
            set_border_title(gpus, f"GPUs · {title}{flags}")
            filt = f" · filter: {visible(self.filter_text, 30)}" if self.filter_text else ""
            tagged = f" · {len(host.tagged)} tagged" if host.tagged else ""
            set_border_title(procs, f"Processes · sort: {self.sort_mode}{filt}{tagged}")
            missing = self._no_data_text(host, snapshot)
            verdict = None if host.snapshot is None else host.snapshot.verdict
            if missing is not None:
                verdict = Verdict(clean=False, known=False, reasons=(missing,))
            self._show_clean(verdict, host)
            if snapshot is None:
                message = host.error or "connecting…"
                if host.halted:
                    message = "not retrying (r: try again) · " + message
                gpus.show((), {}, {}, message=fit(message, 200))
                procs.show((), compact=self.narrow)
                health.show((), now_s=now_s, no_data=missing)
                # This host's own last state change (none before its first data), never the host shown before.
                set_border_subtitle(health, _last_change(host, 1))
                set_border_subtitle(procs, "")
                self.query_one(FindingsList).show((), no_data=missing)
                self._size_top()
                return
            baselines = {}
            if snapshot.verdict is not None:
                baselines = {
                    g.index: g.baseline_mib + snapshot.verdict.tolerance_mib for g in snapshot.verdict.gpus
                }
            history = {index: host.history.memory_mib(index) for index in host.history.indexes()}
            message = "" if snapshot.error is None else fit(snapshot.error, 200)
            gpus.show(snapshot.gpus, history, baselines, message=message)
            procs.show(
                table_nodes(snapshot),
                tagged=host.tagged,
                filter_text=self.filter_text,
                sort_mode=self.sort_mode,
                compact=self.narrow,
                # Elapsed times as of the process list, on the host's clock: like every other process figure,
                # and a table that is not repainted whole every second for a clock that moved.
                now_s=snapshot.processes_time if snapshot.processes_time is not None else now_s,
                keep=finding_pids(snapshot),  # a process a finding names keeps a row to jump to
            )
            empty = procs.row_count == 0 and not self.filter_text
            set_border_subtitle(procs, "no GPU processes" if empty else "")
            health.show(
                snapshot.endpoints,
                host.endpoint_history.as_dict(),
                now_s=now_s,
                tokens=host.endpoint_history.tokens_per_s(),
                no_data=missing,
                looking=_looking(host, snapshot, now_s),
            )
            set_border_subtitle(health, _last_change(host, len(snapshot.endpoints)))
            self.query_one(FindingsList).show(snapshot.findings, snapshot, no_data=missing)
            self._size_top()

    def _no_data_text(self, host: HostState, snapshot: HostSnapshot | None) -> str | None:
        """ "no data since 03:12:07: connection refused" while the host has no fresh data (before its first
        sample, its link down, its data stale); None while it is live. The time is that of the last data
        shown (the host's clock)."""
        state = self.session.host_status(host).state
        if snapshot is not None and state == LIVE:
            return None
        if host.error is not None:
            reason: str | None = fit(host.error, 160)
        elif snapshot is None:
            reason = "connecting"
        else:
            reason = "stale: no sample within its window"
        return no_data_text(reason, None if snapshot is None else snapshot.time)

    def _show_clean(self, verdict: Verdict | None, host: HostState) -> None:
        """The clean-slate line, whole: when it needs more than ``CLEAN_ROWS_WITH_FOOTER`` rows on a short
        screen, the footer makes room (the receipt is the answer; the keys are in the help)."""
        line = self.query_one(CleanSlateLine)
        line.show(verdict, host.check, self.session.clock(), host.fitness_due_s is not None, host.probing)
        rows = screen_rows(line.shown, max(1, self.size.width))
        roomy = self.size.height - rows >= PANEL_ROWS_WITH_FOOTER
        self.query_one(Footer).display = rows <= CLEAN_ROWS_WITH_FOOTER or roomy
