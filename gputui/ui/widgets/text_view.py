"""A ``Static`` that shows a ``Text`` built elsewhere and repaints only when that text changed."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class TextView(Static):
    """Call ``show(text)`` as often as data arrives: an equal text costs no repaint and no relayout."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__("", id=id, classes=classes)
        self._shown: Text | None = None

    def show(self, text: Text) -> None:
        if text == self._shown:
            return
        self._shown = text
        self.update(text)
