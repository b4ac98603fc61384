"""The collector as shipped over SSH: the bundle of its package (``gputui.transports.ssh.bundle``), and the
remote
command line that runs it."""

from __future__ import annotations

import math
import re

from gputui.core.link import LinkError, LinkOptions
from gputui.transports.ssh.bundle import Bundle, bundle_for, loader

_NUMBER_RE = re.compile(r"[0-9][0-9.e+-]*")

AgentPayload = Bundle
"""What the remote stdin gets before the JSON-line commands (``gputui.transports.ssh.bundle``)."""


def _number_arg(value: float, what: str) -> str:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise LinkError(f"{what} must be a positive number of seconds, got {value!r}")
    text = repr(float(value))
    if not _NUMBER_RE.fullmatch(text):  # repr of a finite positive float is always this shape
        raise LinkError(f"{what}: cannot format {value!r}")
    return text


def agent_payload(source: bytes | None = None) -> AgentPayload:
    """The bundle of the installed collector, or of ``source`` (a stand-in collector), built once."""
    return bundle_for(source)


def agent_loader(payload: AgentPayload) -> str:
    """The ``python3 -c`` program that reads ``payload`` from stdin and runs the collector."""
    return loader(payload)


def remote_command_line(payload: AgentPayload, options: LinkOptions) -> str:
    """The remote command line: fixed text, three integers, one hex word and validated numbers only."""
    words = [
        "python3",
        "-u",
        "-c",
        f"'{agent_loader(payload)}'",
        "--interval",
        _number_arg(options.memory_interval_s, "interval"),
        "--process-interval",
        _number_arg(options.process_interval_s, "process interval"),
    ]
    words.append("--elide-unchanged")
    if options.read_only:
        words.append("--read-only")
    if not options.discover_health:
        words.append("--no-discover")
    return " ".join(words)
