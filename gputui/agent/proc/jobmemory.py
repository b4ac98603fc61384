"""The GPU jobs and GPUs a collector saw on its host since boot, remembered in a file on that host.

A kill gputui did not make (``pkill``, ``docker stop``, Slurm, the OOM killer) leaves no trace in gputui but
this: whenever the collector takes a process sample it notes each GPU job it sees (the tree of a GPU holder,
as ``ProcessSampler`` roots it) with its members (pid, start ticks, name), owner, the GPUs and memory it
held, the ports its members listened on and its profilers (the members that are one, and the output their
argv names: ``proc.profiler``); and every GPU it listed (UUID, PCI id). Once a job holds no GPU
memory any more it is *released*: its members are read again on every process sample (``remembered_pids``)
so that the client can name what is left of it (a member still running, one left defunct) and say how many
are gone.

The record is ``remembered-jobs.json`` in gputui's state folder on the collector's host, written through
the safe opener only when something changes (a job or member first seen, a job released or back, a GPU
first listed), bounded (``MAX_JOBS``, ``MAX_MEMBERS``), and forgotten at a new boot. A record that is
planted (a link, a FIFO, another user's), over its cap or not a record is not trusted: one line says so
and the collector remembers in memory only, for as long as it runs.

Stdlib only (Python 3.8): this runs in the collector.
"""

from __future__ import annotations

import json
import os

from gputui.agent import safefile
from gputui.agent.protocol import PROCESS_LISTEN_PORTS, PROCESS_PROFILER
from gputui.agent.wire import wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable

RECORD_FILE = "remembered-jobs.json"
RECORD_VERSION = 1
RECORD_MAX_BYTES = 4 << 20
MAX_JOBS = 64
"""Jobs kept: a new one takes the place of the one released longest ago (a host of many short jobs); with
every place held by a live job, a new one is not remembered."""
MAX_MEMBERS = 512
"""Members kept per job (a job of more processes keeps its first ones and counts the rest)."""
MAX_PORTS = 32
MAX_GPUS = 64
MAX_SEGMENTS = 32
"""Segments (in /dev/shm) kept per job."""
MAX_MPS = 4
"""MPS control daemons kept per job (one per user of the job)."""
MAX_PROFILERS = 8
"""Members kept per job that are profilers (``nsys profile``, its agent and launcher, ``ncu``)."""
MAX_OUTPUTS = 4
"""Report outputs kept per job (an absolute path from a profiler's argv each)."""
SEGMENT_SCAN_S = 60.0
"""A live job's members are looked at for /dev/shm segments when they change, and at most this often
otherwise (a segment made after the last change is found within this long)."""
SCAN_AFTER_S = 10.0
"""No look before the collector has run this long: a one-shot (``snapshot``, ``check``) ends before it, and
pays nothing for it (a kill takes a look of its own right before it signals)."""
MAX_RELEASED_SENT = 8
"""Released jobs a snapshot carries (most recently released first)."""
NAME_MAX_CHARS = 64


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value) if abs(value) < 1e12 else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value[:NAME_MAX_CHARS] if isinstance(value, str) else None


