"""GPU process trees of a host snapshot: who holds GPU memory, the job each holder belongs to, and its tree.

A tree is rooted where the collector roots it (``gputui.agent.proc.proctree.job_root``) and walked the way the
collector walks it (``gputui.agent.proc.proctree.walk``): the tree shown is the tree a kill takes.

The trees and the sample's processes by pid, by GPU and by what is wrong with them (``SampleIndex``) are built
once per sample (``sample_index``): what asks about each GPU or each server of a host reads the processes
concerned, never every process of the sample again: a sample's cost grows with its processes, not with its
processes times its GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.agent.proc.proctree import JobFacts, job_parent, job_root, related_map, walk
from gputui.agent.proc.proctree import is_session_boundary as agent_is_session_boundary
from gputui.agent.protocol import GPU_STACK_SERVICES, gpu_stack_service
from gputui.core.model import HostSnapshot, Proc, Record, field, replace
from gputui.core.text import age_text as age_text  # re-exported: the analysis words ages with it
from gputui.core.text import fit

D_STATE_THRESHOLD_S = 5.0
"""Seconds a process must be in uninterruptible sleep before it is a finding (short D states are mere I/O)."""

NAME_MAX = 32
"""Longest process name shown inside a reason or finding line."""

GRAPHICS = "graphics"
"""The NVML process type of display servers and compositors (type G in nvidia-smi)."""

# Parents that adopt orphans: a GPU process under one of these lost the launcher that started it.
_INIT_LIKE = frozenset({"init", "systemd", "tini", "docker-init", "dumb-init", "catatonit"})


class ProcNode(Record, frozen=False):
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


def shown(text: str | None) -> str:
    return "?" if not text else fit(text, NAME_MAX)


def proc_label(proc: Proc | None, pid: int | None = None) -> str:
    """ "4242 (python)" with the name made safe for a terminal."""
    if proc is None:
        return f"{pid} (?)"
    return f"{proc.pid} ({shown(proc.name)})"


def is_session_boundary(proc: Proc) -> bool:
    """Whether ``proc`` started a session rather than belongs to the work below it.

    The collector's own rule (``gputui.agent.proc.proctree.is_session_boundary``), so the tree the agent lists
    and kills is the tree the client shows: pid 0/1, sshd, tmux, screen, systemd, container shims and inits,
    job step daemons, and interactive or login shells; a shell running a script is part of the tree (the
    launcher).
    """
    return agent_is_session_boundary(proc.pid, proc.name, list(proc.cmdline))


def is_init_like(proc: Proc | None, ppid: int | None) -> bool:
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


def proc_table(snapshot: HostSnapshot) -> dict[int, Proc]:
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


def gpu_pids(table: dict[int, Proc]) -> list[int]:
    return sorted(pid for pid, proc in table.items() if proc.gpu_memory_mib)


def _job_facts(proc: Proc) -> JobFacts:
    return JobFacts(proc.pid, proc.ppid, proc.name, list(proc.cmdline), proc.sid, proc.pgid, proc.cgroup)


def tree_root(pid: int, table: dict[int, Proc]) -> int:
    """The root of ``pid``'s GPU process tree: the collector's own rule (``proctree.job_root``)."""

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


def tree_parent(proc: Proc, table: dict[int, Proc]) -> int | None:
    """``proc``'s parent in a tree: None when it leads a session of its own (``job_parent``)."""
    parent = None if proc.ppid is None else table.get(proc.ppid)
    return job_parent(proc.pid, proc.ppid, proc.sid, None if parent is None else parent.sid)


def _build_forest(snapshot: HostSnapshot) -> list[ProcNode]:
    """The GPU process trees of a host: every process holding GPU memory with its launcher and the rest.

    Each tree is the holder's job: rooted at its highest ancestor in the same session and cgroup that is not
    a session boundary (sshd, tmux, a login shell, a service manager, a cron daemon, the display stack, ...;
    see ``is_session_boundary``) nor a daemon init adopted that does not lead the job
    (``gputui.agent.proc.proctree.is_outside_job``), and holding every listed descendant of that root, zombies
    and D-state processes included, but for those that lead a session of their own (``setsid``: a job of
    their own, or a daemon it left behind). An sglang-style launcher with eight workers is one tree. Roots are
    ordered by the memory their tree holds (most first), then pid.
    """
    table = proc_table(snapshot)
    children = related_map(
        (proc.pid, tree_parent(proc, table), None) for proc in sorted(table.values(), key=lambda p: p.pid)
    )
    graphics = graphics_only_pids(snapshot)
    forest: list[ProcNode] = []
    placed: set[int] = set()
    for root in sorted({tree_root(pid, table) for pid in gpu_pids(table)}):
        order = walk([root], children, seen=placed)
        nodes: dict[int, ProcNode] = {}
        for pid, via, depth in order:
            node = nodes[pid] = ProcNode(proc=table[pid], depth=depth, graphics_only=pid in graphics)
            (forest if via is None else nodes[via].children).append(node)
        for pid, _via, _depth in reversed(order):  # children before their parents
            node = nodes[pid]
            totals = dict(node.proc.gpu_memory_mib)
            for child in node.children:
                for index, mib in child.subtree_gpu_mib.items():
                    totals[index] = totals.get(index, 0) + mib
            node.subtree_gpu_mib = dict(sorted(totals.items()))
            node.subtree_total_mib = sum(totals.values())
    forest.sort(key=lambda node: (-node.subtree_total_mib, node.proc.pid))
    return forest


