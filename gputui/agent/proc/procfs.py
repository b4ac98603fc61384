"""Reading /proc: process stat lines, command lines, owners, cgroups, children, device nodes, the boot.

Stdlib only and flat: a full sample reads the stat line of every pid on the host, so the readers use raw fds
and bytes, no file objects, and decode nothing but what is shown. Text from the kernel keeps undecodable
bytes visible as ``\\xNN`` (JSON-safe, no surrogates).
"""

from __future__ import annotations

import os
import stat

from gputui.agent.wire import wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):  # pragma: no cover - non-Linux
    CLOCK_TICKS_PER_S = 100

try:
    PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - non-Linux
    PAGE_SIZE = 4096

EXITED_STATES = ("Z", "X", "x")
"""/proc states of a process or thread that has exited (zombie, dead): not live."""
INIT_PID_NAMESPACE_INODE = 0xEFFFFFFC
"""The inode of the initial PID namespace (PROC_PID_INIT_INO in the kernel)."""

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_STAT_READ_BYTES = 4096
# One str per state letter, so a scan of the whole host decodes nothing but the names.
_STATE_TEXT = {bytes((code,)): chr(code) for code in range(33, 127)}


def text_of(data: bytes) -> str:
    """Bytes from the kernel as text; undecodable bytes stay visible as escapes (JSON-safe, no surrogates)."""
    return data.decode("utf-8", "backslashreplace")


def json_safe(value: str | None) -> str | None:
    """A str that may carry surrogate escapes (psutil, ``os`` functions) as JSON-safe text."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class ProcStat:
    """The fields of /proc/<pid>/stat the collector needs."""

    __slots__ = (
        "pid",
        "name",
        "state",
        "ppid",
        "pgrp",
        "session",
        "start_ticks",
        "rss_pages",
        "cpu_ticks",
        "user_ticks",
        "faults",
    )

    def __init__(
        self,
        pid: int,
        name: str,
        state: str,
        ppid: int,
        pgrp: int,
        session: int,
        start_ticks: int,
        rss_pages: int,
        cpu_ticks: int | None = None,
        user_ticks: int | None = None,
        faults: int | None = None,
    ) -> None:
        self.pid = pid
        self.name = name
        self.state = state
        self.ppid = ppid
        self.pgrp = pgrp
        self.session = session
        self.start_ticks = start_ticks
        self.rss_pages = rss_pages
        self.cpu_ticks = cpu_ticks
        """User plus system CPU time in clock ticks (fields 14 and 15), None where not read."""
        self.user_ticks = user_ticks
        """User CPU time alone in clock ticks (field 14), None where not read: a thread that runs in the
        kernel and never returns to its program leaves it still (``waits``)."""
        self.faults = faults
        """Page faults of all its threads (fields 10 and 12, minor and major), None where not read: counted
        one by one, they move with a fork (every page the parent writes after it faults) however short."""

    def unmoved_since(self, earlier: ProcStat) -> bool:
        """Whether this stat line says what ``earlier`` (of the same process) said: no CPU time and no page
        fault of any of its threads, the same state, name, parent, group, session and rss.

        Such a process has not run in any way the kernel counted, so what only running changes (the
        children it forks, its uid, environment and, short of a write that faults no page, its command
        line) is as it was; what changes from outside without it running (its cgroup, an orphan
        reparented to it) is not told by this.
        """
        return (
            self.cpu_ticks is not None
            and self.faults is not None
            and self.faults == earlier.faults
            and self.cpu_ticks == earlier.cpu_ticks
            and self.user_ticks == earlier.user_ticks
            and self.start_ticks == earlier.start_ticks
            and self.state == earlier.state
            and self.rss_pages == earlier.rss_pages
            and self.ppid == earlier.ppid
            and self.pgrp == earlier.pgrp
            and self.session == earlier.session
            and self.name == earlier.name
        )


def parse_stat(pid: int, data: bytes) -> ProcStat | None:
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
        user_ticks = int(rest[11])  # field 14: utime
        return ProcStat(
            pid,
            data[open_at + 1 : close_at].decode("utf-8", "backslashreplace"),
            _STATE_TEXT.get(rest[0]) or text_of(rest[0]),
            int(rest[1]),
            int(rest[2]),
            int(rest[3]),
            int(rest[19]),  # field 22 (rest[0] is field 3): start time in clock ticks
            int(rest[21]),  # field 24: rss in pages
            user_ticks + int(rest[12]),  # fields 14 and 15: utime + stime
            user_ticks,
            int(rest[7]) + int(rest[9]),  # fields 10 and 12: minflt + majflt
        )
    except ValueError:
        return None


def read_small(path: str) -> bytes | None:
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


def open_readonly(path: str) -> int:
    """A raw read-only fd of ``path`` that no child process inherits (raises OSError)."""
    return os.open(path, _OPEN_FLAGS)


def read_stat(pid: int) -> ProcStat | None:
    """/proc/<pid>/stat parsed, or None when the process does not exist (or cannot be read)."""
    data = read_small(f"/proc/{pid}/stat")
    return None if data is None else parse_stat(pid, data)


def still_running(pid: int, start_ticks: int) -> bool:
    """Whether the process that started at ``start_ticks`` is still ``pid`` and has not exited (a zombie
    has; a later process given the same pid is another one)."""
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks and stat.state not in EXITED_STATES


def scan_proc() -> dict[int, ProcStat]:
    """One pass over /proc/[0-9]*/stat: every process on the host (threads are not listed).

    This is most of a full sample's cost (the kernel formats ~50 fields per pid), so the loop stays flat:
    raw fds and bytes, no file objects, no text decoding but the name.
    """
    table: dict[int, ProcStat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        data = read_small("/proc/" + name + "/stat")
        if data is None:
            continue
        stat = parse_stat(pid, data)
        if stat is not None:
            table[pid] = stat
    return table


def file_identity(path: str) -> dict[str, Any] | None:
    """A regular file's identity and size, read without following a symlink (``path``, ``dev``, ``inode``,
    ``uid``, ``size_bytes``: what a later removal checks again); None for anything else."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return {
        "path": wire_text(path, 512),
        "dev": info.st_dev,
        "inode": info.st_ino,
        "uid": info.st_uid,
        "size_bytes": info.st_blocks * 512,
    }


