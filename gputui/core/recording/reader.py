"""Reading a recording back: its samples by host and time, its events, and the moments of its timeline.

``Recording.load`` reads the file through the safe opener (a regular file, never a FIFO or a device, at most
``READ_MAX_BYTES``), checks its header, and walks every record once: it keeps where each host's samples are
(a sample is rebuilt on demand from the whole one before it and the deltas since), the events, what each
process held on each GPU (``memory``), and the moments worth seeking to: a verdict that changed, a server
state that changed, a finding that appeared, a reboot, a host error, a kill, an audit line. A file cut or
damaged in the middle reads up to the damage, and ``damage`` says where in one line.

Everything read is machine text from a file anyone could have written: samples go through
``HostSnapshot.from_dict`` (every string made visible, figures checked), event texts through ``visible``.
"""

from __future__ import annotations

import bisect
import os

from gputui.agent.safefile import UnsafeFile, read_plain
from gputui.core.model import WINDOW_S, Gpu, GpuHistory, HostSnapshot, Proc, ProcMemo, Record, replace
from gputui.core.recording import format as fmt
from gputui.core.recording.delta import PatchError, patch
from gputui.core.recording.memory import ProcessMemory
from gputui.core.text import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

READ_MAX_BYTES = (512 << 20) + (1 << 20)
"""The largest recording read: what a recorder without a ring stops at, and a little more."""
MOMENTS_MAX = 20_000
"""Moments kept for the time bar and ``--timeline`` (a flapping state would make one a second)."""
TEXT_MAX = 300

MOMENT_START = "start"
MOMENT_VERDICT = "verdict"
MOMENT_STATE = "server"
MOMENT_FINDING = "finding"
MOMENT_REBOOT = "reboot"
MOMENT_ERROR = "error"
MOMENT_KILL = "kill"
MOMENT_AUDIT = "audit"
MOMENT_NOTE = "note"


class Moment(Record):
    """Something to seek to: when (recorder epoch seconds), on which host, what kind, and one line."""

    t: float
    target: str | None
    kind: str
    text: str


class Event(Record):
    """An ``event`` record as read: kind (``format.EVENT_*``), host, one line and its details (visible)."""

    t: float
    target: str | None
    kind: str
    text: str
    data: Any = None


class _Ref:
    __slots__ = ("key", "offset", "t")

    def __init__(self, t: float, offset: int, key: bool) -> None:
        self.t, self.offset, self.key = t, offset, key


