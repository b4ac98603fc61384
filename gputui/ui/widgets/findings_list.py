"""Findings: what is stuck, dead or unaccounted for; each row jumps to the process it names.

Findings of one kind that share the process their action applies to are one row: eight zombie schedulers
under one launcher read "8 zombies under pid 4200 for 20 s: python3 -m sglang.launch_server …", and choosing
the row jumps to that launcher. The analysis stays per process; this is only how the list reads. Every row
is one badge-and-detail line plus one action line, cut with "…" at the panel's width; the highlighted row's
whole text is in the tooltip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from gputui.core.model import Finding, HostSnapshot
from gputui.core.text import age_since
from gputui.core.verdict import place_text
from gputui.ui import keymap
from gputui.ui.widgets.border import set_border_title
from gputui.ui.widgets.fmt import command_text, pid_ranges, safe_text, screen_rows

_KIND_STYLES = {
    "zombie": "bold white on red",
    "defunct_leader": "bold white on dark_red",
    "uninterruptible": "bold black on yellow",
    "ghost_memory": "bold white on magenta",
    "orphan": "bold black on cyan",
    "invisible_pid": "bold white on blue",
    "survivor": "bold white on dark_orange3",
    "stuck_thread": "bold black on orange1",
    "profiled": "bold black on bright_yellow",
    "profiler_unknown": "bold black on grey70",
    "spinning": "bold white on dark_violet",
}
AGE_TICK_S = 1.0
"""How often the listed ages are drawn again (the display counts them in whole seconds)."""
PARENT_COMMAND_CHARS = 40
"""A grouped row names the common process by this much of its command line."""


@dataclass(frozen=True)
class FindingRow:
    """One row of the list: a single finding, or several of one kind whose action names the same pid.

    Attributes:
        findings: The findings of the row, in analysis order (at least one).
    """

    findings: tuple[Finding, ...]

    @property
    def grouped(self) -> bool:
        return len(self.findings) > 1

    @property
    def jump_pid(self) -> int | None:
        """The process the row jumps to: the shared action's pid for a group, else the finding's own."""
        first = self.findings[0]
        if self.grouped:
            return first.action_pid
        return first.pid if first.pid is not None else first.action_pid


SHARED_ROW_KINDS = frozenset({"defunct_leader"})
"""Kinds whose findings of one host share a row whatever their action's pid: the defunct leaders of a wedged
server are one story (threads stuck in the driver), each signalled on its own."""


def group_findings(findings: Sequence[Finding]) -> list[FindingRow]:
    """Rows for these findings: same kind + same ``action_pid`` share a row, placed where the first was (and
    every finding of a kind in ``SHARED_ROW_KINDS`` one row)."""
    groups: dict[tuple[str, int], list[Finding]] = {}
    order: list[tuple[str, int] | Finding] = []
    for finding in findings:
        if finding.action_pid is None:
            order.append(finding)
            continue
        key = (finding.kind, -1 if finding.kind in SHARED_ROW_KINDS else finding.action_pid)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(finding)
    return [
        FindingRow((entry,)) if isinstance(entry, Finding) else FindingRow(tuple(groups[entry]))
        for entry in order
    ]


def _badge(kind: str) -> Text:
    """A line that starts with the kind as a coloured badge (the colour spans the badge only)."""
    return Text().append(f" {kind} ", style=_KIND_STYLES.get(kind, "reverse"))


def finding_text(
    finding: Finding, max_chars: int = 300, wrap: bool = False, now_s: float | None = None
) -> Text:
    """A finding as two lines: a kind badge, the detail and its age at ``now_s`` (``display.age_since``),
    then the suggested action (shown literally).

    ``wrap``: lines longer than the list is wide wrap (nothing is cut); else they are cut with "…".
    """
    line = _badge(finding.kind)
    line.append(" ")
    line.append_text(safe_text(finding.detail, max_chars))
    age = "" if now_s is None else age_since(finding.since, now_s)
    if age:
        line.append(f" · {age}", style="dim")
    if finding.action:
        line.append("\n  → ", style="dim")
        line.append_text(safe_text(finding.action, max_chars // 2, style="italic"))
    return _fitted(line, wrap)


def _fitted(line: Text, wrap: bool) -> Text:
    line.no_wrap = not wrap
    line.overflow = "fold" if wrap else "ellipsis"
    return line


def _oldest_since(row: FindingRow) -> float | None:
    """When the longest-standing finding of the row began (epoch seconds), when known."""
    starts = [f.since for f in row.findings if f.since is not None]
    return min(starts) if starts else None


def _age(row: FindingRow, now_s: float | None) -> str:
    """ " for 20 s": the row's age at ``now_s`` (``display.age_since``), or ""."""
    age = "" if now_s is None else age_since(_oldest_since(row), now_s)
    return f" {age}" if age else ""


