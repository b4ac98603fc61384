"""The help (``?``): every key the app answers to now, one row per key, then what every mark on the screen
means (``legend``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.ui import keymap, legend

CLOSE_HINT = "Esc, ? or q closes"
LEGEND_TITLE = "What the marks mean"


def keys_table(rows: Sequence[tuple[str, str]]) -> Table:
    """One row per key; what it does in each place on a line of its own."""
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(ratio=1)
    for key, does in keymap.per_key(rows):
        table.add_row(Text(key), Text("\n".join(does)))
    return table


def legend_table(parts: Sequence[str] = legend.PARTS) -> Table:
    """The legend, part by part: each mark drawn as the screen draws it, beside what it means."""
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    shown = None
    for part, mark in legend.rows(parts):
        if part != shown:
            table.add_row(Text(part, style="bold underline"), Text(""))
            shown = part
        table.add_row(Text(mark.glyph, style=mark.style), Text(mark.meaning))
    return table


class HelpScreen(ModalScreen[None]):
    """Every key the app answers to now (destructive keys are absent in read-only mode), then the legend.

    Args:
        keys: (key, what it does) rows, from ``keymap.help_rows``.
        read_only: Say that the kill keys are off.
    """

    BINDINGS = keymap.bindings(keymap.HELP)

    def __init__(self, keys: Sequence[tuple[str, str]], read_only: bool) -> None:
        super().__init__()
        self.keys = tuple(keys)
        """(key, what it does), as listed."""
        self._read_only = read_only

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog") as dialog:
            # On the border too: a long list on a small pane scrolls, and how to close it must stay in view.
            dialog.border_title = "gputui keys"
            dialog.border_subtitle = CLOSE_HINT
            with VerticalScroll(id="help-keys"):
                yield Static(keys_table(self.keys), id="help-key-list")
                yield Static(Text(f"\n{LEGEND_TITLE}", style="bold"), id="help-legend-title")
                yield Static(legend_table(), id="help-legend")
            if self._read_only:
                yield Static(
                    Text("read-only: kill keys are off and kill commands are refused", style="yellow")
                )
            yield Static(Text(f"{CLOSE_HINT} · Ctrl+P: command palette", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)
