"""Every server a client watches: one :class:`ServerStateTracker` per endpoint, fed from the snapshots.

The collector sends, per health endpoint, its probe's state and the server's metrics text cut down on the
host; :class:`ServerWatch` parses the text, feeds the endpoint's tracker and gives the snapshot back with
each ``health[]`` entry's ``state`` the derived one (STARTING, BUSY, STALLED besides the probe's five), its
``metrics`` the reading (``metrics_json``), and for a derived state its ``detail`` the tracker's reason. The
TUI keeps one watch for its whole session (tokens/s and the stall window need successive readings);
``snapshot`` and ``check`` make one per run, so their tokens/s is null (one reading has no rate).

The watch also keeps each host's :class:`spinning.SpinTracker`: a server whose job's GPUs spin at idle power
while no token comes is STALLED on a likely hung collective, and each such job is a ``spinning`` finding
(``findings``), which the verdict engine adds to the host's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping

from gputui.agent.protocol import (
    ENDPOINT_STATE_BUSY,
    ENDPOINT_STATE_STALLED,
    ENDPOINT_STATE_STARTING,
    ENDPOINT_STATE_UNHEALTHY,
)
from gputui.agent.servers.urls import url_origin
from gputui.core.jobs import sample_index
from gputui.core.model import EndpointSample, Finding, HostSnapshot, Proc, replace
from gputui.core.servers.jobs import job_facts
from gputui.core.servers.metrics import MetricsUnreadable, ServerMetrics, metrics_json, parse_server_metrics
from gputui.core.servers.spinning import (
    DEFAULT_SPIN_AFTER_S,
    WHY_CPU,
    WHY_TOKENS,
    JobSpin,
    SpinTracker,
    spinning_words,
)
from gputui.core.servers.state import DEFAULT_STALL_AFTER_S, ServerState, ServerStateTracker
from gputui.core.text import fit, visible

DERIVED_STATES = frozenset({ENDPOINT_STATE_STARTING, ENDPOINT_STATE_BUSY, ENDPOINT_STATE_STALLED})
"""States the client derives: the probe alone never says them, so their detail is the tracker's reason."""
FAILING_STATES = (ENDPOINT_STATE_UNHEALTHY, ENDPOINT_STATE_STALLED)
"""Server states that make ``check`` say "not clean": a server answering unhealthy, or one that stopped
generating with requests pending, whatever its /health says."""
URL_MAX_CHARS = 100
DETAIL_MAX_CHARS = 200
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", ""})


def read_metrics(sample: EndpointSample) -> tuple[ServerMetrics | None, str | None]:
    """The metrics a sample carries, parsed: ``(reading, None)`` or ``(None, why they are blank)``."""
    if sample.metrics_url is None:
        return None, None
    if sample.metrics_text is None or sample.metrics_at is None:
        return None, sample.metrics_error
    try:
        return parse_server_metrics(sample.metrics_text, sample.metrics_at, sample.metrics_dropped), None
    except MetricsUnreadable as exc:
        return None, str(exc)


class ServerWatch:
    """The trackers of every endpoint of every host, by (target, URL), and each host's spin tracker.
    Thread-safe: each host's snapshots may be judged on the thread that took them.

    Args:
        stall_after_s: The stall window of hosts without one of their own, in seconds.
        host_stall_after_s: Target -> its own stall window.
        spin_after_s: The spin window (``spinning.DEFAULT_SPIN_AFTER_S``) of hosts without one of their own.
        host_spin_after_s: Target -> its own spin window.
    """

    def __init__(
        self,
        stall_after_s: float | None = None,
        host_stall_after_s: Mapping[str, float] | None = None,
        spin_after_s: float | None = None,
        host_spin_after_s: Mapping[str, float] | None = None,
    ) -> None:
        self.stall_after_s = DEFAULT_STALL_AFTER_S if stall_after_s is None else float(stall_after_s)
        self.host_stall_after_s = dict(host_stall_after_s or {})
        self.spin_after_s = DEFAULT_SPIN_AFTER_S if spin_after_s is None else float(spin_after_s)
        self.host_spin_after_s = dict(host_spin_after_s or {})
        self._trackers: dict[tuple[str, str], ServerStateTracker] = {}
        self._spins: dict[str, SpinTracker] = {}
        self._findings: dict[str, tuple[Finding, ...]] = {}
        self._lock = threading.Lock()

    def state(self, target: str, url: str) -> ServerState | None:
        """The endpoint's state after the last snapshot applied, None for one not seen."""
        with self._lock:
            tracker = self._trackers.get((target, url))
            return None if tracker is None else tracker.current

    def states(self, target: str) -> dict[str, ServerState]:
        """URL -> state of every endpoint of ``target`` now watched."""
        with self._lock:
            return {url: tracker.current for (host, url), tracker in self._trackers.items() if host == target}

    def findings(self, target: str) -> tuple[Finding, ...]:
        """The ``spinning`` findings of ``target``'s last snapshot applied: each GPU job whose GPUs spun at
        idle power with nothing moving (no token from its server, else no CPU) for the spin window."""
        with self._lock:
            return self._findings.get(target, ())

    def apply(self, snapshot: HostSnapshot, now: float | None = None) -> HostSnapshot:
        """``snapshot`` with its health entries judged; endpoints it no longer lists are forgotten.

        Args:
            snapshot: A host's snapshot as the collector sent it.
            now: Epoch seconds on the collector's clock (default the snapshot's time, else the clock).
        """
        now_s = now if now is not None else snapshot.time if snapshot.time is not None else time.time()
        if snapshot.gpus or snapshot.endpoints:
            sample_index(snapshot)  # built once per sample (kept), outside the lock every host shares
        with self._lock:
            return self._apply_locked(snapshot, now_s)

    def _apply_locked(self, snapshot: HostSnapshot, now_s: float) -> HostSnapshot:
        target = snapshot.target
        spinner = self._spins.get(target)
        if spinner is None:
            spinner = self._spins[target] = SpinTracker(self.host_spin_after_s.get(target, self.spin_after_s))
        spins = spinner.update(snapshot, now_s)
        # Root pid of a job with a server whose metrics were read -> how long every one of them has had
        # requests pending and no token (None: one has none pending, or generates).
        no_tokens: dict[int, float | None] = {}
        judged: list[EndpointSample] = []
        for sample in snapshot.endpoints:
            key = (target, sample.url)
            tracker = self._trackers.get(key)
            if tracker is None:
                window = self.host_stall_after_s.get(target, self.stall_after_s)
                tracker = self._trackers[key] = ServerStateTracker(stall_after_s=window)
            metrics, error = read_metrics(sample)
            job = job_facts(snapshot, sample.launcher_pid)
            spin = server_job(snapshot, spins, sample)
            if spin is not None:
                job = replace(job, spin=spin)
            current = tracker.update(sample, metrics, sample.launcher_age_s, now_s, error, job)
            if spin is not None and current.metrics is not None:
                stalled, known = current.stalled_for_s, no_tokens.get(spin.root_pid, float("inf"))
                no_tokens[spin.root_pid] = None if stalled is None or known is None else min(known, stalled)
            judged.append(_judged(sample, current))
        listed = {sample.url for sample in snapshot.endpoints}
        for gone in [k for k in self._trackers if k[0] == target and k[1] not in listed]:
            del self._trackers[gone]
        found = []
        for spin in spins.values():
            why = _nothing_moving(spin, no_tokens)
            if why:
                found.append(spinning_words(target, spin.facts(why)))
        self._findings[target] = tuple(found)
        return replace(snapshot, endpoints=tuple(judged))


