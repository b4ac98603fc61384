"""The key reference (``?``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.ui import keymap

CLOSE_HINT = "Esc, ? or q closes"


class HelpScreen(ModalScreen[None]):
    """Every key the app answers to now (destructive keys are absent in read-only mode).

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
        table = Table(box=None, show_header=False, padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, description in self.keys:
            table.add_row(Text(key), Text(description))
        with Vertical(id="help-dialog") as dialog:
            # On the border too: a long list on a small pane scrolls, and how to close it must stay in view.
            dialog.border_title = "gputui keys"
            dialog.border_subtitle = CLOSE_HINT
            with VerticalScroll(id="help-keys"):
                yield Static(table)
            if self._read_only:
                yield Static(
                    Text("read-only: kill keys are off and kill commands are refused", style="yellow")
                )
            yield Static(Text(f"{CLOSE_HINT} · Ctrl+P: command palette", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)
