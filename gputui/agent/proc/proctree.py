"""Process trees: the one rule of what a GPU job is, and the one walk over a tree.

A GPU process tree is the job of the process holding GPU memory, not its ancestry: its root is the holder's
highest ancestor still in the same session and cgroup, below every session boundary (``job_root``). The
collector lists and kills by this rule, and the client's analysis, kill planner, simulator and reduced mode
build their trees with the same functions (``job_root``, ``walk``), so the tree shown is the tree killed.
"""

from __future__ import annotations

from gputui.agent.proc.procfs import ProcStat, read_cgroup, read_children, read_cmdline, read_stat

NEVER_IN_A_TREE = frozenset({0, 1, 2})
"""The scheduler, init and kthreadd: no tree walk ever reaches them from below."""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Iterable, Mapping, Union

    Related = Union[Mapping[int, Iterable[int]], Callable[[int], Iterable[int]]]
    """pid -> the pids directly below it in a tree: a mapping (``related_map``) or a function."""


def ancestors_of(pid: int, table: dict[int, ProcStat] | None = None) -> list[int]:
    """The parent chain of ``pid`` up to pid 1 (excluding ``pid`` itself), from ``table`` or live /proc."""
    chain: list[int] = []
    seen = {pid}
    current = pid
    while True:
        stat = table.get(current) if table is not None else read_stat(current)
        if stat is None or stat.ppid <= 0 or stat.ppid in seen:
            return chain
        chain.append(stat.ppid)
        seen.add(stat.ppid)
        current = stat.ppid


