"""Findings: what is stuck, dead or unaccounted for on a host, and what escaped a killed job.

``GHOST_TOLERANCE_MIB`` (64 MiB) is how much more a GPU may use than its baseline plus what its listed
processes hold before that is called ghost memory. Per-process figures are rounded to MiB one process at a
time and exclude some per-context driver allocations, so with eight or more processes on a GPU the sum falls
short of the device total by a few MiB each; 64 MiB covers that comfortably and is still far below a leaked
context. When no process is listed at all, any excess over baseline + tolerance is ghost memory.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from gputui.core.jobs import (
    D_STATE_THRESHOLD_S,
    graphics_only_pids,
    is_init_like,
    sample_index,
    shown,
)
from gputui.core.model import (
    STATE_UNINTERRUPTIBLE,
    STATE_ZOMBIE,
    Finding,
    FindingFacts,
    Gpu,
    HostSnapshot,
    Proc,
    Record,
    replace,
)
from gputui.core.text import fit
from gputui.core.verdict.baselines import Baselines
from gputui.core.verdict.profiling import KINDS as PROFILING_KINDS
from gputui.core.verdict.profiling import profiled_findings

GHOST_TOLERANCE_MIB = 64
"""Allowed gap between a GPU's used memory and baseline + listed processes (see the module docstring)."""

DEFUNCT_RESET_AFTER_S = 600.0
"""A defunct leader whose threads have been stuck in the driver (D) this long while GPU memory is held: the
driver or the GPU needs a reset (a thread in a driver call comes out when the call returns)."""

FINDING_KINDS = (
    "zombie",
    "defunct_leader",
    "orphan",
    "uninterruptible",
    "ghost_memory",
    "invisible_pid",
    "survivor",
    "xid",
    "gpu_health",
    "xid_history",
    "leftover",
    "duplicate_host",
    "stuck_thread",
    *PROFILING_KINDS,
    "spinning",
)
"""``xid`` comes from the fleet source (a GPU's last XID error is not 0) and from ``gpu_health`` (an
application Xid, an Xid no GPU has), as do ``gpu_health`` (the GPU needs a reset, reboot or drain) and
``xid_history`` (the kernel log could not be read); ``duplicate_host`` (two exporters claim one host) from the
fleet source; ``leftover`` from ``store.leftovers`` (what a killed job left in /dev/shm); ``profiled`` and
``profiler_unknown`` from ``profiling``; ``stuck_thread`` from ``stuck`` (a process whose threads are stuck
in the kernel, neither in D itself nor a defunct leader); ``spinning`` from the server watch
(``servers.spinning``: a GPU job's collective likely hung); the rest from ``find_problems`` and
``find_survivors``."""

# Processes that keep /dev/nvidia* open without holding memory: never ghost-memory suspects.
_BENIGN_DEVICE_HOLDERS = frozenset({"nvidia-persiste", "nvidia-persistenced"})


def _state_age(proc: Proc, now: float) -> float | None:
    if proc.state_since is None:
        return None
    return max(0.0, now - proc.state_since)


def suspect_text(pid: int, name: str, device: str) -> str:
    """One ghost-memory suspect as every view says it."""
    return f"pid {pid} ({name}) has {device} open"


def ghost_suspects(snapshot: HostSnapshot, gpu: Gpu) -> list[tuple[int, str, str]]:
    """(pid, name, device node) for processes that may hold this GPU's unlisted memory: those with its own
    node open, else those with a node of no GPU open (``/dev/nvidia*``)."""
    if not snapshot.device_holders:
        return []
    own = f"/dev/nvidia{gpu.index}"
    listed = {p.pid for p in gpu.processes}
    specific: dict[int, str] = {}
    generic: dict[int, str] = {}
    for holder in snapshot.device_holders:
        if holder.pid == snapshot.agent_pid or holder.pid in listed:
            continue  # the collector opens every device node itself; listed holders are accounted for
        if (holder.name or "") in _BENIGN_DEVICE_HOLDERS:
            continue
        device = holder.device or ""
        if device == own:
            specific.setdefault(holder.pid, shown(holder.name))
        elif not device[len("/dev/nvidia") :].isdigit():
            generic.setdefault(holder.pid, shown(holder.name))
    chosen, device_text = (specific, own) if specific else (generic, "/dev/nvidia*")
    return [(pid, name, device_text) for pid, name in sorted(chosen.items())]


