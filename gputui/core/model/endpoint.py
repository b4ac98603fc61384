"""One server endpoint's latest state as the collector probed it (``agent.servers.messages``)."""

from __future__ import annotations

from gputui.core.model.record import Record
from gputui.core.model.wire import opt_float, opt_int, opt_safe, opt_str, plain, safe
from gputui.core.text import SafeText, visible_tree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class EndpointSample(Record):
    """The state of one health endpoint as the agent last probed it, with the server's metrics beside it.

    Attributes:
        state: UP, UNHEALTHY, DOWN, TIMEOUT or ERROR as probed (None: not probed yet); once judged by the
            client (``gputui.core.servers.ServerWatch``) also STARTING, BUSY or STALLED.
        since: Epoch seconds at which the current state began.
        last_ok: Epoch seconds of the last UP, or None.
        detail: Short sanitised excerpt of an error or body; for a state the client derived, why.
        metrics_url: The metrics endpoint read beside it (None: none).
        metrics_text: Its last body, cut down on the host to the series the client reads (None: not read);
            raw text for the parser, never shown (what is read from it is made visible there).
        metrics_at: Epoch seconds of that read.
        metrics_dropped: Names the host dropped over a cap: unknown, never partial.
        metrics_error: Why the last read failed.
        launcher_age_s: Age of the launcher serving the endpoint, in seconds (None: not known, or gone).
        metrics: The client's reading (``gputui.core.servers.METRICS_JSON_KEYS``), None before it is judged.
        launcher_pid: The pid of that launcher (None: not known, or gone): its tree is the server's job.
    """

    url: SafeText
    state: SafeText | None = None
    code: int | None = None
    latency_ms: float | None = None
    since: float | None = None
    last_ok: float | None = None
    consecutive_failures: int = 0
    detail: SafeText | None = None
    discovered: bool = False
    checked_at: float | None = None
    metrics_url: SafeText | None = None
    metrics_text: str | None = None
    metrics_at: float | None = None
    metrics_dropped: tuple[SafeText, ...] = ()
    metrics_error: SafeText | None = None
    launcher_age_s: float | None = None
    metrics: dict[str, Any] | None = None
    launcher_pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = plain(self)
        data["metrics_dropped"] = list(self.metrics_dropped)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EndpointSample:
        return cls(
            url=safe(data["url"]),
            state=opt_safe(data.get("state")),
            code=opt_int(data.get("code")),
            latency_ms=opt_float(data.get("latency_ms")),
            since=opt_float(data.get("since")),
            last_ok=opt_float(data.get("last_ok")),
            consecutive_failures=opt_int(data.get("consecutive_failures")) or 0,
            detail=opt_safe(data.get("detail")),
            discovered=bool(data.get("discovered", False)),
            checked_at=opt_float(data.get("checked_at")),
            metrics_url=opt_safe(data.get("metrics_url")),
            metrics_text=opt_str(data.get("metrics_text")),
            metrics_at=opt_float(data.get("metrics_at")),
            metrics_dropped=tuple(safe(n) for n in (data.get("metrics_dropped") or ()) if isinstance(n, str)),
            metrics_error=opt_safe(data.get("metrics_error")),
            launcher_age_s=opt_float(data.get("launcher_age_s")),
            metrics=visible_tree(data["metrics"]) if isinstance(data.get("metrics"), dict) else None,
            launcher_pid=opt_int(data.get("launcher_pid")),
        )