class Recording:
    """A recording read into memory (use ``load``).

    Attributes:
        path: The file.
        version: Its format version.
        meta: Its ``start`` record (gputui version, targets, interval), strings made visible.
        targets: The hosts it has samples of, in the order they first appear.
        events: Every event, in file order.
        moments: The timeline, in time order.
        memory: Per host, what each process held on each GPU over the whole recording.
        damage: Where and why the reading stopped before the end of the file (one line), or None.
        closed: The recorder closed it cleanly (an ``end`` record).
    """

    def __init__(self, path: str, data: bytes, version: int) -> None:
        self.path = path
        self.version = version
        self._data = data
        self.meta: dict[str, Any] = {}
        self.targets: list[str] = []
        self.events: list[Event] = []
        self.moments: list[Moment] = []
        self.memory: dict[str, ProcessMemory] = {}
        self.damage: str | None = None
        self.closed = False
        self._refs: dict[str, list[_Ref]] = {}
        self._times: dict[str, list[float]] = {}
        self._cache: dict[str, tuple[int, dict[str, Any]]] = {}
        self._memos: dict[str, ProcMemo] = {}
        """Per host, the processes of the last sample read (a delta copies the entries that did not
        change)."""
        self._lists: dict[str, tuple[list[Any], tuple[Proc, ...]]] = {}
        """Per host, the last process list read and its ``Proc``s."""
        self._figures: dict[str, list[tuple[float | None, tuple[Gpu, ...]]]] = {}
        """Per host and sample: its time on the host's clock and its GPUs' figures (for the history)."""

    # -- loading -----------------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Recording:
        """Read and index the recording at ``path``.

        Raises:
            fmt.RecordingError: It cannot be read, is no recording, is of a newer version, or holds no
                sample at all (one line naming the file).
        """
        name = visible(os.fspath(path), 200)
        try:
            data = read_plain(path, READ_MAX_BYTES)
        except UnsafeFile as exc:
            raise fmt.RecordingError(visible(str(exc), 300)) from None
        if data is None:
            raise fmt.RecordingError(f"{name}: no such file")
        offset = fmt.check_header(data, name)
        recording = cls(name, data, fmt.VERSION)
        recording._scan(offset)
        if not recording.targets:
            why = f" ({recording.damage})" if recording.damage else ""
            raise fmt.RecordingError(f"{name}: holds no sample{why}")
        return recording

    def _scan(self, offset: int) -> None:
        current: dict[str, dict[str, Any]] = {}
        tracker = _Moments(self.moments)
        for at, record in fmt.frames(self._data, offset):
            if isinstance(record, str):
                self.damage = f"{self.path}: {record} at byte {at}: read up to it"
                return
            kind = record.get("k")
            t = record.get("t")
            if not isinstance(t, (int, float)) or isinstance(t, bool) or t != t or abs(t) > 1e11:
                self.damage = f"{self.path}: a record without a time at byte {at}: read up to it"
                return
            t = float(t)
            if kind == fmt.KIND_START:
                if not self.meta:
                    self.meta = _visible_meta(record)
                    tracker.add(t, None, MOMENT_START, "recording starts")
            elif kind == fmt.KIND_END:
                self.closed = True
            elif kind == fmt.KIND_EVENT:
                self._event(t, record, tracker)
            elif kind in (fmt.KIND_KEY, fmt.KIND_DELTA):
                problem = self._sample(t, at, kind, record, current, tracker)
                if problem is not None:
                    self.damage = f"{self.path}: {problem} at byte {at}: read up to it"
                    return

    def _sample(
        self,
        t: float,
        at: int,
        kind: str,
        record: dict[str, Any],
        current: dict[str, dict[str, Any]],
        tracker: _Moments,
    ) -> str | None:
        target = record.get("h")
        if not isinstance(target, str) or not target:
            return "a sample without a host"
        if kind == fmt.KIND_KEY:
            sample = record.get("s")
        else:
            before = current.get(target)
            if before is None:
                return None  # a ring's delta whose whole sample was cut: nothing to build it on
            try:
                sample = patch(before, record.get("p"))
            except (PatchError, RecursionError):
                return "a delta that does not fit its sample"
        if not isinstance(sample, dict):
            return "a sample that is no object"
        try:
            snapshot = self._parse(target, sample)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError, OverflowError):
            return "a sample that does not read"
        refs = self._refs.setdefault(target, [])
        if refs and t < refs[-1].t:
            t = refs[-1].t  # a clock step back: kept in file order
        refs.append(_Ref(t, at, kind == fmt.KIND_KEY))
        self._times.setdefault(target, []).append(t)
        current[target] = sample
        if target not in self.targets:
            self.targets.append(target)
        self.memory.setdefault(target, ProcessMemory()).record(snapshot)
        figures = tuple(
            Gpu(
                index=g.index,
                memory_used_mib=g.memory_used_mib,
                utilization_pct=g.utilization_pct,
                power_w=g.power_w,
                temperature_c=g.temperature_c,
            )
            for g in snapshot.gpus
            if g.error is None
        )
        self._figures.setdefault(target, []).append((snapshot.time, figures))
        tracker.sample(t, target, snapshot)
        return None

    def _parse(self, target: str, sample: dict[str, Any]) -> HostSnapshot:
        """``HostSnapshot.from_dict(sample)``, with the ``Proc`` of every process entry that is the same as in
        the host's sample before (``ProcMemo``) taken over instead of made again: a list of thousands is read
        once, not once a sample."""
        entries = sample.get("processes")
        if not isinstance(entries, list) or not entries:
            return HostSnapshot.from_dict(sample)
        last = self._lists.get(target)
        if last is not None and last[0] is entries:  # the list itself unchanged: a sample between two reads
            return replace(HostSnapshot.from_dict(dict(sample, processes=[])), processes=last[1])
        snapshot = HostSnapshot.from_dict(sample, memo=self._memos.setdefault(target, ProcMemo()))
        self._lists[target] = (entries, snapshot.processes)
        return snapshot

    def _event(self, t: float, record: dict[str, Any], tracker: _Moments) -> None:
        target = record.get("h")
        target = visible(target, 200) if isinstance(target, str) else None
        kind = visible(record.get("e"), 40) if isinstance(record.get("e"), str) else "?"
        text = visible(record.get("text"), TEXT_MAX) if isinstance(record.get("text"), str) else ""
        from gputui.core.text import visible_tree

        try:
            data = visible_tree(record.get("data"))
        except RecursionError:
            data = None
        self.events.append(Event(t, target, kind, text, data))
        moment = {
            fmt.EVENT_KILL: MOMENT_KILL,
            fmt.EVENT_AUDIT: MOMENT_AUDIT,
            fmt.EVENT_ERROR: MOMENT_ERROR,
            fmt.EVENT_NOTE: MOMENT_NOTE,
        }.get(kind)
        if moment is not None:
            tracker.add(t, target, moment, text)

    # -- reading -----------------------------------------------------------------------------------------

    @property
    def start_s(self) -> float:
        return min(times[0] for times in self._times.values())

    @property
    def end_s(self) -> float:
        return max(times[-1] for times in self._times.values())

    def count(self, target: str) -> int:
        """How many samples of ``target`` the recording holds."""
        return len(self._refs.get(target, ()))

    def times(self, target: str) -> list[float]:
        """When each sample of ``target`` was recorded, in order."""
        return self._times.get(target, [])

    def index_at(self, target: str, at_s: float) -> int | None:
        """The last sample of ``target`` recorded at or before ``at_s`` (None: none yet)."""
        index = bisect.bisect_right(self._times.get(target, []), at_s) - 1
        return index if index >= 0 else None

    def snapshot(self, target: str, index: int) -> HostSnapshot:
        """Sample ``index`` of ``target``, as gputui received it."""
        return self._parse(target, self._rebuild(target, index))

    def snapshot_at(self, target: str, at_s: float) -> HostSnapshot | None:
        """The sample of ``target`` shown at ``at_s`` (the last one recorded by then)."""
        index = self.index_at(target, at_s)
        return None if index is None else self.snapshot(target, index)

    def samples(self, target: str) -> list[HostSnapshot]:
        """Every sample of ``target``, in order (for a whole-file check; ``snapshot`` seeks one)."""
        return [self.snapshot(target, index) for index in range(self.count(target))]

    def _rebuild(self, target: str, index: int) -> dict[str, Any]:
        refs = self._refs[target]
        start = index
        while not refs[start].key:
            start -= 1
        cached = self._cache.get(target)
        if cached is not None and start <= cached[0] <= index:
            start, sample = cached
        else:
            sample = self._record(refs[start].offset)["s"]
        for step in range(start + 1, index + 1):
            sample = patch(sample, self._record(refs[step].offset)["p"])
        self._cache[target] = (index, sample)
        return sample

    def _record(self, offset: int) -> dict[str, Any]:
        for _at, record in fmt.frames(self._data, offset):
            if isinstance(record, dict):
                return record
            break
        raise fmt.RecordingError(f"{self.path}: a record changed under the reader at byte {offset}")

    def history_at(self, target: str, at_s: float) -> GpuHistory:
        """The GPUs' history of ``target`` as the monitor had it at ``at_s``: its last ``WINDOW_S``."""
        history = GpuHistory()
        times = self._times.get(target, [])
        end = bisect.bisect_right(times, at_s)
        start = bisect.bisect_left(times, at_s - WINDOW_S)
        for sample_s, gpus in self._figures.get(target, [])[start:end]:
            history.record(HostSnapshot(target, time=sample_s, gpus=gpus))
        return history

    def moments_between(self, start_s: float, end_s: float) -> list[Moment]:
        """The moments from ``start_s`` to ``end_s`` inclusive."""
        times = [m.t for m in self.moments]
        return self.moments[bisect.bisect_left(times, start_s) : bisect.bisect_right(times, end_s)]


