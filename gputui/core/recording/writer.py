"""Writing a recording (``record.format``) on a thread of its own, so the sampling never waits on a disk.

``RecordingWriter.sample`` and ``.event`` only put the value in a bounded queue (what a full queue cannot
take is counted and said, never waited for); the writer's thread turns samples into dicts, redacts their
command lines, diffs them against the host's sample before (``record.delta``), compresses and appends each
record in one write, and syncs the file every ``SYNC_EVERY_S``.

The file is bounded: without a ring it stops at ``max_bytes`` (one line says so); as a ring (``--max-mib``,
``--max-age``) its head is cut when it grows past the size or age: the records from a point on (each host
from its first whole sample after that point) are copied to a new file that replaces it, so the file is
whole at every moment.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time

from gputui import __version__
from gputui.agent import safefile
from gputui.agent.argv_secrets import redact_argv
from gputui.core.model import replace
from gputui.core.recording import format as fmt
from gputui.core.recording.delta import SAME, diff

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from gputui.core.model import HostSnapshot

KEYFRAME_EVERY = 60
"""Every this many samples of a host, one is written whole: seeking decodes at most this many deltas."""
SYNC_EVERY_S = 2.0
"""The file is synced at least this often while records come (a power loss loses at most this much)."""
QUEUE_MAX = 4096
"""Samples and events waiting for the writer; beyond, new ones are counted as dropped."""
STOP_AT_BYTES = 512 << 20
"""A recording that is no ring stops at this size (what ``replay`` reads at most)."""
RING_KEEP = 0.75
"""A ring cut by size keeps this share of its limit, so it is not cut again at the next record."""
AGE_SLACK_S = 60.0
"""A ring cut by age is cut once its oldest record is this much older than the limit."""
RECORDINGS_FOLDER = "recordings"
"""Under gputui's state folder: where the TUI's ``w`` records, and where ``bundle`` looks for one."""
SUFFIX = ".gtrec"
_STOP = object()


def recordings_folder() -> str:
    """``$XDG_STATE_HOME/gputui/recordings`` (not made here)."""
    return os.path.join(safefile.state_dir(), RECORDINGS_FOLDER)


def new_recording_path(now_s: float) -> str:
    """A new file in ``recordings_folder`` named by the local time (the folder made and checked first).

    Raises:
        fmt.RecordingError: The folder is unsafe or cannot be made (one line).
    """
    folder = recordings_folder()
    try:
        os.close(safefile.open_folder(folder, create=True))
    except safefile.UnsafeFile as exc:
        raise fmt.RecordingError(str(exc)) from None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now_s))
    return os.path.join(folder, f"gputui-{stamp}{SUFFIX}")


def redact_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """``sample`` (``HostSnapshot.to_dict``) with every command line through the collector's redaction."""
    for proc in sample.get("processes") or ():
        if isinstance(proc, dict) and isinstance(proc.get("cmdline"), list):
            proc["cmdline"] = redact_argv([str(word) for word in proc["cmdline"]])
    return sample


def redact_line(line: dict[str, Any]) -> dict[str, Any]:
    """An audit line with its command through the same redaction."""
    command = line.get("command")
    if isinstance(command, list):
        line = dict(line, command=redact_argv([str(word) for word in command]))
    return line


class _Entry:
    """One record in the file: where, when, whose, and its kind (``format.KIND_*``)."""

    __slots__ = ("kind", "length", "offset", "t", "target")

    def __init__(self, offset: int, length: int, t: float, target: str | None, kind: str) -> None:
        self.offset, self.length, self.t, self.target, self.kind = offset, length, t, target, kind


