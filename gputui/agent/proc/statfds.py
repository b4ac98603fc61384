"""A full /proc sweep that reads a process's stat line only when the process may have run since the last.

The sampling loop's largest cost on a busy host is the kernel formatting every pid's stat line; ``StatFds``
keeps a cheap per-process gate (its schedstat) open and re-reads a stat line only behind a changed gate.
"""

from __future__ import annotations

import os

from gputui.agent.proc.procfs import ProcStat, open_readonly, parse_stat, read_small

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable


def _fd_budget() -> int:
    """How many /proc stat fds a ``StatFds`` may keep: half the soft fd limit, at most 4096.

    The agent's other fds (NVML's device nodes, at most ``ENDPOINT_MAX_URLS`` probe sockets, its pipes) are
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
    data = read_small("/proc/self/schedstat")
    if not data:
        return False
    fields = data.split()
    return len(fields) >= 3 and fields[0] != b"0"


class StatFds:
    """A full /proc sweep that reads a process's stat line only when the process may have changed.

    ``/proc/<pid>/stat`` is the costly file: the kernel formats ~50 fields per read.
    ``/proc/<pid>/schedstat`` holds three numbers (time run, time waited, times scheduled in) and costs a
    fraction of that. It is kept open per pid and re-read with ``pread``: a process whose schedstat is byte
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

    def __init__(self, max_fds: int | None = None, gate: bool | None = None) -> None:
        self.max_fds = _fd_budget() if max_fds is None else max(0, int(max_fds))
        self.gate = schedstat_gate_works() if gate is None else bool(gate)
        self._fds: dict[str, int] = {}  # schedstat fds
        self._gates: dict[str, bytes] = {}  # the schedstat line the cached stat was read after
        self._parsed: dict[str, ProcStat] = {}
        self.stat_reads = 0  # stat lines read by the last scan (the rest came from the cache)
        self.from_cache: set[int] = set()  # pids the last scan did not read a stat line for

    @property
    def open_count(self) -> int:
        return len(self._fds)

    def _forget(self, name: str) -> ProcStat | None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        self._gates.pop(name, None)
        return self._parsed.pop(name, None)

    def _read(self, name: str, gate: bytes | None, table: dict[int, ProcStat]) -> ProcStat | None:
        data = read_small("/proc/" + name + "/stat")
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

    def scan(self) -> dict[int, ProcStat]:
        """Every process on the host, as ``scan_proc`` returns it."""
        table: dict[int, ProcStat] = {}
        self.stat_reads = 0
        self.from_cache = set()
        try:
            names = os.listdir("/proc")
        except OSError:
            return table
        fds, gates, parsed = self._fds, self._gates, self._parsed
        listed = set(names)
        gone_parents: set[int] = set()  # whose children the kernel may have reparented
        cached = self.from_cache
        pread = os.pread
        for name in names:
            # The common case first and flat: an idle process, its fd kept, its schedstat unchanged.
            fd = fds.get(name)
            gate: bytes | None = None
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
                    fd = open_readonly("/proc/" + name + "/schedstat")
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

    def refresh(self, pids: Iterable[int], table: dict[int, ProcStat]) -> None:
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
