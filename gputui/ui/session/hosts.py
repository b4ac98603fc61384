"""The hosts the app watches: what it keeps about each one, and the threads that talk to their links.

Each host has a ``HostPoller``: a daemon thread of its own that opens the host's link, loops
``next_snapshot`` → ``analyze`` → ``Hosts.deliver``, and reopens a broken link with a jittered backoff (or
waits for the user, after an error retrying cannot fix). Short requests (a sample now, new intervals, the
sample that confirms a clean slate, recording a host key) run on daemon threads of their own too. Results
come back to the app as the dataclass messages of ``Hosts``; snapshots go through one ``LatestInbox``, so
however many hosts deliver and however far the app falls behind, it gets one ``Sampled`` message per batch
and always the newest data.

Nothing waits on these threads: quitting sets one flag, closes the links from daemon threads, and leaves a
thread blocked in a hung host's call behind. No Textual worker is used, so the event loop's executor is never
held by a host.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from gputui.agent.protocol import PROBE_BUFFER_MIB, PROBE_DEADLINE_S
from gputui.core.actions import KillPlan, Pending
from gputui.core.link import HostLink, LinkError, configure_command, full_sample, probe_host
from gputui.core.model import GpuHistory, HostSnapshot, ProbeReport, replace
from gputui.core.recording import ProcessMemory
from gputui.core.servers import EndpointHistory, ServerWatch, endpoint_transitions
from gputui.core.store import WatchedPort
from gputui.core.text import visible
from gputui.core.verdict import Baselines, CleanCheck, KilledJob, judge, ports_left
from gputui.transports.freshness import LatestInbox, link_state, stale_after_s
from gputui.transports.reconnect import Backoff, worth_retrying
from gputui.transports.ssh.hostkeys.knownhosts import UnknownHostKey
from gputui.ui.session.tasks import spawn
from gputui.ui.widgets.host_bar import HostStatus

NEXT_SNAPSHOT_WAIT_S = 1.0
"""Longest wait for one snapshot before the poller looks at the stop flag again."""
REQUEST_TIMEOUT_S = 30.0
"""Deadline of one agent command."""
STALE_FLOOR_S = 3.0
"""A host is stale after at least this long without data: the display counts ages in whole seconds."""
KILLED_JOBS_KEPT = 16
"""Killed jobs remembered per host to tell their survivors."""

Notice = tuple[str, str, str]
"""(severity, title, message) of a notification; the message may carry machine text, already visible."""
HostKeyAcceptor = Callable[[str, Any], object]
"""Records an accepted host key: called with ``UnknownHostKey.hop`` and ``.key`` (does file IO)."""


ENDPOINT_CHANGES_KEPT = 20
"""State changes of a host's endpoints kept for the health panel."""


@dataclass
class PendingKill:
    """A kill operation under way: what it still waits for, and whether the user gave it up."""

    plan: KillPlan
    snapshot: HostSnapshot
    """The snapshot the plan was made from (what the killed jobs held)."""
    checking: bool
    """A clean-slate check was started with it (``X``)."""
    pending: tuple[Pending, ...] = ()
    abandon: threading.Event = field(default_factory=threading.Event)


