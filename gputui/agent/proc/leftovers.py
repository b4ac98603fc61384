"""What a killed job may leave behind: its /dev/shm segments and POSIX semaphores, and an MPS control daemon.

Read by the collector on the GPU host (stdlib only, Python 3.8). At kill-plan time ``scan`` records what the
job's processes have open or mapped in /dev/shm (by path, device, inode and owner) and the MPS control
daemons its users run; after the kill ``check`` says which of them still exist, how big they are, who still
has them open or mapped, and how full /dev/shm is. ``remove`` unlinks a segment only after checking, right
before, that it is still the same file (regular, same device, inode and owner, never through a symlink)
and that no process has it open or mapped. An MPS daemon is never stopped here: it is reported, with the
command that stops it, because only its own control pipe can tell whether it still has clients. A killed
profiler's unfinished report (``profiler.unfinished_reports``: a ``.qdstrm`` without its ``.nsys-rep``) is
checked and removed the same way as a segment, in its own folder.
"""

from __future__ import annotations

import os

from gputui.agent.proc.procfs import (
    ProcStat,
    fd_links,
    file_identity,
    mapped_paths,
    read_real_uid,
    read_stat,
)
from gputui.agent.proc.profiler import STREAM_SUFFIX, still_unfinished, unfinished_reports
from gputui.agent.wire import wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Mapping

SHM_DIR = "/dev/shm"  # noqa: S108 - read and checked here, never a place to create files
TEST_SHM_ENV = "GPUTUI_TEST_SHM_DIR"
"""Tests only: the folder taken for /dev/shm (so that a test writes nothing outside its temp dir)."""
MPS_CONTROL = "nvidia-cuda-mps-control"
MPS_COMM = MPS_CONTROL[:15]
"""The kernel keeps 15 characters of a process's name."""
MAX_SEGMENTS = 512
REMOVED = "removed"
GONE = "gone"
CHANGED = "changed"
IN_USE = "in_use"
FAILED = "failed"


def shm_dir() -> str:
    return os.environ.get(TEST_SHM_ENV) or SHM_DIR


def _held_paths(pid: int, folder: str) -> set[str]:
    prefix = folder.rstrip("/") + "/"
    paths = {link for link in fd_links(pid) if link.startswith(prefix)}
    return {p for p in paths | mapped_paths(pid, prefix) if not p.endswith(" (deleted)")}


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _describe(path: str) -> dict[str, Any] | None:
    """A segment's identity and size (``procfs.file_identity``), its name, kind and owner; None for anything
    but a regular file."""
    identity = file_identity(path)
    if identity is None:
        return None
    name = os.path.basename(path)
    return {
        "path": identity["path"],
        "name": wire_text(name, 256),
        "kind": "semaphore" if name.startswith("sem.") else "segment",
        "dev": identity["dev"],
        "inode": identity["inode"],
        "uid": identity["uid"],
        "user": wire_text(_user_name(identity["uid"]), 64),
        "size_bytes": identity["size_bytes"],
    }


