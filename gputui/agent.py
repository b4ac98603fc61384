"""The collector: GPU figures, the process trees that hold GPU memory, the kill executor and health probes.

One stdlib-only file that runs in-process for the local host (``gputui/transports/local.py``) and is shipped
verbatim over SSH for remote hosts, where it runs under whatever ``python3`` is there (3.8 or newer) with
nothing installed. It uses pynvml and psutil when they are importable; without pynvml it reads a long-lived
``nvidia-smi --query-gpu=... -lms N`` process; without psutil it reads /proc directly.

Remote form: ``python3 -u -c '<exec of this source>' ARGS``; after the source, stdin carries JSON-line
commands and stdout carries JSON-line messages (``hello``, ``snapshot``, ``reply``). See ``serve()``; the
collector ends within seconds once its client is gone, at any stage (``ClientSession``).

No host content can make a line large: a process's command line is cut to ``WIRE_CMDLINE_BYTES`` on the
wire (``cmdline_truncated`` says so), a line's command lines together to ``WIRE_CMDLINE_BUDGET_BYTES``, and a
snapshot lists at most ``WIRE_MAX_PROCESSES`` processes (``processes_omitted`` counts the rest). The
``process`` command (``{"cmd": "process", "pid": P, "start_ticks": T}``) returns one process's whole
command line, for the kill confirmation and a process's detail.

Health endpoints (``--health URL``, ``configure``'s ``health_urls`` / ``discover_health`` /
``health_generate``, and launchers found in the process list) are probed from this host by a
``HealthProber`` on threads of its own; every snapshot carries their latest state in ``health``. The
``health`` command (``{"cmd": "health", "urls": [...], "generate": bool, "discover": bool, "interval_s": S,
"deadline_s": S, "discover_now": bool}``, every key optional) changes what is probed and answers
``{"config", "samples"}``. Discovery probes only this host's own addresses.

Kills (``KILL_COMMAND`` and its vocabulary block): every check and signal happens right away; the wait,
the TERM-to-KILL escalation and the KILL's confirmation then run on a thread of the kill operation's own,
which finishes whether or not the client stays (``Agent.escalations_pending``, ``wait_for_escalations``).
A GPU process tree is the holder's job (``job_root``): same session and cgroup, below every session boundary.

Errors are data: a missing driver, a lost GPU or a hung NVML call become an ``error`` string on the host or on
that GPU; every NVML call runs on a per-device worker thread with a deadline, so one stuck device never stalls
the snapshot stream. Nothing here ever builds a shell command line.
"""

from __future__ import annotations

import argparse
import base64
import functools
import ipaddress
import json
import math
import os
import pwd
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple
from urllib.parse import unquote, urlsplit

try:  # NVIDIA's bindings (nvidia-ml-py); the library itself is only loaded by nvmlInit.
    import pynvml as _pynvml
except Exception:  # pragma: no cover - depends on the host
    _pynvml = None

try:
    import psutil as _psutil
except Exception:  # pragma: no cover - depends on the host
    _psutil = None  # type: ignore[assignment]

AGENT_VERSION = "0.1.0"
PROTOCOL_VERSION = 1

MIB = 1024 * 1024
NVML_DEADLINE_S = 2.0
"""Seconds every device's NVML calls of one sample may take before that device is reported as timed out."""
NVML_INIT_DEADLINE_S = 5.0
NVML_INIT_RETRY_S = 5.0
"""A failed nvmlInit (no driver yet) is retried at most this often."""
GHOST_SLACK_MIB = 64
"""Used memory may exceed the sum of listed processes by this much before /dev/nvidia* holders are scanned."""
CMDLINE_CACHE_S = 10.0
"""Cached cmdlines are re-read after this long: servers rename themselves (setproctitle) after start."""
# Every Nth process sample (and every forced one) reads the stat of every pid on the host; the ones between
# read only the GPU trees (see Agent._sample_processes for what they may miss, and for how long).
FULL_SWEEP_EVERY = 3
TELEMETRY_INTERVAL_S = 1.0
"""Utilisation, temperature and power are read at most this often (and with every process list); memory,
what a clean-slate check watches at up to 10 Hz, on every sample."""
DRAIN_DROP_MIB = 8
"""A GPU whose used memory fell by more than this since the last sample is draining."""
DRAIN_WINDOW_S = 5.0
"""After the last drop, how long process lists stay on the draining cadence."""
DRAIN_PROCESS_INTERVAL_S = 0.5
"""Seconds between process lists while a GPU drains (unless the configured interval is already shorter)."""
# What one process may cost on the wire. Host content is hostile (an unprivileged user can give processes
# megabytes of argv, and control bytes take six bytes each once JSON-escaped), so every size below is in
# bytes of the JSON line, escapes included, and together they keep a full snapshot line a few MiB at most,
# far below the client's limit on one line (16 MiB, gputui.transports.ssh.LINE_CAP_BYTES).
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
PROCESS_TEXT_BYTES = 8 * MIB
"""Most bytes of the command line the ``process`` command returns (the whole text of any ordinary
process; still half of the client's line limit)."""
KILL_CONFIRM_S = 2.0
"""After an escalated KILL, how long to wait for the process to disappear before reporting it."""
KILL_KEEP_S = 60.0
"""A finished kill operation's outcomes stay available to ``kill_wait`` this long."""
KILL_POLL_S = 0.05
"""How often a kill operation looks whether what it signalled is gone."""
ESCALATE_MAX_S = 3600.0
"""The longest escalation delay a kill may ask for."""
SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "KILL": signal.SIGKILL}
SMI_QUERY_GPU = (
    "index,name,uuid,pci.bus_id,memory.used,memory.total,"
    "utilization.gpu,temperature.gpu,power.draw,power.limit"
)
SMI_QUERY_APPS = "gpu_uuid,pid,used_memory"
SMI_DEADLINE_S = 5.0

# ----------------------------------------------------------------------------------------------------
# Kill vocabulary: the one source of the kill protocol's command, stage and result names. The client
# (gputui.core.actions), the simulator (gputui.transports.sim), the CLI and the UI import these; nothing
# else spells them.

KILL_COMMAND = "kill"
"""``{"cmd": "kill", "targets": [{"pid", "start_ticks"}], "members": [...], "boot_id", "signal", "tree",
"escalate_s", "wait_s", "detach"}``: checks and signals at once; the wait, the escalation and the
confirmation then run in the collector whether or not the client stays. ``members``: the trees' processes as
the client listed them (signalled too, should their root be gone by now). ``detach`` answers right after the
signals, else at the end."""
KILL_WAIT_COMMAND = "kill_wait"
"""``{"cmd": "kill_wait", "op": N, "since": I, "timeout_s": S}``: operation N's outcomes from index I on, once
it is done or after S seconds, whichever comes first."""
KILL_ABANDON_COMMAND = "kill_abandon"
"""``{"cmd": "kill_abandon", "op": N, "since": I}``: cancel N's escalation if it is not under way yet; every
process it leaves is reported as abandoned."""
KILL_COMMANDS = (KILL_COMMAND, KILL_WAIT_COMMAND, KILL_ABANDON_COMMAND)
"""The commands that may take seconds: the remote loop runs each on a thread of its own."""

STAGE_INTENT = "intent"
"""Audit log only: what the client asked for, written before the command is sent."""
STAGE_CHECK = "check"
"""Identity and safety checks: nothing was sent."""
STAGE_SIGNAL = "signal"
"""The requested signal (TERM, INT or KILL)."""
STAGE_WAIT = "wait"
"""Watching what was signalled go, for the escalation delay (or the wait of a kill without escalation)."""
STAGE_ESCALATE = "escalate"
"""KILL to what outlived the escalation delay."""
STAGE_CONFIRM = "confirm"
"""After the escalated KILL: gone, or not."""
STAGE_ABANDON = "abandon"
"""The client gave up on an escalation before it was under way."""
STAGE_REQUEST = "request"
"""Audit log only: a command whose reply never came."""
KILL_STAGES = (
    STAGE_INTENT,
    STAGE_CHECK,
    STAGE_SIGNAL,
    STAGE_WAIT,
    STAGE_ESCALATE,
    STAGE_CONFIRM,
    STAGE_ABANDON,
    STAGE_REQUEST,
)
SIGNALLING_STAGES = frozenset({STAGE_SIGNAL, STAGE_ESCALATE})
"""Stages whose outcome says what a signal did; in the others ``signal`` is null or only context."""

RESULT_REQUESTED = "requested"
"""Audit log only (stage intent): asked for, not sent yet."""
RESULT_SENT = "sent"
"""Delivered; whether the process went is told by a later stage."""
RESULT_EXITED = "exited"
"""Gone after the requested signal."""
RESULT_KILLED = "killed"
"""Gone after the escalated KILL."""
RESULT_REAPED = "reaped"
"""A zombie of the job, reaped once its parent (signalled in the same operation) was gone."""
RESULT_GONE = "gone"
"""It had already exited before its signal."""
RESULT_REFUSED = "refused"
RESULT_CHANGED = "changed"
"""The pid now names another process (reused, or the host rebooted): not signalled."""
RESULT_DENIED = "denied"
RESULT_UNINTERRUPTIBLE = "uninterruptible"
"""Still there in uninterruptible sleep (D): it may not die until its I/O or driver call returns."""
RESULT_STILL_ALIVE = "still_alive"
RESULT_ABANDONED = "abandoned"
"""Still alive when the client gave up on its escalation: the KILL was not sent."""
RESULT_ERROR = "error"
RESULT_UNKNOWN = "unknown"
"""Audit log only (stage request): no reply came, so a signal may or may not have been sent."""
KILL_RESULTS = (
    RESULT_REQUESTED,
    RESULT_SENT,
    RESULT_EXITED,
    RESULT_KILLED,
    RESULT_REAPED,
    RESULT_GONE,
    RESULT_REFUSED,
    RESULT_CHANGED,
    RESULT_DENIED,
    RESULT_UNINTERRUPTIBLE,
    RESULT_STILL_ALIVE,
    RESULT_ABANDONED,
    RESULT_ERROR,
    RESULT_UNKNOWN,
)
RESULTS_GONE = frozenset({RESULT_EXITED, RESULT_KILLED, RESULT_REAPED, RESULT_GONE})
"""Final results that mean the targeted process is no more."""

try:
    CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):  # pragma: no cover - non-Linux
    CLOCK_TICKS_PER_S = 100


# ----------------------------------------------------------------------------------------------------
# Text safety: the one policy of the whole project (the client's gputui.core.textsafe uses these functions)
#
# Every string that came from a machine is hostile. Shown raw, C0/C1 controls move the cursor, retitle or
# clear the terminal (``\x1b]0;t\x07``, ``\x1b[2J``, ``\x9b``), bidi controls reverse what follows
# (U+202E) and zero-width characters hide text or make two different names look the same. The policy is a
# fixed list of code points, not ``unicodedata`` categories, so that a collector on Python 3.8 and a client
# on 3.13 agree on every character.

TEXT_ELLIPSIS = "\u2026"
_TEXT_SHORT_ESCAPES = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
TEXT_INVISIBLE = frozenset(
    [0x00AD, 0x061C, 0x180E, 0xFEFF, 0xE0001]
    + list(range(0x200B, 0x2010))  # zero-width space/non-joiner/joiner, direction marks
    + list(range(0x2028, 0x202F))  # line/paragraph separators, bidi embeddings and overrides
    + list(range(0x2060, 0x2065))  # word joiner, invisible operators
    + list(range(0x2066, 0x2070))  # bidi isolates, deprecated format characters
    + list(range(0xFFF9, 0xFFFC))  # interlinear annotation
    + list(range(0x1BCA0, 0x1BCA4))  # shorthand format controls
    + list(range(0x1D173, 0x1D17B))  # musical symbol formatting
    + list(range(0xE0020, 0xE0080))  # tag characters (invisible text)
)
"""Code points that are invisible, reorder the text around them, or break the line, beyond C0/C1/DEL."""


def text_escape(code: int) -> Optional[str]:
    """The visible form of one code point, or None when it is shown as itself.

    C0 controls, DEL and C1 controls become ``\\xNN`` (tab, newline and carriage return ``\\t``, ``\\n``,
    ``\\r``); the code points of ``TEXT_INVISIBLE`` become ``\\uNNNN`` / ``\\UNNNNNNNN``; a lone surrogate
    of an undecodable byte (surrogateescape, U+DC80..U+DCFF) becomes that byte's ``\\xNN``, any other lone
    surrogate ``\\uNNNN``. Backslashes are left alone: the escapes are for reading, not for decoding.
    """
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return _TEXT_SHORT_ESCAPES.get(code) or "\\x%02x" % code
    if code in TEXT_INVISIBLE:
        return "\\u%04x" % code if code <= 0xFFFF else "\\U%08x" % code
    if 0xDC80 <= code <= 0xDCFF:
        return "\\x%02x" % (code - 0xDC00)
    if 0xD800 <= code <= 0xDFFF:
        return "\\u%04x" % code
    return None


class _TextTable(dict):
    """A ``str.translate`` table that works out (and keeps) each code point's visible form on first sight."""

    def __missing__(self, code: int) -> str:
        escaped = text_escape(code)
        value = chr(code) if escaped is None else escaped
        self[code] = value
        return value


_TEXT_TABLE = _TextTable()


def visible_text(text: Any, max_chars: Optional[int] = None) -> str:
    """``text`` with every terminal-active or invisible character replaced by a visible escape.

    Args:
        text: The untrusted value; bytes are decoded as UTF-8 with invalid bytes as ``\\xNN``, anything
            else that is not a str goes through ``str()``.
        max_chars: Longest result in characters; a longer one is cut at a character or escape boundary and
            ends with an ellipsis (an escape is never cut in half). None: no limit; below 1: "".

    Returns:
        Text that is safe to write to a terminal as plain text (and always encodable as UTF-8).
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "backslashreplace")
    elif not isinstance(text, str):
        text = str(text)
    if max_chars is None:
        return text.translate(_TEXT_TABLE)
    if max_chars <= 0:
        return ""
    # Translate only what can be shown: a 2 MB argv shown in 40 columns costs 40 characters of work.
    head = text[: max_chars + 1].translate(_TEXT_TABLE)
    if len(head) <= max_chars and len(text) <= max_chars:
        return head
    pieces = []  # type: List[str]
    used = 0
    budget = max_chars - 1  # room for the ellipsis
    for char in text:
        piece = _TEXT_TABLE[ord(char)]
        if used + len(piece) > budget:
            break
        pieces.append(piece)
        used += len(piece)
    return "".join(pieces) + TEXT_ELLIPSIS


# ----------------------------------------------------------------------------------------------------
# /proc


def _text(data: bytes) -> str:
    """Bytes from the kernel as text; undecodable bytes stay visible as escapes (JSON-safe, no surrogates)."""
    return data.decode("utf-8", "backslashreplace")


def _clean(value: Optional[str]) -> Optional[str]:
    """A str that may carry surrogate escapes (psutil) as JSON-safe text."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class ProcStat(object):
    """The fields of /proc/<pid>/stat the collector needs."""

    __slots__ = ("pid", "name", "state", "ppid", "pgrp", "session", "start_ticks", "rss_pages")

    def __init__(self, pid, name, state, ppid, pgrp, session, start_ticks, rss_pages):
        # type: (int, str, str, int, int, int, int, int) -> None
        self.pid = pid
        self.name = name
        self.state = state
        self.ppid = ppid
        self.pgrp = pgrp
        self.session = session
        self.start_ticks = start_ticks
        self.rss_pages = rss_pages


# One str per state letter, so a scan of the whole host decodes nothing but the names.
_STATE_TEXT = {bytes((code,)): chr(code) for code in range(33, 127)}
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_STAT_READ_BYTES = 4096


def parse_stat(pid: int, data: bytes) -> Optional[ProcStat]:
    """Parse the contents of /proc/<pid>/stat.

    The command name (field 2) is in parentheses and may itself contain ``) `` or spaces, so the fields are
    split after the LAST ``)``. Works on bytes: only the name is decoded (the numbers are ASCII, and ``(``
    and ``)`` never occur inside a multi-byte UTF-8 sequence, so the split is the same as on the text).

    Returns:
        The parsed fields, or None when the text is malformed.
    """
    open_at = data.find(b"(")
    close_at = data.rfind(b")")
    if open_at < 0 or close_at < open_at:
        return None
    # Fields 3..24 are all that is needed: split no further than that.
    rest = data[close_at + 1 :].split(None, 22)
    if len(rest) < 22:
        return None
    try:
        return ProcStat(
            pid,
            data[open_at + 1 : close_at].decode("utf-8", "backslashreplace"),
            _STATE_TEXT.get(rest[0]) or _text(rest[0]),
            int(rest[1]),
            int(rest[2]),
            int(rest[3]),
            int(rest[19]),  # field 22 (rest[0] is field 3): start time in clock ticks
            int(rest[21]),  # field 24: rss in pages
        )
    except ValueError:
        return None


def _read_small(path: str) -> Optional[bytes]:
    """The whole of a small /proc file with one open/read/close (no file object), or None."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        data = os.read(fd, _STAT_READ_BYTES)
        if len(data) == _STAT_READ_BYTES:  # never for a stat line; be exact anyway
            chunks = [data]
            while True:
                more = os.read(fd, _STAT_READ_BYTES)
                if not more:
                    break
                chunks.append(more)
            data = b"".join(chunks)
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def read_stat(pid: int) -> Optional[ProcStat]:
    """/proc/<pid>/stat parsed, or None when the process does not exist (or cannot be read)."""
    data = _read_small("/proc/%d/stat" % pid)
    return None if data is None else parse_stat(pid, data)


def scan_proc() -> Dict[int, ProcStat]:
    """One pass over /proc/[0-9]*/stat: every process on the host (threads are not listed).

    This is most of a full sample's cost (the kernel formats ~50 fields per pid), so the loop stays flat:
    raw fds and bytes, no file objects, no text decoding but the name.
    """
    table = {}  # type: Dict[int, ProcStat]
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        data = _read_small("/proc/" + name + "/stat")
        if data is None:
            continue
        stat = parse_stat(pid, data)
        if stat is not None:
            table[pid] = stat
    return table


def _fd_budget() -> int:
    """How many /proc stat fds a ``StatFds`` may keep: half the soft fd limit, at most 4096.

    The agent's other fds (NVML's device nodes, at most ``HEALTH_MAX_URLS`` probe sockets, its pipes) are
    a few dozen, so half of a common soft limit of 1024 still leaves hundreds spare.
    """
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, ValueError, OSError):
        return 0
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(0, min(4096, soft // 2))


def schedstat_gate_works() -> bool:
    """Whether /proc/<pid>/schedstat tells when a process last ran (CONFIG_SCHED_INFO, switched on).

    Without it the file is missing or reads ``0 0 0`` even for this running process.
    """
    data = _read_small("/proc/self/schedstat")
    if not data:
        return False
    fields = data.split()
    return len(fields) >= 3 and fields[0] != b"0"


class StatFds(object):
    """A full /proc sweep that reads a process's stat line only when the process may have changed.

    ``/proc/<pid>/stat`` is the costly file: the kernel formats ~50 fields per read (about 4 µs each).
    ``/proc/<pid>/schedstat`` holds three numbers (time run, time waited, times scheduled in) and costs a
    third of that. It is kept open per pid and re-read with ``pread``: a process whose schedstat is byte
    for byte the last one has not been on a CPU since, and a process that has not run cannot have become
    a zombie or entered D state (a task does both itself), changed its name, group or session. Such a
    process keeps its last parsed stat. What can change without the process running is read anyway:
    - a process last seen as Z or D (a zombie is reaped, a D-state sleeper woken, from outside);
    - the parent pid, when the parent exits and the child is reparented: the children of every process
      that vanished or turned zombie since the last sweep are read again;
    - rss (reclaim): a caller that shows rss re-reads the processes it lists (``refresh``).
    The fd is opened the second time a sweep sees the process (the first sweep reads stat lines only).
    An fd stays bound to the process it was opened for: once that process is reaped the read fails
    (ESRCH), even if its pid was reused meanwhile, and the pid is treated as new. Beyond ``max_fds`` open
    files, and where schedstat says nothing (``schedstat_gate_works``), every stat line is read.
    Not thread-safe: one owner, under its own lock (the agent's sampling).
    """

    def __init__(self, max_fds: Optional[int] = None, gate: Optional[bool] = None) -> None:
        self.max_fds = _fd_budget() if max_fds is None else max(0, int(max_fds))
        self.gate = schedstat_gate_works() if gate is None else bool(gate)
        self._fds = {}  # type: Dict[str, int]  # schedstat fds
        self._gates = {}  # type: Dict[str, bytes]  # the schedstat line the cached stat was read after
        self._parsed = {}  # type: Dict[str, ProcStat]
        self.stat_reads = 0  # stat lines read by the last scan (the rest came from the cache)
        self.from_cache = set()  # type: Set[int]  # pids the last scan did not read a stat line for

    @property
    def open_count(self) -> int:
        return len(self._fds)

    def _forget(self, name: str) -> Optional[ProcStat]:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        self._gates.pop(name, None)
        return self._parsed.pop(name, None)

    def _read(self, name: str, gate: Optional[bytes], table: Dict[int, ProcStat]) -> Optional[ProcStat]:
        data = _read_small("/proc/" + name + "/stat")
        stat = None if data is None else parse_stat(int(name), data)
        self.stat_reads += 1
        if stat is None:
            self._forget(name)
            table.pop(int(name), None)
            return None
        self._parsed[name] = stat
        if gate is None:
            self._gates.pop(name, None)
        else:
            self._gates[name] = gate
        table[stat.pid] = stat
        self.from_cache.discard(stat.pid)
        return stat

    def scan(self) -> Dict[int, ProcStat]:
        """Every process on the host, as ``scan_proc`` returns it."""
        table = {}  # type: Dict[int, ProcStat]
        self.stat_reads = 0
        self.from_cache = set()
        try:
            names = os.listdir("/proc")
        except OSError:
            return table
        fds, gates, parsed = self._fds, self._gates, self._parsed
        listed = set(names)
        gone_parents = set()  # type: Set[int]  # whose children the kernel may have reparented
        cached = self.from_cache
        pread = os.pread
        for name in names:
            # The common case first and flat: an idle process, its fd kept, its schedstat unchanged.
            fd = fds.get(name)
            gate = None  # type: Optional[bytes]
            if fd is not None:
                try:
                    gate = pread(fd, 256, 0)
                except OSError:
                    gate = None
                if gate and gate == gates.get(name):
                    last = parsed[name]
                    if last.state not in "ZD":
                        table[last.pid] = last
                        cached.add(last.pid)
                        continue
                elif not gate:  # the process it was opened for is gone; the pid may be a new one's now
                    old = self._forget(name)
                    if old is not None:
                        gone_parents.add(old.pid)
                    fd, gate = None, None
            # An fd is kept for a process the second time a sweep sees it: the first sweep (an agent's start,
            # which the first frame waits for) opens one file per process, and short-lived ones none.
            if fd is None and self.gate and len(fds) < self.max_fds and name in parsed:
                try:
                    fd = os.open("/proc/" + name + "/schedstat", _OPEN_FLAGS)
                except OSError:
                    fd = None
                if fd is not None:
                    try:
                        gate = pread(fd, 256, 0)
                    except OSError:
                        gate = None
                    if gate:
                        fds[name] = fd
                    else:
                        os.close(fd)
                        gate = None
            if fd is None and not name.isdigit():
                continue
            stat = self._read(name, gate, table)
            if stat is not None and stat.state in "ZX":
                gone_parents.add(stat.pid)
        for name in [n for n in parsed if n not in listed]:
            old = self._forget(name)
            if old is not None:
                gone_parents.add(old.pid)
        if gone_parents:
            for pid in [p for p in self.from_cache if table[p].ppid in gone_parents]:
                self._read(str(pid), gates.get(str(pid)), table)
        return table

    def refresh(self, pids: Iterable[int], table: Dict[int, ProcStat]) -> None:
        """Read the stat line of each of ``pids`` that the last scan took from its cache, into ``table``."""
        for pid in [p for p in pids if p in self.from_cache]:
            self._read(str(pid), self._gates.get(str(pid)), table)

    def close(self) -> None:
        self._parsed = {}
        self._gates = {}
        self.from_cache = set()
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass


def read_cmdline(pid: int) -> Optional[List[str]]:
    """The argv list of a process; [] for kernel threads and zombies, None when it cannot be read."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if not data:
        return []
    if data.endswith(b"\0"):
        data = data[:-1]
    return [_text(part) for part in data.split(b"\0")]


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


def wire_cmdline(argv: List[str], max_bytes: int) -> Tuple[List[str], bool, int]:
    """``argv`` cut so that its JSON form (``["a","b"]``, UTF-8) takes at most ``max_bytes``.

    Counts what the line will really carry: a control byte costs six bytes (``\\u0001``), an invalid byte
    (kept as ``\\xNN`` text) five, a CJK character three. Only as many characters as fit are looked at.

    Returns:
        (the argv to send, whether anything was cut, the bytes it takes on the wire).
    """
    # Every character costs at most 6 bytes and every argument 3 more (quotes, comma): most argv fit at once.
    if 6 * sum(len(arg) for arg in argv) + 3 * len(argv) + 2 <= max_bytes:
        wire = json.dumps(argv, ensure_ascii=False, separators=(",", ":"))
        return argv, False, len(wire.encode("utf-8", "backslashreplace"))
    kept = []  # type: List[str]
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


def wire_text(value: Optional[str], max_chars: int = WIRE_TEXT_CHARS) -> Optional[str]:
    """A short host string (user name, error line) cut to ``max_chars`` characters, marked with "…"."""
    if value is None or len(value) <= max_chars:
        return value
    return value[: max_chars - 1] + TEXT_ELLIPSIS


class _WireBudget(object):
    """The command-line bytes one snapshot line (or kill reply) may still spend.

    Each command line comes already cut to ``WIRE_CMDLINE_BYTES``; once ``WIRE_CMDLINE_BUDGET_BYTES`` are
    spent, the rest are cut to ``WIRE_CMDLINE_TIGHT_BYTES``.
    """

    def __init__(self, budget_bytes: int = WIRE_CMDLINE_BUDGET_BYTES) -> None:
        self.left = budget_bytes

    def take(self, argv: List[str], truncated: bool, wire_bytes: int) -> Tuple[List[str], bool]:
        if self.left <= 0 and wire_bytes > WIRE_CMDLINE_TIGHT_BYTES:
            argv, cut, wire_bytes = wire_cmdline(argv, WIRE_CMDLINE_TIGHT_BYTES)
            truncated = truncated or cut
        self.left -= wire_bytes
        return argv, truncated


def read_real_uid(pid: int) -> Optional[int]:
    """The real uid of a process (the ``Uid:`` line of /proc/<pid>/status), as psutil reports it."""
    data = _read_small("/proc/%d/status" % pid)
    at = -1 if data is None else data.find(b"\nUid:")
    if data is None or at < 0:
        return None
    try:
        return int(data[at + 5 : data.find(b"\n", at + 5)].split()[0])
    except (ValueError, IndexError):
        return None


def read_boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def read_boot_time() -> Optional[float]:
    """Epoch seconds of the boot (``btime`` in /proc/stat)."""
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


INIT_PID_NAMESPACE_INODE = 0xEFFFFFFC
"""The inode of the initial PID namespace (PROC_PID_INIT_INO in the kernel)."""


def in_child_pid_namespace() -> bool:
    """Whether this process lives in a PID namespace other than the host's (a container without host pids).

    There the driver's pids may belong to other namespaces, and a local process with the same number may be
    an unrelated one.
    """
    try:
        return os.stat("/proc/self/ns/pid").st_ino != INIT_PID_NAMESPACE_INODE
    except OSError:
        return False


def has_nvidia_device_open(pid: int) -> bool:
    """Whether ``pid`` has a /dev/nvidia* node open (False when its fds cannot be read)."""
    fd_dir = "/proc/%d/fd" % pid
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd_dir + "/" + fd).startswith("/dev/nvidia"):
                return True
        except OSError:
            continue
    return False