def children_map(table: dict[int, ProcStat]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    return children


# Processes that start sessions or run other people's work rather than belong to the job below them: a GPU
# process tree stops below them, so killing "the tree" never takes the user's sshd, tmux server, container
# shim, a cron daemon or the display stack with it. Names are what /proc/<pid>/stat says (at most 15
# characters).
SESSION_BOUNDARY_NAMES = frozenset(
    {
        # inits and service managers
        "init",
        "systemd",
        "(sd-pam)",
        "runsv",
        "runsvdir",
        "s6-supervise",
        "supervisord",
        "launchd",
        # logins and terminal multiplexers
        "login",
        "su",
        "screen",
        "SCREEN",
        "mosh-server",
        "dropbear",
        # containers
        "conmon",
        "runc",
        "crun",
        "tini",
        "docker-init",
        "dumb-init",
        "catatonit",
        "dockerd",
        "containerd",
        "kubelet",
        # batch systems and job schedulers
        "slurmstepd",
        "slurmd",
        "sge_shepherd",
        "pbs_mom",
        "cron",
        "crond",
        "anacron",
        "atd",
        "incrond",
        "fcron",
        # the display stack: display managers, X servers, compositors, terminal emulators
        "sddm",
        "sddm-helper",
        "lightdm",
        "xdm",
        "lxdm",
        "Xorg",
        "Xwayland",
        "X",
        "gnome-shell",
        "mutter",
        "kwin_x11",
        "kwin_wayland",
        "plasmashell",
        "xterm",
        "konsole",
        "alacritty",
        "kitty",
        "tilix",
        "dbus-daemon",
    }
)
SESSION_BOUNDARY_PREFIXES = (
    "sshd",
    "tmux",
    "containerd-shim",
    "systemd-",
    "gdm",
    "gnome-session",
    "gnome-terminal",
    "xfce4-session",
    "xfce4-terminal",
    "lightdm-",
)
SESSION_SHELLS = frozenset(
    {"bash", "zsh", "sh", "dash", "fish", "ksh", "mksh", "tcsh", "csh", "ash", "busybox"}
)


def is_shell_name(name: str | None) -> bool:
    """Whether a process name is a shell's (a login shell's ``-bash`` included)."""
    name = name or ""
    return name in SESSION_SHELLS or name.lstrip("-") in SESSION_SHELLS


def is_session_boundary(pid: int, name: str | None, cmdline: list[str] | None) -> bool:
    """Whether a process, by its pid and name, started a session or runs others' work rather than one job.

    pid 0/1, sshd, tmux, screen, service managers, container shims and inits, batch and cron daemons, the
    display stack, and interactive or login shells. A shell running a script (``bash run.sh``, ``sh -c ...``)
    is part of the tree: it is the launcher. ``cmdline`` matters only for shells; None (unreadable) counts
    as empty.
    """
    if pid in (0, 1):
        return True
    name = name or ""
    if name in SESSION_BOUNDARY_NAMES or name.startswith(SESSION_BOUNDARY_PREFIXES):
        return True
    if is_shell_name(name):
        if not cmdline:
            return True  # cannot tell what it runs: never treat a possibly interactive shell as a launcher
        if cmdline[0].startswith("-"):
            return True  # login shell
        return all(arg.startswith("-") and arg != "-c" for arg in cmdline[1:])
    return False


class JobFacts:
    """What the job rule needs to know about one process; None where it could not be read."""

    __slots__ = ("pid", "ppid", "name", "cmdline", "session", "pgrp", "cgroup")

    def __init__(
        self,
        pid: int,
        ppid: int | None,
        name: str | None,
        cmdline: list[str] | None,
        session: int | None,
        pgrp: int | None,
        cgroup: str | None,
    ) -> None:
        self.pid = pid
        self.ppid = ppid
        self.name = name
        self.cmdline = cmdline
        self.session = session
        self.pgrp = pgrp
        self.cgroup = cgroup


def is_outside_job(parent: JobFacts, holder: JobFacts) -> bool:
    """Whether ``parent`` (an ancestor of ``holder``) is not part of the holder's job.

    It is not when it differs from the holder in session or cgroup, when it is a session boundary by pid or
    name (``is_session_boundary``), a kernel thread, or a process that init (pid 1) adopted or started and
    that leads neither the holder's session nor its process group: a daemon the job merely runs under, not
    the launcher that started it (a daemonised or ``nohup``'ed launcher leads its workers' session or group).
    Facts that could not be read decide nothing.
    """
    if parent.pid == 2 or parent.ppid == 2:
        return True
    if is_session_boundary(parent.pid, parent.name, parent.cmdline):
        return True
    if parent.session is not None and holder.session is not None and parent.session != holder.session:
        return True
    if parent.cgroup is not None and holder.cgroup is not None and parent.cgroup != holder.cgroup:
        return True
    if parent.ppid in (0, 1) and (holder.session is not None or holder.pgrp is not None):
        return parent.pid not in (holder.session, holder.pgrp)
    return False


def job_root(pid: int, facts_of: Callable[[int], JobFacts | None]) -> int:
    """The root of ``pid``'s GPU process tree: its highest ancestor that is still part of its job.

    The holder itself when its parent is outside the job (``is_outside_job``), or unknown. ``facts_of``
    returns the facts of a pid, None when it is not known.
    """
    holder = facts_of(pid)
    if holder is None:
        return pid
    current = holder
    seen = {pid}
    while True:
        parent = facts_of(current.ppid) if current.ppid is not None else None
        if parent is None or parent.pid in seen or is_outside_job(parent, holder):
            return current.pid
        seen.add(parent.pid)
        current = parent


def table_facts(
    table: dict[int, ProcStat], cgroup_of: Callable[[ProcStat], str | None] | None = None
) -> Callable[[int], JobFacts | None]:
    """``facts_of`` for ``job_root`` over a stat table; shells' cmdlines and cgroups are read once each."""
    memo: dict[int, JobFacts | None] = {}
    read_group = cgroup_of or (lambda stat: read_cgroup(stat.pid))

    def facts_of(pid: int) -> JobFacts | None:
        if pid not in memo:
            stat = table.get(pid)
            memo[pid] = None
            if stat is not None:
                cmdline = read_cmdline(pid) if is_shell_name(stat.name) else None
                memo[pid] = JobFacts(
                    pid, stat.ppid, stat.name, cmdline, stat.session, stat.pgrp, read_group(stat)
                )
        return memo[pid]

    return facts_of


def tree_root(
    pid: int, table: dict[int, ProcStat], facts_of: Callable[[int], JobFacts | None] | None = None
) -> int:
    """The root of ``pid``'s GPU process tree in ``table`` (``job_root``)."""
    return job_root(pid, facts_of or table_facts(table))


def related_map(rows: Iterable[tuple[int, int | None, int | None]]) -> dict[int, list[int]]:
    """pid -> what a tree holds below it: its children and, for a process-group leader, the group's members.

    ``rows`` are (pid, ppid, pgid) of each process, None where it is not known. A double-forked grandchild
    whose middle parent died was reparented away and is tied to its launcher only by its process group; a
    tree that goes by parentage alone passes ``None`` for every pgid.
    """
    related: dict[int, list[int]] = {}
    for pid, ppid, pgid in rows:
        if ppid is not None and ppid != pid:
            related.setdefault(ppid, []).append(pid)
        if pgid is not None and pgid != pid and pgid != ppid:
            related.setdefault(pgid, []).append(pid)
    return related


def leads_own_session(pid: int, session: int | None, parent_session: int | None) -> bool:
    """Whether a process started a session of its own below its parent (``setsid``): it left its parent's
    job, as a daemon does, so a tree reaches it only as the root of a job of its own. Unknown sessions
    decide nothing."""
    return session is not None and session == pid and parent_session is not None and parent_session != session


def job_parent(pid: int, ppid: int | None, session: int | None, parent_session: int | None) -> int | None:
    """The parent a tree hangs ``pid`` under: its ppid, or None when it leads a session of its own."""
    return None if leads_own_session(pid, session, parent_session) else ppid


def table_relations(table: dict[int, ProcStat]) -> dict[int, list[int]]:
    """``related_map`` of a stat table: children (not those that lead a session of their own) and
    process-group members."""

    def parent_session(stat: ProcStat) -> int | None:
        parent = table.get(stat.ppid)
        return None if parent is None else parent.session

    return related_map(
        (stat.pid, job_parent(stat.pid, stat.ppid, stat.session, parent_session(stat)), stat.pgrp)
        for stat in table.values()
    )


def walk(
    roots: Iterable[int],
    related: Related,
    expand: Callable[[int], bool] | None = None,
    seen: set[int] | None = None,
) -> list[tuple[int, int | None, int]]:
    """Every process of the trees under ``roots``, breadth first: (pid, the pid it was reached from, depth).

    A root comes with None and depth 0. ``expand`` says whether to look below a process that was reached (it
    is listed either way; default: always). Pids 0, 1 and 2 are never reached from below, and a pid is listed
    once: ``seen`` (updated) holds pids already placed, in an earlier walk of the same forest too.
    """
    below = related if callable(related) else (lambda pid: related.get(pid, ()))
    placed = set() if seen is None else seen
    order: list[tuple[int, int | None, int]] = []
    frontier: list[int] = []
    for root in roots:
        if root not in placed:
            placed.add(root)
            order.append((root, None, 0))
            frontier.append(root)
    depth = 0
    while frontier:
        depth += 1
        found: list[int] = []
        for pid in frontier:
            for member in below(pid):
                if member in placed or member in NEVER_IN_A_TREE:
                    continue
                placed.add(member)
                order.append((member, pid, depth))
                if expand is None or expand(member):
                    found.append(member)
        frontier = found
    return order


def deepest_first(order: Iterable[tuple[int, int | None, int]]) -> list[int]:
    """The pids of a ``walk`` below its roots, deepest first, then by pid: a tree's signal order."""
    return [
        pid
        for pid, _via, _depth in sorted((e for e in order if e[1] is not None), key=lambda e: (-e[2], e[0]))
    ]


def tree_members(roots: Iterable[int], table: dict[int, ProcStat]) -> set[int]:
    """``roots`` in ``table``, their descendants and the members of process groups led by any of them.

    The same expansion as a tree kill: a double-forked grandchild whose middle parent died was reparented
    away and is tied to the tree only by its process group.
    """
    return {pid for pid, _via, _depth in walk([r for r in roots if r in table], table_relations(table))}


def job_trees(roots: Iterable[int], table: dict[int, ProcStat]) -> dict[int, list[int]]:
    """Each of ``roots`` in ``table`` -> its tree's members (``tree_members`` of it alone), a process placed
    in the first tree (by root pid) that reaches it."""
    related = table_relations(table)
    placed: set[int] = set()
    return {
        root: [pid for pid, _via, _depth in walk([root], related, seen=placed)]
        for root in sorted(r for r in set(roots) if r in table)
    }


class ChildrenBook:
    """The children of each process a tree walk went below, kept with the stat line they were read after.

    A process whose stat line has not moved since (``ProcStat.unmoved_since``: no thread of it took CPU time)
    has forked nothing, so its children are not read again: a job of hundreds of idle members costs one
    stat read each, not a read of every thread's children file as well. What comes below a process without
    it running is not seen from here: an orphan reparented to it as a subreaper. A child that left is
    dropped by the walk (its stat is gone or names another parent).
    """

    def __init__(self) -> None:
        self._kept: dict[int, tuple[ProcStat, list[int]]] = {}

    def children(self, stat: ProcStat) -> list[int]:
        """The pids of ``stat``'s process's children (``read_children``, or as read while it was still)."""
        kept = self._kept.get(stat.pid)
        if kept is not None and stat.unmoved_since(kept[0]):
            return kept[1]
        found = read_children(stat.pid)
        self._kept[stat.pid] = (stat, found)
        return found

    def keep_only(self, pids: Iterable[int]) -> None:
        """Forget every process but ``pids``."""
        live = set(pids)
        self._kept = {pid: kept for pid, kept in self._kept.items() if pid in live}


def scan_trees(
    tree_pids: Iterable[int],
    known_pids: Iterable[int] = (),
    cgroup_of: Callable[[ProcStat], str | None] | None = None,
    book: ChildrenBook | None = None,
) -> dict[int, ProcStat]:
    """The part of the process table around some processes, without reading every pid on the host.

    Reads ``tree_pids`` and ``known_pids``, the parent chain of each up to pid 1, and everything below the
    tree root (``job_root``: the highest ancestor still part of the job) of each of ``tree_pids`` by
    /proc/<pid>/task/*/children (through ``book`` where one is given: those of a still process as read
    before; ``book`` keeps only the processes of this table). Members of a process group that are not
    descendants (a double-forked grandchild reparented away) are included only if they are among
    ``known_pids``. ``cgroup_of`` reads a process's cgroup (default: from /proc, uncached).
    """
    table: dict[int, ProcStat] = {}

    def add(pid: int) -> ProcStat | None:
        if pid in table:
            return table[pid]
        stat = read_stat(pid)
        if stat is not None:
            table[pid] = stat
        return stat

    tree_pids = [pid for pid in tree_pids if add(pid) is not None]
    for pid in known_pids:
        add(pid)
    for pid in list(table):
        current = table[pid]
        while current.ppid > 0 and current.ppid not in table:
            parent = add(current.ppid)
            if parent is None:
                break
            current = parent
    facts_of = table_facts(table, cgroup_of)
    roots = sorted(set(tree_root(pid, table, facts_of) for pid in tree_pids) - NEVER_IN_A_TREE)

    def below(pid: int) -> list[int]:
        parent = table.get(pid)
        if parent is None:
            return []
        found = []
        for child in read_children(pid) if book is None else book.children(parent):
            stat = add(child)
            if stat is None or stat.ppid != pid:
                continue
            if not leads_own_session(child, stat.session, parent.session):
                found.append(child)
        return found

    walk(roots, below)
    if book is not None:
        book.keep_only(table)
    return table
