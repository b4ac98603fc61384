"""What a health URL means: whether probing it generates tokens, and how it may be shown (never with its
credentials)."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from gputui.agent.textpolicy import TEXT_ELLIPSIS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ENDPOINT_SHOWN_URL_CHARS = 200


def health_is_generating_url(url: str) -> bool:
    """Whether probing ``url`` makes the server generate tokens (sglang's ``/health_generate``).

    Errs on the side of caution: any last path segment mentioning "generate" counts, so such endpoints are
    only probed when asked for and never more often than ``ENDPOINT_GENERATE_MIN_INTERVAL_S``.
    """
    try:
        path = urlsplit(str(url)).path
    except ValueError:
        return False
    last_segment = path.rstrip("/").rsplit("/", 1)[-1]
    return "generate" in last_segment.lower()


_USERINFO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def health_redact_url(url: Any) -> str:
    """``url`` as it may be shown anywhere: credentials (``user:password@``) replaced by ``***@``.

    A URL's credentials are sent as HTTP basic auth (over the loopback or TLS of the GPU host itself) and
    never displayed: not in the panel, the JSON output, a log or an error line.
    """
    return _USERINFO_RE.sub(r"\1***@", str(url), count=1)


def health_shown_url(url: str) -> str:
    """A URL as every sample and reply carries it: credentials redacted, an over-long one cut."""
    shown = health_redact_url(url)
    if len(shown) > ENDPOINT_SHOWN_URL_CHARS:
        shown = shown[: ENDPOINT_SHOWN_URL_CHARS - 1] + TEXT_ELLIPSIS
    return shown


def health_scrub(detail: str | None, url: str) -> str | None:
    """``detail`` without the password of ``url``, should any error text quote it."""
    if not detail:
        return detail
    try:
        password = urlsplit(url).password
    except ValueError:
        return detail
    for secret in (password, None if password is None else unquote(password)):
        if secret:
            detail = detail.replace(secret, "***")
    return detail


def url_origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of ``url`` (port None for the scheme's default), None for a malformed one: a
    metrics URL belongs to the health URL of the same origin."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if port == {"http": 80, "https": 443}.get(scheme):
        port = None
    return scheme, (parts.hostname or "").lower(), port