def read_cmdline(pid: int) -> list[str] | None:
    """The argv list of a process; [] for kernel threads and zombies, None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if not data:
        return []
    if data.endswith(b"\0"):
        data = data[:-1]
    return [text_of(part) for part in data.split(b"\0")]


def read_real_uid(pid: int) -> int | None:
    """The real uid of a process (the ``Uid:`` line of /proc/<pid>/status), as psutil reports it."""
    data = read_small(f"/proc/{pid}/status")
    at = -1 if data is None else data.find(b"\nUid:")
    if data is None or at < 0:
        return None
    try:
        return int(data[at + 5 : data.find(b"\n", at + 5)].split()[0])
    except (ValueError, IndexError):
        return None


def read_boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def read_boot_time() -> float | None:
    """Epoch seconds of the boot (``btime`` in /proc/stat)."""
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def in_child_pid_namespace() -> bool:
    """Whether this process lives in a PID namespace other than the host's (a container without host pids).

    There the driver's pids may belong to other namespaces, and a local process with the same number may be
    an unrelated one.
    """
    try:
        return os.stat("/proc/self/ns/pid").st_ino != INIT_PID_NAMESPACE_INODE
    except OSError:
        return False


def fd_links(pid: int, limit: int | None = None) -> list[str]:
    """What ``pid``'s open fds point to (paths, ``socket:[inode]``, ...), at most ``limit`` of its fds looked
    at; empty when they cannot be read."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    links: list[str] = []
    for fd in fds[:limit]:
        try:
            links.append(os.readlink(fd_dir + "/" + fd))
        except OSError:
            continue
    return links


def nvidia_nodes_open(pid: int) -> set[str]:
    """The /dev/nvidia* nodes ``pid`` has open (empty when its fds cannot be read)."""
    return {link for link in fd_links(pid) if link.startswith("/dev/nvidia")}


def scan_device_holders(table: dict[int, ProcStat]) -> list[dict[str, Any]]:
    """Processes with a /dev/nvidia* node open: one entry per (pid, device node)."""
    holders: list[dict[str, Any]] = []
    for pid in sorted(table):
        for device in sorted(nvidia_nodes_open(pid)):
            holders.append({"pid": pid, "name": table[pid].name, "device": device})
    return holders


def parse_cgroup(data: bytes) -> str | None:
    """The cgroup that says which job a process belongs to, from the text of /proc/<pid>/cgroup.

    The unified (v2) hierarchy's path (``0::/system.slice/cron.service``) when it is not the root, else
    systemd's own v1 hierarchy (``1:name=systemd:/user.slice/...``), else the unified root; None when neither
    is there (a v1 host without systemd: the job rule then goes by sessions and names only). Service managers,
    container runtimes and batch systems put each job in a cgroup of its own in these hierarchies.
    """
    unified: str | None = None
    named: str | None = None
    for line in text_of(data).splitlines():
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


_CAPPED_OPEN_FLAGS = _OPEN_FLAGS | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK
CGROUP_MAX_BYTES = 64 * 1024
"""The most of a process's cgroup file read: a path per hierarchy, a few hundred bytes in practice."""