def ancestors_of(pid: int, table: Optional[Dict[int, ProcStat]] = None) -> List[int]:
    """The parent chain of ``pid`` up to pid 1 (excluding ``pid`` itself), from ``table`` or live /proc."""
    chain = []  # type: List[int]
    seen = {pid}
    current = pid
    while True:
        stat = table.get(current) if table is not None else read_stat(current)
        if stat is None or stat.ppid <= 0 or stat.ppid in seen:
            return chain
        chain.append(stat.ppid)
        seen.add(stat.ppid)
        current = stat.ppid


def children_map(table: Dict[int, ProcStat]) -> Dict[int, List[int]]:
    children = {}  # type: Dict[int, List[int]]
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    return children


# Processes that start sessions or run other people's work rather than belong to the job below them: a GPU
# process tree stops below them, so killing "the tree" never takes the user's sshd, tmux server, container
# shim, a cron daemon or the display stack with it. The client's analysis uses this same rule
# (gputui.core.analysis.is_session_boundary). Names are what /proc/<pid>/stat says (at most 15 characters).
SESSION_BOUNDARY_NAMES = frozenset(
    {
        # inits and service managers
        "init",
        "systemd",
        "(sd-pam)",
        "runsv",
        "runsvdir",
        "s6-supervise",
        "supervisord",
        "launchd",
        # logins and terminal multiplexers
        "login",
        "su",
        "screen",
        "SCREEN",
        "mosh-server",
        "dropbear",
        # containers
        "conmon",
        "runc",
        "crun",
        "tini",
        "docker-init",
        "dumb-init",
        "catatonit",
        "dockerd",
        "containerd",
        "kubelet",
        # batch systems and job schedulers
        "slurmstepd",
        "slurmd",
        "sge_shepherd",
        "pbs_mom",
        "cron",
        "crond",
        "anacron",
        "atd",
        "incrond",
        "fcron",
        # the display stack: display managers, X servers, compositors, terminal emulators
        "sddm",
        "sddm-helper",
        "lightdm",
        "xdm",
        "lxdm",
        "Xorg",
        "Xwayland",
        "X",
        "gnome-shell",
        "mutter",
        "kwin_x11",
        "kwin_wayland",
        "plasmashell",
        "xterm",
        "konsole",
        "alacritty",
        "kitty",
        "tilix",
        "dbus-daemon",
    }
)
SESSION_BOUNDARY_PREFIXES = (
    "sshd",
    "tmux",
    "containerd-shim",
    "systemd-",
    "gdm",
    "gnome-session",
    "gnome-terminal",
    "xfce4-session",
    "xfce4-terminal",
    "lightdm-",
)
SESSION_SHELLS = frozenset(
    {"bash", "zsh", "sh", "dash", "fish", "ksh", "mksh", "tcsh", "csh", "ash", "busybox"}
)


def is_shell_name(name: Optional[str]) -> bool:
    """Whether a process name is a shell's (a login shell's ``-bash`` included)."""
    name = name or ""
    return name in SESSION_SHELLS or name.lstrip("-") in SESSION_SHELLS


def is_session_boundary(pid: int, name: Optional[str], cmdline: Optional[List[str]]) -> bool:
    """Whether a process, by its pid and name, started a session or runs others' work rather than one job.

    pid 0/1, sshd, tmux, screen, service managers, container shims and inits, batch and cron daemons, the
    display stack, and interactive or login shells. A shell running a script (``bash run.sh``, ``sh -c ...``)
    is part of the tree: it is the launcher. ``cmdline`` matters only for shells; None (unreadable) counts
    as empty.
    """
    if pid in (0, 1):
        return True
    name = name or ""
    if name in SESSION_BOUNDARY_NAMES or name.startswith(SESSION_BOUNDARY_PREFIXES):
        return True
    if is_shell_name(name):
        if not cmdline:
            return True  # cannot tell what it runs: never treat a possibly interactive shell as a launcher
        if cmdline[0].startswith("-"):
            return True  # login shell
        return all(arg.startswith("-") and arg != "-c" for arg in cmdline[1:])
    return False


def parse_cgroup(data: bytes) -> Optional[str]:
    """The cgroup that says which job a process belongs to, from the text of /proc/<pid>/cgroup.

    The unified (v2) hierarchy's path (``0::/system.slice/cron.service``) when it is not the root, else
    systemd's own v1 hierarchy (``1:name=systemd:/user.slice/...``), else the unified root; None when neither
    is there (a v1 host without systemd: the job rule then goes by sessions and names only). Service managers,
    container runtimes and batch systems put each job in a cgroup of its own in these hierarchies.
    """
    unified = None  # type: Optional[str]
    named = None  # type: Optional[str]
    for line in _text(data).splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            unified = parts[2]
        elif "name=systemd" in parts[1].split(","):
            named = parts[2]
    if unified is not None and unified != "/":
        return unified
    return named if named is not None else unified


def read_cgroup(pid: int) -> Optional[str]:
    """``parse_cgroup`` of a live process (None when it is gone or unreadable)."""
    data = _read_small("/proc/%d/cgroup" % pid)
    return None if data is None else parse_cgroup(data)


class JobFacts(object):
    """What the job rule needs to know about one process; None where it could not be read."""

    __slots__ = ("pid", "ppid", "name", "cmdline", "session", "pgrp", "cgroup")

    def __init__(self, pid, ppid, name, cmdline, session, pgrp, cgroup):
        # type: (int, Optional[int], Optional[str], Optional[List[str]], Optional[int], Optional[int], Optional[str]) -> None
        self.pid = pid
        self.ppid = ppid
        self.name = name
        self.cmdline = cmdline
        self.session = session
        self.pgrp = pgrp
        self.cgroup = cgroup


def is_outside_job(parent: JobFacts, holder: JobFacts) -> bool:
    """Whether ``parent`` (an ancestor of ``holder``) is not part of the holder's job.

    It is not when it differs from the holder in session or cgroup, when it is a session boundary by pid or
    name (``is_session_boundary``), a kernel thread, or a process that init (pid 1) adopted or started and
    that leads neither the holder's session nor its process group: a daemon the job merely runs under, not
    the launcher that started it (a daemonised or ``nohup``'ed launcher leads its workers' session or group).
    Facts that could not be read decide nothing.
    """
    if parent.pid == 2 or parent.ppid == 2:
        return True
    if is_session_boundary(parent.pid, parent.name, parent.cmdline):
        return True
    if parent.session is not None and holder.session is not None and parent.session != holder.session:
        return True
    if parent.cgroup is not None and holder.cgroup is not None and parent.cgroup != holder.cgroup:
        return True
    if parent.ppid in (0, 1) and (holder.session is not None or holder.pgrp is not None):
        return parent.pid not in (holder.session, holder.pgrp)
    return False


def job_root(pid: int, facts_of: Callable[[int], Optional[JobFacts]]) -> int:
    """The root of ``pid``'s GPU process tree: its highest ancestor that is still part of its job.

    The holder itself when its parent is outside the job (``is_outside_job``), or unknown. ``facts_of``
    returns the facts of a pid, None when it is not known.
    """
    holder = facts_of(pid)
    if holder is None:
        return pid
    current = holder
    seen = {pid}
    while True:
        parent = facts_of(current.ppid) if current.ppid is not None else None
        if parent is None or parent.pid in seen or is_outside_job(parent, holder):
            return current.pid
        seen.add(parent.pid)
        current = parent


def table_facts(
    table: Dict[int, ProcStat], cgroup_of: Optional[Callable[[ProcStat], Optional[str]]] = None
) -> Callable[[int], Optional[JobFacts]]:
    """``facts_of`` for ``job_root`` over a stat table; shells' cmdlines and cgroups are read once each."""
    memo = {}  # type: Dict[int, Optional[JobFacts]]
    read_group = cgroup_of or (lambda stat: read_cgroup(stat.pid))

    def facts_of(pid: int) -> Optional[JobFacts]:
        if pid not in memo:
            stat = table.get(pid)
            memo[pid] = None
            if stat is not None:
                cmdline = read_cmdline(pid) if is_shell_name(stat.name) else None
                memo[pid] = JobFacts(
                    pid, stat.ppid, stat.name, cmdline, stat.session, stat.pgrp, read_group(stat)
                )
        return memo[pid]

    return facts_of


def tree_root(
    pid: int, table: Dict[int, ProcStat], facts_of: Optional[Callable[[int], Optional[JobFacts]]] = None
) -> int:
    """The root of ``pid``'s GPU process tree in ``table`` (``job_root``)."""
    return job_root(pid, facts_of or table_facts(table))


def children_file_supported() -> bool:
    """Whether the kernel has /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)."""
    pid = os.getpid()
    return os.path.exists("/proc/%d/task/%d/children" % (pid, pid))


def read_children(pid: int) -> List[int]:
    """The children of ``pid`` from /proc/<pid>/task/*/children ([] when it is gone or unreadable).

    Each thread lists the children it forked, so every task is read: a child started from a worker thread
    is listed under that thread only.
    """
    task_dir = "/proc/%d/task" % pid
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return []
    children = []  # type: List[int]
    for tid in tids:
        data = _read_small(task_dir + "/" + tid + "/children")
        if data:
            children.extend(int(child) for child in data.split())
    return children


def scan_trees(
    tree_pids: Iterable[int],
    known_pids: Iterable[int] = (),
    cgroup_of: Optional[Callable[[ProcStat], Optional[str]]] = None,
) -> Dict[int, ProcStat]:
    """The part of the process table around some processes, without reading every pid on the host.

    Reads ``tree_pids`` and ``known_pids``, the parent chain of each up to pid 1, and everything below the
    tree root (``job_root``: the highest ancestor still part of the job) of each of ``tree_pids`` by
    /proc/<pid>/task/*/children. Members of a process group that are not descendants (a double-forked
    grandchild reparented away) are included only if they are among ``known_pids``. ``cgroup_of`` reads a
    process's cgroup (default: from /proc, uncached).
    """
    table = {}  # type: Dict[int, ProcStat]

    def add(pid: int) -> Optional[ProcStat]:
        if pid in table:
            return table[pid]
        stat = read_stat(pid)
        if stat is not None:
            table[pid] = stat
        return stat

    tree_pids = [pid for pid in tree_pids if add(pid) is not None]
    for pid in known_pids:
        add(pid)
    for pid in list(table):
        current = table[pid]
        while current.ppid > 0 and current.ppid not in table:
            parent = add(current.ppid)
            if parent is None:
                break
            current = parent
    facts_of = table_facts(table, cgroup_of)
    stack = list(set(tree_root(pid, table, facts_of) for pid in tree_pids) - {0, 1, 2})
    below = set(stack)
    while stack:
        for child in read_children(stack.pop()):
            if child not in below and add(child) is not None:
                below.add(child)
                stack.append(child)
    return table


def tree_members(roots: Iterable[int], table: Dict[int, ProcStat]) -> Set[int]:
    """``roots``, their descendants by ppid and the members of process groups led by any of them.

    The same expansion as a tree kill: a double-forked grandchild whose middle parent died was reparented
    away and is tied to the tree only by its process group. Never expands through pid 0, 1 or 2.
    """
    children = {}  # type: Dict[int, List[int]]
    groups = {}  # type: Dict[int, List[int]]
    for stat in table.values():
        pid = stat.pid
        children.setdefault(stat.ppid, []).append(pid)
        if stat.pgrp != pid:
            groups.setdefault(stat.pgrp, []).append(pid)
    members = set(pid for pid in roots if pid in table)
    stack = list(members)
    while stack:
        pid = stack.pop()
        for member in children.get(pid, []) + groups.get(pid, []):
            if member not in members and member not in (0, 1, 2):
                members.add(member)
                stack.append(member)
    return members


def scan_device_holders(table: Dict[int, ProcStat]) -> List[Dict[str, Any]]:
    """Processes with a /dev/nvidia* node open: one entry per (pid, device node)."""
    holders = []  # type: List[Dict[str, Any]]
    for pid in sorted(table):
        fd_dir = "/proc/%d/fd" % pid
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        devices = set()  # type: Set[str]
        for fd in fds:
            try:
                link = os.readlink(fd_dir + "/" + fd)
            except OSError:
                continue
            if link.startswith("/dev/nvidia"):
                devices.add(link)
        for device in sorted(devices):
            holders.append({"pid": pid, "name": table[pid].name, "device": device})
    return holders