def find_problems(
    snapshot: HostSnapshot,
    baselines: Baselines,
    now: float | None = None,
    ghost_tolerance_mib: int = GHOST_TOLERANCE_MIB,
    d_state_threshold_s: float = D_STATE_THRESHOLD_S,
    killed_jobs: Iterable[KilledJob] = (),
    one_shot: bool = False,
) -> list[Finding]:
    """Everything stuck, dead or unaccounted for on one host.

    Args:
        snapshot: One host's snapshot.
        baselines: Idle baselines (ghost memory is memory above them).
        now: Epoch seconds to measure ages against; default the snapshot's time, else the clock.
        ghost_tolerance_mib: Allowed gap between used memory and baseline + listed processes, in MiB.
        d_state_threshold_s: Seconds in D state before it is reported.
        killed_jobs: Jobs killed on this host: what escaped them is a survivor (``find_survivors``).
        one_shot: The sample of a one-shot run (``snapshot``, ``check``): a process of a GPU tree seen in D
            once is a finding, "for how long unknown" (a watching view waits for the threshold).

    Returns:
        Findings: zombies, D-state processes, orphans, invisible pids, ghost memory per GPU, survivors, then
        the jobs that run under a profiler (``profiling``).
    """
    now_s = now if now is not None else snapshot.time if snapshot.time is not None else time.time()
    target = snapshot.target
    index = sample_index(snapshot)
    table, tree_pids = index.table, index.tree_pids
    findings: list[Finding] = []

    for proc in sorted(table.values(), key=lambda p: p.pid):
        age = _state_age(proc, now_s)
        parent = table.get(proc.ppid) if proc.ppid is not None else None
        if proc.is_defunct_leader:
            findings.append(defunct_leader_finding(target, proc, age, parent))
        elif proc.state == STATE_ZOMBIE:
            # init reaps its zombies within moments: only one that lingers says something is wrong.
            reaped_soon = proc.ppid in (None, 0, 1) and (age is None or age < d_state_threshold_s)
            if not reaped_soon:
                findings.append(zombie_finding(target, proc, table, age))
        elif proc.state == STATE_UNINTERRUPTIBLE:
            long_enough = age is not None and age >= d_state_threshold_s
            # A one-shot sample (snapshot, check) saw the state once: how long it lasted is not known, and a
            # GPU job's process in D is worth saying even so.
            seen_once = (age is None or one_shot) and proc.pid in tree_pids
            if long_enough or seen_once:
                findings.append(uninterruptible_finding(target, proc, age if long_enough else None, parent))
        if proc.gpu_memory_mib and proc.state != STATE_ZOMBIE and proc.ppid is not None:
            if is_init_like(parent, proc.ppid):
                findings.append(orphan_finding(target, proc, parent))

    for gpu in snapshot.gpus:
        for listed in gpu.processes:
            if not listed.visible:
                findings.append(invisible_pid_finding(target, gpu.index, listed.pid, listed.used_mib))

    for gpu in snapshot.gpus:
        finding = ghost_finding(snapshot, gpu, baselines, ghost_tolerance_mib)
        if finding is not None:
            findings.append(finding)
    survivors = find_survivors(snapshot, killed_jobs)
    # A survivor is an orphan too; the survivor finding says more (which job it escaped).
    escaped = {f.pid for f in survivors}
    kept = [f for f in findings if not (f.kind == "orphan" and f.pid in escaped)]
    return kept + survivors + profiled_findings(snapshot)


