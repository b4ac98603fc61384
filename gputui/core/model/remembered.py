"""What a collector remembers of its host since boot (``agent.proc.jobmemory``), read off the wire.

The GPU jobs it saw that hold no GPU memory any more, each with its members still there, and the GPUs it
listed before that it does not list now. Every field is checked and bounded on the way in: the collector
may not be gputui's.
"""

from __future__ import annotations

from gputui.core.model.owner import Owner
from gputui.core.model.record import Record
from gputui.core.model.wire import opt_float, opt_int, opt_safe, ports_of
from gputui.core.text import SafeText

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_JOBS = 8
MAX_MEMBERS = 512
MAX_GPUS = 64
MAX_SEGMENTS = 32
MAX_DAEMONS = 4
MAX_REPORTS = 4
MAX_PROFILERS = 8


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _pairs(value: Any, limit: int) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for item in _list(value):
        if len(out) >= limit:
            break
        if isinstance(item, list) and len(item) == 2:
            first, second = opt_int(item[0]), opt_int(item[1])
            if first is not None and second is not None:
                out.append((first, second))
    return tuple(out)


def _file_identity(data: Any) -> tuple[SafeText, int, int, int, int] | None:
    """(path, dev, inode, uid, size in bytes) of a file's identity as the collector sent it (``procfs
    .file_identity``); None where one is missing or negative."""
    if not isinstance(data, dict):
        return None
    path = opt_safe(data.get("path"))
    numbers = [opt_int(data.get(key)) for key in ("dev", "inode", "uid", "size_bytes")]
    if not path or any(n is None or n < 0 for n in numbers):
        return None
    dev, inode, uid, size = (int(n) for n in numbers)  # type: ignore[arg-type]
    return path, dev, inode, uid, size


class RememberedSegment(Record):
    """A /dev/shm segment or semaphore a job's members had open or mapped, by its identity (what
    ``gputui leftovers`` checks again before it removes anything)."""

    path: SafeText
    dev: int
    inode: int
    uid: int
    size_bytes: int
    kind: str = "segment"
    user: SafeText | None = None

    @classmethod
    def from_dict(cls, data: Any) -> RememberedSegment | None:
        identity = _file_identity(data)
        if identity is None:
            return None
        kind = "semaphore" if data.get("kind") == "semaphore" else "segment"
        return cls(*identity, kind, opt_safe(data.get("user")))


class RememberedDaemon(Record):
    """An MPS control daemon of a job's user, by pid and start time."""

    pid: int
    start_ticks: int
    uid: int
    user: SafeText | None = None

    @classmethod
    def from_dict(cls, data: Any) -> RememberedDaemon | None:
        if not isinstance(data, dict):
            return None
        pid, ticks, uid = (opt_int(data.get(key)) for key in ("pid", "start_ticks", "uid"))
        if pid is None or pid <= 1 or ticks is None or uid is None:
            return None
        return cls(pid, ticks, uid, opt_safe(data.get("user")))


class RememberedReport(Record):
    """A killed profiler's unfinished report: its raw stream (``path``, a ``.qdstrm``) by its identity, and
    the report (``report``, the ``.nsys-rep``) that was never written."""

    path: SafeText
    dev: int
    inode: int
    uid: int
    size_bytes: int
    report: SafeText | None = None

    @classmethod
    def from_dict(cls, data: Any) -> RememberedReport | None:
        identity = _file_identity(data)
        if identity is None:
            return None
        return cls(*identity, opt_safe(data.get("report")))


