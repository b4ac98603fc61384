"""The fleet overview: one row per host, keyed by host name, updated in place.

A refresh of 500 hosts touches only the rows whose text changed, and within them builds again only the
cells whose inputs changed; rows are added or removed only when hosts come, go or are filtered, and a new
order is applied with ``DataTable.sort`` over the existing rows. The cursor stays on the same host through
all of it.

Each row is one cell of the table: its columns' cells, each cut and padded to its column's width, joined into
one line (and the header likewise). The table draws a cell through Rich's whole render path; a line of ten
columns drawn as one cell costs a tenth of ten cells, and a new order or a refresh redraws every visible row.

What a row keeps to build its line again is plain: each cut cell as its characters and its spans as tuples
of numbers and style names, values the cyclic garbage collector stops tracking. Kept as ``Text`` and ``Span``
objects, every cell of every host would be walked by each full collection, which holds the interpreter while
a key waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from rich.style import Style
from rich.text import Span, Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets.data_table import ColumnKey, RowDoesNotExist, RowKey

from gputui.core.fleet import (
    FleetRow,
    baseline_text,
    findings_text,
    hottest_text,
    memory_text,
    state_text,
    xid_text,
)
from gputui.ui.widgets.fmt import DASH, bar, safe_text
from gputui.ui.widgets.lean_table import LeanTable

NARROW_MAX_CELLS = 70
"""At or below this width: host, GPUs at baseline, memory, data age."""
WIDE_MIN_CELLS = 150
"""From this width on: a longer memory bar and the hottest GPU's power."""
HOST_MIN_CELLS = 10
HOST_MAX_CELLS = 40

_STATE_STYLES = {"live": "", "stale": "yellow", "gone": "red", "empty": "dim"}


OWNERS_CELLS = 28
"""The pods column (DCGM's pod labels), shown beside the others once some host has one and there is room."""


def _columns(width: int, owners: bool = False) -> tuple[tuple[str, str, int], ...]:
    """(key, label, cells) for a table ``width`` cells wide; the host column takes what is left (bounded).
    ``owners``: some host's GPUs are a pod's (a column for them where the width allows)."""
    fixed: tuple[tuple[str, str, int], ...]
    if width <= NARROW_MAX_CELLS:
        fixed = (("base", " base", 5), ("memory", "   memory", 10), ("age", " age", 13))
    elif width < WIDE_MIN_CELLS:
        fixed = (
            ("base", " base", 5),
            ("bar", " mem", 9),
            ("memory", "    used", 10),
            ("util", " util", 5),
            ("hottest", " hottest", 11),
            ("xid", " xid", 9),
            ("findings", " findings", 12),
            ("age", " age", 12),
            ("server", " server", 20),
        )
    else:
        fixed = (
            ("base", " base", 5),
            ("bar", " mem", 17),
            ("memory", "    used", 10),
            ("util", " util", 5),
            ("hottest", " hottest", 16),
            ("xid", " xid", 12),
            ("findings", " findings", 16),
            ("age", " age", 14),
            ("server", " server", 24),
        )
    if (
        owners
        and width > NARROW_MAX_CELLS
        and width - sum(c for _, _, c in fixed) - OWNERS_CELLS >= HOST_MIN_CELLS + 2
    ):
        fixed = (*fixed, ("owners", " pods", OWNERS_CELLS))
    host = max(HOST_MIN_CELLS, min(HOST_MAX_CELLS, width - sum(cells for _, _, cells in fixed) - 2))
    return (("host", " host", host), *fixed)


def _mem_style(row: FleetRow) -> str:
    if row.used_mib is None or not row.total_mib:
        return "dim"
    if row.at_baseline == row.gpus:
        return "green"
    pct = 100 * row.used_mib / row.total_mib
    return "red" if pct >= 90 else "yellow" if pct >= 50 else "cyan"


def _server_cell(row: FleetRow, cells: int) -> Text:
    if row.server is None:
        return Text(f" {DASH}", style="dim")
    style = "" if row.server_state in ("UP", None) else "bold red"
    text = Text(" ")
    if row.server_state not in ("UP", None):
        text.append(f"{row.server_state} ", style=style)
    text.append_text(safe_text(row.server, max(4, cells - len(text.plain) - 1), style=style))
    return text


