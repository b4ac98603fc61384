"""Which GPU jobs run under a profiler: a member (the root and every ancestor below it included) that is one,
or that carries one's injection in its environment (``Proc.profiler``, read by the collector).

One job, one answer: the profiler itself where a member is one (the highest in the tree, its helper daemons
last), else the highest member that carries an injection. A job with neither, some of whose members'
environments could not be read, is said as unknown for that many processes: never a guess.
"""

from __future__ import annotations

from gputui.core.jobs.forest import ProcNode, build_forest, flatten
from gputui.core.model import HostSnapshot, Proc, ProfilerMark, Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


class ProfiledJob(Record):
    """One GPU job's profiler, as far as the collector could tell.

    Attributes:
        root: The job's root process.
        subject: The process that is the profiler or carries its injection (None: none found).
        mark: What was found on it.
        unreadable: Members whose environment could not be read (nothing is known of them).
    """

    root: Proc
    subject: Proc | None = None
    mark: ProfilerMark | None = None
    unreadable: int = 0


def _rank(depth: int, mark: ProfilerMark) -> tuple[int, int]:
    """The profiler itself first, its helper daemons after, an injection last; the highest in the tree."""
    kind = 0 if mark.via == "argv" and not mark.is_daemon else 1 if mark.via == "argv" else 2
    return kind, depth


def job_profiler(nodes: Iterable[ProcNode]) -> ProfiledJob | None:
    """The profiler of one job's tree (its nodes, the root first); None for an empty tree."""
    listed = list(nodes)
    if not listed:
        return None
    best: tuple[tuple[int, int], Proc, ProfilerMark] | None = None
    unreadable = 0
    for node in listed:
        mark = node.proc.profiler
        if mark is None:
            continue
        if mark.unreadable:
            unreadable += 1
        elif mark.known:
            rank = _rank(node.depth, mark)
            if best is None or rank < best[0]:
                best = (rank, node.proc, mark)
    if best is None:
        return ProfiledJob(root=listed[0].proc, unreadable=unreadable)
    return ProfiledJob(root=listed[0].proc, subject=best[1], mark=best[2], unreadable=unreadable)


def profiled_jobs(snapshot: HostSnapshot) -> list[ProfiledJob]:
    """Every GPU job of the sample with what is known of its profiler, in the forest's order."""
    jobs = []
    for root in build_forest(snapshot):
        found = job_profiler(flatten([root]))
        if found is not None:
            jobs.append(found)
    return jobs


def profiler_of_pid(snapshot: HostSnapshot, pid: int | None) -> ProfiledJob | None:
    """The profiled job ``pid`` belongs to (None: none of its job's members is or carries a profiler); with
    no pid, the first profiled job of the host (a server whose launcher is not known)."""
    for root in build_forest(snapshot):
        nodes = flatten([root])
        if pid is not None and all(node.proc.pid != pid for node in nodes):
            continue
        found = job_profiler(nodes)
        if found is not None and found.mark is not None:
            return found
        if pid is not None:
            return None
    return None
