"""The Textual app: GPUs, the process tree that holds them, findings, kill keys and the clean-slate check.

A thin UI over the model. Each host gets one polling worker (a thread) that opens its link, loops
``next_snapshot`` → ``analysis.analyze`` → ``post_message``, and reconnects with a jittered backoff when the
link breaks. Every blocking link call runs in a daemon thread the worker waits on in short slices, so quitting
never waits on a hung host: the app sets a stop flag, closes the links from a daemon thread and leaves.
Every string that came from a machine is shown as ``Text`` (never markup) with control characters visible.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Input

from gputui.agent.protocol import (
    RESULT_ABANDONED,
    RESULT_CHANGED,
    RESULT_DENIED,
    RESULT_ERROR,
    RESULT_GONE,
    RESULT_REFUSED,
    RESULT_STILL_ALIVE,
    RESULT_UNINTERRUPTIBLE,
    RESULT_UNKNOWN,
    SIGNALLING_STAGES,
)
from gputui.core.actions import (
    DEFAULT_ESCALATE_S,
    AuditLog,
    KillOutcome,
    KillPlan,
    KillRun,
    Pending,
    PlanError,
    final_outcomes,
    killed_jobs,
    plan_kill,
)
from gputui.core.analysis import (
    Baselines,
    KilledJob,
    ProcNode,
    analyze,
    build_forest,
    flatten,
    job_remnants,
    memory_at_baseline,
)
from gputui.core.health_view import UP, HealthHistory, health_transitions
from gputui.core.model import HostSnapshot
from gputui.core.state import StateError
from gputui.core.textsafe import visible
from gputui.transports.base import HostLink, LinkError, full_sample
from gputui.transports.hostkeys import UnknownHostKey
from gputui.transports.reconnect import Backoff, worth_retrying
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.help import HelpScreen
from gputui.ui.screens.host_key import HostKeyScreen
from gputui.ui.widgets.border import set_border_subtitle, set_border_title
from gputui.ui.widgets.clean_slate import CleanCheck, CleanSlateLine, clock_time, receipt_times
from gputui.ui.widgets.filter_bar import FilterBar
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.fmt import duration
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.health_panel import HealthPanel
from gputui.ui.widgets.host_bar import HostBar, HostStatus
from gputui.ui.widgets.hosts_overview import HostsOverview
from gputui.ui.widgets.process_table import SORT_MODES, ProcessTable

if TYPE_CHECKING:
    from gputui.ui.screens.fleet import FleetScreen

T = TypeVar("T")
W = TypeVar("W", bound=Widget)
Clock = Callable[[], float]
HostKeyAcceptor = Callable[[str, Any], object]
"""Records an accepted host key: called with ``UnknownHostKey.hop`` and ``.key`` (does file IO)."""

STACKED_BELOW_CELLS = 100
"""Narrower than this, the GPU panel and the process tree are stacked instead of side by side."""
NARROW_MAX_CELLS = 60
"""At or below this width (a tmux side pane) the process tree shows its compact column set."""
HISTORY_SAMPLES = 120
"""Memory samples kept per GPU for the sparkline."""
POLL_SLICE_S = 0.1
"""How often a worker waiting on a link call looks at the stop flag: quitting takes at most about this."""
NEXT_SNAPSHOT_WAIT_S = 1.0
REQUEST_TIMEOUT_S = 30.0
"""Deadline of one agent command."""
KILL_POLL_S = 0.25
"""Longest wait on a kill operation before its worker looks whether the user abandoned it."""
QUIT_GRACE_S = 10.0
"""Quitting with kills under way waits for them at most their own delay plus this long."""
KILLED_JOBS_KEPT = 16
"""Killed jobs remembered per host to tell their survivors."""
HOSTS_REDRAW_S = 0.25
"""The host bar and the overview are redrawn at most this often: with many hosts, redrawing them on every
snapshot of every host costs O(hosts²) per second."""
FAST_MEMORY_INTERVAL_S = 0.2
FAST_PROCESS_INTERVAL_S = 0.5
"""Sampling while a clean-slate check watches memory drain; the normal intervals come back after it."""
FLEET_SCREEN = "fleet"
"""Name the fleet screen is installed under (kept while a host is shown, with its cursor, sort and filter)."""
FLEET_HOSTS_MAX = 32
"""Hosts that can be opened from the fleet view in one session: each keeps a link and a worker thread."""
DESTRUCTIVE_ACTIONS = frozenset({"kill", "kill_tree", "kill_all"})
MAIN_SCREEN_ACTIONS = frozenset(
    {
        "kill",
        "kill_tree",
        "kill_all",
        "tag",
        "check",
        "filter",
        "sort",
        "refresh",
        "pause",
        "help",
        "next_host",
        "host",
        "focus_findings",
    }
)
"""Actions of the main screen: off while a modal (confirmation, help) is on top, so no key leaks through."""

_BAD_RESULTS = frozenset({RESULT_REFUSED, RESULT_CHANGED, RESULT_DENIED, RESULT_ERROR, RESULT_UNKNOWN})
_WARN_RESULTS = frozenset({RESULT_STILL_ALIVE, RESULT_UNINTERRUPTIBLE, RESULT_GONE, RESULT_ABANDONED})


class _Stopping(Exception):
    """The app is quitting: the worker drops what it waits for."""


@dataclass
class HostState:
    """Everything the app keeps about one host. Touched only on the event loop, except ``link``."""

    target: str
    baselines: Baselines
    link: HostLink | None = None
    snapshot: HostSnapshot | None = None
    pending: HostSnapshot | None = None
    last_ok_s: float | None = None
    error: str | None = None
    error_s: float | None = None
    history_mib: dict[int, deque[int]] = field(default_factory=dict)
    history_time: float | None = None
    tagged: set[int] = field(default_factory=set)
    check: CleanCheck | None = None
    confirming: bool = False
    """A fresh full sample is on its way to confirm a clean memory sample before the receipt is shown."""
    health_history: HealthHistory = field(default_factory=HealthHistory)
    halted: bool = False
    """The last error cannot be fixed by retrying (auth, host key, bad target): the worker waits for ``r``."""
    retry_now: threading.Event = field(default_factory=threading.Event)
    """Set to make a halted worker try once more (``r``, an accepted host key)."""
    kills: dict[int, PendingKill] = field(default_factory=dict)
    """Kill operations under way on this host, by the app's own number for each."""
    killed_jobs: tuple[KilledJob, ...] = ()
    """Jobs killed here, newest last: what escaped them is a survivor finding. Replaced, never mutated (the
    polling worker reads it)."""


@dataclass
class PendingKill:
    """A kill operation the app follows: what it still waits for, and whether the user gave it up."""

    plan: KillPlan
    pending: tuple[Pending, ...] = ()
    abandon: threading.Event = field(default_factory=threading.Event)


def _who(members: Sequence[KillOutcome] | Sequence[Pending]) -> str:
    """``4250 sglang::detokenizer, 4200 python3``; pids alone, in order, when there are more than three."""
    if len(members) <= 3:
        return ", ".join(f"{o.pid} {visible(o.name or '?', 28)}" for o in members)
    return ", ".join(str(pid) for pid in sorted(o.pid for o in members))