def process_facts(proc: Proc, parent: Proc | None = None, age: float | None = None) -> FindingFacts:
    """What a process finding's sentence is built from: the process, its parent, its memory and age."""
    threads = proc.live_threads
    return FindingFacts(
        pid=proc.pid,
        name=proc.name,
        ppid=proc.ppid,
        parent_name=None if parent is None else parent.name,
        memory_mib=tuple(sorted(proc.gpu_memory_mib.items())),
        state_since=proc.state_since,
        age_s=age,
        threads=() if threads is None else tuple(threads.states.items()),
        threads_live=None if threads is None else threads.live,
        threads_omitted=0 if threads is None else threads.omitted,
    )


def _label(pid: int | None, name: str | None) -> str:
    """ "4242 (python)", the way ``proc_label`` says a process (the name made safe for a terminal)."""
    return f"{pid} ({shown(name)})"


def _gpus_text(facts: FindingFacts) -> str:
    return ", ".join(f"GPU{i}" for i in facts.gpus)


def orphan_words(target: str, f: FindingFacts) -> Finding:
    """A process holding GPU memory whose parent is init (or an init-like subreaper)."""
    return Finding(
        kind="orphan",
        target=target,
        pid=f.pid,
        gpu_index=min(f.gpus),
        detail=f"pid {_label(f.pid, f.name)} holds {f.held_mib} MiB on {_gpus_text(f)} but its "
        f"launcher is gone (parent is now {_label(f.ppid, f.parent_name)}), "
        "or it was started as a service",
        action=f"kill pid {f.pid} (--tree to include its children)",
        action_pid=f.pid,
        facts=f,
    )


def orphan_finding(target: str, proc: Proc, parent: Proc | None) -> Finding:
    return orphan_words(target, process_facts(proc, parent))


def invisible_pid_words(target: str, f: FindingFacts) -> Finding:
    """A GPU holder listed by the driver whose pid belongs to another PID namespace."""
    held = "memory" if f.used_mib is None else f"{f.used_mib} MiB"
    return Finding(
        kind="invisible_pid",
        target=target,
        gpu_index=f.gpu,
        # pid stays None: the number belongs to another PID namespace and must never be used here.
        detail=f"GPU{f.gpu}: pid {f.pid} holds {held} but is not visible here "
        "(another PID namespace, e.g. a container)",
        action="stop it from inside its container; gputui never signals it from here",
        facts=f,
    )


def invisible_pid_finding(target: str, gpu_index: int, pid: int, used_mib: int | None) -> Finding:
    return invisible_pid_words(target, FindingFacts(pid=pid, gpu=gpu_index, used_mib=used_mib))


def duplicate_host_finding(target: str, instances: tuple[str, ...]) -> Finding:
    """The finding that says several exporters claim one host, whose GPUs are then not merged."""
    count = "two" if len(instances) == 2 else str(len(instances))
    shown = ", ".join(fit(i, 60) for i in instances[:4]) + (", ..." if len(instances) > 4 else "")
    return Finding(
        kind="duplicate_host",
        target=target,
        detail=f"{count} exporters claim {fit(target, 60)} ({shown}) with different GPUs: not merged",
        action="give each exporter its own host label (the DCGM exporter's Hostname, or a relabel rule)",
    )


def xid_finding(target: str, gpu_index: int, code: int) -> Finding:
    """The finding that says a GPU's last XID error is not 0 (the SSH view and ``dmesg`` tell more)."""
    return Finding(
        kind="xid",
        target=target,
        gpu_index=gpu_index,
        detail=f"GPU{gpu_index} reported XID {code} as DCGM's last Xid",
        action="look at the host's kernel log (dmesg | grep -i xid); open it over SSH for its processes",
    )


