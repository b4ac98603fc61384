"""Xid events from the kernel log: ``/dev/kmsg`` read without blocking, ``dmesg`` where it cannot be opened.

The NVIDIA driver logs every Xid as ``NVRM: Xid (PCI:DDDD:BB:DD): N, <detail>``; older drivers leave out the
``PCI:``. A line is matched to a GPU by its PCI address compared as integers (domain, bus, device), never as
text (NVML says ``00000000:17:00.0``, the log ``0000:17:00``). The log also says when the driver was loaded
(``NVRM: loading NVIDIA UNIX ...``): Xids from before the last load belong to a driver that is gone. An Xid
154 that says the recovery action is now ``None`` marks a GPU as recovered (reset) at that moment.

``/dev/kmsg`` is opened once and kept: each read returns the records logged since the last one, so a
collector that started before a fault sees it live too. Unreadable (not root with ``dmesg_restrict``, a
container without the device), ``dmesg`` is run instead, bounded; both failing, the reason is kept and said
once per host ("Xid history unavailable: ..."), never taken for "no Xid".

``GPUTUI_TEST_KERNEL_LOG`` names a file read instead of the machine's kernel log (the test suite's source,
in ``/dev/kmsg`` record or ``dmesg`` line format); every collector the suite starts reads it.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time

from gputui.agent.pci import pci_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

TEST_SOURCE_ENV = "GPUTUI_TEST_KERNEL_LOG"
"""A file read in place of the kernel log (tests only)."""
KMSG_PATH = "/dev/kmsg"
DMESG_TIMEOUT_S = 3.0
MAX_RECORDS_PER_READ = 50000
"""Records taken from /dev/kmsg in one read round (its ring holds far fewer): bounds a round's time."""
MAX_SOURCE_BYTES = 8 << 20
"""What is read of ``dmesg``'s output or of the test source."""
MAX_EVENTS = 256
"""Xid events kept per host, newest last (older ones dropped)."""
DETAIL_MAX = 160

_DMESG_TIME_RE = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]\s?(.*)$")
_KMSG_RE = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
# The patterns below meet only driver lines, Xid events and errors: kept as text, compiled by re (and kept in
# its cache) the first time one is used, so a host whose log holds none never compiles them.
_XID = (
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?\):"
    r" ?(\d{1,5})(?:,\s*(.*))?$"
)
_DRIVER_LOAD = "NVRM: loading NVIDIA UNIX"
# "GPU has fallen off the bus" without an Xid number: one line (``NVRM: GPU 0000:91:00.0: GPU has fallen
# off the bus.``, older ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.``) or three (``NVRM: The NVIDIA
# GPU 0000:18:00.0`` / ``(PCI ID: …) installed in this system has`` / ``fallen off the bus and is not
# responding``).
_FALLEN = "fallen off the bus"
_PCI = r"([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)"
_FALLEN_ONE_LINE = r"NVRM: GPU (?:at )?" + _PCI + r":? (?:GPU )?has fallen"
_FALLEN_FIRST_LINE = r"NVRM: The NVIDIA GPU " + _PCI + r"\s*$"
XID_FALLEN_OFF_THE_BUS = 79
FALLEN_DETAIL = "GPU has fallen off the bus (logged without an Xid number)"
SAME_EVENT_S = 5.0
"""A bare "fallen off the bus" line this close to an Xid 79 of the same GPU is that Xid's own line."""
_RECOVERED = r"(?i)recovery action changed from .* to 0x0\b"
_KMSG_ESCAPE = r"\\x([0-9a-fA-F]{2})"
"""How /dev/kmsg writes a byte below 0x20, above 0x7e, or a backslash, in a record's text."""
_FIGURES = r"0x[0-9A-Fa-f]+|\d+"
_UNSAFE = r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"


def _unescape(match: re.Match[str]) -> str:
    return chr(int(match.group(1), 16))


def _clean(text: str) -> str:
    return re.sub(_UNSAFE, "?", text)[:DETAIL_MAX]


