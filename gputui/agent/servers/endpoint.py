"""One endpoint the prober knows, and the rules for the URL lists it is configured with."""

from __future__ import annotations

from gputui.agent.proc.procfs import (
    CLOCK_TICKS_PER_S,
    EXITED_STATES,
    read_boot_time,
    read_stat,
    still_running,
)
from gputui.agent.protocol import ENDPOINT_STATE_DOWN, ENDPOINT_STATE_UP
from gputui.agent.servers import ENDPOINT_MIN_GAP_S
from gputui.agent.servers.messages import ENDPOINT_SAMPLE_FIELDS, endpoint_sample
from gputui.agent.servers.urls import health_is_generating_url, health_scrub, health_shown_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ENDPOINT_NOT_PROBED_GENERATE = "not probed: generating endpoint (enable generate probes)"
ENDPOINT_LAUNCHER_GONE = "its launcher (pid {pid}) is gone"


def url_list(urls: Any, name: str) -> list[str] | None:
    """``urls`` as a list without repeats (None stays None); ValueError for anything but a list of strings."""
    if urls is None:
        return None
    if isinstance(urls, (str, bytes)):
        raise ValueError(f"{name} must be a list of strings")
    result: list[str] = []
    for url in urls:
        if not isinstance(url, str):
            raise ValueError(f"{name} must be a list of strings")
        if url not in result:
            result.append(url)
    return result


def launcher_start(pid: int | None) -> tuple[float, int] | None:
    """(epoch seconds, clock ticks after boot) at which process ``pid`` started; None when it cannot be read
    or has exited (a zombie serves nothing)."""
    if pid is None:
        return None
    stat = read_stat(pid)
    boot = read_boot_time()
    if stat is None or boot is None or stat.state in EXITED_STATES:
        return None
    return boot + stat.start_ticks / float(CLOCK_TICKS_PER_S), stat.start_ticks


_SAMPLE_ONLY = ("launcher_age_s", "metrics")
"""Sample keys an endpoint does not hold: the launcher's age is worked out when the sample is made, and the
metrics' reading is the client's."""


class Endpoint:
    """One health URL the prober knows: its latest probe result and metrics, and when it is due again."""

    __slots__ = (
        *(f for f in ENDPOINT_SAMPLE_FIELDS if f not in _SAMPLE_ONLY),
        "generating",
        "next_due",
        "not_probed",
        "launcher_started_at",
        "launcher_start_ticks",
        "launcher_gone",
    )

    def __init__(self, url: str, discovered: bool, now_monotonic: float) -> None:
        self.url = url
        self.not_probed: tuple[str | None, str] | None = None
        """(state, detail) of an endpoint that is listed but never probed (see ``EndpointProber``)."""
        self.discovered = discovered
        self.generating = health_is_generating_url(url)
        self.state: str | None = None
        self.code: int | None = None
        self.latency_ms: float | None = None
        self.since: float | None = None
        self.last_ok: float | None = None
        self.consecutive_failures = 0
        self.detail: str | None = None
        self.checked_at: float | None = None
        self.next_due = now_monotonic
        self.metrics_url: str | None = None
        """Read after each probe of ``url``: a configured metrics URL of the same origin, else the one its
        launcher serves."""
        self.metrics_text: str | None = None
        self.metrics_at: float | None = None
        self.metrics_dropped: list[str] = []
        self.metrics_error: str | None = None
        self.launcher_started_at: float | None = None
        """Epoch seconds at which the launcher serving ``url`` started (discovered endpoints only); None
        once the last scan no longer found it: a dead launcher has no age."""
        self.launcher_pid: int | None = None
        """The pid of that launcher, None as above."""
        self.launcher_start_ticks: int | None = None
        """Its start in clock ticks after boot, which tells it from a later process given the same pid."""
        self.launcher_gone: tuple[float, int] | None = None
        """(epoch seconds, pid) since the launcher serving ``url`` is seen gone; until a probe answers UP (a
        server is back) or a new launcher is found, the endpoint is DOWN from then on: a probe answered
        before the launcher died (a 503 while its workers were being killed) is never its state after."""

    def sample(self, generate: bool, now_s: float) -> dict[str, Any]:
        """The endpoint's latest state as a health sample (``servers.messages.endpoint_sample``).

        Args:
            generate: Generating endpoints are probed (else one never probed says why).
            now_s: Epoch seconds now (the launcher's age is worked out from it).
        """
        state, detail = self.state, self.detail
        if self.not_probed is not None:
            state, detail = self.not_probed
        elif self.generating and not generate and self.state is None:
            detail = ENDPOINT_NOT_PROBED_GENERATE
        started = self.launcher_started_at
        pid, ticks = self.launcher_pid, self.launcher_start_ticks
        alive = pid is not None and ticks is not None and still_running(pid, ticks)
        if started is not None and not alive:
            # Discovery sees the launcher at the process-list rate; a launcher that died since has no age
            # from the moment it is gone, so a probe answered while it exits is never a remembered STARTING.
            started = None
        if pid is not None and ticks is not None and not alive and self.launcher_gone is None:
            self.launcher_gone = (now_s, pid)
        since = self.since
        if self.launcher_gone is not None and state != ENDPOINT_STATE_UP and self.not_probed is None:
            since, gone_pid = self.launcher_gone
            state, detail = ENDPOINT_STATE_DOWN, ENDPOINT_LAUNCHER_GONE.format(pid=gone_pid)
        return endpoint_sample(
            health_shown_url(self.url),
            state,
            code=self.code,
            latency_ms=self.latency_ms,
            since=since,
            last_ok=self.last_ok,
            consecutive_failures=self.consecutive_failures,
            detail=detail,
            discovered=self.discovered,
            checked_at=self.checked_at,
            metrics_url=self.metrics_url and health_shown_url(self.metrics_url),
            metrics_text=self.metrics_text,
            metrics_at=self.metrics_at,
            metrics_dropped=self.metrics_dropped,
            metrics_error=self.metrics_error,
            launcher_age_s=None if started is None else max(0.0, now_s - started),
            launcher_pid=None if started is None else pid,
        )

    def record_probe(self, result: dict[str, Any], now_s: float, finished_mono: float) -> None:
        """A probe of the endpoint ended with ``result`` (``probe.probe_url``) at ``now_s``."""
        state = result["state"]
        if state != self.state:
            self.since = now_s
        if state == ENDPOINT_STATE_UP:
            self.launcher_gone = None  # something serves the URL again
        self.state = state
        self.code = result["code"]
        self.latency_ms = result["latency_ms"]
        self.detail = health_scrub(result["detail"], self.url)
        self.checked_at = now_s
        if state == ENDPOINT_STATE_UP:
            self.last_ok = now_s
            self.consecutive_failures = 0
        else:
            self.consecutive_failures += 1
        self.next_due = max(self.next_due, finished_mono + ENDPOINT_MIN_GAP_S)

    def record_metrics(self, read: dict[str, Any], now_s: float) -> None:
        """The endpoint's metrics were read (``probe.fetch_metrics``) at ``now_s``."""
        self.metrics_text = read["text"]
        self.metrics_dropped = list(read["dropped"])
        self.metrics_error = health_scrub(read["error"], self.metrics_url or self.url)
        self.metrics_at = now_s
