"""What a kill never signals, and how far a tree kill reaches."""

from __future__ import annotations

import os

from gputui.agent.proc.owners import OwnerReader, same_owner
from gputui.agent.proc.procfs import ProcStat, read_cmdline
from gputui.agent.proc.proctree import ancestors_of, deepest_first, table_relations, walk
from gputui.agent.protocol import GPU_STACK_SERVICES, gpu_stack_service

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class KillGuard:
    """The processes a kill must spare, as they are when it starts: pid 1, kernel threads, the collector and
    its ancestors (its session: shell, terminal, sshd). Not its process group: a script's ``server &``
    shares the group of the ``gputui kill`` it runs next (no job control), and is the user's to kill.

    Args:
        agent_pid: The collector's pid (the process that runs the kill, when it runs in-process elsewhere).
    """

    def __init__(self, agent_pid: int) -> None:
        me = os.getpid()
        self.agent_pid = agent_pid
        self.protected = {1, me}
        self.protected.update(ancestors_of(me))
        self.owners = OwnerReader()

    def owner_of(self, stat: ProcStat) -> dict[str, Any]:
        """The owner of a listed process, as it is now (``owners.owner_of``; the user left out)."""
        return self.owners.owner(stat.pid, stat.start_ticks, None, None)

    def same_owner_as(self, root: ProcStat, stat: ProcStat) -> bool:
        """Whether ``stat`` is of ``root``'s owner: a tree never reaches into another container, pod,
        Slurm step or unit."""
        return same_owner(self.owner_of(root), self.owner_of(stat))

    def tree_members(self, root: int, table: dict[int, ProcStat]) -> list[int]:
        """Descendants of ``root`` by ppid and members of groups led by any of them, deepest first.

        Never expands through pid 1, kernel threads or a protected process (the agent and its ancestors),
        and leaves out (and does not expand through) a process of another owner than ``root``'s.
        """
        protected = self.protected
        root_stat = table[root]

        def inside(pid: int) -> bool:
            return pid in table and self.same_owner_as(root_stat, table[pid])

        order = walk([root], table_relations(table), expand=lambda pid: pid not in protected and inside(pid))
        return [pid for pid in deepest_first(order) if inside(pid)]

    def refusal(self, stat: ProcStat) -> str | None:
        pid = stat.pid
        if pid == 1:
            return "pid 1 (init) is never signalled"
        if pid == 2 or stat.ppid == 2:
            return "kernel thread: not signalled"
        if pid == self.agent_pid or pid == os.getpid():
            return "this is the gputui collector itself"
        if pid in self.protected:
            return "this is an ancestor of the gputui agent (its session or terminal)"
        service = gpu_stack_service(read_cmdline(pid), stat.name)
        if service is not None:
            return f"this is {service}, {GPU_STACK_SERVICES[service]}: a GPU-stack service is never signalled"
        return None