def _owner(value: Any) -> dict[str, str] | None:
    """The owner's kind, id and name (``owners.owner_of``), each short text; None when it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        return None
    return {
        key: value[key][:NAME_MAX_CHARS] for key in ("kind", "id", "name") if isinstance(value.get(key), str)
    }


def _job_from_record(item: Any) -> dict[str, Any] | None:
    """A job of the record file, every field checked and bounded; None when it is not one."""
    if not isinstance(item, dict):
        return None
    root, start = _int(item.get("root")), _int(item.get("root_start"))
    first_seen = _number(item.get("first_seen"))
    if root is None or root < 1 or start is None or first_seen is None:
        return None
    members: dict[int, list[Any]] = {}
    for entry in _list(item.get("members")):
        if isinstance(entry, list) and len(entry) == 3:
            pid, ticks, name = _int(entry[0]), _int(entry[1]), _text(entry[2])
            if pid is not None and pid > 1 and ticks is not None and len(members) < MAX_MEMBERS:
                members[pid] = [ticks, name]
    gpus: dict[int, int] = {}
    for entry in _list(item.get("gpus")):
        if isinstance(entry, list) and len(entry) == 2:
            index, mib = _int(entry[0]), _int(entry[1])
            if (
                index is not None
                and 0 <= index < 4096
                and mib is not None
                and mib >= 0
                and len(gpus) < MAX_GPUS
            ):
                gpus[index] = mib
    ports = _list(item.get("ports"))
    segments = [_segment(entry) for entry in _list(item.get("segments"))[:MAX_SEGMENTS]]
    profilers = [_pair(entry) for entry in _list(item.get("profilers"))[:MAX_PROFILERS]]
    outputs = [entry[:512] for entry in _list(item.get("outputs"))[:MAX_OUTPUTS] if _absolute(entry)]
    daemons = [_daemon(entry) for entry in _list(item.get("mps"))[:MAX_MPS]]
    return {
        "root": root,
        "root_start": start,
        "name": _text(item.get("name")),
        "user": _text(item.get("user")),
        "uid": _int(item.get("uid")),
        "owner": _owner(item.get("owner")),
        "first_seen": first_seen,
        "released": _number(item.get("released")),
        "members": members,
        "members_total": max(len(members), _int(item.get("members_total")) or 0),
        "gpus": gpus,
        "ports": sorted({p for p in ports if _int(p) is not None and 0 < p < 65536})[:MAX_PORTS],
        "segments": [segment for segment in segments if segment is not None],
        "mps": [daemon for daemon in daemons if daemon is not None],
        "profilers": [pair for pair in profilers if pair is not None],
        "outputs": outputs,
    }


def _pair(item: Any) -> list[int] | None:
    """A member's [pid, start ticks], checked."""
    if not isinstance(item, list) or len(item) != 2:
        return None
    pid, ticks = _int(item[0]), _int(item[1])
    return None if pid is None or pid <= 1 or ticks is None else [pid, ticks]


