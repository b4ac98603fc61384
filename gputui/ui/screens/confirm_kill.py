"""The confirmation every destructive key opens: exactly what will be signalled, before anything is.

The GPU MiB column says what signalling each listed process frees: its own memory plus that of its zombie
children, which the driver releases once their parent is gone (the sglang launcher whose eight schedulers
are defunct frees all eight GPUs). A total line sums it per GPU: "frees ≈ 329 880 MiB on 8 GPUs".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.core.jobs import gpu_memory_by_pid
from gputui.core.model import Proc
from gputui.ui import keymap
from gputui.ui.session.context import TextFetcher
from gputui.ui.session.tasks import spawn
from gputui.ui.widgets.fmt import DASH, command_text, figure_text, pid_ranges, safe_text
from gputui.ui.widths import NARROW_MAX_CELLS

if TYPE_CHECKING:
    from gputui.core.actions import KillPlan, KillTarget
    from gputui.core.model import HostSnapshot

CONFIRM_HINT = "Enter/y: send · Esc/n: cancel"

COMMAND_CHARS = 400
"""A command is shown whole, wrapped, up to this many characters."""


def mib_text(mib: int) -> str:
    """``329880``: MiB as the process table writes them (``fmt.figure_text``)."""
    return figure_text(mib)


def freed_mib(plan: KillPlan, snapshot: HostSnapshot | None) -> dict[int, dict[int, int] | None]:
    """Pid of each listed process → {GPU index: MiB} its signal frees; None when nothing says.

    A process frees its own memory and whatever the driver still counts for its zombie children that the
    plan does not list (they go when it does). A defunct leader's memory is not its parent's to free: its
    threads hold it until they exit, so only signalling it frees it. Without a snapshot, the plan's own
    figures.
    """
    listed = {t.pid for t in plan.targets}
    held = gpu_memory_by_pid(snapshot) if snapshot is not None else {}
    zombie_children: dict[int, list[int]] = {}
    if snapshot is not None:
        for proc in snapshot.processes:
            true_zombie = proc.is_zombie and not proc.is_defunct_leader
            if true_zombie and proc.ppid is not None and proc.pid not in listed:
                zombie_children.setdefault(proc.ppid, []).append(proc.pid)
    freed: dict[int, dict[int, int] | None] = {}
    for target in plan.targets:
        own = held.get(target.pid)
        if own is None and target.gpu_mib is None and not zombie_children.get(target.pid):
            freed[target.pid] = None
            continue
        per_gpu = dict(own or {})
        if own is None and target.gpu_mib:
            per_gpu[-1] = target.gpu_mib  # held, GPU unknown
        for child in zombie_children.get(target.pid, ()):
            for gpu, mib in held.get(child, {}).items():
                per_gpu[gpu] = per_gpu.get(gpu, 0) + mib
        freed[target.pid] = per_gpu
    return freed


def total_text(freed: dict[int, dict[int, int] | None]) -> Text:
    """``frees ≈ 329 880 MiB on 8 GPUs`` (what the plan releases if everything listed goes)."""
    per_gpu: dict[int, int] = {}
    for held in freed.values():
        for gpu, mib in (held or {}).items():
            per_gpu[gpu] = per_gpu.get(gpu, 0) + mib
    total = sum(per_gpu.values())
    if not per_gpu or total == 0:
        unknown = any(held is None for held in freed.values())
        return Text(
            "frees: " + (f"{DASH} (the driver does not say)" if unknown else "no GPU memory"), style="bold"
        )
    gpus = len([gpu for gpu, mib in per_gpu.items() if mib and gpu >= 0])
    line = Text("frees ≈ ", style="bold")
    line.append(f"{mib_text(total)} MiB", style="bold yellow")
    if gpus:
        line.append(f" on {gpus} GPU{'s' if gpus != 1 else ''}", style="bold")
    return line


def note_lines(plan: KillPlan) -> list[str]:
    """The plan's notes, with the zombies of one parent on one line: "8 zombies (4240–4247) go when their
    parent 4200 is signalled" (from ``plan.zombies``; every other note as the plan says it)."""
    by_parent: dict[tuple[bool, int], list[int]] = {}
    for zombie in plan.zombies:
        by_parent.setdefault((zombie.asked, zombie.parent), []).append(zombie.pid)
    texts = {zombie.text: (zombie.asked, zombie.parent) for zombie in plan.zombies}
    lines: list[str] = []
    done: set[tuple[bool, int]] = set()
    for note in plan.notes:
        group = texts.get(note)
        if group is None or len(by_parent[group]) < 2:
            lines.append(note)
            continue
        if group in done:
            continue
        done.add(group)
        asked, parent = group
        zombies = by_parent[group]
        if asked:
            lines.append(
                f"{len(zombies)} zombies ({pid_ranges(zombies)}) cannot be signalled: their parent "
                f"{parent} is, instead"
            )
        else:
            lines.append(
                f"{len(zombies)} zombies ({pid_ranges(zombies)}) go when their parent {parent} is signalled"
            )
    return lines


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
    elif plan.wait_s is not None:
        extras.append(f"then after {plan.wait_s:g} s: gone or still alive")
    if extras:
        title.append(f" ({', '.join(extras)})", style="bold")
    title.append("?", style="bold")
    return title