def group_text(
    row: FindingRow,
    snapshot: HostSnapshot | None = None,
    max_chars: int = 300,
    wrap: bool = False,
    now_s: float | None = None,
) -> Text:
    """A row as two lines; a group reads "8 zombies under pid 4200 for 20 s: python3 -m sglang…" then
    "→ signal or kill 4200, not the zombies". Ages are at ``now_s`` (None: the snapshot's time)."""
    if now_s is None and snapshot is not None:
        now_s = snapshot.time
    if not row.grouped:
        return finding_text(row.findings[0], max_chars, wrap, now_s)
    first = row.findings[0]
    count = len(row.findings)
    pid = first.action_pid
    line = _badge(first.kind)
    line.append(" ")
    if first.kind == "zombie":
        line.append(f"{count} zombies under pid {pid}")
        # The age before the parent's command line: on a narrow panel the command is what gets cut.
        line.append(_age(row, now_s))
        parent = None if snapshot is None or pid is None else snapshot.process(pid)
        if parent is not None:
            line.append(": ")
            line.append(command_text(parent.cmdline, parent.name, PARENT_COMMAND_CHARS), style="dim")
        line.append("\n  → ", style="dim")
        line.append(f"signal or kill {pid}, not the zombies", style="italic")
    elif first.kind == "defunct_leader":
        line.append_text(_defunct_leaders_line(row, snapshot, now_s))
        if first.action:
            line.append("\n  → ", style="dim")
            line.append("kill them, not their parent; ", style="italic")
            line.append_text(safe_text(first.action.split(";", 1)[0], max_chars // 2, style="italic"))
    else:
        line.append(f"{count} × ")
        line.append_text(safe_text(first.detail, max_chars))
        if first.action:
            line.append("\n  → ", style="dim")
            line.append_text(safe_text(first.action, max_chars // 2, style="italic"))
    return _fitted(line, wrap)


def _defunct_leaders_line(row: FindingRow, snapshot: HostSnapshot | None, now_s: float | None) -> Text:
    """ "7 defunct leaders (4241–4247) for 20 s, 14 threads alive (14 in D), holding 288644 MiB"."""
    pids = [f.pid for f in row.findings if f.pid is not None]
    line = Text(f"{len(row.findings)} defunct leaders ({pid_ranges(pids)})")
    line.append(_age(row, now_s))
    listed = [] if snapshot is None else [snapshot.process(pid) for pid in pids]
    procs = [proc for proc in listed if proc is not None]
    states: dict[str, int] = {}
    for proc in procs:
        for state, count in (proc.live_threads.states if proc.live_threads else {}).items():
            states[state] = states.get(state, 0) + count
    if states:
        line.append(f", {sum(states.values())} threads alive (")
        line.append_text(safe_text(", ".join(f"{n} in {s}" for s, n in sorted(states.items())), 60))
        line.append(")")
    held = sum(p.gpu_total_mib for p in procs)
    if held:
        line.append(f", holding {held} MiB")
    if states.get("D") and held:
        line.append(": threads stuck in the driver, memory released when they exit")
    places: dict[str, int] = {}
    for proc in procs:
        for wait in proc.waits:
            places[place_text(wait)] = places.get(place_text(wait), 0) + 1
    if places:
        place, count = max(places.items(), key=lambda item: item[1])
        line.append_text(safe_text(f"; {count} thread{'' if count == 1 else 's'} {place}", 120))
    return line


def row_tooltip(row: FindingRow) -> Text:
    """Every detail of the row and its action, wrapped: what the cut lines leave out."""
    lines = [safe_text(f.detail, 400) for f in row.findings[:12]]
    if len(row.findings) > 12:
        lines.append(Text(f"… and {len(row.findings) - 12} more", style="dim"))
    if row.findings[0].action:
        lines.append(safe_text("→ " + row.findings[0].action, 300, style="italic"))
    return Text("\n").join(lines)


class FindingsList(OptionList):
    """The findings of the shown host. Enter on one posts ``JumpToProcess``, Esc posts ``Left``.

    Rows wrap, so every finding is whole; ``compact`` (a narrow pane) cuts each line at the width instead.
    """

    DEFAULT_CSS = """
    FindingsList.-compact {
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    BINDINGS = keymap.bindings(keymap.FINDINGS)

    compact: reactive[bool] = reactive(False)
    """One screen line per line of a finding, cut with "…" (the whole row is in the tooltip)."""

    class Left(Message):
        """The user left the list (Esc)."""

    class LinesChanged(Message):
        """The rows need another number of screen lines (``lines``)."""

    class JumpToProcess(Message):
        """The user chose a finding that names a process."""

        def __init__(self, pid: int) -> None:
            super().__init__()
            self.pid = pid
            """The process the finding names (or the one its action applies to)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes)
        self._findings: tuple[Finding, ...] = ()
        self._snapshot: HostSnapshot | None = None
        self._rows: tuple[FindingRow, ...] = ()
        self.lines = 1
        """Screen lines the rows take at the list's width."""
        self._shown_key: tuple[object, ...] | None = None
        self._ages_timer: Timer | None = None
        self._shown_at: float | None = None
        """The display clock when the shown snapshot was first shown."""

    def on_mount(self) -> None:
        self._ages_timer = self.set_interval(AGE_TICK_S, self._tick_ages, pause=True)

    def _clock(self) -> float | None:
        """The app's display clock (epoch seconds; frozen in tests), if it has one."""
        clock = getattr(self.app, "clock", None)
        return float(clock()) if callable(clock) else None

    def _now(self) -> float | None:
        """Now on the host's clock, the one ``Finding.since`` is read on: the shown snapshot's time plus what
        the display clock counted since it was shown (a remote clock's offset cancels out); the display
        clock without a snapshot."""
        local = self._clock()
        snapshot = self._snapshot
        if snapshot is None or snapshot.time is None:
            return local
        if local is None or self._shown_at is None:
            return snapshot.time
        return snapshot.time + max(0.0, local - self._shown_at)

    def _tick_ages(self) -> None:
        """Once a second while a row shows an age: the rows again, at the clock's time; only a prompt whose
        text changed (the age cell) is replaced, the findings are not recomputed."""
        if self._findings:
            self.show(self._findings, self._snapshot)

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The findings now listed."""
        return self._findings

    @property
    def rows(self) -> tuple[FindingRow, ...]:
        """The rows now listed (findings grouped by kind and action pid)."""
        return self._rows

    def show(
        self, findings: Sequence[Finding], snapshot: HostSnapshot | None = None, no_data: str | None = None
    ) -> None:
        """List these findings; nothing is redrawn when the rows would read the same.

        Args:
            findings: The host's findings.
            snapshot: Where grouped rows look up the common process and the ages (None: without them).
            no_data: The host has no (fresh) data: this line ("no data since …") and no count, never
                "nothing stuck" (``findings`` is then ignored).
        """
        if no_data is not None:
            self._show_no_data(no_data)
            return
        findings = tuple(findings)
        if snapshot is not self._snapshot:
            self._shown_at = self._clock()
        self._snapshot = snapshot
        rows = tuple(group_findings(findings))
        now_s = self._now()
        texts = tuple(group_text(row, snapshot, wrap=not self.compact, now_s=now_s) for row in rows)
        if self._ages_timer is not None:
            aging = any(f.since is not None for f in findings)
            if aging:
                self._ages_timer.resume()
            else:
                self._ages_timer.pause()
        set_border_title(self, f"Findings ({len(findings)})")
        self._count_lines(texts)
        key = (self.compact, *(t.plain for t in texts))
        if key == self._shown_key:
            self._findings = findings
            self._rows = rows
            return
        shown, self._shown_key = self._shown_key, key
        if rows and shown is not None and len(shown) == len(key) and shown[0] == key[0] and self._rows:
            # The same rows, some text changed (an age ticked): those prompts are replaced in place. Clearing
            # and adding options changes the virtual size twice, and with it the whole screen's layout.
            self._findings = findings
            self._rows = rows
            for index, text in enumerate(texts):
                if shown[index + 1] != key[index + 1]:
                    self.replace_option_prompt_at_index(index, text)
            if self.highlighted is not None and self.tooltip is not None:
                self.tooltip = row_tooltip(rows[self.highlighted])
            return
        highlighted = self.highlighted
        self._findings = findings
        self._rows = rows
        self.clear_options()
        if rows:
            self.add_options(Option(text, id=str(i)) for i, text in enumerate(texts))
            if highlighted is not None:
                self.highlighted = min(highlighted, len(rows) - 1)
        else:
            self.tooltip = None
            self.add_option(
                Option(Text("nothing stuck, dead or unaccounted for", style="dim"), disabled=True)
            )

    def _show_no_data(self, text: str) -> None:
        set_border_title(self, "Findings (–)")
        key = ("no data", text)
        self._findings, self._rows, self._snapshot = (), (), None
        if self._ages_timer is not None:
            self._ages_timer.pause()
        if key == self._shown_key:
            return
        self._shown_key = key
        self.tooltip = None
        self.clear_options()
        self.add_option(Option(safe_text(text, 200, style="dim"), disabled=True))
        self._count_lines([Text(text)])

    def _count_lines(self, texts: Sequence[Text]) -> None:
        width = self.scrollable_content_region.width or 56
        lines = sum(screen_rows(text, width, wrap=not self.compact) for text in texts) or 1
        if lines != self.lines:
            self.lines = lines
            self.post_message(self.LinesChanged())

    def on_resize(self) -> None:
        if self._findings:
            now_s = self._now()
            texts = [
                group_text(row, self._snapshot, wrap=not self.compact, now_s=now_s) for row in self._rows
            ]
            self._count_lines(texts)

    def watch_compact(self, compact: bool) -> None:
        self.set_class(compact, "-compact")
        if self.is_mounted:
            self.show(self._findings, self._snapshot)

    def action_leave(self) -> None:
        self.post_message(self.Left())

    def on_focus(self) -> None:
        # Enter right after focusing must act on a row: start on the first one.
        if self.highlighted is None and self._rows:
            self.highlighted = 0

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        if event.option_id is None or not self._rows:
            self.tooltip = None
            return
        self.tooltip = row_tooltip(self._rows[int(event.option_id)])

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option_id is None:
            return
        pid = self._rows[int(event.option_id)].jump_pid
        if pid is not None:
            self.post_message(self.JumpToProcess(pid))