def _cell_inputs(key: str, row: FleetRow) -> tuple[object, ...]:
    """Everything column ``key`` of ``row`` is drawn from: equal inputs draw the same cell."""
    if key == "host":
        return (row.name, row.state)
    if key == "base":
        return (row.at_baseline, row.gpus, row.state)
    if key in ("bar", "memory"):
        return (row.used_mib, row.total_mib, row.at_baseline == row.gpus)
    if key == "util":
        return (row.util_pct,)
    if key == "hottest":
        return (row.hottest, row.hottest_power_w)
    if key == "xid":
        return row.xid
    if key == "age":
        return (state_text(row), row.state)
    if key == "findings":
        return (row.findings, row.dead_held_mib)
    if key == "owners":
        return row.owners
    return (row.server, row.server_state)


def _cell(key: str, row: FleetRow, width: int) -> Text:
    """One cell of ``row`` (each cell carries its own leading space)."""
    state_style = _STATE_STYLES.get(row.state, "")
    if key == "host":
        name_style = "bold" if not state_style else ""
        return Text(" ").append_text(safe_text(row.name, width - 1, style=name_style))
    if key == "base":
        done = row.at_baseline is not None and row.at_baseline == row.gpus
        return Text(f" {baseline_text(row):>4}", style="green" if done else state_style or "yellow")
    if key == "bar":
        return Text(" ").append_text(bar(row.used_mib, row.total_mib, width - 1, _mem_style(row)))
    if key == "memory":
        return Text(f" {memory_text(row):>{width - 1}}", style=_mem_style(row))
    if key == "util":
        return Text(f" {DASH if row.util_pct is None else f'{row.util_pct}%':>4}")
    if key == "hottest":
        hot = row.hottest is not None and row.hottest[1] >= 85
        return Text(f" {hottest_text(row, power=width >= 16)}", style="bold red" if hot else "")
    if key == "xid":
        return Text(f" {xid_text(row)}", style="bold red" if row.xid else "dim")
    if key == "age":
        return Text(f" {state_text(row)}", style=state_style or "dim")
    if key == "findings":
        style = "bold red" if row.dead_held_mib else "yellow" if row.findings else "dim"
        return Text(f" {findings_text(row)}", style=style)
    if key == "owners":
        if not row.owners:
            return Text(f" {DASH}", style="dim")
        return Text(" ").append_text(safe_text(", ".join(row.owners), width - 1, style="cyan"))
    return _server_cell(row, width)


def row_cells(row: FleetRow, columns: Sequence[tuple[str, str, int]]) -> tuple[Text, ...]:
    """The cells of one host's row for these columns."""
    return tuple(_cell(key, row, width) for key, _, width in columns)


Piece = tuple["str | int | Style", ...]
"""A cell cut to its column's width: its characters, then its style and spans as ``start, end, style`` from
its own start, all in one flat tuple of plain values (the collector stops tracking such a tuple at its first
collection; nested tuples, or ``Span``, would stay tracked for several)."""


def _cut(cell: Text, width: int) -> Piece:
    """``cell`` cut and padded to ``width`` cells, as the table would draw it in a column that wide."""
    piece = cell.copy()
    piece.truncate(width, pad=True)
    text = piece.plain
    spans: list[str | int | Style] = [0, len(text), piece.style] if piece.style else []
    for span in piece.spans:
        spans += (span.start, span.end, span.style)
    return (text, *spans)


def _line(pieces: Sequence[Piece]) -> Text:
    """Cut cells (``_cut``) as one line: their texts joined, their spans moved along."""
    texts: list[str] = []
    spans: list[Span] = []
    at = 0
    for piece in pieces:
        text = cast(str, piece[0])
        for i in range(1, len(piece), 3):
            start, end, style = cast("tuple[int, int, str | Style]", piece[i : i + 3])
            spans.append(Span(at + start, at + end, style))
        texts.append(text)
        at += len(text)
    return Text("".join(texts), spans=spans, no_wrap=True, end="")


