"""The process tree: every GPU process with its ancestors and descendants, one selectable row per pid, and
a job's alike idle members as one row (``⋯ 292 × python3 dataloader.py``) that ``e`` expands."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from textual import events
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets.data_table import RowDoesNotExist

from gputui.core.jobs import FoldedMembers, find_folds, first_gpu_row, place_folds
from gputui.core.model import ProcFilter, replace
from gputui.ui import keymap
from gputui.ui.widgets.lean_table import LeanTable
from gputui.ui.widgets.proc_columns import OPTIONAL_COLUMNS, choose_optional
from gputui.ui.widgets.proc_rows import FOLD_MARK, Cells, RowLayout, RowLine, filtered, same_nodes, tree_mib

if TYPE_CHECKING:
    from gputui.core.jobs import ProcNode

SORT_MODES = ("tree", "gpu", "pid")
"""tree: as the processes descend from each other; gpu: most GPU memory first; pid: ascending."""
SCROLLBAR_CELLS = 2
"""The table's vertical scrollbar: the command column's visible cells end before it."""
OFF_SCREEN_ROWS = 4
"""Rows above and below the view that are kept as current as the rows in it (a step of the cursor)."""
_FOLD_KEY = next(key for key in keymap.keys_of(keymap.PROCESSES) if key.action == "toggle_fold").display
_TAG_KEY = next(key for key in keymap.keys_of(keymap.MONITOR) if key.action == "tag").display
NOTHING_FOLDED = f"{_FOLD_KEY}: no folded processes here (a {FOLD_MARK} row holds alike idle processes)"

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


def fold_refusal(fold: FoldedMembers) -> str:
    """What a key that signals one process says on a fold (``k``, ``K``, ``T``)."""
    return (
        f"{fold.count} alike processes are folded into this row: expand it ({_FOLD_KEY}) to pick one, or tag "
        f"it ({_TAG_KEY}) to take them all"
    )


class ProcessTable(LeanTable):
    """Rows keyed by pid (a fold by its ``FoldedMembers.key``), updated in place: a sample that changes
    figures touches only the cells that changed, and of the rows out of view only those the cursor reaches
    next.

    The rows are rebuilt only when the set or order of rows changes (a process came or went, a fold was
    expanded, a new sort or filter); the cursor stays on the same row across rebuilds (on the fold of a
    member that was folded, on the first member of a fold that was expanded). A process list that did not
    change (the same nodes, as the forest is built once per list) costs no work at all. A row out of view
    whose figures changed is redrawn when it comes into view: every update of a cell repaints every visible
    row. The command column is as wide as its longest command, also when a command grows in place (a process
    whose command line arrives after its name; out of view, once it comes into view): ←/→ scroll it.
    """

    BINDINGS = keymap.bindings(keymap.PROCESSES)

    class Refused(Message):
        """A key of the table did nothing here."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text
            """Why, in one line."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=False, cell_padding=0)
        self._compact = False
        self._row_keys: list[str] = []
        self._shown: dict[str, tuple[tuple[object, ...], Cells]] = {}
        """Per row key: the values its cells on screen were built from, and those cells."""
        self._pending: dict[str, tuple[int, tuple[object, ...], RowLine]] = {}
        """Rows out of view whose cells are older than their values: (row index, values, the row)."""
        self._column_keys: tuple[str, ...] = ()
        self._optional: tuple[str, ...] = ()
        """The optional columns shown (``proc_columns``), none in the compact set."""
        self._row_layout = RowLayout()
        """What every row's cells depend on: the column set, the command column's room, the clock."""
        self._expanded: set[str] = set()
        """Keys of the folds shown member by member."""
        self._folds: dict[str, FoldedMembers] = {}
        """The folds shown as one row, by key."""
        self._all_folds: dict[str, FoldedMembers] = {}
        """Every fold, folded or expanded, by key."""
        self._fold_of: dict[int, FoldedMembers] = {}
        """Every fold's members: pid -> its fold."""
        self._proc_nodes: Sequence[ProcNode] = ()
        """The nodes the rows shown were made from."""
        self._given: tuple[object, ...] | None = None
        """What else they were made from (``show``'s arguments, the width)."""
        self._show_args: tuple[Collection[int], str, str, Collection[int]] = ((), "", SORT_MODES[0], ())

    def on_mount(self) -> None:
        self._set_columns(compact=False)

    def _set_columns(self, compact: bool, optional: tuple[str, ...] = ()) -> None:
        self._compact = compact
        self._optional = () if compact else optional
        self._row_layout = replace(self._row_layout, compact=compact, optional=self._optional)
        self._pending = {}  # before the rows go: clearing scrolls, and a scroll draws what is pending
        self.clear(columns=True)
        spec: tuple[tuple[str, str, int | None], ...] = _COMPACT_COLUMNS if compact else _WIDE_COLUMNS
        if self._optional:
            extra = tuple(column for column in OPTIONAL_COLUMNS if column[0] in self._optional)
            spec = spec[:-1] + extra + spec[-1:]
        for key, label, width in spec:
            self.add_column(label, key=key, width=width)
        self._column_keys = tuple(key for key, _, _ in spec)
        self._row_keys = []
        self._shown = {}

    @property
    def compact(self) -> bool:
        """Whether the narrow column set is shown."""
        return self._compact

    # -- what is under the cursor ----------------------------------------------------------------------

    def _selected_key(self) -> str | None:
        if self.row_count == 0:
            return None
        value = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
        return None if value is None else str(value)

    @property
    def selected_pid(self) -> int | None:
        """The pid under the cursor; None when the table is empty or the cursor is on a fold."""
        key = self._selected_key()
        return None if key is None or key in self._folds else int(key)

    @property
    def selected_fold(self) -> FoldedMembers | None:
        """The fold under the cursor, if the cursor is on one."""
        key = self._selected_key()
        return None if key is None else self._folds.get(key)

    @property
    def selected_pids(self) -> tuple[int, ...]:
        """What the row under the cursor stands for: its pid, or every member of a fold."""
        fold = self.selected_fold
        if fold is not None:
            return fold.pids
        pid = self.selected_pid
        return () if pid is None else (pid,)

    def _row_for(self, key: str) -> str | None:
        """The row shown for ``key`` now: itself, the fold of a folded member, the first member of a fold
        that was expanded; None when none is."""
        if key in self._shown:
            return key
        fold = self._all_folds.get(key)
        if fold is not None:
            first = str(fold.pids[0])
            return first if first in self._shown else None
        fold = self._fold_of.get(int(key)) if key.isdigit() else None
        return fold.key if fold is not None and fold.key in self._shown else None

    def select_pid(self, pid: int) -> bool:
        """Move the cursor to ``pid`` (to its fold while it is folded); False when it is not shown."""
        key = self._row_for(str(pid))
        return key is not None and self._select_key(key)

    def _select_key(self, key: str) -> bool:
        try:
            index = self.get_row_index(key)
        except RowDoesNotExist:  # filtered out, or gone
            return False
        self.move_cursor(row=index)
        return True

    def action_toggle_fold(self) -> None:
        """Expand the fold under the cursor, or collapse the fold of the member under it."""
        fold = self.selected_fold
        if fold is not None:
            self._expanded.add(fold.key)
            self._show(self._proc_nodes, *self._show_args, prefer=str(fold.pids[0]))
            return
        pid = self.selected_pid
        fold = None if pid is None else self._fold_of.get(pid)
        if fold is None or fold.key not in self._expanded:
            self.post_message(self.Refused(NOTHING_FOLDED))
            return
        self._expanded.discard(fold.key)
        self._show(self._proc_nodes, *self._show_args, prefer=fold.key)

    # -- rows ------------------------------------------------------------------------------------------

    def show(
        self,
        nodes: Sequence[ProcNode],
        *,
        tagged: Collection[int] = (),
        filter_text: str = "",
        sort_mode: str = "tree",
        compact: bool | None = None,
        now_s: float | None = None,
        keep: Collection[int] = (),
    ) -> None:
        """Show these process nodes (from ``jobs.flatten``), alike idle members folded, filtered, sorted.

        Args:
            nodes: Pre-order tree nodes.
            tagged: Pids marked for a batch action.
            filter_text: Case-insensitive substring of pid, user or command, and ``KIND:TEXT`` owner words
                (``gputui.core.model.procfilter``); empty shows all.
            sort_mode: One of ``SORT_MODES``.
            compact: Switch to the narrow column set (None: keep the current one).
            now_s: The clock the elapsed times are counted to (None: no elapsed column).
            keep: Pids that keep a row of their own, never folded (what a finding names).
        """
        width = self.size.width or self.app.size.width
        wanted_compact = self._compact if compact is None else compact
        given = (width, wanted_compact, now_s, frozenset(tagged), filter_text, sort_mode, frozenset(keep))
        if given == self._given and same_nodes(nodes, self._proc_nodes):
            return  # the same process list (a memory sample): every row is as it is
        self._given = given
        optional: tuple[str, ...] = ()
        if not wanted_compact and now_s is not None:
            fixed = sum(cells or 0 for _key, _label, cells in _WIDE_COLUMNS)
            optional = choose_optional(width, fixed, nodes)
        spec = _COMPACT_COLUMNS if wanted_compact else _WIDE_COLUMNS
        fixed_cells = sum(cells or 0 for _key, _label, cells in spec)
        fixed_cells += sum(cells for key, _label, cells in OPTIONAL_COLUMNS if key in optional)
        prefer = None
        if wanted_compact != self._compact or optional != self._optional:
            prefer = self._selected_key()
            self._set_columns(wanted_compact, optional)
        self._row_layout = replace(
            self._row_layout, command_cells=width - fixed_cells - SCROLLBAR_CELLS, now_s=now_s
        )
        self._show(nodes, set(tagged), filter_text, sort_mode, set(keep), prefer=prefer)

    def _rows(
        self, nodes: Sequence[ProcNode], filter_text: str, sort_mode: str, keep: Collection[int]
    ) -> list[ProcNode | FoldedMembers]:
        """The rows for ``nodes``: folded but for the expanded folds, filtered, sorted."""
        folds = find_folds(nodes, keep)
        self._all_folds = {fold.key: fold for fold in folds}
        self._fold_of = {proc.pid: fold for fold in folds for proc in fold.members}
        rows = place_folds(nodes, [fold for fold in folds if fold.key not in self._expanded])
        needle = ProcFilter.parse(filter_text)
        if not needle.empty:
            rows = filtered(rows, nodes, needle)
        if sort_mode == "gpu":
            rows.sort(key=lambda r: (-tree_mib(r), -r.proc.gpu_total_mib, r.proc.pid))
        elif sort_mode == "pid":
            rows.sort(key=lambda r: r.proc.pid)
        return rows

    def _show(
        self,
        nodes: Sequence[ProcNode],
        tagged: Collection[int],
        filter_text: str,
        sort_mode: str,
        keep: Collection[int],
        prefer: str | None = None,
    ) -> None:
        """Draw the rows; ``prefer``: the row the cursor goes to (else it stays on the row it is on)."""
        self._proc_nodes = nodes
        self._show_args = (tagged, filter_text, sort_mode, keep)
        rows = self._rows(nodes, filter_text, sort_mode, keep)
        self._folds = {row.key: row for row in rows if isinstance(row, FoldedMembers)}
        flat = sort_mode != "tree"
        lines = [RowLine(row, 0 if flat else row.depth, tagged) for row in rows]
        keys = [line.key for line in lines]
        if keys == self._row_keys:
            self._update(lines)
            target = None if prefer is None else self._row_for(prefer)
            if target is not None:
                self._select_key(target)
            return
        selected = prefer or self._selected_key()
        old_row = self.cursor_row
        old = self._shown
        self._pending = {}
        self._shown = {}
        self.clear()
        for line in lines:
            inputs = line.inputs(self._row_layout)
            before = old.get(line.key)
            cells = before[1] if before is not None and before[0] == inputs else line.cells(self._row_layout)
            self._shown[line.key] = (inputs, cells)
            self.add_row(*cells, key=line.key)
        self._row_keys = keys
        target = None if selected is None else self._row_for(selected)
        if target is not None:
            self._select_key(target)
        elif lines:
            # Nothing was selected (the first rows) or it went: the first GPU process, never a launcher or a
            # shell above it, so that a first `k` targets what holds the GPU.
            first = first_gpu_row(rows)
            self.move_cursor(row=first if first is not None else min(old_row, len(lines) - 1))

    def _update(self, lines: Sequence[RowLine]) -> None:
        """The same rows with new values: draw those in (or near) view, leave the others for when they are."""
        top, bottom = self._in_view()
        for index, line in enumerate(lines):
            inputs = line.inputs(self._row_layout)
            if self._shown[line.key][0] == inputs:
                self._pending.pop(line.key, None)
            elif top <= index < bottom:
                self._pending.pop(line.key, None)
                self._draw(line, inputs)
            else:
                self._pending[line.key] = (index, inputs, line)

    def _draw(self, line: RowLine, inputs: tuple[object, ...]) -> None:
        cells = line.cells(self._row_layout)
        old = self._shown[line.key][1]
        for column, new_cell, old_cell in zip(self._column_keys, cells, old, strict=True):
            if new_cell != old_cell:
                self.update_cell(line.key, column, new_cell, update_width=column == "command")
        self._shown[line.key] = (inputs, cells)

    def _in_view(self) -> tuple[int, int]:
        """The row indexes drawn when they change: those in view and ``OFF_SCREEN_ROWS`` either side."""
        height = self.scrollable_content_region.height
        if height <= 0:  # not laid out yet: every row
            return 0, len(self._row_keys)
        top = round(self.scroll_y)
        return top - OFF_SCREEN_ROWS, top + height + OFF_SCREEN_ROWS

    def _draw_pending(self) -> None:
        """Draw the rows that came into view since their values changed."""
        if not self._pending:
            return
        top, bottom = self._in_view()
        for key, (index, inputs, line) in list(self._pending.items()):
            if top <= index < bottom:
                del self._pending[key]
                self._draw(line, inputs)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._draw_pending()

    def on_resize(self, _event: events.Resize) -> None:
        self._draw_pending()