def _absolute(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("/")


def _segment(item: Any) -> dict[str, Any] | None:
    """A segment as ``leftovers`` describes it (its identity: path, device, inode, owner), checked."""
    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
        return None
    identity = {key: _int(item.get(key)) for key in ("dev", "inode", "uid", "size_bytes")}
    if any(value is None for value in identity.values()):
        return None
    texts = {key: _text(item.get(key)) for key in ("name", "kind", "user")}
    return {"path": item["path"][:512], **identity, **texts}


def _daemon(item: Any) -> dict[str, Any] | None:
    """An MPS control daemon as ``leftovers`` describes it (pid, start ticks, owner), checked."""
    if not isinstance(item, dict):
        return None
    pid, ticks, uid = (_int(item.get(key)) for key in ("pid", "start_ticks", "uid"))
    if pid is None or pid <= 1 or ticks is None or uid is None:
        return None
    return {"pid": pid, "start_ticks": ticks, "uid": uid, "user": _text(item.get("user"))}


def _gpu_from_record(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    uuid, first_seen = _text(item.get("uuid")), _number(item.get("first_seen"))
    if not uuid or first_seen is None:
        return None
    return {
        "uuid": uuid,
        "pci_bus_id": _text(item.get("pci_bus_id")),
        "index": _int(item.get("index")),
        "first_seen": first_seen,
        "last_seen": _number(item.get("last_seen")) or first_seen,
    }


_IN_MEMORY_ONLY = ("members", "gpus", "settled", "scanned_members", "scanned_at")
"""Keys of a job that are written their own way (members, GPUs) or not at all (what this collector did)."""


def _job_to_record(job: dict[str, Any]) -> dict[str, Any]:
    return {
        **{key: value for key, value in job.items() if key not in _IN_MEMORY_ONLY},
        "members": [[pid, ticks, name] for pid, (ticks, name) in sorted(job["members"].items())],
        "gpus": [[index, mib] for index, mib in sorted(job["gpus"].items())],
    }


class JobMemory:
    """What the collector remembers of its host's GPU jobs and GPUs in this boot.

    Args:
        boot_id: The host's boot id (None: not known; then nothing is read or written).
        path: The record file (default ``remembered-jobs.json`` in the state folder).

    Not thread-safe: one owner (the collector's sampling, under its lock).
    """

    def __init__(self, boot_id: str | None, path: str | None = None) -> None:
        self.boot_id = boot_id
        self.path = path or os.path.join(safefile.state_dir(), RECORD_FILE)
        self.warning: str | None = None
        """One line saying why the record cannot be read or kept (then it lives in memory only)."""
        self._jobs: dict[tuple[int, int], dict[str, Any]] = {}
        self._gpus: dict[str, dict[str, Any]] = {}
        self._since: float | None = None
        self._loaded = False
        self._first_note: float | None = None
        self._writable = boot_id is not None
        self._dirty = False

    # -- the file -------------------------------------------------------------------------------------------

    def _load(self) -> None:
        self._loaded = True
        if not self._writable:
            return
        try:
            data = safefile.read_bytes(self.path, RECORD_MAX_BYTES)
        except safefile.UnsafeFile as exc:
            self.warning = f"job record not used: {exc}"
            self._writable = False  # never written over: it is not ours to replace
            return
        if data is None:
            return
        try:
            document = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            document = None
        if not isinstance(document, dict) or document.get("version") != RECORD_VERSION:
            self.warning = f"job record not used: {self.path}: not a gputui job record (it will be replaced)"
            return
        if document.get("boot_id") != self.boot_id:
            return  # another boot: its jobs are long gone
        self._since = _number(document.get("since"))
        for item in _list(document.get("jobs"))[:MAX_JOBS]:
            job = _job_from_record(item)
            if job is not None:
                self._jobs[(job["root"], job["root_start"])] = job
        for item in _list(document.get("gpus"))[:MAX_GPUS]:
            gpu = _gpu_from_record(item)
            if gpu is not None:
                self._gpus[gpu["uuid"]] = gpu

    def _save(self) -> None:
        self._dirty = False
        if not self._writable:
            return
        document = {
            "version": RECORD_VERSION,
            "boot_id": self.boot_id,
            "since": self._since,
            "jobs": [_job_to_record(job) for job in self._jobs.values()],
            "gpus": list(self._gpus.values()),
        }
        try:
            safefile.write_atomic(self.path, json.dumps(document, separators=(",", ":")).encode("utf-8"))
        except safefile.UnsafeFile as exc:
            self.warning = f"job record not kept: {exc}"
            self._writable = False

    # -- what a sample saw ----------------------------------------------------------------------------------

    def note(
        self,
        jobs: dict[int, list[int]],
        processes: Iterable[dict[str, Any]],
        gpus: Iterable[dict[str, Any]],
        now: float,
    ) -> None:
        """Take what a process sample saw.

        Args:
            jobs: Each GPU job's root pid -> its members' pids (``ProcessSampler.jobs``).
            processes: The sample's process dicts (pid, start ticks, name, owner, GPU memory, ports).
            gpus: The sample's GPU dicts (a GPU with an error or without a UUID is not noted).
            now: Epoch seconds.
        """
        if not self._loaded:
            self._load()
        if self._first_note is None:
            self._first_note = now
        by_pid = {proc["pid"]: proc for proc in processes}
        self._note_gpus(gpus, now)
        held_now: set[tuple[int, int]] = set()
        for root, pids in jobs.items():
            root_proc = by_pid.get(root)
            if root_proc is None or _int(root_proc.get("start_ticks")) is None:
                continue
            key = self._job_for(root_proc, pids, by_pid, now)
            if key is None:
                continue  # the record is full of live jobs: this one is not remembered
            held_now.add(key)
            self._add_members(self._jobs[key], pids, by_pid)
        for key, job in self._jobs.items():
            if key in held_now:
                if job["released"] is not None:
                    job["released"] = None
                    self._dirty = True
            elif job["released"] is None:
                job["released"] = now
                self._dirty = True
        if self._since is None and (self._jobs or self._gpus):
            self._since = now
            self._dirty = True
        if self._dirty:
            self._save()

    def _job_for(
        self, root: dict[str, Any], pids: list[int], by_pid: dict[int, dict[str, Any]], now: float
    ) -> tuple[int, int] | None:
        """The remembered job this tree is: by its root, else by a member it shares (a root that changed);
        a new one when there is room (the job released longest ago makes room), None when every place holds
        a live job (they are kept, not swapped on every sample)."""
        key = (root["pid"], root["start_ticks"])
        if key in self._jobs:
            return key
        members = {(pid, by_pid[pid].get("start_ticks")) for pid in pids if pid in by_pid}
        for known_key, job in self._jobs.items():
            if any((pid, entry[0]) in members for pid, entry in job["members"].items()):
                return known_key
        if len(self._jobs) >= MAX_JOBS:
            released = [(job["released"], k) for k, job in self._jobs.items() if job["released"] is not None]
            if not released:
                return None
            del self._jobs[min(released)[1]]
        self._jobs[key] = {
            "root": key[0],
            "root_start": key[1],
            "name": _text(root.get("name")),
            "user": _text(root.get("user")),
            "uid": _int(root.get("uid")),
            "owner": _owner(root.get("owner")),
            "first_seen": now,
            "released": None,
            "members": {},
            "members_total": 0,
            "gpus": {},
            "ports": [],
            "segments": [],
            "mps": [],
            "profilers": [],
            "outputs": [],
        }
        self._dirty = True
        return key

    def _add_members(self, job: dict[str, Any], pids: list[int], by_pid: dict[int, dict[str, Any]]) -> None:
        members = job["members"]
        for pid in pids:
            proc = by_pid.get(pid)
            if proc is None or pid <= 1:
                continue
            ticks = _int(proc.get("start_ticks"))
            known = members.get(pid)
            if ticks is not None and (known is None or known[0] != ticks):
                if len(members) < MAX_MEMBERS or known is not None:
                    members[pid] = [ticks, _text(proc.get("name"))]
                job["members_total"] += 1
                self._dirty = True
            for index, mib in (proc.get("gpu_memory_mib") or {}).items():
                gpu, held = _int(int(index)) if str(index).isdigit() else None, _int(mib)
                if gpu is not None and held is not None and held > job["gpus"].get(gpu, -1):
                    if gpu not in job["gpus"]:
                        self._dirty = True
                    if len(job["gpus"]) < MAX_GPUS or gpu in job["gpus"]:
                        job["gpus"][gpu] = held
            self._note_profiler(job, pid, ticks, proc.get(PROCESS_PROFILER))
            ports = [p for p in proc.get(PROCESS_LISTEN_PORTS) or () if _int(p) is not None]
            if ports and not set(ports) <= set(job["ports"]):
                job["ports"] = sorted(set(job["ports"]) | set(ports))[:MAX_PORTS]
                self._dirty = True

    def _note_profiler(self, job: dict[str, Any], pid: int, ticks: int | None, mark: Any) -> None:
        """Keep a member that is a profiler (by its argv), and the report output its argv names."""
        if ticks is None or not isinstance(mark, dict) or mark.get("via") != "argv":
            return
        if [pid, ticks] not in job["profilers"] and len(job["profilers"]) < MAX_PROFILERS:
            job["profilers"].append([pid, ticks])
            self._dirty = True
        output = mark.get("output")
        if isinstance(output, str) and _absolute(output) and output[:512] not in job["outputs"]:
            if len(job["outputs"]) < MAX_OUTPUTS:
                job["outputs"].append(output[:512])
            self._dirty = True

    def _note_gpus(self, gpus: Iterable[dict[str, Any]], now: float) -> None:
        for gpu in gpus:
            uuid = gpu.get("uuid")
            if gpu.get("error") is not None or not isinstance(uuid, str) or not uuid:
                continue
            known = self._gpus.get(uuid)
            if known is None:
                if len(self._gpus) >= MAX_GPUS:
                    continue
                known = self._gpus[uuid[:NAME_MAX_CHARS]] = {
                    "uuid": uuid[:NAME_MAX_CHARS],
                    "pci_bus_id": _text(gpu.get("pci_bus_id")),
                    "index": _int(gpu.get("index")),
                    "first_seen": now,
                    "last_seen": now,
                }
                self._dirty = True
            known["last_seen"] = now

    def scans_due(self, now: float) -> list[tuple[tuple[int, int], list[int]]]:
        """The live jobs whose members are due a look for what they may leave behind (``SEGMENT_SCAN_S``),
        each with its members' pids."""
        due: list[tuple[tuple[int, int], list[int]]] = []
        if self._first_note is None or now - self._first_note < SCAN_AFTER_S:
            return due
        for key, job in self._jobs.items():
            if job["released"] is not None:
                continue
            changed = job.get("scanned_members") != job["members_total"]
            if changed or now - job.get("scanned_at", -1e18) >= SEGMENT_SCAN_S:
                job["scanned_members"], job["scanned_at"] = job["members_total"], now
                due.append((key, sorted(job["members"])))
        return due

    def add_leftovers(self, key: tuple[int, int], found: dict[str, Any]) -> None:
        """Keep what a job may leave behind (``leftovers.LiveLooks.look``): the /dev/shm segments its members
        had open or mapped (by device and inode) and its users' MPS control daemons (by pid and start)."""
        job = self._jobs.get(key)
        if job is None:
            return
        daemons = {(d["pid"], d["start_ticks"]) for d in job["mps"]}
        for item in found.get("mps") or ():
            daemon = _daemon(item)
            if daemon is not None and (daemon["pid"], daemon["start_ticks"]) not in daemons:
                if len(job["mps"]) < MAX_MPS:
                    job["mps"].append(daemon)
                    daemons.add((daemon["pid"], daemon["start_ticks"]))
                    self._dirty = True
        known = {(seg["dev"], seg["inode"]) for seg in job["segments"]}
        for found_segment in found.get("segments") or ():
            segment = _segment(found_segment)
            if segment is None or (segment["dev"], segment["inode"]) in known:
                continue
            if len(job["segments"]) < MAX_SEGMENTS:
                job["segments"].append(segment)
                known.add((segment["dev"], segment["inode"]))
                self._dirty = True
        if self._dirty:
            self._save()

    # -- what the client is told ----------------------------------------------------------------------------

    @staticmethod
    def _left(
        job: dict[str, Any], still_left: Callable[[dict[str, Any]], dict[str, Any]] | None
    ) -> dict[str, Any]:
        if still_left is None or not (job["segments"] or job["mps"] or job["outputs"] or job["profilers"]):
            return {"segments": [], "mps": [], "reports": []}
        left = still_left(
            {
                "segments": job["segments"],
                "mps": job["mps"],
                "outputs": job["outputs"],
                "profiled": bool(job["profilers"]),
                "uid": job.get("uid"),
                "since": job.get("first_seen"),
            }
        )
        return {
            "segments": left.get("segments") or [],
            "mps": left.get("mps") or [],
            "reports": left.get("reports") or [],
        }

    def remembered_pids(self) -> list[int]:
        """The members of every job not yet known to be all gone: the next process sample reads (and lists)
        those still there, so that a job released by that very sample is judged by it."""
        if not self._loaded:
            self._load()
        return sorted(
            {pid for job in self._jobs.values() if not job.get("settled") for pid in job["members"]}
        )

    def wire(
        self,
        alive: dict[int, int | None],
        listed_gpus: Iterable[dict[str, Any]] | None,
        still_left: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The snapshot's ``remembered`` part.

        Args:
            alive: pid -> start ticks of each member read in this sample (None: it exists, unreadable).
            listed_gpus: The GPUs listed now (None: the list failed, so no GPU is called gone).
            still_left: Which of a job's recorded segments and MPS daemons are still there
                (``leftovers.still_left``); None: none are looked for.
        """
        if not self._loaded:
            self._load()
        released = sorted(
            (job for job in self._jobs.values() if job["released"] is not None),
            key=lambda job: -job["released"],
        )
        jobs = []
        for position, job in enumerate(released):
            remaining, unseen = [], []
            for pid, (ticks, _name) in sorted(job["members"].items()):
                if pid not in alive:
                    continue
                if alive[pid] is None:
                    unseen.append(pid)
                elif alive[pid] == ticks:
                    remaining.append([pid, ticks])
            # Every released job settles (its pids are no longer looked for), whether it is sent or not.
            job["settled"] = not remaining and not unseen
            if position >= MAX_RELEASED_SENT:
                continue
            jobs.append(
                {
                    "root": job["root"],
                    "root_start": job["root_start"],
                    "name": wire_text(job["name"]),
                    "user": wire_text(job["user"]),
                    "owner": job["owner"],
                    "first_seen": job["first_seen"],
                    "released": job["released"],
                    "gpus": [[index, mib] for index, mib in sorted(job["gpus"].items())],
                    "ports": list(job["ports"]),
                    **self._left(job, still_left),
                    "profilers": [pair for pair in job["profilers"] if pair in remaining],
                    "members_total": job["members_total"],
                    "remaining": remaining,
                    "unseen": unseen,
                }
            )
        gone = []
        if listed_gpus is not None:
            from gputui.agent.pci import pci_key

            # A GPU listed now whose UUID cannot be read (lost) is there, at its PCI address or, where that
            # cannot be read either, at its index: it says what it is itself.
            now_listed = {gpu.get("uuid") for gpu in listed_gpus}
            now_pci = {pci_key(gpu.get("pci_bus_id")) for gpu in listed_gpus} - {None}
            nameless = {gpu.get("index") for gpu in listed_gpus if not gpu.get("uuid")}
            for gpu in self._gpus.values():
                if gpu["uuid"] in now_listed or pci_key(gpu["pci_bus_id"]) in now_pci:
                    continue
                if gpu["index"] not in nameless:
                    gone.append(
                        {
                            key: wire_text(value) if isinstance(value, str) else value
                            for key, value in gpu.items()
                        }
                    )
        return {
            "since": self._since,
            "jobs_seen": len(self._jobs),
            "jobs": jobs,
            "gpus_gone": gone,
            "warning": wire_text(self.warning),
        }
