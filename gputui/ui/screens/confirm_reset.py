"""The confirmation of a GPU reset: the plan as ``gputui reset`` prints it, run only when it can go ahead.

Every line is the plan's one wording (``core.actions.reset_plan.format_plan``); the host's text in it is made
visible there and shown here as ``Text``, never as markup. A plan that is blocked, needs a reboot or
cannot tell has nothing to confirm: Enter does nothing and the hint says so.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.agent.protocol import RESET_GO
from gputui.core.actions import ResetPlan, format_plan
from gputui.ui import keymap

RUN_HINT = "Enter/y: run these steps · Esc/n: cancel"
CLOSE_HINT = "nothing can be run · Esc/n: close"


class ConfirmResetScreen(ModalScreen[bool]):
    """Lists the plan; Enter/y confirms (dismisses True) only when its verdict is "go", Esc/n cancels."""

    BINDINGS = keymap.bindings(keymap.CONFIRM)

    def __init__(self, plan: ResetPlan) -> None:
        super().__init__()
        self.plan = plan

    @property
    def runnable(self) -> bool:
        return self.plan.verdict == RESET_GO

    def compose(self) -> ComposeResult:
        lines = format_plan(self.plan)
        hint = RUN_HINT if self.runnable else CLOSE_HINT
        with Vertical(id="confirm-dialog") as dialog:
            dialog.border_subtitle = hint
            title = "Reset GPUs? " if self.runnable else "Reset: "
            yield Static(Text(title + lines[-1], style="bold"), id="confirm-title")
            with VerticalScroll(id="confirm-list"):
                yield Static(Text("\n".join(lines[:-1])), id="confirm-table")
            yield Static(Text(hint, style="bold"), id="confirm-hint")

    def action_confirm(self) -> None:
        if self.runnable:
            self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
