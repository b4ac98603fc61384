"""What a collector link raises besides a plain LinkError, and one line for any failure."""

from __future__ import annotations

from gputui.core.link import LinkError
from gputui.core.text import visible

DETAIL_CHARS = 160
"""Most characters of a remote or library message quoted in an error line."""


class SetupFailed(LinkError):
    """The host cannot run the collector as configured (protocol mismatch, no python3, ProxyCommand)."""

    permanent = True


class PythonMissing(SetupFailed):
    """The remote shell found no ``python3``: the reduced collector (``reduced``) may still run there."""


class PythonTooOld(PythonMissing):
    """The remote ``python3`` is older than the collector supports: the reduced collector may run there.

    Attributes:
        version: The remote python's version ("3.6.15").
        needed: The oldest version the collector runs on ("3.8").
    """

    def __init__(self, message: str, version: str = "", needed: str = "") -> None:
        super().__init__(message)
        self.version = version
        self.needed = needed


def python_too_old(version: str, needed: str) -> str:
    """The one wording of a remote python too old for the collector."""
    return f"python3 {version} is older than {needed}, the oldest the collector runs on"


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