def uninterruptible_words(target: str, f: FindingFacts) -> Finding:
    """``age_s`` None: how long it has been in D is not known (seen once): the finding has no start then."""
    unknown = " (for how long unknown)" if f.age_s is None else ""
    return Finding(
        kind="uninterruptible",
        target=target,
        pid=f.pid,
        detail=f"pid {_label(f.pid, f.name)} is in uninterruptible sleep (D){unknown}; "
        "it may not die even on SIGKILL until its I/O or driver call returns",
        since=None if f.age_s is None else f.state_since,
        action="kill it and check again; if it stays in D, look at dmesg (driver or storage)",
        action_pid=f.pid,
        facts=f,
    )


def uninterruptible_finding(
    target: str, proc: Proc, age: float | None, parent: Proc | None = None
) -> Finding:
    return uninterruptible_words(target, process_facts(proc, parent, age))


def remnant_sentence(
    target: str, proc: Proc, table: dict[int, Proc], now_s: float | None, one_shot: bool = False
) -> str:
    """The sentence the verdict gives for a zombie or D-state process left in a GPU tree: its finding's,
    word for word (one fact, one sentence), whether or not the finding's threshold has passed yet."""
    age = None if now_s is None else _state_age(proc, now_s)
    if proc.is_defunct_leader:
        return defunct_leader_finding(target, proc, age).detail
    if proc.state == STATE_ZOMBIE:
        return zombie_finding(target, proc, table, age).detail
    known = age is not None and not (one_shot and age < D_STATE_THRESHOLD_S)
    return uninterruptible_finding(target, proc, age if known else None).detail


def zombie_words(target: str, f: FindingFacts) -> Finding:
    since = None if f.age_s is None else f.state_since
    if f.root_pid is not None:
        return job_zombie_words(target, f, since)
    if f.ppid in (None, 0, 1):
        return Finding(
            kind="zombie",
            target=target,
            pid=f.pid,
            detail=f"pid {_label(f.pid, f.name)} is defunct; its parent is init (pid 1), which should reap "
            "it",
            action="nothing to kill: a zombie holds no memory and cannot be signalled",
            since=since,
            facts=f,
        )
    parent = f"{f.ppid} (?)" if f.parent_name is None else _label(f.ppid, f.parent_name)
    return Finding(
        kind="zombie",
        target=target,
        pid=f.pid,
        detail=f"pid {_label(f.pid, f.name)} is defunct; its parent {parent} has not reaped it",
        action=f"signal or kill its parent {f.ppid}: a zombie itself cannot be killed",
        action_pid=f.ppid,
        since=since,
        facts=f,
    )


def job_zombie_words(target: str, f: FindingFacts, since: float | None) -> Finding:
    """A defunct process of a job whose GPU memory is gone (``root_pid``: the job), whoever its parent is:
    an init that does not reap (a container's) is stopped with its container, never signalled."""
    job = f"the job of pid {f.root_pid} ({shown(f.root_name)})"
    init_like = f.ppid in (None, 0, 1) or f.why == WHY_PARENT
    parent = f"{f.ppid} (?)" if f.parent_name is None else _label(f.ppid, f.parent_name)
    detail = f"pid {_label(f.pid, f.name)} of {job} is defunct; its parent {parent} has not reaped it"
    host_init = f.ppid in (None, 0, 1)
    if not init_like:
        action = f"signal or kill its parent {f.ppid}: a zombie itself cannot be killed"
    elif f.owner:
        kind, _, name = f.owner.partition(":")
        action = f"stop the {kind} {name}: its init does not reap (never signal its pid 1)"
    elif not host_init:
        action = f"stop its parent {parent}, the init that does not reap it: a zombie itself cannot be killed"
    else:
        action = "nothing to kill: a zombie holds no memory; init should reap it (a reboot clears it)"
    return Finding(
        kind="zombie",
        target=target,
        pid=f.pid,
        detail=detail,
        action=action,
        action_pid=None if host_init or f.owner else f.ppid,
        since=since,
        facts=f,
    )