def read_capped(path: str, cap_bytes: int) -> bytes | None:
    """At most ``cap_bytes`` of a regular file, not following a final symlink, never blocking on a FIFO."""
    try:
        fd = os.open(path, _CAPPED_OPEN_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        # /proc files are regular with size 0; a FIFO, device or directory is never read.
        if not stat.S_ISREG(info.st_mode):
            return None
        chunks: list[bytes] = []
        left = cap_bytes
        while left > 0:
            data = os.read(fd, min(65536, left))
            if not data:
                break
            chunks.append(data)
            left -= len(data)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


MAPS_MAX_BYTES = 8 << 20
"""The most of one process's /proc/<pid>/maps read."""


def mapped_paths(pid: int, prefix: str) -> set[str]:
    """The paths under ``prefix`` that ``pid`` has mapped (a device node CUDA mapped and closed the fd of, a
    shared-memory segment), " (deleted)" taken off; empty when its maps cannot be read."""
    data = read_capped(f"/proc/{pid}/maps", MAPS_MAX_BYTES)
    if not data:
        return set()
    needle = prefix.encode("utf-8", "surrogateescape")
    found: set[str] = set()
    for line in data.split(b"\n"):
        at = line.find(needle)
        if at > 0 and line[at - 1 : at] == b" ":
            found.add(line[at:].decode("utf-8", "surrogateescape").replace(" (deleted)", ""))
    return found


class ProcTexts:
    """The cgroup and environment files of the process read last, read once for all who ask (``read``).

    Describing a process, its cgroup is read for the job rule and for its owner, and its environment for its
    owner and for a profiler's injection, one reader after another. Between ``begin`` and ``end`` (one
    sample's descriptions) the last process's files are kept, at most one process's in memory; outside,
    every read is a read, so that no file is ever taken from an earlier sample.
    """

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._keeping = False
        self._key: tuple[int, int] | None = None
        self._texts: dict[str, tuple[int, bytes | None]] = {}

    def begin(self) -> None:
        self._keep(True)

    def end(self) -> None:
        self._keep(False)

    def _keep(self, keeping: bool) -> None:
        self._keeping = keeping
        self._key = None
        self._texts = {}

    def read(self, pid: int, start_ticks: int, name: str, cap_bytes: int) -> bytes | None:
        """``read_capped`` of /proc/PID/NAME, or what was read of it for this process already."""
        if not self._keeping:
            return read_capped(f"{self.proc_root}/{pid}/{name}", cap_bytes)
        key = (pid, start_ticks)
        if key != self._key:
            self._key = key
            self._texts = {}
        kept = self._texts.get(name)
        if kept is not None:
            read_cap, data = kept
            # A file read whole (shorter than its cap) or read with a cap at least this one answers.
            if data is None or read_cap >= cap_bytes or len(data) < read_cap:
                return None if data is None else data[:cap_bytes]
        data = read_capped(f"{self.proc_root}/{pid}/{name}", cap_bytes)
        self._texts[name] = (cap_bytes, data)
        return data


class ParsedBy:
    """A pure parser of /proc texts, with its results for the texts it was given lately.

    The members of a job share their cgroup and their environment (inherited from the launcher): a job of
    hundreds of processes has a handful of distinct texts, each parsed once. At most ``limit`` texts of
    ``max_bytes`` in all are kept (all are forgotten when either is reached). Results are shared: callers
    never change them.
    """

    def __init__(self, parse: Callable[[bytes], Any], limit: int = 64, max_bytes: int = 1 << 20) -> None:
        self._parse = parse
        self._limit = limit
        self._max_bytes = max_bytes
        self._bytes = 0
        self._results: dict[bytes, Any] = {}

    def __call__(self, data: bytes) -> Any:
        try:
            return self._results[data]
        except KeyError:
            pass
        if len(self._results) >= self._limit or self._bytes + len(data) > self._max_bytes:
            self._results.clear()
            self._bytes = 0
        result = self._parse(data)
        if len(data) <= self._max_bytes:
            self._results[data] = result
            self._bytes += len(data)
        return result


cgroup_of_text = ParsedBy(parse_cgroup)
"""``parse_cgroup`` of a cgroup file's bytes, each distinct text parsed once."""


def read_cgroup(pid: int) -> str | None:
    """``parse_cgroup`` of a live process (None when it is gone or unreadable), read as every reader of a
    cgroup file reads it (``read_capped``, ``CGROUP_MAX_BYTES``)."""
    data = read_capped(f"/proc/{pid}/cgroup", CGROUP_MAX_BYTES)
    return None if data is None else cgroup_of_text(data)


def children_file_supported() -> bool:
    """Whether the kernel has /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)."""
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def read_children(pid: int) -> list[int]:
    """The children of ``pid`` from /proc/<pid>/task/*/children ([] when it is gone or unreadable).

    Each thread lists the children it forked, so every task is read: a child started from a worker thread
    is listed under that thread only.
    """
    task_dir = f"/proc/{pid}/task"
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return []
    children: list[int] = []
    for tid in tids:
        data = read_small(task_dir + "/" + tid + "/children")
        if data:
            children.extend(int(child) for child in data.split())
    return children
