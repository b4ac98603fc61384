"""A DataTable whose render caches hold the current generation only, and whose labels are plain text.

Textual's DataTable keys its row, cell and line render caches by an update counter that every
``update_cell``, ``add_row`` and ``remove_row`` increments. An entry made before an update can never be hit
again, yet it stays until the cache's cap (1,000 rows, 10,000 cells): a live table whose ages and figures
change every sample holds megabytes of renders nothing will read. ``LeanTable`` drops those caches when the
counter has moved since its last render, so they hold what is on screen now.

The same counter makes one changed cell cost a render of every visible cell through Rich, the largest part
of drawing a table whose elapsed column ticks on every sample. Where nothing but cell values moved since
the last render (no row added, removed or sorted, no width changed, no resize), the renders of the cells
that did not change are carried over to the new generation, and only the changed ones are drawn again.

A ``str`` column label is parsed as Rich markup, which also loads Rich's emoji table (half a megabyte) the
first time; labels here are fixed words, so they go in as ``Text``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

GENERATION_CACHES = ("_row_render_cache", "_cell_render_cache", "_row_renderable_cache", "_line_cache")
"""DataTable's caches whose keys include ``_update_count`` (textual/widgets/_data_table.py)."""
CELL_KEY_LENGTH = 8
CELL_KEY_GENERATION = 6
"""A cell render's cache key: (row key, column key, base style, cursor, hover, hover cursor shown, update
count, pseudo classes); where Textual's differs, no render is carried over."""


class LeanTable(DataTable[Text]):
    """``DataTable`` that keeps no render of an earlier generation (see the module docstring)."""

    _rendered_generation: int = -1
    _cells_generation: int = -1
    """The update count as the last cell update left it, while cell updates are all that moved it."""
    _changed_cells: set[tuple[object, object]] | None = None
    """(row key, column key) of the cells updated since the last render."""

    def update_cell(
        self, row_key: RowKey | str, column_key: ColumnKey | str, value: Any, *, update_width: bool = False
    ) -> None:
        in_step = self._only_cells_moved()
        super().update_cell(row_key, column_key, value, update_width=update_width)
        self._note_cells(in_step and not update_width, [(row_key, column_key)])

    def add_column(
        self, label: str | Text, *, width: int | None = None, key: str | None = None, default: Any = None
    ) -> ColumnKey:
        text = Text(label) if isinstance(label, str) else label
        return super().add_column(text, width=width, key=key, default=default)

    def update_cells(self, column: ColumnKey, values: Iterable[tuple[RowKey, Text]]) -> None:
        """``update_cell`` of ``column`` in many rows, with one repaint for all of them.

        DataTable's own repaints the whole table for every cell it is given: a refresh that changes every
        row would repaint the one screen once per row.
        """
        data = getattr(self, "_data", None)
        if not isinstance(data, dict) or not isinstance(getattr(self, "_update_count", None), int):
            for row, value in values:  # a DataTable laid out otherwise: one cell at a time
                self.update_cell(row, column, value)
            return
        in_step = self._only_cells_moved()
        changed = []
        for row, value in values:
            data[row][column] = value
            changed.append((row, column))
        self._update_count += 1
        self._note_cells(in_step, changed)
        self.refresh()

    def _only_cells_moved(self) -> bool:
        """Whether cell updates are all that moved the update count since the last render."""
        generation = getattr(self, "_update_count", None)
        return generation is not None and generation in (self._rendered_generation, self._cells_generation)

    def _note_cells(self, in_step: bool, cells: Iterable[tuple[object, object]]) -> None:
        if not in_step:
            self._cells_generation = -1
            return
        self._cells_generation = self._update_count
        if self._changed_cells is None:
            self._changed_cells = set()
        self._changed_cells.update((_key_value(row), _key_value(column)) for row, column in cells)

    def drop_stale_renders(self) -> None:
        """Forget every render made before the latest update (nothing can read them again)."""
        generation = getattr(self, "_update_count", None)
        if generation is None or generation == self._rendered_generation:
            return
        carried = self._carried_cells(generation) if generation == self._cells_generation else None
        self._rendered_generation = generation
        self._cells_generation = -1
        self._changed_cells = None
        for name in GENERATION_CACHES:
            cache = getattr(self, name, None)
            if cache is not None:
                cache.clear()
        if carried:
            cells = self._cell_render_cache
            for key, lines in carried:
                cells.set(key, lines)

    def _carried_cells(self, generation: int) -> list[tuple[tuple[Any, ...], Any]]:
        """The cell renders of the last render that still hold: of every cell not updated since."""
        cache = getattr(self, "_cell_render_cache", None)
        if cache is None:
            return []
        changed = self._changed_cells or set()
        last = self._rendered_generation
        carried = []
        for key in list(cache.keys()):
            if not isinstance(key, tuple) or len(key) != CELL_KEY_LENGTH:
                return []  # another Textual's key: draw every cell again
            if key[CELL_KEY_GENERATION] != last:
                continue
            if (_key_value(key[0]), _key_value(key[1])) in changed:
                continue
            lines = cache.get(key)
            if lines is not None:
                moved = key[:CELL_KEY_GENERATION] + (generation,) + key[CELL_KEY_GENERATION + 1 :]
                carried.append((moved, lines))
        return carried

    def render_lines(self, crop: Region) -> list[Strip]:
        self.drop_stale_renders()
        return super().render_lines(crop)


def _key_value(key: object) -> object:
    """A row or column key as its value (Textual's keys compare by it; a plain ``str`` is one already)."""
    return getattr(key, "value", key)
