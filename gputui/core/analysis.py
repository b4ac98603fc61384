"""Pure functions over host snapshots: GPU process trees, findings and the clean-slate verdict.

Nothing here does I/O or reads a clock unless no time is given; everything is a function of the snapshot and
the baselines, so the UI, ``gputui check`` and the tests all see the same answer for the same data.

Two tolerances, on purpose different:

* ``Baselines.tolerance_mib`` (default ``DEFAULT_TOLERANCE_MIB`` = 2 MiB) is how far above its idle baseline
  a GPU may be and still count as clean. The idle figure is the driver's own bookkeeping and does not drift
  by more than a MiB or two between samples or driver restarts, while the smallest thing that can really be
  left behind, a CUDA context, takes well over 100 MiB. 2 MiB absorbs rounding and jitter without ever
  hiding a leftover context. The "3 MiB" idle figure itself is ``DEFAULT_BASELINE_MIB``.
* ``GHOST_TOLERANCE_MIB`` (64 MiB) is how much more a GPU may use than its baseline plus what its listed
  processes hold before that is called ghost memory. Per-process figures are rounded to MiB one process at a
  time and exclude some per-context driver allocations, so with eight or more processes on a GPU the sum
  falls short of the device total by a few MiB each; 64 MiB covers that comfortably and is still far below
  a leaked context. When no process is listed at all, any excess over baseline + tolerance is ghost memory.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gputui.agent import JobFacts, job_root
from gputui.agent import is_session_boundary as agent_is_session_boundary
from gputui.core.model import (
    STATE_UNINTERRUPTIBLE,
    STATE_ZOMBIE,
    Finding,
    Gpu,
    GpuVerdict,
    HostSnapshot,
    Proc,
    Verdict,
)
from gputui.core.textsafe import visible

DEFAULT_BASELINE_MIB = 3
"""Idle memory of a GPU with no CUDA context: what ``nvidia-smi --query-gpu=memory.used`` shows when free."""
DEFAULT_TOLERANCE_MIB = 2
"""Allowed excess over the idle baseline for the clean-slate verdict (see the module docstring)."""
GHOST_TOLERANCE_MIB = 64
"""Allowed gap between a GPU's used memory and baseline + listed processes (see the module docstring)."""
D_STATE_THRESHOLD_S = 5.0
"""Seconds a process must be in uninterruptible sleep before it is a finding (short D states are mere I/O)."""

NAME_MAX = 32
"""Longest process name shown inside a reason or finding line."""

FINDING_KINDS = ("zombie", "orphan", "uninterruptible", "ghost_memory", "invisible_pid", "survivor", "xid")
"""``xid`` comes from the fleet source (a GPU's last XID error is not 0), the rest from ``find_problems``
and ``find_survivors``."""
GRAPHICS = "graphics"
"""The NVML process type of display servers and compositors (type G in nvidia-smi)."""

# Parents that adopt orphans: a GPU process under one of these lost the launcher that started it.
_INIT_LIKE = frozenset({"init", "systemd", "tini", "docker-init", "dumb-init", "catatonit"})
# Processes that keep /dev/nvidia* open without holding memory: never ghost-memory suspects.
_BENIGN_DEVICE_HOLDERS = frozenset({"nvidia-persiste", "nvidia-persistenced"})


@dataclass(frozen=True)
class Baselines:
    """Idle memory per GPU for the clean-slate verdict.

    Attributes:
        default_mib: Baseline of a GPU that has no calibrated value, in MiB.
        tolerance_mib: Allowed excess over the baseline, in MiB.
        per_gpu_mib: GPU key (UUID, else "index:N") -> calibrated idle MiB.
    """

    default_mib: int = DEFAULT_BASELINE_MIB
    tolerance_mib: int = DEFAULT_TOLERANCE_MIB
    per_gpu_mib: dict[str, int] = field(default_factory=dict)

    def for_gpu(self, gpu: Gpu) -> int:
        """The baseline in MiB for this GPU: its calibrated value, else the default."""
        value = self.per_gpu_mib.get(gpu.key)
        if value is None and gpu.uuid is None:
            value = self.per_gpu_mib.get(f"index:{gpu.index}")
        return self.default_mib if value is None else value


