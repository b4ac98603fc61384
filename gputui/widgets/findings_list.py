"""Findings: what is stuck, dead or unaccounted for; each one jumps to the process it names."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from gputui.model import Finding
from gputui.widgets.fmt import safe_text

_KIND_STYLES = {
    "zombie": "bold white on red",
    "uninterruptible": "bold black on yellow",
    "ghost_memory": "bold white on magenta",
    "orphan": "bold black on cyan",
    "invisible_pid": "bold white on blue",
}


def finding_text(finding: Finding, max_chars: int = 300) -> Text:
    """A finding as two lines: a kind badge and the detail, then the suggested action (shown literally)."""
    line = Text(f" {finding.kind} ", style=_KIND_STYLES.get(finding.kind, "reverse"))
    line.append(" ")
    line.append_text(safe_text(finding.detail, max_chars))
    if finding.action:
        line.append("\n  → ", style="dim")
        line.append_text(safe_text(finding.action, max_chars // 2, style="italic"))
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


class FindingsList(OptionList):
    """The findings of the shown host. Enter on one posts ``JumpToProcess``."""

    class JumpToProcess(Message):
        """The user chose a finding that names a process."""

        def __init__(self, pid: int) -> None:
            super().__init__()
            self.pid = pid
            """The process the finding names (or the one its action applies to)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes)
        self._findings: tuple[Finding, ...] = ()
        self._shown_once = False

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The findings now listed."""
        return self._findings

    def show(self, findings: Sequence[Finding]) -> None:
        """List these findings; nothing is redrawn when they did not change."""
        findings = tuple(findings)
        self.border_title = f"Findings ({len(findings)})"
        if findings == self._findings and self._shown_once:
            return
        self._shown_once = True
        highlighted = self.highlighted
        self._findings = findings
        self.clear_options()
        if findings:
            self.add_options(Option(finding_text(f), id=str(i)) for i, f in enumerate(findings))
            if highlighted is not None:
                self.highlighted = min(highlighted, len(findings) - 1)
        else:
            self.add_option(
                Option(Text("nothing stuck, dead or unaccounted for", style="dim"), disabled=True)
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option_id is None:
            return
        finding = self._findings[int(event.option_id)]
        pid = finding.pid if finding.pid is not None else finding.action_pid
        if pid is not None:
            self.post_message(self.JumpToProcess(pid))
