"""The TUI's side of the clean-slate check: it feeds ``core.verdict.cleanslate``, does what the machine asks.

``c`` (or ``X``, once its kill is confirmed) starts a check: the host samples fast while memory drains, and
its collector samples at once when a GPU holder exits (``Agent.pause``); every applied snapshot goes to
``cleanslate.memory_sample``, which takes a sample listed with its memory as its own confirmation (the
receipt is said, and drawn, with that sample) and else asks for a fresh full sample; the check's end (the
receipt, or the deadline) brings the normal intervals back. ``check --wait`` drives the
same machine from the CLI (``gputui.commands.check``).

The receipt's times are the events' own, on the host's clock (``facts.receipt_times``): the kill's first
signal and its last process gone come from the kill's outcomes (``signalled``, ``kill_ended``), memory back
and the ports free from the first sample that showed them. How long gputui took to look (its sampling, the
kill's bookkeeping, a confirming sample) is never counted in them.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputui.agent.protocol import RESULTS_GONE, SIGNALLING_STAGES
from gputui.core.actions import KillOutcome, final_outcomes
from gputui.core.model import HostSnapshot, replace
from gputui.core.text import clock_time, visible
from gputui.core.verdict import cleanslate, memory_at_baseline
from gputui.core.verdict.probing import only_the_probe
from gputui.ui.session.context import Session
from gputui.ui.session.hosts import Hosts, HostState
from gputui.ui.widgets.clean_slate import receipt_times
from gputui.ui.widgets.fmt import duration

FAST_MEMORY_INTERVAL_S = cleanslate.WATCH_MEMORY_INTERVAL_S
FAST_PROCESS_INTERVAL_S = cleanslate.WATCH_PROCESS_INTERVAL_S
"""Sampling while a check watches memory drain (as ``check --wait`` does); the normal intervals come back
after it."""


def check_operation(target: str) -> str:
    """The notification key of ``target``'s clean-slate check (``GpuTuiApp.say``)."""
    return f"check:{target}"