@dataclass
class HostState:
    """Everything the app keeps about one host. Touched on the event loop, except ``poller`` (its own thread
    reads ``baselines`` and ``killed_jobs``)."""

    target: str
    baselines: Baselines
    snapshot: HostSnapshot | None = None
    """The newest analysed snapshot."""
    last_ok_s: float | None = None
    error: str | None = None
    error_s: float | None = None
    halted: bool = False
    """The last error cannot be fixed by retrying (auth, host key, bad target): the poller waits for ``r``."""
    history: GpuHistory = field(default_factory=GpuHistory)
    process_memory: ProcessMemory = field(default_factory=ProcessMemory)
    """What each process held on each GPU over the whole session (or the whole recording, in a replay)."""
    endpoint_history: EndpointHistory = field(default_factory=EndpointHistory)
    endpoint_changes: deque[tuple[float, str]] = field(
        default_factory=lambda: deque(maxlen=ENDPOINT_CHANGES_KEPT)
    )
    """(epoch seconds, line) of the endpoints' state changes, newest last: the health panel shows them (a
    toast per change would pile up over the panels during an incident)."""
    servers: ServerWatch = field(default_factory=ServerWatch)
    """The servers' state machines (shared by every host: keyed by target and URL)."""
    tagged: set[int] = field(default_factory=set)
    check: CleanCheck | None = None
    kills: dict[int, PendingKill] = field(default_factory=dict)
    """Kill operations under way on this host, by the app's own number for each."""
    killed_jobs: tuple[KilledJob, ...] = ()
    """Jobs killed here, newest last: what escaped them is a survivor finding. Replaced, never mutated."""
    watched_ports: tuple[WatchedPort, ...] = ()
    """The TCP ports of jobs killed here not yet seen free: a clean-slate check waits on them."""
    probe: ProbeReport | None = None
    """The last readiness probe of this host (``P``): judged with every sample after it until the next one or
    a reboot (a GPU that did not take work stays NOT READY until a probe proves otherwise)."""
    probing: bool = False
    """A probe of this host is running."""
    fitness_due_s: float | None = None
    """Set when the verdict turned CLEAN on GPU fitness read before that sample (at rest it is read every
    30 s): the sample time a fresh read is awaited from. The clean-slate line says it checks the GPUs'
    fitness instead of CLEAN until a sample read after it comes (the app asks for one)."""
    first_data_s: float | None = None
    """When the host's first snapshot came (epoch seconds): discovery's first sweep is under way after it."""
    poller: HostPoller | None = None

    @property
    def link(self) -> HostLink | None:
        """The open link, None while (re)connecting."""
        return None if self.poller is None else self.poller.link

    def apply(self, snapshot: HostSnapshot, now_s: float) -> list[Notice]:
        """Take ``snapshot`` (analysed, its servers judged: ``Hosts.analyze``) as the host's newest data;
        returns what the user should be told. The servers' state changes (STALLED and BUSY included) go to
        ``endpoint_changes``."""
        notices: list[Notice] = []
        previous = self.snapshot
        name = visible(self.target, 40)
        reboot = previous is not None and previous.boot_id != snapshot.boot_id
        if reboot and self.tagged:
            self.tagged.clear()
            notices.append(("warning", "", f"{name} rebooted: tagged processes forgotten"))
        if self.first_data_s is None or reboot:
            self.first_data_s = now_s
        self.history.record(snapshot)
        self.process_memory.record(snapshot)
        for line in endpoint_transitions(
            previous.endpoints if previous is not None else (), snapshot.endpoints
        ):
            self.endpoint_changes.append((now_s, line))
        self.endpoint_history.update(snapshot.endpoints)
        self.fitness_due_s = fitness_due(previous, snapshot, self.fitness_due_s)
        self.snapshot = snapshot
        self.watched_ports = () if reboot else ports_left(snapshot, self.watched_ports)
        self.last_ok_s = now_s
        self.error = None
        self.halted = False
        return notices

    def failed(self, error: str, retrying: bool, now_s: float) -> bool:
        """The link failed; returns whether this is news (the first error since data, or after a halt)."""
        first = self.error is None or self.halted
        self.error = error
        self.error_s = now_s
        if not retrying:
            self.halted = True  # only retry() and fresh data clear it
        return first

    def killed(self, jobs: tuple[KilledJob, ...]) -> None:
        self.killed_jobs = (*self.killed_jobs, *jobs)[-KILLED_JOBS_KEPT:]

    def watch_ports(self, ports: tuple[WatchedPort, ...]) -> None:
        known = {p.port for p in self.watched_ports}
        self.watched_ports += tuple(p for p in ports if p.port not in known)

    def killed_members(self) -> list[tuple[int, int | None]]:
        return [member for job in self.killed_jobs for member in job.members]

    def status(self, now_s: float, interval_s: float) -> HostStatus:
        """What the host bar says about this host now."""
        age_s = None if self.last_ok_s is None else max(0.0, now_s - self.last_ok_s)
        error_s = self.error_s if self.error is not None else None
        state = link_state(now_s, self.last_ok_s, error_s, stale_after_s(interval_s, STALE_FLOOR_S))
        return HostStatus(self.target, state, age_s, self.error, self.snapshot, halted=self.halted)