@dataclass
class ProcNode:
    """One process in a GPU process tree.

    Attributes:
        proc: The process; its ``gpu_memory_mib`` is filled from the GPUs' process lists when needed.
        children: Child nodes, by pid.
        depth: 0 for a root.
        subtree_gpu_mib: GPU index -> MiB held by this process and all its descendants.
        subtree_total_mib: Sum of ``subtree_gpu_mib``.
        graphics_only: Every GPU lists it as a graphics process only (an X server, a compositor).
    """

    proc: Proc
    children: list[ProcNode] = field(default_factory=list)
    depth: int = 0
    subtree_gpu_mib: dict[int, int] = field(default_factory=dict)
    subtree_total_mib: int = 0
    graphics_only: bool = False


def _shown(text: str | None) -> str:
    return "?" if not text else visible(text, NAME_MAX)


def proc_label(proc: Proc | None, pid: int | None = None) -> str:
    """"4242 (python)" with the name made safe for a terminal."""
    if proc is None:
        return f"{pid} (?)"
    return f"{proc.pid} ({_shown(proc.name)})"


def age_text(seconds: float) -> str:
    """A short age for reasons and findings: "12 s", "3 min", "1.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _state_age(proc: Proc, now: float) -> float | None:
    if proc.state_since is None:
        return None
    return max(0.0, now - proc.state_since)


def is_session_boundary(proc: Proc) -> bool:
    """Whether ``proc`` started a session rather than belongs to the work below it.

    The collector's own rule (``gputui.agent.is_session_boundary``), so the tree the agent lists and kills is
    the tree the client shows: pid 0/1, sshd, tmux, screen, systemd, container shims and inits, job step
    daemons, and interactive or login shells; a shell running a script is part of the tree (the launcher).
    """
    return agent_is_session_boundary(proc.pid, proc.name, list(proc.cmdline))


def _is_init_like(proc: Proc | None, ppid: int | None) -> bool:
    if ppid in (0, 1):
        return True
    return proc is not None and (proc.name or "") in _INIT_LIKE


def gpu_memory_by_pid(snapshot: HostSnapshot) -> dict[int, dict[int, int]]:
    """Visible pid -> {GPU index: MiB}, from the processes and, where they say nothing, the GPUs' lists.

    Invisible pids (another PID namespace) are left out: their numbers mean nothing here.
    """
    held: dict[int, dict[int, int]] = {}
    for proc in snapshot.processes:
        if proc.gpu_memory_mib:
            held[proc.pid] = dict(proc.gpu_memory_mib)
    from_gpus: dict[int, dict[int, int]] = {}
    for gpu in snapshot.gpus:
        for listed in gpu.processes:
            if not listed.visible or listed.pid in held:
                continue
            per_gpu = from_gpus.setdefault(listed.pid, {})
            per_gpu[gpu.index] = max(per_gpu.get(gpu.index, 0), listed.used_mib or 0)
    held.update(from_gpus)
    return held


def _proc_table(snapshot: HostSnapshot) -> dict[int, Proc]:
    """pid -> Proc with GPU memory filled in; GPU pids the process list missed get a bare entry."""
    held = gpu_memory_by_pid(snapshot)
    table: dict[int, Proc] = {}
    for proc in snapshot.processes:
        mib = held.get(proc.pid, {})
        table[proc.pid] = proc if proc.gpu_memory_mib == mib else replace(proc, gpu_memory_mib=mib)
    for pid, mib in held.items():
        if pid not in table:
            table[pid] = Proc(pid=pid, gpu_memory_mib=mib)
    return table


def _children_map(table: dict[int, Proc]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for proc in table.values():
        if proc.ppid is not None and proc.ppid != proc.pid:
            children.setdefault(proc.ppid, []).append(proc.pid)
    for pids in children.values():
        pids.sort()
    return children


def _gpu_pids(table: dict[int, Proc]) -> list[int]:
    return sorted(pid for pid, proc in table.items() if proc.gpu_memory_mib)


def _job_facts(proc: Proc) -> JobFacts:
    return JobFacts(proc.pid, proc.ppid, proc.name, list(proc.cmdline), proc.sid, proc.pgid, proc.cgroup)


def _tree_root(pid: int, table: dict[int, Proc]) -> int:
    """The root of ``pid``'s GPU process tree: the collector's own rule (``gputui.agent.job_root``)."""

    def facts_of(other: int) -> JobFacts | None:
        proc = table.get(other)
        return None if proc is None else _job_facts(proc)

    return job_root(pid, facts_of)


def graphics_only_pids(snapshot: HostSnapshot) -> set[int]:
    """Visible pids that every GPU lists as graphics processes only (type G: Xorg, gnome-shell, ...)."""
    kinds: dict[int, set[str]] = {}
    for gpu in snapshot.gpus:
        for listed in gpu.processes:
            if listed.visible:
                kinds.setdefault(listed.pid, set()).add(listed.type)
    return {pid for pid, types in kinds.items() if types == {GRAPHICS}}


def _build_node(pid: int, depth: int, table: dict[int, Proc], children: dict[int, list[int]],
                placed: set[int], graphics: set[int]) -> ProcNode:
    placed.add(pid)
    node = ProcNode(proc=table[pid], depth=depth, graphics_only=pid in graphics)
    totals = dict(node.proc.gpu_memory_mib)
    for child_pid in children.get(pid, ()):
        if child_pid in placed:
            continue  # garbled ppid data must not loop
        child = _build_node(child_pid, depth + 1, table, children, placed, graphics)
        node.children.append(child)
        for index, mib in child.subtree_gpu_mib.items():
            totals[index] = totals.get(index, 0) + mib
    node.subtree_gpu_mib = dict(sorted(totals.items()))
    node.subtree_total_mib = sum(totals.values())
    return node


def build_forest(snapshot: HostSnapshot) -> list[ProcNode]:
    """The GPU process trees of a host: every process holding GPU memory with its launcher and the rest.

    Each tree is the holder's job: rooted at its highest ancestor in the same session and cgroup that is not
    a session boundary (sshd, tmux, a login shell, a service manager, a cron daemon, the display stack, ...;
    see ``is_session_boundary``) nor a daemon init adopted that does not lead the job (``gputui.agent
    .is_outside_job``), and holding every listed descendant of that root, zombies and D-state processes
    included. An sglang-style launcher with eight workers is one tree. Roots are ordered by the memory their
    tree holds (most first), then pid.
    """
    table = _proc_table(snapshot)
    children = _children_map(table)
    graphics = graphics_only_pids(snapshot)
    roots = sorted({_tree_root(pid, table) for pid in _gpu_pids(table)})
    placed: set[int] = set()
    forest = [
        _build_node(root, 0, table, children, placed, graphics) for root in roots if root not in placed
    ]
    forest.sort(key=lambda node: (-node.subtree_total_mib, node.proc.pid))
    return forest


def flatten(forest: Iterable[ProcNode]) -> list[ProcNode]:
    """Every node of the forest in pre-order (a parent before its children), for a tree table."""
    out: list[ProcNode] = []
    stack = list(reversed(list(forest)))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def gpu_tree_pids(snapshot: HostSnapshot) -> set[int]:
    """Pids of every process in a GPU process tree."""
    return {node.proc.pid for node in flatten(build_forest(snapshot))}


def _ghost_suspects(snapshot: HostSnapshot, gpu: Gpu) -> list[tuple[int, str]]:
    """(pid, "pid (name) has /dev/nvidiaN open") for processes that may hold this GPU's unlisted memory."""
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
            specific.setdefault(holder.pid, _shown(holder.name))
        elif not device[len("/dev/nvidia"):].isdigit():
            generic.setdefault(holder.pid, _shown(holder.name))
    chosen, device_text = (specific, own) if specific else (generic, "/dev/nvidia*")
    return [(pid, f"pid {pid} ({name}) has {device_text} open") for pid, name in sorted(chosen.items())]


