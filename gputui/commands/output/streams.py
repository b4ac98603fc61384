"""What every command prints through: marks its stream can carry, streams that never die on a character,
the one line for a host that could not be reached, and the last line of a wait."""

from __future__ import annotations

import os

from gputui.core.text import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO


def marks(stream: TextIO) -> tuple[str, str]:
    """✓/✗ where the output encoding can carry them, else ASCII (a C locale, a log file in latin-1)."""
    try:
        "✓✗–".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "ok", "X"
    return "✓", "✗"


def safe_streams(*streams: TextIO) -> None:
    """Never die on a character the terminal's encoding lacks: escape it instead."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass


def link_error_line(target: str, exc: Exception) -> str:
    """ "gputui: <target>: <cause>" without repeating the target when the cause already names it."""
    cause = visible(str(exc) or type(exc).__name__, 300)
    if cause.startswith(f"{target}:"):
        return f"gputui: {cause}"
    return f"gputui: {visible(target, 100)}: {cause}"


def wait_line(waited_s: float | None, wait_s: float, known: bool) -> str | None:
    """The last line of ``check --wait``: how long it took, or that it was not clean in time; None when the
    last verdict could not tell (the verdict lines already say so, once)."""
    if waited_s is not None:
        return f"clean after {waited_s:.2f} s"
    return f"still not clean after {wait_s:g} s" if known else None


def same_terminal(out: TextIO, err: TextIO) -> bool:
    """Whether ``out`` and ``err`` are one terminal (what a person at it sees once is said once)."""
    try:
        if not (out.isatty() and err.isatty()):
            return False
        a, b = os.fstat(out.fileno()), os.fstat(err.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino, a.st_rdev) == (b.st_dev, b.st_ino, b.st_rdev)