class _ProcDetails(object):
    """Per-process details (user, cmdline, rss) with caches, from /proc or psutil.

    Command lines are kept and returned as they go on the wire: cut to ``WIRE_CMDLINE_BYTES``
    (``wire_cmdline``), never the megabytes a process may carry.
    """

    def __init__(self, use_psutil: bool) -> None:
        self.use_psutil = bool(use_psutil and _psutil is not None)
        self._users = {}  # type: Dict[int, Optional[str]]
        # (pid, start ticks) -> (read at, uid, cmdline as sent, whether it was cut, its bytes on the wire)
        self._cmdlines = {}  # type: Dict[Tuple[int, int], Tuple[float, int, List[str], bool, int]]
        self._cgroups = {}  # type: Dict[Tuple[int, int], Tuple[float, Optional[str]]]

    def cgroup(self, stat: ProcStat) -> Optional[str]:
        """``read_cgroup`` of a process, kept ``CMDLINE_CACHE_S`` (the job rule reads every ancestor's)."""
        key = (stat.pid, stat.start_ticks)
        now = time.monotonic()
        cached = self._cgroups.get(key)
        if cached is not None and now - cached[0] < CMDLINE_CACHE_S:
            return cached[1]
        value = read_cgroup(stat.pid)
        self._cgroups[key] = (now, value)
        return value

    def user_name(self, uid: Optional[int]) -> Optional[str]:
        if uid is None:
            return None
        if uid not in self._users:
            try:
                self._users[uid] = wire_text(_clean(pwd.getpwuid(uid).pw_name))
            except (KeyError, OverflowError):
                self._users[uid] = str(uid)
        return self._users[uid]

    def read(self, pid: int) -> Tuple[Optional[int], Optional[List[str]]]:
        """The real uid and the whole argv of a process (None for what could not be read)."""
        uid, cmdline = None, None  # type: Optional[int], Optional[List[str]]
        if self.use_psutil:
            try:
                proc = _psutil.Process(pid)
                uid = proc.uids().real
                try:
                    cmdline = [_clean(a) or "" for a in proc.cmdline()]
                except _psutil.ZombieProcess:
                    cmdline = []
            except _psutil.Error:
                pass
        else:
            uid = read_real_uid(pid)
            cmdline = read_cmdline(pid)
        return uid, cmdline

    def details(self, stat: ProcStat, now: float) -> Dict[str, Any]:
        """uid, user, cmdline (as sent), cmdline_truncated, cmdline_bytes and rss_kib of one process.

        The uid and cmdline of a process (pid + start ticks, so never another process's) are kept for
        ``CMDLINE_CACHE_S``: a process changes either only by exec or setuid, and a listed process would
        otherwise cost a status and a cmdline read (with psutil, a stat read more) on every sample.
        """
        # The rss of the stat line just read (psutil's memory_info reads the same counter from statm), and
        # user names from the cached pwd lookup (psutil's username() looks the name up on every call).
        rss_kib = stat.rss_pages * (_PAGE_SIZE // 1024)
        key = (stat.pid, stat.start_ticks)
        cached = self._cmdlines.get(key)
        if cached is None or now - cached[0] >= CMDLINE_CACHE_S:
            uid, full = self.read(stat.pid)
            cmdline, truncated, wire_bytes = wire_cmdline(full or [], WIRE_CMDLINE_BYTES)
            if uid is None or full is None:
                return self._as_dict(uid, cmdline, truncated, wire_bytes, rss_kib, self.cgroup(stat))
            cached = (now, uid, cmdline, truncated, wire_bytes)
            self._cmdlines[key] = cached
        return self._as_dict(cached[1], cached[2], cached[3], cached[4], rss_kib, self.cgroup(stat))

    def _as_dict(
        self,
        uid: Optional[int],
        cmdline: List[str],
        truncated: bool,
        wire_bytes: int,
        rss_kib: int,
        cgroup: Optional[str],
    ) -> Dict[str, Any]:
        return {
            "uid": uid,
            "user": self.user_name(uid),
            "cmdline": cmdline,
            "cmdline_truncated": truncated,
            "cmdline_bytes": wire_bytes,
            "rss_kib": rss_kib,
            "cgroup": cgroup,
        }

    def forget_except(self, live: Set[Tuple[int, int]]) -> None:
        for key in [k for k in self._cmdlines if k not in live]:
            del self._cmdlines[key]
        for key in [k for k in self._cgroups if k not in live]:
            del self._cgroups[key]


try:
    _PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - non-Linux
    _PAGE_SIZE = 4096


# ----------------------------------------------------------------------------------------------------
# Bounded calls


class CallTimeout(Exception):
    """A call did not finish within its deadline (it may still be running on its worker)."""


class _Done(object):
    """A one-shot "finished" flag a waiter can block on with a timeout: one raw lock, held until set.

    Cheaper than ``threading.Event`` (a Condition and a lock per waiter) on a path taken every sample.
    """

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        self._set = True
        self._lock.release()

    def wait(self, timeout_s: float) -> bool:
        if self._set:
            return True
        if self._lock.acquire(True, max(0.0, timeout_s)):
            self._lock.release()  # later waits return at once too
            return True
        return self._set


class _Worker(object):
    """One daemon thread that runs calls for one device, so a hung call blocks only that device.

    One job at a time (``submit`` refuses while a call runs), handed over through one raw lock.
    """

    def __init__(self, name: str) -> None:
        self._wake = threading.Lock()
        self._wake.acquire()
        self._job = None  # type: Optional[Tuple[Callable[[], Any], list, _Done]]
        self._busy = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def stuck(self) -> bool:
        """Whether an earlier call is still running (it timed out and has not returned yet)."""
        return self._busy

    def _run(self) -> None:
        while True:
            self._wake.acquire()
            job, self._job = self._job, None
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: B036 - handed to the caller
                box.append((False, exc))
            finally:
                self._busy = False
                done.set()

    def submit(self, fn: Callable[[], Any]) -> Tuple[_Done, list]:
        """Start ``fn``; returns (done flag, result box).

        Raises:
            CallTimeout: the worker is still stuck in an earlier call.
        """
        if self._busy:
            raise CallTimeout()
        box = []  # type: list
        done = _Done()
        self._busy = True
        self._job = (fn, box, done)
        self._wake.release()
        return done, box

    @staticmethod
    def result(done: _Done, box: list, deadline: float) -> Any:
        """Wait until ``deadline`` (monotonic) for a submitted call; re-raises its exception."""
        if not done.wait(deadline - time.monotonic()):
            raise CallTimeout()
        ok, value = box[0]
        if ok:
            return value
        raise value

    def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        done, box = self.submit(fn)
        return self.result(done, box, time.monotonic() + timeout_s)

    def stop(self) -> None:
        """Let the thread end: at once when idle, after its call when stuck in one."""
        self._job = None
        try:
            self._wake.release()
        except RuntimeError:  # already released: stop() twice
            pass


def nvml_error_text(exc: BaseException) -> str:
    """A readable one-line description of an NVML failure."""
    if _pynvml is not None and isinstance(exc, _pynvml.NVMLError):
        code = getattr(exc, "value", None)
        known = {
            getattr(_pynvml, "NVML_ERROR_GPU_IS_LOST", -1): "GPU is lost",
            getattr(_pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1): "NVIDIA driver not loaded",
            getattr(_pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1): "libnvidia-ml.so.1 not found",
            getattr(
                _pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", -1
            ): "NVML function not found (driver too old?)",
            getattr(_pynvml, "NVML_ERROR_NO_PERMISSION", -1): "no permission to use NVML",
            getattr(_pynvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", -1): (
                "NVML library and kernel driver versions do not match (reboot or reload the driver)"
            ),
            getattr(_pynvml, "NVML_ERROR_TIMEOUT", -1): "NVML call timed out",
        }
        if code in known:
            return known[code]
        try:
            return "NVML error: %s" % exc
        except Exception:
            return "NVML error %s" % code
    if isinstance(exc, CallTimeout):
        return "NVML call timed out"
    return "%s: %s" % (type(exc).__name__, exc)


def _as_str(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return _text(value)
    return _clean(str(value))


def _nvml_code(exc: BaseException) -> Optional[int]:
    return getattr(exc, "value", None) if _pynvml is not None and isinstance(exc, _pynvml.NVMLError) else None


def nvml_is_lost(exc: BaseException) -> bool:
    """Whether an NVML failure says the GPU itself is gone (never a reason to try another call)."""
    return _nvml_code(exc) == getattr(_pynvml, "NVML_ERROR_GPU_IS_LOST", -1)


def nvml_function_missing(exc: BaseException) -> bool:
    """Whether an NVML failure says this driver (or these bindings) lack the function that was called.

    pynvml says it three ways: ``NVMLError`` FUNCTION_NOT_FOUND from a versioned call, its own
    ``NVMLLibraryMismatchError`` (not an ``NVMLError``) from an unversioned wrapper whose newest version the
    driver lacks, and ``AttributeError`` for a wrapper an older pynvml does not have.
    """
    if isinstance(exc, AttributeError):
        return True
    mismatch = getattr(_pynvml, "NVMLLibraryMismatchError", None)
    if mismatch is not None and isinstance(exc, mismatch):
        return True
    return _nvml_code(exc) == getattr(_pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", -1)


class NvmlVersions(object):
    """One NVML query in all its versions, newest first: the one place where a versioned call falls back.

    Each version is a callable; a version this driver lacks (``nvml_function_missing``) is remembered and not
    tried again. Any other failure, but a lost GPU, falls back to the next version for this call only (a
    version may be present and still refuse a device, or a struct version). The failure of the oldest version
    is the caller's.
    """

    def __init__(self, name: str, *versions: Callable[..., Any], sticky: bool = False) -> None:
        """``sticky``: a version that failed once is not tried again either (one device's calls)."""
        self.name = name
        self.versions = versions
        self.sticky = sticky
        self.missing = set()  # type: Set[int]

    def __call__(self, *args: Any) -> Any:
        failure = None  # type: Optional[BaseException]
        for number, version in enumerate(self.versions):
            if number in self.missing:
                continue
            try:
                return version(*args)
            except Exception as exc:
                if nvml_is_lost(exc):
                    raise
                if nvml_function_missing(exc) or (self.sticky and number < len(self.versions) - 1):
                    self.missing.add(number)
                failure = exc
        if failure is None:  # every version is missing from this driver
            failure = RuntimeError("%s: no version of it in this NVML" % self.name)
        raise failure


def _nvml_raw(symbol: str) -> Any:
    """A C function of the loaded libnvidia-ml by name (raises NVMLError FUNCTION_NOT_FOUND when absent)."""
    return _pynvml._nvmlGetFunctionPointer(symbol)


def _nvml_check(ret: int) -> None:
    if ret != 0:
        raise _pynvml.NVMLError(ret)


def _nvml_count_v1() -> int:
    import ctypes

    count = ctypes.c_uint(0)
    _nvml_check(_nvml_raw("nvmlDeviceGetCount")(ctypes.byref(count)))
    return count.value


def _nvml_handle_v1(index: int) -> Any:
    import ctypes

    handle = _pynvml.c_nvmlDevice_t()
    _nvml_check(_nvml_raw("nvmlDeviceGetHandleByIndex")(ctypes.c_uint(index), ctypes.byref(handle)))
    return handle


def _nvml_pci_bus_id(symbol: str) -> Callable[[Any], Any]:
    """The bus id from ``nvmlDeviceGetPciInfo`` (v1) or ``_v2``: both structs start with its 16 chars."""

    def call(handle: Any) -> Any:
        import ctypes

        buffer = ctypes.create_string_buffer(256)  # larger than every version of nvmlPciInfo_t
        _nvml_check(_nvml_raw(symbol)(handle, buffer))
        return buffer.raw[:16].split(b"\0", 1)[0]

    return call


class _NvmlProcessInfoV1(object):
    __slots__ = ("pid", "usedGpuMemory")

    def __init__(self, pid: int, used: Optional[int]) -> None:
        self.pid = pid
        self.usedGpuMemory = used


def _nvml_processes_v1(symbol: str) -> Callable[[Any], List[Any]]:
    """The process list of a driver from before the ``_v2`` calls (``nvmlProcessInfo_v1_t``: pid, bytes)."""

    def call(handle: Any) -> List[Any]:
        import ctypes

        class Info(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

        fn = _nvml_raw(symbol)
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret == 0:
            return []
        if ret != getattr(_pynvml, "NVML_ERROR_INSUFFICIENT_SIZE", 7):
            _nvml_check(ret)
        count.value = count.value * 2 + 5  # room for processes started meanwhile
        infos = (Info * count.value)()
        _nvml_check(fn(handle, ctypes.byref(count), infos))
        unavailable = (1 << 64) - 1
        return [
            _NvmlProcessInfoV1(info.pid, None if info.usedGpuMemory == unavailable else info.usedGpuMemory)
            for info in infos[: count.value]
        ]

    return call


def _pynvml_call(attribute: str) -> Callable[..., Any]:
    """pynvml's wrapper ``attribute``, looked up at call time (AttributeError when these bindings lack it)."""
    return lambda *args: getattr(_pynvml, attribute)(*args)


def nvml_text(call: Callable[[], Any]) -> Optional[str]:
    """A string an NVML call returns, as text; invalid UTF-8 (a corrupt name) is kept visible as ``\\xNN``.

    pynvml decodes C strings strictly and raises UnicodeDecodeError, which still holds the bytes.
    """
    try:
        return _as_str(call())
    except UnicodeDecodeError as exc:
        return _text(exc.object) if isinstance(exc.object, bytes) else None


def _nvml_memory_v2(handle: Any) -> Tuple[int, int, Optional[int]]:
    """(used, total, reserved) bytes; v2 reports the driver's reservation apart from used (R510 and later)."""
    memory = _pynvml.nvmlDeviceGetMemoryInfo(handle, version=_pynvml.nvmlMemory_v2)
    return memory.used, memory.total, memory.reserved


def _nvml_memory_v1(handle: Any) -> Tuple[int, int, Optional[int]]:
    memory = _pynvml.nvmlDeviceGetMemoryInfo(handle)
    return memory.used, memory.total, None


class _NvmlBackend(object):
    """GPU figures through pynvml, every call bounded by a deadline.

    All devices are queried one after another on one batch worker thread: one thread hand-off per sample,
    which keeps a memory-only sample cheap. A device whose call overran the deadline is isolated: the
    stuck batch thread becomes that device's own worker (it reports "NVML call timed out" until the call
    returns) and a fresh batch thread serves the others, so one wedged GPU never blocks the rest.
    """

    mode = "nvml"

    def __init__(
        self, deadline_s: float = NVML_DEADLINE_S, telemetry_interval_s: float = TELEMETRY_INTERVAL_S
    ) -> None:
        self.deadline_s = deadline_s
        self.telemetry_interval_s = float(telemetry_interval_s)
        self.host_error = None  # type: Optional[str]
        self.driver_version = None  # type: Optional[str]
        self.cuda_driver_version = None  # type: Optional[str]
        self._system = _Worker("gputui-nvml-system")
        self._batch = _Worker("gputui-nvml-batch")
        self._workers = []  # type: List[Optional[_Worker]]
        self._handles = []  # type: List[Any]
        self._static = []  # type: List[Optional[Dict[str, Any]]]
        self._memory = []  # type: List[NvmlVersions]
        self._memory_jobs = []  # type: List[Callable[[], Dict[str, Any]]]
        self._base = []  # type: List[Optional[Dict[str, Any]]]
        self._initialized = False
        self._last_init_try = -1e18
        # Every versioned call, newest version first (drivers before R510 lack the _v3 process lists and v2
        # memory info; older ones the _v2 calls too).
        self._count = NvmlVersions("nvmlDeviceGetCount", _pynvml_call("nvmlDeviceGetCount"), _nvml_count_v1)
        self._handle = NvmlVersions(
            "nvmlDeviceGetHandleByIndex", _pynvml_call("nvmlDeviceGetHandleByIndex"), _nvml_handle_v1
        )
        self._pci_bus_id = NvmlVersions(
            "nvmlDeviceGetPciInfo",
            lambda handle: _pynvml_call("nvmlDeviceGetPciInfo_v3")(handle).busId,
            _nvml_pci_bus_id("nvmlDeviceGetPciInfo_v2"),
            _nvml_pci_bus_id("nvmlDeviceGetPciInfo"),
        )
        self._process_lists = [
            (
                kind,
                NvmlVersions(
                    name, _pynvml_call(name + "_v3"), _pynvml_call(name + "_v2"), _nvml_processes_v1(name)
                ),
            )
            for kind, name in (
                ("compute", "nvmlDeviceGetComputeRunningProcesses"),
                ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
            )
        ]  # type: List[Tuple[str, NvmlVersions]]

    def start(self) -> None:
        """Initialise NVML now (bounded) instead of at the first sample."""
        if not self._initialized:
            self._init()

    def _init(self) -> None:
        nv = _pynvml
        if nv is None:
            raise RuntimeError("pynvml is not importable")

        def init() -> Tuple[List[Any], Optional[str], Optional[str]]:
            nv.nvmlInit()
            count = self._count()
            handles = []  # type: List[Any]
            for index in range(count):
                try:
                    handles.append(self._handle(index))
                except Exception as exc:  # that GPU shows the error, the others still work
                    handles.append(exc)
            try:
                driver = nvml_text(nv.nvmlSystemGetDriverVersion)
            except nv.NVMLError:
                driver = None
            try:
                cuda_int = nv.nvmlSystemGetCudaDriverVersion()
                cuda = "%d.%d" % (cuda_int // 1000, (cuda_int % 1000) // 10)
            except nv.NVMLError:
                cuda = None
            return handles, driver, cuda

        self._last_init_try = time.monotonic()
        try:
            handles, driver, cuda = self._system.call(init, NVML_INIT_DEADLINE_S)
        except CallTimeout:
            self.host_error = "NVML initialisation timed out"
            return
        except Exception as exc:
            self.host_error = nvml_error_text(exc)
            return
        self.host_error = None
        self.driver_version = driver
        self.cuda_driver_version = cuda
        self._handles = handles
        # A device gets a worker of its own only once one of its calls overran (see the class docstring).
        self._workers = [None] * len(handles)
        self._static = [None] * len(handles)
        # Per GPU: v2 memory info (reserved memory apart) until it fails once, then v1 (older drivers).
        self._memory = [
            NvmlVersions("nvmlDeviceGetMemoryInfo", _nvml_memory_v2, _nvml_memory_v1, sticky=True)
            for _handle in handles
        ]
        self._memory_jobs = [self._memory_job(index) for index in range(len(handles))]
        # Per GPU: index, static facts and the latest telemetry, the part a memory-only sample reuses.
        self._base = [None] * len(handles)
        self._telemetry = [None] * len(handles)  # type: List[Optional[Dict[str, Any]]]
        self._telemetry_mono = -1e18
        self._initialized = True

    def _device_job(
        self, index: int, want_static: bool, want_processes: bool, want_telemetry: bool = True
    ) -> Callable[[], Dict[str, Any]]:
        nv = _pynvml
        if nv is None:
            raise RuntimeError("pynvml is not importable")
        handle = self._handles[index]

        def optional(fn: Callable[[], Any]) -> Any:
            """A figure this GPU (or driver) may not give: None instead of an error, except for a lost GPU."""
            try:
                return fn()
            except Exception as exc:
                if nvml_is_lost(exc):
                    raise
                if isinstance(exc, nv.NVMLError) or nvml_function_missing(exc):
                    return None
                raise

        def job() -> Dict[str, Any]:
            if isinstance(handle, BaseException):
                raise handle
            out = {}  # type: Dict[str, Any]
            if want_static:
                out["static"] = {
                    "name": optional(lambda: nvml_text(lambda: nv.nvmlDeviceGetName(handle))),
                    "uuid": optional(lambda: nvml_text(lambda: nv.nvmlDeviceGetUUID(handle))),
                    "pci_bus_id": optional(lambda: nvml_text(lambda: self._pci_bus_id(handle))),
                }
            out.update(self._read_memory(index, handle))
            if want_telemetry:
                rates = optional(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
                temperature = optional(
                    lambda: int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
                )
                power = optional(lambda: nv.nvmlDeviceGetPowerUsage(handle))
                limit = optional(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
                out["telemetry"] = {
                    "utilization_pct": None if rates is None else int(rates.gpu),
                    "memory_utilization_pct": None if rates is None else int(rates.memory),
                    "temperature_c": temperature,
                    "power_w": None if power is None else power / 1000.0,
                    # With the telemetry, not the static facts: `nvidia-smi -pl` changes it at run time.
                    "power_limit_w": None if limit is None else limit / 1000.0,
                }
            if want_processes:
                procs = []  # type: List[Dict[str, Any]]
                for kind, process_list in self._process_lists:
                    listed = optional(functools.partial(process_list, handle))  # type: Optional[List[Any]]
                    for info in listed or ():
                        used = getattr(info, "usedGpuMemory", None)
                        procs.append(
                            {
                                "pid": int(info.pid),
                                "used_mib": None if used is None else int(used) // MIB,
                                "type": kind,
                            }
                        )
                out["processes"] = procs
            return out

        return job

    def _read_memory(self, index: int, handle: Any) -> Dict[str, Any]:
        """One GPU's memory figures (runs on a worker thread; raises NVMLError)."""
        if isinstance(handle, BaseException):
            raise handle
        used, total, reserved = self._memory[index](handle)
        return {
            "memory_used_mib": int(used) // MIB,
            "memory_total_mib": int(total) // MIB,
            "memory_reserved_mib": None if reserved is None else int(reserved) // MIB,
        }

    def _memory_job(self, index: int) -> Callable[[], Dict[str, Any]]:
        """The job of a memory-only sample for one GPU, made once per initialisation."""
        handle = self._handles[index]
        return lambda: self._read_memory(index, handle)

    def poll(self, want_processes: bool) -> List[Dict[str, Any]]:
        """One sample of every GPU: a list of Gpu dicts (``processes`` only when ``want_processes``)."""
        if not self._initialized:
            if time.monotonic() - self._last_init_try >= NVML_INIT_RETRY_S:
                self._init()
            if not self._initialized:
                return []
        now_mono = time.monotonic()
        deadline = now_mono + self.deadline_s
        want_telemetry = want_processes or now_mono - self._telemetry_mono >= self.telemetry_interval_s
        if want_telemetry:
            self._telemetry_mono = now_mono
        pending = {}  # type: Dict[int, Any]
        batch_jobs = []  # type: List[Tuple[int, Callable[[], Any]]]
        for index, worker in enumerate(self._workers):
            # Name, uuid and PCI address do not change while NVML stays initialised: read once (again with
            # the process lists while the uuid is unknown).
            static = self._static[index]
            want_static = static is None or (want_processes and not static.get("uuid"))
            if want_static or want_processes or want_telemetry:
                job = self._device_job(index, want_static, want_processes, want_telemetry)
            else:
                job = self._memory_jobs[index]
            if worker is None:
                batch_jobs.append((index, job))
                continue
            try:
                pending[index] = worker.submit(job)
            except CallTimeout as exc:
                pending[index] = exc
        if batch_jobs:
            pending.update(self._run_batch(batch_jobs, deadline))
        gpus = []  # type: List[Dict[str, Any]]
        for index in range(len(self._workers)):
            submitted = pending[index]
            try:
                if isinstance(submitted, BaseException):
                    raise submitted
                if isinstance(submitted, dict):
                    out = submitted
                else:
                    out = _Worker.result(submitted[0], submitted[1], deadline)
            except Exception as exc:
                gpu = {"index": index}  # type: Dict[str, Any]
                gpu.update(self._static[index] or {})
                gpu["error"] = nvml_error_text(exc)
                if want_processes:
                    gpu["processes"] = []
                gpus.append(gpu)
                continue
            base = self._base[index]
            static_new = None
            if "static" in out or "telemetry" in out or base is None:
                static_new = out.pop("static", None)
                if static_new is not None and (self._static[index] is None or static_new.get("uuid")):
                    self._static[index] = static_new
                if "telemetry" in out:
                    self._telemetry[index] = out.pop("telemetry")
                base = {"index": index}
                base.update(self._static[index] or {})
                base.update(self._telemetry[index] or {})
                self._base[index] = base
            gpu = dict(base)
            if static_new is not None:  # this sample's own reading, even one not kept (no uuid)
                gpu.update(static_new)
            gpu.update(out)
            gpus.append(gpu)
        return gpus

    def _run_batch(
        self, jobs: List[Tuple[int, Callable[[], Any]]], deadline: float
    ) -> Dict[int, Any]:
        """Run device jobs one after another on the batch worker, each round bounded by a deadline.

        A round that overruns isolates the device it is stuck in (see the class docstring); the devices
        after it get a fresh round, so only the first overrun of each wedged device costs extra time.

        Returns:
            index -> the job's result dict, or the exception it raised (CallTimeout for a device whose call
            overran or could not be started).
        """
        out = {}  # type: Dict[int, Any]
        remaining = list(jobs)
        while remaining:
            results = {}  # type: Dict[int, Any]
            progress = {"current": None, "cancelled": False}  # type: Dict[str, Any]

            # Defaults bind this round's lists: a stuck round from before must not see the next one's.
            def batch(todo=remaining, results=results, progress=progress):
                for index, job in todo:
                    if progress["cancelled"]:
                        return
                    progress["current"] = index
                    try:
                        results[index] = job()
                    except Exception as exc:
                        results[index] = exc
                progress["current"] = None

            try:
                done, _box = self._batch.submit(batch)
            except CallTimeout as exc:
                out.update((index, exc) for index, _job in remaining)
                break
            finished = done.wait(max(0.0, deadline - time.monotonic()))
            if not finished:
                progress["cancelled"] = True
            out.update(results)
            if finished:
                break
            culprit = progress["current"]
            if culprit is None or culprit in results:
                self._batch.stop()  # it overran between calls: nothing is stuck, the rest waits a sample
                self._batch = _Worker("gputui-nvml-batch")
                break
            # The batch thread is stuck inside this device's call: it becomes that device's worker.
            self._workers[culprit] = self._batch
            self._batch = _Worker("gputui-nvml-batch")
            out[culprit] = CallTimeout()
            remaining = [(index, job) for index, job in remaining if index not in out]
            deadline = time.monotonic() + self.deadline_s
        for index, _job in jobs:
            out.setdefault(index, CallTimeout())
        return out

    def close(self) -> None:
        nv = _pynvml
        workers = [w for w in self._workers if w is not None] + [self._batch, self._system]
        stuck = any(w.stuck for w in workers)
        if self._initialized and nv is not None and not stuck:
            try:
                self._system.call(nv.nvmlShutdown, 1.0)
            except Exception:  # noqa: S110 - shutting down: nothing left to report to
                pass
        for worker in self._workers:
            if worker is not None:
                worker.stop()
        self._batch.stop()
        self._system.stop()
        self._initialized = False


# ----------------------------------------------------------------------------------------------------
# nvidia-smi backend

SMI_MISSING = ("N/A", "ERR!", "")
SMI_GPU_FIELDS = 10
SMI_BAD_MEMORY = ("[Unknown Error]", "ERR!", "[GPU is lost]")
_PCI_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_HANDLE_ERROR = re.compile(
    r"device handle for GPU ?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:?\s*(.*)"
)


def _split_csv(line: str) -> List[str]:
    """Fields of one nvidia-smi CSV line (honours double quotes; strips blanks around fields)."""
    fields = []  # type: List[str]
    current = []  # type: List[str]
    quoted = False
    i = 0
    while i < len(line):
        char = line[i]
        if quoted:
            if char == '"':
                if i + 1 < len(line) and line[i + 1] == '"':
                    current.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                current.append(char)
        elif char == '"' and not "".join(current).strip():
            current = []
            quoted = True
        elif char == ",":
            fields.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        i += 1
    fields.append("".join(current).strip())
    return fields


def _smi_value(text: str) -> Optional[str]:
    """A field's text, or None for nvidia-smi's "no value" forms ([N/A], [Not Supported], ERR!, "")."""
    text = text.strip()
    if text in SMI_MISSING or (text.startswith("[") and text.endswith("]")):
        return None
    return text


def _smi_number(text: str) -> Optional[float]:
    value = _smi_value(text)
    if value is None:
        return None
    for suffix in ("MiB", "%", "W", "C"):  # units, should nvidia-smi print them despite nounits
        if value.endswith(suffix):
            value = value[: -len(suffix)].strip()
            break
    try:
        number = float(value)
    except ValueError:
        return None
    if math.isnan(number) or math.isinf(number):
        return None
    return number


def _smi_int(text: str) -> Optional[int]:
    number = _smi_number(text)
    if number is None or abs(number) > 2**53:
        return None
    return int(number)


def _smi_float(text: str) -> Optional[float]:
    return _smi_number(text)


def _regroup_name(fields: List[str]) -> List[str]:
    """Undo the split of an unquoted name containing commas: find where the uuid/PCI fields start again."""
    for start in range(3, len(fields) - 1):
        uuid, pci = fields[start], fields[start + 1]
        if uuid.startswith(("GPU-", "MIG-")) or _PCI_BUS_ID.match(pci):
            if len(fields) - start + 2 >= SMI_GPU_FIELDS:
                return [fields[0], ", ".join(fields[1:start])] + fields[start:]
    return fields


def parse_smi_gpu_line(line: str) -> Optional[Dict[str, Any]]:
    """One line of ``nvidia-smi --query-gpu=<SMI_QUERY_GPU> --format=csv,noheader,nounits``.

    Unreadable values ([N/A], [Not Supported], ERR!, empty) become None; a name containing commas is put
    back together; extra trailing columns are ignored; a GPU whose memory figures cannot be read carries an
    ``error``. Never raises.

    Returns:
        A Gpu dict, or None for a header, blank or otherwise unusable line (no index).
    """
    line = line.strip("\r\n")
    if not line.strip():
        return None
    fields = _split_csv(line)
    index = _smi_int(fields[0]) if fields else None
    if index is None or index < 0 or index > 4095 or not fields[0].strip().isdigit():
        return None
    gpu = {"index": index}  # type: Dict[str, Any]
    if len(fields) < SMI_GPU_FIELDS:
        gpu["error"] = "nvidia-smi printed %d of %d fields" % (len(fields), SMI_GPU_FIELDS)
        return gpu
    if len(fields) > SMI_GPU_FIELDS:
        fields = _regroup_name(fields)[:SMI_GPU_FIELDS]
    gpu["name"] = _smi_value(fields[1])
    gpu["uuid"] = _smi_value(fields[2])
    gpu["pci_bus_id"] = _smi_value(fields[3])
    gpu["memory_used_mib"] = _smi_int(fields[4])
    gpu["memory_total_mib"] = _smi_int(fields[5])
    gpu["memory_reserved_mib"] = None
    gpu["utilization_pct"] = _smi_int(fields[6])
    gpu["temperature_c"] = _smi_int(fields[7])
    gpu["power_w"] = _smi_float(fields[8])
    gpu["power_limit_w"] = _smi_float(fields[9])
    if gpu["memory_used_mib"] is None:
        raw = fields[4].strip()
        if raw in SMI_BAD_MEMORY or raw == "":
            gpu["error"] = "nvidia-smi: memory.used is %s" % (raw or "empty")
        else:
            gpu["error"] = "nvidia-smi: memory.used not available (%s)" % (raw[:40],)
    return gpu


def _pci_key(bus_id: str) -> str:
    """A PCI bus id in one spelling: nvidia-smi writes the domain with 8 digits in CSV, 4 in messages."""
    domain, _, rest = bus_id.partition(":")
    try:
        return "%08X:%s" % (int(domain, 16), rest.upper())
    except ValueError:
        return bus_id.upper()


def parse_smi_handle_error(line: str) -> Optional[Tuple[str, str]]:
    """``Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost...`` -> (bus id, reason)."""
    match = _HANDLE_ERROR.search(line)
    if match is None:
        return None
    reason = match.group(2).strip().rstrip(".") or "unreachable"
    if "is lost" in reason:
        reason = "GPU is lost"
    return _pci_key(match.group(1)), reason


def with_lost_gpus(gpus: List[Dict[str, Any]], lost: Dict[str, str]) -> List[Dict[str, Any]]:
    """``gpus`` plus an error row for each GPU nvidia-smi could not open (bus id -> reason), by index.

    A lost GPU has no line of its own, only its PCI bus id. NVML numbers GPUs in PCI bus order, so the lost
    one takes the index its bus id has among all of them (the first free index if a listed GPU holds that).
    A bus id that a listed GPU also has is that GPU, already shown.
    """
    listed = set(_pci_key(str(g["pci_bus_id"])) for g in gpus if g.get("pci_bus_id"))
    missing = sorted(bus for bus in lost if bus not in listed)
    if not missing:
        return gpus
    order = sorted(listed | set(missing))
    used = set(g["index"] for g in gpus)
    rows = list(gpus)
    for bus in missing:
        index = order.index(bus)
        if index in used:
            index = min(set(range(len(order) + len(used) + 1)) - used)
        used.add(index)
        rows.append({"index": index, "pci_bus_id": bus, "error": lost[bus]})
    return sorted(rows, key=lambda g: g["index"])


def parse_smi_gpu_output(text: str) -> List[Dict[str, Any]]:
    """Every GPU of one block of ``--query-gpu`` output (headers and junk lines are skipped).

    A GPU nvidia-smi reports as unreachable ("Unable to determine the device handle for GPU…: GPU is lost")
    is an error row of its own (``with_lost_gpus``), never dropped: dropped, the host looks smaller and clean.
    """
    gpus = []  # type: List[Dict[str, Any]]
    lost = {}  # type: Dict[str, str]
    for line in text.splitlines():
        gpu = parse_smi_gpu_line(line)
        if gpu is not None:
            gpus.append(gpu)
            continue
        handle_error = parse_smi_handle_error(line)
        if handle_error is not None:
            lost[handle_error[0]] = handle_error[1]
    return with_lost_gpus(gpus, lost)


def parse_smi_apps_output(text: str) -> Dict[str, List[Dict[str, Any]]]:
    """``--query-compute-apps=gpu_uuid,pid,used_memory`` output: GPU uuid -> process dicts."""
    apps = {}  # type: Dict[str, List[Dict[str, Any]]]
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = _split_csv(line)
        if len(fields) < 3:
            continue
        uuid = _smi_value(fields[0])
        pid = _smi_int(fields[1])
        if uuid is None or pid is None or pid <= 0 or not fields[1].strip().isdigit():
            continue
        apps.setdefault(uuid, []).append({"pid": pid, "used_mib": _smi_int(fields[2]), "type": "compute"})
    return apps


SMI_EXIT_GPU_LOST = 15


def smi_exit_error(returncode: int, output: str) -> str:
    """One readable line for a failed nvidia-smi run (exit 9: the driver is not loaded; 15: a GPU is lost).

    Quotes the first line that is not one of nvidia-smi's CSV lines (a GPU's figures say nothing about why).
    """
    first = ""
    for line in output.splitlines():
        if line.strip() and parse_smi_gpu_line(line) is None:
            first = line.strip()[:200]
            break
    if returncode == 9:
        return "NVIDIA driver not loaded (nvidia-smi exit 9)" + (": " + first if first else "")
    if returncode == SMI_EXIT_GPU_LOST:
        return "a GPU is lost (nvidia-smi exit 15)" + (": " + first if first else "")
    return "nvidia-smi exited with status %d" % returncode + (": " + first if first else "")


def _which(name: str) -> Optional[str]:
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


class _SmiBackend(object):
    """GPU figures from one long-lived ``nvidia-smi --query-gpu ... -lms N`` process (no pynvml).

    A reader thread parses its lines as they come; a repeated index starts the next block of the loop. The
    process lists come from ``--query-compute-apps`` at the process rate. Every run is an argv list.
    """

    mode = "smi"

    def __init__(self, smi_path: str, interval_s: float) -> None:
        self.smi_path = smi_path
        self.interval_s = interval_s
        self.host_error = None  # type: Optional[str]
        self.driver_version = None  # type: Optional[str]
        self.cuda_driver_version = None  # type: Optional[str]
        self._proc = None  # type: Optional[subprocess.Popen]
        self._lock = threading.Lock()
        self._complete = {}  # type: Dict[int, Dict[str, Any]]
        self._partial = {}  # type: Dict[int, Dict[str, Any]]
        self._latest_time = 0.0
        self._pci_index = {}  # type: Dict[str, int]
        self._lost = {}  # type: Dict[str, str]  # bus id -> reason, for GPUs without a line of their own
        self._output_tail = []  # type: List[str]
        self._last_start = -1e18
        self._apps = {}  # type: Dict[str, List[Dict[str, Any]]]
        self._closed = False

    def start(self) -> None:
        self.driver_version = self._query_driver_version()
        self._ensure_running()

    def _run_once(self, argv: List[str]) -> Tuple[Optional[int], str]:
        try:
            done = subprocess.run(  # noqa: S603 - fixed argv list, no shell
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=SMI_DEADLINE_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, "nvidia-smi timed out"
        except OSError as exc:
            return None, "cannot run nvidia-smi: %s" % exc
        return done.returncode, _text(done.stdout)

    def _query_driver_version(self) -> Optional[str]:
        code, out = self._run_once([self.smi_path, "--query-gpu=driver_version", "--format=csv,noheader"])
        if code != 0:
            return None
        for line in out.splitlines():
            value = _smi_value(line)
            if value is not None and len(value) < 40:
                return value
        return None

    def _ensure_running(self) -> None:
        running = self._proc is not None and self._proc.poll() is None
        if running or time.monotonic() - self._last_start < NVML_INIT_RETRY_S or self._closed:
            return
        self._last_start = time.monotonic()
        period_ms = max(100, int(self.interval_s * 1000))
        argv = [
            self.smi_path,
            "--query-gpu=" + SMI_QUERY_GPU,
            "--format=csv,noheader,nounits",
            "-lms",
            str(period_ms),
        ]
        try:
            proc = subprocess.Popen(  # noqa: S603 - fixed argv list, no shell
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            self.host_error = "cannot run nvidia-smi: %s" % exc
            return
        self._proc = proc
        threading.Thread(target=self._read, args=(proc,), name="gputui-smi", daemon=True).start()
        # The first block follows right away: wait for it briefly so the first sample is not empty.
        deadline = time.monotonic() + SMI_DEADLINE_S
        while time.monotonic() < deadline:
            with self._lock:
                if self._complete or self._partial or self.host_error:
                    break
            time.sleep(0.02)
        # Let the rest of a block arrive (all GPUs print within a few milliseconds).
        time.sleep(0.05)

    def _read(self, proc: subprocess.Popen) -> None:
        if proc.stdout is None:
            return
        for raw in iter(proc.stdout.readline, b""):
            line = _text(raw)
            gpu = parse_smi_gpu_line(line)
            with self._lock:
                if gpu is None:
                    handle_error = parse_smi_handle_error(line)
                    index = None if handle_error is None else self._pci_index.get(handle_error[0])
                    if handle_error is not None and index is not None:
                        gpu = {"index": index, "pci_bus_id": handle_error[0], "error": handle_error[1]}
                    elif handle_error is not None:  # never seen with a line of its own: ``poll`` adds it
                        self._lost[handle_error[0]] = handle_error[1]
                        continue
                    else:
                        if line.strip():
                            self._output_tail = (self._output_tail + [line.strip()])[-3:]
                        continue
                if gpu["index"] in self._partial:  # a repeated index: the previous block is complete
                    self._complete = self._partial
                    self._partial = {}
                self._partial[gpu["index"]] = gpu
                if gpu.get("pci_bus_id"):
                    self._pci_index[_pci_key(str(gpu["pci_bus_id"]))] = gpu["index"]
                self._latest_time = time.monotonic()
                self.host_error = None
        code = proc.wait()
        with self._lock:
            if self._closed:
                return
            if code == SMI_EXIT_GPU_LOST and (self._partial or self._complete):
                # It printed the GPUs it could reach, then gave up on the lost one: keep what it printed
                # (the lost GPU is an error row), and the next start reads them again.
                self._complete.update(self._partial)
                self._partial = {}
                return
            self.host_error = smi_exit_error(code, "\n".join(self._output_tail))
            self._complete = {}
            self._partial = {}

    def _query_apps(self) -> None:
        argv = [self.smi_path, "--query-compute-apps=" + SMI_QUERY_APPS, "--format=csv,noheader,nounits"]
        code, out = self._run_once(argv)
        if code == 0:
            self._apps = parse_smi_apps_output(out)

    def poll(self, want_processes: bool) -> List[Dict[str, Any]]:
        self._ensure_running()
        if want_processes:
            self._query_apps()
        with self._lock:
            view = dict(self._complete)
            view.update(self._partial)
            gpus = with_lost_gpus([dict(view[i]) for i in sorted(view)], self._lost)
            age_s = time.monotonic() - self._latest_time
            silent_s = time.monotonic() - self._last_start
            if not gpus and self.host_error is None and silent_s > SMI_DEADLINE_S:
                # Running but silent (a hung driver call inside nvidia-smi): say so rather than show nothing.
                self.host_error = "nvidia-smi has printed no GPU line for %.0f s" % silent_s
        stale = bool(gpus) and age_s > max(5.0, self.interval_s * 5)
        for gpu in gpus:
            if stale and not gpu.get("error"):
                gpu["error"] = "nvidia-smi stopped reporting (%.0f s ago)" % age_s
            if want_processes:
                gpu["processes"] = [dict(p) for p in self._apps.get(gpu.get("uuid") or "", [])]
        return gpus

    def close(self) -> None:
        with self._lock:
            self._closed = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass


class _NoBackend(object):
    mode = "none"
    driver_version = None
    cuda_driver_version = None

    def __init__(self, error: str) -> None:
        self.host_error = error

    def start(self) -> None:
        pass

    def poll(self, want_processes: bool) -> List[Dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------------------------------
# Health probes
#
# Inference-server /health endpoints, probed from the GPU host itself (so http://127.0.0.1:30000/health
# is the host's own loopback). States (model.HealthSample.state):
#   UP         a 2xx answer with its whole body (up to the read cap) inside the deadline;
#   UNHEALTHY  a 5xx answer (sglang answers 503 when its scheduler is wedged), and 429 (shedding load);
#   DOWN       connection refused: nothing listens on the port;
#   TIMEOUT    the total deadline (lookup + connect + TLS + headers + body) passed;
#   ERROR      the probe cannot tell: bad URL, unresolvable name, TLS failure, connection closed or reset
#              without an answer (a prohibited SSH forward), redirects, and 4xx other than 429 (a wrong
#              URL or missing credentials: a configuration problem, not an unhealthy server).
# Probing never blocks the snapshot stream: HealthProber runs one scheduler thread and at most one probe
# thread per URL; HealthProber.samples() only copies the latest state under a lock never held during I/O.
# Every top-level name here carries a HEALTH_/Health/health_ prefix (or is probe_url /
# discover_health_urls).


HEALTH_STATE_UP = "UP"
HEALTH_STATE_UNHEALTHY = "UNHEALTHY"
HEALTH_STATE_DOWN = "DOWN"
HEALTH_STATE_TIMEOUT = "TIMEOUT"
HEALTH_STATE_ERROR = "ERROR"

HEALTH_DEFAULT_DEADLINE_S = 30.0
"""Total deadline of one probe: longer than sglang's own 20 s generation check behind /health."""
HEALTH_DEFAULT_INTERVAL_S = 5.0
"""Seconds between the starts of two probes of one URL."""
HEALTH_GENERATE_MIN_INTERVAL_S = 10.0
"""Floor on the interval of endpoints that generate tokens (/health_generate): the monitor must not load
the server it watches. It cannot be configured lower."""
HEALTH_MIN_GAP_S = 0.5
"""Least pause between the end of one probe of a URL and the start of the next (a slow endpoint is not
probed back to back)."""
HEALTH_BODY_CAP_BYTES = 4096
"""At most this much of a response body is read; the rest is never downloaded."""
HEALTH_HEADER_CAP_BYTES = 16384
HEALTH_DETAIL_MAX_CHARS = 120
HEALTH_MAX_URL_CHARS = 2048
HEALTH_MAX_URLS = 32
"""At most this many configured URLs, and as many discovered ones: bounds the probe threads."""
HEALTH_DISCOVERED_LINGER_S = 60.0
"""A discovered endpoint stays listed this long after its launcher vanished, so that the operator sees it go
DOWN after a kill instead of silently disappearing."""
HEALTH_SGLANG_DEFAULT_PORT = 30000
HEALTH_VLLM_DEFAULT_PORT = 8000
HEALTH_SAMPLE_FIELDS = (
    "url",
    "state",
    "code",
    "latency_ms",
    "since",
    "last_ok",
    "consecutive_failures",
    "detail",
    "discovered",
    "checked_at",
)
HEALTH_NOT_PROBED_GENERATE = "not probed: generating endpoint (enable generate probes)"


_health_default_ssl_context: Any = None


def _ssl_module() -> Any:
    """The ssl module, or None for a python3 built without OpenSSL.

    Imported on the first https probe, not at start: it costs milliseconds of CPU at every agent start,
    and most hosts probe plain http or nothing.
    """
    try:
        import ssl
    except ImportError:  # https probes say so, everything else still works
        return None
    return ssl


def _is_ssl_error(exc: BaseException) -> bool:
    ssl = sys.modules.get("ssl")  # never imported: no TLS socket exists, so it cannot be a TLS error
    return ssl is not None and isinstance(exc, ssl.SSLError)

_HEALTH_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_HEALTH_STATUS_RE = re.compile(rb"^HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?$")


def health_is_generating_url(url: str) -> bool:
    """Whether probing ``url`` makes the server generate tokens (sglang's ``/health_generate``).

    Errs on the side of caution: any last path segment mentioning "generate" counts, so such endpoints are
    only probed when asked for and never more often than ``HEALTH_GENERATE_MIN_INTERVAL_S``.
    """
    try:
        path = urlsplit(str(url)).path
    except ValueError:
        return False
    last_segment = path.rstrip("/").rsplit("/", 1)[-1]
    return "generate" in last_segment.lower()


class HealthProbeFailure(Exception):
    """A probe ended in a non-UP state; ``str()`` is the one-line detail."""

    def __init__(self, state: str, detail: str, code: Optional[int] = None) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail
        self.code = code


class _HealthTarget:
    """A parsed, validated probe URL."""

    __slots__ = ("scheme", "host", "port", "request_target", "host_header", "authorization")

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        request_target: str,
        host_header: str,
        authorization: Optional[str] = None,
    ) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.request_target = request_target
        self.host_header = host_header
        self.authorization = authorization


_HEALTH_USERINFO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def health_redact_url(url: Any) -> str:
    """``url`` as it may be shown anywhere: credentials (``user:password@``) replaced by ``***@``.

    A URL's credentials are sent as HTTP basic auth (over the loopback or TLS of the GPU host itself) and
    never displayed: not in the panel, the JSON output, a log or an error line.
    """
    return _HEALTH_USERINFO_RE.sub(r"\1***@", str(url), count=1)


def _health_parse_url(url: Any) -> _HealthTarget:
    if not isinstance(url, str) or not url:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad URL: empty")
    if len(url) > HEALTH_MAX_URL_CHARS:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"bad URL: over {HEALTH_MAX_URL_CHARS} characters")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "unsupported URL (only http:// and https://)")
    # Anything that could split the request line or a header is refused before it reaches the socket.
    if any(ord(c) <= 0x20 or ord(c) >= 0x7F for c in url):
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad URL: spaces, control or non-ASCII characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"bad URL: {exc}") from None
    host = parts.hostname
    if not host:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad URL: no host")
    if port == 0:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad URL: port 0")
    default_port = 443 if scheme == "https" else 80
    host_in_header = f"[{host}]" if ":" in host else host
    if port is not None and port != default_port:
        host_in_header = f"{host_in_header}:{port}"
    request_target = parts.path or "/"
    if parts.query:
        request_target += "?" + parts.query
    authorization = None
    if parts.username is not None or parts.password is not None:
        # Percent-decoded, as browsers and curl send them; the URL has no control characters (checked above).
        credentials = "%s:%s" % (unquote(parts.username or ""), unquote(parts.password or ""))
        authorization = "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")
    return _HealthTarget(scheme, host, port or default_port, request_target, host_in_header, authorization)


class _HealthPendingLookup:
    __slots__ = ("done", "result", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Optional[List[Any]] = None
        self.error: Optional[BaseException] = None


_health_lookups_lock = threading.Lock()
_health_lookups: Dict[Tuple[str, int], _HealthPendingLookup] = {}


def _health_lookup_worker(key: Tuple[str, int], pending: _HealthPendingLookup) -> None:
    try:
        pending.result = socket.getaddrinfo(key[0], key[1], 0, socket.SOCK_STREAM)
    except BaseException as exc:  # handed to the waiting probe
        pending.error = exc
    finally:
        with _health_lookups_lock:
            _health_lookups.pop(key, None)
        pending.done.set()


def _health_resolve(host: str, port: int, deadline: float) -> List[Any]:
    """Resolve ``host`` within the deadline.

    getaddrinfo has no timeout of its own, so names are looked up in a daemon thread that the probe waits for
    at most until its deadline; one lookup per (host, port) runs at a time, so a hung resolver cannot pile up
    threads. IP literals are converted without any lookup.
    """
    try:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        pass
    key = (host, port)
    with _health_lookups_lock:
        pending = _health_lookups.get(key)
        if pending is None:
            pending = _HealthPendingLookup()
            _health_lookups[key] = pending
            threading.Thread(
                target=_health_lookup_worker, args=(key, pending), name="gputui-health-dns", daemon=True
            ).start()
    if not pending.done.wait(max(0.0, deadline - time.monotonic())):
        raise HealthProbeFailure(HEALTH_STATE_TIMEOUT, f"name lookup of {host} timed out")
    if pending.error is not None:
        reason = getattr(pending.error, "strerror", None) or str(pending.error)
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"cannot resolve {host}: {reason}")
    if not pending.result:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"cannot resolve {host}: no address")
    return pending.result


def _health_remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise socket.timeout("deadline passed")
    return remaining


def _health_connect(target: _HealthTarget, deadline: float, deadline_s: float) -> socket.socket:
    addresses = _health_resolve(target.host, target.port, deadline)
    refused = 0
    last_error: Optional[OSError] = None
    for family, socktype, proto, _canonname, address in addresses:
        sock = socket.socket(family, socktype, proto)
        try:
            sock.settimeout(_health_remaining(deadline))
            sock.connect(address)
            return sock
        except socket.timeout:
            sock.close()
            raise HealthProbeFailure(
                HEALTH_STATE_TIMEOUT, f"connect timed out (deadline {deadline_s:g}s)"
            ) from None
        except ConnectionRefusedError:
            sock.close()
            refused += 1
        except OSError as exc:
            sock.close()
            last_error = exc
    if refused and last_error is None:
        raise HealthProbeFailure(HEALTH_STATE_DOWN, "connection refused")
    reason = (last_error.strerror if last_error is not None else None) or str(last_error)
    raise HealthProbeFailure(HEALTH_STATE_ERROR, f"connect failed: {reason}")


def _health_wrap_tls(
    sock: socket.socket, target: _HealthTarget, deadline: float, ssl_context: Any
) -> socket.socket:
    global _health_default_ssl_context
    ssl = _ssl_module()
    if ssl is None:
        sock.close()
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "TLS: this python3 has no ssl module")
    context = ssl_context
    if context is None:
        # Loading the system's CA store costs milliseconds of CPU: once per agent, not once per probe.
        if _health_default_ssl_context is None:
            _health_default_ssl_context = ssl.create_default_context()
        context = _health_default_ssl_context
    try:
        sock.settimeout(_health_remaining(deadline))
        return context.wrap_socket(sock, server_hostname=target.host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc)
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"TLS: certificate verify failed: {reason}") from None
    except socket.timeout:
        sock.close()
        raise HealthProbeFailure(HEALTH_STATE_TIMEOUT, "TLS handshake timed out") from None
    except ssl.SSLError as exc:
        sock.close()
        reason = getattr(exc, "reason", None) or str(exc)
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"TLS: {reason}") from None
    except OSError as exc:
        sock.close()
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"TLS: {exc.strerror or exc}") from None


