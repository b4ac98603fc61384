"""The prober: what is probed and how often, and the latest state of every endpoint."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

from gputui.agent.protocol import ENDPOINT_STATE_ERROR
from gputui.agent.servers import (
    ENDPOINT_BODY_CAP_BYTES,
    ENDPOINT_DEFAULT_DEADLINE_S,
    ENDPOINT_DEFAULT_INTERVAL_S,
    ENDPOINT_DISCOVERED_LINGER_S,
    ENDPOINT_GENERATE_MIN_INTERVAL_S,
    ENDPOINT_MAX_URLS,
)
from gputui.agent.servers.discovery import (
    discover_launchers,
    health_is_local_url,
    health_local_addresses,
    health_read_proc_cmdlines,
)
from gputui.agent.servers.endpoint import Endpoint, launcher_start, url_list
from gputui.agent.servers.messages import endpoint_config
from gputui.agent.servers.urls import health_shown_url, url_origin

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable

ENDPOINT_LOCAL_ADDRESSES_S = 60.0
"""This host's own addresses are read again at most this often."""


class EndpointProber:
    """Probes health URLs in background threads; :meth:`samples` returns the latest state at once.

    One scheduler thread (started when the first URL appears) starts at most one probe thread per URL at a
    time; a URL is probed every ``interval_s`` (start to start, and never sooner than ``ENDPOINT_MIN_GAP_S``
    after the previous probe ended). Generating endpoints are probed only when ``generate`` is on, and then
    at most every ``ENDPOINT_GENERATE_MIN_INTERVAL_S``.

    Discovery probes this host only: a launcher whose ``--host`` is not one of this host's addresses (any
    user can start a process whose argv names any host) is listed, found but not probed, unless that URL is
    configured. A bad setting never stops the prober: a URL longer than ``ENDPOINT_MAX_URL_CHARS`` is an ERROR
    row, and URLs past the first ``ENDPOINT_MAX_URLS`` are one ERROR row. Every URL it reports has its
    credentials redacted (``health_redact_url``); they are sent as basic auth.

    Each endpoint's metrics URL (a configured one of the same origin, else the one its launcher serves) is
    read right after its health probe, under the same deadline; the body is cut down on this host
    (``metrics_filter``) before it goes into a sample.

    Args:
        urls: Configured URLs (probed whatever discovery finds).
        metrics_urls: Configured metrics URLs, each read beside the health URL of its origin.
        discover: Add URLs that :meth:`update_discovered` finds in the process list.
        generate: Probe generating endpoints (``/health_generate``) too.
        interval_s: Seconds between probes of one URL.
        deadline_s: Total deadline of one probe in seconds.
        body_cap_bytes: Body read cap of one probe in bytes.
        ssl_context: TLS settings for https URLs (default: the system's verifying context).
        discovered_linger_s: Seconds a discovered URL stays after its launcher left the process list.
        clock: Wall clock (epoch seconds) for ``since`` / ``last_ok`` / ``checked_at``.
    """

    def __init__(
        self,
        urls: Iterable[str] = (),
        discover: bool = True,
        generate: bool = False,
        interval_s: float = ENDPOINT_DEFAULT_INTERVAL_S,
        deadline_s: float = ENDPOINT_DEFAULT_DEADLINE_S,
        body_cap_bytes: int = ENDPOINT_BODY_CAP_BYTES,
        metrics_urls: Iterable[str] = (),
        ssl_context: Any = None,
        discovered_linger_s: float = ENDPOINT_DISCOVERED_LINGER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Condition()
        self._configured: list[str] = []
        self._metrics_configured: list[str] = []
        self._discovered_metrics: dict[str, tuple[str | None, tuple[float, int] | None, int | None]] = {}
        """Discovered health URL -> (the metrics URL its launcher serves, when the launcher started as
        ``launcher_start`` gives it, the launcher's pid)."""
        self._ignored: list[str] = []  # configured past ENDPOINT_MAX_URLS
        self._discovered_seen: dict[str, float] = {}
        self._remote: set[str] = set()  # discovered URLs that are not this host's: listed, never probed
        self._local_addresses: set[str] = set()
        self._local_read_mono = -1e18
        self._hostname = socket.gethostname()
        self._endpoints: dict[str, Endpoint] = {}
        self._in_flight: set[str] = set()
        # Kept across removal and re-adding of a URL, so reconfiguring cannot beat the rate limits.
        self._last_started: dict[str, float] = {}
        self._discover = bool(discover)
        self._generate = bool(generate)
        self._interval_s = ENDPOINT_DEFAULT_INTERVAL_S
        self._deadline_s = ENDPOINT_DEFAULT_DEADLINE_S
        self._body_cap_bytes = int(body_cap_bytes)
        self._ssl_context = ssl_context
        self._linger_s = float(discovered_linger_s)
        self._clock = clock
        self._closed = False
        self._thread: threading.Thread | None = None
        self._scan_requested = False
        self.read_processes: Callable[[], list[dict[str, Any]]] = health_read_proc_cmdlines
        """Where discovery gets ``{"pid", "cmdline"}`` dicts from (the collector passes its own reader)."""
        self.configure(
            urls=list(urls), interval_s=interval_s, deadline_s=deadline_s, metrics_urls=list(metrics_urls)
        )

    # -- configuration -------------------------------------------------------------------------------------

    def configure(
        self,
        urls: Iterable[str] | None = None,
        generate: bool | None = None,
        discover: bool | None = None,
        interval_s: float | None = None,
        deadline_s: float | None = None,
        metrics_urls: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Change what is probed; None leaves a setting as it is. Returns the settings now in force.

        A URL that cannot be probed (too long, malformed) or one past ``ENDPOINT_MAX_URLS`` is not refused: it
        is an ERROR row, and the other URLs are probed.

        Raises:
            ValueError: With one readable line, for a malformed command (a value of the wrong type; nothing is
                changed then).
        """
        new_urls = url_list(urls, "urls")
        new_metrics = url_list(metrics_urls, "metrics_urls")
        _check_settings(generate, discover, interval_s, deadline_s)
        with self._lock:
            if new_urls is not None:
                self._configured = new_urls[:ENDPOINT_MAX_URLS]
                self._ignored = new_urls[ENDPOINT_MAX_URLS:]
            if new_metrics is not None:
                self._metrics_configured = new_metrics[:ENDPOINT_MAX_URLS]
            if generate is not None:
                self._generate = generate
            if discover is not None:
                self._discover = discover
                if not discover:
                    self._discovered_seen.clear()
                    self._remote.clear()
            if interval_s is not None:
                self._interval_s = float(interval_s)
            if deadline_s is not None:
                self._deadline_s = float(deadline_s)
            self._sync_endpoints_locked()
            return self._config_locked()

    def handle_command(self, command: dict[str, Any]) -> dict[str, Any]:
        """Apply the agent's ``health`` command and return its reply's result.

        ``{"cmd": "health", "urls": [...], "generate": bool, "discover": bool, "interval_s": S,
        "deadline_s": S, "discover_now": bool}``; every key but "cmd" is optional. Result: ``{"config":
        {...}, "samples": [...]}``; ``discover_now`` looks for launchers before answering.

        Raises:
            ValueError: One readable line for a bad command.
        """
        if not isinstance(command, dict):
            raise ValueError("health command must be a JSON object")
        config = self.configure(
            urls=command.get("urls"),
            generate=command.get("generate"),
            discover=command.get("discover"),
            interval_s=command.get("interval_s"),
            deadline_s=command.get("deadline_s"),
            metrics_urls=command.get("metrics_urls"),
        )
        if command.get("discover_now") is True:
            self.discover_now()
            config = self.config()
        return {"config": config, "samples": self.samples()}

    def discover_now(self) -> None:
        """Look for launchers in /proc now, in the caller's thread (one-shot clients: snapshot, check)."""
        with self._lock:
            if not self._discover or self._closed:
                return
        self._apply_discovered(discover_launchers(self.read_processes()))

    def update_discovered(self, processes: Iterable[Any] | None = None) -> None:
        """Look for launchers and add (and retire) discovered URLs; call it at the process-list rate.

        Args:
            processes: The host's processes as dicts with a "cmdline" argv list: pure string work, done
                before returning. It must hold every process, not only GPU ones: a launcher holds no GPU
                memory while its model loads. None: read every process's cmdline from /proc on the
                prober's own thread instead, and return at once (the snapshot stream never waits for it).
        """
        with self._lock:
            if not self._discover or self._closed:
                return
            if processes is None:
                self._scan_requested = True
                self._ensure_thread_locked()
                self._lock.notify_all()
                return
        self._apply_discovered(discover_launchers(processes))

    def _apply_discovered(self, launchers: list[tuple[str, str | None, int | None]]) -> None:
        found = [launcher[0] for launcher in launchers]
        started = dict((url, launcher_start(pid)) for url, _metrics, pid in launchers)
        now = time.monotonic()
        if found and now - self._local_read_mono >= ENDPOINT_LOCAL_ADDRESSES_S:
            self._local_read_mono = now
            self._local_addresses = health_local_addresses()
        local = self._local_addresses
        remote = set(url for url in found if not health_is_local_url(url, local, self._hostname))
        with self._lock:
            if not self._discover:
                return
            for url, (metrics_url, _started, _pid) in list(self._discovered_metrics.items()):
                if url not in started:  # its launcher is gone: the URL lingers, its launcher's age does not
                    self._discovered_metrics[url] = (metrics_url, None, None)
            for url, metrics_url, pid in launchers:
                self._discovered_seen[url] = now
                self._discovered_metrics[url] = (metrics_url, started[url], pid)
            self._remote = (self._remote - set(found)) | remote
            for url, seen in list(self._discovered_seen.items()):
                if now - seen > self._linger_s:
                    del self._discovered_seen[url]
            while len(self._discovered_seen) > ENDPOINT_MAX_URLS:
                oldest = min(self._discovered_seen, key=self._discovered_seen.__getitem__)
                del self._discovered_seen[oldest]
            for url in [u for u in self._discovered_metrics if u not in self._discovered_seen]:
                del self._discovered_metrics[url]
            self._sync_endpoints_locked()

    def _config_locked(self) -> dict[str, Any]:
        return endpoint_config(
            [health_shown_url(u) for u in self._configured],
            sorted(health_shown_url(u) for u in self._discovered_seen if u not in self._configured),
            self._generate,
            self._discover,
            self._interval_s,
            self._deadline_s,
            ENDPOINT_GENERATE_MIN_INTERVAL_S,
            [health_shown_url(u) for u in self._metrics_configured],
        )

    def _sync_endpoints_locked(self) -> None:
        wanted: dict[str, bool] = {}
        for url in self._configured:
            wanted[url] = False
        if self._ignored:
            wanted.setdefault(self._ignored[0], False)
        if self._discover:
            for url in sorted(self._discovered_seen):
                wanted.setdefault(url, True)
        for url in list(self._endpoints):
            if url not in wanted:
                del self._endpoints[url]
        now = time.monotonic()
        forget_before = now - max(self._interval_s, ENDPOINT_GENERATE_MIN_INTERVAL_S)
        for url, started in list(self._last_started.items()):
            if url not in wanted and started < forget_before:
                del self._last_started[url]
        for url, discovered in wanted.items():
            endpoint = self._endpoints.get(url)
            if endpoint is None:
                endpoint = Endpoint(url, discovered, now)
                last_started = self._last_started.get(url)
                if last_started is not None:
                    endpoint.next_due = max(now, last_started + self._period_s(endpoint))
                self._endpoints[url] = endpoint
            else:
                endpoint.discovered = discovered
            endpoint.not_probed = self._not_probed_locked(url, discovered)
            launcher = self._discovered_metrics.get(url, (None, None, None))
            launcher_metrics, start, pid = launcher
            if pid is not None:
                if pid != endpoint.launcher_pid:
                    endpoint.launcher_gone = None  # a launcher serves the URL (again)
            elif endpoint.launcher_pid is not None and endpoint.launcher_gone is None:
                endpoint.launcher_gone = (self._clock(), endpoint.launcher_pid)  # discovery finds it no more
            endpoint.launcher_pid = pid
            endpoint.launcher_started_at, endpoint.launcher_start_ticks = start or (None, None)
            origin = url_origin(url)
            configured = [m for m in self._metrics_configured if url_origin(m) == origin]
            endpoint.metrics_url = configured[0] if configured else launcher_metrics
        if self._endpoints:
            self._ensure_thread_locked()
        self._lock.notify_all()

    def _not_probed_locked(self, url: str, discovered: bool) -> tuple[str | None, str] | None:
        """(state, detail) of a listed endpoint that is never probed, or None for one that is."""
        if self._ignored and url == self._ignored[0] and url not in self._configured:
            more = len(self._ignored) - 1
            return (
                ENDPOINT_STATE_ERROR,
                f"not probed: at most {ENDPOINT_MAX_URLS} health URLs; this one"
                + (f" and {more} more are" if more else " is")
                + " ignored",
            )
        if discovered and url in self._remote:
            try:
                host = urlsplit(url).hostname or "?"
            except ValueError:
                host = "?"
            return (None, f"not probed: found on {host}, not an address of this host (add it with --health)")
        return None

    def _ensure_thread_locked(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._schedule, name="gputui-health", daemon=True)
            self._thread.start()

    # -- reading -------------------------------------------------------------------------------------------

    def samples(self) -> list[dict[str, Any]]:
        """The latest state of every endpoint (``model.EndpointSample`` dicts); never waits for a probe.

        Configured URLs come first in their order, then discovered ones sorted.
        """
        with self._lock:
            result = []
            ordered = [u for u in self._configured if u in self._endpoints]
            ordered += sorted(u for u in self._endpoints if u not in self._configured)
            for url in ordered:
                result.append(self._endpoints[url].sample(self._generate, self._clock()))
            return result

    def config(self) -> dict[str, Any]:
        """The settings now in force (as :meth:`configure` returns them)."""
        with self._lock:
            return self._config_locked()

    def close(self) -> None:
        """Stop scheduling probes; returns at once (a probe in flight ends by its own deadline)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)

    # -- threads -------------------------------------------------------------------------------------------

    def _period_s(self, endpoint: Endpoint) -> float:
        if endpoint.generating:
            return max(self._interval_s, ENDPOINT_GENERATE_MIN_INTERVAL_S)
        return self._interval_s

    def _schedule(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                if self._scan_requested:
                    self._scan_requested = False
                    scan = True
                else:
                    scan = self._start_due_probes_and_wait_locked()
            if scan:
                found: list[tuple[str, str | None, int | None]] | None = None
                try:
                    found = discover_launchers(self.read_processes())
                except Exception:  # a /proc oddity must not stop the probes; keep what was found before
                    found = None
                if found is not None:
                    self._apply_discovered(found)

    def _start_due_probes_and_wait_locked(self) -> bool:
        """Start the probes that are due, then wait (lock released) for the next due time or a change.

        Returns:
            False: no /proc scan to run (the caller's loop shape).
        """
        now = time.monotonic()
        wake_at = now + 60.0
        for endpoint in list(self._endpoints.values()):
            if endpoint.url in self._in_flight:
                continue
            if (endpoint.generating and not self._generate) or endpoint.not_probed is not None:
                continue
            if endpoint.next_due <= now:
                self._in_flight.add(endpoint.url)
                self._last_started[endpoint.url] = now
                endpoint.next_due = now + self._period_s(endpoint)
                threading.Thread(
                    target=self._probe_one,
                    args=(endpoint.url, self._deadline_s),
                    name="gputui-health-probe",
                    daemon=True,
                ).start()
            wake_at = min(wake_at, endpoint.next_due)
        self._lock.wait(max(0.01, wake_at - now))
        return False

    def _probe_one(self, url: str, deadline_s: float) -> None:
        try:
            from gputui.agent.servers.probe import (
                probe_url,  # the HTTP client only on hosts that have something to probe
            )

            result = probe_url(url, deadline_s, self._body_cap_bytes, self._ssl_context)
        except Exception as exc:  # probe_url should not raise; never kill the thread silently
            result = {"state": ENDPOINT_STATE_ERROR, "code": None, "latency_ms": None, "detail": str(exc)}
        try:
            self._record_probe(url, result)
            with self._lock:
                endpoint = self._endpoints.get(url)
                metrics_url = None if endpoint is None else endpoint.metrics_url
            if metrics_url is not None:
                self._read_metrics(url, metrics_url, deadline_s)
        finally:
            with self._lock:
                self._in_flight.discard(url)
                self._lock.notify_all()

    def _read_metrics(self, url: str, metrics_url: str, deadline_s: float) -> None:
        """Read the endpoint's metrics after its health probe, under a deadline of its own (same length)."""
        try:
            from gputui.agent.servers.probe import fetch_metrics

            read = fetch_metrics(metrics_url, deadline_s, self._ssl_context)
        except Exception as exc:  # fetch_metrics should not raise; never kill the thread silently
            read = {"text": None, "dropped": [], "error": str(exc)}
        now = self._clock()
        with self._lock:
            endpoint = self._endpoints.get(url)
            if endpoint is None or endpoint.metrics_url != metrics_url:
                return
            endpoint.record_metrics(read, now)

    def _record_probe(self, url: str, result: dict[str, Any]) -> None:
        finished = time.monotonic()
        now = self._clock()
        with self._lock:
            endpoint = self._endpoints.get(url)
            if endpoint is not None:
                endpoint.record_probe(result, now, finished)
            self._lock.notify_all()


def _check_settings(generate: Any, discover: Any, interval_s: Any, deadline_s: Any) -> None:
    """Refuse a configure command's flags and periods of the wrong type or range, before anything changes.

    Raises:
        ValueError: With one readable line naming the setting.
    """
    for name, value in (("generate", generate), ("discover", discover)):
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
    for name, seconds, upper in (("interval_s", interval_s, 3600.0), ("deadline_s", deadline_s, 600.0)):
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= upper
        ):
            raise ValueError(f"{name} must be a number of seconds in (0, {upper:g}]")
