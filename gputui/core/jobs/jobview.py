"""What the process panel lists besides the GPU process trees, which row its cursor starts on, and a job's
idle members that are alike as one row.

The trees (``build_forest``) are the jobs. Of the rest of a snapshot's processes the panel lists only what
needs a look by itself: zombies and D-state processes outside every tree, with a zombie's parent (the one
to signal), and every process a finding names (so each finding has a row to jump to). The ancestors the
collector sends along (pid 1, the shells and daemons above a job's root) are not listed: a first ``k`` must
never offer one of them.

A job may have hundreds of members that hold no GPU memory and do nothing worth a row each (a data loader's
workers, a launcher's idle children). ``fold_members`` shows siblings that are alike (same parent, command,
user and state; no GPU memory, no children, nothing a finding names) as one ``FoldedMembers`` row, which a
view may expand. The forest itself is never folded: a kill takes every member.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Sequence

from gputui.core.jobs.forest import ProcNode
from gputui.core.model import HostSnapshot, Proc, Record

FOLD_AT = 8
"""Alike siblings are folded into one row once there are at least this many: fewer read well one by one (a
server's handful of workers), and a fold hides their pids until it is expanded."""


def finding_pids(snapshot: HostSnapshot) -> set[int]:
    """Every pid a finding names (the process it is about, the one to signal): each keeps a row of its own."""
    return {
        pid for finding in snapshot.findings for pid in (finding.pid, finding.action_pid) if pid is not None
    }


def outside_rows(snapshot: HostSnapshot, in_trees: set[int]) -> list[Proc]:
    """The processes outside the trees that the panel lists, by pid (see the module docstring)."""
    table = {proc.pid: proc for proc in snapshot.processes}
    keep = {
        pid for pid in finding_pids(snapshot) if pid in table and pid not in in_trees and pid not in (0, 1)
    }
    for proc in snapshot.processes:
        if proc.pid in in_trees or not (proc.is_zombie or proc.is_uninterruptible):
            continue
        keep.add(proc.pid)
        parent = table.get(proc.ppid) if proc.is_zombie and proc.ppid not in (None, 0, 1) else None
        if parent is not None and parent.pid not in in_trees:
            keep.add(parent.pid)
    return [table[pid] for pid in sorted(keep)]


def first_gpu_row(nodes: Sequence[ProcNode | FoldedMembers]) -> int | None:
    """The index of the first row that holds GPU memory itself, None when none does."""
    for index, node in enumerate(nodes):
        if node.proc.gpu_total_mib > 0:
            return index
    return None


class FoldedMembers(Record):
    """Members of one job that are alike, shown as one row (``fold_members``).

    Attributes:
        key: Names the fold while its parent and command stay (a row key; never a pid).
        parent: The pid of the members' parent.
        depth: The members' depth in the tree.
        members: The members, by pid.
    """

    key: str
    parent: int
    depth: int
    members: tuple[Proc, ...]

    @property
    def proc(self) -> Proc:
        """The first member: what the folded members' command, user and state are."""
        return self.members[0]

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(proc.pid for proc in self.members)

    @property
    def rss_kib(self) -> int | None:
        """The members' resident memory together; None when none is known."""
        known = [proc.rss_kib for proc in self.members if proc.rss_kib is not None]
        return sum(known) if known else None

    @property
    def cpu_pct(self) -> float | None:
        """The members' CPU % together (100 = one core); None when none is known."""
        known = [proc.cpu_pct for proc in self.members if proc.cpu_pct is not None]
        return round(sum(known), 1) if known else None

    @property
    def create_time(self) -> float | None:
        """When the oldest member started (epoch seconds); None when none is known."""
        known = [proc.create_time for proc in self.members if proc.create_time is not None]
        return min(known) if known else None


def _alike(proc: Proc) -> tuple[object, ...]:
    return (proc.name, proc.cmdline, proc.cmdline_truncated, proc.user, proc.state, proc.owner)


def _foldable(node: ProcNode, keep: Collection[int]) -> bool:
    proc = node.proc
    return (
        not node.children
        and node.subtree_total_mib == 0
        and not node.graphics_only
        and not (proc.is_zombie or proc.is_uninterruptible or proc.waits or proc.profiler is not None)
        and proc.pid not in keep
    )


def fold_key(parent: int, proc: Proc) -> str:
    """The key of the fold of ``parent``'s children alike ``proc`` (stable from sample to sample)."""
    words = "\0".join((proc.name or "", proc.user or "", proc.state or "", *proc.cmdline))
    return f"fold:{parent}:{zlib.crc32(words.encode('utf-8', 'backslashreplace')):08x}"


def find_folds(
    nodes: Sequence[ProcNode], keep: Collection[int] = (), fold_at: int = FOLD_AT
) -> list[FoldedMembers]:
    """Every set of ``fold_at`` or more alike siblings in ``nodes`` (pre-order, ``flatten``), as a fold.

    Args:
        nodes: Tree rows, a parent before its children.
        keep: Pids that keep a row of their own (a finding names them).
        fold_at: The fewest alike siblings that are folded.
    """
    folds: list[FoldedMembers] = []
    keys: set[str] = set()
    for node in nodes:
        if len(node.children) < fold_at:
            continue
        groups: dict[tuple[object, ...], list[ProcNode]] = {}
        for child in node.children:
            if _foldable(child, keep):
                groups.setdefault(_alike(child.proc), []).append(child)
        for group in groups.values():
            if len(group) < fold_at:
                continue
            members = sorted(group, key=lambda child: child.proc.pid)
            key = base = fold_key(node.proc.pid, members[0].proc)
            while key in keys:  # alike but for the owner, or words that hash alike: still one row key each
                key = f"{base}:{len(keys)}"
            keys.add(key)
            folds.append(
                FoldedMembers(
                    key=key,
                    parent=node.proc.pid,
                    depth=members[0].depth,
                    members=tuple(m.proc for m in members),
                )
            )
    return folds


def place_folds(nodes: Sequence[ProcNode], folds: Sequence[FoldedMembers]) -> list[ProcNode | FoldedMembers]:
    """``nodes`` with the members of each of ``folds`` as one row: a fold stands where its first member (by
    pid) stood; nothing else moves."""
    if not folds:
        return list(nodes)
    folded: dict[int, FoldedMembers | None] = {}
    """Member pid -> its fold at the first member, None at the others (their rows are dropped)."""
    for fold in folds:
        folded[fold.members[0].pid] = fold
        folded.update((proc.pid, None) for proc in fold.members[1:])
    rows: list[ProcNode | FoldedMembers] = []
    for node in nodes:
        pid = node.proc.pid
        if pid not in folded:
            rows.append(node)
            continue
        at = folded[pid]
        if at is not None:
            rows.append(at)
    return rows


def fold_members(
    nodes: Sequence[ProcNode],
    keep: Collection[int] = (),
    expanded: Collection[str] = (),
    fold_at: int = FOLD_AT,
) -> list[ProcNode | FoldedMembers]:
    """``nodes`` (pre-order, ``flatten``) with each set of ``fold_at`` or more alike siblings as one row.

    Args:
        nodes: Tree rows, a parent before its children.
        keep: Pids that keep a row of their own (a finding names them).
        expanded: Keys of folds shown member by member.
        fold_at: The fewest alike siblings that are folded.

    Returns:
        The rows in order: a fold stands where its first member (by pid) stood; nothing else moves.
    """
    return place_folds(nodes, [fold for fold in find_folds(nodes, keep, fold_at) if fold.key not in expanded])
