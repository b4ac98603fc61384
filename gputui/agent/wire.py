"""What one process may cost on the wire: caps that keep every line a collector writes a few MiB at most.

Host content is hostile (an unprivileged user can give processes megabytes of argv, and control bytes take
six bytes each once JSON-escaped), so every size here is in bytes of the JSON line, escapes included, and
together they keep a full snapshot line far below the client's limit on one line (16 MiB).
"""

from __future__ import annotations

from gputui.agent.protocol import PROCESS_CPU_PCT, PROCESS_LIVE_THREADS, PROCESS_PROFILER, PROCESS_WAITS
from gputui.agent.textpolicy import TEXT_ELLIPSIS

MIB = 1024 * 1024
WIRE_CMDLINE_BYTES = 4096
"""Most bytes a process's command line takes in a snapshot line; a longer one is cut and the process is
marked ``"cmdline_truncated": true`` (the whole text is one ``process`` command away)."""
WIRE_CMDLINE_BUDGET_BYTES = 2 * MIB
"""Most bytes of command lines in one snapshot or kill reply; past it, every further command line is cut
to ``WIRE_CMDLINE_TIGHT_BYTES``."""
WIRE_CMDLINE_TIGHT_BYTES = 256
WIRE_MAX_PROCESSES = 4096
"""Most processes one snapshot lists: GPU process trees first, then zombie / D-state processes; the
number left out is ``processes_omitted``."""
WIRE_MAX_DEVICE_HOLDERS = 4096
WIRE_TEXT_CHARS = 256
"""Most characters of a user name or a one-line error in a snapshot."""
PROCESS_KEYS_LEFT_OUT_WHEN_EMPTY = (
    PROCESS_LIVE_THREADS,
    PROCESS_CPU_PCT,
    PROCESS_WAITS,
    PROCESS_PROFILER,
    "gpu_sm_pct",
    "gpu_mem_bw_pct",
    "gpu_enc_pct",
    "gpu_dec_pct",
)
"""Keys of a process entry in a snapshot that the collector leaves out where the process has no value for
them: null, or (the per-GPU figures) a process no GPU lists. The reader (``gputui.core.model.Proc``) takes an
absent key as null or empty; every other key of ``Proc`` is always there. Most members of a large job are
idle: this keeps each of their entries to what is known of them."""
PROCESS_TEXT_BYTES = 8 * MIB
"""Most bytes of the command line the ``process`` command returns (the whole text of any ordinary
process; still half of the client's line limit)."""


def _json_bytes(char: str) -> int:
    """Bytes one character takes inside a JSON string written with ``ensure_ascii=False`` as UTF-8."""
    code = ord(char)
    if code < 0x80:
        if char in '"\\':
            return 2
        if code < 0x20:
            return 2 if char in "\b\f\n\r\t" else 6  # \\n, or \\u0001
        return 1
    if code < 0x800:
        return 2
    if 0xD800 <= code <= 0xDFFF:
        return 6  # a lone surrogate leaves the writer as a \\udcNN escape
    return 3 if code < 0x10000 else 4


def _plain_ascii(arg: str) -> bool:
    """Whether ``arg`` is written into a JSON string as it is, one byte a character."""
    return arg.isascii() and arg.isprintable() and '"' not in arg and "\\" not in arg


def argv_json_bytes(argv: list[str]) -> int:
    """Bytes of ``argv``'s compact JSON form (``["a","b"]``) as UTF-8, counted without writing it: every
    listed process is counted on every sample, and most arguments are plain ASCII."""
    size = 2 + 3 * len(argv) - (1 if argv else 0)
    for arg in argv:
        size += len(arg) if _plain_ascii(arg) else sum(_json_bytes(char) for char in arg)
    return size


def wire_cmdline(argv: list[str], max_bytes: int) -> tuple[list[str], bool, int]:
    """``argv`` cut so that its JSON form (``["a","b"]``, UTF-8) takes at most ``max_bytes``.

    Counts what the line will really carry: a control byte costs six bytes (``\\u0001``), an invalid byte
    (kept as ``\\xNN`` text) five, a CJK character three. Only as many characters as fit are looked at.

    Returns:
        (the argv to send, whether anything was cut, the bytes it takes on the wire).
    """
    # Every character costs at most 6 bytes and every argument 3 more (quotes, comma): most argv fit at once.
    if 6 * sum(len(arg) for arg in argv) + 3 * len(argv) + 2 <= max_bytes:
        return argv, False, argv_json_bytes(argv)
    kept: list[str] = []
    used = 1  # the opening bracket
    for arg in argv:
        if used + 3 > max_bytes:  # its quotes and the closing bracket (or the comma) no longer fit
            return kept, True, max(used, 2)
        used += 3
        end = 0
        for char in arg:
            cost = _json_bytes(char)
            if used + cost > max_bytes:
                kept.append(arg[:end])
                return kept, True, used
            used += cost
            end += 1
        kept.append(arg)
    return kept, False, used


def wire_text(value: str | None, max_chars: int = WIRE_TEXT_CHARS) -> str | None:
    """A short host string (user name, error line) cut to ``max_chars`` characters, marked with "…"."""
    if value is None or len(value) <= max_chars:
        return value
    return value[: max_chars - 1] + TEXT_ELLIPSIS


class WireBudget:
    """The command-line bytes one snapshot line (or kill reply) may still spend.

    Each command line comes already cut to ``WIRE_CMDLINE_BYTES``; once ``WIRE_CMDLINE_BUDGET_BYTES`` are
    spent, the rest are cut to ``WIRE_CMDLINE_TIGHT_BYTES``.
    """

    def __init__(self, budget_bytes: int = WIRE_CMDLINE_BUDGET_BYTES) -> None:
        self.left = budget_bytes

    def take(self, argv: list[str], truncated: bool, wire_bytes: int) -> tuple[list[str], bool]:
        if self.left <= 0 and wire_bytes > WIRE_CMDLINE_TIGHT_BYTES:
            argv, cut, wire_bytes = wire_cmdline(argv, WIRE_CMDLINE_TIGHT_BYTES)
            truncated = truncated or cut
        self.left -= wire_bytes
        return argv, truncated