def zombie_finding(target: str, proc: Proc, table: dict[int, Proc], age: float | None) -> Finding:
    parent = table.get(proc.ppid) if proc.ppid is not None else None
    return zombie_words(target, process_facts(proc, parent, age))


def thread_states_text(states: dict[str, int]) -> str:
    """ "2 in D (uninterruptible), 1 in S" from a state letter -> count map."""
    return ", ".join(
        f"{count} in {fit(state, 2)}" + (" (uninterruptible)" if state == STATE_UNINTERRUPTIBLE else "")
        for state, count in states.items()
    )


def defunct_leader_words(target: str, f: FindingFacts) -> Finding:
    """A leader in state Z whose threads live on: the process has not exited, so it still holds its memory;
    its parent cannot reap what has not exited, so signalling the parent frees nothing."""
    count = (f.threads_live or 0) + f.threads_omitted
    states = thread_states_text(dict(f.threads))
    held = f.held_mib
    detail = (
        f"pid {_label(f.pid, f.name)}: its leader is defunct but {count} thread"
        f"{' lives' if count == 1 else 's live'} on ({states or 'states unknown'})"
    )
    if held:
        detail += f", holding {held} MiB on {_gpus_text(f)}"
    stuck = dict(f.threads).get(STATE_UNINTERRUPTIBLE, 0) > 0
    if stuck and held:
        minutes = DEFUNCT_RESET_AFTER_S / 60
        detail += (
            f"; threads stuck in the driver: memory is released when they exit; if it is still held after "
            f"{minutes:.0f} minutes the driver or GPU needs a reset"
        )
        if f.age_s is not None and f.age_s >= DEFUNCT_RESET_AFTER_S:
            action = (
                f"held past {minutes:.0f} minutes: reset the GPU (nvidia-smi -r) or "
                "reload the driver; signalling the parent frees nothing"
            )
        else:
            action = (
                f"wait for the threads to leave the driver; kill {f.pid}: it may still help threads not "
                "yet in D; signalling the parent frees nothing"
            )
    else:
        action = f"kill {f.pid}: its live threads hold the process; signalling the parent frees nothing"
    return Finding(
        kind="defunct_leader",
        target=target,
        pid=f.pid,
        gpu_index=min(f.gpus) if f.gpus else None,
        detail=detail,
        action=action,
        action_pid=f.pid,
        since=None if f.age_s is None else f.state_since,
        facts=f,
    )


def defunct_leader_finding(target: str, proc: Proc, age: float | None, parent: Proc | None = None) -> Finding:
    facts = process_facts(proc, parent, age)
    if facts.threads_live is None:
        facts = replace(facts, threads_live=0)
    return defunct_leader_words(target, facts)


def ghost_words(target: str, f: FindingFacts) -> Finding:
    if f.listed_mib is not None:
        what = (
            f"{f.excess_mib} MiB more than its {f.baseline_mib} MiB baseline and its listed processes "
            f"({f.listed_mib} MiB)"
        )
    else:
        what = f"{f.excess_mib} MiB over its {f.baseline_mib} MiB baseline with no process listed"
    if f.suspects:
        detail = f"GPU{f.gpu} holds {what} (ghost memory); suspects: " + "; ".join(
            suspect_text(*suspect) for suspect in f.suspects
        )
        action = "kill the suspects holding the device open, then check again"
    else:
        detail = f"GPU{f.gpu} holds {what} (ghost memory)"
        action = (
            "no process has the device open: wait for the driver to free it, or reset the GPU (nvidia-smi -r)"
            if f.holders_known
            else "look for processes with /dev/nvidia* open (fuser -v /dev/nvidia*)"
        )
    return Finding(
        kind="ghost_memory",
        target=target,
        gpu_index=f.gpu,
        detail=detail,
        action=action,
        action_pid=f.pid,
        facts=f,
    )


