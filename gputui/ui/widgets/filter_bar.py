"""The filter input ("/"): narrows a table (processes, fleet hosts) to the rows that contain the text."""

from __future__ import annotations

from textual.message import Message
from textual.widgets import Input

from gputui.ui import keymap


class FilterBar(Input):
    """Typing filters live; Enter keeps the filter and returns to the table; Esc clears it."""

    BINDINGS = keymap.bindings(keymap.FILTER)

    class Closed(Message):
        """The user left the filter (Enter keeps the text, Esc cleared it)."""

    def __init__(
        self,
        *,
        id: str | None = None,  # noqa: A002
        classes: str | None = None,
        placeholder: str = "filter: pid, user, command, or pod:/slurm:/user:… (Enter keeps, Esc clears)",
    ) -> None:
        super().__init__(placeholder=placeholder, id=id, classes=classes)

    def action_clear_filter(self) -> None:
        self.value = ""
        self.post_message(self.Closed())

    async def action_submit(self) -> None:
        await super().action_submit()
        self.post_message(self.Closed())