class RecordingWriter:
    """Appends samples and events to a new recording file.

    Args:
        path: The file; it must not exist yet.
        targets: The hosts recorded (the ``start`` record names them).
        interval_s: The sampling interval, for the record.
        max_bytes: With ``ring``: the size the file is kept under; without: where it stops.
        max_age_s: A ring keeping this many seconds (with or without ``max_bytes``).
        clock: Epoch seconds of each record.
        keyframe_every: See ``KEYFRAME_EVERY``.
        blocking: Wait for room in the queue instead of dropping (copying a recording, not sampling).
    """

    def __init__(
        self,
        path: str,
        targets: Sequence[str],
        *,
        interval_s: float | None = None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
        clock: Callable[[], float] = time.time,
        keyframe_every: int = KEYFRAME_EVERY,
        sync_every_s: float = SYNC_EVERY_S,
        blocking: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.ring = max_age_s is not None or max_bytes is not None
        self.max_bytes = max_bytes if max_bytes is not None else (None if self.ring else STOP_AT_BYTES)
        self.max_age_s = max_age_s
        self._clock = clock
        self._keyframe_every = max(1, keyframe_every)
        self._sync_every_s = sync_every_s
        self._meta: dict[str, Any] = {
            "k": fmt.KIND_START,
            "gputui": __version__,
            "python": sys.version.split()[0],
            "targets": list(targets),
            "interval_s": interval_s,
            "keyframe_every": self._keyframe_every,
        }
        self._queue: queue.Queue[Any] = queue.Queue(QUEUE_MAX)
        self._blocking = blocking
        self._fd = -1
        self._size = 0
        self._entries: list[_Entry] = []
        self._last: dict[str, dict[str, Any]] = {}
        """Each host's last sample as written (what its next delta is taken against)."""
        self._since_key: dict[str, int] = {}
        self._procs: dict[str, dict[int, tuple[Any, dict[str, Any]]]] = {}
        """Per host, the dict made of each process object of its last sample (by identity)."""
        self._thread: threading.Thread | None = None
        self.samples = 0
        """Samples written."""
        self.dropped = 0
        """Samples and events the queue could not take."""
        self.stopped: str | None = None
        """Why the writer stopped before ``close`` (the size cap, a write that failed), one line."""

    # -- the caller's side (any thread) ---------------------------------------------------------------

    def start(self) -> None:
        """Create the file and start the writer's thread.

        Raises:
            fmt.RecordingError: The file exists or cannot be made (one line).
        """
        flags = (
            os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        )
        try:
            self._fd = os.open(self.path, flags, 0o600)  # it holds command lines: the owner's alone
        except FileExistsError:
            raise fmt.RecordingError(f"{self.path}: exists already (name a new file)") from None
        except OSError as exc:
            raise fmt.RecordingError(f"{self.path}: cannot create ({exc.strerror or exc})") from None
        try:
            self._write_raw(fmt.header())
            self._append(dict(self._meta, t=self._clock()), None)
        except OSError as exc:
            os.close(self._fd)
            raise fmt.RecordingError(f"{self.path}: cannot write ({exc.strerror or exc})") from None
        self._thread = threading.Thread(target=self._run, name="recording", daemon=True)
        self._thread.start()

    def sample(self, target: str, snapshot: HostSnapshot, at_s: float | None = None) -> None:
        """Record one host sample as it was received (analysed: findings, verdict, server states)."""
        self._put(("s", target, snapshot, self._clock() if at_s is None else at_s))

    def event(
        self,
        kind: str,
        text: str,
        target: str | None = None,
        data: dict[str, Any] | None = None,
        at_s: float | None = None,
    ) -> None:
        """Record something that happened beside the samples (``format.EVENT_*``)."""
        self._put(("e", target, (kind, text, data), self._clock() if at_s is None else at_s))

    def _put(self, item: tuple[Any, ...]) -> None:
        if self.stopped is not None or self._thread is None:
            return
        try:
            self._queue.put(item, block=self._blocking)
        except queue.Full:
            self.dropped += 1

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, an ``end`` record, sync and close (waits at most ``timeout_s``)."""
        thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            pass
        thread.join(timeout_s)
        self._thread = None

    @property
    def size_bytes(self) -> int:
        return self._size

    # -- the writer's thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        synced_s = time.monotonic()
        dirty = False
        while True:
            try:
                item = self._queue.get(timeout=self._sync_every_s)
            except queue.Empty:
                item = None
            if item is _STOP:
                break
            if item is not None and self.stopped is None:
                try:
                    self._take(item)
                    dirty = True
                except OSError as exc:
                    self.stopped = f"{self.path}: cannot write ({exc.strerror or exc}): recording stopped"
                except (TypeError, ValueError) as exc:  # a value JSON cannot hold: that record only
                    self.dropped += 1
                    del exc
            if dirty and time.monotonic() - synced_s >= self._sync_every_s:
                self._sync()
                synced_s, dirty = time.monotonic(), False
        if self.stopped is None:
            try:
                self._append({"k": fmt.KIND_END, "t": self._clock()}, None)
            except OSError:
                pass
        self._sync()
        os.close(self._fd)

    def _sync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError:
            pass

    def _take(self, item: tuple[Any, ...]) -> None:
        kind, target, value, at_s = item
        if kind == "e":
            event, text, data = value
            if event == fmt.EVENT_AUDIT and isinstance(data, dict):
                data = redact_line(data)
            record = {"k": fmt.KIND_EVENT, "t": at_s, "h": target, "e": event, "text": text, "data": data}
            self._append(record, target)
            return
        sample = self._as_dict(target, value)
        count = self._since_key.get(target, 0)
        previous = self._last.get(target)
        change = None if previous is None or count >= self._keyframe_every else diff(previous, sample)
        if change is None:
            record = {"k": fmt.KIND_KEY, "t": at_s, "h": target, "s": sample}
            self._since_key[target] = 1
        else:
            record = {
                "k": fmt.KIND_DELTA,
                "t": at_s,
                "h": target,
                "p": {"o": {}} if change is SAME else change,
            }
            self._since_key[target] = count + 1
        self._append(record, target)
        self._last[target] = sample
        self.samples += 1
        self._bound(at_s)

    def _as_dict(self, target: str, snapshot: HostSnapshot) -> dict[str, Any]:
        """``snapshot.to_dict()`` redacted; a process the host's last sample had as the same object (its list
        was not read anew) keeps the dict made of it then, so a list of thousands is not made again."""
        known = self._procs.get(target, {})
        procs = snapshot.processes
        sample = replace(snapshot, processes=()).to_dict()
        made: dict[int, tuple[Any, dict[str, Any]]] = {}
        listed = []
        for proc in procs:
            hit = known.get(id(proc))
            if hit is not None and hit[0] is proc:
                data = hit[1]
            else:
                data = redact_sample({"processes": [proc.to_dict()]})["processes"][0]
            made[id(proc)] = (proc, data)
            listed.append(data)
        sample["processes"] = listed
        self._procs[target] = made
        return sample

    def _append(self, record: dict[str, Any], target: str | None) -> None:
        data = fmt.encode(record)
        if not self.ring and self.max_bytes is not None and self._size + len(data) > self.max_bytes:
            self.stopped = f"{self.path}: reached {self.max_bytes >> 20} MiB: recording stopped"
            return
        offset = self._size
        self._write_raw(data)
        self._entries.append(_Entry(offset, len(data), float(record.get("t") or 0.0), target, record["k"]))

    def _write_raw(self, data: bytes) -> None:
        written = os.write(self._fd, data)
        if written != len(data):  # a full disk: the torn tail is cut again, the file stays whole
            os.ftruncate(self._fd, self._size)
            raise OSError(28, "no space left on the device")
        self._size += written

    # -- the ring ---------------------------------------------------------------------------------------

    def _bound(self, now_s: float) -> None:
        """Cut the ring's head when it is over its size or age."""
        if not self.ring or len(self._entries) < 2:
            return
        body = self._entries[1:]  # the start record stays
        cut_t: float | None = None
        if self.max_age_s is not None and body[0].t < now_s - self.max_age_s - AGE_SLACK_S:
            cut_t = now_s - self.max_age_s
        if self.max_bytes is not None and self._size > self.max_bytes:
            keep = int(self.max_bytes * RING_KEEP)
            tail = self._size
            for entry in reversed(body):
                if tail - entry.offset > keep:
                    cut_t = max(cut_t or entry.t, entry.t)
                    break
        if cut_t is not None:
            self._cut(cut_t)

    def _cut(self, cut_t: float) -> None:
        """Keep the records from ``cut_t`` on, each host from its first whole sample: a new file renamed over
        this one, written through a descriptor the writer keeps."""
        started: set[str] = set()
        kept: list[_Entry] = []
        for entry in self._entries[1:]:
            if entry.t < cut_t:
                continue
            if entry.kind == fmt.KIND_DELTA and entry.target not in started:
                continue  # a delta whose whole sample was cut away
            if entry.kind == fmt.KIND_KEY and entry.target is not None:
                started.add(entry.target)
            kept.append(entry)
        folder = os.path.dirname(os.path.abspath(self.path))
        temporary = os.path.join(folder, f".{os.path.basename(self.path)}.{os.urandom(6).hex()}.tmp")
        flags = (
            os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        )
        fd = os.open(temporary, flags, 0o600)
        try:
            start = fmt.encode(dict(self._meta, t=kept[0].t if kept else cut_t, cut=True))
            head = fmt.header() + start
            entries = [
                _Entry(len(fmt.header()), len(start), kept[0].t if kept else cut_t, None, fmt.KIND_START)
            ]
            size = len(head)
            os.write(fd, head)
            for entry in kept:
                data = os.pread(self._fd, entry.length, entry.offset)
                os.write(fd, data)
                entries.append(_Entry(size, entry.length, entry.t, entry.target, entry.kind))
                size += entry.length
            os.fsync(fd)
            os.replace(temporary, self.path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
        os.close(self._fd)
        self._fd, self._size, self._entries = fd, size, entries
        self._since_key = {target: self._keyframe_every for target in self._since_key}
