"""Kill plans: what a kill request will signal, worked out from one snapshot, and the command that does it.

A plan carries each process's identity (pid + start time in clock ticks + the host's boot id), so the
collector can refuse a pid that was reused between the confirmation and the signal. The plan is also what the
confirmation lists: pid, user, GPU MiB and command of everything to be signalled. Nothing here signals
anything; the collector does (``gputui.agent.kill.operation``).
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.agent import protocol
from gputui.agent.kill import messages as kill_messages
from gputui.agent.proc.proctree import deepest_first, related_map, walk
from gputui.agent.servers.discovery import port_option
from gputui.core.actions.owner_scope import OwnerScopeError, choose_roots, crosses
from gputui.core.jobs import (
    gpu_memory_by_pid,
    graphics_only_pids,
    kill_all_roots,
    service_note,
    service_of,
    tree_parent,
)
from gputui.core.model import STATE_ZOMBIE, HostSnapshot, Owner, Proc, Record
from gputui.core.text import fit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SIGNALS = protocol.SIGNAL_NAMES
PROTECTED_PIDS = frozenset({0, 1})
DEFAULT_ESCALATE_S = 5.0
"""Seconds between TERM and KILL (``t``, ``X``, ``gputui kill``), and how long a kill without escalation
watches before it says whether the process is still alive."""


class PlanError(Exception):
    """The request cannot be planned (pid 1, unknown pid, nothing to do). ``str()`` is one line."""


class ReadOnlyError(PlanError):
    """A kill was asked for in read-only mode."""


class OwnersError(PlanError):
    """A kill of every GPU job on a host with several owners, none of them picked (``owners``: theirs)."""

    def __init__(self, line: str, owners: tuple = ()) -> None:
        super().__init__(line)
        self.owners = owners


class KillTarget(Record):
    """One process the plan will signal.

    Attributes:
        pid: Process id on the target host.
        start_ticks: Its start time in clock ticks since boot (identity with pid and boot id).
        name: Process name (untrusted text).
        user: Owner's user name (untrusted text).
        cmdline: argv (untrusted text).
        gpu_mib: GPU memory it holds over all GPUs in MiB, None when the driver would not say.
        descendant_of: The requested pid whose tree brought it in; None for a requested pid itself.
        state: Its process state letter when listed.
        graphics_only: Every GPU lists it as a graphics process only (an X server, a compositor).
        owner: Whose job it is, None when the collector did not say.
    """

    pid: int
    start_ticks: int | None
    name: str | None = None
    user: str | None = None
    cmdline: tuple[str, ...] = ()
    gpu_mib: int | None = None
    descendant_of: int | None = None
    state: str | None = None
    graphics_only: bool = False
    owner: Owner | None = None


class ZombieNote(Record):
    """A zombie a plan does not signal (a zombie cannot be killed).

    Attributes:
        pid: The zombie.
        parent: Its parent, which the plan signals.
        asked: It was asked for by itself and its parent is signalled instead; False: it is in a tree and goes
            when its parent does.
    """

    pid: int
    parent: int
    asked: bool

    @property
    def text(self) -> str:
        """The note's line, as ``KillPlan.notes`` carries it."""
        if self.asked:
            return f"pid {self.pid} is a zombie: its parent {self.parent} will be signalled instead"
        return f"pid {self.pid} is a zombie: it goes when its parent {self.parent} is signalled"


class KillPlan(Record):
    """Everything one kill request will signal, in signal order (children before their roots).

    Attributes:
        target: Host target word.
        boot_id: The host's boot id when the snapshot was taken (the agent refuses after a reboot).
        signal: INT, TERM or KILL.
        tree: Whether descendants are signalled too (the agent re-reads them at kill time).
        escalate_s: Seconds after which survivors get KILL; None: no escalation.
        targets: What will be signalled, children first; the roots are the entries with ``descendant_of``
            None.
        notes: Human lines about substitutions and omissions (zombies, invisible pids, graphics holders).
        wait_s: Without escalation, seconds after which the agent says whether each process is gone.
        zombies: The zombies among those notes, as data.
        ports: The TCP ports the job serves on: each ``--port`` of its command lines and every port its
            listed processes were seen listening on. The clean slate waits until none is in LISTEN.
    """

    target: str
    boot_id: str | None
    signal: str
    tree: bool
    escalate_s: float | None
    targets: tuple[KillTarget, ...]
    notes: tuple[str, ...] = ()
    wait_s: float | None = None
    zombies: tuple[ZombieNote, ...] = ()
    ports: tuple[int, ...] = ()

    @property
    def owners(self) -> tuple[Owner | None, ...]:
        """The owners of what will be signalled, each once, in the order the targets name them."""
        return tuple(dict.fromkeys(t.owner for t in self.targets))

    @property
    def roots(self) -> tuple[KillTarget, ...]:
        """The requested processes (after zombie substitution): what the agent command names."""
        return tuple(t for t in self.targets if t.descendant_of is None)


