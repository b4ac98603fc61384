"""The process tree: every GPU process with its ancestors and descendants, one selectable row per pid."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets.data_table import RowDoesNotExist

from gputui.core.jobs import first_gpu_row
from gputui.core.model import ProcFilter
from gputui.core.text import fit
from gputui.ui import keymap
from gputui.ui.widgets.fmt import safe_text, telling_command
from gputui.ui.widgets.lean_table import LeanTable
from gputui.ui.widgets.proc_columns import OPTIONAL_COLUMNS, cell_inputs, choose_optional, optional_cells

if TYPE_CHECKING:
    from gputui.core.jobs import ProcNode

COMMAND_MAX_CHARS = 400
"""A 100 KB argv is cut here: the row stays one line and the table stays fast."""
SORT_MODES = ("tree", "gpu", "pid")
"""tree: as the processes descend from each other; gpu: most GPU memory first; pid: ascending."""
_RowCache = dict[str, tuple[tuple[object, ...], tuple[Text, ...]]]
"""Row key → (the values a row's cells were built from, the cells)."""
DEFUNCT_MARK = " <defunct>"
GRAPHICS_MARK = " [graphics]"
SCROLLBAR_CELLS = 2
"""The table's vertical scrollbar: the command column's visible cells end before it."""

# The table has no cell padding (a 120-column screen needs every cell for the command): each column's text
# carries its own one-space gap, numbers right-aligned.
_WIDE_COLUMNS = (
    ("pid", "    pid", 8),
    ("user", " user", 9),
    ("state", " S ", 3),
    ("gpu", " gpu:MiB", 8),
    ("tree", " tree MiB", 9),
    ("command", " command", None),
)
_COMPACT_COLUMNS = (
    ("pid", "    pid", 8),
    ("state", " S ", 3),
    ("tree", "    MiB", 7),
    ("command", " command", None),
)


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


class ProcessTable(LeanTable):
    """Rows keyed by pid, updated in place: a tick that changes figures only touches the cells that changed.

    The rows are rebuilt only when the set or order of pids changes (a process came or went, a new sort or
    filter); the cursor stays on the same pid across rebuilds. The command column is as wide as its longest
    command, also when a command grows in place (a process whose command line arrives after its name): ←/→
    scroll it.
    """

    BINDINGS = keymap.bindings(keymap.PROCESSES)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=False, cell_padding=0)
        self._compact = False
        self._row_keys: list[str] = []
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._row_cache: _RowCache = {}
        """Per row key: the values its cells were built from, and those cells (reused while they match)."""
        self._column_keys: tuple[str, ...] = ()
        self._optional: tuple[str, ...] = ()
        """The optional columns shown (``proc_columns``), none in the compact set."""
        self._now_s: float | None = None
        self._command_cells = 0
        """How much of the command column is in view (the rest is reached with ←/→)."""

    def on_mount(self) -> None:
        self._set_columns(compact=False)

    def _set_columns(self, compact: bool, optional: tuple[str, ...] = ()) -> None:
        self._compact = compact
        self._optional = () if compact else optional
        self.clear(columns=True)
        spec: tuple[tuple[str, str, int | None], ...] = _COMPACT_COLUMNS if compact else _WIDE_COLUMNS
        if self._optional:
            extra = tuple(column for column in OPTIONAL_COLUMNS if column[0] in self._optional)
            spec = spec[:-1] + extra + spec[-1:]
        for key, label, width in spec:
            self.add_column(label, key=key, width=width)
        self._column_keys = tuple(key for key, _, _ in spec)
        self._row_keys = []
        self._cells = {}
        self._row_cache = {}

    @property
    def compact(self) -> bool:
        """Whether the narrow column set is shown."""
        return self._compact

    @property
    def selected_pid(self) -> int | None:
        """The pid under the cursor, or None when the table is empty."""
        if self.row_count == 0:
            return None
        row_key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key
        return None if row_key.value is None else int(row_key.value)

    def select_pid(self, pid: int) -> bool:
        """Move the cursor to ``pid``; False when it is not shown."""
        try:
            index = self.get_row_index(str(pid))
        except RowDoesNotExist:  # filtered out, or gone
            return False
        self.move_cursor(row=index)
        return True

    def _cached_cells(
        self, node: ProcNode, depth: int, tagged: bool, cache: _RowCache
    ) -> tuple[str, tuple[Text, ...]]:
        """The row's key and cells; the previous cells object when nothing that feeds them changed."""
        proc = node.proc
        key = str(proc.pid)
        inputs: tuple[object, ...] = (
            proc.start_ticks,
            depth,
            tagged,
            self._compact,
            proc.state,
            proc.user,
            tuple(sorted(proc.gpu_memory_mib.items())),
            node.subtree_total_mib,
            node.graphics_only,
            proc.name,
            proc.cmdline,
            proc.cmdline_truncated,
            self._command_cells,
            cell_inputs(proc, self._optional, self._now_s),
        )
        cached = self._row_cache.get(key)
        if cached is not None and cached[0] == inputs:
            cache[key] = cached
            return key, cached[1]
        cells = self._cells_for(node, depth, tagged)
        cache[key] = (inputs, cells)
        return key, cells

    def _cells_for(self, node: ProcNode, depth: int, tagged: bool) -> tuple[Text, ...]:
        proc = node.proc
        mark = "●" if tagged else " "
        pid = Text(f"{mark}{proc.pid:>6} ", style="bold magenta" if tagged else "")
        total = str(node.subtree_total_mib) if node.subtree_total_mib else ""
        tree_total = Text(" " + total.rjust(8 if not self._compact else 6), style="yellow")
        if self._compact:
            indent = " " + " " * max(0, depth - 1) + ("└ " if depth else "")  # a side pane: one cell a level
        else:
            indent = " " + "  " * depth + ("└ " if depth else "")
        command = Text(indent, style="dim")
        style = "red" if proc.is_zombie else "yellow" if proc.is_uninterruptible else ""
        marks = (DEFUNCT_MARK if proc.is_zombie else "") + (GRAPHICS_MARK if node.graphics_only else "")
        room = self._command_cells - len(indent) - len(marks)
        shown = telling_command(proc.cmdline, proc.name, room, COMMAND_MAX_CHARS, proc.cmdline_truncated)
        command.append(shown, style=style)
        if proc.is_zombie:
            command.append(DEFUNCT_MARK, style="bold red")
        if node.graphics_only:
            # NVML type G (an X server, a compositor): the display stack, left out of kill-all.
            command.append(GRAPHICS_MARK, style="cyan")
        if self._compact:
            return (pid, _state_text(proc.state), tree_total, command)
        return (
            pid,
            Text(" ").append_text(safe_text(proc.user, 8)),
            _state_text(proc.state),
            _gpu_text(proc.gpu_memory_mib),
            tree_total,
            *optional_cells(proc, self._optional, self._now_s),
            command,
        )

    def show(
        self,
        nodes: Sequence[ProcNode],
        *,
        tagged: Collection[int] = (),
        filter_text: str = "",
        sort_mode: str = "tree",
        compact: bool | None = None,
        now_s: float | None = None,
    ) -> None:
        """Show these process nodes (from ``analysis.flatten``), filtered and sorted.

        Args:
            nodes: Pre-order tree nodes.
            tagged: Pids marked for a batch action.
            filter_text: Case-insensitive substring of pid, user or command, and ``KIND:TEXT`` owner words
                (``gputui.core.model.procfilter``); empty shows all.
            sort_mode: One of ``SORT_MODES``.
            compact: Switch to the narrow column set (None: keep the current one).
            now_s: The clock the elapsed times are counted to (None: no elapsed column).
        """
        self._now_s = now_s
        wanted_compact = self._compact if compact is None else compact
        optional: tuple[str, ...] = ()
        if not wanted_compact and now_s is not None:
            fixed = sum(width or 0 for _key, _label, width in _WIDE_COLUMNS)
            optional = choose_optional(self.size.width or self.app.size.width, fixed, nodes)
        spec = _COMPACT_COLUMNS if wanted_compact else _WIDE_COLUMNS
        fixed_cells = sum(width or 0 for _key, _label, width in spec)
        fixed_cells += sum(width for key, _label, width in OPTIONAL_COLUMNS if key in optional)
        self._command_cells = (self.size.width or self.app.size.width) - fixed_cells - SCROLLBAR_CELLS
        if wanted_compact != self._compact or optional != self._optional:
            selected = self.selected_pid
            self._set_columns(wanted_compact, optional)
            self._show(nodes, tagged, filter_text, sort_mode)
            if selected is not None:
                self.select_pid(selected)
            return
        self._show(nodes, tagged, filter_text, sort_mode)

    def _show(
        self, nodes: Sequence[ProcNode], tagged: Collection[int], filter_text: str, sort_mode: str
    ) -> None:
        needle = ProcFilter.parse(filter_text)
        chosen = list(nodes)
        if not needle.empty:
            chosen = [n for n in chosen if needle.matches(n.proc, _haystack(n))]
        flat = sort_mode != "tree"
        if sort_mode == "gpu":
            chosen.sort(key=lambda n: (-n.subtree_total_mib, -n.proc.gpu_total_mib, n.proc.pid))
        elif sort_mode == "pid":
            chosen.sort(key=lambda n: n.proc.pid)
        cache: _RowCache = {}
        rows = [self._cached_cells(n, 0 if flat else n.depth, n.proc.pid in tagged, cache) for n in chosen]
        self._row_cache = cache  # rows no longer shown drop out
        keys = [key for key, _ in rows]
        if keys == self._row_keys:
            for key, cells in rows:
                old = self._cells.get(key)
                if old is cells:
                    continue  # built from the same values: no cell to touch
                for column, (new_cell, old_cell) in zip(
                    self._column_keys, zip(cells, old or cells, strict=True), strict=True
                ):
                    if old is None or new_cell != old_cell:
                        self.update_cell(key, column, new_cell, update_width=column == "command")
                self._cells[key] = cells
            return
        selected = self.selected_pid
        old_row = self.cursor_row
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self._row_keys = keys
        self._cells = dict(rows)
        if selected is not None and str(selected) in self._cells:
            self.select_pid(selected)
        elif rows:
            # Nothing was selected (the first rows) or it went: the first GPU process, never a launcher or a
            # shell above it, so that a first `k` targets what holds the GPU.
            first = first_gpu_row(chosen)
            self.move_cursor(row=first if first is not None else min(old_row, len(rows) - 1))


def _haystack(node: ProcNode) -> str:
    proc = node.proc
    parts = [str(proc.pid), proc.user or "", proc.name or "", " ".join(proc.cmdline)[: COMMAND_MAX_CHARS * 4]]
    return " ".join(parts).lower()