class HostPoller:
    """Streams one host's analysed snapshots to ``Hosts.deliver`` from a daemon thread, until stopped.

    Args:
        host: The host (its baselines and killed jobs are read for every analysis).
        hosts: Where snapshots and failures go.
    """

    def __init__(self, host: HostState, hosts: Hosts) -> None:
        self._host = host
        self._hosts = hosts
        self._retry = threading.Event()
        self._stop = threading.Event()
        """Set by ``stop`` (the host was closed) and by ``Hosts.stop`` (the app quits)."""
        self.current: HostLink | None = None
        """The link being opened or open (closing it interrupts an open in progress)."""
        self._open = False

    @property
    def link(self) -> HostLink | None:
        """The open link; None while connecting or after a failure."""
        return self.current if self._open else None

    def start(self) -> None:
        spawn(f"poll-{self._host.target[:20]}", self._run)

    def retry(self) -> None:
        """Make a halted poller try once more (``r``, an accepted host key)."""
        self._retry.set()

    def stop(self) -> None:
        """Stop polling and close the link; returns at once (the thread ends at its next wait)."""
        self._stop.set()
        link = self.current
        if link is not None:
            close_quietly(link)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set() or self._hosts.stopping.is_set()

    def _run(self) -> None:
        hosts, host = self._hosts, self._host
        target = host.target
        backoff = Backoff(base_s=hosts.retry_base_s, cap_s=hosts.retry_cap_s)
        while not self.stopped:
            link = hosts.link_factory(target)
            self.current = link
            halted = False
            try:
                link.open()
                self._open = True
                while not self.stopped:
                    snapshot = link.next_snapshot(NEXT_SNAPSHOT_WAIT_S)
                    if snapshot is not None and not self.stopped:
                        hosts.deliver(target, hosts.analyze(host, snapshot))
                        backoff.reset()
            except LinkError as exc:
                # Auth failures, host keys, bad targets: only the user can fix them, and a retry loop would
                # earn this client sshd's PerSourcePenalties. Show the error and wait for ``r``.
                halted = not worth_retrying(exc)
                message = str(exc) or f"{target}: link failed"
                hosts.post(Hosts.Failed(target, message, retrying=not halted, cause=exc))
            except Exception as exc:  # noqa: BLE001 - a bad snapshot must not end this host's polling
                hosts.post(Hosts.Failed(target, f"{target}: {type(exc).__name__}: {exc}"))
            self._open = False
            self.current = None
            close_quietly(link)
            if halted:
                if not self._wait_for_retry():
                    return
                backoff.reset()
            elif self._stop.wait(backoff.next_delay_s()) or self.stopped:
                return

    def _wait_for_retry(self) -> bool:
        """Block until the user asks for another try (True) or the app quits (False)."""
        while not self.stopped:
            if self._retry.wait(0.25):
                self._retry.clear()
                return not self.stopped
        return False


def close_quietly(link: HostLink) -> None:
    """Close ``link`` from a daemon thread (a hung host's close must hold nobody)."""

    def close() -> None:
        try:
            link.close()
        except Exception:  # noqa: BLE001, S110 - the link is being dropped either way
            pass

    spawn("link-close", close)


