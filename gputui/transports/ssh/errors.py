"""What a collector link raises besides a plain LinkError, and one line for any failure."""

from __future__ import annotations

from gputui.core.link import LinkError
from gputui.core.textsafe import visible

DETAIL_CHARS = 160
"""Most characters of a remote or library message quoted in an error line."""


class SetupFailed(LinkError):
    """The host cannot run the collector as configured (protocol mismatch, no python3, ProxyCommand)."""

    permanent = True


class PythonMissing(SetupFailed):
    """The remote shell found no ``python3``: the reduced collector (``reduced``) may still run there."""


class AuthFailed(LinkError):
    """The host refused every credential offered; the message names the host and what was tried."""

    permanent = True


def shown(text: str, limit: int = DETAIL_CHARS) -> str:
    """One safe line for an error message from remote bytes (control characters escaped, length capped)."""
    return visible(text, limit)


def phase_error(target: str, what: str, exc: BaseException) -> LinkError:
    """``target: what: cause`` for ``exc``, raised while doing ``what``."""
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        detail = exc.strerror
    return LinkError(f"{target}: {what}: {shown(detail)}")