class CleanChecks:
    """Starts, feeds and ends the clean-slate checks of every host of ``app``."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def start(self, host: HostState, trigger: str = "c", pressed_s: float | None = None) -> None:
        """Start a check of ``host`` now; ``pressed_s``: when its key was pressed (before a confirmation)."""
        app = self._session
        host.check = cleanslate.start(
            app.clock(),
            app.settings.check_timeout_s,
            trigger,
            kill_pending=bool(host.kills),
            ports=host.watched_ports,
            pressed_s=pressed_s,
        )
        app.hosts.configure(host, FAST_MEMORY_INTERVAL_S, FAST_PROCESS_INTERVAL_S, watch_exits=True)
        app.host_changed(host)

    def memory_sample(self, host: HostState, snapshot: HostSnapshot) -> None:
        """A snapshot of ``host`` was applied."""
        if host.check is None or not host.check.running:
            return
        now_s = self._session.clock()
        before = host.check
        host.check, ask = cleanslate.memory_sample(
            host.check, snapshot, host.baselines, now_s, host.killed_members()
        )
        host.check = _events_seen(before, host.check, snapshot, memory_at_baseline(snapshot, host.baselines))
        if ask:
            self._session.hosts.confirm_clean(host, host.check.started_s)
        elif not host.check.running:
            self._finished(host, snapshot)  # the sample confirmed itself: said now, drawn with this sample

    def signalled(self, host: HostState, outcomes: Sequence[KillOutcome]) -> None:
        """A kill on ``host`` sent its first signals: the receipt's times count from the first one (the
        collector's time of it)."""
        check = host.check
        sent = [o.time for o in outcomes if o.stage in SIGNALLING_STAGES and o.time is not None]
        if check is None or not check.running or not sent:
            return
        first = min(sent)
        at = first if check.signal_at is None else min(check.signal_at, first)
        host.check = replace(
            check, signal_at=at, workers_gone_at=None, memory_back_at=None, ports_free_at=None
        )

    def kill_ended(self, host: HostState, outcomes: Sequence[KillOutcome]) -> None:
        """A kill on ``host`` ended: its last process gone (when every one is), by the collector's clock."""
        check = host.check
        if check is None or not check.running or check.signal_at is None:
            return
        finals = list(final_outcomes(outcomes).values())
        times = [o.time for o in finals if o.time is not None]
        if not finals or any(o.result not in RESULTS_GONE for o in finals) or len(times) != len(finals):
            return
        gone = max(times)
        if check.workers_gone_at is None or gone > check.workers_gone_at:
            host.check = replace(check, workers_gone_at=gone)

    def confirmed(self, message: Hosts.CleanConfirmed) -> None:
        """The fresh full sample a check asked for came back."""
        host = self._session.hosts.get(message.target)
        check = None if host is None else host.check
        if host is None or check is None or check.started_s != message.started_s:
            return  # an answer to a check that was replaced
        host.check = cleanslate.confirming_sample(
            check, message.snapshot, host.killed_members(), message.error
        )
        if message.snapshot is not None:
            host.check = _events_seen(check, host.check, message.snapshot, False)
        if message.snapshot is not None:
            self._finished(host, message.snapshot)
        self._session.host_changed(host)

    def _finished(self, host: HostState, confirming: HostSnapshot) -> None:
        """Say the receipt when ``confirming`` (an analysed sample) just made ``host``'s check clean; a check
        it ended otherwise (NOT READY: memory back, a GPU needing an action) brings the normal sampling back
        too (the line says why)."""
        check = host.check
        verdict = confirming.verdict
        if check is not None and check.finished_s is not None and not check.clean:
            self._end(host)
            if self._session.settings.probe_after_check and only_the_probe(confirming):
                # The host keeps a failed probe until a probe proves otherwise: with everything else clean,
                # that is now, or no check would ever end clean again.
                self._session.probe(host)
            return
        if check is not None and check.clean and check.finished_s is not None and verdict is not None:
            self._end(host)
            if self._session.settings.probe_after_check:
                self._session.probe(host)  # the receipt's GPU fact, proven
            self._session.say(
                f"{visible(host.target, 40)}: CLEAN ✓ "
                f"{verdict.gpus_at_baseline}/{len(verdict.gpus)} GPUs at"
                f" baseline at {clock_time(check.finished_s)} (memory sample, confirmed by a full sample;"
                f" {receipt_times(check)})",
                title="clean slate",
                operation=check_operation(host.target),
            )

    def tick(self) -> None:
        """Once a second: a check past its deadline ends, not clean."""
        now_s = self._session.clock()
        for host in self._session.hosts:
            check = host.check
            if check is None or not check.running:
                continue
            host.check = cleanslate.tick(check, now_s)
            if not host.check.running:
                self._end(host)
                self._session.say(
                    f"{visible(host.target, 40)}: not clean after {duration(now_s - check.started_s)}",
                    severity="error",
                    title="clean slate",
                    operation=check_operation(host.target),
                )
                self._session.host_changed(host)

    def cancel(self, host: HostState) -> None:
        """Drop ``host``'s check (the kill it came with never ran)."""
        host.check = None
        self._end(host)

    def _end(self, host: HostState) -> None:
        settings = self._session.settings
        self._session.hosts.configure(
            host, settings.memory_interval_s, settings.process_interval_s, watch_exits=False
        )


def _events_seen(
    before: cleanslate.CleanCheck, after: cleanslate.CleanCheck, snapshot: HostSnapshot, at_baseline: bool
) -> cleanslate.CleanCheck:
    """``after`` with the receipt's events that ``snapshot`` (host clock) shows first: memory back at
    baseline and the watched ports free, each once a signal was sent and from a sample taken after it."""
    sampled = snapshot.time
    signal_at = after.signal_at
    if sampled is None or signal_at is None or sampled < signal_at:
        return after
    if at_baseline and after.memory_back_at is None:
        after = replace(after, memory_back_at=sampled)
    if after.ports_free_at is None and after.ports_free_s is not None and before.ports_free_s is None:
        after = replace(after, ports_free_at=sampled)
    return after