def _health_dechunk(raw: bytes) -> Tuple[bytes, bool]:
    """Decode as much of a chunked body as ``raw`` holds; returns (decoded bytes, whether it is complete)."""
    decoded = bytearray()
    position = 0
    while True:
        line_end = raw.find(b"\r\n", position)
        if line_end < 0:
            return bytes(decoded), False
        size_text = raw[position:line_end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad chunked encoding") from None
        if size == 0:
            return bytes(decoded), True
        start = line_end + 2
        decoded += raw[start : start + size]
        if len(raw) < start + size + 2:
            return bytes(decoded), False
        position = start + size + 2


def _health_recv(sock: socket.socket, deadline: float) -> bytes:
    sock.settimeout(_health_remaining(deadline))
    return sock.recv(65536)


def _health_exchange(
    sock: socket.socket, target: _HealthTarget, deadline: float, deadline_s: float, body_cap_bytes: int
) -> Tuple[int, str, bytes]:
    """Send the request and read the answer; returns (status code, reason phrase, body up to the cap)."""
    authorization = f"Authorization: {target.authorization}\r\n" if target.authorization else ""
    request = (
        f"GET {target.request_target} HTTP/1.1\r\nHost: {target.host_header}\r\n{authorization}"
        "User-Agent: gputui-agent\r\nAccept: */*\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    try:
        sock.settimeout(_health_remaining(deadline))
        sock.sendall(request)
    except socket.timeout:
        raise HealthProbeFailure(HEALTH_STATE_TIMEOUT, "sending the request timed out") from None
    except OSError as exc:
        raise HealthProbeFailure(
            HEALTH_STATE_ERROR, f"connection closed before a response ({exc.strerror or exc})"
        ) from None

    buffer = b""
    received_any = False
    code: Optional[int] = None
    phase = "headers"
    try:
        while True:
            header_end = buffer.find(b"\r\n\r\n")
            if header_end < 0:
                if len(buffer) > HEALTH_HEADER_CAP_BYTES:
                    raise HealthProbeFailure(HEALTH_STATE_ERROR, "response headers too long")
                chunk = _health_recv(sock, deadline)
                if not chunk:
                    if not received_any:
                        raise HealthProbeFailure(
                            HEALTH_STATE_ERROR,
                            "connection closed without a response (refused by a proxy or forward?)",
                        )
                    raise HealthProbeFailure(HEALTH_STATE_ERROR, "connection closed mid-headers")
                received_any = True
                buffer += chunk
                continue
            head = buffer[:header_end]
            buffer = buffer[header_end + 4 :]
            lines = head.split(b"\r\n")
            match = _HEALTH_STATUS_RE.match(lines[0])
            if match is None:
                excerpt = visible_text(lines[0], HEALTH_DETAIL_MAX_CHARS)
                raise HealthProbeFailure(HEALTH_STATE_ERROR, "not an HTTP response: " + excerpt)
            code = int(match.group(1))
            reason = (match.group(2) or b"").decode("latin-1")
            if 100 <= code < 200:
                continue  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            headers: Dict[str, str] = {}
            for line in lines[1:]:
                name, _sep, value = line.partition(b":")
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
            break

        phase = "body"
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length: Optional[int] = None
        if not chunked and "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad Content-Length", code) from None
        if code in (204, 304):
            return code, reason, b""
        while True:
            if chunked:
                body, complete = _health_dechunk(buffer)
                if complete or len(body) >= body_cap_bytes or len(buffer) > 4 * body_cap_bytes:
                    return code, reason, body[:body_cap_bytes]
            elif length is not None:
                if len(buffer) >= min(length, body_cap_bytes):
                    return code, reason, buffer[:body_cap_bytes]
            elif len(buffer) >= body_cap_bytes:
                return code, reason, buffer[:body_cap_bytes]
            chunk = _health_recv(sock, deadline)
            if not chunk:
                if chunked or length is not None:
                    raise HealthProbeFailure(
                        _health_cut_state(code, HEALTH_STATE_ERROR), f"response truncated (HTTP {code})", code
                    )
                return code, reason, buffer[:body_cap_bytes]
            buffer += chunk
    except socket.timeout:
        if code is not None and phase == "body":
            raise HealthProbeFailure(
                _health_cut_state(code, HEALTH_STATE_TIMEOUT),
                f"body incomplete at the {deadline_s:g}s deadline (HTTP {code})",
                code,
            ) from None
        if received_any:
            raise HealthProbeFailure(
                HEALTH_STATE_TIMEOUT, f"response headers incomplete at the {deadline_s:g}s deadline"
            ) from None
        raise HealthProbeFailure(HEALTH_STATE_TIMEOUT, f"no response within {deadline_s:g}s") from None
    except ConnectionResetError:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "connection reset by peer", code) from None
    except OSError as exc:  # ssl.SSLError is one
        if _is_ssl_error(exc):
            tls_reason = getattr(exc, "reason", None) or exc
            raise HealthProbeFailure(HEALTH_STATE_ERROR, f"TLS: {tls_reason}") from None
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"read failed: {exc.strerror or exc}", code) from None