def _visible_meta(record: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key in ("gputui", "python"):
        if isinstance(record.get(key), str):
            meta[key] = visible(record[key], 40)
    targets = record.get("targets")
    if isinstance(targets, list):
        meta["targets"] = [visible(t, 200) for t in targets[:256] if isinstance(t, str)]
    for key in ("interval_s", "keyframe_every"):
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e6:
            meta[key] = value
    meta["cut"] = record.get("cut") is True
    return meta


class _Moments:
    """Follows each host's verdict, server states, findings, boot and error, and notes what changed."""

    def __init__(self, moments: list[Moment]) -> None:
        self._moments = moments
        self._level: dict[str, str | None] = {}
        self._states: dict[str, dict[str, str | None]] = {}
        self._findings: dict[str, set[tuple[str, int | None]]] = {}
        self._boot: dict[str, str | None] = {}
        self._error: dict[str, str | None] = {}

    def add(self, t: float, target: str | None, kind: str, text: str) -> None:
        if len(self._moments) < MOMENTS_MAX:
            moment = Moment(t, target, kind, text)
            if self._moments and t < self._moments[-1].t:
                bisect.insort(self._moments, moment, key=lambda m: m.t)
            else:
                self._moments.append(moment)

    def sample(self, t: float, target: str, snapshot: HostSnapshot) -> None:
        first = target not in self._level
        level = None if snapshot.verdict is None else snapshot.verdict.level
        if first or level != self._level.get(target):
            if level is not None:
                reason = snapshot.verdict.reasons[0] if snapshot.verdict and snapshot.verdict.reasons else ""
                self.add(t, target, MOMENT_VERDICT, f"{level}" + (f": {reason}" if reason else ""))
            self._level[target] = level
        if not first and snapshot.boot_id != self._boot.get(target):
            self.add(t, target, MOMENT_REBOOT, "rebooted (a new boot id)")
        self._boot[target] = snapshot.boot_id
        if snapshot.error != self._error.get(target) and snapshot.error:
            self.add(t, target, MOMENT_ERROR, snapshot.error)
        self._error[target] = snapshot.error
        states = self._states.setdefault(target, {})
        for endpoint in snapshot.endpoints:
            if endpoint.state is not None and states.get(endpoint.url) != endpoint.state:
                before = states.get(endpoint.url)
                change = f"{before} → {endpoint.state}" if before else endpoint.state
                self.add(t, target, MOMENT_STATE, f"{endpoint.url} {change}")
            states[endpoint.url] = endpoint.state
        seen = self._findings.setdefault(target, set())
        now = set()
        for finding in snapshot.findings:
            name = (finding.kind, finding.pid)
            now.add(name)
            if name not in seen:
                self.add(t, target, MOMENT_FINDING, f"{finding.kind}: {finding.detail}")
        self._findings[target] = now
