"""The clean-slate line: always visible, it says whether every GPU is back at its idle baseline."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from gputui.core.model import CANNOT_TELL, NOT_READY, Verdict
from gputui.core.text import clock_time
from gputui.core.verdict import CleanCheck, fact_label, fact_rows, headline
from gputui.core.verdict.facts import receipt_times as receipt_event_times
from gputui.ui.widgets.fmt import curve, duration, figure_text, safe_text

DRAIN_CURVE_CELLS = 24
"""The receipt's drain curve is at most this many cells wide."""


def receipt_times(check: CleanCheck) -> str:
    """``workers gone 1.3 s after the signal · memory back 0.2 s later · port 30000 free 0.1 s later`` after a
    kill (the events' own times, ``facts.receipt_times``); ``4.8 s since c`` without one."""
    said = receipt_event_times(
        check.signal_at,
        check.workers_gone_at,
        check.memory_back_at,
        tuple(p.port for p in check.ports),
        check.ports_free_at,
    )
    if said:
        return said
    end_s = check.finished_s if check.finished_s is not None else check.started_s
    return f"{duration(max(0.0, end_s - check.key_s))} since {check.trigger}"


def ports_free_text(check: CleanCheck) -> str:
    """``port 30000 free 1.2 s after the kill``: when the killed jobs' ports were first seen free (counted
    from the key when the check started after the kill); "" when none were watched or it is not known."""
    if not check.ports or check.ports_free_s is None:
        return ""
    plural = "s" if len(check.ports) > 1 else ""
    names = ", ".join(str(p.port) for p in check.ports)
    since, what = (check.started_s, check.trigger) if check.kill_s is None else (check.kill_s, "the kill")
    return f"port{plural} {names} free {duration(max(0.0, check.ports_free_s - since))} after {what}"


def drain_text(check: CleanCheck) -> Text:
    """`` · drain ██▇▅▂▁ 329880 MiB → baseline``: how memory came back, from the kill (or the key) to the
    receipt; empty when nothing was above baseline."""
    points = check.drain_since_kill()
    values = [p.above_mib for p in points]
    if not values or max(values) == 0:
        return Text("")
    text = Text(" · drain ", style="green")
    text.append(curve(values, DRAIN_CURVE_CELLS), style="bold green")
    text.append(f" {figure_text(max(values))} MiB → baseline", style="green")
    return text


def other_facts(verdict: Verdict) -> Text:
    """`` · workers: … · residue: none left``: the two facts a CLEAN line does not already say (its start
    is the GPUs'); empty for a verdict without facts."""
    text = Text("")
    if verdict.facts is None:
        return text
    for label, _holds, fact in fact_rows(verdict.facts)[:2]:
        text.append(f" · {label}: ", style="green")
        text.append_text(safe_text(fact, 120, style="green"))
    if verdict.facts.proof:
        text.append(" · probe: ", style="green")
        text.append_text(safe_text(verdict.facts.proof, 200, style="green"))
    return text