def find_problems(
    snapshot: HostSnapshot,
    baselines: Baselines,
    now: float | None = None,
    ghost_tolerance_mib: int = GHOST_TOLERANCE_MIB,
    d_state_threshold_s: float = D_STATE_THRESHOLD_S,
    killed_jobs: Iterable[KilledJob] = (),
) -> list[Finding]:
    """Everything stuck, dead or unaccounted for on one host.

    Args:
        snapshot: One host's snapshot.
        baselines: Idle baselines (ghost memory is memory above them).
        now: Epoch seconds to measure ages against; default the snapshot's time, else the clock.
        ghost_tolerance_mib: Allowed gap between used memory and baseline + listed processes, in MiB.
        d_state_threshold_s: Seconds in D state before it is reported.
        killed_jobs: Jobs killed on this host: what escaped them is a survivor (``find_survivors``).

    Returns:
        Findings: zombies, D-state processes, orphans, invisible pids, ghost memory per GPU, then survivors.
    """
    now_s = now if now is not None else snapshot.time if snapshot.time is not None else time.time()
    target = snapshot.target
    table = _proc_table(snapshot)
    tree_pids = gpu_tree_pids(snapshot)
    findings: list[Finding] = []

    for proc in sorted(table.values(), key=lambda p: p.pid):
        age = _state_age(proc, now_s)
        if proc.state == STATE_ZOMBIE:
            # init reaps its zombies within moments: only one that lingers says something is wrong.
            reaped_soon = proc.ppid in (None, 0, 1) and (age is None or age < d_state_threshold_s)
            if not reaped_soon:
                findings.append(_zombie_finding(target, proc, table, age))
        elif proc.state == STATE_UNINTERRUPTIBLE:
            if (age is not None and age >= d_state_threshold_s) or (age is None and proc.pid in tree_pids):
                for_text = "" if age is None else f" for {age_text(age)}"
                findings.append(
                    Finding(
                        kind="uninterruptible",
                        target=target,
                        pid=proc.pid,
                        detail=f"pid {proc_label(proc)} has been in uninterruptible sleep (D){for_text}; "
                        "it may not die even on SIGKILL until its I/O or driver call returns",
                        action="kill it and check again; if it stays in D, look at dmesg (driver or storage)",
                        action_pid=proc.pid,
                    )
                )
        if proc.gpu_memory_mib and proc.state != STATE_ZOMBIE and proc.ppid is not None:
            parent = table.get(proc.ppid)
            if _is_init_like(parent, proc.ppid):
                gpus = ", ".join(f"GPU{i}" for i in sorted(proc.gpu_memory_mib))
                findings.append(
                    Finding(
                        kind="orphan",
                        target=target,
                        pid=proc.pid,
                        gpu_index=min(proc.gpu_memory_mib),
                        detail=f"pid {proc_label(proc)} holds {proc.gpu_total_mib} MiB on {gpus} but its "
                        f"launcher is gone (parent is now {proc_label(parent, proc.ppid)}), "
                        "or it was started as a service",
                        action=f"kill pid {proc.pid} (--tree to include its children)",
                        action_pid=proc.pid,
                    )
                )

    for gpu in snapshot.gpus:
        for listed in gpu.processes:
            if listed.visible:
                continue
            held = "memory" if listed.used_mib is None else f"{listed.used_mib} MiB"
            findings.append(
                Finding(
                    kind="invisible_pid",
                    target=target,
                    gpu_index=gpu.index,
                    # pid stays None: the number belongs to another PID namespace and must never be used here.
                    detail=f"GPU{gpu.index}: pid {listed.pid} holds {held} but is not visible here "
                    "(another PID namespace, e.g. a container)",
                    action="stop it from inside its container; gputui never signals it from here",
                )
            )

    for gpu in snapshot.gpus:
        finding = _ghost_finding(snapshot, gpu, baselines, ghost_tolerance_mib)
        if finding is not None:
            findings.append(finding)
    survivors = find_survivors(snapshot, killed_jobs)
    # A survivor is an orphan too; the survivor finding says more (which job it escaped).
    escaped = {f.pid for f in survivors}
    return [f for f in findings if not (f.kind == "orphan" and f.pid in escaped)] + survivors