def outcome_summary(plan: KillPlan, outcomes: Sequence[KillOutcome]) -> tuple[str, str]:
    """The notification for a finished kill: what finally happened to each process, grouped, and a severity.

    A result is followed by its stage's signal where it has one ("killed (KILL)"); checks and waits have none.
    """
    if not outcomes:
        return f"{plan.signal} on {visible(plan.target, 40)}: the agent reported nothing", "warning"
    groups: dict[tuple[str, str, str], list[KillOutcome]] = {}
    for outcome in final_outcomes(outcomes).values():
        groups.setdefault((outcome.result, outcome.signal or "", outcome.detail or ""), []).append(outcome)
    lines = []
    for (result, sent, detail), members in groups.items():
        line = f"{result}{f' ({sent})' if sent else ''}: {_who(members)}"
        if detail:
            line += f" – {visible(detail, 100)}"
        lines.append(line)
    results = {o.result for o in outcomes}
    severity = "error" if results & _BAD_RESULTS else "warning" if results & _WARN_RESULTS else "information"
    return "\n".join(lines), severity


def pending_summary(pending: Sequence[Pending], delay_s: float | None = None) -> str:
    """``KILL in 3.2 s to 1 process: 4250 sglang::detokenizer`` (or a look, without escalation).

    ``delay_s``: say the plan's delay instead ("KILL after 5 s"), as right after the signals.
    """
    what = "KILL" if any(p.signal == "KILL" for p in pending) else "a look"
    if delay_s is not None:
        when = f"after {delay_s:g} s"
    else:
        when = f"in {max((p.due_in_s or 0.0 for p in pending), default=0.0):.1f} s"
    noun = "process" if len(pending) == 1 else "processes"
    return f"{what} {when} to {len(pending)} {noun}: {_who(pending)}"


def _accept_host_key_default(hop: str, key: Any) -> object:
    from gputui.transports.ssh import accept_host_key  # paramiko: loaded only when a key is accepted

    return accept_host_key(hop, key)


def _table_nodes(snapshot: HostSnapshot) -> list[ProcNode]:
    """The GPU process trees in pre-order, then any other listed process (a zombie or D-state process
    outside those trees) as a root of its own, so every finding's process has a row to jump to."""
    nodes = flatten(build_forest(snapshot))
    shown = {node.proc.pid for node in nodes}
    nodes.extend(ProcNode(proc) for proc in snapshot.processes if proc.pid not in shown)
    return nodes