class Hosts:
    """Every host of the app, their pollers, and the short requests to their links.

    Args:
        link_factory: Makes a fresh, unopened link for a target (called again on every reconnect).
        make_baselines: The clean-slate baselines of a target.
        post: Hands a message to the app (thread-safe: ``App.post_message``).
        accept_host_key: Records a host key the user accepted.
        retry_base_s: Upper bound of the first reconnect delay after a transient error, seconds.
        retry_cap_s: Largest reconnect delay, seconds.
        judged: The links' samples come judged (a replay): they are shown as they are.
    """

    @dataclass
    class Sampled(Message):
        """New analysed snapshots are waiting in the inbox; ``snapshot`` is the one that made it non-empty.

        The handler takes every waiting host at once (``take``); a message posted without the inbox (a
        test, a replayed sample) applies its own snapshot.
        """

        target: str
        snapshot: HostSnapshot
        forced: bool = False
        """Asked for by the user (refresh): shown even while the display is paused."""

    @dataclass
    class Failed(Message):
        """A host's link broke or could not be opened; the poller retries unless ``retrying`` is False."""

        target: str
        error: str
        retrying: bool = True
        cause: BaseException | None = None
        """The exception behind ``error`` (an ``UnknownHostKey`` offers to accept the key)."""

    @dataclass
    class CleanConfirmed(Message):
        """The fresh full sample asked for by a clean-slate check came back (or could not be taken)."""

        target: str
        started_s: float
        """Which check asked (its ``started_s``): an answer to an older check is dropped."""
        snapshot: HostSnapshot | None
        error: str = ""

    @dataclass
    class Probed(Message):
        """A readiness probe asked for with ``P`` ended: the sample taken after it, or why there is none."""

        target: str
        report: ProbeReport | None
        snapshot: HostSnapshot | None
        error: str = ""

    @dataclass
    class HostKeyRecorded(Message):
        """Accepting a host key finished: recorded, or ``failure`` says why not."""

        target: str
        error: UnknownHostKey
        failure: str | None

    def __init__(
        self,
        link_factory: Callable[[str], HostLink],
        make_baselines: Callable[[str], Baselines],
        post: Callable[[Message], object],
        accept_host_key: HostKeyAcceptor,
        *,
        retry_base_s: float = 1.0,
        retry_cap_s: float = 30.0,
        servers: ServerWatch | None = None,
        judged: bool = False,
    ) -> None:
        self.link_factory = link_factory
        self.judged = judged
        """The links deliver samples judged already (a replay's, as recorded): ``analyze`` keeps them."""
        self.servers = servers or ServerWatch()
        self._make_baselines = make_baselines
        self.post = post
        self._accept_host_key = accept_host_key
        self.retry_base_s = retry_base_s
        self.retry_cap_s = retry_cap_s
        self._all: list[HostState] = []
        self._by_target: dict[str, HostState] = {}
        self.inbox: LatestInbox[str, tuple[HostSnapshot, bool]] = LatestInbox(
            merge=lambda older, newer: (newer[0], older[1] or newer[1])
        )
        """The newest snapshot of each host not yet applied, and whether one of those was forced."""
        self.stopping = threading.Event()

    def add(self, target: str) -> HostState:
        """A host (its poller not started yet); the same one when the target is known."""
        host = self._by_target.get(target)
        if host is None:
            host = HostState(target, self._make_baselines(target), servers=self.servers)
            self._all.append(host)
            self._by_target[target] = host
        return host

    def get(self, target: str) -> HostState | None:
        return self._by_target.get(target)

    def remove(self, host: HostState) -> None:
        """Close ``host``: it leaves the list, its poller stops and its link is closed (on a daemon thread).
        What its thread still reports is dropped: nothing is known by its target any more."""
        if self._by_target.get(host.target) is not host:
            return
        self._all.remove(host)
        del self._by_target[host.target]
        if host.poller is not None:
            host.poller.stop()

    def __iter__(self) -> Iterator[HostState]:
        return iter(list(self._all))

    def __len__(self) -> int:
        return len(self._all)

    def __getitem__(self, index: int) -> HostState:
        return self._all[index]

    def index(self, host: HostState) -> int:
        return self._all.index(host)

    def start(self, host: HostState) -> None:
        """Start ``host``'s poller (once)."""
        if host.poller is None and not self.stopping.is_set():
            host.poller = HostPoller(host, self)
            host.poller.start()

    def analyze(self, host: HostState, snapshot: HostSnapshot) -> HostSnapshot:
        """Findings, verdict and server states of a snapshot, on the thread that took it
        (``core.verdict.judge``), with the host's last probe where the sample has none and the host did not
        reboot since."""
        if self.judged:
            return snapshot
        probe = host.probe
        previous = host.snapshot
        if probe is not None and snapshot.probe is None:
            same_boot = previous is None or previous.boot_id == snapshot.boot_id
            if same_boot:
                snapshot = replace(snapshot, probe=probe)
        return judge(
            snapshot,
            host.baselines,
            servers=host.servers,
            now=snapshot.time,
            killed_jobs=host.killed_jobs,
            watched_ports=host.watched_ports,
        )

    def deliver(self, target: str, snapshot: HostSnapshot, forced: bool = False) -> None:
        """Hand an analysed snapshot to the app (any thread): the newest replaces one not yet applied."""
        if self.inbox.put(target, (snapshot, forced)) and not self.stopping.is_set():
            self.post(self.Sampled(target, snapshot, forced))

    def take(self, message: Sampled) -> dict[str, tuple[HostSnapshot, bool]]:
        """Every waiting snapshot by target, with ``message``'s own when it did not come through the inbox."""
        batch = self.inbox.take()
        batch.setdefault(message.target, (message.snapshot, message.forced))
        return batch

    def retry(self, host: HostState) -> None:
        """Let a halted host's poller try once more."""
        host.halted = False
        host.error = None
        if host.poller is not None:
            host.poller.retry()

    def stop(self) -> None:
        """Stop every poller and close every link; returns at once."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        for host in self._all:
            if host.poller is not None:
                host.poller.stop()

    # -- short requests, each on a thread of its own --------------------------------------------------

    def _request(self, host: HostState, name: str, job: Callable[[HostLink], None]) -> None:
        link = host.link
        if link is None or self.stopping.is_set():
            return
        spawn(f"{name}-{host.target[:20]}", lambda: job(link))

    def sample_now(self, host: HostState) -> None:
        """A full sample now (refresh, after a kill), delivered as forced."""

        def job(link: HostLink) -> None:
            try:
                snapshot = full_sample(link, host.target, REQUEST_TIMEOUT_S)
                self.deliver(host.target, self.analyze(host, snapshot), forced=True)
            except Exception as exc:  # noqa: BLE001 - a link error or a bad answer: one line, never a traceback
                self.post(self.Failed(host.target, f"{host.target}: refresh failed: {_cause(exc)}"))

        self._request(host, "sample", job)

    def configure(
        self, host: HostState, memory_interval_s: float, process_interval_s: float, watch_exits: bool
    ) -> None:
        """Change a host's sampling intervals, and whether its collector waits on the GPU holders' exits
        (fast, and watching, while a clean-slate check runs)."""
        command = configure_command(memory_interval_s, process_interval_s, watch_exits)

        def job(link: HostLink) -> None:
            try:
                link.request(command, REQUEST_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - as above
                message = f"{host.target}: could not change the interval: {_cause(exc)}"
                self.post(self.Failed(host.target, message))

        self._request(host, "configure", job)

    def confirm_clean(self, host: HostState, started_s: float) -> None:
        """Take a fresh full sample (processes listed now) for the check started at ``started_s``."""
        if host.link is None:
            self.post(self.CleanConfirmed(host.target, started_s, None, "the host is not connected"))
            return

        def job(link: HostLink) -> None:
            try:
                fresh = self.analyze(host, full_sample(link, host.target, REQUEST_TIMEOUT_S))
            except Exception as exc:  # noqa: BLE001 - as above
                self.post(self.CleanConfirmed(host.target, started_s, None, _cause(exc)))
                return
            self.post(self.CleanConfirmed(host.target, started_s, fresh))

        self._request(host, "confirm", job)

    def probe(self, host: HostState) -> None:
        """Prove each GPU of ``host`` takes work (``core.link.probe_host``); a fresh sample judged with it."""
        if host.link is None:
            self.post(self.Probed(host.target, None, None, "the host is not connected"))
            return

        def job(link: HostLink) -> None:
            try:
                report = probe_host(link, host.target, PROBE_DEADLINE_S, PROBE_BUFFER_MIB)
                sample = full_sample(link, host.target, REQUEST_TIMEOUT_S)
                fresh = self.analyze(host, replace(sample, probe=report))
            except Exception as exc:  # noqa: BLE001 - as above
                self.post(self.Probed(host.target, None, None, _cause(exc)))
                return
            self.post(self.Probed(host.target, report, fresh))

        self._request(host, "probe", job)

    def record_host_key(self, target: str, error: UnknownHostKey) -> None:
        """Write the accepted key (file IO, so on a thread), then let the poller reconnect."""

        def job() -> None:
            try:
                self._accept_host_key(error.hop, error.key)
            except Exception as exc:  # noqa: BLE001 - a changed key, an unwritable file: shown, not raised
                self.post(self.HostKeyRecorded(target, error, _cause(exc)))
                return
            self.post(self.HostKeyRecorded(target, error, None))

        spawn("host-key", job)


FITNESS_READ_SLACK_S = 1.0
"""A fitness read this close before its sample's time is that sample's own (read during it)."""


def fitness_due(previous: HostSnapshot | None, snapshot: HostSnapshot, due_s: float | None) -> float | None:
    """The sample time from which a fresh read of the GPUs' fitness is awaited before CLEAN may be shown, or
    None: when ``snapshot``'s verdict is CLEAN and was not on ``previous`` (or a read is already awaited),
    and some GPU's fitness was read before it. A source that reads no fitness (the demo, a fleet, reduced
    mode) never waits."""
    verdict = snapshot.verdict
    if verdict is None or not verdict.clean or snapshot.time is None:
        return None
    reads = [g.fitness.read_time for g in snapshot.gpus if g.fitness is not None]
    if not reads or any(read is None for read in reads):
        return None
    if due_s is None:
        if previous is not None and previous.verdict is not None and previous.verdict.clean:
            return None  # CLEAN all along: the fitness keeps its period
        due_s = snapshot.time
    oldest = min(read for read in reads if read is not None)
    return None if oldest >= due_s - FITNESS_READ_SLACK_S else due_s


def _cause(exc: BaseException) -> str:
    """One line for an exception: its message, else its type's name."""
    return str(exc) or type(exc).__name__