def _zombie_finding(target: str, proc: Proc, table: dict[int, Proc], age: float | None) -> Finding:
    parent = table.get(proc.ppid) if proc.ppid is not None else None
    # The collector only knows when *it* first saw the state: an age under a second says nothing.
    been = "is defunct" if age is None or age < 1 else f"has been defunct for {age_text(age)}"
    if proc.ppid in (None, 0, 1):
        return Finding(
            kind="zombie",
            target=target,
            pid=proc.pid,
            detail=f"pid {proc_label(proc)} {been}; its parent is init (pid 1), "
            "which should reap it",
            action="nothing to kill: a zombie holds no memory and cannot be signalled",
        )
    return Finding(
        kind="zombie",
        target=target,
        pid=proc.pid,
        detail=f"pid {proc_label(proc)} {been}; its parent "
        f"{proc_label(parent, proc.ppid)} has not reaped it",
        action=f"signal or kill its parent {proc.ppid}: a zombie itself cannot be killed",
        action_pid=proc.ppid,
    )


def _ghost_finding(
    snapshot: HostSnapshot, gpu: Gpu, baselines: Baselines, tolerance_mib: int
) -> Finding | None:
    if gpu.error is not None or gpu.memory_used_mib is None:
        return None
    baseline = baselines.for_gpu(gpu)
    if gpu.processes:
        if any(p.used_mib is None for p in gpu.processes):
            return None  # the driver will not say what each holds: no sum to compare against
        listed_mib = sum(p.used_mib or 0 for p in gpu.processes)
        excess = gpu.memory_used_mib - baseline - listed_mib
        if excess <= tolerance_mib:
            return None
        what = (
            f"{excess} MiB more than its {baseline} MiB baseline and its listed processes ({listed_mib} MiB)"
        )
    else:
        excess = gpu.memory_used_mib - baseline
        if excess <= baselines.tolerance_mib:
            return None
        what = f"{excess} MiB over its {baseline} MiB baseline with no process listed"
    suspects = _ghost_suspects(snapshot, gpu)
    if suspects:
        detail = f"GPU{gpu.index} holds {what} (ghost memory); suspects: " + "; ".join(s for _, s in suspects)
        action = "kill the suspects holding the device open, then check again"
    else:
        detail = f"GPU{gpu.index} holds {what} (ghost memory)"
        action = (
            "no process has the device open: wait for the driver to free it, or reset the GPU (nvidia-smi -r)"
            if snapshot.device_holders is not None
            else "look for processes with /dev/nvidia* open (fuser -v /dev/nvidia*)"
        )
    return Finding(
        kind="ghost_memory",
        target=snapshot.target,
        gpu_index=gpu.index,
        detail=detail,
        action=action,
        action_pid=suspects[0][0] if len(suspects) == 1 else None,
    )


