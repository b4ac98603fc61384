"""What one row of the process table shows: a process, or a job's alike idle members folded into one
(``⋯ 292 × python3 dataloader.py (idle)``, their memory and CPU together, the oldest one's elapsed time);
which rows a filter keeps; whether a process list is the one shown already."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from rich.text import Text

from gputui.core.jobs import FoldedMembers
from gputui.core.model import Proc, ProcFilter, Record, replace
from gputui.core.text import fit
from gputui.ui.widgets.fmt import safe_text, telling_command
from gputui.ui.widgets.proc_columns import cell_inputs, optional_cells

if TYPE_CHECKING:
    from gputui.core.jobs import ProcNode

COMMAND_MAX_CHARS = 400
"""A 100 KB argv is cut here: the row stays one line and the table stays fast."""
DEFUNCT_MARK = " <defunct>"
GRAPHICS_MARK = " [graphics]"
FOLD_MARK = "⋯"
IDLE_MARK = " (idle)"
"""After a fold of sleeping members: nothing in them to look at one by one."""
IDLE_STATES = frozenset({"S", "I"})
TAGGED_MARK = "●"
PART_TAGGED_MARK = "◐"
"""A fold some of whose members are tagged (tagged one by one while it was expanded)."""

Cells = tuple[Text, ...]


class RowLayout(Record):
    """What every row's cells depend on besides its process: the column set and the clock.

    Attributes:
        compact: The narrow column set (a side pane).
        command_cells: How much of the command column is in view.
        optional: The optional columns shown (``proc_columns``).
        now_s: The clock elapsed times are counted to (None: no elapsed column).
    """

    compact: bool = False
    command_cells: int = 0
    optional: tuple[str, ...] = ()
    now_s: float | None = None


def _state_text(state: str | None) -> Text:
    if state == "Z":
        return Text(" Z ", style="bold white on red")
    if state == "D":
        return Text(" D ", style="bold black on yellow")
    if state is None:
        return Text(" – ", style="dim")
    return Text(f" {fit(state, 1)} ")


def _gpu_text(gpu_memory_mib: dict[int, int]) -> Text:
    held = {gpu: mib for gpu, mib in sorted(gpu_memory_mib.items()) if mib}
    if not held:
        return Text("")
    return Text(" " + " ".join(f"{gpu}:{mib}" for gpu, mib in held.items()).rjust(7), style="yellow")


class RowLine:
    """One row as drawn: its key, the process (a fold's members together), where it sits, how it is marked.

    Args:
        row: A process node, or a fold.
        depth: Its indent (0 in a flat order).
        tagged: The pids marked for a batch action.
    """

    __slots__ = ("count", "depth", "graphics_only", "key", "mark", "proc", "tree_mib")

    def __init__(self, row: ProcNode | FoldedMembers, depth: int, tagged: Collection[int]) -> None:
        self.depth = depth
        if isinstance(row, FoldedMembers):
            self.key = row.key
            # The command, user and state the members share; their figures together.
            self.proc: Proc = replace(
                row.proc, cpu_pct=row.cpu_pct, rss_kib=row.rss_kib, create_time=row.create_time, gpu_sm_pct={}
            )
            self.count = row.count
            self.tree_mib = 0
            self.graphics_only = False
            picked = sum(1 for pid in row.pids if pid in tagged)
            self.mark = TAGGED_MARK if picked == row.count else PART_TAGGED_MARK if picked else " "
        else:
            self.key = str(row.proc.pid)
            self.proc = row.proc
            self.count = 0
            self.tree_mib = row.subtree_total_mib
            self.graphics_only = row.graphics_only
            self.mark = TAGGED_MARK if row.proc.pid in tagged else " "

    def inputs(self, layout: RowLayout) -> tuple[object, ...]:
        """What the row's cells are built from: a row is drawn again only when these change."""
        proc = self.proc
        return (
            proc.start_ticks,
            self.depth,
            self.mark,
            self.count,
            layout.compact,
            layout.command_cells,
            proc.state,
            proc.user,
            tuple(sorted(proc.gpu_memory_mib.items())),
            self.tree_mib,
            self.graphics_only,
            proc.name,
            proc.cmdline,
            proc.cmdline_truncated,
            cell_inputs(proc, layout.optional, layout.now_s),
        )

    def cells(self, layout: RowLayout) -> Cells:
        """The row's cells, in the order of the columns ``layout`` shows."""
        proc, depth, tagged = self.proc, self.depth, self.mark != " "
        shown_pid = "" if self.count else str(proc.pid)  # a fold is no one process: k asks to expand it
        pid = Text(f"{self.mark}{shown_pid:>6} ", style="bold magenta" if tagged else "")
        total = str(self.tree_mib) if self.tree_mib else ""
        tree_total = Text(" " + total.rjust(6 if layout.compact else 8), style="yellow")
        if layout.compact:
            indent = " " + " " * max(0, depth - 1) + ("└ " if depth else "")  # a side pane: one cell a level
        else:
            indent = " " + "  " * depth + ("└ " if depth else "")
        command = Text(indent, style="dim")
        folded = f"{FOLD_MARK} {self.count} × " if self.count else ""
        idle = IDLE_MARK if self.count and proc.state in IDLE_STATES else ""
        style = "red" if proc.is_zombie else "yellow" if proc.is_uninterruptible else ""
        marks = (DEFUNCT_MARK if proc.is_zombie else "") + (GRAPHICS_MARK if self.graphics_only else "")
        room = layout.command_cells - len(indent) - len(marks) - len(folded) - len(idle)
        shown = telling_command(proc.cmdline, proc.name, room, COMMAND_MAX_CHARS, proc.cmdline_truncated)
        command.append(folded, style="bold cyan")
        command.append(shown, style=style)
        command.append(idle, style="dim")
        if proc.is_zombie:
            command.append(DEFUNCT_MARK, style="bold red")
        if self.graphics_only:
            # NVML type G (an X server, a compositor): the display stack, left out of kill-all.
            command.append(GRAPHICS_MARK, style="cyan")
        if layout.compact:
            return (pid, _state_text(proc.state), tree_total, command)
        return (
            pid,
            Text(" ").append_text(safe_text(proc.user, 8)),
            _state_text(proc.state),
            _gpu_text(proc.gpu_memory_mib),
            tree_total,
            *optional_cells(proc, layout.optional, layout.now_s),
            command,
        )


def same_nodes(nodes: Sequence[ProcNode], before: Sequence[ProcNode]) -> bool:
    """Whether ``nodes`` show what ``before`` showed: the same forest nodes (built once per process list), or
    nodes of the same processes at the same place (the rows outside the trees are made for each call)."""
    if len(nodes) != len(before):
        return False
    for node, old in zip(nodes, before, strict=True):
        if node is old:
            continue
        if (
            node.proc is not old.proc
            or node.depth != old.depth
            or node.subtree_total_mib != old.subtree_total_mib
            or node.graphics_only != old.graphics_only
            or node.children
            or old.children
        ):
            return False
    return True


def tree_mib(row: ProcNode | FoldedMembers) -> int:
    """The GPU memory a row's tree holds (a fold: none, by what a fold is)."""
    return 0 if isinstance(row, FoldedMembers) else row.subtree_total_mib


def filtered(
    rows: list[ProcNode | FoldedMembers], nodes: Sequence[ProcNode], needle: ProcFilter
) -> list[ProcNode | FoldedMembers]:
    """The rows that pass ``needle``: a fold whole when all its members pass (they share all but their pids),
    the members that pass one by one when only some do (a pid)."""
    kept: list[ProcNode | FoldedMembers] = []
    by_pid: dict[int, ProcNode] | None = None
    for row in rows:
        if not isinstance(row, FoldedMembers):
            if needle.matches(row.proc, _haystack(row.proc)):
                kept.append(row)
            continue
        passed = [proc.pid for proc in row.members if needle.matches(proc, _haystack(proc))]
        if len(passed) == row.count:
            kept.append(row)
        elif passed:
            by_pid = by_pid if by_pid is not None else {node.proc.pid: node for node in nodes}
            kept.extend(by_pid[pid] for pid in passed)
    return kept


def _haystack(proc: Proc) -> str:
    parts = [str(proc.pid), proc.user or "", proc.name or "", " ".join(proc.cmdline)[: COMMAND_MAX_CHARS * 4]]
    return " ".join(parts).lower()