def clean_slate_text(
    verdict: Verdict | None,
    check: CleanCheck | None,
    now_s: float,
    fitness_due: bool = False,
    probing: bool = False,
) -> Text:
    """The line for a verdict, with the progress or receipt of a running or finished check; ``fitness_due``:
    the verdict is CLEAN on GPU fitness read before its sample, and a fresh read is awaited
    (``HostState.fitness_due_s``): never CLEAN until it comes."""
    if verdict is None:
        return Text(headline(None), style="dim")
    total = len(verdict.gpus)
    at_baseline = verdict.gpus_at_baseline
    if probing:
        line = Text(f"probing… {total} GPUs: does each take work?", style="bold yellow")
        line.append(" · a context and a buffer written and read back on each", style="yellow")
        return line
    if verdict.clean and fitness_due:
        line = Text(f"checking… {at_baseline}/{total} GPUs at baseline", style="bold yellow")
        line.append(" · reading the GPUs' fitness", style="yellow")
        return line
    if check is not None and check.finished_s is not None and check.clean and verdict.clean:
        line = Text(f"CLEAN ✓ {at_baseline}/{total} GPUs at baseline", style="bold green")
        # The time is the clean memory sample's; a fresh full sample (processes listed then) confirmed it.
        line.append(
            f" · at {clock_time(check.finished_s)} (memory sample), verified by a full sample"
            f" · {receipt_times(check)}",
            style="green",
        )
        line.append_text(drain_text(check))
        if check.teardown_s is not None:
            line.append(f" · driver teardown {duration(check.teardown_s)}", style="green")
        ports = ports_free_text(check) if check.signal_at is None else ""  # else said with the times
        if ports:
            line.append(f" · {ports}", style="green")
        line.append_text(other_facts(verdict))
        return line
    if verdict.clean and check is not None and check.finished_s is None:
        # A clean memory sample is not the receipt: the kill has to be over and a full sample has to agree.
        line = Text(f"checking… {at_baseline}/{total} GPUs at baseline", style="bold yellow")
        waited = duration(max(0.0, now_s - check.started_s))
        then = "waiting for the kill to finish" if check.kill_pending else "confirming with a full sample"
        line.append(f" · {waited} · ", style="yellow")
        if check.ports_note and not check.kill_pending:
            line.append_text(safe_text(check.ports_note, 120))  # the listener's name came from the host
        else:
            line.append(then, style="yellow")
        return line
    if verdict.clean:
        line = Text(f"{headline(verdict)} ✓", style="bold green")
        line.append_text(other_facts(verdict))
        return line
    line = Text()
    if check is not None and check.finished_s is None:
        if verdict.not_ready:  # a GPU that needs an action is said as such while the memory still drains
            line.append(f"{NOT_READY} · ", style="bold red")
        line.append(f"checking… {at_baseline}/{total} GPUs at baseline", style="bold yellow")
        line.append(f" · {duration(max(0.0, now_s - check.started_s))} · ", style="yellow")
        tearing = check.tearing_down_for_s(now_s)
        if tearing is not None:
            # Nothing left to kill: the memory is on its way back, and for how long says when to worry.
            line.append(f"no holder left, the driver tearing down for {duration(tearing)} · ", style="yellow")
        if check.kill_pending:
            line.append("waiting for the kill to finish · ", style="yellow")
    elif check is not None and check.clean is False and check.finished_s is not None:
        word = NOT_READY if verdict.not_ready else "NOT CLEAN"
        line.append(f"{word} after {duration(check.finished_s - check.started_s)}: ", style="bold red")
    elif verdict.level == CANNOT_TELL:
        # The headline of every view, its reasons included (they may carry a host's text: made visible).
        return safe_text(headline(verdict), 300, style="bold yellow")
    else:
        # The headline every view prints, then the first reason (the others: the CLI lists them).
        line.append(headline(verdict), style="bold red")
        line.append(" · ", style="dim")
    reason = verdict.reasons[0] if verdict.reasons else f"{total - at_baseline} GPUs above baseline"
    label = None if verdict.facts is None else fact_label(verdict.facts, reason)
    if label is not None:
        line.append(f"{label}: ", style="bold")
    line.append_text(safe_text(reason, 200))
    if len(verdict.reasons) > 1:
        line.append(f" (+{len(verdict.reasons) - 1} more)", style="dim")
    return line


class CleanSlateLine(Static):
    """The verdict of the shown host: one line, wrapped to as many rows as it needs."""

    _shown: Text | None = None
    """The text shown now (None before the first ``show``)."""
    _shown_key: tuple[object, ...] | None = None
    """``_shown`` as its plain text, base style and spans (``Text ==`` ignores the base style)."""

    @property
    def shown(self) -> Text:
        """The line as shown now (empty before the first ``show``)."""
        return self._shown if self._shown is not None else Text("")

    def show(
        self,
        verdict: Verdict | None,
        check: CleanCheck | None,
        now_s: float,
        fitness_due: bool = False,
        probing: bool = False,
    ) -> None:
        """Show the verdict; with a check, its progress ("5/8 GPUs at baseline") or its receipt."""
        text = clean_slate_text(verdict, check, now_s, fitness_due, probing)
        key = (text.plain, str(text.style), tuple(text.spans))
        if key == self._shown_key:
            return  # the same verdict again: nothing to repaint
        shown = self._shown
        self._shown, self._shown_key = text, key
        # The line wraps when narrow: the screen is laid out again only when the height may change, i.e.
        # unless the old and the new line both fit on one row.
        width = self.content_size.width
        one_row = shown is not None and max(shown.cell_len, text.cell_len) <= width
        self.update(text, layout=not one_row)