class GpuTuiApp(App[int]):
    """gputui: one screen for GPU memory, the processes holding it, what is stuck, and the clean slate.

    Args:
        targets: Host targets, shown in this order (number keys select them).
        link_factory: Makes a fresh, unopened link for a target (called again on every reconnect).
        baselines_for: The clean-slate baselines of a target.
        read_only: Remove every destructive key and refuse kills.
        clock: Epoch seconds source for ages, check durations and receipts (tests freeze it).
        memory_interval_s: The normal sampling interval (restored after a clean-slate check).
        process_interval_s: The normal process-list interval (restored after a clean-slate check).
        escalate_s: Seconds between TERM and KILL for tree kills; after a single TERM or KILL, the agent
            says after this long whether the process is gone.
        check_timeout_s: A clean-slate check gives up after this many seconds.
        notify_timeout_s: Seconds a notification stays.
        audit_dir: Where the audit log goes (None: the XDG state directory).
        audit: Write the audit log (False: ``--no-audit``, and the demo, whose kills are simulated).
        accept_host_key: Records a host key the user accepted, called with ``UnknownHostKey.hop`` and
            ``.key`` in a worker thread (default ``gputui.transports.ssh.accept_host_key``).
        retry_base_s: Upper bound of the first reconnect delay after a transient error, seconds.
        retry_cap_s: Largest reconnect delay, seconds.
        fleet: The fleet view (``gputui.ui.screens.fleet.FleetScreen``), shown first; ``targets`` may then be
            empty, and hosts opened from it are added as they are opened.
    """

    CSS_PATH = "app.tcss"
    TITLE = "gputui"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("space", "tag", "Tag"),
        Binding("k", "kill('TERM')", "TERM"),
        Binding("K", "kill('KILL')", "KILL"),
        Binding("t", "kill_tree", "Tree"),
        Binding("X", "kill_all", "Kill all"),
        Binding("c", "check", "Clean?"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("r", "refresh", "Refresh", show=False),
        Binding("p", "pause", "Pause", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("tab", "next_host", "Next host", show=False, priority=True),
        Binding("f", "focus_findings", "Findings", show=False),
        Binding("escape", "fleet", "Fleet"),
        *(Binding(str(n), f"host({n - 1})", f"Host {n}", show=False) for n in range(1, 10)),
    ]

    class HostSnapshotReady(Message):
        """New analysed snapshots are waiting (or this one, when ``snapshot`` is set).

        The workers post it without a snapshot, and only when the app's inbox was empty: the newest snapshot
        of each host waits there, and the handler applies every waiting host at once. A slow UI thus never
        queues more than one of these and always shows the latest data.
        """

        def __init__(self, target: str, snapshot: HostSnapshot | None = None, forced: bool = False) -> None:
            super().__init__()
            self.target = target
            self.snapshot = snapshot
            """The snapshot itself, or None: take every waiting snapshot from the inbox (``target`` is then
            only the host whose delivery posted the message)."""
            self.forced = forced
            """Asked for by the user (refresh): shown even while paused."""

    class CleanConfirmed(Message):
        """The fresh full sample taken to confirm a clean memory sample came back (or could not be taken)."""

        def __init__(
            self,
            target: str,
            started_s: float,
            clean_seen_s: float,
            snapshot: HostSnapshot | None,
            error: str,
        ) -> None:
            super().__init__()
            self.target = target
            self.started_s = started_s
            """Which check asked (its ``started_s``): an answer to an older check is dropped."""
            self.clean_seen_s = clean_seen_s
            """App-clock seconds at which the clean memory sample arrived: the receipt's time."""
            self.snapshot = snapshot
            """The analysed fresh sample, None when it could not be taken (``error`` says why)."""
            self.error = error

    class HostFailed(Message):
        """A host's link broke or could not be opened; the worker retries unless ``retrying`` is False."""

        def __init__(
            self, target: str, error: str, *, retrying: bool = True, cause: BaseException | None = None
        ) -> None:
            super().__init__()
            self.target = target
            self.error = error
            self.retrying = retrying
            """False: retrying cannot help; the worker waits until the user asks (``r``)."""
            self.cause = cause
            """The exception behind ``error`` (an ``UnknownHostKey`` offers to accept the key)."""

    class HostKeyRecorded(Message):
        """Accepting a host key finished: recorded, or ``failure`` says why not."""

        def __init__(self, target: str, error: UnknownHostKey, failure: str | None) -> None:
            super().__init__()
            self.target = target
            self.error = error
            self.failure = failure

    class KillStarted(Message):
        """The agent checked and signalled: the first outcomes, and what it still waits for."""

        def __init__(self, target: str, key: int, outcomes: list[KillOutcome], pending: tuple[Pending, ...]):
            super().__init__()
            self.target = target
            self.key = key
            """The app's number for this kill (``HostState.kills``)."""
            self.outcomes = outcomes
            self.pending = pending

    class KillFinished(Message):
        """A kill operation ended (or could not start: ``error``)."""

        def __init__(
            self,
            target: str,
            key: int,
            plan: KillPlan,
            outcomes: list[KillOutcome],
            error: str | None,
            audit_errors: list[str],
            checking: bool,
            abandoned: bool = False,
            jobs: tuple[KilledJob, ...] = (),
        ) -> None:
            super().__init__()
            self.target = target
            self.key = key
            self.plan = plan
            self.outcomes = outcomes
            self.error = error
            self.audit_errors = audit_errors
            self.checking = checking
            """A clean-slate check was started with this kill."""
            self.abandoned = abandoned
            """The user gave up on its escalation (quitting twice)."""
            self.jobs = jobs
            """What it took down, to tell survivors later."""

    def __init__(
        self,
        targets: Sequence[str],
        link_factory: Callable[[str], HostLink],
        baselines_for: Callable[[str], Baselines] | None = None,
        *,
        read_only: bool = False,
        clock: Clock | None = None,
        memory_interval_s: float = 1.0,
        process_interval_s: float = 3.0,
        escalate_s: float = DEFAULT_ESCALATE_S,
        check_timeout_s: float = 60.0,
        notify_timeout_s: float = 8.0,
        audit_dir: Path | None = None,
        audit: bool = True,
        accept_host_key: HostKeyAcceptor | None = None,
        retry_base_s: float = 1.0,
        retry_cap_s: float = 30.0,
        fleet: Screen[None] | None = None,
    ) -> None:
        super().__init__()
        if not targets and fleet is None:
            raise ValueError("at least one target is needed")
        self._fleet = fleet
        self._link_factory = link_factory
        self._clock: Clock = clock or time.time
        self.read_only = read_only
        self._memory_interval_s = memory_interval_s
        self._process_interval_s = process_interval_s
        self._escalate_s = escalate_s
        self._check_timeout_s = check_timeout_s
        self._notify_timeout_s = notify_timeout_s
        self._audit_dir = audit_dir
        self._audit = AuditLog(audit_dir, self._clock) if audit else None
        self._next_kill = 0
        self._quitting = False
        """``q`` was pressed while kills were under way: the app leaves once they are done."""
        self._abandoning = False
        """``q`` was pressed twice: the kills under way are being abandoned."""
        self._accept_host_key: HostKeyAcceptor = accept_host_key or _accept_host_key_default
        self._retry_base_s = retry_base_s
        self._retry_cap_s = retry_cap_s
        make_baselines = baselines_for or (lambda _target: Baselines())
        self._make_baselines = make_baselines
        self.hosts: list[HostState] = [HostState(t, make_baselines(t)) for t in targets]
        self._hosts_by_target: dict[str, HostState] = {}
        for host in self.hosts:
            self._hosts_by_target.setdefault(host.target, host)
        self._inbox: dict[str, tuple[HostSnapshot, bool]] = {}
        """The newest undelivered snapshot of each host (and whether it was forced), written by workers."""
        self._inbox_lock = threading.Lock()
        self._hosts_dirty = False
        """The host bar and overview lag behind the hosts' state (see ``HOSTS_REDRAW_S``)."""
        self._hosts_timer_pending = False
        """A ``_flush_hosts`` timer is running: at most one at a time, whoever redraws meanwhile."""
        self.active_index = 0
        self.paused = False
        self.sort_mode = SORT_MODES[0]
        self.filter_text = ""
        self._stopping = threading.Event()
        self._calls_lock = threading.Lock()
        self._waiting_calls: set[threading.Event] = set()
        """The events of the link calls workers wait on in ``_bounded``; quitting sets them all."""
        self._narrow = False
        self._executor: ThreadPoolExecutor | None = None
        self.notices: deque[tuple[str, str, str]] = deque(maxlen=100)
        """The latest notifications as (severity, title, message), newest last."""

    # -- composition and layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Vertical(id="body", classes="-multi" if len(self.hosts) > 1 else ""):
            yield HostBar(id="hostbar")
            yield HostsOverview(id="overview")
            with Container(id="main"):
                with Vertical(id="left"):
                    yield GpuPanel(id="gpus")
                    yield HealthPanel(id="health")
                    yield FindingsList(id="findings")
                yield ProcessTable(id="procs")
            yield CleanSlateLine(id="clean")
            yield FilterBar(id="filter")
        yield Footer()

    def on_mount(self) -> None:
        # Textual runs thread workers on the loop's default executor (min(32, cpus + 4) threads); a poll
        # worker holds its thread for the app's life, so size the pool for every host plus kills and checks.
        hosts_max = len(self.hosts) + (FLEET_HOSTS_MAX if self._fleet is not None else 0)
        self._executor = ThreadPoolExecutor(max_workers=2 * hosts_max + 8, thread_name_prefix="gputui")
        asyncio.get_running_loop().set_default_executor(self._executor)
        self._apply_layout(self.size.width)
        self._main(GpuPanel).border_title = "GPUs"
        self._main(HealthPanel).border_title = "Health"
        self._main(FindingsList).border_title = "Findings"
        self._main(ProcessTable).focus()
        self._show_active()
        for host in self.hosts:
            self._poll_host(host.target)
        self.set_interval(1.0, self._tick)
        if self._fleet is not None:
            self.install_screen(self._fleet, FLEET_SCREEN)
            self.show_fleet()

    def on_resize(self, event: events.Resize) -> None:
        try:
            self._apply_layout(event.size.width)
        except NoMatches:  # not composed yet, or shutting down
            pass

    def _apply_layout(self, width: int) -> None:
        body = self._main("#body")
        narrow = width <= NARROW_MAX_CELLS
        body.set_class(width < STACKED_BELOW_CELLS, "-stacked")
        body.set_class(narrow, "-narrow")
        if narrow != self._narrow:
            self._narrow = narrow
            self._show_active()

    def _main(self, selector: type[W] | str) -> Any:
        """A widget of the main screen (also while a modal is on top of it).

        Raises:
            NoMatches: The screens are gone (the app is shutting down).
        """
        if not self.screen_stack:
            raise NoMatches("the app has no screen (shutting down)")
        return self.screen_stack[0].query_one(selector)

    # -- host state ------------------------------------------------------------------------------------

    @property
    def active(self) -> HostState:
        """The host the panels show."""
        return self.hosts[self.active_index]

    def _host(self, target: str) -> HostState | None:
        return self._hosts_by_target.get(target)

    def _stale_after_s(self) -> float:
        return max(3.0 * self._memory_interval_s, 3.0)

    def host_status(self, host: HostState) -> HostStatus:
        """What the host bar says about ``host`` now."""
        now_s = self._clock()
        age_s = None if host.last_ok_s is None else max(0.0, now_s - host.last_ok_s)
        if host.error is not None and (host.last_ok_s is None or (host.error_s or 0) >= host.last_ok_s):
            state = "error"
        elif host.last_ok_s is None:
            state = "connecting"
        elif age_s is not None and age_s > self._stale_after_s():
            state = "stale"
        else:
            state = "live"
        return HostStatus(host.target, state, age_s, host.error, host.snapshot, halted=host.halted)

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
        if not self._hosts_dirty:
            return  # redrawn meanwhile (a host switch, the tick)
        self._show_hosts_now_safe()

    def _show_hosts_now_safe(self) -> None:
        try:
            self._show_hosts_now()
        except NoMatches:  # the screen is being torn down (quitting): nothing to show
            pass

    def _show_hosts_now(self) -> None:
        self._hosts_dirty = False
        statuses = [self.host_status(h) for h in self.hosts]
        self._main(HostBar).show(statuses, self.active_index, self.paused)
        self._main(HostsOverview).show(statuses, self.active_index)

    def _show_active(self, hosts_now: bool = True) -> None:
        """Redraw every panel from the shown host's latest snapshot.

        Args:
            hosts_now: Redraw the host bar and overview now (a key was pressed), else soon (new data).
        """
        try:
            self._show_active_now(hosts_now)
        except NoMatches:  # the screen is being torn down (quitting): nothing to show
            pass

    def _show_active_now(self, hosts_now: bool = True) -> None:
        if not self.hosts:
            return  # the fleet view, before any host was opened from it
        host = self.active
        snapshot = host.snapshot
        with self.batch_update():
            if hosts_now:
                self._show_hosts_now()
            else:
                self._show_hosts()
            gpus = self._main(GpuPanel)
            procs = self._main(ProcessTable)
            title = visible(host.target, 40)
            if snapshot is not None and snapshot.driver_version:
                title += f" · driver {visible(snapshot.driver_version, 20)}"
            title += f" · {snapshot.mode_label}" if snapshot is not None and snapshot.mode_label else ""
            flags = (" · READ-ONLY" if self.read_only else "") + (" · ⏸ PAUSED" if self.paused else "")
            set_border_title(gpus, f"GPUs · {title}{flags}")
            sort = f"sort: {self.sort_mode}"
            filt = f" · filter: {visible(self.filter_text, 30)}" if self.filter_text else ""
            tagged = f" · {len(host.tagged)} tagged" if host.tagged else ""
            set_border_title(procs, f"Processes · {sort}{filt}{tagged}")
            if snapshot is None:
                message = host.error or "connecting…"
                if host.halted:
                    message = "not retrying (r: try again) · " + message
                gpus.show((), {}, {}, message=visible(message, 200))
                procs.show((), compact=self._narrow)
                self._main(HealthPanel).show((), now_s=self._clock())
                self._main(FindingsList).show(())
                self._main(CleanSlateLine).show(None, host.check, self._clock())
                return
            baselines = {}
            if snapshot.verdict is not None:
                baselines = {
                    g.index: g.baseline_mib + snapshot.verdict.tolerance_mib for g in snapshot.verdict.gpus
                }
            message = "" if snapshot.error is None else visible(snapshot.error, 200)
            gpus.show(snapshot.gpus, host.history_mib, baselines, message=message)
            procs.show(
                _table_nodes(snapshot),
                tagged=host.tagged,
                filter_text=self.filter_text,
                sort_mode=self.sort_mode,
                compact=self._narrow,
            )
            empty = procs.row_count == 0 and not self.filter_text
            set_border_subtitle(procs, "no GPU processes" if empty else "")
            health = self._main(HealthPanel)
            health.compact = self._narrow
            health.show(snapshot.health, host.health_history.as_dict(), now_s=self._clock())
            self._main(FindingsList).show(snapshot.findings, snapshot)
            self._main(CleanSlateLine).show(snapshot.verdict, host.check, self._clock())

    def _tick(self) -> None:
        """Once a second: ages in the host bar, clean-slate check deadlines."""
        if self._stopping.is_set() or len(self.screen_stack) == 0 or not self.hosts:
            return
        now_s = self._clock()
        for host in self.hosts:
            check = host.check
            if (
                check is not None
                and check.finished_s is None
                and now_s - check.started_s > self._check_timeout_s
            ):
                host.check = replace(check, finished_s=now_s, clean=False)
                self._configure(host.target, self._memory_interval_s, self._process_interval_s)
                self._notify(
                    f"{visible(host.target, 40)}: not clean after {duration(now_s - check.started_s)}",
                    severity="error",
                    title="clean slate",
                )
        self._show_hosts_now_safe()
        host = self.active
        if host.check is not None and host.check.finished_s is None:
            # The progress line counts seconds even when no new sample came in.
            verdict = None if host.snapshot is None else host.snapshot.verdict
            try:
                self._main(CleanSlateLine).show(verdict, host.check, now_s)
            except NoMatches:
                pass

    def _notify(self, message: str, *, severity: str = "information", title: str = "") -> None:
        self.notices.append((severity, title, message))
        # Messages carry machine text: never parse them as markup.
        self.notify(
            message,
            title=title,
            severity=severity,  # type: ignore[arg-type]
            timeout=self._notify_timeout_s,
            markup=False,
        )

    # -- messages from workers -------------------------------------------------------------------------

    def _deliver(self, target: str, snapshot: HostSnapshot, forced: bool = False) -> None:
        """Hand a worker's snapshot to the UI (any thread): the newest replaces one not yet shown.

        A message is posted only when the inbox goes from empty to non-empty, and its handler takes every
        waiting host at once: however many hosts deliver and however far the UI falls behind, the queue holds
        at most one ``HostSnapshotReady`` and each loop turn applies every waiting snapshot with one redraw.
        """
        with self._inbox_lock:
            was_empty = not self._inbox
            waiting = self._inbox.get(target)
            self._inbox[target] = (snapshot, forced or (waiting is not None and waiting[1]))
        if was_empty:
            self.post_message(self.HostSnapshotReady(target, None, forced))

    def on_gpu_tui_app_host_snapshot_ready(self, message: HostSnapshotReady) -> None:
        if message.snapshot is not None:
            entries = {message.target: (message.snapshot, message.forced)}
        else:
            with self._inbox_lock:
                entries, self._inbox = self._inbox, {}
        applied: list[HostState] = []
        for target, (snapshot, forced) in entries.items():
            host = self._host(target)
            if host is None:
                continue
            if self.paused and not forced:
                host.pending = snapshot
                host.last_ok_s = self._clock()
                host.error = None
                continue
            self._apply_snapshot(host, snapshot)
            applied.append(host)
        self._show_applied(applied)

    def _show_applied(self, hosts: Sequence[HostState]) -> None:
        """Redraw after new data for ``hosts``: every panel when the shown host is one, else the host bar."""
        if not hosts:
            return
        if any(host is self.active for host in hosts):
            self._show_active(hosts_now=False)
        else:
            self._show_hosts()

    def _apply_snapshot(self, host: HostState, snapshot: HostSnapshot) -> None:
        """Take ``snapshot`` into ``host``'s state; the caller redraws, once for every host it applied."""
        previous = host.snapshot
        if previous is not None and previous.boot_id != snapshot.boot_id and host.tagged:
            host.tagged.clear()
            self._notify(
                f"{visible(host.target, 40)} rebooted: tagged processes forgotten", severity="warning"
            )
        if snapshot.time is not None and snapshot.time == host.history_time:
            for gpu in snapshot.gpus:  # the same moment again (a frozen clock): replace, do not append
                if gpu.memory_used_mib is not None and host.history_mib.get(gpu.index):
                    host.history_mib[gpu.index][-1] = gpu.memory_used_mib
        else:
            for gpu in snapshot.gpus:
                if gpu.memory_used_mib is not None:
                    host.history_mib.setdefault(gpu.index, deque(maxlen=HISTORY_SAMPLES)).append(
                        gpu.memory_used_mib
                    )
        host.history_time = snapshot.time
        for line in health_transitions(previous.health if previous is not None else (), snapshot.health):
            recovered = line.endswith(f"→ {UP}") or f"→ {UP} " in line
            self._notify(
                f"{visible(host.target, 40)}: {line}",
                severity="information" if recovered else "warning",
                title="health",
            )
        host.health_history.update(snapshot.health)
        host.snapshot = snapshot
        host.pending = None
        host.last_ok_s = self._clock()
        host.error = None
        host.halted = False
        check = host.check
        if (
            check is not None
            and check.finished_s is None
            and not host.confirming
            and not host.kills
            and memory_at_baseline(snapshot, host.baselines)
        ):
            # Memory alone decides when to look: this sample's process list may be up to a process interval
            # old, in either direction. Only a fresh full sample whose verdict is clean makes the receipt;
            # its time stays the time this clean memory sample arrived.
            host.confirming = True
            self._confirm_clean(host.target, check.started_s, self._clock(), snapshot.time)

    def on_gpu_tui_app_clean_confirmed(self, message: CleanConfirmed) -> None:
        host = self._host(message.target)
        if host is None:
            return
        check = host.check
        if check is None or check.started_s != message.started_s:
            return  # an answer to a check that was replaced
        host.confirming = False
        if check.finished_s is not None:
            return  # the deadline passed meanwhile: its receipt stands
        verdict = None if message.snapshot is None else message.snapshot.verdict
        if verdict is None or not verdict.clean or host.kills:
            # Not confirmed (or a kill is still under way): the check keeps watching; the next clean memory
            # sample asks again.
            return
        killed = [member for job in host.killed_jobs for member in job.members]
        if message.snapshot is not None and job_remnants(message.snapshot, killed):
            return  # a zombie of the killed trees is still listed: not a clean slate yet
        clean_s = message.clean_seen_s
        host.check = replace(check, finished_s=clean_s, clean=True)
        self._configure(host.target, self._memory_interval_s, self._process_interval_s)
        self._notify(
            f"{visible(host.target, 40)}: CLEAN ✓ {verdict.gpus_at_baseline}/{len(verdict.gpus)} GPUs at"
            f" baseline at {clock_time(clean_s)} (memory sample, confirmed by a full sample;"
            f" {receipt_times(host.check)})",
            title="clean slate",
        )
        if host is self.active:
            self._show_active(hosts_now=False)
        else:
            self._show_hosts()

    def on_gpu_tui_app_host_failed(self, message: HostFailed) -> None:
        host = self._host(message.target)
        if host is None:
            return
        first = host.error is None or host.halted
        host.error = message.error
        host.error_s = self._clock()
        if not message.retrying:
            host.halted = True  # only _retry (r, an accepted key) and fresh data clear it
        cause = message.cause
        asking = host.halted and isinstance(cause, UnknownHostKey) and not self._stopping.is_set()
        if first and not asking:  # the host-key question says it all; a toast would cover it
            suffix = " · not retrying: press r to try again" if host.halted else ""
            self._notify(visible(message.error, 300) + suffix, severity="error", title="host error")
        if asking and isinstance(cause, UnknownHostKey):
            self._ask_host_key(host.target, cause)
        if host is self.active and host.snapshot is None:
            self._show_active()
        else:
            self._show_hosts_now_safe()  # errors are rare (retries back off): shown at once

    def _ask_host_key(self, target: str, error: UnknownHostKey) -> None:
        """Offer to accept an unknown host key; a changed or revoked key never gets here."""
        if any(isinstance(s, HostKeyScreen) and s.target == target for s in self.screen_stack):
            return

        def decided(accepted: bool | None) -> None:
            if accepted:
                self._record_host_key(target, error)
            else:
                self._notify(
                    f"{visible(target, 40)}: host key refused; not connecting (r asks again)",
                    severity="warning",
                    title="host key",
                )

        self.push_screen(HostKeyScreen(target, error), decided)

    def on_gpu_tui_app_host_key_recorded(self, message: HostKeyRecorded) -> None:
        host = self._host(message.target)
        if message.failure is not None:
            self._notify(
                f"{visible(message.target, 40)}: host key not recorded: {visible(message.failure, 300)}",
                severity="error",
                title="host key",
            )
            return
        self._notify(
            f"{visible(message.target, 40)}: {visible(message.error.key_type, 40)} "
            f"{message.error.fingerprint} recorded for {visible(message.error.lookup_name, 80)}; connecting",
            title="host key",
        )
        if host is not None:
            self._retry(host)

    def _retry(self, host: HostState) -> None:
        """Let a halted host's worker try once more."""
        host.halted = False
        host.error = None
        host.retry_now.set()
        self._show_active()

    def on_gpu_tui_app_kill_started(self, message: KillStarted) -> None:
        host = self._host(message.target)
        entry = None if host is None else host.kills.get(message.key)
        if host is None or entry is None:
            return
        entry.pending = message.pending
        sent = [o for o in message.outcomes if o.stage in SIGNALLING_STAGES]
        text, severity = outcome_summary(entry.plan, message.outcomes)
        if message.pending:
            delay_s = entry.plan.escalate_s if entry.plan.escalate_s is not None else entry.plan.wait_s
            text += "\n" + pending_summary(message.pending, delay_s)
        self._notify(text, severity=severity, title=f"{entry.plan.signal} on {visible(message.target, 40)}")
        if host.check is not None and host.check.finished_s is None and sent:
            host.check = replace(host.check, kill_s=self._clock(), kill_pending=True)
        host.tagged.clear()
        if host is self.active:
            self._show_active()

    def on_gpu_tui_app_kill_finished(self, message: KillFinished) -> None:
        host = self._host(message.target)
        title = f"{message.plan.signal} on {visible(message.target, 40)}"
        text = ""
        if message.error is not None:
            text = f"{visible(message.target, 40)}: {visible(message.error, 300)}"
            self._notify(text, severity="error", title="kill failed")
        else:
            text, severity = outcome_summary(message.plan, message.outcomes)
            if message.abandoned:
                text = "escalation abandoned\n" + text
            self._notify(text, severity=severity, title=title)
        for problem in message.audit_errors:
            self._notify(f"audit log not written: {visible(problem, 200)}", severity="warning")
        if host is not None:
            host.kills.pop(message.key, None)
            if message.jobs:
                host.killed_jobs = (*host.killed_jobs, *message.jobs)[-KILLED_JOBS_KEPT:]
            check = host.check
            if check is not None and check.finished_s is None:
                if message.checking and message.error is not None and not message.outcomes:
                    host.check = None
                    self._configure(host.target, self._memory_interval_s, self._process_interval_s)
                else:
                    host.check = replace(check, kill_pending=bool(host.kills))
            if host is self.active:
                self._show_active()
        if self._quitting and not self._kills_under_way():
            self._exit_message([f"gputui: {title}: {line}" for line in text.splitlines()])

    def on_findings_list_jump_to_process(self, message: FindingsList.JumpToProcess) -> None:
        procs = self._main(ProcessTable)
        if not procs.select_pid(message.pid) and self.filter_text:
            self.filter_text = ""
            self._main(FilterBar).value = ""
            self._show_active()
        if procs.select_pid(message.pid):
            procs.focus()
        else:
            self._notify(f"pid {message.pid} is not listed any more", severity="warning")

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.filter_text = event.value
            self._show_active()

    def on_filter_bar_closed(self, _message: FilterBar.Closed) -> None:
        self._main("#body").remove_class("-filtering")
        self._main(ProcessTable).focus()

    # -- workers ---------------------------------------------------------------------------------------

    def _bounded(self, call: Callable[[], T]) -> T:
        """Run a blocking link call in a daemon thread and wait for it, giving up when the app quits.

        A hung host then holds only an abandoned daemon thread, never the worker or the exit.
        """
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = call()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting worker
                box["error"] = exc
            finally:
                done.set()

        # Quitting sets every waiting call's event (``_shutdown_links``), so the wait needs no polling:
        # with 64 hosts, waking every POLL_SLICE_S cost hundreds of wake-ups a second.
        with self._calls_lock:
            if self._stopping.is_set():
                raise _Stopping
            self._waiting_calls.add(done)
        try:
            threading.Thread(target=run, name="gputui-link-call", daemon=True).start()
            done.wait()
        finally:
            with self._calls_lock:
                self._waiting_calls.discard(done)
        if "value" not in box and "error" not in box:
            raise _Stopping  # woken by quitting, the call has not finished
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _close_quietly(self, link: HostLink) -> None:
        def close() -> None:
            try:
                link.close()
            except Exception:  # noqa: BLE001, S110 - the link is being dropped either way
                pass

        threading.Thread(target=close, name="gputui-link-close", daemon=True).start()

    @work(thread=True, exit_on_error=False, group="poll")
    def _poll_host(self, target: str) -> None:
        """Open ``target``'s link and stream its snapshots to the UI until the app quits."""
        host = self._host(target)
        if host is None:
            return
        backoff = Backoff(base_s=self._retry_base_s, cap_s=self._retry_cap_s)
        while not self._stopping.is_set():
            link = self._link_factory(target)
            host.link = link
            halted = False
            try:
                self._bounded(link.open)
                while not self._stopping.is_set():
                    # Called directly, not through _bounded: next_snapshot returns within its timeout and as
                    # soon as close() is called (the HostLink contract), and a thread per call cost more than
                    # everything else the worker does once 64 hosts deliver every second.
                    snapshot = link.next_snapshot(NEXT_SNAPSHOT_WAIT_S)
                    if snapshot is None:
                        continue
                    jobs = host.killed_jobs
                    analysed = analyze(snapshot, host.baselines, now=snapshot.time, killed_jobs=jobs)
                    self._deliver(target, analysed)
                    backoff.reset()
            except _Stopping:
                break
            except LinkError as exc:
                # Auth failures, host keys, bad targets: only the user can fix them, and a retry loop would
                # earn this client sshd's PerSourcePenalties. Show the error and wait for ``r``.
                halted = not worth_retrying(exc)
                message = str(exc) or f"{target}: link failed"
                self.post_message(self.HostFailed(target, message, retrying=not halted, cause=exc))
            except Exception as exc:  # noqa: BLE001 - a bad snapshot must not end this host's polling
                self.post_message(self.HostFailed(target, f"{target}: {type(exc).__name__}: {exc}"))
            host.link = None
            self._close_quietly(link)
            if halted:
                if not self._wait_for_retry(host):
                    break
                backoff.reset()
            elif self._stopping.wait(backoff.next_delay_s()):
                break

    def _wait_for_retry(self, host: HostState) -> bool:
        """Block a halted worker until the user asks for another try (True) or the app quits (False)."""
        while not self._stopping.is_set():
            if host.retry_now.wait(POLL_SLICE_S):
                host.retry_now.clear()
                return not self._stopping.is_set()
        return False

    @work(thread=True, exit_on_error=False, group="requests")
    def _record_host_key(self, target: str, error: UnknownHostKey) -> None:
        """Write the accepted key to known_hosts (file IO, so in a thread), then let the worker reconnect."""
        try:
            self._bounded(lambda: self._accept_host_key(error.hop, error.key))
        except _Stopping:
            return
        except Exception as exc:  # noqa: BLE001 - a changed key, an unwritable file: shown, not raised
            self.post_message(self.HostKeyRecorded(target, error, str(exc) or type(exc).__name__))
            return
        self.post_message(self.HostKeyRecorded(target, error, None))

    @work(thread=True, exit_on_error=False, group="requests")
    def _sample_now(self, target: str) -> None:
        """Ask for an immediate full sample (refresh, after a kill)."""
        host = self._host(target)
        link = None if host is None else host.link
        if host is None or link is None:
            return
        try:
            snapshot = self._bounded(lambda: full_sample(link, target, REQUEST_TIMEOUT_S))
            analysed = analyze(snapshot, host.baselines, now=snapshot.time, killed_jobs=host.killed_jobs)
            self._deliver(target, analysed, forced=True)
        except _Stopping:
            return
        except (LinkError, KeyError, TypeError, ValueError) as exc:
            self.post_message(self.HostFailed(target, f"{target}: refresh failed: {exc}"))

    @work(thread=True, exit_on_error=False, group="requests")
    def _confirm_clean(
        self, target: str, started_s: float, clean_seen_s: float, memory_time: float | None
    ) -> None:
        """Take a fresh full sample (processes listed now) and analyse it, as ``gputui check --wait`` does.

        Args:
            target: The host whose check saw a clean memory sample.
            started_s: The check's ``started_s`` (identifies it).
            clean_seen_s: App-clock seconds at which the clean memory sample arrived.
            memory_time: The clean memory sample's own time (host epoch seconds): the fresh sample's
                process list must not be older than it.
        """
        host = self._host(target)
        link = None if host is None else host.link
        snapshot: HostSnapshot | None = None
        error = ""
        if host is None or link is None:
            error = "the host is not connected"
        else:
            try:
                fresh = self._bounded(lambda: full_sample(link, target, REQUEST_TIMEOUT_S))
                listed_s = fresh.processes_time
                if listed_s is None or (memory_time is not None and listed_s < memory_time):
                    error = "the confirming sample's process list is older than the clean memory sample"
                else:
                    snapshot = analyze(fresh, host.baselines, now=fresh.time, killed_jobs=host.killed_jobs)
            except _Stopping:
                return
            except (LinkError, KeyError, TypeError, ValueError) as exc:
                error = str(exc) or type(exc).__name__
        self.post_message(self.CleanConfirmed(target, started_s, clean_seen_s, snapshot, error))

    @work(thread=True, exit_on_error=False, group="requests")
    def _configure(self, target: str, memory_interval_s: float, process_interval_s: float) -> None:
        """Change a host's sampling intervals (fast while a clean-slate check runs)."""
        host = self._host(target)
        link = None if host is None else host.link
        if link is None:
            return
        command = {
            "cmd": "configure",
            "memory_interval_s": memory_interval_s,
            "process_interval_s": process_interval_s,
        }
        try:
            self._bounded(lambda: link.request(command, REQUEST_TIMEOUT_S))
        except _Stopping:
            return
        except LinkError as exc:
            self.post_message(self.HostFailed(target, f"{target}: could not change the interval: {exc}"))

    @work(thread=True, exit_on_error=False, group="kills")
    def _send_kill(
        self, target: str, key: int, plan: KillPlan, checking: bool, snapshot: HostSnapshot
    ) -> None:
        """Send a confirmed plan and follow it to its end, every outcome audited as it comes (``KillRun``).

        Not bounded by quitting: a kill under way keeps its link until it is done or abandoned (``q`` twice).
        """
        host = self._host(target)
        link = None if host is None else host.link
        entry = None if host is None else host.kills.get(key)
        if host is None or link is None or entry is None:
            not_connected = "kill not sent: the host is not connected"
            self.post_message(self.KillFinished(target, key, plan, [], not_connected, [], checking))
            return
        run = KillRun(link, plan, self._audit)
        error: str | None = None
        abandoned = False
        try:
            first = run.start()
            self.post_message(self.KillStarted(target, key, list(first.outcomes), first.pending))
            while not run.done:
                if entry.abandon.is_set():
                    run.abandon()
                    abandoned = True
                    break
                entry.pending = run.wait(KILL_POLL_S).pending
        except StateError as exc:
            error = (f"kill refused, nothing signalled: audit log: {exc} "
                     "(start gputui with --no-audit to kill without it)")
        except LinkError as exc:
            if run.started_mono is None:
                error = f"kill not sent: {exc}"
            else:
                error = f"{exc} (the collector finishes the kill on its own; its outcome is not known here)"
        jobs = tuple(killed_jobs(plan, run.outcomes, snapshot)) if run.outcomes else ()
        finished = self.KillFinished(
            target, key, plan, run.outcomes, error, run.audit_errors, checking, abandoned, jobs
        )
        self.post_message(finished)
        if run.outcomes:
            self._sample_now(target)

    # -- quitting --------------------------------------------------------------------------------------

    def _shutdown_links(self) -> None:
        if self._stopping.is_set():
            return
        with self._calls_lock:
            self._stopping.set()
            waiting = list(self._waiting_calls)
        for done in waiting:
            done.set()  # the workers give up on their calls now
        for host in self.hosts:
            if host.link is not None:
                self._close_quietly(host.link)

    def _kills_under_way(self) -> list[tuple[HostState, PendingKill]]:
        return [(host, entry) for host in self.hosts for entry in host.kills.values()]

    async def action_quit(self) -> None:
        """Leave; with kills under way, first let them finish (``q`` again abandons them)."""
        under_way = self._kills_under_way()
        if not under_way:
            self._shutdown_links()
            self.exit(0)
            return
        if not self._quitting:
            self._quitting = True
            waits = [
                f"{visible(h.target, 40)}: {pending_summary(e.pending)}" for h, e in under_way if e.pending
            ]
            self._notify(
                "quitting once the kill is done · " + ("; ".join(waits) or "finishing it")
                + " · q again to abandon it",
                severity="warning",
                title="kill under way",
            )
            longest = max((p.due_in_s or 0.0 for _, e in under_way for p in e.pending), default=0.0)
            self.set_timer(longest + QUIT_GRACE_S, self._quit_anyway)
            return
        if not self._abandoning:
            self._abandoning = True
            for _, entry in under_way:
                entry.abandon.set()
            self._notify("abandoning the escalation; quitting", severity="warning", title="kill under way")
            self.set_timer(QUIT_GRACE_S, self._quit_anyway)

    def _quit_anyway(self) -> None:
        """The kills did not report back in time (a hung host): leave, saying what is not known."""
        under_way = self._kills_under_way()
        if not under_way or not self._quitting or self._stopping.is_set():
            return
        unknown = ", ".join(
            f"{visible(h.target, 40)} ({len(e.plan.targets)} processes)" for h, e in under_way
        )
        self._shutdown_links()
        # Printed after the app left, as a Text: host and process names are never read as markup.
        unknown_line = f"gputui: no answer about the kill on {unknown}: its outcome is not known here"
        self.exit(0, message=Text(unknown_line))

    def _exit_message(self, lines: list[str]) -> None:
        """Leave after the last kill under way reported (the app was asked to quit meanwhile)."""
        self._shutdown_links()
        self.exit(0, message=Text("\n".join(lines)) if lines else None)

    def on_unmount(self) -> None:
        self._shutdown_links()

    # -- actions ---------------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in DESTRUCTIVE_ACTIONS and self.read_only:
            return False
        if action in MAIN_SCREEN_ACTIONS and self._modal_open():
            return False
        if action in ("next_host", "host") and len(self.hosts) < 2:
            return False
        if action == "fleet":
            return self._fleet is not None and not self._modal_open()
        return True

    def _modal_open(self) -> bool:
        return len(self.screen_stack) > 1 or not isinstance(self.screen, Screen) or self.screen.is_modal

    def _selected_pids(self, host: HostState) -> list[int]:
        if host.tagged:
            return sorted(host.tagged)
        pid = self._main(ProcessTable).selected_pid
        return [] if pid is None else [pid]

    def action_tag(self) -> None:
        host = self.active
        procs = self._main(ProcessTable)
        pid = procs.selected_pid
        if pid is None:
            return
        host.tagged.symmetric_difference_update({pid})
        self._show_active()
        procs.action_cursor_down()

    def _confirm_kill(self, signal: str, tree: bool = False, all_gpu: bool = False) -> None:
        if self.read_only:
            self._notify("read-only: nothing is signalled", severity="warning", title="refused")
            return
        host = self.active
        snapshot = host.snapshot
        if snapshot is None:
            self._notify(f"{visible(host.target, 40)}: no data yet", severity="warning")
            return
        pids = [] if all_gpu else self._selected_pids(host)
        if not pids and not all_gpu:
            self._notify("select a process first", severity="warning")
            return
        # Trees escalate TERM to KILL; a single signal is looked at again after the same delay.
        escalates = (tree or all_gpu) and signal != "KILL"
        try:
            plan = plan_kill(
                snapshot,
                pids,
                signal=signal,
                tree=tree,
                all_gpu=all_gpu,
                escalate_s=self._escalate_s if escalates else None,
                wait_s=None if escalates else self._escalate_s,
                read_only=self.read_only,
            )
        except PlanError as exc:
            self._notify(visible(str(exc), 300), severity="error", title="refused")
            return
        if not plan.targets:
            reason = "; ".join(plan.notes) or "nothing to signal"
            self._notify(visible(reason, 300), severity="warning", title="nothing to signal")
            return
        target = host.target

        def decided(confirmed: bool | None) -> None:
            target_host = self._host(target)
            if not confirmed or target_host is None:
                self._notify("cancelled: nothing was signalled")
                return
            if self._quitting:
                self._notify("quitting: nothing was signalled", severity="warning")
                return
            if all_gpu:
                # The check starts now, so its receipt says how long the GPUs took to come back.
                self._start_check(target_host, "X")
            self._next_kill += 1
            target_host.kills[self._next_kill] = PendingKill(plan)
            self._send_kill(target, self._next_kill, plan, all_gpu, snapshot)

        self.push_screen(ConfirmKillScreen(plan, snapshot), decided)

    def action_kill(self, signal: str = "TERM") -> None:
        """Signal the tagged processes (or the selected one)."""
        self._confirm_kill(signal if signal in ("TERM", "KILL", "INT") else "TERM")

    def action_kill_tree(self) -> None:
        """TERM the selected trees, children first, then KILL what is left after the escalation delay."""
        self._confirm_kill("TERM", tree=True)

    def action_kill_all(self) -> None:
        """Kill every GPU process tree on the shown host, then watch for the clean slate."""
        self._confirm_kill("TERM", tree=True, all_gpu=True)

    def _start_check(self, host: HostState, trigger: str = "c") -> None:
        host.check = CleanCheck(started_s=self._clock(), trigger=trigger, kill_pending=bool(host.kills))
        host.confirming = False  # an answer for an earlier check is dropped by its started_s
        self._configure(host.target, FAST_MEMORY_INTERVAL_S, FAST_PROCESS_INTERVAL_S)
        if host is self.active:
            self._show_active()

    def action_check(self) -> None:
        """Sample fast until every GPU is back at its baseline (or the deadline), then show a receipt."""
        self._start_check(self.active)

    def action_filter(self) -> None:
        self._main("#body").add_class("-filtering")
        self._main(FilterBar).focus()

    def action_sort(self) -> None:
        self.sort_mode = SORT_MODES[(SORT_MODES.index(self.sort_mode) + 1) % len(SORT_MODES)]
        self._show_active()

    def action_refresh(self) -> None:
        """Take a sample now; on a host that stopped retrying, try to connect once more."""
        host = self.active
        if host.halted:
            self._notify(f"{visible(host.target, 40)}: trying again", title="reconnect")
            self._retry(host)
            return
        self._sample_now(host.target)

    def action_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            for host in self.hosts:
                if host.pending is not None:
                    self._apply_snapshot(host, host.pending)
        self._show_active()

    def action_next_host(self) -> None:
        self.action_host((self.active_index + 1) % len(self.hosts))

    def action_host(self, index: int) -> None:
        if 0 <= index < len(self.hosts) and index != self.active_index:
            self.active_index = index
            self._show_active()

    def action_focus_findings(self) -> None:
        self._main(FindingsList).focus()

    def key_descriptions(self) -> list[tuple[str, str]]:
        """The keys this app answers to now, for the help screen."""
        keys = [("↑/↓", "select a process"), ("Space", "tag / untag it")]
        if not self.read_only:
            keys += [
                ("k", f"SIGTERM the tagged (or selected) processes; after {self._escalate_s:g} s: gone?"),
                ("K", "SIGKILL the tagged (or selected) processes"),
                ("t", f"kill the tree: TERM, then KILL after {self._escalate_s:g} s"),
                ("X", "kill every GPU job on this host (not the display stack), then check"),
            ]
        keys += [
            ("c", "clean-slate check: sample fast until every GPU is at baseline"),
            ("/", "filter by pid, user or command"),
            ("s", "sort: tree, GPU memory, pid"),
            ("r", "refresh now (a host that stopped retrying: connect again)"),
            ("p", "pause / resume the display"),
            ("f", "go to the findings (Enter jumps to the process)"),
        ]
        if len(self.hosts) > 1:
            keys.append(("Tab, 1-9", "switch host"))
        if self._fleet is not None:
            keys.append(("Esc", "back to the fleet"))
        keys += [("?", "this help"), ("q", "quit")]
        return keys

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.key_descriptions(), self.read_only))

    # -- the fleet view --------------------------------------------------------------------------------

    def show_fleet(self) -> None:
        """Show the fleet view on top of the host view (the hosts opened from it keep streaming)."""
        if self._fleet is not None and self.screen is not self._fleet:
            self.push_screen(FLEET_SCREEN)

    def open_host(self, target: str) -> None:
        """Show ``target`` in the host view, connecting to it first if it is not open yet."""
        host = self._host(target)
        if host is None:
            if len(self.hosts) >= FLEET_HOSTS_MAX:
                self._notify(
                    f"{FLEET_HOSTS_MAX} hosts are open already: switch to one with Tab", severity="warning"
                )
                return
            host = HostState(target, self._make_baselines(target))
            self.hosts.append(host)
            self._hosts_by_target[target] = host
            self._main("#body").set_class(len(self.hosts) > 1, "-multi")
            self._poll_host(target)
        self.active_index = self.hosts.index(host)
        if self._fleet is not None and self.screen is self._fleet:
            self.pop_screen()
        self._show_active()

    def action_fleet(self) -> None:
        """Back to the fleet view."""
        self.show_fleet()

    def on_fleet_screen_open_host(self, message: FleetScreen.OpenHost) -> None:
        """Enter on a host in the fleet view (``FleetScreen.OpenHost``)."""
        self.open_host(message.target)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is self._fleet or not self.hosts:
            return  # the host view's commands act on the shown host: none is shown
        commands: list[tuple[str, str, Callable[[], Any]]] = []
        if not self.read_only:
            commands += [
                (
                    "Kill: SIGTERM selected",
                    "Send TERM to the tagged or selected processes",
                    lambda: self.action_kill("TERM"),
                ),
                (
                    "Kill: SIGKILL selected",
                    "Send KILL to the tagged or selected processes",
                    lambda: self.action_kill("KILL"),
                ),
                ("Kill: tree", "TERM the selected trees, then KILL after the delay", self.action_kill_tree),
                (
                    "Kill: every GPU process tree",
                    "Kill everything holding GPU memory here, then check",
                    self.action_kill_all,
                ),
            ]
        commands += [
            ("Tag / untag process", "Mark the selected process for a batch action", self.action_tag),
            ("Clean-slate check", "Sample fast until every GPU is back at baseline", self.action_check),
            ("Filter processes", "Filter by pid, user or command", self.action_filter),
            ("Sort processes", "Cycle tree / GPU memory / pid", self.action_sort),
            (
                "Refresh now",
                "Take a sample now, or reconnect a host that stopped retrying",
                self.action_refresh,
            ),
            ("Pause / resume", "Freeze the display", self.action_pause),
            ("Help", "Every key", self.action_help),
        ]
        if len(self.hosts) > 1:
            commands.append(("Next host", "Show the next host", self.action_next_host))
            for index, host in enumerate(self.hosts):
                commands.append(
                    (
                        f"Host {index + 1}: {visible(host.target, 40)}",
                        "Show this host",
                        partial(self.action_host, index),
                    )
                )
        for title, help_text, callback in commands:
            yield SystemCommand(title, help_text, callback)