def plan_table(
    plan: KillPlan,
    snapshot: HostSnapshot | None = None,
    texts: Mapping[int, Sequence[str]] | None = None,
    narrow: bool = False,
) -> Table:
    """pid, user, GPU MiB it frees and command of every process the plan signals; machine text literal.

    Commands are whole (wrapped at the spaces between arguments), so the arguments that tell processes apart
    are there. ``texts``: pid → the whole command line, for those the collector cut on the wire. ``narrow``
    (a side pane): each command on the lines under its pid, user and MiB, with the whole width to wrap in, so
    that no argument that fits a line is broken.
    """
    freed = freed_mib(plan, snapshot)
    texts = texts or {}
    if narrow:
        return _narrow_plan_table(plan, snapshot, texts, freed)
    table = Table(box=None, padding=(0, 1), show_edge=False, expand=True)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("user", no_wrap=True, max_width=12)
    table.add_column("GPU MiB", justify="right", no_wrap=True)
    table.add_column("command", overflow="fold", ratio=1)
    owners = plan.owners
    # Grouped by owner where that says something: several owners, or one that is more than a user.
    grouped = len(owners) > 1 or any(o is not None and o.kind != "user" for o in owners)
    for owner in owners if grouped else (None,):
        if grouped:
            label = Text("owner ", style="bold")
            label.append_text(safe_text(owner.label if owner is not None else None, 80, style="bold magenta"))
            table.add_row(Text(""), Text(""), Text(""), label)
        for target in plan.targets:
            if grouped and target.owner != owner:
                continue
            proc = None if snapshot is None else snapshot.process(target.pid)
            whole = texts.get(target.pid)
            cut = whole is None and proc is not None and proc.cmdline_truncated
            table.add_row(
                Text(str(target.pid)),
                safe_text(target.user, 12),
                _freed_cell(freed.get(target.pid)),
                _command_cell(target, target.cmdline if whole is None else whole, cut),
            )
    return table


def _narrow_plan_table(
    plan: KillPlan,
    snapshot: HostSnapshot | None,
    texts: Mapping[int, Sequence[str]],
    freed: dict[int, dict[int, int] | None],
) -> Table:
    table = Table(box=None, padding=(0, 0), show_edge=False, expand=True, show_header=False)
    table.add_column("process", overflow="fold", ratio=1)
    for target in plan.targets:
        proc = None if snapshot is None else snapshot.process(target.pid)
        whole = texts.get(target.pid)
        cut = whole is None and proc is not None and proc.cmdline_truncated
        line = Text(f"{target.pid:>7} ", style="bold")
        line.append_text(safe_text(target.user, 12))
        line.append(" · ")
        line.append_text(_freed_cell(freed.get(target.pid)))
        line.append(" MiB\n  ", style="dim")
        line.append_text(_command_cell(target, target.cmdline if whole is None else whole, cut))
        table.add_row(line)
    return table


def _command_cell(target: KillTarget, argv: Sequence[str], cut: bool) -> Text:
    cell = Text(command_text(tuple(argv), target.name, COMMAND_CHARS, cut))
    if target.graphics_only:
        cell.append(" [graphics]", style="cyan")
    return cell


def _freed_cell(per_gpu: dict[int, int] | None) -> Text:
    if per_gpu is None:
        return Text(DASH, style="dim")
    total = sum(per_gpu.values())
    return Text(mib_text(total) if total else "0", style="yellow" if total else "dim")


