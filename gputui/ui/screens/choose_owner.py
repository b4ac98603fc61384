"""Which owner's GPU jobs a kill-all takes, on a host whose jobs have several (a Slurm step, a pod, ...).

``X`` on a host with one owner goes straight to the confirmation. With more, this dialog lists them: a digit
picks one, ``a`` takes every owner's jobs (said in so many words), Esc cancels. The confirmation that
follows still lists everything that will be signalled.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.core.actions import OWNER_ALL
from gputui.core.model import Owner
from gputui.ui import keymap
from gputui.ui.widgets.fmt import safe_text

OWNERS_LISTED = 9
"""Owners the dialog lists (1–9); with more, ``a`` takes them all, or ``gputui kill --owner`` one."""
OWNER_CHOICE_HINT = "1–9 pick one · a: every owner's jobs · Esc: cancel"


class ChooseOwnerScreen(ModalScreen["tuple[str, str] | None"]):
    """Dismisses with the owner picked ((kind, id) for ``plan_kill(owner=...)``), ("all", "") or None.

    Args:
        target: The host.
        owners: The owners of its GPU jobs, in the order listed.
    """

    BINDINGS = keymap.bindings(keymap.OWNER_CHOICE)

    def __init__(self, target: str, owners: Sequence[Owner]) -> None:
        super().__init__()
        self.target = target
        self.owners = tuple(owners)

    def compose(self) -> ComposeResult:
        with Vertical(id="owner-dialog") as dialog:
            dialog.border_subtitle = OWNER_CHOICE_HINT
            title = Text(f"GPU jobs of {len(self.owners)} owners on ", style="bold")
            title.append_text(safe_text(self.target, 40, style="bold"))
            title.append(": whose to kill?", style="bold")
            yield Static(title, id="owner-title")
            lines = Text()
            for number, owner in enumerate(self.owners[:OWNERS_LISTED], start=1):
                lines.append(f"  {number}  ", style="bold")
                lines.append_text(safe_text(owner.label, 80))
                lines.append("\n")
            more = len(self.owners) - OWNERS_LISTED
            if more > 0:
                lines.append(f"     and {more} more (gputui kill --owner KIND:ID)\n", style="dim")
            lines.append("  a  ", style="bold")
            lines.append(f"all {len(self.owners)} owners: every GPU job on the host", style="bold red")
            yield Static(lines, id="owner-list")
            yield Static(Text(OWNER_CHOICE_HINT, style="bold"), id="owner-hint")

    def action_pick(self, number: int) -> None:
        if 1 <= number <= min(len(self.owners), OWNERS_LISTED):
            owner = self.owners[number - 1]
            self.dismiss((owner.kind, (owner.id or owner.short).lower()))

    def action_all(self) -> None:
        self.dismiss((OWNER_ALL, ""))

    def action_cancel(self) -> None:
        self.dismiss(None)