class SampleIndex(Record):
    """One sample's processes looked up without a scan, built once per sample with its forest
    (``sample_index``): a rule asked about each GPU reads the few processes listed there, not every process
    of a job of hundreds. Shared by every reader of the sample: read it, never change it.

    Attributes:
        table: pid -> process with its GPU memory filled in (``proc_table``).
        forest: The GPU process trees (``build_forest``).
        jobs: Each tree's nodes, root first (``flatten([root])``), in the forest's order.
        tree_pids: Pids of every process in a GPU process tree.
        listed: pid -> the process as the collector listed it (of a pid listed twice, the later entry).
        children: pid -> the pids of the processes of ``listed`` whose parent it is, in list order.
        held_on: GPU index -> the listed processes whose own figures put memory there (more than 0 MiB),
            in list order (a pid listed twice, twice).
        on_gpu: GPU index -> the entries of ``table`` with a figure for that GPU, in table order.
        defunct_leaders: The listed processes that are defunct leaders (``Proc.is_defunct_leader``), in
            list order.
        stuck: The listed processes with stuck threads (``Proc.waits``), in list order.
    """

    table: dict[int, Proc]
    forest: tuple[ProcNode, ...]
    jobs: tuple[tuple[ProcNode, ...], ...]
    tree_pids: frozenset[int]
    listed: dict[int, Proc]
    children: dict[int, tuple[int, ...]]
    held_on: dict[int, tuple[Proc, ...]]
    on_gpu: dict[int, tuple[Proc, ...]]
    defunct_leaders: tuple[Proc, ...]
    stuck: tuple[Proc, ...]

    def members(self, ancestor: int | None) -> list[Proc]:
        """The listed processes whose line of parents reaches ``ancestor`` (itself included where listed),
        as a walk up from each one finds them: never through pid 0 or 1, nor round a loop."""
        if ancestor is None or ancestor <= 1:
            return []
        found: list[Proc] = []
        stack, seen = [ancestor], {ancestor}
        while stack:
            pid = stack.pop()
            proc = self.listed.get(pid)
            if proc is not None:
                found.append(proc)
            for child in self.children.get(pid, ()):
                if child > 1 and child not in seen:
                    seen.add(child)
                    stack.append(child)
        return found


def _build_index(snapshot: HostSnapshot) -> SampleIndex:
    """The index of one sample (``SampleIndex``), its forest built by ``_build_forest``."""
    forest = tuple(_build_forest(snapshot))
    jobs = tuple(tuple(flatten([root])) for root in forest)
    table = proc_table(snapshot)
    listed: dict[int, Proc] = {}
    held_on: dict[int, list[Proc]] = {}
    for proc in snapshot.processes:
        listed[proc.pid] = proc
        for index, mib in proc.gpu_memory_mib.items():
            if mib:
                held_on.setdefault(index, []).append(proc)
    children: dict[int, list[int]] = {}
    for proc in listed.values():
        if proc.ppid is not None:
            children.setdefault(proc.ppid, []).append(proc.pid)
    on_gpu: dict[int, list[Proc]] = {}
    for proc in table.values():
        for index, mib in proc.gpu_memory_mib.items():
            if mib is not None:
                on_gpu.setdefault(index, []).append(proc)
    return SampleIndex(
        table=table,
        forest=forest,
        jobs=jobs,
        tree_pids=frozenset(node.proc.pid for nodes in jobs for node in nodes),
        listed=listed,
        children={pid: tuple(pids) for pid, pids in children.items()},
        held_on={index: tuple(procs) for index, procs in held_on.items()},
        on_gpu={index: tuple(procs) for index, procs in on_gpu.items()},
        defunct_leaders=tuple(proc for proc in snapshot.processes if proc.is_defunct_leader),
        stuck=tuple(proc for proc in snapshot.processes if proc.waits),
    )


_FORESTS_PER_HOST = 2
"""Samples whose index and forest are kept per host: the newest, and the one before (a view may still hold
it)."""
_HOSTS_KEPT = 256
"""Hosts whose samples are kept; beyond that the host seen least recently is forgotten."""
_forests: dict[tuple[object, ...], list[tuple[tuple[int, ...], tuple[object, ...], SampleIndex]]] = {}
"""(target, boot id) -> its latest samples' indexes, newest last: (identity key, the parts, the index)."""