def _health_cut_state(code: int, otherwise: str) -> str:
    """The state of an answer whose body was cut short: its status line already said 5xx or 429, so the
    server is UNHEALTHY whatever became of the body; for any other status the probe cannot tell."""
    return HEALTH_STATE_UNHEALTHY if code >= 500 or code == 429 else otherwise


def _health_classify(code: int, reason: str, body: bytes) -> Tuple[str, Optional[str]]:
    excerpt = body.strip()
    if 200 <= code < 300:
        return HEALTH_STATE_UP, None
    # The body says more than the reason phrase, and the detail line is short: one or the other.
    if excerpt:
        detail = f"HTTP {code}: {visible_text(excerpt, HEALTH_DETAIL_MAX_CHARS)}"
    else:
        detail = f"HTTP {code} {visible_text(reason, HEALTH_DETAIL_MAX_CHARS)}".strip()
    if code >= 500 or code == 429:
        return HEALTH_STATE_UNHEALTHY, detail
    if 300 <= code < 400:
        return HEALTH_STATE_ERROR, "redirect not followed: " + detail
    return HEALTH_STATE_ERROR, detail


def probe_url(
    url: str,
    deadline_s: float = HEALTH_DEFAULT_DEADLINE_S,
    body_cap_bytes: int = HEALTH_BODY_CAP_BYTES,
    ssl_context: Any = None,
) -> Dict[str, Any]:
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
    deadline = started + deadline_s
    code: Optional[int] = None
    sock: Optional[socket.socket] = None
    try:
        target = _health_parse_url(url)
        sock = _health_connect(target, deadline, deadline_s)
        if target.scheme == "https":
            sock = _health_wrap_tls(sock, target, deadline, ssl_context)
        code, reason, body = _health_exchange(sock, target, deadline, deadline_s, body_cap_bytes)
        state, detail = _health_classify(code, reason, body)
    except HealthProbeFailure as failure:
        state, detail = failure.state, failure.detail
        code = failure.code if failure.code is not None else code
    except socket.timeout:
        state, detail = HEALTH_STATE_TIMEOUT, f"no response within {deadline_s:g}s"
    except Exception as exc:  # one bad endpoint must never take the agent down
        state, detail = HEALTH_STATE_ERROR, f"probe failed: {type(exc).__name__}: {exc}"
    finally:
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
    latency_ms = round((time.monotonic() - started) * 1000.0, 1)
    return {
        "state": state,
        "code": code,
        "latency_ms": latency_ms,
        "detail": None if detail is None else visible_text(detail, HEALTH_DETAIL_MAX_CHARS),
    }


# ---------------------------------------------------------------------------------------------------------
# Discovery


def _health_valid_port(text: str) -> Optional[int]:
    if not text.isdigit() or len(text) > 5:
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


def _health_url_host(host: Optional[str]) -> Optional[str]:
    """The host part of a discovered URL for a launcher's ``--host`` value; None when it is not usable."""
    if host is None or host == "" or host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host if _HEALTH_HOSTNAME_RE.match(host) else None
    if address.is_unspecified:
        return "127.0.0.1"  # bound to every address: the loopback one answers
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def _health_option(argv: List[str], name: str) -> Tuple[bool, Optional[str]]:
    """The last value of ``--name V`` / ``--name=V`` in argv (argparse semantics) and whether it was given."""
    found = False
    value: Optional[str] = None
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            break
        if arg == name:
            found = True
            value = argv[index + 1] if index + 1 < len(argv) else ""
            index += 2
            continue
        if arg.startswith(name + "="):
            found = True
            value = arg[len(name) + 1 :]
        index += 1
    return found, value


def _health_entry_point(argv: List[str]) -> Tuple[str, str, str]:
    """What a command line runs: (kind, name, first argument after it), kind "module", "script" or "program".

    For a Python interpreter the interpreter's own options are skipped, so ``python -u -m pkg.mod`` runs the
    module ``pkg.mod`` and ``python /venv/bin/vllm serve`` the script ``/venv/bin/vllm``; ``python -c`` runs
    nothing recognisable (so ``python -c ... -m sglang.launch_server`` is not a launcher, and neither is
    ``pgrep -f sglang.launch_server``).
    """
    if not argv:
        return "program", "", ""
    if not os.path.basename(argv[0]).startswith("python"):
        return "program", argv[0], argv[1] if len(argv) > 1 else ""
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "-m":
            following = argv[index + 2] if index + 2 < len(argv) else ""
            return "module", argv[index + 1] if index + 1 < len(argv) else "", following
        if arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            return "module", arg[2:], argv[index + 1] if index + 1 < len(argv) else ""
        if arg.startswith("-c") or arg == "-":
            return "code", "", ""
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            index += 2
            continue
        if arg.startswith("-"):
            index += 1
            continue
        return "script", arg, argv[index + 1] if index + 1 < len(argv) else ""
    return "program", argv[0], ""


def _health_launcher_kind(argv: List[str]) -> Optional[str]:
    kind, name, following = _health_entry_point(argv)
    base = os.path.basename(name)
    if kind == "module":
        if name == "sglang.launch_server":
            return "sglang"
        if name == "vllm.entrypoints.openai.api_server":
            return "vllm"
        return None
    if kind == "script" and name.replace(os.sep, "/").endswith("sglang/launch_server.py"):
        return "sglang"
    if kind == "script" and name.replace(os.sep, "/").endswith("vllm/entrypoints/openai/api_server.py"):
        return "vllm"
    if kind in ("script", "program") and following == "serve":
        if base == "sglang":
            return "sglang"
        if base == "vllm":
            return "vllm"
    return None


def health_launcher_url(cmdline: Iterable[Any]) -> Optional[str]:
    """The /health URL an sglang or vLLM launcher command line serves, or None.

    Recognises ``python -m sglang.launch_server``, ``sglang serve``, ``vllm serve`` and
    ``python -m vllm.entrypoints.openai.api_server``; reads ``--port N`` / ``--port=N`` (defaults 30000 and
    8000) and ``--host`` (unset, 0.0.0.0, :: and localhost become 127.0.0.1). A launcher whose port or host is
    not valid yields nothing rather than a guess.
    """
    argv = [str(arg) for arg in cmdline]
    if len(argv) == 1 and " " in argv[0]:
        argv = argv[0].split()  # a process that rewrote its title into one string
    kind = _health_launcher_kind(argv)
    if kind is None:
        return None
    port_given, port_text = _health_option(argv, "--port")
    if port_given:
        port = _health_valid_port(port_text or "")
        if port is None:
            return None
    else:
        port = HEALTH_SGLANG_DEFAULT_PORT if kind == "sglang" else HEALTH_VLLM_DEFAULT_PORT
    _host_given, host_text = _health_option(argv, "--host")
    host = _health_url_host(host_text)
    if host is None:
        return None
    return f"http://{host}:{port}/health"


def discover_health_urls(processes: Iterable[Any]) -> List[str]:
    """Health URLs proposed by the inference-server launchers among ``processes``.

    Args:
        processes: Dicts with a "cmdline" argv list (other keys ignored), or objects with a ``cmdline``.

    Returns:
        Distinct URLs in a stable (sorted) order, at most ``HEALTH_MAX_URLS``.
    """
    urls: Set[str] = set()
    for process in processes:
        cmdline = process.get("cmdline") if isinstance(process, dict) else getattr(process, "cmdline", None)
        if not cmdline or isinstance(cmdline, (str, bytes)):
            continue
        url = health_launcher_url(cmdline)
        if url is not None:
            urls.add(url)
    return sorted(urls)[:HEALTH_MAX_URLS]


def health_read_proc_cmdlines(proc_root: str = "/proc") -> List[Dict[str, Any]]:
    """Every process's ``{"pid", "cmdline"}`` from /proc, for discovery when no full process list is at hand.

    Processes that vanish or cannot be read are skipped; zombies and kernel threads have an empty cmdline.
    """
    result: List[Dict[str, Any]] = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        return result
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, name, "cmdline"), "rb") as handle:
                raw = handle.read(65536)
        except OSError:
            continue
        argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0")]
        if argv and argv[-1] == "":
            argv.pop()
        if argv:
            result.append({"pid": int(name), "cmdline": argv})
    return result


HEALTH_LOCAL_ADDRESSES_S = 60.0
"""This host's own addresses are read again at most this often."""
HEALTH_SHOWN_URL_CHARS = 200


def health_local_addresses(proc_net: str = "/proc/net") -> Set[str]:
    """This host's own IP addresses (in the collector's network namespace), from /proc; no lookup, no socket.

    IPv4 from the kernel's routing trie (``/32 host LOCAL`` entries of ``fib_trie``), IPv6 from ``if_inet6``.
    """
    found = set()  # type: Set[str]
    try:
        with open(os.path.join(proc_net, "fib_trie")) as handle:
            last = None  # type: Optional[str]
            for line in handle:
                words = line.split()
                if len(words) >= 2 and words[0] in ("|--", "+--"):
                    last = words[1].split("/", 1)[0]
                elif last is not None and words[-2:] == ["host", "LOCAL"]:
                    found.add(last)
    except OSError:
        pass
    try:
        with open(os.path.join(proc_net, "if_inet6")) as handle:
            for line in handle:
                words = line.split()
                if words and len(words[0]) == 32:
                    try:
                        found.add(ipaddress.ip_address(bytes.fromhex(words[0])).compressed)
                    except ValueError:
                        pass
    except OSError:
        pass
    return found