def _nothing_moving(spin: JobSpin, no_tokens: dict[int, float | None]) -> str:
    """What says nothing moved in the job for the spin window while its GPUs spun (``WHY_TOKENS``: its
    servers, read; ``WHY_CPU``: a job without one, its processes); "" while something did, or the GPUs did
    not spin that long."""
    if spin.root_pid in no_tokens:
        return WHY_TOKENS if spin.spun_long_enough(no_tokens[spin.root_pid]) else ""
    return WHY_CPU if spin.spun_long_enough(spin.cpu_quiet_for_s) else ""


def server_job(snapshot: HostSnapshot, spins: dict[int, JobSpin], sample: EndpointSample) -> JobSpin | None:
    """The GPU job behind an endpoint: the one its launcher belongs to (or started), else, for a URL on the
    host's own loopback, the one listening on its port; None when none is known."""
    launcher = sample.launcher_pid
    if launcher is not None:
        for spin in spins.values():
            if launcher in spin.members:
                return spin
        listed = sample_index(snapshot).listed
        for spin in spins.values():
            if _descends(spin.root_pid, launcher, listed):
                return spin
        return None
    origin = url_origin(sample.url)
    if origin is None or origin[1] not in _LOOPBACK_HOSTS and origin[1] != (snapshot.hostname or "").lower():
        return None
    port = origin[2] if origin[2] is not None else {"http": 80, "https": 443}.get(origin[0])
    listening = [spin for spin in spins.values() if port in spin.ports]
    return listening[0] if len(listening) == 1 else None


def _descends(pid: int, ancestor: int, table: dict[int, Proc]) -> bool:
    seen: set[int] = set()
    current: int | None = pid
    while current is not None and current not in seen and current > 1:
        if current == ancestor:
            return True
        seen.add(current)
        parent = table.get(current)
        current = None if parent is None else parent.ppid
    return False


def _judged(sample: EndpointSample, current: ServerState) -> EndpointSample:
    reading = metrics_json(current.metrics)
    if current.state is None:
        return replace(sample, metrics=reading)
    if current.state == sample.state:
        # The probe's own state; its detail is the tracker's reason when the job's dead members shaped it.
        return replace(sample, metrics=reading, detail=current.reason if current.from_job else sample.detail)
    derived = current.state in DERIVED_STATES or current.from_job
    return replace(
        sample,
        state=visible(current.state),
        since=current.since,
        detail=current.reason if derived else sample.detail,
        metrics=reading,
    )


def judge_once(snapshot: HostSnapshot) -> HostSnapshot:
    """One snapshot judged on its own (``snapshot``, ``check``): one reading, so no rate and no stall."""
    return ServerWatch().apply(snapshot)


def failing_servers(samples: Iterable[EndpointSample]) -> list[str]:
    """One line per server in a failing state (``FAILING_STATES``), for ``check``'s reasons."""
    return [server_reason(sample) for sample in samples if sample.state in FAILING_STATES]


def server_reason(sample: EndpointSample) -> str:
    """ "server http://…/health is UNHEALTHY: HTTP 503 with 2 defunct members in its job (…)"."""
    why = f": {fit(sample.detail, DETAIL_MAX_CHARS)}" if sample.detail else ""
    return f"server {fit(sample.url, URL_MAX_CHARS)} is {sample.state}{why}"