def usage() -> dict[str, Any] | None:
    """How full /dev/shm is: total and used bytes; None when it cannot be read."""
    try:
        fs = os.statvfs(shm_dir())
    except OSError:
        return None
    total = fs.f_blocks * fs.f_frsize
    used = (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return {"dir": shm_dir(), "total_bytes": total, "used_bytes": used}


def _mps_daemons(uids: set[int], host: Mapping[int, ProcStat] | None = None) -> list[dict[str, Any]]:
    """The MPS control daemons run by ``uids``: every pid read, or those ``host`` names so, read again."""
    daemons: list[dict[str, Any]] = []
    if host is not None:
        pids = [pid for pid, stat in host.items() if stat.name == MPS_COMM]
    else:
        try:
            pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return daemons
    for pid in pids:
        info = read_stat(pid)
        if info is None or info.name != MPS_COMM:
            continue
        uid = read_real_uid(info.pid)
        if uid is not None and uid in uids:
            daemons.append(
                {
                    "pid": info.pid,
                    "start_ticks": info.start_ticks,
                    "uid": uid,
                    "user": wire_text(_user_name(uid), 64),
                }
            )
    return daemons


def segments_held(pids: Iterable[int], limit: int = MAX_SEGMENTS) -> list[dict[str, Any]]:
    """The /dev/shm segments and semaphores ``pids`` have open or mapped, each described (``_describe``)."""
    folder = shm_dir()
    paths: set[str] = set()
    for pid in pids:
        paths |= _held_paths(pid, folder)
    return [d for d in (_describe(p) for p in sorted(paths)[:limit]) if d is not None]


def scan(pids: Iterable[int]) -> dict[str, Any]:
    """What ``pids`` (a job about to be killed) have open or mapped in /dev/shm, and their users' MPS control
    daemons: ``{"segments": [...], "mps": [...], "shm": usage}``."""
    pids = list(pids)
    uids = {uid for uid in map(read_real_uid, pids) if uid is not None}
    return {"segments": segments_held(pids), "mps": _mps_daemons(uids), "shm": usage()}


def still_there(segments: Iterable[Any]) -> list[dict[str, Any]]:
    """The recorded segments that are still the same file (``_same``: no holder sweep, an lstat each)."""
    return [now for now in (_same(r) for r in segments if isinstance(r, dict)) if now is not None]


def _holders_of(paths: set[str], folder: str) -> dict[str, list[int]]:
    """Every process that has one of ``paths`` open or mapped, by path: one sweep of /proc for them all."""
    held: dict[str, list[int]] = {path: [] for path in paths}
    if not paths:
        return held
    try:
        names = os.listdir("/proc")
    except OSError:
        return held
    for name in names:
        if name.isdigit():
            for path in _held_paths(int(name), folder) & paths:
                held[path].append(int(name))
    return held


def _holders(path: str, folder: str) -> list[int]:
    return _holders_of({path}, folder)[path]


def _same(recorded: dict[str, Any]) -> dict[str, Any] | None:
    path = recorded.get("path")
    if not isinstance(path, str) or os.path.dirname(path) != shm_dir().rstrip("/"):
        return None
    now = _describe(path)
    if now is None:
        return None
    if (now["dev"], now["inode"], now["uid"]) != (
        recorded.get("dev"),
        recorded.get("inode"),
        recorded.get("uid"),
    ):
        return None
    return now


def check(segments: Iterable[Any], mps: Iterable[Any], reports: Iterable[Any] = ()) -> dict[str, Any]:
    """Which recorded leftovers still exist (the same file; the same daemon), with who holds each segment
    and each unfinished report."""
    folder = shm_dir()
    still = still_there(segments)
    holders = _holders_of({now["path"] for now in still}, folder)
    left = [dict(now, open_by=holders[now["path"]]) for now in still]
    unfinished = [dict(now, open_by=_report_holders(now["path"])) for now in still_unfinished(reports)]
    return {"segments": left, "mps": daemons_alive(mps), "shm": usage(), "reports": unfinished}


def _report_holders(path: str) -> list[int]:
    return _holders(path, os.path.dirname(path))


def daemons_alive(mps: Iterable[Any]) -> list[dict[str, Any]]:
    """The recorded MPS control daemons still running (the same pid and start time, the same name)."""
    alive = []
    for daemon in mps:
        if not isinstance(daemon, dict) or not isinstance(daemon.get("pid"), int):
            continue
        info = read_stat(daemon["pid"])
        if info is not None and info.start_ticks == daemon.get("start_ticks") and info.name == MPS_COMM:
            alive.append(daemon)
    return alive


class LiveLooks:
    """Looks at what live jobs may leave behind (``look``), with what one look tells the next.

    A member that had nothing open or mapped in /dev/shm at the last look and has not run since
    (``ProcStat.unmoved_since``) still has nothing there: opening and mapping take running. So a job of
    hundreds of idle members has only the members that ran, or that held something, looked at again; what
    is held is always read afresh (the file at a path may have been replaced meanwhile). Not thread-safe: the
    collector's sampling owns it.
    """

    def __init__(self) -> None:
        self._held_nothing: dict[int, ProcStat] = {}

    def look(
        self,
        pids: Iterable[int],
        max_segments: int,
        stats: Mapping[int, ProcStat],
        uids: Mapping[int, int],
        host: Mapping[int, ProcStat] | None,
    ) -> dict[str, Any]:
        """What a live job may leave behind, looked at while it runs: ``{"segments": [...], "mps": [...]}``.

        Args:
            pids: The job's members.
            stats: Stat lines read this sample (a member without one is looked at in full).
            uids: The real uid of members already read this sample (the others' are read here).
            host: A recent stat line of every process on the host, where the MPS daemons are looked for by
                name (each then read again); None: every pid is read.
        """
        folder = shm_dir()
        paths: set[str] = set()
        members = list(pids)
        for pid in members:
            stat = stats.get(pid)
            was = self._held_nothing.get(pid)
            if stat is not None and was is not None and stat.unmoved_since(was):
                continue
            held = _held_paths(pid, folder)
            paths |= held
            if held or stat is None:
                self._held_nothing.pop(pid, None)
            else:
                self._held_nothing[pid] = stat
        for pid in [p for p in self._held_nothing if p not in stats]:
            del self._held_nothing[pid]
        users = {uids[pid] if pid in uids else read_real_uid(pid) for pid in members}
        segments = [d for d in (_describe(p) for p in sorted(paths)[:max_segments]) if d is not None]
        return {"segments": segments, "mps": _mps_daemons({u for u in users if u is not None}, host)}


def still_left(recorded: dict[str, Any]) -> dict[str, Any]:
    """Which of a job's recorded segments and MPS daemons are still there, and the unfinished reports of the
    outputs its profilers named (no holder sweep)."""
    return {
        "segments": still_there(recorded.get("segments") or ()),
        "mps": daemons_alive(recorded.get("mps") or ()),
        "reports": unfinished_reports(
            recorded.get("outputs") or (),
            recorded.get("uid") if recorded.get("profiled") else None,
            recorded.get("since"),
        ),
    }


def remove(segments: Iterable[Any], read_only: bool, reports: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """Unlink each recorded segment, and each unfinished report's raw stream (``.qdstrm``), that is still the
    same file and that no process has open or mapped; the reports first."""
    if read_only:
        raise PermissionError("read-only mode: nothing is removed")
    folder = shm_dir()
    results = []
    entries = [(r, True) for r in reports] + [(s, False) for s in segments]
    for recorded, is_report in entries:
        if not isinstance(recorded, dict):
            continue
        path = recorded.get("path")
        result = {"path": path, "result": GONE, "detail": ""}
        if is_report and not (
            isinstance(path, str) and path.startswith("/") and path.endswith(STREAM_SUFFIX)
        ):
            result.update(result=CHANGED, detail="not a report's raw stream: left alone")
        elif isinstance(path, str) and os.path.lexists(path):
            if is_report:
                unfinished = still_unfinished([recorded])
                now = unfinished[0] if unfinished else None
            else:
                now = _same(recorded)
            holders = [] if now is None else _holders(path, os.path.dirname(path) if is_report else folder)
            if now is None:
                result["result"] = CHANGED
                result["detail"] = "not the file the job had (another inode, owner or type): left alone"
            elif holders:
                result["result"] = IN_USE
                result["detail"] = "open or mapped by " + ", ".join(str(pid) for pid in holders[:8])
            else:
                try:
                    os.unlink(path)
                    result["result"] = REMOVED
                except OSError as exc:
                    result["result"] = FAILED
                    result["detail"] = wire_text(exc.strerror or str(exc), 200) or ""
        results.append(result)
    return results