def _gpu_mib(proc: Proc, snapshot: HostSnapshot, held: dict[int, dict[int, int]]) -> int | None:
    for gpu in snapshot.gpus:
        for listed in gpu.processes:
            if listed.visible and listed.pid == proc.pid and listed.used_mib is None:
                return None
    return sum(held.get(proc.pid, {}).values())


def _target_for(
    proc: Proc,
    snapshot: HostSnapshot,
    held: dict[int, dict[int, int]],
    descendant_of: int | None,
    graphics: set[int],
) -> KillTarget:
    return KillTarget(
        pid=proc.pid,
        start_ticks=proc.start_ticks,
        name=proc.name,
        user=proc.user,
        cmdline=proc.cmdline,
        gpu_mib=_gpu_mib(proc, snapshot, held),
        descendant_of=descendant_of,
        state=proc.state,
        graphics_only=proc.pid in graphics,
        owner=proc.owner,
    )


def _refuse_early(pid: int, snapshot: HostSnapshot, table: dict[int, Proc]) -> None:
    if pid in PROTECTED_PIDS:
        what = "init" if pid == 1 else "not a process"
        raise PlanError(f"pid {pid} is {what}: it is never signalled")
    if snapshot.agent_pid is not None and pid == snapshot.agent_pid:
        raise PlanError(f"pid {pid} is the gputui collector itself: it is never signalled")
    service = service_of(table.get(pid))
    if service is not None:
        raise PlanError(service_note(pid, service))


