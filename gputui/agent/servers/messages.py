"""The health messages' shapes: one endpoint's sample and the prober's settings (names from
``gputui.agent.protocol``)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable


def endpoint_sample(
    url: str,
    state: str | None,
    code: int | None = None,
    latency_ms: float | None = None,
    since: float | None = None,
    last_ok: float | None = None,
    consecutive_failures: int = 0,
    detail: str | None = None,
    discovered: bool = False,
    checked_at: float | None = None,
    metrics_url: str | None = None,
    metrics_text: str | None = None,
    metrics_at: float | None = None,
    metrics_dropped: Iterable[str] = (),
    metrics_error: str | None = None,
    launcher_age_s: float | None = None,
    launcher_pid: int | None = None,
) -> dict[str, Any]:
    """The latest state of one health endpoint: ``state`` from ``ENDPOINT_STATES`` (None: not probed yet),
    ``since`` when it began, ``last_ok`` the last UP and ``checked_at`` the last probe (epoch seconds).

    The server's metrics beside it: ``metrics_url`` (None: none read), ``metrics_text`` its last body cut down
    on the host to the series the client reads (``servers.metrics_filter``), ``metrics_at`` when it was read,
    ``metrics_dropped`` the names cut by a cap, ``metrics_error`` why the last read failed (the text is then
    None), and ``launcher_age_s`` the age of the launcher that serves the endpoint (None: not known, or it is
    gone), ``launcher_pid`` its pid (None likewise).
    ``metrics`` is the client's reading of them (``gputui.core.servers.metrics_json``): null from a collector.
    """
    return {
        "url": url,
        "state": state,
        "code": code,
        "latency_ms": latency_ms,
        "since": since,
        "last_ok": last_ok,
        "consecutive_failures": consecutive_failures,
        "detail": detail,
        "discovered": discovered,
        "checked_at": checked_at,
        "metrics_url": metrics_url,
        "metrics_text": metrics_text,
        "metrics_at": metrics_at,
        "metrics_dropped": list(metrics_dropped),
        "metrics_error": metrics_error,
        "launcher_age_s": launcher_age_s,
        "metrics": None,
        "launcher_pid": launcher_pid,
    }


ENDPOINT_SAMPLE_FIELDS = tuple(endpoint_sample("", None))
"""The keys of a health sample, in order (spelled once, by ``endpoint_sample``)."""


def endpoint_config(
    urls: list[str],
    discovered_urls: list[str],
    generate: bool,
    discover: bool,
    interval_s: float,
    deadline_s: float,
    generate_min_interval_s: float,
    metrics_urls: Iterable[str] = (),
) -> dict[str, Any]:
    """The health settings in force (the ``config`` of the ``health`` command's answer): the configured and
    the discovered URLs (credentials redacted), whether generating endpoints are probed and launchers looked
    for, the intervals in seconds, and the configured metrics URLs."""
    return {
        "urls": urls,
        "metrics_urls": list(metrics_urls),
        "discovered_urls": discovered_urls,
        "generate": generate,
        "discover": discover,
        "interval_s": interval_s,
        "deadline_s": deadline_s,
        "generate_min_interval_s": generate_min_interval_s,
    }