def _holder_text(pid: int, proc: Proc | None, table: dict[int, Proc], mib: int | None, show_mib: bool) -> str:
    notes: list[str] = []
    if proc is not None:
        notes.append(_shown(proc.name))
        if proc.state == STATE_ZOMBIE:
            notes.append("defunct")
        elif proc.state == STATE_UNINTERRUPTIBLE:
            notes.append("uninterruptible")
        parent = table.get(proc.ppid) if proc.ppid is not None else None
        if parent is not None and parent.state == STATE_ZOMBIE:
            notes.append(f"defunct parent {parent.pid}")
        elif _is_init_like(parent, proc.ppid):
            notes.append("orphan")
    if show_mib and mib is not None:
        notes.append(f"{mib} MiB")
    return f"pid {pid} ({', '.join(notes)})" if notes else f"pid {pid}"


def _remnant_reason(proc: Proc, table: dict[int, Proc]) -> str:
    if proc.state == STATE_ZOMBIE:
        parent = table.get(proc.ppid) if proc.ppid is not None else None
        return f"pid {proc_label(proc)} is defunct; parent {proc_label(parent, proc.ppid)} has not reaped it"
    return f"pid {proc_label(proc)} is in uninterruptible sleep (D) and may not die"


MAX_HOLDERS_IN_REASON = 3


