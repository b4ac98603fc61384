"""What a kill never signals, and how far a tree kill reaches."""

from __future__ import annotations

import os

from gputui.agent.proc.procfs import ProcStat
from gputui.agent.proc.proctree import ancestors_of, deepest_first, table_relations, walk


class KillGuard:
    """The processes a kill must spare, as they are when it starts: pid 1, kernel threads, the collector, its
    ancestors (its session: shell, terminal, sshd) and its own process group.

    Args:
        agent_pid: The collector's pid (the process that runs the kill, when it runs in-process elsewhere).
    """

    def __init__(self, agent_pid: int) -> None:
        me = os.getpid()
        self.agent_pid = agent_pid
        self.protected = {1, me}
        self.protected.update(ancestors_of(me))
        try:
            self.my_group = os.getpgid(0)
        except OSError:
            self.my_group = -1

    def tree_members(self, root: int, table: dict[int, ProcStat]) -> list[int]:
        """Descendants of ``root`` by ppid and members of groups led by any of them, deepest first.

        Never expands through pid 1, kernel threads or a protected process (the agent and its ancestors).
        """
        protected = self.protected
        return deepest_first(walk([root], table_relations(table), expand=lambda pid: pid not in protected))

    def refusal(self, stat: ProcStat) -> str | None:
        pid = stat.pid
        if pid == 1:
            return "pid 1 (init) is never signalled"
        if pid == 2 or stat.ppid == 2:
            return "kernel thread: not signalled"
        if pid == self.agent_pid or pid == os.getpid():
            return "this is the gputui agent itself"
        if pid in self.protected:
            return "this is an ancestor of the gputui agent (its session or terminal)"
        # Not the whole session: a server started with `cmd &` from the shell gputui runs in shares that
        # session (in a process group of its own) and must stay killable. Its ancestors are protected above.
        if stat.pgrp == self.my_group and self.my_group > 0:
            return "this process is in the gputui agent's own process group"
        return None
