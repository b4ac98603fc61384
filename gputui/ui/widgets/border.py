"""Border titles set as plain text, and only when they change.

Textual repaints the whole widget on every ``border_title``/``border_subtitle`` assignment, equal or not (for
the process table, every visible cell), and parses a ``str`` as markup. The titles carry host names and
driver versions, so they are passed as ``Content`` and assigned only when their text differs.
"""

from __future__ import annotations

from textual.content import Content
from textual.widget import Widget


def set_border_title(widget: Widget, title: str) -> None:
    """Show ``title`` (plain text, never markup) on ``widget``'s top border, only when it changed."""
    content = Content(title)
    if widget.border_title != content.markup:
        widget.border_title = content


def set_border_subtitle(widget: Widget, subtitle: str) -> None:
    """Show ``subtitle`` (plain text, never markup) on ``widget``'s bottom border, only when it changed."""
    content = Content(subtitle)
    if widget.border_subtitle != content.markup:
        widget.border_subtitle = content