def memory_at_baseline(snapshot: HostSnapshot, baselines: Baselines) -> bool:
    """Whether every GPU's memory alone is back at its baseline (+ tolerance).

    The cheap test for a fast memory-only sample while memory drains: such a sample carries the last process
    list, which may be a process interval old, so the full verdict on it would wait for the next process
    sample. A True here only says it is worth taking a full sample to confirm with ``clean_slate``.
    """
    if snapshot.error is not None or not snapshot.gpus:
        return False
    return all(
        gpu.error is None
        and gpu.memory_used_mib is not None
        and gpu.memory_used_mib <= baselines.for_gpu(gpu) + baselines.tolerance_mib
        for gpu in snapshot.gpus
    )


def _unknown_verdict(snapshot: HostSnapshot, keyed: dict[str, int], baselines: Baselines) -> Verdict:
    """The verdict of a host that cannot be judged: a host error, or no GPU at all."""
    cause = snapshot.error or "no GPUs found"
    return Verdict(
        clean=False,
        known=False,
        reasons=(visible(cause, 200),),
        baseline_mib=keyed,
        tolerance_mib=baselines.tolerance_mib,
    )


def _unreadable_reason(gpu: Gpu) -> str | None:
    """Why this GPU's memory cannot be judged (an error, no figure), or None when it can."""
    if gpu.error is not None:
        return f"GPU{gpu.index} error: {visible(gpu.error, 80)}"
    if gpu.memory_used_mib is None:
        return f"GPU{gpu.index} memory could not be read"
    return None


MEMORY_ONLY = "memory only"
"""How a memory-only verdict names itself in its reasons."""


def memory_verdict(snapshot: HostSnapshot, baselines: Baselines) -> Verdict:
    """Is every GPU's memory back at its idle baseline? For sources that list no processes (the fleet view).

    The same per-GPU rule as ``clean_slate`` on memory alone: a process still listed, a zombie or a D-state
    process left from a GPU tree cannot be seen here, so a clean memory verdict is not a clean slate. A GPU
    with an error or without a figure, a host error and a host without GPUs give ``known=False``.
    """
    keyed = {gpu.key: baselines.for_gpu(gpu) for gpu in snapshot.gpus}
    if snapshot.error is not None or not snapshot.gpus:
        return _unknown_verdict(snapshot, keyed, baselines)
    gpu_verdicts: list[GpuVerdict] = []
    reasons: list[str] = []
    unreadable = False
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        baseline = baselines.for_gpu(gpu)
        reason = _unreadable_reason(gpu)
        unreadable = unreadable or reason is not None
        used = gpu.memory_used_mib
        if reason is None and used is not None and used > baseline + baselines.tolerance_mib:
            over = used - baseline
            reason = f"GPU{gpu.index} {used} MiB, {over} MiB over its {baseline} MiB baseline ({MEMORY_ONLY})"
        gpu_reasons = () if reason is None else (reason,)
        gpu_verdicts.append(
            GpuVerdict(index=gpu.index, used_mib=used, baseline_mib=baseline, clean=reason is None,
                       reasons=gpu_reasons)
        )
        reasons.extend(gpu_reasons)
    return _known_verdict(reasons, keyed, baselines, gpu_verdicts, known=not unreadable)


def _known_verdict(
    reasons: list[str], keyed: dict[str, int], baselines: Baselines, gpu_verdicts: list[GpuVerdict],
    known: bool,
) -> Verdict:
    """The verdict of a host that could be sampled: clean when nothing gave a reason; ``known`` False when a
    GPU could not be read (cannot tell, never clean)."""
    return Verdict(
        clean=not reasons,
        reasons=tuple(reasons),
        baseline_mib=keyed,
        tolerance_mib=baselines.tolerance_mib,
        gpus=tuple(gpu_verdicts),
        known=known,
    )


