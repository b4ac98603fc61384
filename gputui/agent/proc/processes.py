"""The process part of a sample: the GPU process trees, zombies and D-state processes, and device holders."""

from __future__ import annotations

import os
import time

from gputui.agent.proc.details import CMDLINE_CACHE_S, ProcDetails
from gputui.agent.proc.figures import CpuMeter, GpuUtilBook
from gputui.agent.proc.owners import OwnerReader
from gputui.agent.proc.probechild import recognised
from gputui.agent.proc.procfs import (
    CLOCK_TICKS_PER_S,
    ProcStat,
    children_file_supported,
    read_boot_time,
    read_cmdline,
    scan_device_holders,
    scan_proc,
)
from gputui.agent.proc.proctree import (
    ChildrenBook,
    ancestors_of,
    job_trees,
    scan_trees,
    table_facts,
    tree_root,
)
from gputui.agent.proc.profiler import ProfilerMarks
from gputui.agent.proc.statfds import StatFds
from gputui.agent.proc.waits import ThreadWaits
from gputui.agent.protocol import (
    PROCESS_CPU_PCT,
    PROCESS_LIVE_THREADS,
    PROCESS_OWNER,
    PROCESS_PROFILER,
    PROCESS_WAITS,
)
from gputui.agent.wire import WIRE_MAX_DEVICE_HOLDERS, WIRE_MAX_PROCESSES, WireBudget

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Tuple

    KeptEntry = Tuple[float, ProcStat, bool, dict[str, Any], dict[str, Any]]

FULL_SWEEP_EVERY = 3
"""Every Nth process sample (and every forced one) reads the stat of every pid on the host; the ones between
read only the GPU trees (see ``ProcessSampler.sample`` for what they may miss, and for how long)."""
GHOST_SLACK_MIB = 64
"""Used memory may exceed the sum of listed processes by this much before /dev/nvidia* holders are scanned."""
STILL_ENTRY_KEEP_S = 30.0
"""A listed process that has not run since its entry was made (``ProcStat.unmoved_since``) keeps that entry:
its command line, uid and environment change only by running. What changes from outside, its cgroup (and
the owner it makes), is read again this often. A process that ran is described afresh (its details within
``CMDLINE_CACHE_S``)."""
LAUNCHER_NAMES_KEPT = 4096
"""Process names whose launcher verdict is kept; beyond that (a host that renames processes at will) the memo
starts again."""


