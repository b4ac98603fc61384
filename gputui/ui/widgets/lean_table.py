"""A DataTable whose render caches hold the current generation only, and whose labels are plain text.

Textual's DataTable keys its row, cell and line render caches by an update counter that every
``update_cell``, ``add_row`` and ``remove_row`` increments. An entry made before an update can never be hit
again, yet it stays until the cache's cap (1,000 rows, 10,000 cells): a live table whose ages and figures
change every sample holds megabytes of renders nothing will read. ``LeanTable`` drops those caches when the
counter has moved since its last render, so they hold what is on screen now.

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


class LeanTable(DataTable[Text]):
    """``DataTable`` that keeps no render of an earlier generation (see the module docstring)."""

    _rendered_generation: int = -1

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
        for row, value in values:
            data[row][column] = value
        self._update_count += 1
        self.refresh()

    def drop_stale_renders(self) -> None:
        """Forget every render made before the latest update (nothing can read them again)."""
        generation = getattr(self, "_update_count", None)
        if generation is None or generation == self._rendered_generation:
            return
        self._rendered_generation = generation
        for name in GENERATION_CACHES:
            cache = getattr(self, name, None)
            if cache is not None:
                cache.clear()

    def render_lines(self, crop: Region) -> list[Strip]:
        self.drop_stale_renders()
        return super().render_lines(crop)