def clean_slate(snapshot: HostSnapshot, baselines: Baselines) -> Verdict:
    """Is every GPU of the host back at its idle baseline, with nothing left of the GPU process trees?

    Clean when every GPU's used memory is at most its baseline + tolerance, no GPU lists a process, and no
    zombie or D-state process remains in a GPU process tree. A host error, a host without GPUs, and a GPU
    whose memory cannot be read (lost, timed out) give ``known=False``: "cannot tell", never clean. The
    reasons say why without that prefix; whoever shows the verdict says "cannot tell" once.
    """
    keyed = {gpu.key: baselines.for_gpu(gpu) for gpu in snapshot.gpus}
    if snapshot.error is not None or not snapshot.gpus:
        return _unknown_verdict(snapshot, keyed, baselines)
    table = _proc_table(snapshot)
    forest = build_forest(snapshot)
    unreadable = False
    gpu_verdicts: list[GpuVerdict] = []
    reasons: list[str] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        baseline = baselines.for_gpu(gpu)
        used = gpu.memory_used_mib
        gpu_reasons: list[str] = []
        reason = _unreadable_reason(gpu)
        if reason is not None:
            gpu_reasons.append(reason)
            unreadable = True
        elif used is not None:  # always, once readable: said for the type checker
            holders = _gpu_holders(gpu, table)
            over = used > baseline + baselines.tolerance_mib
            if holders:
                texts = []
                for pid, proc, mib, is_visible in holders[:MAX_HOLDERS_IN_REASON]:
                    if is_visible:
                        texts.append(_holder_text(pid, proc, table, mib, len(holders) > 1))
                    else:
                        texts.append(f"pid {pid} (not visible here: another PID namespace)")
                if len(holders) > MAX_HOLDERS_IN_REASON:
                    texts.append(f"and {len(holders) - MAX_HOLDERS_IN_REASON} more")
                held_by = ", ".join(texts)
                if over:
                    gpu_reasons.append(f"GPU{gpu.index} {used} MiB held by {held_by}")
                else:
                    gpu_reasons.append(f"GPU{gpu.index} {used} MiB but {held_by} still listed")
            elif over:
                suspects = _ghost_suspects(snapshot, gpu)
                excess = used - baseline
                text = f"GPU{gpu.index} {excess} MiB over baseline with no process listed (ghost memory)"
                if suspects:
                    text += "; " + "; ".join(s for _, s in suspects[:MAX_HOLDERS_IN_REASON])
                gpu_reasons.append(text)
        gpu_verdicts.append(
            GpuVerdict(index=gpu.index, used_mib=used, baseline_mib=baseline, clean=not gpu_reasons,
                       reasons=tuple(gpu_reasons))
        )
        reasons.extend(gpu_reasons)
    for node in flatten(forest):
        if node.proc.state in (STATE_ZOMBIE, STATE_UNINTERRUPTIBLE):
            reasons.append(_remnant_reason(node.proc, table))
    return _known_verdict(reasons, keyed, baselines, gpu_verdicts, known=not unreadable)


def _gpu_holders(gpu: Gpu, table: dict[int, Proc]) -> list[tuple[int, Proc | None, int | None, bool]]:
    """(pid, Proc or None, MiB or None, visible) for every process listed on this GPU, most memory first."""
    holders: dict[int, tuple[int, Proc | None, int | None, bool]] = {}
    for listed in gpu.processes:
        proc = table.get(listed.pid) if listed.visible else None
        mib = listed.used_mib
        if listed.pid in holders and holders[listed.pid][3] == listed.visible:
            previous = holders[listed.pid][2]
            mib = None if mib is None or previous is None else max(mib, previous)
        holders[listed.pid] = (listed.pid, proc, mib, listed.visible)
    for pid, proc in table.items():
        mib = proc.gpu_memory_mib.get(gpu.index)
        if mib is not None and pid not in holders:
            holders[pid] = (pid, proc, mib, True)
    return sorted(holders.values(), key=lambda h: (-(h[2] or 0), h[0]))


def analyze(
    snapshot: HostSnapshot,
    baselines: Baselines,
    now: float | None = None,
    killed_jobs: Iterable[KilledJob] = (),
) -> HostSnapshot:
    """The snapshot with its findings and clean-slate verdict filled in."""
    findings = find_problems(snapshot, baselines, now, killed_jobs=killed_jobs)
    return snapshot.with_analysis(findings, clean_slate(snapshot, baselines))