def ghost_finding(
    snapshot: HostSnapshot, gpu: Gpu, baselines: Baselines, tolerance_mib: int
) -> Finding | None:
    if gpu.error is not None or gpu.memory_used_mib is None:
        return None
    baseline = baselines.for_gpu(gpu)
    listed_mib: int | None = None
    if gpu.processes:
        if any(p.used_mib is None for p in gpu.processes):
            return None  # the driver will not say what each holds: no sum to compare against
        listed_mib = sum(p.used_mib or 0 for p in gpu.processes)
        excess = gpu.memory_used_mib - baseline - listed_mib
        if excess <= tolerance_mib:
            return None
    else:
        excess = gpu.memory_used_mib - baseline
        if excess <= baselines.tolerance_mib:
            return None
    suspects = ghost_suspects(snapshot, gpu)
    facts = FindingFacts(
        # The one suspect's pid is the action's: the only process that can be holding the memory.
        pid=suspects[0][0] if len(suspects) == 1 else None,
        gpu=gpu.index,
        used_mib=gpu.memory_used_mib,
        baseline_mib=baseline,
        listed_mib=listed_mib,
        excess_mib=excess,
        suspects=tuple(suspects),
        holders_known=snapshot.device_holders is not None,
    )
    return ghost_words(snapshot.target, facts)


class KilledJob(Record):
    """A job a kill operation took down, remembered to tell what escaped it.

    Attributes:
        root_pid: The job's root (a requested process of the kill).
        root_name: Its name (untrusted text).
        start_ticks: The root's start time in clock ticks: a survivor started after it.
        uid: The root's owner: a survivor runs as the same user.
        cgroup: The root's cgroup (``Proc.cgroup``), None when unknown.
        gpus: GPU indices the job held memory on when it was killed.
        members: (pid, start_ticks) of everything the kill reached.
        boot_id: The host's boot id at the kill (another boot: the job is long gone).
    """

    root_pid: int
    root_name: str | None
    start_ticks: int | None
    uid: int | None
    cgroup: str | None
    gpus: frozenset[int]
    members: frozenset[tuple[int, int | None]]
    boot_id: str | None = None


def _informative_cgroup(cgroup: str | None) -> bool:
    """Whether a cgroup tells jobs apart: known and not the root every process shares without a manager."""
    return cgroup is not None and cgroup != "/"


WHY_CGROUP, WHY_SESSION, WHY_PARENT = "cgroup", "session", "parent"
"""What ties a survivor to a killed job: its cgroup, a session of its own, or an init-like parent."""
WHY_MEMBER = "member"
"""A survivor that was seen as a member of the job (``RememberedJob``); on a zombie's facts, ``parent``
says its parent is init-like."""


def _escaped(proc: Proc, job: KilledJob, table: dict[int, Proc], gpus: set[int]) -> str | None:
    """How ``proc`` got out of ``job``'s tree if it looks like a survivor of it (``WHY``), else None.

    It runs as the job's user and started after the job's root, and either shares the job's cgroup (where
    cgroups tell jobs apart), or left every tree (init adopted it, or it leads a session of its own) while
    using one of the job's GPUs: a daemon the job started with ``setsid`` and a double fork.
    """
    if (proc.pid, proc.start_ticks) in job.members or proc.is_zombie:
        return None
    if job.uid is not None and proc.uid is not None and proc.uid != job.uid:
        return None
    if job.start_ticks is None or proc.start_ticks is None or proc.start_ticks < job.start_ticks:
        return None
    if _informative_cgroup(job.cgroup) and proc.cgroup is not None:
        return WHY_CGROUP if proc.cgroup == job.cgroup else None
    if not gpus & job.gpus:
        return None
    if proc.sid is not None and proc.sid == proc.pid:
        return WHY_SESSION
    parent = table.get(proc.ppid) if proc.ppid is not None else None
    if is_init_like(parent, proc.ppid):
        return WHY_PARENT
    return None