class KernelLog:
    """The Xid lines (and driver loads, recoveries) of this boot's kernel log.

    Attributes:
        source: Where they were read: ``/dev/kmsg``, ``dmesg``, ``test:<path>``; None before the first read.
        error: Why no source could be read (the last round), else None.
        events: ``{"pci": (d, b, dev), "xid": N, "time": epoch s or None, "detail": str}``, oldest first.
        driver_load_time: Epoch seconds of the last driver load the log shows, else None.
        recovered: PCI key -> epoch seconds of the last Xid 154 that cleared its recovery action.
    """

    def __init__(self, test_path: str | None = None) -> None:
        self.test_path = test_path if test_path is not None else os.environ.get(TEST_SOURCE_ENV) or None
        self.source: str | None = None
        self.error: str | None = None
        self.events: list[dict[str, Any]] = []
        self.driver_load_time: float | None = None
        self.recovered: dict[tuple[int, int, int], float] = {}
        self._kmsg_fd: int | None = None
        self._kmsg_failed: str | None = None
        self._named_gpu: tuple[tuple[int, int, int], float | None] | None = None
        """The GPU a three-line "fallen off the bus" message named on its first line, until the third."""

    def read(self) -> None:
        """Take what the log says now (never blocks longer than ``DMESG_TIMEOUT_S``); never raises."""
        self._read()
        self.events = newest_kept(self.events, MAX_EVENTS)

    def _read(self) -> None:
        if self.test_path is not None:
            self._read_file(self.test_path)
            return
        if self._kmsg_failed is None:
            problem = self._read_kmsg()
            if problem is None:
                return
            self._kmsg_failed = problem
        self._read_dmesg(self._kmsg_failed)

    # -- sources ---------------------------------------------------------------------------------------------

    def _reset(self) -> None:
        self.events = []
        self.driver_load_time = None
        self.recovered = {}
        self._named_gpu = None

    def _read_file(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | os.O_NOFOLLOW)
        except OSError as exc:
            self.error = f"{path}: {exc.strerror or exc}"
            return
        try:
            import stat

            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self.error = f"{path}: not a regular file"
                return
            data = os.read(fd, MAX_SOURCE_BYTES)
        except OSError as exc:
            self.error = f"{path}: {exc.strerror or exc}"
            return
        finally:
            os.close(fd)
        self._reset()
        self.source = "test:" + path
        self.error = None
        offset = _boot_epoch()
        for line in data.decode("utf-8", "replace").splitlines():
            self._take_line(line, offset)

    def _read_kmsg(self) -> str | None:
        """Read the records logged since the last read; returns why /dev/kmsg cannot be read, else None."""
        if self._kmsg_fd is None:
            try:
                self._kmsg_fd = os.open(KMSG_PATH, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                return f"{KMSG_PATH}: {exc.strerror or exc}"
        offset = _boot_epoch()
        for _ in range(MAX_RECORDS_PER_READ):
            try:
                record = os.read(self._kmsg_fd, 16384)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before they were read: go on
                    continue
                os.close(self._kmsg_fd)
                self._kmsg_fd = None
                return f"{KMSG_PATH}: {exc.strerror or exc}"
            if not record:
                break
            self._take_line(record.decode("utf-8", "replace").split("\n", 1)[0], offset)
        self.source = KMSG_PATH
        self.error = None
        return None

    def _read_dmesg(self, kmsg_problem: str) -> None:
        from gputui.agent.gpu.tools import which

        dmesg = which("dmesg")
        if dmesg is None:
            self.error = f"{kmsg_problem}; dmesg: not found"
            return
        try:
            proc = subprocess.run(  # noqa: S603 - a fixed argv, nothing from data
                [dmesg],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=DMESG_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.error = f"{kmsg_problem}; dmesg: timed out"
            return
        except OSError as exc:
            self.error = f"{kmsg_problem}; dmesg: {exc.strerror or exc}"
            return
        if proc.returncode != 0:
            said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            why = _clean(said[-1]) if said else f"exit status {proc.returncode}"
            self.error = f"{kmsg_problem}; {why if why.startswith('dmesg') else 'dmesg: ' + why}"
            return
        self._reset()
        self.source = "dmesg"
        self.error = None
        offset = _boot_epoch()
        for line in proc.stdout[:MAX_SOURCE_BYTES].decode("utf-8", "replace").splitlines():
            self._take_line(line, offset)

    def close(self) -> None:
        if self._kmsg_fd is not None:
            os.close(self._kmsg_fd)
            self._kmsg_fd = None

    # -- lines ---------------------------------------------------------------------------------------------

    def _take_line(self, line: str, boot_epoch: float) -> None:
        """One kmsg record (``prio,seq,usec,flags;text``) or dmesg line (``[  12.345] text``)."""
        when: float | None = None
        kmsg = _KMSG_RE.match(line)
        if kmsg is not None:
            when = boot_epoch + int(kmsg.group(3)) / 1e6
            text = kmsg.group(4)
            if "\\x" in text and "NVRM:" in text:
                # /dev/kmsg writes a record's control bytes and backslashes as \xNN: a message the driver
                # printed over several lines in one call ("The NVIDIA GPU …\x0aNVRM: (PCI ID: …) …") is one
                # record, taken here line by line as dmesg prints it.
                for part in re.sub(_KMSG_ESCAPE, _unescape, text).split("\n"):
                    self._take_text(part, when)
                return
        else:
            stamped = _DMESG_TIME_RE.match(line)
            if stamped is not None:
                when = boot_epoch + float(stamped.group(1))
                text = stamped.group(2)
            else:
                text = line
        self._take_text(text, when)

    def _take_text(self, text: str, when: float | None) -> None:
        """One line's text (its stamp taken off): a driver load, an Xid, or a bare line that says a GPU is
        gone."""
        if "NVRM:" not in text:
            return
        if _DRIVER_LOAD in text:
            self.driver_load_time = when if when is not None else time.time()
            return
        if "Xid" not in text:
            self._take_bare_line(text, when)
            return
        match = re.search(_XID, text.rstrip())
        if match is None:
            return  # a foreign or malformed line
        key = pci_key(":".join(match.group(1, 2, 3)))
        if key is None:
            return
        xid = int(match.group(4))
        detail = _clean(match.group(5) or "")
        if xid == 154 and re.search(_RECOVERED, detail) and when is not None:
            self.recovered[key] = when
        self._add(key, xid, when, detail)

    def _take_bare_line(self, text: str, when: float | None) -> None:
        """A line without an Xid number that still says a GPU is gone: "fallen off the bus" (Xid 79's
        meaning), in its one-line and three-line forms."""
        first = re.search(_FALLEN_FIRST_LINE, text)
        if first is not None:
            key = pci_key(first.group(1))
            self._named_gpu = None if key is None else (key, when)
            return
        if _FALLEN not in text:
            return
        one = re.search(_FALLEN_ONE_LINE, text)
        if one is not None:
            key = pci_key(one.group(1))
        elif self._named_gpu is not None:
            key, named_when = self._named_gpu
            when = when if when is not None else named_when
        else:
            return
        self._named_gpu = None
        if key is None or self._logged_just_before(key, XID_FALLEN_OFF_THE_BUS, when):
            return
        self._add(key, XID_FALLEN_OFF_THE_BUS, when, FALLEN_DETAIL)

    def _logged_just_before(self, key: tuple[int, int, int], xid: int, when: float | None) -> bool:
        """Whether the last events already hold this Xid for this GPU, moments before (or undated)."""
        for event in reversed(self.events[-8:]):
            if event["pci"] != key or event["xid"] != xid:
                continue
            if when is None or event["time"] is None or abs(when - event["time"]) < SAME_EVENT_S:
                return True
        return False

    def _add(self, key: tuple[int, int, int], xid: int, when: float | None, detail: str) -> None:
        self.events.append({"pci": key, "xid": xid, "time": when, "detail": detail})
        if len(self.events) > 2 * MAX_EVENTS:
            self.events = newest_kept(self.events, MAX_EVENTS)


def event_kind(event: dict[str, Any]) -> tuple[Any, ...]:
    """What makes an Xid event another kind of event than its neighbours: its GPU, its number, whether a reset
    cleared it, and the shape of its detail with the figures left out (Xid 149 ``Fatal`` and ``Nonfatal``
    differ, the hundredth Xid 13 of one fault does not)."""
    shape = re.sub(_FIGURES, "#", event.get("detail") or "")[:48]
    return (event.get("pci"), event.get("index"), event.get("xid"), event.get("cleared") is None, shape)


def newest_kept(
    events: list[dict[str, Any]], limit: int, kind: Callable[[dict[str, Any]], Any] = event_kind
) -> list[dict[str, Any]]:
    """At most ``limit`` of these events (oldest first), the newest of each kind kept first: a flood of one
    Xid never pushes out the one line that says a GPU needs a reset."""
    if len(events) <= limit:
        return events
    newest: dict[Any, int] = {}
    for at, event in enumerate(events):
        newest[kind(event)] = at
    keep = set(sorted(newest.values())[-limit:])
    for at in range(len(events) - 1, -1, -1):
        if len(keep) >= limit:
            break
        keep.add(at)
    return [event for at, event in enumerate(events) if at in keep]


def _boot_epoch() -> float:
    """Epoch seconds of the kernel log's zero: printk stamps, like CLOCK_MONOTONIC, count from boot."""
    return time.time() - time.monotonic()
