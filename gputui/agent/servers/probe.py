"""Probing one health URL once: the HTTP exchange, and what its answer means."""

from __future__ import annotations

import socket
import time

from gputui.agent.protocol import (
    ENDPOINT_STATE_ERROR,
    ENDPOINT_STATE_TIMEOUT,
    ENDPOINT_STATE_UNHEALTHY,
    ENDPOINT_STATE_UP,
)
from gputui.agent.servers import (
    ENDPOINT_BODY_CAP_BYTES,
    ENDPOINT_DEFAULT_DEADLINE_S,
    ENDPOINT_DETAIL_MAX_CHARS,
)
from gputui.agent.servers.http import (
    ProbeFailure,
    connect,
    exchange,
    parse_url,
    wrap_tls,
)
from gputui.agent.textpolicy import visible_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _says_something(excerpt: bytes) -> bool:
    """Whether a body has words in it: ``{}``, ``[]``, ``null`` or punctuation say nothing a person reads."""
    letters = 0
    for byte in excerpt:
        letters = letters + 1 if (65 <= byte <= 90 or 97 <= byte <= 122) else 0
        if letters >= 3 and excerpt.strip().lower() not in (b"null", b"none", b"true", b"false"):
            return True
    return False


def _health_classify(code: int, reason: str, body: bytes) -> tuple[str, str | None]:
    excerpt = body.strip()
    if 200 <= code < 300:
        return ENDPOINT_STATE_UP, None
    # The body says more than the reason phrase, and the detail line is short: one or the other. A body
    # without words (an empty JSON object) is never the wording: the reason phrase is.
    if _says_something(excerpt):
        detail = f"HTTP {code}: {visible_text(excerpt, ENDPOINT_DETAIL_MAX_CHARS)}"
    else:
        detail = f"HTTP {code} {visible_text(reason, ENDPOINT_DETAIL_MAX_CHARS)}".strip()
    if code >= 500 or code == 429:
        return ENDPOINT_STATE_UNHEALTHY, detail
    if 300 <= code < 400:
        return ENDPOINT_STATE_ERROR, "redirect not followed: " + detail
    return ENDPOINT_STATE_ERROR, detail


def _get(url: str, deadline_s: float, body_cap_bytes: int, ssl_context: Any) -> tuple[int, str, bytes]:
    """One bounded GET of ``url`` (see :func:`probe_url`): (status code, reason phrase, body up to the cap).

    Raises:
        ProbeFailure, socket.timeout, or whatever else the exchange meets; the socket is closed.
    """
    deadline = time.monotonic() + deadline_s
    sock: socket.socket | None = None
    try:
        target = parse_url(url)
        sock = connect(target, deadline, deadline_s)
        if target.scheme == "https":
            sock = wrap_tls(sock, target, deadline, ssl_context)
        return exchange(sock, target, deadline, deadline_s, body_cap_bytes)
    finally:
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


def probe_url(
    url: str,
    deadline_s: float = ENDPOINT_DEFAULT_DEADLINE_S,
    body_cap_bytes: int = ENDPOINT_BODY_CAP_BYTES,
    ssl_context: Any = None,
) -> dict[str, Any]:
    """Probe one health URL once, blocking for at most ``deadline_s`` (plus scheduling noise).

    The deadline covers everything: name lookup, connect, TLS handshake, request, headers and body. No
    proxy from the environment is used (the URL is the GPU host's own endpoint) and redirects are not
    followed.

    Args:
        url: An http:// or https:// URL; anything else is an ERROR "unsupported URL".
        deadline_s: Total deadline in seconds.
        body_cap_bytes: At most this many body bytes are read.
        ssl_context: An ``ssl.SSLContext`` for https; default: the system's verifying context.

    Returns:
        ``{"state", "code", "latency_ms", "detail"}``: the state name, the HTTP status code (None when
        none was read), milliseconds until the answer or failure, and a sanitised detail line (None when UP).
    """
    started = time.monotonic()
    code: int | None = None
    try:
        code, reason, body = _get(url, deadline_s, body_cap_bytes, ssl_context)
        state, detail = _health_classify(code, reason, body)
    except ProbeFailure as failure:
        state, detail = failure.state, failure.detail
        code = failure.code
    except socket.timeout:
        state, detail = ENDPOINT_STATE_TIMEOUT, f"no response within {deadline_s:g}s"
    except Exception as exc:  # one bad endpoint must never take the agent down
        state, detail = ENDPOINT_STATE_ERROR, f"probe failed: {type(exc).__name__}: {exc}"
    latency_ms = round((time.monotonic() - started) * 1000.0, 1)
    return {
        "state": state,
        "code": code,
        "latency_ms": latency_ms,
        "detail": None if detail is None else visible_text(detail, ENDPOINT_DETAIL_MAX_CHARS),
    }


def fetch_metrics(
    url: str, deadline_s: float = ENDPOINT_DEFAULT_DEADLINE_S, ssl_context: Any = None
) -> dict[str, Any]:
    """Read a server's ``/metrics`` once, bounded like a health probe, and cut it down on this host.

    The deadline covers the whole exchange; at most ``METRICS_BODY_CAP_BYTES`` of the body are read (a longer
    one is cut, and the series being read at the cut dropped: ``metrics_filter``).

    Returns:
        ``{"text", "dropped", "error"}``: the filtered exposition (None when the read failed), the names a cap
        or the cut dropped, and why the read failed (None when it did not).
    """
    from gputui.agent.servers.metrics_filter import METRICS_BODY_CAP_BYTES, filter_metrics

    error: str | None = None
    try:
        code, _reason, body = _get(url, deadline_s, METRICS_BODY_CAP_BYTES + 1, ssl_context)
        if not 200 <= code < 300:
            error = f"HTTP {code}"
        else:
            truncated = len(body) > METRICS_BODY_CAP_BYTES
            text, dropped = filter_metrics(body[:METRICS_BODY_CAP_BYTES], truncated)
            return {"text": text.decode("utf-8", "replace"), "dropped": dropped, "error": None}
    except ProbeFailure as failure:
        error = failure.detail
    except socket.timeout:
        error = f"no whole answer within {deadline_s:g}s"
    except Exception as exc:  # one bad endpoint must never take the agent down
        error = f"read failed: {type(exc).__name__}: {exc}"
    return {"text": None, "dropped": [], "error": visible_text(error, ENDPOINT_DETAIL_MAX_CHARS)}