def kill_all_roots(snapshot: HostSnapshot, include_graphics: bool = False) -> tuple[list[int], list[str]]:
    """The roots of what killing every GPU process tree takes, and human notes on what it leaves out.

    The job root (``_tree_root``) of every visible GPU process, never pid 1 (a container whose init holds
    GPU memory is stopped from inside). Processes that every GPU lists as graphics only (an X server, a
    compositor) are left out unless ``include_graphics``: they belong to the desktop, not to a GPU job.
    """
    table = _proc_table(snapshot)
    graphics = graphics_only_pids(snapshot)
    roots: list[int] = []
    notes: list[str] = []
    left_out: list[int] = []
    for pid in _gpu_pids(table):
        if pid in graphics and not include_graphics:
            left_out.append(pid)
            continue
        root = _tree_root(pid, table)
        if root in (0, 1):
            notes.append(f"pid {proc_label(table.get(root), root)} holds GPU memory: init is never signalled")
        elif root not in roots:
            roots.append(root)
    for pid in left_out:
        notes.append(
            f"pid {proc_label(table.get(pid), pid)} holds graphics memory only (the display stack): left out "
            "of kill-all; pick it by itself to kill it"
        )
    return roots, notes


@dataclass(frozen=True)
class KilledJob:
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


def _escaped(proc: Proc, job: KilledJob, table: dict[int, Proc], gpus: set[int]) -> str | None:
    """How ``proc`` got out of ``job``'s tree if it looks like a survivor of it, else None.

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
        return "in the job's cgroup" if proc.cgroup == job.cgroup else None
    if not gpus & job.gpus:
        return None
    if proc.sid is not None and proc.sid == proc.pid:
        return "it leads a session of its own"
    parent = table.get(proc.ppid) if proc.ppid is not None else None
    if _is_init_like(parent, proc.ppid):
        return f"its parent is {proc_label(parent, proc.ppid)}"
    return None


def find_survivors(snapshot: HostSnapshot, jobs: Iterable[KilledJob]) -> list[Finding]:
    """Processes that escaped a killed job's tree and still hold GPU memory or a /dev/nvidia* node.

    Graphics-only holders are never survivors of a GPU job. Each survivor is named once, after the most
    recent job it may have come from (``_escaped`` says what ties it to that job).
    """
    jobs = [job for job in jobs if job.boot_id is None or job.boot_id == snapshot.boot_id]
    if not jobs:
        return []
    table = _proc_table(snapshot)
    graphics = graphics_only_pids(snapshot)
    using: dict[int, set[int]] = {pid: set(proc.gpu_memory_mib) for pid, proc in table.items()
                                  if proc.gpu_memory_mib and pid not in graphics}
    any_job_gpu: set[int] = set().union(*(job.gpus for job in jobs))
    for holder in snapshot.device_holders or ():
        if holder.pid == snapshot.agent_pid or (holder.name or "") in _BENIGN_DEVICE_HOLDERS:
            continue
        node = (holder.device or "")[len("/dev/nvidia"):]
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
            held = proc.gpu_total_mib
            what = (f"holds {held} MiB on " + ", ".join(f"GPU{i}" for i in sorted(proc.gpu_memory_mib))
                    if held else "has a /dev/nvidia* node open")
            root = f"{job.root_pid} ({_shown(job.root_name)})"
            findings.append(
                Finding(
                    kind="survivor",
                    target=snapshot.target,
                    pid=pid,
                    gpu_index=min(proc.gpu_memory_mib) if proc.gpu_memory_mib else None,
                    detail=f"pid {proc_label(proc)} {what}: a survivor of the job of pid {root}, outside "
                    f"its tree ({why})",
                    action=f"kill pid {pid} if it belongs to that job",
                    action_pid=pid,
                )
            )
            break
    return findings


def job_remnants(snapshot: HostSnapshot, members: Iterable[tuple[int, int | None]]) -> list[Proc]:
    """The processes of a killed job still listed as zombies or in uninterruptible sleep (D)."""
    wanted = set(members)
    return [
        proc for proc in snapshot.processes
        if (proc.pid, proc.start_ticks) in wanted and proc.state in (STATE_ZOMBIE, STATE_UNINTERRUPTIBLE)
    ]