class ProcessSampler:
    """Lists, per process sample, what a snapshot says about the host's processes.

    Owners and command lines are read from /proc: half psutil's cost per process, and no psutil import on
    the sampling path.

    Args:
        child_pid_namespace: The collector lives in a PID namespace other than the host's (a container).
        full_sweep_every: Read every pid's stat on every Nth process sample (1: always).

    Not thread-safe: one owner, under its own lock (the collector's sampling).
    """

    def __init__(
        self,
        child_pid_namespace: bool,
        full_sweep_every: int = FULL_SWEEP_EVERY,
        may_be_launcher: Callable[[str], bool] = lambda _name: False,
        owners: OwnerReader | None = None,
    ) -> None:
        self.child_pid_namespace = child_pid_namespace
        self.may_be_launcher = may_be_launcher
        """Whether a process of this name may be an inference-server launcher (health discovery's rule)."""
        self.owners = owners or OwnerReader()
        self.profilers = ProfilerMarks(texts=self.owners.texts)
        """Whether each process of a GPU job is a profiler or carries one's injection."""
        self._cpu = CpuMeter()
        self._waits = ThreadWaits()
        self._gpu_util = GpuUtilBook()
        self.full_sweep_every = max(1, int(full_sweep_every))
        self.details = ProcDetails(use_psutil=False, texts=self.owners.texts)
        self.boot_time = read_boot_time()
        self.last_sweep_full: bool | None = None
        self.gpu_processes: dict[int, list[dict[str, Any]]] = {}
        """GPU index -> its process list of the last process sample (a memory-only sample reuses it)."""
        self.processes: list[dict[str, Any]] = []
        self.omitted = 0
        self.device_holders: list[dict[str, Any]] | None = None
        self.job_pids: set[int] = set()
        """The GPU processes and the rest of their trees, of the last process sample."""
        self.hidden_pids: frozenset[int] = frozenset()
        """The collector's own readiness-probe children (``gpu.probe``): never listed, never a job."""
        self.probe_pids: frozenset[int] = frozenset()
        """The probe children (this collector's, and another gputui's: ``probechild``) the last process
        sample left out: neither listed nor counted in their GPU's used memory."""
        self.jobs: dict[int, list[int]] = {}
        """Each GPU job's root -> its tree's members, of the last process sample."""
        self.remembered: dict[int, int | None] = {}
        """Of the pids ``sample`` was asked to look for: pid -> start ticks of each that exists (None: it
        exists but cannot be read); the others are gone."""
        self._states: dict[tuple[int, int], tuple[str, float]] = {}
        self._entries: dict[tuple[int, int], KeptEntry] = {}
        """(pid, start ticks) -> (made at, monotonic; its stat; in a job; its details; its entry), of the
        processes listed last: what ``_entry`` may hand out again for a process that has not run since."""
        self._children = ChildrenBook()
        self._table: dict[int, ProcStat] = {}
        self._table_cached: set[int] = set()
        # Process samples since the last full sweep. A stream's first one lists the GPU trees alone, so that
        # its first snapshot comes before a whole-host sweep; its second one sweeps.
        self._partial_sweeps_done = max(0, self.full_sweep_every - 2)
        self._children_file = children_file_supported()
        self._stat_fds = StatFds()
        self._full_table: dict[int, ProcStat] | None = None
        self._launcher_cmdlines: dict[tuple[int, int], tuple[float, list[str]]] = {}
        self._launcher_names: dict[str, bool] = {}
        """``may_be_launcher`` per process name: a host of thousands of processes has a few dozen names."""

    def sample(
        self, gpus: list[dict[str, Any]], now: float, full: bool = True, remembered: Iterable[int] = ()
    ) -> None:
        """Take the process part of a sample; ``gpus`` (with their process lists) get ``visible`` marks.

        ``remembered`` are pids of jobs that held GPU memory before (``JobMemory.remembered_pids``): those
        still there are read and listed after the GPU trees, and ``remembered`` says which exist.

        A full sweep reads the stat of every pid on the host. It runs when ``full`` is set (forced samples:
        the ``sample`` command), on every ``full_sweep_every``-th process sample, whenever some GPU holds
        memory no listed process accounts for (the device-holder scan needs every pid), and always where
        the kernel lacks /proc/<pid>/task/<tid>/children. The samples between read only the GPU processes,
        their ancestors, everything below their tree roots (by the children files) and the processes the
        last list had. Until the next full sweep, at most ``full_sweep_every - 1`` process intervals, they
        miss: a process that turned zombie or D-state outside every GPU tree and was not listed before, and
        a new process-group member of a tree that is not a descendant (a double-forked grandchild whose
        middle parent died after the last sweep). Everything they do list is read fresh. The first process
        sample that is not forced is one of those (the first snapshot of a stream shows the GPUs and their
        trees at once), and the next one sweeps: zombies and D-state processes elsewhere follow within one
        process interval.
        """
        full = (
            full
            or self._partial_sweeps_done >= self.full_sweep_every - 1
            or not self._children_file
            or ghost_suspected(gpus)
        )
        if full:
            table = self._stat_fds.scan()
            self._full_table = table
            self._partial_sweeps_done = 0
        else:
            gpu_pids: set[int] = set()
            for gpu in gpus:
                gpu_pids.update(proc["pid"] for proc in gpu.get("processes") or [] if proc["pid"] > 0)
            known = [p["pid"] for p in self.processes] + list(remembered)
            table = scan_trees(sorted(gpu_pids), known, self.details.cgroup, self._children)
            self._partial_sweeps_done += 1
        self.last_sweep_full = full
        self._gpu_util.take(gpus)
        gpu_mib = self._note_gpu_processes(gpus, table, now)
        self.remembered = {
            pid: table[pid].start_ticks if pid in table else None
            for pid in remembered
            if pid in table or os.path.exists(f"/proc/{pid}")
        }
        chosen, omitted = self._choose(gpu_mib, table)
        if full:  # what is listed is read fresh, not taken from the sweep's cache (rss changes unseen)
            self._stat_fds.refresh(chosen, table)
            chosen = [pid for pid in chosen if pid in table]
        self._table = table
        self._table_cached = set(self._stat_fds.from_cache) if full else set()
        self.processes = self._describe(chosen, table, gpu_mib, now)
        self.omitted = omitted
        # A suspected ghost always makes a full sweep (above), so this scans every pid.
        holders = scan_device_holders(table) if full and ghost_suspected(gpus) else None
        if holders is not None and self.probe_pids:
            holders = [h for h in holders if h["pid"] not in self.probe_pids]
        self.device_holders = None if holders is None else holders[:WIRE_MAX_DEVICE_HOLDERS]

    def stats_read(self) -> dict[int, ProcStat]:
        """The stat lines the last process sample read (a whole-host sweep's cached ones left out)."""
        cached = self._table_cached
        return {pid: stat for pid, stat in self._table.items() if pid not in cached}

    def host_table(self) -> dict[int, ProcStat] | None:
        """Every process of the last whole-host sweep (None before the first one)."""
        return self._full_table

    def uids_listed(self) -> dict[int, int]:
        """pid -> real uid of each process the last list has one for."""
        return {p["pid"]: p["uid"] for p in self.processes if isinstance(p.get("uid"), int)}

    def leave_out_probes(
        self, gpus: list[dict[str, Any]], now: float, table: dict[int, ProcStat] | None = None
    ) -> frozenset[int]:
        """Take the readiness probes' children out of ``gpus``: this collector's (``hidden_pids``) and
        another gputui's (``probechild.recognised``) leave the process lists, and the memory the driver lists
        for them leaves their GPU's used memory (the probe's own, as a job's is not). Returns their pids."""
        hidden = self.hidden_pids
        if not hidden and not any(gpu.get("processes") for gpu in gpus):
            return frozenset()
        foreign = recognised(
            [
                dict(g, processes=[p for p in g.get("processes") or () if p.get("pid") not in hidden])
                for g in gpus
            ],
            table or {},
            now,
            self.boot_time,
        )
        probes = hidden | frozenset(foreign)
        for gpu in gpus:
            listed = gpu.get("processes") or []
            kept = [p for p in listed if p.get("pid") not in probes]
            if len(kept) == len(listed):
                continue
            gpu["processes"] = kept
            held = sum(p.get("used_mib") or 0 for p in listed if p.get("pid") in probes)
            used = gpu.get("memory_used_mib")
            if isinstance(used, int):
                gpu["memory_used_mib"] = max(0, used - held)
        return probes

    def _note_gpu_processes(
        self, gpus: list[dict[str, Any]], table: dict[int, ProcStat], now: float
    ) -> dict[int, dict[int, int]]:
        """Mark each GPU process visible or not (the probes' children left out: ``leave_out_probes``);
        returns visible pid -> {GPU index: MiB}."""
        gpu_mib: dict[int, dict[int, int]] = {}
        self.gpu_processes = {}
        self.probe_pids = self.leave_out_probes(gpus, now, table)
        for gpu in gpus:
            listed = gpu.get("processes") or []
            for proc in listed:
                proc["visible"] = self._is_local_gpu_pid(proc["pid"], table)
                if proc["visible"]:
                    per_gpu = gpu_mib.setdefault(proc["pid"], {})
                    # A process listed as both compute and graphics holds one allocation, not two.
                    per_gpu[gpu["index"]] = max(per_gpu.get(gpu["index"], 0), proc.get("used_mib") or 0)
            gpu["processes"] = listed
            self.gpu_processes[gpu["index"]] = [dict(p) for p in listed]
        return gpu_mib

    def _choose(
        self, gpu_mib: dict[int, dict[int, int]], table: dict[int, ProcStat]
    ) -> tuple[list[int], int]:
        """The pids to list, most important first, each with its ancestors; and how many were left out."""
        # Each GPU process's whole tree as the client roots it (core.jobs.build_forest): the job's root
        # (job_root) and everything under it. Its non-GPU children (a detokenizer) die with a tree kill, so
        # the confirmation must be able to list them.
        facts_of = table_facts(table, self.details.cgroup)
        self.jobs = job_trees({tree_root(pid, table, facts_of) for pid in gpu_mib}, table)
        trees = {pid for members in self.jobs.values() for pid in members}
        self.job_pids = trees | set(gpu_mib)
        # Kernel threads (kthreadd's children) in D state are I/O weather, not stuck GPU work.
        remnants = [
            stat.pid
            for stat in table.values()
            if stat.state in ("Z", "D")
            and stat.pid != 2
            and stat.ppid != 2
            and stat.pid not in trees
            and stat.pid not in self.probe_pids
        ]
        # So that the caps on the line (process count, command-line bytes) fall on the least important: GPU
        # holders, the rest of their trees, then zombie / D-state processes elsewhere.
        # Then what is left of jobs that held GPU memory before: what the clean slate asks about.
        left = sorted(pid for pid in self.remembered if pid in table and pid not in trees)
        ranked = sorted(gpu_mib) + sorted(trees - set(gpu_mib)) + left + sorted(remnants)
        chosen: list[int] = []
        taken: set[int] = set()
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
        return chosen, omitted

    def _describe(
        self, chosen: list[int], table: dict[int, ProcStat], gpu_mib: dict[int, dict[int, int]], now: float
    ) -> list[dict[str, Any]]:
        """The listed processes as snapshot dicts, by pid; forgets what is no longer listed."""
        live_keys: set[tuple[int, int]] = set()
        budget = WireBudget()
        now_mono = time.monotonic()
        self._waits.begin()
        jobs = self.job_pids | set(self.remembered)
        self.owners.texts.begin()
        try:
            processes = [
                self._entry(table[pid], gpu_mib, now, now_mono, budget, pid in jobs, live_keys)
                for pid in chosen
            ]
        finally:
            self.owners.texts.end()
        processes.sort(key=lambda proc: proc["pid"])
        for book in (self._states, self._entries):
            for key in [k for k in book if k not in live_keys]:
                del book[key]
        self.details.forget_except(live_keys)
        self.owners.forget_except(live_keys)
        self.profilers.forget_except(live_keys)
        self._cpu.forget_except(live_keys)
        self._waits.forget_except(live_keys)
        return processes

    def _entry(
        self,
        stat: ProcStat,
        gpu_mib: dict[int, dict[int, int]],
        now: float,
        now_mono: float,
        budget: WireBudget,
        in_job: bool,
        live_keys: set[tuple[int, int]],
    ) -> dict[str, Any]:
        """One listed process as a snapshot dict: the one made before where the process has not run since
        (``STILL_ENTRY_KEEP_S``) and it would say the same, else a new one."""
        pid = stat.pid
        key = (pid, stat.start_ticks)
        live_keys.add(key)
        # What may differ though the process did not run: its CPU share (the window moved), whether it waits.
        cpu_pct = self._cpu.percent(key, stat.cpu_ticks, now_mono)
        waits = self._waits.waits(stat, now, in_job)
        kept = self._entries.get(key)
        made_at = now_mono
        if (
            kept is not None
            and pid not in gpu_mib
            and kept[2] == in_job
            and stat.state not in ("D", "Z")
            and stat.unmoved_since(kept[1])
            and cpu_pct == kept[4].get(PROCESS_CPU_PCT)
            and waits is None
            and self._still_described(kept, stat, now_mono)
        ):
            details, entry = kept[3], kept[4]
            made_at = self._entries[key][0]  # as ``_still_described`` left it
            taken = budget.take(details["cmdline"], details["cmdline_truncated"], details["cmdline_bytes"])
            if taken == (entry["cmdline"], entry["cmdline_truncated"]):
                return entry
        else:
            details = self.details.details(stat, now)
            taken = budget.take(details["cmdline"], details["cmdline_truncated"], details["cmdline_bytes"])
        seen = self._states.get(key)
        if seen is None or seen[0] != stat.state:
            seen = (stat.state, now)
            self._states[key] = seen
        cmdline, truncated = taken
        entry = {
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
            PROCESS_OWNER: self.owners.owner(pid, stat.start_ticks, details["user"], details["uid"]),
        }
        # The keys most processes have no value for are left out where they have none (the reader takes
        # an absent key as null): a job of hundreds of idle members would carry them on every line.
        for name, value in (
            (PROCESS_LIVE_THREADS, _live_threads(stat)),
            (PROCESS_CPU_PCT, cpu_pct),
            (PROCESS_WAITS, waits),
            (PROCESS_PROFILER, self._profiler(pid, stat, details["cmdline"])),
        ):
            if value is not None:
                entry[name] = value
        if pid in gpu_mib:
            # A visible GPU process only: never a local pid that only shares the number. A GPU process
            # has every per-GPU key, empty where no GPU has a sample of it.
            entry.update(self._gpu_util.fields(pid))
            # Its GPU figures are this sample's, not its stat line's: never handed out again, even once it
            # holds nothing.
            self._entries.pop(key, None)
        else:
            self._entries[key] = (made_at, stat, in_job, details, entry)
        return entry

    def _still_described(self, kept: KeptEntry, stat: ProcStat, now_mono: float) -> bool:
        """Whether a still process's kept entry says what it would now: after ``STILL_ENTRY_KEEP_S`` its
        cgroup (which changes from outside) is read again, and the entry's time starts again if it and the
        owner it makes are the same."""
        made_at, _stat, in_job, details, entry = kept
        if now_mono - made_at < STILL_ENTRY_KEEP_S:
            return True
        if self.details.cgroup(stat) != entry["cgroup"]:
            return False
        owner = self.owners.owner(stat.pid, stat.start_ticks, details["user"], details["uid"])
        if owner != entry[PROCESS_OWNER]:
            return False
        self._entries[(stat.pid, stat.start_ticks)] = (now_mono, stat, in_job, details, entry)
        return True

    def _profiler(self, pid: int, stat: ProcStat, cmdline: list[str]) -> dict[str, Any] | None:
        """``PROCESS_PROFILER`` of a process of a GPU job, or of a job whose memory is gone (its profiler
        may outlive it); None for every other process."""
        if pid not in self.job_pids and pid not in self.remembered:
            return None
        return self.profilers.mark(pid, stat.start_ticks, cmdline)

    def _is_local_gpu_pid(self, pid: int, table: dict[int, ProcStat]) -> bool:
        """Whether the driver's ``pid`` is the local process with that number.

        On the host it is whenever it exists. The driver knows no PID namespace: its pids are the host's. In a
        child namespace a local process with the same number is another process, even one that holds a
        /dev/nvidia* node (of another GPU, or of this one through another context), and the host's number
        cannot be found here either: a container's own /proc lists each process's ``NSpid`` from the
        container's level down, never the host's. So there no driver pid is a local process: each is "not
        visible here", never shown, offered or signalled by its number.
        """
        return pid > 0 and pid in table and not self.child_pid_namespace

    def launcher_cmdlines(self) -> list[dict[str, Any]]:
        """``{"pid", "cmdline"}`` of the processes whose name says they may be inference-server launchers,
        from the last whole-host sweep (a sweep of its own before the first one), for health discovery.

        Only those command lines are read (a few pids, not every one on the host), each kept per process
        (pid + start ticks) for ``CMDLINE_CACHE_S``.
        """
        table = self._full_table if self._full_table is not None else scan_proc()
        now = time.monotonic()
        found: list[dict[str, Any]] = []
        kept: dict[tuple[int, int], tuple[float, list[str]]] = {}
        verdicts = self._launcher_names
        if len(verdicts) > LAUNCHER_NAMES_KEPT:
            verdicts.clear()
        for stat in table.values():
            name = stat.name
            launcher_like = verdicts.get(name)
            if launcher_like is None:
                launcher_like = verdicts[name] = self.may_be_launcher(name)
            if not launcher_like:
                continue
            key = (stat.pid, stat.start_ticks)
            cached = self._launcher_cmdlines.get(key)
            if cached is None or now - cached[0] >= CMDLINE_CACHE_S:
                cmdline = read_cmdline(stat.pid)
                if cmdline is None:
                    continue
                cached = (now, cmdline)
            kept[key] = cached
            found.append({"pid": stat.pid, "cmdline": cached[1]})
        self._launcher_cmdlines = kept
        return found

    def gpu_mib_of(self, pid: int) -> int | None:
        """The GPU memory the last list says ``pid`` holds, over all GPUs; None when it is not listed."""
        for proc in self.processes:
            if proc["pid"] == pid:
                return sum(proc["gpu_memory_mib"].values())
        return None

    def close(self) -> None:
        self._stat_fds.close()


def _live_threads(stat: ProcStat) -> dict[str, Any] | None:
    """A zombie-state process's live threads (a defunct leader's, or none: a true zombie); None otherwise."""
    if stat.state != "Z":
        return None
    from gputui.agent.proc.threads import zombie_threads_summary  # only hosts with a zombie listed load it

    return zombie_threads_summary(stat.pid, stat.start_ticks)


def ghost_suspected(gpus: list[dict[str, Any]]) -> bool:
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


def _v1_reserved_allowance(gpu: dict[str, Any]) -> int:
    """Without v2 memory info the driver's reservation hides in "used": allow ~1% of the total for it."""
    total = gpu.get("memory_total_mib") or 0
    return int(total) // 100