class RememberedJob(Record):
    """A GPU job the collector saw that holds no GPU memory any more (its fields are named as on the wire, so
    that ``plain`` of it reads back the same).

    Attributes:
        root: The pid of the job's root as it was seen; ``root_start``: its start ticks.
        name: The root's name; ``user``: its owner's name; ``owner``: whose job it was.
        first_seen: When the collector first saw it; ``released``: when it first saw it hold no GPU memory
            (epoch seconds, the host's clock).
        gpus: (GPU index, the most MiB the job was seen to hold there).
        ports: TCP ports its members listened on.
        segments: Its /dev/shm segments that are still there (the same file).
        mps: Its users' MPS control daemons that still run.
        reports: Its profilers' reports left unfinished (a raw stream, no report).
        profilers: (pid, start ticks) of its members that are profilers (``nsys``, its agent, ``ncu``) and
            are still there.
        members_total: How many processes it was seen to have.
        remaining: (pid, start ticks) of its members still there (running or defunct); ``unseen``: pids that
            exist but could not be read (another user's, hidden): neither gone nor known to be the job's.
    """

    root: int
    root_start: int | None = None
    name: SafeText | None = None
    user: SafeText | None = None
    owner: Owner | None = None
    first_seen: float | None = None
    released: float | None = None
    gpus: tuple[tuple[int, int], ...] = ()
    ports: tuple[int, ...] = ()
    segments: tuple[RememberedSegment, ...] = ()
    mps: tuple[RememberedDaemon, ...] = ()
    members_total: int = 0
    remaining: tuple[tuple[int, int], ...] = ()
    unseen: tuple[int, ...] = ()
    reports: tuple[RememberedReport, ...] = ()
    profilers: tuple[tuple[int, int], ...] = ()

    @property
    def gone(self) -> int:
        """How many of its members are gone (never fewer than none)."""
        return max(0, self.members_total - len(self.remaining) - len(self.unseen))

    @classmethod
    def from_dict(cls, data: Any) -> RememberedJob | None:
        if not isinstance(data, dict):
            return None
        root = opt_int(data.get("root"))
        if root is None or root <= 1:
            return None
        remaining = tuple(pair for pair in _pairs(data.get("remaining"), MAX_MEMBERS) if pair[0] > 1)
        unseen_raw = _list(data.get("unseen"))
        unseen = tuple(p for p in map(opt_int, unseen_raw[:MAX_MEMBERS]) if p is not None and p > 1)
        owner = data.get("owner")
        return cls(
            root=root,
            root_start=opt_int(data.get("root_start")),
            name=opt_safe(data.get("name")),
            user=opt_safe(data.get("user")),
            owner=Owner.from_dict(owner) if isinstance(owner, dict) else None,
            first_seen=opt_float(data.get("first_seen")),
            released=opt_float(data.get("released")),
            gpus=tuple(pair for pair in _pairs(data.get("gpus"), MAX_GPUS) if pair[0] >= 0 and pair[1] >= 0),
            ports=ports_of(data.get("ports")) or (),
            segments=tuple(
                seg
                for seg in map(RememberedSegment.from_dict, _list(data.get("segments"))[:MAX_SEGMENTS])
                if seg
            ),
            mps=tuple(filter(None, map(RememberedDaemon.from_dict, _list(data.get("mps"))[:MAX_DAEMONS]))),
            members_total=min(
                1 << 20, max(len(remaining) + len(unseen), opt_int(data.get("members_total")) or 0)
            ),
            remaining=remaining,
            unseen=unseen,
            reports=tuple(
                filter(None, map(RememberedReport.from_dict, _list(data.get("reports"))[:MAX_REPORTS]))
            ),
            profilers=tuple(
                pair for pair in _pairs(data.get("profilers"), MAX_PROFILERS) if pair in remaining
            ),
        )


class GoneGpu(Record):
    """A GPU the collector listed before in this boot and does not list now."""

    uuid: SafeText
    pci_bus_id: SafeText | None = None
    index: int | None = None
    last_seen: float | None = None

    @classmethod
    def from_dict(cls, data: Any) -> GoneGpu | None:
        if not isinstance(data, dict):
            return None
        uuid = opt_safe(data.get("uuid"))
        if not uuid:
            return None
        return cls(
            uuid=uuid,
            pci_bus_id=opt_safe(data.get("pci_bus_id")),
            index=opt_int(data.get("index")),
            last_seen=opt_float(data.get("last_seen")),
        )


class Remembered(Record):
    """What the collector remembers of its host since boot.

    Attributes:
        since: When it started remembering in this boot (None: it has seen nothing to remember).
        jobs_seen: How many GPU jobs it remembers (0: none seen since boot).
        jobs: The jobs that hold no GPU memory any more, most recently released first.
        gpus_gone: GPUs listed before and not now.
        warning: Why its record is not kept (it then remembers only while it runs).
    """

    since: float | None = None
    jobs_seen: int = 0
    jobs: tuple[RememberedJob, ...] = ()
    gpus_gone: tuple[GoneGpu, ...] = ()
    warning: SafeText | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Remembered | None:
        if not isinstance(data, dict):
            return None
        jobs_raw = _list(data.get("jobs"))
        gpus_raw = _list(data.get("gpus_gone"))
        jobs = tuple(j for j in map(RememberedJob.from_dict, jobs_raw[:MAX_JOBS]) if j is not None)
        return cls(
            since=opt_float(data.get("since")),
            jobs_seen=max(len(jobs), min(1 << 20, max(0, opt_int(data.get("jobs_seen")) or 0))),
            jobs=jobs,
            gpus_gone=tuple(g for g in map(GoneGpu.from_dict, gpus_raw[:MAX_GPUS]) if g is not None),
            warning=opt_safe(data.get("warning")),
        )