def health_is_local_url(url: str, local_addresses: Set[str], hostname: Optional[str] = None) -> bool:
    """Whether ``url`` points at this host: a loopback address, one of ``local_addresses``, ``localhost`` or
    this host's own name. Decided without any name lookup."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        names = {"localhost"}
        if hostname:
            names.update((hostname.lower(), hostname.split(".", 1)[0].lower()))
        return host.lower() in names
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return address.is_loopback or address.compressed in local_addresses


def _health_shown_url(url: str) -> str:
    """A URL as every sample and reply carries it: credentials redacted, an over-long one cut."""
    shown = health_redact_url(url)
    if len(shown) > HEALTH_SHOWN_URL_CHARS:
        shown = shown[: HEALTH_SHOWN_URL_CHARS - 1] + TEXT_ELLIPSIS
    return shown


def _health_scrub(detail: Optional[str], url: str) -> Optional[str]:
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


# ---------------------------------------------------------------------------------------------------------
# The prober


class _HealthEndpoint:
    __slots__ = (
        "url",
        "discovered",
        "generating",
        "state",
        "code",
        "latency_ms",
        "since",
        "last_ok",
        "consecutive_failures",
        "detail",
        "checked_at",
        "next_due",
        "not_probed",
    )

    def __init__(self, url: str, discovered: bool, now_monotonic: float) -> None:
        self.url = url
        self.not_probed: Optional[Tuple[Optional[str], str]] = None
        """(state, detail) of an endpoint that is listed but never probed (see ``HealthProber``)."""
        self.discovered = discovered
        self.generating = health_is_generating_url(url)
        self.state: Optional[str] = None
        self.code: Optional[int] = None
        self.latency_ms: Optional[float] = None
        self.since: Optional[float] = None
        self.last_ok: Optional[float] = None
        self.consecutive_failures = 0
        self.detail: Optional[str] = None
        self.checked_at: Optional[float] = None
        self.next_due = now_monotonic


class HealthProber:
    """Probes health URLs in background threads; :meth:`samples` returns the latest state at once.

    One scheduler thread (started when the first URL appears) starts at most one probe thread per URL at a
    time; a URL is probed every ``interval_s`` (start to start, and never sooner than ``HEALTH_MIN_GAP_S``
    after the previous probe ended). Generating endpoints are probed only when ``generate`` is on, and then
    at most every ``HEALTH_GENERATE_MIN_INTERVAL_S``.

    Discovery probes this host only: a launcher whose ``--host`` is not one of this host's addresses (any
    user can start a process whose argv names any host) is listed, found but not probed, unless that URL is
    configured. A bad setting never stops the prober: a URL longer than ``HEALTH_MAX_URL_CHARS`` is an ERROR
    row, and URLs past the first ``HEALTH_MAX_URLS`` are one ERROR row. Every URL it reports has its
    credentials redacted (``health_redact_url``); they are sent as basic auth.

    Args:
        urls: Configured URLs (probed whatever discovery finds).
        discover: Add URLs that :meth:`update_discovered` finds in the process list.
        generate: Probe generating endpoints (``/health_generate``) too.
        interval_s: Seconds between probes of one URL.
        deadline_s: Total deadline of one probe in seconds.
        body_cap_bytes: Body read cap of one probe in bytes.
        ssl_context: TLS settings for https URLs (default: the system's verifying context).
        discovered_linger_s: Seconds a discovered URL stays after its launcher left the process list.
        clock: Wall clock (epoch seconds) for ``since`` / ``last_ok`` / ``checked_at``.
    """

    def __init__(
        self,
        urls: Iterable[str] = (),
        discover: bool = True,
        generate: bool = False,
        interval_s: float = HEALTH_DEFAULT_INTERVAL_S,
        deadline_s: float = HEALTH_DEFAULT_DEADLINE_S,
        body_cap_bytes: int = HEALTH_BODY_CAP_BYTES,
        ssl_context: Any = None,
        discovered_linger_s: float = HEALTH_DISCOVERED_LINGER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Condition()
        self._configured: List[str] = []
        self._ignored: List[str] = []  # configured past HEALTH_MAX_URLS
        self._discovered_seen: Dict[str, float] = {}
        self._remote: Set[str] = set()  # discovered URLs that are not this host's: listed, never probed
        self._local_addresses: Set[str] = set()
        self._local_read_mono = -1e18
        self._hostname = socket.gethostname()
        self._endpoints: Dict[str, _HealthEndpoint] = {}
        self._in_flight: Set[str] = set()
        # Kept across removal and re-adding of a URL, so reconfiguring cannot beat the rate limits.
        self._last_started: Dict[str, float] = {}
        self._discover = bool(discover)
        self._generate = bool(generate)
        self._interval_s = HEALTH_DEFAULT_INTERVAL_S
        self._deadline_s = HEALTH_DEFAULT_DEADLINE_S
        self._body_cap_bytes = int(body_cap_bytes)
        self._ssl_context = ssl_context
        self._linger_s = float(discovered_linger_s)
        self._clock = clock
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._scan_requested = False
        self.configure(urls=list(urls), interval_s=interval_s, deadline_s=deadline_s)

    # -- configuration -------------------------------------------------------------------------------------

    def configure(
        self,
        urls: Optional[Iterable[str]] = None,
        generate: Optional[bool] = None,
        discover: Optional[bool] = None,
        interval_s: Optional[float] = None,
        deadline_s: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Change what is probed; None leaves a setting as it is. Returns the settings now in force.

        A URL that cannot be probed (too long, malformed) or one past ``HEALTH_MAX_URLS`` is not refused: it
        is an ERROR row, and the other URLs are probed.

        Raises:
            ValueError: With one readable line, for a malformed command (a value of the wrong type; nothing is
                changed then).
        """
        new_urls: Optional[List[str]] = None
        if urls is not None:
            if isinstance(urls, (str, bytes)):
                raise ValueError("urls must be a list of strings")
            new_urls = []
            for url in urls:
                if not isinstance(url, str):
                    raise ValueError("urls must be a list of strings")
                if url not in new_urls:
                    new_urls.append(url)
        for name, value in (("generate", generate), ("discover", discover)):
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false")
        for name, seconds, upper in (("interval_s", interval_s, 3600.0), ("deadline_s", deadline_s, 600.0)):
            if seconds is not None and (
                isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= upper
            ):
                raise ValueError(f"{name} must be a number of seconds in (0, {upper:g}]")
        with self._lock:
            if new_urls is not None:
                self._configured = new_urls[:HEALTH_MAX_URLS]
                self._ignored = new_urls[HEALTH_MAX_URLS:]
            if generate is not None:
                self._generate = generate
            if discover is not None:
                self._discover = discover
                if not discover:
                    self._discovered_seen.clear()
                    self._remote.clear()
            if interval_s is not None:
                self._interval_s = float(interval_s)
            if deadline_s is not None:
                self._deadline_s = float(deadline_s)
            self._sync_endpoints_locked()
            return self._config_locked()

    def handle_command(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """Apply the agent's ``health`` command and return its reply's result.

        ``{"cmd": "health", "urls": [...], "generate": bool, "discover": bool, "interval_s": S,
        "deadline_s": S, "discover_now": bool}``; every key but "cmd" is optional. Result: ``{"config":
        {...}, "samples": [...]}``; ``discover_now`` looks for launchers before answering.

        Raises:
            ValueError: One readable line for a bad command.
        """
        if not isinstance(command, dict):
            raise ValueError("health command must be a JSON object")
        config = self.configure(
            urls=command.get("urls"),
            generate=command.get("generate"),
            discover=command.get("discover"),
            interval_s=command.get("interval_s"),
            deadline_s=command.get("deadline_s"),
        )
        if command.get("discover_now") is True:
            self.discover_now()
            config = self.config()
        return {"config": config, "samples": self.samples()}

    def discover_now(self) -> None:
        """Look for launchers in /proc now, in the caller's thread (one-shot clients: snapshot, check)."""
        with self._lock:
            if not self._discover or self._closed:
                return
        self._apply_discovered(discover_health_urls(health_read_proc_cmdlines()))

    def update_discovered(self, processes: Optional[Iterable[Any]] = None) -> None:
        """Look for launchers and add (and retire) discovered URLs; call it at the process-list rate.

        Args:
            processes: The host's processes as dicts with a "cmdline" argv list: pure string work, done
                before returning. It must hold every process, not only GPU ones: a launcher holds no GPU
                memory while its model loads. None: read every process's cmdline from /proc on the
                prober's own thread instead, and return at once (the snapshot stream never waits for it).
        """
        with self._lock:
            if not self._discover or self._closed:
                return
            if processes is None:
                self._scan_requested = True
                self._ensure_thread_locked()
                self._lock.notify_all()
                return
        self._apply_discovered(discover_health_urls(processes))

    def _apply_discovered(self, found: List[str]) -> None:
        now = time.monotonic()
        if now - self._local_read_mono >= HEALTH_LOCAL_ADDRESSES_S:
            self._local_read_mono = now
            self._local_addresses = health_local_addresses()
        local = self._local_addresses
        remote = set(url for url in found if not health_is_local_url(url, local, self._hostname))
        with self._lock:
            if not self._discover:
                return
            for url in found:
                self._discovered_seen[url] = now
            self._remote = (self._remote - set(found)) | remote
            for url, seen in list(self._discovered_seen.items()):
                if now - seen > self._linger_s:
                    del self._discovered_seen[url]
            while len(self._discovered_seen) > HEALTH_MAX_URLS:
                oldest = min(self._discovered_seen, key=self._discovered_seen.__getitem__)
                del self._discovered_seen[oldest]
            self._sync_endpoints_locked()

    def _config_locked(self) -> Dict[str, Any]:
        return {
            "urls": [_health_shown_url(u) for u in self._configured],
            "discovered_urls": sorted(
                _health_shown_url(u) for u in self._discovered_seen if u not in self._configured
            ),
            "generate": self._generate,
            "discover": self._discover,
            "interval_s": self._interval_s,
            "deadline_s": self._deadline_s,
            "generate_min_interval_s": HEALTH_GENERATE_MIN_INTERVAL_S,
        }

    def _sync_endpoints_locked(self) -> None:
        wanted: Dict[str, bool] = {}
        for url in self._configured:
            wanted[url] = False
        if self._ignored:
            wanted.setdefault(self._ignored[0], False)
        if self._discover:
            for url in sorted(self._discovered_seen):
                wanted.setdefault(url, True)
        for url in list(self._endpoints):
            if url not in wanted:
                del self._endpoints[url]
        now = time.monotonic()
        forget_before = now - max(self._interval_s, HEALTH_GENERATE_MIN_INTERVAL_S)
        for url, started in list(self._last_started.items()):
            if url not in wanted and started < forget_before:
                del self._last_started[url]
        for url, discovered in wanted.items():
            endpoint = self._endpoints.get(url)
            if endpoint is None:
                endpoint = _HealthEndpoint(url, discovered, now)
                last_started = self._last_started.get(url)
                if last_started is not None:
                    endpoint.next_due = max(now, last_started + self._period_s(endpoint))
                self._endpoints[url] = endpoint
            else:
                endpoint.discovered = discovered
            endpoint.not_probed = self._not_probed_locked(url, discovered)
        if self._endpoints:
            self._ensure_thread_locked()
        self._lock.notify_all()

    def _not_probed_locked(self, url: str, discovered: bool) -> Optional[Tuple[Optional[str], str]]:
        """(state, detail) of a listed endpoint that is never probed, or None for one that is."""
        if self._ignored and url == self._ignored[0] and url not in self._configured:
            more = len(self._ignored) - 1
            return (
                HEALTH_STATE_ERROR,
                f"not probed: at most {HEALTH_MAX_URLS} health URLs; this one"
                + (f" and {more} more are" if more else " is")
                + " ignored",
            )
        if discovered and url in self._remote:
            try:
                host = urlsplit(url).hostname or "?"
            except ValueError:
                host = "?"
            return (None, f"not probed: found on {host}, not an address of this host (add it with --health)")
        return None

    def _ensure_thread_locked(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._schedule, name="gputui-health", daemon=True)
            self._thread.start()

    # -- reading -------------------------------------------------------------------------------------------

    def samples(self) -> List[Dict[str, Any]]:
        """The latest state of every endpoint (``model.HealthSample`` dicts); never waits for a probe.

        Configured URLs come first in their order, then discovered ones sorted.
        """
        with self._lock:
            result = []
            ordered = [u for u in self._configured if u in self._endpoints]
            ordered += sorted(u for u in self._endpoints if u not in self._configured)
            for url in ordered:
                endpoint = self._endpoints[url]
                state, detail = endpoint.state, endpoint.detail
                if endpoint.not_probed is not None:
                    state, detail = endpoint.not_probed
                elif endpoint.generating and not self._generate and endpoint.state is None:
                    detail = HEALTH_NOT_PROBED_GENERATE
                result.append(
                    {
                        "url": _health_shown_url(endpoint.url),
                        "state": state,
                        "code": endpoint.code,
                        "latency_ms": endpoint.latency_ms,
                        "since": endpoint.since,
                        "last_ok": endpoint.last_ok,
                        "consecutive_failures": endpoint.consecutive_failures,
                        "detail": detail,
                        "discovered": endpoint.discovered,
                        "checked_at": endpoint.checked_at,
                    }
                )
            return result

    def config(self) -> Dict[str, Any]:
        """The settings now in force (as :meth:`configure` returns them)."""
        with self._lock:
            return self._config_locked()

    def close(self) -> None:
        """Stop scheduling probes; returns at once (a probe in flight ends by its own deadline)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)

    # -- threads -------------------------------------------------------------------------------------------

    def _period_s(self, endpoint: _HealthEndpoint) -> float:
        if endpoint.generating:
            return max(self._interval_s, HEALTH_GENERATE_MIN_INTERVAL_S)
        return self._interval_s

    def _schedule(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                if self._scan_requested:
                    self._scan_requested = False
                    scan = True
                else:
                    scan = self._start_due_probes_and_wait_locked()
            if scan:
                found: Optional[List[str]] = None
                try:
                    found = discover_health_urls(health_read_proc_cmdlines())
                except Exception:  # a /proc oddity must not stop the probes; keep what was found before
                    found = None
                if found is not None:
                    self._apply_discovered(found)

    def _start_due_probes_and_wait_locked(self) -> bool:
        """Start the probes that are due, then wait (lock released) for the next due time or a change.

        Returns:
            False: no /proc scan to run (the caller's loop shape).
        """
        now = time.monotonic()
        wake_at = now + 60.0
        for endpoint in list(self._endpoints.values()):
            if endpoint.url in self._in_flight:
                continue
            if (endpoint.generating and not self._generate) or endpoint.not_probed is not None:
                continue
            if endpoint.next_due <= now:
                self._in_flight.add(endpoint.url)
                self._last_started[endpoint.url] = now
                endpoint.next_due = now + self._period_s(endpoint)
                threading.Thread(
                    target=self._probe_one,
                    args=(endpoint.url, self._deadline_s),
                    name="gputui-health-probe",
                    daemon=True,
                ).start()
            wake_at = min(wake_at, endpoint.next_due)
        self._lock.wait(max(0.01, wake_at - now))
        return False

    def _probe_one(self, url: str, deadline_s: float) -> None:
        try:
            result = probe_url(url, deadline_s, self._body_cap_bytes, self._ssl_context)
        except Exception as exc:  # probe_url should not raise; never kill the thread silently
            result = {"state": HEALTH_STATE_ERROR, "code": None, "latency_ms": None, "detail": str(exc)}
        finished = time.monotonic()
        now = self._clock()
        with self._lock:
            self._in_flight.discard(url)
            endpoint = self._endpoints.get(url)
            if endpoint is not None:
                state = result["state"]
                if state != endpoint.state:
                    endpoint.since = now
                endpoint.state = state
                endpoint.code = result["code"]
                endpoint.latency_ms = result["latency_ms"]
                endpoint.detail = _health_scrub(result["detail"], url)
                endpoint.checked_at = now
                if state == HEALTH_STATE_UP:
                    endpoint.last_ok = now
                    endpoint.consecutive_failures = 0
                else:
                    endpoint.consecutive_failures += 1
                endpoint.next_due = max(endpoint.next_due, finished + HEALTH_MIN_GAP_S)
            self._lock.notify_all()


# ----------------------------------------------------------------------------------------------------
# The agent


INTERVAL_MIN_S = 0.05
"""The shortest sample interval (``check --wait`` samples every 0.09 s): shorter would only spin the CPU."""
INTERVAL_MAX_S = 3600.0


def _finite_positive(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not number > 0 or math.isinf(number) or math.isnan(number):
        return None
    return number


def seconds_in_range(value: Any, low: float, high: float) -> Optional[float]:
    """``value`` as seconds when it is a number in [``low``, ``high``], else None."""
    number = _finite_positive(value)
    return number if number is not None and low <= number <= high else None


class Agent(object):
    """The collector for one host.

    Args:
        target: The name the client uses for this host (echoed in every snapshot).
        read_only: Refuse every kill.
        memory_interval_s: Seconds between memory samples (the cheap part).
        process_interval_s: Seconds between process samples (NVML process lists + the /proc walk);
            while a GPU drains (its used memory fell within ``DRAIN_WINDOW_S``), at most
            ``DRAIN_PROCESS_INTERVAL_S`` (never below the memory interval).
        health_urls: Health endpoints to probe from this host (at most ``HEALTH_MAX_URLS``).
        discover_health: Also probe the /health URLs of sglang/vLLM launchers found in the process list.
        health_generate: Probe generating endpoints (``/health_generate``) too, at most every
            ``HEALTH_GENERATE_MIN_INTERVAL_S``.
        use_psutil: Use psutil for process details when importable (False: read /proc only).
        use_pynvml: Use pynvml when importable (False: nvidia-smi, if present).
        nvml_deadline_s: Seconds each device's NVML calls may take per sample.
        full_sweep_every: Read every pid's stat on every Nth process sample (1: always); forced samples
            always do.
        telemetry_interval_s: Seconds between reads of utilisation, temperature and power (0: every
            sample); memory is read on every sample.

    A bad health setting is an ERROR row of the health list (``HealthProber``), never a collector that does
    not start: the host's GPUs are shown whatever the health URLs are.
    """

    def __init__(
        self,
        target: str = "local",
        read_only: bool = False,
        memory_interval_s: float = 1.0,
        process_interval_s: float = 3.0,
        health_urls=(),  # type: Any
        discover_health: bool = True,
        health_generate: bool = False,
        use_psutil: bool = True,
        use_pynvml: bool = True,
        nvml_deadline_s: float = NVML_DEADLINE_S,
        full_sweep_every: int = FULL_SWEEP_EVERY,
        telemetry_interval_s: float = TELEMETRY_INTERVAL_S,
    ) -> None:
        self._health = HealthProber(health_urls, discover=discover_health, generate=bool(health_generate))
        self.target = target
        self.read_only = bool(read_only)
        self.memory_interval_s = float(memory_interval_s)
        self.process_interval_s = float(process_interval_s)
        self.health_urls = tuple(self._health.config()["urls"])
        self.discover_health = bool(discover_health)
        self.hostname = _clean(socket.gethostname())
        self.boot_id = read_boot_id()
        self.boot_time = read_boot_time()
        self.pid = os.getpid()
        self.child_pid_namespace = in_child_pid_namespace()
        self._details = _ProcDetails(use_psutil)
        self._lock = threading.RLock()
        self._states = {}  # type: Dict[Tuple[int, int], Tuple[str, float]]
        self._gpu_processes = {}  # type: Dict[int, List[Dict[str, Any]]]
        self._processes = []  # type: List[Dict[str, Any]]
        self._processes_omitted = 0
        self._device_holders = None  # type: Optional[List[Dict[str, Any]]]
        self._processes_time = None  # type: Optional[float]
        self._processes_mono = -1e18
        self.full_sweep_every = max(1, int(full_sweep_every))
        self._partial_sweeps_done = 1 << 30  # process samples since the last full sweep: none yet
        self._children_file = children_file_supported()
        self._stat_fds = StatFds()
        self.last_sweep_full = None  # type: Optional[bool]
        self.last_sample_mono = None  # type: Optional[float]
        self._last_used_mib = {}  # type: Dict[Any, int]
        self._draining_until_mono = -1e18
        self._kill_lock = threading.Lock()
        self._kill_ops = {}  # type: Dict[int, _KillOperation]
        self._next_kill_op = 0
        if use_pynvml and _pynvml is not None:
            self._backend = _NvmlBackend(nvml_deadline_s, telemetry_interval_s)  # type: Any
        else:
            smi = _which("nvidia-smi")
            if smi is not None:
                self._backend = _SmiBackend(smi, self.memory_interval_s)
            elif _pynvml is None or not use_pynvml:
                self._backend = _NoBackend("no NVML: pynvml is not installed and nvidia-smi is not on PATH")
            else:  # pragma: no cover - unreachable
                self._backend = _NoBackend("no NVML")
        self._backend.start()  # so that hello already says whether there is a driver

    @property
    def mode(self) -> str:
        return self._backend.mode

    @property
    def use_psutil(self) -> bool:
        return self._details.use_psutil

    def hello(self) -> Dict[str, Any]:
        return {
            "t": "hello",
            "protocol": PROTOCOL_VERSION,
            "agent_version": AGENT_VERSION,
            "mode": self.mode,
            "error": self._backend.host_error,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "psutil": self.use_psutil,
            "pid": self.pid,
            "boot_id": self.boot_id,
            "hostname": self.hostname,
            "pid_namespace": "child" if self.child_pid_namespace else "host",
        }

    # -- sampling ------------------------------------------------------------------------------------------

    def sample(self, force_processes: bool = False) -> Dict[str, Any]:
        """One host snapshot as a dict (``model.HostSnapshot.to_dict`` shape).

        Memory figures are read every time; the process part (NVML process lists and the /proc walk) only
        when ``process_interval_s`` has passed or ``force_processes`` is set, else the last one is reused.
        """
        with self._lock:
            now_mono = time.monotonic()
            want_processes = force_processes or now_mono - self._processes_mono >= self._process_interval_now(
                now_mono
            )
            gpus = self._backend.poll(want_processes)
            self._note_drain(gpus, now_mono)
            now = time.time()
            self.last_sample_mono = time.monotonic()
            if want_processes:
                self._processes_mono = now_mono
                self._sample_processes(gpus, now, full=force_processes)
                if self.last_sweep_full:
                    # Returns at once: the launcher scan of /proc runs on the prober's own thread. It reads
                    # every pid's cmdline (as costly as a full sweep), so it runs with the full sweeps only:
                    # a new launcher is found within full_sweep_every process intervals.
                    self._health.update_discovered()
            for gpu in gpus:
                if "processes" not in gpu:
                    gpu["processes"] = [dict(p) for p in self._gpu_processes.get(gpu["index"], [])]
            return {
                "target": self.target,
                "hostname": self.hostname,
                "boot_id": self.boot_id,
                "time": now,
                "error": self._backend.host_error,
                "driver_version": self._backend.driver_version,
                "cuda_driver_version": self._backend.cuda_driver_version,
                "mode": self.mode,
                "agent_version": AGENT_VERSION,
                "agent_pid": self.pid,
                "processes_time": self._processes_time,
                "gpus": gpus,
                "processes": [dict(p) for p in self._processes],
                "processes_omitted": self._processes_omitted,
                "device_holders": None if self._device_holders is None else list(self._device_holders),
                "findings": [],
                "health": self._health.samples(),
                "verdict": None,
            }

    def _process_interval_now(self, now_mono: float) -> float:
        """The process interval, shortened while some GPU drains: who still holds memory matters then."""
        if now_mono < self._draining_until_mono:
            return min(self.process_interval_s, max(self.memory_interval_s, DRAIN_PROCESS_INTERVAL_S))
        return self.process_interval_s

    def _note_drain(self, gpus: List[Dict[str, Any]], now_mono: float) -> None:
        used = {}  # type: Dict[Any, int]
        for gpu in gpus:
            mib = gpu.get("memory_used_mib")
            if isinstance(mib, int):
                key = gpu.get("uuid") or gpu.get("index")
                used[key] = mib
                before = self._last_used_mib.get(key)
                if before is not None and before - mib > DRAIN_DROP_MIB:
                    self._draining_until_mono = now_mono + DRAIN_WINDOW_S
        self._last_used_mib = used

    @property
    def draining(self) -> bool:
        """Whether some GPU's memory fell within the last ``DRAIN_WINDOW_S`` (process lists come faster)."""
        return time.monotonic() < self._draining_until_mono

    def error_snapshot(self, error: str) -> Dict[str, Any]:
        """A snapshot that carries only this host's identity and an error."""
        return {
            "target": self.target,
            "hostname": self.hostname,
            "boot_id": self.boot_id,
            "time": time.time(),
            "error": wire_text(error, 1024),
            "mode": self.mode,
            "agent_version": AGENT_VERSION,
            "agent_pid": self.pid,
            "gpus": [],
            "processes": [],
            "device_holders": None,
            "findings": [],
            "health": self._health.samples(),
            "verdict": None,
        }

    def _sample_processes(self, gpus: List[Dict[str, Any]], now: float, full: bool = True) -> None:
        """The process part of a sample: GPU process trees, zombies and D-state processes, device holders.

        A full sweep reads the stat of every pid on the host. It runs when ``full`` is set (forced samples:
        the ``sample`` command), on every ``full_sweep_every``-th process sample, whenever some GPU holds
        memory no listed process accounts for (the device-holder scan needs every pid), and always where
        the kernel lacks /proc/<pid>/task/<tid>/children. The samples between read only the GPU processes,
        their ancestors, everything below their tree roots (by the children files) and the processes the
        last list had. Until the next full sweep, at most ``full_sweep_every - 1`` process intervals, they
        miss: a process that turned zombie or D-state outside every GPU tree and was not listed before, and
        a new process-group member of a tree that is not a descendant (a double-forked grandchild whose
        middle parent died after the last sweep). Everything they do list is read fresh.
        """
        full = (
            full
            or self._partial_sweeps_done >= self.full_sweep_every - 1
            or not self._children_file
            or self._ghost_suspected(gpus)
        )
        if full:
            table = self._stat_fds.scan()
            self._partial_sweeps_done = 0
        else:
            gpu_pids = set()  # type: Set[int]
            for gpu in gpus:
                gpu_pids.update(proc["pid"] for proc in gpu.get("processes") or [] if proc["pid"] > 0)
            table = scan_trees(sorted(gpu_pids), [p["pid"] for p in self._processes], self._details.cgroup)
            self._partial_sweeps_done += 1
        self.last_sweep_full = full
        gpu_mib = {}  # type: Dict[int, Dict[int, int]]
        self._gpu_processes = {}
        for gpu in gpus:
            listed = gpu.get("processes") or []
            for proc in listed:
                proc["visible"] = self._is_local_gpu_pid(proc["pid"], table)
                if proc["visible"]:
                    per_gpu = gpu_mib.setdefault(proc["pid"], {})
                    # A process listed as both compute and graphics holds one allocation, not two.
                    per_gpu[gpu["index"]] = max(per_gpu.get(gpu["index"], 0), proc.get("used_mib") or 0)
            gpu["processes"] = listed
            self._gpu_processes[gpu["index"]] = [dict(p) for p in listed]

        # Each GPU process's whole tree as the client roots it (analysis.build_forest): the job's root
        # (job_root) and everything under it. Its non-GPU children (a detokenizer) die with a tree kill, so
        # the confirmation must be able to list them.
        facts_of = table_facts(table, self._details.cgroup)
        trees = tree_members(set(tree_root(pid, table, facts_of) for pid in gpu_mib), table)
        # Kernel threads (kthreadd's children) in D state are I/O weather, not stuck GPU work.
        remnants = [
            stat.pid
            for stat in table.values()
            if stat.state in ("Z", "D") and stat.pid != 2 and stat.ppid != 2 and stat.pid not in trees
        ]
        # Most important first, so that the caps on the line (process count, command-line bytes) fall on the
        # least important: GPU holders, the rest of their trees, then zombie / D-state processes elsewhere.
        ranked = sorted(gpu_mib) + sorted(trees - set(gpu_mib)) + sorted(remnants)
        chosen = []  # type: List[int]
        taken = set()  # type: Set[int]
        omitted = 0
        for pid in ranked:
            if pid in taken:
                continue
            lineage = [pid] + [a for a in ancestors_of(pid, table) if a in table and a not in taken]
            if len(chosen) + len(lineage) > WIRE_MAX_PROCESSES:
                omitted += 1
                continue
            chosen.extend(lineage)
            taken.update(lineage)
        if full:  # what is listed is read fresh, not taken from the sweep's cache (rss changes unseen)
            self._stat_fds.refresh(chosen, table)
            chosen = [pid for pid in chosen if pid in table]

        processes = []  # type: List[Dict[str, Any]]
        live_keys = set()  # type: Set[Tuple[int, int]]
        budget = _WireBudget()
        for pid in chosen:
            stat = table[pid]
            key = (pid, stat.start_ticks)
            live_keys.add(key)
            seen = self._states.get(key)
            if seen is None or seen[0] != stat.state:
                seen = (stat.state, now)
                self._states[key] = seen
            details = self._details.details(stat, now)
            cmdline, truncated = budget.take(
                details["cmdline"], details["cmdline_truncated"], details["cmdline_bytes"]
            )
            processes.append(
                {
                    "pid": pid,
                    "ppid": stat.ppid,
                    "user": details["user"],
                    "uid": details["uid"],
                    "state": stat.state,
                    "name": stat.name,
                    "cmdline": cmdline,
                    "cmdline_truncated": truncated,
                    "start_ticks": stat.start_ticks,
                    "create_time": (
                        None
                        if self.boot_time is None
                        else self.boot_time + stat.start_ticks / float(CLOCK_TICKS_PER_S)
                    ),
                    "state_since": seen[1],
                    "rss_kib": details["rss_kib"],
                    "gpu_memory_mib": {str(k): v for k, v in sorted(gpu_mib.get(pid, {}).items())},
                    "pgid": stat.pgrp,
                    "sid": stat.session,
                    "cgroup": details["cgroup"],
                }
            )
        processes.sort(key=lambda proc: proc["pid"])
        for key in [k for k in self._states if k not in live_keys]:
            del self._states[key]
        self._details.forget_except(live_keys)
        self._processes = processes
        self._processes_omitted = omitted
        self._processes_time = now
        # A suspected ghost always makes a full sweep (above), so this scans every pid.
        holders = scan_device_holders(table) if full and self._ghost_suspected(gpus) else None
        self._device_holders = None if holders is None else holders[:WIRE_MAX_DEVICE_HOLDERS]

    def _is_local_gpu_pid(self, pid: int, table: Dict[int, ProcStat]) -> bool:
        """Whether the driver's ``pid`` is the local process with that number.

        On the host it is whenever it exists. In a child PID namespace the driver may report pids of another
        namespace, so a local process only counts as that GPU process if it has a /dev/nvidia* node open:
        an unrelated process that happens to have the same number is never shown (or offered) as a holder.
        """
        if pid <= 0 or pid not in table:
            return False
        return not self.child_pid_namespace or has_nvidia_device_open(pid)

    @staticmethod
    def _ghost_suspected(gpus: List[Dict[str, Any]]) -> bool:
        """Whether some GPU holds memory its listed processes do not account for."""
        for gpu in gpus:
            used = gpu.get("memory_used_mib")
            if used is None:
                continue
            listed = sum(p.get("used_mib") or 0 for p in gpu.get("processes") or ())
            # v1 memory info counts the driver's reservation in "used"; v2 reports it apart.
            reserved = gpu.get("memory_reserved_mib")
            slack = GHOST_SLACK_MIB + (0 if reserved is not None else _v1_reserved_allowance(gpu))
            if used - listed > slack:
                return True
        return False

    # -- commands ------------------------------------------------------------------------------------------

    def handle(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """Run one protocol command; returns the reply message (never raises)."""
        command_id = command.get("id") if isinstance(command, dict) else None
        try:
            if not isinstance(command, dict):
                raise _CommandError("a command must be a JSON object")
            name = command.get("cmd")
            if name == "configure":
                result = self._configure(command)
            elif name == "sample":
                result = {"snapshot": self.sample(force_processes=True)}
            elif name == KILL_COMMAND:
                result = self.kill(command)
            elif name == KILL_WAIT_COMMAND:
                result = self.kill_wait(command)
            elif name == KILL_ABANDON_COMMAND:
                result = self.kill_abandon(command)
            elif name == "calibrate":
                result = self._calibrate()
            elif name == "process":
                result = self.process_text(command)
            elif name == "health":
                try:
                    result = self._health.handle_command(command)
                except ValueError as exc:
                    raise _CommandError(str(exc)) from None
            elif name == "hello":
                result = self.hello()
            elif name == "quit":
                result = {}
            else:
                raise _CommandError("unknown command %r" % (name,))
        except _CommandError as exc:
            return {"t": "reply", "id": command_id, "ok": False, "error": str(exc)}
        except Exception as exc:  # a bug must not kill the agent: report it as one line
            return {
                "t": "reply",
                "id": command_id,
                "ok": False,
                "error": wire_text("%s: %s" % (type(exc).__name__, exc), 1024),
            }
        return {"t": "reply", "id": command_id, "ok": True, "result": result}

    def _configure(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """Intervals, and the health settings the SSH link sends right after the hello.

        Keys (all optional): memory_interval_s, process_interval_s, health_urls (list of URLs),
        discover_health (bool), health_generate (bool). A bad value changes nothing.
        """
        updates = {}  # type: Dict[str, float]
        for key in ("memory_interval_s", "process_interval_s"):
            if key in command and command[key] is not None:
                value = seconds_in_range(command[key], INTERVAL_MIN_S, INTERVAL_MAX_S)
                if value is None:
                    raise _CommandError(
                        "%s must be a number of seconds from %g to %g" % (key, INTERVAL_MIN_S, INTERVAL_MAX_S)
                    )
                updates[key] = value
        health_keys = ("health_urls", "discover_health", "health_generate")
        if any(command.get(key) is not None for key in health_keys):
            try:
                # Validates everything before changing anything; the intervals are applied only after.
                config = self._health.configure(
                    urls=command.get("health_urls"),
                    discover=command.get("discover_health"),
                    generate=command.get("health_generate"),
                )
            except ValueError as exc:
                raise _CommandError("health: %s" % exc) from None
            self.health_urls = tuple(config["urls"])
            self.discover_health = bool(config["discover"])
        with self._lock:
            for key, value in updates.items():
                setattr(self, key, value)
            if "memory_interval_s" in updates and isinstance(self._backend, _SmiBackend):
                self._backend.interval_s = updates["memory_interval_s"]
        return {}

    def process_text(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """The ``process`` command: the whole command line of one process, which snapshots cut.

        ``{"cmd": "process", "pid": P, "start_ticks": T}``; read fresh from /proc, and only if the pid still
        belongs to the process that started at T. The command line is cut at ``PROCESS_TEXT_BYTES`` (then
        ``cmdline_truncated`` is true).
        """
        pid = command.get("pid")
        ticks = command.get("start_ticks")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise _CommandError("pid must be a positive integer")
        if isinstance(ticks, bool) or not isinstance(ticks, int):
            raise _CommandError("start_ticks must be an integer")
        stat = read_stat(pid)
        if stat is None:
            raise _CommandError("no such process: %d" % pid)
        if stat.start_ticks != ticks:
            raise _CommandError("process changed: pid %d now belongs to another process" % pid)
        details = _ProcDetails(self.use_psutil)
        uid, full = details.read(pid)
        after = read_stat(pid)
        if after is None or after.start_ticks != ticks or full is None:  # it exited while being read
            raise _CommandError("no such process: %d" % pid)
        cmdline, truncated, _bytes = wire_cmdline(full, PROCESS_TEXT_BYTES)
        return {
            "pid": pid,
            "start_ticks": ticks,
            "name": stat.name,
            "state": stat.state,
            "uid": uid,
            "user": details.user_name(uid),
            "cmdline": cmdline,
            "cmdline_truncated": truncated,
        }

    def _calibrate(self) -> Dict[str, Any]:
        snapshot = self.sample(force_processes=False)
        used = {}  # type: Dict[str, int]
        for gpu in snapshot["gpus"]:
            if gpu.get("memory_used_mib") is None:
                continue
            used[gpu.get("uuid") or "index:%d" % gpu["index"]] = gpu["memory_used_mib"]
        return {"memory_used_mib": used}

    # -- kill ----------------------------------------------------------------------------------------------

    def kill(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """The ``kill`` command (``KILL_COMMAND``; DESIGN's safety rules).

        Checks and signals in this thread; the wait, the escalation and the confirmation then run on a thread
        of the operation's own, which finishes whether or not the client stays (``escalations_pending``).
        Answers at once with ``detach``, else once the whole operation is done (``_KillOperation.reply``).
        """
        signal_name = command.get("signal") or "TERM"
        if signal_name not in SIGNALS:
            raise _CommandError("signal must be one of TERM, INT, KILL")
        raw_targets = command.get("targets")
        if not isinstance(raw_targets, list) or not raw_targets:
            raise _CommandError("targets must be a non-empty list of {pid, start_ticks}")
        raw_members = command.get("members") or []
        if not isinstance(raw_members, list):
            raise _CommandError("members must be a list of {pid, start_ticks}")
        targets = []  # type: List[Tuple[int, Optional[int]]]
        for item in raw_targets + raw_members:
            if not isinstance(item, dict):
                raise _CommandError("each target must be an object with pid and start_ticks")
            pid = item.get("pid")
            ticks = item.get("start_ticks")
            if isinstance(pid, bool) or not isinstance(pid, int):
                raise _CommandError("target pid must be an integer")
            if ticks is not None and (isinstance(ticks, bool) or not isinstance(ticks, int)):
                raise _CommandError("target start_ticks must be an integer")
            targets.append((pid, ticks))
        if not command.get("tree"):
            del targets[len(raw_targets) :]  # members only mean something to a tree kill
        escalate_s = _optional_seconds(command, "escalate_s")
        if escalate_s is not None and escalate_s > ESCALATE_MAX_S:
            raise _CommandError("escalate_s must be seconds up to %g, or null" % ESCALATE_MAX_S)
        wait_s = _optional_seconds(command, "wait_s")
        with self._kill_lock:
            now = time.monotonic()
            for old_id in [i for i, o in self._kill_ops.items() if o.forgettable(now)]:
                del self._kill_ops[old_id]
            self._next_kill_op += 1
            operation = _KillOperation(
                self,
                self._next_kill_op,
                SIGNALS[signal_name],
                signal_name,
                bool(command.get("tree")),
                escalate_s,
                wait_s,
            )
            self._kill_ops[operation.op_id] = operation
        operation.start(targets, command.get("boot_id"))
        if not command.get("detach"):
            operation.wait(None)
        return operation.reply(0)

    def _kill_operation(self, command: Dict[str, Any]) -> Tuple["_KillOperation", int]:
        op_id = command.get("op")
        since = command.get("since", 0)
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise _CommandError("since must be a non-negative integer")
        with self._kill_lock:
            operation = self._kill_ops.get(op_id) if isinstance(op_id, int) else None
        if operation is None:
            raise _CommandError(
                "no kill operation %r here (unknown, or finished more than %g s ago)" % (op_id, KILL_KEEP_S)
            )
        return operation, since

    def kill_wait(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """The ``kill_wait`` command (``KILL_WAIT_COMMAND``)."""
        operation, since = self._kill_operation(command)
        timeout_s = _optional_seconds(command, "timeout_s")
        operation.wait(timeout_s)
        return operation.reply(since)

    def kill_abandon(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """The ``kill_abandon`` command (``KILL_ABANDON_COMMAND``)."""
        operation, since = self._kill_operation(command)
        operation.abandon()
        return operation.reply(since)

    def escalations_pending(self) -> bool:
        """Whether a kill operation is still waiting, escalating or confirming."""
        with self._kill_lock:
            return any(not o.done for o in self._kill_ops.values())

    def wait_for_escalations(self, timeout_s: Optional[float] = None) -> bool:
        """Wait until every kill operation is done; True when they are.

        Args:
            timeout_s: The longest wait; None: as long as the operations themselves are bounded to take
                (their delay plus the KILL confirmation).
        """
        with self._kill_lock:
            operations = [o for o in self._kill_ops.values() if not o.done]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for operation in operations:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            operation.wait(left)
        return not self.escalations_pending()

    def gpu_mib_of(self, pid: int) -> Optional[int]:
        for proc in self._processes:
            if proc["pid"] == pid:
                return sum(proc["gpu_memory_mib"].values())
        return None

    def close(self) -> None:
        self._health.close()
        self._backend.close()
        with self._lock:
            self._stat_fds.close()


def _v1_reserved_allowance(gpu: Dict[str, Any]) -> int:
    """Without v2 memory info the driver's reservation hides in "used": allow ~1% of the total for it."""
    total = gpu.get("memory_total_mib") or 0
    return int(total) // 100


class _CommandError(Exception):
    """A command the agent refuses as malformed; its text is the reply's one-line error."""


def _optional_seconds(command: Dict[str, Any], key: str) -> Optional[float]:
    """A command's optional duration: None when absent or null, else a positive finite number of seconds."""
    value = command.get(key)
    if value is None:
        return None
    seconds = _finite_positive(value)
    if seconds is None:
        raise _CommandError("%s must be a positive number of seconds or null" % key)
    return seconds


class _KillOperation(object):
    """One confirmed kill: checks and signals at once, then the wait, the escalation and the confirmation.

    ``start`` checks every target (identity, refusals), expands trees (children first) and signals, in the
    caller's thread; it captures the job as it was then: each member's pid and start ticks, and the process
    groups its members lead. The members the client listed come after the roots, each checked the same way:
    one whose root died since (init adopted it) is still signalled, with its own subtree. The rest runs on a
    thread of its own (not a daemon: a collector whose client went away still finishes it), bounded by the
    delay plus ``KILL_CONFIRM_S``:

    * after the signals, and again when the escalation is due, the host is read again: processes that joined
      the job since it was listed (a fork during the kill, which init may have adopted once its parent died)
      are signalled too;
    * zombies of the job are not signalled: they go once their parent does ("reaped"), or are said to remain;
    * with ``escalate_s``, what is still alive then gets KILL, and each KILL is confirmed; with ``wait_s``
      (or a KILL), what is left after it is reported as still alive;
    * ``abandon`` cancels an escalation that is not under way yet, and reports what it leaves.

    Outcomes accumulate in order; ``reply`` hands them out from any index, so a client that lost a reply or
    came back later misses none.
    """

    def __init__(
        self,
        agent: Agent,
        op_id: int,
        signo: int,
        signal_name: str,
        tree: bool,
        escalate_s: Optional[float],
        wait_s: Optional[float],
    ) -> None:
        self.agent = agent
        self.op_id = op_id
        self.signo = signo
        self.signal_name = signal_name
        self.tree = tree
        if signo == signal.SIGKILL and escalate_s is not None:
            # Nothing is stronger than KILL: its delay only bounds the wait for it to take effect.
            wait_s, escalate_s = (wait_s if wait_s is not None else escalate_s), None
        self.escalate_s = escalate_s
        self.wait_s = wait_s
        # Its own detail reader: the sampling thread mutates the agent's caches concurrently.
        self._details = _ProcDetails(agent.use_psutil)
        # Who each target was, read before any signal: a dead process has no cmdline left to report.
        self._info = {}  # type: Dict[int, Dict[str, Any]]
        self._lock = threading.Lock()
        self._outcomes = []  # type: List[Dict[str, Any]]
        self._queued = set()  # type: Set[Tuple[int, int]]
        self._members = set()  # type: Set[Tuple[int, int]]
        self._sent = []  # type: List[Tuple[int, int]]
        self._zombies = {}  # type: Dict[Tuple[int, int], int]
        self._groups = set()  # type: Set[int]
        self._protected = set()  # type: Set[int]
        self._my_group = -1
        self._done = threading.Event()
        self._cancel = threading.Event()
        self._escalating = False
        self.started_mono = time.monotonic()
        self.finished_mono = None  # type: Optional[float]
        delay = escalate_s if escalate_s is not None else wait_s
        self.due_mono = None if delay is None else self.started_mono + delay
        self.bound_s = (delay or 0.0) + 2 * KILL_CONFIRM_S
        """How long the whole operation may take, from its start."""
        self._budget = _WireBudget()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def forgettable(self, now_mono: float) -> bool:
        return self.finished_mono is not None and now_mono - self.finished_mono > KILL_KEEP_S

    # -- outcomes -------------------------------------------------------------------------------------------

    def _outcome(
        self,
        pid: int,
        ticks: Optional[int],
        stat: Optional[ProcStat],
        stage: str,
        signal_name: Optional[str],
        result: str,
        detail: str = "",
    ) -> None:
        details = self._info.get(pid) or {}
        if not details and stat is not None:
            details = self._details.details(stat, time.time())
            self._info[pid] = details
        name = stat.name if stat is not None else details.get("name")
        cmdline, truncated = self._budget.take(
            details.get("cmdline") or [],
            bool(details.get("cmdline_truncated")),
            details.get("cmdline_bytes") or 0,
        )
        outcome = {
            "pid": pid,
            "start_ticks": ticks,
            "name": name,
            "user": details.get("user"),
            "cmdline": cmdline,
            "cmdline_truncated": truncated,
            "gpu_mib": self.agent.gpu_mib_of(pid),
            "stage": stage,
            "signal": signal_name,
            "result": result,
            "detail": detail,
        }
        with self._lock:
            self._outcomes.append(outcome)

    def _remember(self, stat: ProcStat) -> None:
        """Read who a process is before it is signalled (a dead one has no cmdline left)."""
        if stat.pid not in self._info:
            details = self._details.details(stat, time.time())
            details["name"] = stat.name
            self._info[stat.pid] = details

    def reply(self, since: int) -> Dict[str, Any]:
        """The outcomes from index ``since`` on, what is still pending, and whether the operation is done."""
        done = self.done  # read first: outcomes added before it is set are all in the copy below
        with self._lock:
            outcomes = list(self._outcomes)
        ended = self.finished_mono if done and self.finished_mono is not None else time.monotonic()
        return {
            "op": self.op_id,
            "outcomes": outcomes[since:],
            "count": len(outcomes),
            "done": done,
            "pending": [] if done else self._pending(),
            "escalate_s": self.escalate_s,
            "wait_s": self.wait_s,
            "elapsed_s": round(ended - self.started_mono, 3),
        }

    def _pending(self) -> List[Dict[str, Any]]:
        """Each signalled process still alive: what will happen to it (KILL, or a look) and in how long."""
        with self._lock:
            watched = list(self._sent)
            escalating = self._escalating
        due_in_s = None if self.due_mono is None else max(0.0, self.due_mono - time.monotonic())
        pending = []  # type: List[Dict[str, Any]]
        for pid, ticks in watched:
            if not _alive(pid, ticks):
                continue
            details = self._info.get(pid) or {}
            pending.append(
                {
                    "pid": pid,
                    "start_ticks": ticks,
                    "name": details.get("name"),
                    "signal": "KILL" if self.escalate_s is not None else None,
                    "due_in_s": 0.0 if escalating else due_in_s,
                }
            )
        return pending

    # -- the operation --------------------------------------------------------------------------------------

    def start(self, targets: List[Tuple[int, Optional[int]]], boot_id: Optional[str]) -> None:
        """Check and signal every target (children first); start the rest of the operation when needed."""
        try:
            self._signal_targets(targets, boot_id)
        except BaseException:
            self._finished()
            raise
        if self._sent or self._zombies:
            threading.Thread(target=self._run, name="gputui-kill-%d" % self.op_id, daemon=False).start()
        else:
            self._finished()

    def _finished(self) -> None:
        self.finished_mono = time.monotonic()
        self._done.set()

    def wait(self, timeout_s: Optional[float]) -> bool:
        """Wait until done or ``timeout_s`` passed (None: as long as the operation is bounded to take)."""
        if timeout_s is None:
            timeout_s = max(0.0, self.started_mono + self.bound_s + 1.0 - time.monotonic())
        return self._done.wait(timeout_s)

    def abandon(self) -> None:
        """Cancel the escalation (or the wait) unless it is under way already, then wait for the report."""
        with self._lock:
            if not self._escalating:
                self._cancel.set()
        self.wait(None)

    def _signal_targets(self, targets: List[Tuple[int, Optional[int]]], boot_id: Optional[str]) -> None:
        table = scan_proc()
        if self.agent.read_only:
            for pid, ticks in targets:
                read_only = "read-only: nothing is signalled"
                self._outcome(pid, ticks, table.get(pid), STAGE_CHECK, None, RESULT_REFUSED, read_only)
            return
        if boot_id is not None and self.agent.boot_id is not None and boot_id != self.agent.boot_id:
            for pid, ticks in targets:
                self._outcome(
                    pid,
                    ticks,
                    None,
                    STAGE_CHECK,
                    None,
                    RESULT_CHANGED,
                    "process changed: the host rebooted since it was listed (boot id differs)",
                )
            return
        me = os.getpid()
        self._protected = {1, me}
        self._protected.update(ancestors_of(me))
        try:
            self._my_group = os.getpgid(0)
        except OSError:
            self._my_group = -1

        ordered = []  # type: List[Tuple[int, int]]
        asked_zombies = []  # type: List[ProcStat]
        for pid, ticks in targets:
            stat = table.get(pid)
            if ticks is None:
                # Without its start time a pid may name any process by now: never signal a bare pid.
                self._outcome(
                    pid,
                    None,
                    stat,
                    STAGE_CHECK,
                    None,
                    RESULT_REFUSED,
                    "no start time given: the process's identity cannot be checked",
                )
                continue
            if stat is None:
                self._outcome(pid, ticks, None, STAGE_CHECK, None, RESULT_GONE, "no such process")
                continue
            if stat.start_ticks != ticks:
                self._outcome(
                    pid,
                    ticks,
                    stat,
                    STAGE_CHECK,
                    None,
                    RESULT_CHANGED,
                    "process changed: pid %d now belongs to another process" % pid,
                )
                continue
            if (pid, ticks) in self._queued:
                continue  # a listed member its root's tree already holds
            refusal = self._refusal(stat)
            if refusal is not None:
                # A refused root is never expanded: the tree of pid 1 or of the agent's own ancestors is the
                # whole host.
                self._queued.add((pid, ticks))
                self._outcome(pid, ticks, stat, STAGE_CHECK, None, RESULT_REFUSED, refusal)
                continue
            if stat.state == "Z":
                asked_zombies.append(stat)
                continue
            members = self._tree_members(pid, table) if self.tree else []
            for member in members + [pid]:
                member_stat = table[member]
                key = (member, member_stat.start_ticks)
                if key in self._queued:
                    continue
                self._queued.add(key)
                if member_stat.state == "Z":
                    self._zombies[key] = member_stat.ppid
                else:
                    ordered.append(key)
        signalled_pids = set(pid for pid, _ in ordered)
        for stat in asked_zombies:
            key = (stat.pid, stat.start_ticks)
            if key in self._queued:
                continue
            self._queued.add(key)
            if stat.ppid in signalled_pids:
                self._zombies[key] = stat.ppid
            else:
                parent = table.get(stat.ppid)
                self._outcome(
                    stat.pid,
                    stat.start_ticks,
                    stat,
                    STAGE_CHECK,
                    None,
                    RESULT_REFUSED,
                    "zombie: cannot be killed; signal its parent %d (%s)"
                    % (stat.ppid, parent.name if parent is not None else "?"),
                )

        self._members = set(ordered) | set(self._zombies)
        for pid, _ticks in self._members:
            self._remember(table[pid])
        for pid, ticks in ordered:
            self._send(table[pid], ticks, self.signo, self.signal_name, STAGE_SIGNAL)
        if self.tree:
            self._groups = set(pid for pid, _ in self._members if table[pid].pgrp == pid)
            self._signal_joiners(self.signo, self.signal_name, STAGE_SIGNAL)

    def _send(
        self,
        stat: ProcStat,
        ticks: int,
        signo: int,
        signal_name: str,
        stage: str,
        detail: str = "",
    ) -> bool:
        """Signal one process after the refusal checks and record the outcome; True when it was sent."""
        refusal = self._refusal(stat)
        if refusal is not None:
            self._outcome(stat.pid, ticks, stat, STAGE_CHECK, None, RESULT_REFUSED, refusal)
            return False
        result, why = send_signal_checked(stat.pid, ticks, signo)
        if result == RESULT_SENT and stat.state == "D":
            why = "in uninterruptible sleep (D): it may not die until its I/O completes"
        detail = "; ".join(text for text in (detail, why) if text)
        self._outcome(stat.pid, ticks, stat, stage, signal_name, result, detail)
        if result == RESULT_SENT and stage == STAGE_SIGNAL:
            with self._lock:
                self._sent.append((stat.pid, ticks))
        return result == RESULT_SENT

    def _signal_joiners(self, signo: int, signal_name: str, stage: str) -> List[Tuple[int, int]]:
        """Signal what joined the job since it was listed; returns those that were sent the signal.

        Members of the process groups the job's members led, and children of live members, that this
        operation has not seen yet: a fork between the listing and the signal, which init adopts once its
        parent dies. Zombies among them are left to whoever reaps them.
        """
        table = scan_proc()
        children = children_map(table)
        found = [stat for stat in table.values() if stat.pgrp in self._groups]
        for pid, ticks in list(self._members):
            member = table.get(pid)
            if member is not None and member.start_ticks == ticks:
                found.extend(table[child] for child in children.get(pid, ()))
        sent = []  # type: List[Tuple[int, int]]
        for stat in found:
            key = (stat.pid, stat.start_ticks)
            if key in self._queued or stat.pid in (0, 1, 2) or stat.ppid == 2 or stat.state in ("Z", "X"):
                continue
            self._queued.add(key)
            self._members.add(key)
            self._remember(stat)
            joined = "joined the job after it was listed"
            if self._send(stat, stat.start_ticks, signo, signal_name, stage, joined):
                sent.append(key)
        return sent

    def _run(self) -> None:
        """The rest of the operation, on its own thread."""
        try:
            self._watch_and_escalate()
        except Exception as exc:  # a bug must not leave the operation pending forever: report it
            with self._lock:
                watched = list(self._sent)
            error = "%s: %s" % (type(exc).__name__, exc)
            for pid, ticks in watched:
                self._outcome(pid, ticks, None, STAGE_WAIT, None, RESULT_ERROR, error)
        finally:
            self._finished()

    def _watch_and_escalate(self) -> None:
        escalating = self.escalate_s is not None
        delay = self.escalate_s if self.escalate_s is not None else self.wait_s
        with self._lock:
            sent = list(self._sent) if delay is not None else []
        zombies = dict(self._zombies)
        if delay is None:  # nothing to watch but the zombies of the job: see them reaped
            delay = KILL_CONFIRM_S
        left = _wait_gone(sent, delay, self._cancel, reaped=list(zombies))
        self._report_gone(sent, zombies, left, STAGE_WAIT, "gone after %s" % self.signal_name)
        sent = [key for key in sent if key in left]
        zombies = dict((key, parent) for key, parent in zombies.items() if key in left)
        with self._lock:
            cancelled = self._cancel.is_set()
            self._escalating = escalating and not cancelled
        if cancelled:
            for pid, ticks in sent:
                if escalating:
                    detail = "alive after %s; KILL not sent: the escalation was abandoned" % self.signal_name
                    self._outcome(pid, ticks, read_stat(pid), STAGE_ABANDON, None, RESULT_ABANDONED, detail)
                else:
                    self._still_alive(pid, ticks, STAGE_WAIT, None, "still alive after %s" % self.signal_name)
            self._report_zombies_left(zombies, STAGE_ABANDON)
            return
        if not escalating:
            for pid, ticks in sent:
                self._still_alive(
                    pid, ticks, STAGE_WAIT, None, "still alive %g s after %s" % (delay, self.signal_name)
                )
            self._report_zombies_left(zombies, STAGE_WAIT)
            return
        killed = []  # type: List[Tuple[int, int]]
        for pid, ticks in sent:
            stat = read_stat(pid)
            if stat is None or stat.start_ticks != ticks or stat.state in ("Z", "X"):
                gone = "gone after " + self.signal_name
                self._outcome(pid, ticks, None, STAGE_WAIT, None, RESULT_EXITED, gone)
                continue
            escalated = "still alive after %g s: escalated" % delay
            if self._send(stat, ticks, signal.SIGKILL, "KILL", STAGE_ESCALATE, escalated):
                killed.append((pid, ticks))
        if self.tree:
            killed.extend(self._signal_joiners(signal.SIGKILL, "KILL", STAGE_ESCALATE))
        left = _wait_gone(killed, KILL_CONFIRM_S, reaped=list(zombies))
        for pid, ticks in killed:
            if (pid, ticks) not in left:
                self._outcome(pid, ticks, None, STAGE_CONFIRM, "KILL", RESULT_KILLED, "gone after KILL")
            else:
                self._still_alive(pid, ticks, STAGE_CONFIRM, "KILL", "still alive after KILL")
        self._report_gone([], zombies, left, STAGE_CONFIRM, "")
        self._report_zombies_left(dict((k, p) for k, p in zombies.items() if k in left), STAGE_CONFIRM)

    def _report_gone(
        self,
        sent: List[Tuple[int, int]],
        zombies: Dict[Tuple[int, int], int],
        left: Set[Tuple[int, int]],
        stage: str,
        detail: str,
    ) -> None:
        for pid, ticks in sent:
            if (pid, ticks) not in left:
                self._outcome(pid, ticks, None, stage, None, RESULT_EXITED, detail)
        for (pid, ticks), parent in zombies.items():
            if (pid, ticks) not in left:
                reaped = "reaped with its parent %d" % parent
                self._outcome(pid, ticks, None, stage, None, RESULT_REAPED, reaped)

    def _report_zombies_left(self, zombies: Dict[Tuple[int, int], int], stage: str) -> None:
        for (pid, ticks), parent in zombies.items():
            stat = read_stat(pid)
            holder = stat.ppid if stat is not None else parent
            self._outcome(
                pid,
                ticks,
                stat,
                stage,
                None,
                RESULT_STILL_ALIVE,
                "still a zombie: its parent %d has not reaped it" % holder,
            )

    def _still_alive(self, pid: int, ticks: int, stage: str, signal_name: Optional[str], detail: str) -> None:
        stat = read_stat(pid)
        if stat is not None and stat.state == "D":
            self._outcome(
                pid,
                ticks,
                stat,
                stage,
                signal_name,
                RESULT_UNINTERRUPTIBLE,
                "in uninterruptible sleep (D): it may not die until its I/O completes",
            )
        else:
            self._outcome(pid, ticks, stat, stage, signal_name, RESULT_STILL_ALIVE, detail)

    # -- what may be signalled ------------------------------------------------------------------------------

    def _tree_members(self, root: int, table: Dict[int, ProcStat]) -> List[int]:
        """Descendants of ``root`` by ppid and members of groups led by any of them, deepest first.

        Never expands through pid 1, kernel threads or a protected process (the agent and its ancestors).
        """
        children = children_map(table)
        groups = {}  # type: Dict[int, List[int]]
        for stat in table.values():
            groups.setdefault(stat.pgrp, []).append(stat.pid)
        depth = {root: 0}
        frontier = [root]
        while frontier:
            nxt = []  # type: List[int]
            for pid in frontier:
                # Group members whose middle parent died were reparented away: the group still ties them.
                related = list(children.get(pid, ())) + [m for m in groups.get(pid, ()) if m != pid]
                for member in related:
                    if member in depth or member in (0, 1, 2):
                        continue
                    depth[member] = depth[pid] + 1
                    if member not in self._protected:
                        nxt.append(member)
            frontier = nxt
        members = [pid for pid in depth if pid != root]
        members.sort(key=lambda pid: (-depth[pid], pid))
        return members

    def _refusal(self, stat: ProcStat) -> Optional[str]:
        pid = stat.pid
        if pid == 1:
            return "pid 1 (init) is never signalled"
        if pid == 2 or stat.ppid == 2:
            return "kernel thread: not signalled"
        if pid == self.agent.pid or pid == os.getpid():
            return "this is the gputui agent itself"
        if pid in self._protected:
            return "this is an ancestor of the gputui agent (its session or terminal)"
        # Not the whole session: a server started with `cmd &` from the shell gputui runs in shares that
        # session (in a process group of its own) and must stay killable. Its ancestors are protected above.
        if stat.pgrp == self._my_group and self._my_group > 0:
            return "this process is in the gputui agent's own process group"
        return None


def _alive(pid: int, ticks: int) -> bool:
    """Whether the process (pid, start_ticks) still exists and has not exited (a zombie counts as gone)."""
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == ticks and stat.state not in ("Z", "X")


def _present(pid: int, ticks: int) -> bool:
    """Whether the process (pid, start_ticks) is still in the process table, as a zombie too."""
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == ticks


def _wait_gone(
    procs: List[Tuple[int, int]],
    timeout_s: float,
    cancel: Optional[threading.Event] = None,
    reaped: Iterable[Tuple[int, int]] = (),
) -> Set[Tuple[int, int]]:
    """Poll until every process is gone, ``timeout_s`` passed or ``cancel`` is set; returns those still there.

    ``procs`` are gone once they exited (a zombie counts as gone); ``reaped`` (zombies already) once reaped.
    """
    zombies = set(reaped)

    def there(proc: Tuple[int, int]) -> bool:
        return _present(*proc) if proc in zombies else _alive(*proc)

    deadline = time.monotonic() + timeout_s
    left = set(p for p in list(procs) + list(zombies) if there(p))
    while left and time.monotonic() < deadline:
        pause = min(KILL_POLL_S, max(0.0, deadline - time.monotonic()))
        if cancel is not None:
            if cancel.wait(pause):
                break
        else:
            time.sleep(pause)
        left = set(p for p in left if there(p))
    return set(p for p in left if there(p))


def send_signal_checked(pid: int, start_ticks: int, signo: int) -> Tuple[str, str]:
    """Signal ``pid`` only if it is still the process that started at ``start_ticks``.

    With a pidfd the identity check happens after the pidfd is open, so the pid cannot be reused between the
    check and the signal; without one (old kernels, Python 3.8) a small window remains between them.

    Returns:
        (result, detail) with result one of sent, gone, changed, denied, error.
    """
    pidfd = None  # type: Optional[int]
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return "gone", "no such process"
        except OSError:
            pidfd = None  # no pidfd support in this kernel: plain kill below
    try:
        stat = read_stat(pid)
        if stat is None:
            return "gone", "no such process"
        if stat.start_ticks != start_ticks:
            return "changed", "process changed: pid %d now belongs to another process" % pid
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signo)
            else:
                os.kill(pid, signo)
        except ProcessLookupError:
            return "gone", "exited before the signal"
        except PermissionError:
            return "denied", "permission denied (process of another user)"
        except OSError as exc:
            return "error", "%s: %s" % (type(exc).__name__, exc.strerror or exc)
        return "sent", ""
    finally:
        if pidfd is not None:
            os.close(pidfd)


# ----------------------------------------------------------------------------------------------------
# Remote form


class _Writer(object):
    """Writes JSON lines from several threads, one whole line at a time.

    Under ``python3 -u`` stdout is a raw file, whose ``write`` may take only part of the data (a signal
    arriving mid-write, a non-blocking descriptor): the rest is written until the whole line, newline
    included, is out. A lost tail would glue this line to the next one on the client.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.broken = False

    def write(self, message: Dict[str, Any]) -> bool:
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
            "utf-8", "backslashreplace"
        )
        with self.lock:
            if self.broken:
                return False
            try:
                view = memoryview(data)
                while view:
                    written = self.stream.write(view)
                    if written is None:  # a non-blocking descriptor that is full: wait until it drains
                        _wait_writable(self.stream)
                        continue
                    view = view[written:]
                self.stream.flush()
            except (OSError, ValueError):
                self.broken = True
                return False
        return True


def _wait_writable(stream: Any) -> None:
    try:
        select.select([], [stream.fileno()], [], 1.0)
    except (OSError, ValueError, AttributeError):
        time.sleep(0.01)


def elide_unchanged_processes(snapshot: Dict[str, Any]) -> Dict[str, Any]:
    """``snapshot`` without its process lists, marked ``"processes_same": true``.

    For a stream line whose ``processes_time`` is that of a line already sent: the client takes the lists
    over from that line (``model.HostSnapshot.from_dict``). A memory sample then costs ~3 KB, not ~7 KB
    plus ~0.4 KB per listed process, to send and to parse.
    """
    out = dict(snapshot)
    del out["processes"]
    out["processes_same"] = True
    out["gpus"] = [{k: v for k, v in gpu.items() if k != "processes"} for gpu in snapshot["gpus"]]
    return out


CLIENT_WATCH_S = 0.5
"""How often the remote form checks that its parent (sshd's session process) is still there."""
LEAVE_CLOSE_S = 3.0
"""Longest the exit path waits for the collector's threads and child processes (nvidia-smi) to stop."""
PR_SET_PDEATHSIG = 1


class ClientSession(object):
    """The remote form's tie to its client: noticing that the client is gone, and the one way out.

    The client is gone when stdin ends (at any stage, before the hello too: the reader starts before the
    collector does), stdout breaks, the client says ``quit``, or the parent (sshd's session process) exits.
    prctl's PR_SET_PDEATHSIG turns the parent's exit into SIGTERM where Linux offers it, and a watch on the
    parent pid every ``CLIENT_WATCH_S`` catches it everywhere (the collector is reparented); SIGTERM and
    SIGHUP count as gone too. Then ``leave`` is the only way out: confirmed work finishes first (a kill's
    escalation, bounded by its own delay), the collector stops its threads and child processes, and the
    process exits, its child processes with it. The watch runs ``leave`` on a thread of its own, so a main
    thread stuck anywhere (a hung driver call, a read of a D-state process's /proc files) never keeps a
    collector alive after its client.

    Commands read from stdin wait in ``commands`` (None after the last) until ``serve`` takes them.
    """

    def __init__(self, stdin_binary: Any) -> None:
        self.stdin = stdin_binary
        self.commands = queue.Queue()  # type: queue.Queue
        self.gone = threading.Event()
        self.wake = threading.Event()
        """Set when the sampling loop should look again: a changed interval, or the client gone."""
        self.reason = None  # type: Optional[str]
        self.agent = None  # type: Optional[Agent]
        self._parent = os.getppid()
        self._signalled = None  # type: Optional[int]  # set by the signal handler, which may take no lock
        self._pending = []  # type: List[Tuple[threading.Thread, float]]
        self._leaving = threading.Lock()

    def start(self) -> None:
        self._arm_parent_death()
        for signo in (signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(signo, self._on_signal)
            except (ValueError, OSError):  # not the main thread, or no such signal here
                pass
        threading.Thread(target=self._read, name="gputui-stdin", daemon=True).start()
        threading.Thread(target=self._watch, name="gputui-client-watch", daemon=True).start()

    @staticmethod
    def _arm_parent_death() -> None:
        """Ask Linux for SIGTERM when the parent exits (a parent gone before this is caught by the watch)."""
        if not sys.platform.startswith("linux"):
            return
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError, ImportError):
            pass

    def _on_signal(self, signo: int, _frame: Any) -> None:
        self._signalled = signo

    def client_gone(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.gone.set()
        self.wake.set()

    def pending(self, thread: threading.Thread, bound_s: float) -> None:
        """Work the client confirmed (a kill, its escalation) that ``leave`` lets finish, for ``bound_s``."""
        self._pending.append((thread, time.monotonic() + bound_s))

    def _read(self) -> None:
        try:
            for raw in iter(self.stdin.readline, b""):
                line = raw.strip()
                if line:
                    self.commands.put(line)
        except (OSError, ValueError):
            pass
        finally:
            self.commands.put(None)
            self.client_gone("stdin closed")

    def _watch(self) -> None:
        while not self.gone.wait(CLIENT_WATCH_S):
            if self._signalled is not None:
                self.client_gone("signal %d" % self._signalled)
            elif os.getppid() != self._parent:
                self.client_gone("parent exited")
        self.leave()

    def leave(self, status: int = 0) -> None:
        """The one exit path once the client is gone: finish confirmed work, stop, exit. Never returns.

        The first caller does it (the watch, or the main thread when ``serve`` returns); a second waits
        until the process exits under it.
        """
        with self._leaving:
            for thread, deadline in list(self._pending):
                thread.join(max(0.0, deadline - time.monotonic()))
            agent = self.agent
            if agent is not None:
                # A confirmed escalation runs to its end, bounded by its own delay and confirmation.
                agent.wait_for_escalations()
                closer = threading.Thread(target=agent.close, name="gputui-close", daemon=True)
                closer.start()
                closer.join(LEAVE_CLOSE_S)
            # A child still running (an nvidia-smi being started, or one hung in the driver) would outlive
            # the collector: nothing of it may stay behind.
            for child in read_children(os.getpid()):
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os._exit(status)


def serve(session: ClientSession, stdout_binary: Any, agent: Agent, elide_unchanged: bool = False) -> None:
    """The remote loop: hello, then a snapshot every ``memory_interval_s``; commands handled meanwhile.

    Commands come from ``session.commands``; each of ``KILL_COMMANDS`` runs on its own thread (an
    escalation takes seconds) while the others are answered in order. Returns once the client is gone
    (``session.gone``): EOF, ``quit`` or a broken stdout; ``ClientSession.leave`` then lets the kill
    operations under way finish (``Agent.wait_for_escalations``). With ``elide_unchanged``, a snapshot
    line whose process lists are the ones the previous line carried leaves them out
    (``elide_unchanged_processes``).
    """
    writer = _Writer(stdout_binary)
    sent_processes_time = None  # type: Optional[float]

    def run_command(command: Dict[str, Any]) -> None:
        writer.write(agent.handle(command))

    def dispatch() -> None:
        while True:
            line = session.commands.get()
            if line is None:
                return
            try:
                command = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                writer.write({"t": "reply", "id": None, "ok": False, "error": "not a JSON line"})
                continue
            name = command.get("cmd") if isinstance(command, dict) else None
            if name == "quit":
                writer.write(agent.handle(command))
                session.client_gone("quit")
                return
            if name in KILL_COMMANDS:
                thread = threading.Thread(
                    target=run_command, args=(command,), name="gputui-kill", daemon=True
                )
                thread.start()
                escalate_s = _finite_positive(command.get("escalate_s")) or 0.0
                session.pending(thread, min(escalate_s, ESCALATE_MAX_S) + KILL_CONFIRM_S + 5.0)
                continue
            run_command(command)
            if name == "configure":
                session.wake.set()

    if not writer.write(agent.hello()):
        session.client_gone("stdout closed")
        return
    threading.Thread(target=dispatch, name="gputui-commands", daemon=True).start()
    while not session.gone.is_set():
        started = time.monotonic()
        try:
            snapshot = agent.sample()
        except Exception as exc:  # a collector bug must not end the stream: report it as the host's error
            snapshot = agent.error_snapshot("collector error: %s: %s" % (type(exc).__name__, exc))
        listed_at = snapshot.get("processes_time")
        if elide_unchanged and listed_at is not None and listed_at == sent_processes_time:
            snapshot = elide_unchanged_processes(snapshot)
        sent_processes_time = listed_at
        if not writer.write({"t": "snapshot", "snapshot": snapshot}):
            session.client_gone("stdout closed")
            return
        while not session.gone.is_set():
            left = started + agent.memory_interval_s - time.monotonic()
            if left <= 0:
                break
            session.wake.wait(left)
            session.wake.clear()


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gputui-agent", description="gputui collector (JSON lines on stdio)"
    )
    parser.add_argument("--target", default="local")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--interval", type=float, default=1.0, help="memory sample interval, seconds")
    parser.add_argument(
        "--process-interval", type=float, default=3.0, help="process sample interval, seconds"
    )
    parser.add_argument(
        "--telemetry-interval",
        type=float,
        default=TELEMETRY_INTERVAL_S,
        help="seconds between utilisation/temperature/power reads (0: every sample)",
    )
    parser.add_argument(
        "--health", action="append", default=[], metavar="URL", help="health URL to probe (repeatable)"
    )
    parser.add_argument(
        "--health-generate",
        action="store_true",
        help="also probe generating endpoints (/health_generate), at most every %g s"
        % HEALTH_GENERATE_MIN_INTERVAL_S,
    )
    parser.add_argument("--no-discover", action="store_true", help="do not probe launchers' /health URLs")
    parser.add_argument(
        "--no-psutil", action="store_true", help="read /proc directly even if psutil is present"
    )
    parser.add_argument("--no-pynvml", action="store_true", help="use nvidia-smi even if pynvml is present")
    parser.add_argument("--once", action="store_true", help="print one full snapshot as JSON and exit")
    parser.add_argument(
        "--elide-unchanged",
        action="store_true",
        help="leave unchanged process lists out of stream lines (the client keeps the last ones)",
    )
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the remote form; returns the exit status (the served form exits in ``leave``)."""
    args = build_arg_parser().parse_args(argv)
    for name in ("interval", "process_interval"):
        if seconds_in_range(getattr(args, name), INTERVAL_MIN_S, INTERVAL_MAX_S) is None:
            sys.stderr.write(
                "gputui-agent: --%s must be a number of seconds from %g to %g\n"
                % (name.replace("_", "-"), INTERVAL_MIN_S, INTERVAL_MAX_S)
            )
            return 2
    if not (_finite_positive(args.telemetry_interval) is not None or args.telemetry_interval == 0):
        sys.stderr.write("gputui-agent: --telemetry-interval must be 0 or a positive number\n")
        return 2
    session = None  # type: Optional[ClientSession]
    if not args.once:
        # Before anything slow (NVML's start-up, nvidia-smi's first block): a client gone already is noticed.
        session = ClientSession(getattr(sys.stdin, "buffer", sys.stdin))
        session.start()
    try:
        agent = Agent(
            target=args.target,
            read_only=args.read_only,
            memory_interval_s=args.interval,
            process_interval_s=args.process_interval,
            health_urls=args.health,
            discover_health=not args.no_discover,
            health_generate=args.health_generate,
            use_psutil=not args.no_psutil,
            use_pynvml=not args.no_pynvml,
            telemetry_interval_s=args.telemetry_interval,
        )
    except ValueError as exc:
        sys.stderr.write("gputui-agent: %s\n" % exc)
        return 2
    stdout = getattr(sys.stdout, "buffer", sys.stdout)
    if session is None:
        try:
            _Writer(stdout).write(agent.sample(force_processes=True))
            return 0
        finally:
            agent.close()
    session.agent = agent
    try:
        serve(session, stdout, agent, elide_unchanged=args.elide_unchanged)
    except KeyboardInterrupt:
        session.client_gone("interrupted")
    session.leave()
    return 0  # not reached: leave() exits


if __name__ == "__main__":
    sys.exit(main())