def _forest_key(snapshot: HostSnapshot) -> tuple[tuple[int, ...], tuple[object, ...]]:
    """What a forest and an index are built from (the process list, each GPU's list of holders, the agent's
    pid), by identity: a judged sample shares these with the sample it was judged from."""
    parts: tuple[object, ...] = (snapshot.processes, *(gpu.processes for gpu in snapshot.gpus))
    indexes = tuple(gpu.index for gpu in snapshot.gpus)
    key = (*(id(part) for part in parts), *indexes, -1 if snapshot.agent_pid is None else snapshot.agent_pid)
    return key, parts


def sample_index(snapshot: HostSnapshot) -> SampleIndex:
    """The index of a sample's processes and its forest (``SampleIndex``), built once per sample: the
    findings, the verdict, the servers' jobs, ``snapshot``'s document and the monitor all read what the
    verdict engine built.

    Only the last ``_FORESTS_PER_HOST`` of each host are kept: a job of hundreds of members makes a forest of
    as many nodes every process sample, and older ones are never asked for again.
    """
    key, parts = _forest_key(snapshot)
    host = (snapshot.target, snapshot.boot_id)
    kept = _forests.pop(host, [])
    _forests[host] = kept  # the host seen last goes last
    for entry_key, entry_parts, index in kept:
        if entry_key == key and all(a is b for a, b in zip(entry_parts, parts, strict=True)):
            return index
    index = _build_index(snapshot)
    kept.append((key, parts, index))
    del kept[:-_FORESTS_PER_HOST]
    while len(_forests) > _HOSTS_KEPT:  # pollers of several hosts call this at once: a miss only rebuilds
        _forests.pop(next(iter(_forests)), None)
    return index


def build_forest(snapshot: HostSnapshot) -> list[ProcNode]:
    """The GPU process trees of a host (``_build_forest``), built once per sample (``sample_index``). The
    nodes are shared: read them, never change them."""
    return list(sample_index(snapshot).forest)


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
    return set(sample_index(snapshot).tree_pids)


def _agent_line(snapshot: HostSnapshot, table: dict[int, Proc]) -> set[int]:
    """The agent and those of its ancestors the snapshot lists."""
    line: set[int] = set()
    pid = snapshot.agent_pid
    while pid is not None and pid in table and pid not in line:
        line.add(pid)
        pid = table[pid].ppid
    return line


def _root_off_line(pid: int, root: int, table: dict[int, Proc], line: set[int]) -> int:
    """``root``, or where the agent's own line of ancestors runs through it, the holder's highest ancestor
    off that line: what ran gputui (a script that also started the server, the shell of a pipe into
    ``tee``) is not the holder's job, and neither are its other children."""
    if root not in line:
        return root
    current = pid
    while current not in line:
        parent = table[current].ppid
        if parent is None or parent in line or parent not in table:
            return current
        current = parent
    return current


def service_of(proc: Proc | None) -> str | None:
    """The GPU-stack service ``proc`` is (``protocol.GPU_STACK_SERVICES``), or None."""
    return None if proc is None else gpu_stack_service(list(proc.cmdline), proc.name)


def service_note(pid: int, service: str) -> str:
    """Why a GPU-stack service is never signalled, in one line."""
    return (
        f"pid {pid} is {service}, {GPU_STACK_SERVICES[service]}: a GPU-stack service is never signalled; "
        "stop it where it runs"
    )


def kill_all_roots(snapshot: HostSnapshot, include_graphics: bool = False) -> tuple[list[int], list[str]]:
    """The roots of what killing every GPU process tree takes, and human notes on what it leaves out.

    The job root (``tree_root``) of every visible GPU process, never pid 1 (a container whose init holds
    GPU memory is stopped from inside) and never the agent or one of its ancestors: where the holder's job
    would climb to one, the root is the holder's highest ancestor below the agent's line. Processes that
    every GPU lists as graphics only (an X server, a compositor) are left out unless ``include_graphics``:
    they belong to the desktop, not to a GPU job.
    """
    table = proc_table(snapshot)
    graphics = graphics_only_pids(snapshot)
    line = _agent_line(snapshot, table)
    roots: list[int] = []
    notes: list[str] = []
    left_out: list[int] = []
    for pid in gpu_pids(table):
        if pid in graphics and not include_graphics:
            left_out.append(pid)
            continue
        service = service_of(table.get(pid))
        if service is not None:
            notes.append(service_note(pid, service))
            continue
        root = _root_off_line(pid, tree_root(pid, table), table, line)
        if root in (0, 1):
            notes.append(f"pid {proc_label(table.get(root), root)} holds GPU memory: init is never signalled")
        elif root in line and root != snapshot.agent_pid:
            notes.append(
                f"pid {proc_label(table.get(root), root)} holds GPU memory and runs gputui: never signalled"
            )
        elif root not in roots:
            roots.append(root)
    for pid in left_out:
        notes.append(
            f"pid {proc_label(table.get(pid), pid)} holds graphics memory only (the display stack): left out "
            "of kill-all; pick it by itself to kill it"
        )
    return roots, notes
