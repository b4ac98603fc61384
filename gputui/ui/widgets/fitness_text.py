"""A GPU's own fitness for the GPU view: the action it needs, its figures and its Xid history."""

from __future__ import annotations

import time

from rich.text import Text

from gputui.core.model import Gpu, HostSnapshot
from gputui.core.verdict import (
    ACTION_WORDS,
    XID_HISTORY_UNAVAILABLE,
    assessed,
    driver_wedged,
    fitness_figures,
    unreachable_action,
    xid_text,
)
from gputui.ui.widgets.fmt import safe_text

MAX_XIDS_SHOWN = 12


def fitness_text(gpu: Gpu, snapshot: HostSnapshot) -> Text | None:
    """The fitness lines of one GPU of ``snapshot``; None when its collector read no fitness (the simulator,
    a fleet GPU without the series) and the driver can reach it."""
    fitness = gpu.fitness
    kernel_log = snapshot.kernel_log
    unreachable = unreachable_action(gpu, driver_wedged(snapshot))
    if fitness is None and kernel_log is None and unreachable is None:
        return None
    text = Text("fitness     ", style="bold")
    judged = assessed(gpu)
    if unreachable is not None:
        text.append(ACTION_WORDS[unreachable[0]], style="bold red")
        text.append(" (")
        text.append_text(safe_text(unreachable[1], 300))
        text.append(")")
    elif judged.blocking:
        text.append(ACTION_WORDS[judged.action], style="bold red")
        text.append(" (")
        text.append_text(safe_text("; ".join(judged.causes), 300))
        text.append(")")
    elif fitness is None:
        text.append("not read", style="dim")
    else:
        text.append("fit for the next launch", style="green")
    for note in judged.notes:
        text.append("\n            ")
        text.append_text(safe_text(note, 200, style="yellow"))
    if fitness is not None:
        text.append("\n            ")
        for number, (label, value) in enumerate(fitness_figures(fitness)):
            if number:
                text.append(" · ", style="dim")
            text.append(f"{label} ", style="dim")
            text.append(value)
    text.append("\nXid history ", style="bold")
    if kernel_log is not None and kernel_log.error is not None:
        text.append_text(safe_text(f"{XID_HISTORY_UNAVAILABLE}: {kernel_log.error}", 300, style="yellow"))
    xids = () if fitness is None else fitness.xids
    if not xids:
        if kernel_log is None or kernel_log.error is None:
            text.append("none this boot", style="dim")
        return text
    for event in xids[-MAX_XIDS_SHOWN:]:
        when = "--:--:--" if event.time is None else time.strftime("%H:%M:%S", time.localtime(event.time))
        style = "dim" if event.cleared else ""
        text.append(f"\n  {when}  ", style="dim")
        text.append_text(safe_text(xid_text(event), 80, style=style))
        text.append(f"  ({event.source})", style="dim")
        if event.detail:
            text.append("  ")
            text.append_text(safe_text(event.detail, 120, style="dim"))
        if event.cleared:
            text.append(f"  — no longer counts: {event.cleared}", style="dim")
    return text