class FleetTable(LeanTable):
    """Every host of the fleet, one row each, keyed by host name."""

    BINDINGS = [Binding("enter", "select_cursor", "Open host")]

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=False, cell_padding=0)
        self._columns: tuple[tuple[str, str, int], ...] = ()
        self._rows: dict[str, tuple[FleetRow, tuple[tuple[object, ...], ...], tuple[Piece, ...], Text]] = {}
        """Host name -> the row it shows, each cell's inputs (``_cell_inputs``), the cells cut to their widths
        (``_cut``) and the line the table holds (``_line``)."""
        self._order: list[str] = []
        self._row_keys: dict[str, RowKey] = {}
        self._line_key: ColumnKey | None = None
        self._last_rows: Sequence[FleetRow] | None = None

    def on_resize(self) -> None:
        if self._last_rows is not None:
            self.show(self._last_rows)  # the column set follows the width

    @property
    def selected_host(self) -> str | None:
        """The host under the cursor, or None when the table is empty."""
        if self.row_count == 0:
            return None
        return self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value

    def select_host(self, name: str) -> bool:
        """Move the cursor to ``name``; False when it is not shown."""
        try:
            self.move_cursor(row=self.get_row_index(name))
        except RowDoesNotExist:
            return False
        return True

    def cells(self, name: str) -> tuple[Text, ...]:
        """The cells of ``name``'s row, one per column (before they are cut to their widths); () when it is
        not shown."""
        shown = self._rows.get(name)
        return () if shown is None else row_cells(shown[0], self._columns)

    @property
    def column_keys(self) -> tuple[str, ...]:
        """The columns shown, in order (``host``, ``base``, ``memory``, …)."""
        return tuple(key for key, _, _ in self._columns)

    def _set_columns(self, width: int, owners: bool = False) -> None:
        columns = _columns(width, owners)
        if columns == self._columns:
            return
        self.clear(columns=True)
        header = _line([_cut(Text(label), cells) for _, label, cells in columns])
        self._line_key = self.add_column(header, key="line", width=sum(cells for _, _, cells in columns))
        self._columns = columns
        self._rows = {}
        self._row_keys = {}
        self._order = []

    def show(self, rows: Sequence[FleetRow], width: int | None = None) -> None:
        """Show ``rows`` in this order (already filtered and sorted), updating only what changed.

        Args:
            rows: One per host shown.
            width: The width to lay the columns out for (default: the widget's own).
        """
        self._last_rows = rows
        self._set_columns(width if width is not None else self.size.width, any(row.owners for row in rows))
        selected = self.selected_host
        old_row = self.cursor_row
        order = [row.name for row in rows]
        wanted = dict(zip(order, rows, strict=True))
        for name in [n for n in self._rows if n not in wanted]:
            self.remove_row(self._row_keys.pop(name))
            del self._rows[name]
        current = [name for name in self._order if name in wanted]  # the rows' order in the table now
        columns = self._columns
        lines: list[tuple[RowKey, Text]] = []
        for name, row in wanted.items():
            shown = self._rows.get(name)
            if shown is not None and shown[0] is row:
                continue  # the same row again (a new order or filter)
            inputs = tuple(_cell_inputs(key, row) for key, _, _ in columns)
            if shown is not None and inputs == shown[1]:
                self._rows[name] = (row, inputs, shown[2], shown[3])
                continue  # nothing this row shows changed
            if shown is None:
                pieces = tuple(_cut(_cell(key, row, width), width) for key, _, width in columns)
                line = _line(pieces)
                self._row_keys[name] = self.add_row(line, key=name)
                current.append(name)
            else:
                # Only the cells whose inputs changed are built again: a refresh usually changes the age of
                # every host and the figures of a few.
                cut = list(shown[2])
                changed = False
                for i, (key, _, width) in enumerate(columns):
                    if inputs[i] != shown[1][i]:
                        cut[i] = _cut(_cell(key, row, width), width)
                        changed = True
                pieces, line = tuple(cut), shown[3]
                if changed:
                    line = _line(pieces)
                    lines.append((self._row_keys[name], line))
            self._rows[name] = (row, inputs, pieces, line)
        if lines and self._line_key is not None:
            self.update_cells(self._line_key, lines)
        if order != current:
            # DataTable.sort hands the key function cell values, not row keys: each row's line is an object of
            # its own, held both here and in the table, so its identity names the row.
            rank = {id(self._rows[name][3]): i for i, name in enumerate(order)}
            self.sort("line", key=lambda cell: rank[id(cell)])
        self._order = order
        if selected is not None and selected in wanted:
            self.select_host(selected)
        elif order:
            self.move_cursor(row=min(old_row, len(order) - 1))
