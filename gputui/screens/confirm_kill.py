"""The confirmation every destructive key opens: exactly what will be signalled, before anything is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.widgets.fmt import DASH, command_text, safe_text

if TYPE_CHECKING:
    from gputui.actions import KillPlan

COMMAND_CHARS = 70


def plan_title(plan: KillPlan) -> Text:
    """``Send TERM to 10 processes on gpu-node-07 (tree, then KILL after 5 s)?``"""
    count = len(plan.targets)
    title = Text(f"Send {plan.signal} to {count} process{'es' if count != 1 else ''} on ", style="bold")
    title.append_text(safe_text(plan.target, 40, style="bold"))
    extras = []
    if plan.tree:
        extras.append("whole trees, children first")
    if plan.escalate_s is not None and plan.signal != "KILL":
        extras.append(f"then KILL after {plan.escalate_s:g} s")
    if extras:
        title.append(f" ({', '.join(extras)})", style="bold")
    title.append("?", style="bold")
    return title


def plan_table(plan: KillPlan) -> Table:
    """pid, user, GPU MiB and command of every process the plan signals; machine text kept literal."""
    table = Table(box=None, padding=(0, 1), show_edge=False, expand=True)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("user", no_wrap=True, max_width=12)
    table.add_column("GPU MiB", justify="right", no_wrap=True)
    table.add_column("command", no_wrap=True, overflow="ellipsis", ratio=1)
    for target in plan.targets:
        table.add_row(
            Text(str(target.pid)),
            safe_text(target.user, 12),
            Text(DASH if target.gpu_mib is None else str(target.gpu_mib), style="yellow"),
            Text(command_text(tuple(target.cmdline), target.name, COMMAND_CHARS)),
        )
    return table


class ConfirmKillScreen(ModalScreen[bool]):
    """Lists everything a kill will signal. Enter/y confirms (dismisses True), Esc/n cancels (False)."""

    BINDINGS = [
        Binding("enter,y", "confirm", "Confirm"),
        Binding("escape,n", "cancel", "Cancel"),
    ]

    def __init__(self, plan: KillPlan) -> None:
        super().__init__()
        self.plan = plan
        """The plan shown; the caller sends exactly this one when confirmed."""

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog") as dialog:
            # On the border too, so the keys stay visible when a long list is cut short on a small pane.
            dialog.border_subtitle = "Enter/y: send · Esc/n: cancel"
            yield Static(plan_title(self.plan), id="confirm-title")
            yield Static(plan_table(self.plan), id="confirm-table")
            if self.plan.notes:
                notes = Text("\n").join(
                    safe_text("• " + note, 200, style="yellow") for note in self.plan.notes
                )
                yield Static(notes, id="confirm-notes")
            yield Static(Text("Enter/y: send    Esc/n: cancel", style="bold"), id="confirm-hint")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