def more_text(above: int, below: int) -> str:
    """``↓ 6 more rows below (↑/↓ scroll)``: what of the list a small screen leaves out."""
    parts = []
    if above:
        parts.append(f"↑ {above} more row{'s' if above != 1 else ''} above")
    if below:
        parts.append(f"↓ {below} more row{'s' if below != 1 else ''} below")
    return " · ".join(parts) + " (↑/↓ scroll)" if parts else ""


class ConfirmKillScreen(ModalScreen[bool]):
    """Lists everything a kill will signal. Enter/y confirms (dismisses True), Esc/n cancels (False).

    Args:
        plan: The plan; the caller sends exactly this one when confirmed.
        snapshot: The snapshot the plan was made from: what each process frees (zombie children included).
        fetch_text: Reads one process's whole command line (blocking, called on a thread of its own) for
            the processes whose command line the collector cut; None: shown as cut.
    """

    BINDINGS = keymap.bindings(keymap.CONFIRM)

    @dataclass
    class TextFetched(Message):
        """A whole command line came back (``argv``), or could not be read (``error``)."""

        pid: int
        argv: tuple[str, ...] | None
        error: str = ""

    def __init__(
        self, plan: KillPlan, snapshot: HostSnapshot | None = None, fetch_text: TextFetcher | None = None
    ) -> None:
        super().__init__()
        self.plan = plan
        self.snapshot = snapshot
        self._fetch_text = fetch_text
        self.texts: dict[int, tuple[str, ...]] = {}
        """pid → the whole command line, read after the collector had cut it."""
        self._narrow = False

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog") as dialog:
            # On the border too, so the keys stay visible when a long list is cut short on a small pane.
            dialog.border_subtitle = CONFIRM_HINT
            yield Static(plan_title(self.plan), id="confirm-title")
            with VerticalScroll(id="confirm-list"):
                yield Static(plan_table(self.plan, self.snapshot), id="confirm-table")
            yield Static("", id="confirm-more")
            yield Static(total_text(freed_mib(self.plan, self.snapshot)), id="confirm-total")
            if self.plan.notes:
                notes = Text("\n").join(
                    safe_text("• " + note, 200, style="yellow") for note in note_lines(self.plan)
                )
                yield Static(notes, id="confirm-notes")
            yield Static(Text(CONFIRM_HINT, style="bold"), id="confirm-hint")

    def on_resize(self, event: events.Resize) -> None:
        narrow = event.size.width <= NARROW_MAX_CELLS
        if narrow != self._narrow:
            self._narrow = narrow
            self._show_table()
        self.call_after_refresh(self._show_more)

    def _show_table(self) -> None:
        self.set_class(self._narrow, "-narrow")
        table = plan_table(self.plan, self.snapshot, self.texts, narrow=self._narrow)
        self.query_one("#confirm-table", Static).update(table)
        self.call_after_refresh(self._show_more)

    def _show_more(self) -> None:
        """Say what of the list is out of view (``more_text``): a job's root and launcher may be there."""
        listed = self.query_one("#confirm-list", VerticalScroll)
        above = round(listed.scroll_y)
        below = max(0, listed.virtual_size.height - listed.size.height - above)
        more = self.query_one("#confirm-more", Static)
        more.update(Text(more_text(above, below), style="bold yellow"))
        more.display = bool(above or below)

    def on_mount(self) -> None:
        if self.app.size.width <= NARROW_MAX_CELLS:
            self._narrow = True
            self._show_table()
        listed = self.query_one("#confirm-list", VerticalScroll)
        self.watch(listed, "scroll_y", lambda _y: self._show_more(), init=False)
        self.call_after_refresh(self._show_more)
        fetch = self._fetch_text
        if fetch is None or self.snapshot is None:
            return
        for target in self.plan.targets:
            proc = self.snapshot.process(target.pid)
            if proc is not None and proc.cmdline_truncated:
                spawn("process-text", partial(self._fetch, fetch, proc))

    def _fetch(self, fetch: TextFetcher, proc: Proc) -> None:
        try:
            whole = fetch(proc)
        except Exception as exc:  # noqa: BLE001 - the process went, the link broke: the cut text stays
            self.post_message(self.TextFetched(proc.pid, None, str(exc) or type(exc).__name__))
            return
        self.post_message(self.TextFetched(proc.pid, tuple(whole.cmdline)))

    def on_confirm_kill_screen_text_fetched(self, message: TextFetched) -> None:
        if message.argv is None:
            return
        self.texts[message.pid] = message.argv
        self._show_table()

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