def plan_kill(
    snapshot: HostSnapshot,
    pids: Iterable[int],
    signal: str = "TERM",
    tree: bool = False,
    all_gpu: bool = False,
    escalate_s: float | None = None,
    read_only: bool = False,
    wait_s: float | None = None,
    include_graphics: bool = False,
    owner: tuple[str, str] | None = None,
) -> KillPlan:
    """Work out what a kill request will signal, for the confirmation and for ``kill_command``.

    Args:
        snapshot: A full snapshot of the host (with its process list).
        pids: The requested process ids.
        signal: INT, TERM or KILL.
        tree: Signal each process's listed descendants too, children first.
        all_gpu: The root of every GPU job on the host (``jobs.kill_all_roots``; implies ``tree``);
            ``pids`` may then be empty.
        escalate_s: Send KILL to survivors after this many seconds.
        read_only: Refuse with ReadOnlyError.
        wait_s: Without escalation, say after this many seconds whether each process is gone.
        include_graphics: With ``all_gpu``, take graphics-only holders (the display stack) too.
        owner: With ``all_gpu``, the jobs of this owner only ((kind, text) of
            ``gputui.core.model.owner.parse_owner_option``; ("all", "") every owner's). None where every GPU
            job has the same owner; on a host with several it raises ``OwnersError``.

    Returns:
        The plan. A zombie is replaced by its parent (with a note): a zombie cannot be killed, reaping it is
        the parent's job. A defunct leader (state Z, threads alive) has not exited: it is signalled itself.
        Zombie descendants are left out of the listing (they go when their parent does).
        pid 1 is never in it.

    Raises:
        ReadOnlyError: In read-only mode.
        PlanError: pid 0/1 or the agent itself was asked for, a pid is not in the snapshot, the signal is
            unknown, or nothing is left to signal.
    """
    if read_only:
        raise ReadOnlyError(f"{snapshot.target}: read-only mode: nothing is signalled")
    if signal not in SIGNALS:
        raise PlanError(f"unknown signal {signal!r}: use one of {', '.join(SIGNALS)}")
    for delay in (escalate_s, wait_s):
        if delay is not None and not delay > 0:
            raise PlanError("escalation delay must be a positive number of seconds")
    requested = list(dict.fromkeys(int(p) for p in pids))
    table = {p.pid: p for p in snapshot.processes}
    for pid in requested:
        _refuse_early(pid, snapshot, table)
    held = gpu_memory_by_pid(snapshot)
    graphics = graphics_only_pids(snapshot)
    notes: list[str] = []
    zombies: list[ZombieNote] = []
    if all_gpu:
        tree = True
        roots_of_jobs, left_out = kill_all_roots(snapshot, include_graphics)
        notes.extend(left_out)
        job_procs = [table.get(pid) or Proc(pid=pid) for pid in roots_of_jobs]
        try:
            chosen = choose_roots(job_procs, owner)
        except OwnerScopeError as exc:
            raise OwnersError(str(exc), exc.owners) from None
        roots_of_jobs = [proc.pid for proc in chosen]
        for pid in roots_of_jobs:
            if pid == snapshot.agent_pid:
                notes.append(f"pid {pid} is the gputui collector itself: never signalled")
            elif pid not in requested:
                requested.append(pid)
        for gpu in snapshot.gpus:
            for listed in gpu.processes:
                if not listed.visible:
                    notes.append(
                        f"pid {listed.pid} on GPU{gpu.index} is not visible here (another PID namespace): "
                        "not signalled"
                    )
    roots: list[Proc] = []
    for pid in requested:
        proc = table.get(pid)
        if proc is None:
            raise PlanError(
                f"pid {pid} is not a GPU process or part of a GPU process tree on {snapshot.target}"
            )
        if proc.state == STATE_ZOMBIE and not proc.is_defunct_leader:
            parent = table.get(proc.ppid) if proc.ppid is not None else None
            if proc.ppid in PROTECTED_PIDS or parent is None:
                notes.append(
                    f"pid {pid} is a zombie whose parent is init: it holds nothing and cannot be signalled; "
                    "skipped"
                )
                continue
            zombies.append(ZombieNote(pid, parent.pid, asked=True))
            notes.append(zombies[-1].text)
            proc = parent
            _refuse_early(proc.pid, snapshot, table)
        if all(r.pid != proc.pid for r in roots):
            roots.append(proc)
    if not roots:
        raise PlanError("nothing to signal" + (f": {notes[-1]}" if notes else ""))

    targets: list[KillTarget] = []
    listed_pids: set[int] = set()
    if tree:
        # Children, and the members of the process groups they lead: a double-forked grandchild whose middle
        # parent died is tied to the tree only by its group, and the collector signals it as part of the tree.
        # Not those that lead a session of their own: they left the job (the collector's rule too).
        related = related_map((proc.pid, tree_parent(proc, table), proc.pgid) for proc in snapshot.processes)
        root_pids = {r.pid for r in roots}
        for root in roots:

            def inside(pid: int, root: Proc = root) -> bool:
                return pid not in table or not crosses(root, table[pid])

            for pid in deepest_first(walk([root.pid], related, expand=inside)):
                member = table[pid]
                if pid in listed_pids or pid in root_pids:
                    continue
                if not inside(pid):
                    label = member.owner.label if member.owner is not None else "?"
                    notes.append(f"pid {pid} belongs to another owner ({fit(label, 80)}): not signalled")
                    continue
                service = service_of(member)
                if service is not None:
                    notes.append(service_note(pid, service))
                    continue
                if member.state == STATE_ZOMBIE and not member.is_defunct_leader:
                    if member.ppid is not None:
                        zombies.append(ZombieNote(pid, member.ppid, asked=False))
                        notes.append(zombies[-1].text)
                    continue
                listed_pids.add(pid)
                targets.append(_target_for(member, snapshot, held, root.pid, graphics))
        notes.append(
            "the collector re-reads each tree (children and process-group members) when it signals: "
            "processes started or double-forked away since this listing are signalled too"
        )
    for root in roots:
        targets.append(_target_for(root, snapshot, held, None, graphics))
    return KillPlan(
        target=snapshot.target,
        boot_id=snapshot.boot_id,
        signal=signal,
        tree=tree,
        escalate_s=escalate_s,
        targets=tuple(targets),
        notes=tuple(dict.fromkeys(notes)),
        wait_s=None if escalate_s is not None else wait_s,
        zombies=tuple(dict.fromkeys(zombies)),
        ports=job_ports(targets, snapshot),
    )


def job_ports(targets: Iterable[KillTarget], snapshot: HostSnapshot) -> tuple[int, ...]:
    """The TCP ports of what ``targets`` name: ``--port`` of their command lines (a launcher's, or the
    wrapper's around it) and the ports they were listening on in ``snapshot``; sorted."""
    ports: set[int] = set()
    for target in targets:
        named = port_option(target.cmdline)
        if named is not None:
            ports.add(named)
        proc = snapshot.process(target.pid)
        if proc is not None:
            ports.update(proc.listen_ports)
    return tuple(sorted(ports))


def kill_command(plan: KillPlan, detach: bool = True) -> dict[str, Any]:
    """The collector's ``kill`` command for this plan (the link adds the request id).

    ``detach``: the collector answers right after the signals; ``kill_wait`` then brings the rest. The trees'
    members go as listed and confirmed: signalled even if their root is gone when the command runs.
    """
    return kill_messages.kill_command(
        [(t.pid, t.start_ticks) for t in plan.roots],
        [(t.pid, t.start_ticks) for t in plan.targets if t.descendant_of is not None],
        plan.boot_id,
        plan.signal,
        plan.tree,
        plan.escalate_s,
        plan.wait_s,
        detach,
        {t.pid: {"kind": t.owner.kind, "id": t.owner.id} for t in plan.targets if t.owner is not None},
    )
