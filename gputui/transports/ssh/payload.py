"""The collector as shipped over SSH: its source and bytecode, and the remote command line that runs it."""

from __future__ import annotations

import functools
import importlib.util
import marshal
import math
import re
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from gputui.transports.base import LinkError, LinkOptions

_NUMBER_RE = re.compile(r"[0-9][0-9.e+-]*")
_MAGIC_RE = re.compile(r"[0-9a-f]{4,16}")
AGENT_FILENAME = "gputui-agent"  # what tracebacks from the remote collector name as its file


def agent_source() -> bytes:
    """The bytes of ``gputui/agent.py`` (read without importing it)."""
    spec = importlib.util.find_spec("gputui.agent")
    if spec is None or spec.origin is None:
        raise LinkError("gputui/agent.py is missing from this installation")
    return Path(spec.origin).read_bytes()


def _number_arg(value: float, what: str) -> str:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise LinkError(f"{what} must be a positive number of seconds, got {value!r}")
    text = repr(float(value))
    if not _NUMBER_RE.fullmatch(text):  # repr of a finite positive float is always this shape
        raise LinkError(f"{what}: cannot format {value!r}")
    return text


@dataclass(frozen=True)
class AgentPayload:
    """What the remote stdin gets before the JSON-line commands: the collector, compressed, twice.

    ``source_zlib`` is ``gputui/agent.py`` as it is; ``code_zlib`` is the same file compiled and marshalled
    by this python (empty when it does not compile here). The remote loader runs the code object when its
    python's bytecode magic number is ``magic_hex`` (same bytecode format: compiling the collector there
    would be the largest single cost of every start), else it compiles the source.
    """

    source_zlib: bytes
    code_zlib: bytes
    magic_hex: str

    @property
    def data(self) -> bytes:
        return self.source_zlib + self.code_zlib


_payload_lock = threading.Lock()


def agent_payload(source: bytes) -> AgentPayload:
    """The payload for ``source``, built once per source (compiling and compressing it is CPU work).

    Under a lock: the links of a fleet open at the same moment, and each building its own copy would keep
    a core busy for a while.
    """
    if not source:
        raise LinkError("agent source is empty")
    with _payload_lock:
        return _build_payload(source)


@functools.lru_cache(maxsize=4)
def _build_payload(source: bytes) -> AgentPayload:
    try:
        # dont_inherit: this module's own __future__ flags must not leak into the collector's code.
        code = compile(source, AGENT_FILENAME, "exec", dont_inherit=True)
        code_zlib = zlib.compress(marshal.dumps(code), 9)
    except (SyntaxError, ValueError):  # a python newer than the remote ones may reject old syntax one day
        code_zlib = b""
    return AgentPayload(zlib.compress(source, 9), code_zlib, importlib.util.MAGIC_NUMBER.hex())


def agent_loader(payload: AgentPayload) -> str:
    """The ``python3 -c`` program that reads ``payload`` from stdin and runs the collector."""
    if not payload.source_zlib:
        raise LinkError("agent source is empty")
    if not _MAGIC_RE.fullmatch(payload.magic_hex):
        raise LinkError(f"unexpected bytecode magic number {payload.magic_hex!r}")
    # The lambda reads both parts in order and leaves no names behind in the collector's globals.
    return (
        "import sys,zlib,marshal;exec((lambda s,c:marshal.loads(zlib.decompress(c)) if c and"
        ' getattr(sys.modules.get("_frozen_importlib_external"),"MAGIC_NUMBER",0)=='
        f'bytes.fromhex("{payload.magic_hex}") else compile(zlib.decompress(s),"{AGENT_FILENAME}","exec"))'
        f"(sys.stdin.buffer.read({len(payload.source_zlib):d}),sys.stdin.buffer.read({len(payload.code_zlib):d})))"
    )


def agent_command(payload: AgentPayload, options: LinkOptions) -> str:
    """The remote command line: fixed text, two integers, one hex word and validated numbers only."""
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