def survivor_words(target: str, f: FindingFacts) -> Finding:
    """A process that escaped a killed job's tree (``why``: what ties it to the job) and still holds a
    GPU; or (``why`` ``member``) a process of a job whose GPU memory is gone that still runs."""
    if f.why == WHY_MEMBER:
        return Finding(
            kind="survivor",
            target=target,
            pid=f.pid,
            detail=f"pid {_label(f.pid, f.name)} still runs: a process of the job of pid "
            f"{f.root_pid} ({shown(f.root_name)}), whose GPU memory is gone",
            action=f"gputui kill {target} {f.pid}",
            action_pid=f.pid,
            facts=f,
        )
    held = f.held_mib
    what = f"holds {held} MiB on {_gpus_text(f)}" if held else "has a /dev/nvidia* node open"
    root = f"{f.root_pid} ({shown(f.root_name)})"
    why = {
        WHY_CGROUP: "in the job's cgroup",
        WHY_SESSION: "it leads a session of its own",
        WHY_PARENT: f"its parent is {_label(f.ppid, f.parent_name) if f.parent_name else f'{f.ppid} (?)'}",
    }.get(f.why or "", "?")
    return Finding(
        kind="survivor",
        target=target,
        pid=f.pid,
        gpu_index=min(f.gpus) if f.gpus else None,
        detail=f"pid {_label(f.pid, f.name)} {what}: a survivor of the job of pid {root}, outside "
        f"its tree ({why})",
        action=f"kill pid {f.pid} if it belongs to that job",
        action_pid=f.pid,
        facts=f,
    )


def survivor_finding(
    target: str, proc: Proc, job: KilledJob, why: str, parent: Proc | None = None
) -> Finding:
    facts = replace(process_facts(proc, parent), root_pid=job.root_pid, root_name=job.root_name, why=why)
    return survivor_words(target, facts)


def find_survivors(snapshot: HostSnapshot, jobs: Iterable[KilledJob]) -> list[Finding]:
    """Processes that escaped a killed job's tree and still hold GPU memory or a /dev/nvidia* node.

    Graphics-only holders are never survivors of a GPU job. Each survivor is named once, after the most
    recent job it may have come from (``_escaped`` says what ties it to that job).
    """
    jobs = [job for job in jobs if job.boot_id is None or job.boot_id == snapshot.boot_id]
    if not jobs:
        return []
    table = sample_index(snapshot).table
    graphics = graphics_only_pids(snapshot)
    using: dict[int, set[int]] = {
        pid: set(proc.gpu_memory_mib)
        for pid, proc in table.items()
        if proc.gpu_memory_mib and pid not in graphics
    }
    any_job_gpu: set[int] = set().union(*(job.gpus for job in jobs))
    for holder in snapshot.device_holders or ():
        if holder.pid == snapshot.agent_pid or (holder.name or "") in _BENIGN_DEVICE_HOLDERS:
            continue
        node = (holder.device or "")[len("/dev/nvidia") :]
        # A control node (/dev/nvidiactl, /dev/nvidia-uvm) says nothing about which GPU: any of the jobs'.
        using.setdefault(holder.pid, set()).update({int(node)} if node.isdigit() else any_job_gpu)
    findings: list[Finding] = []
    for pid in sorted(using):
        proc = table.get(pid)
        if proc is None:
            continue
        for job in sorted(jobs, key=lambda j: -(j.start_ticks or 0)):
            why = _escaped(proc, job, table, using[pid])
            if why is None:
                continue
            parent = table.get(proc.ppid) if proc.ppid is not None else None
            findings.append(survivor_finding(snapshot.target, proc, job, why, parent))
            break
    return findings


def job_remnants(snapshot: HostSnapshot, members: Iterable[tuple[int, int | None]]) -> list[Proc]:
    """The processes of a killed job still listed as zombies or in uninterruptible sleep (D)."""
    wanted = set(members)
    return [
        proc
        for proc in snapshot.processes
        if (proc.pid, proc.start_ticks) in wanted and proc.state in (STATE_ZOMBIE, STATE_UNINTERRUPTIBLE)
    ]
