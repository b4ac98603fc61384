"""What the process panel lists besides the GPU process trees, and which row its cursor starts on.

The trees (``build_forest``) are the jobs. Of the rest of a snapshot's processes the panel lists only what
needs a look by itself: zombies and D-state processes outside every tree, with a zombie's parent (the one
to signal), and every process a finding names (so each finding has a row to jump to). The ancestors the
collector sends along (pid 1, the shells and daemons above a job's root) are not listed: a first ``k`` must
never offer one of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui.core.jobs.forest import ProcNode
from gputui.core.model import HostSnapshot, Proc


def outside_rows(snapshot: HostSnapshot, in_trees: set[int]) -> list[Proc]:
    """The processes outside the trees that the panel lists, by pid (see the module docstring)."""
    table = {proc.pid: proc for proc in snapshot.processes}
    keep: set[int] = set()
    for finding in snapshot.findings:
        for pid in (finding.pid, finding.action_pid):
            if pid is not None and pid in table and pid not in in_trees and pid not in (0, 1):
                keep.add(pid)
    for proc in snapshot.processes:
        if proc.pid in in_trees or not (proc.is_zombie or proc.is_uninterruptible):
            continue
        keep.add(proc.pid)
        parent = table.get(proc.ppid) if proc.is_zombie and proc.ppid not in (None, 0, 1) else None
        if parent is not None and parent.pid not in in_trees:
            keep.add(parent.pid)
    return [table[pid] for pid in sorted(keep)]


def first_gpu_row(nodes: Sequence[ProcNode]) -> int | None:
    """The index of the first row that holds GPU memory itself, None when none does."""
    for index, node in enumerate(nodes):
        if node.proc.gpu_total_mib > 0:
            return index
    return None
