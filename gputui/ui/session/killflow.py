"""The kill flow of the TUI: plan → confirm → send → audit → result notifications, and quitting during one.

A kill key plans from the snapshot the user is looking at (``actions.plan_kill``) and opens the confirmation;
nothing is sent before it is confirmed. A confirmed plan runs on a thread of its own through
``actions.KillRun`` (the intent in the audit log first, then the kill command, then every outcome as it
comes), posting ``KillFlow.Started`` once the signals are out and ``KillFlow.Finished`` at the end.

A confirmed escalation finishes even if the user quits: ``q`` says what is pending and leaves once it is
done; ``q`` again abandons it (the collector is told, and says what it left alive).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.message import Message

from gputui.agent.protocol import (
    RESULT_ABANDONED,
    RESULT_CHANGED,
    RESULT_DENIED,
    RESULT_ERROR,
    RESULT_GONE,
    RESULT_REFUSED,
    RESULT_STILL_ALIVE,
    RESULT_UNINTERRUPTIBLE,
    RESULT_UNKNOWN,
    SIGNALLING_STAGES,
)
from gputui.core.actions import (
    KillOutcome,
    KillPlan,
    KillRun,
    OwnersError,
    Pending,
    PlanError,
    final_outcomes,
    killed_jobs,
    plan_kill,
)
from gputui.core.link import HostLink, LinkError, process_text
from gputui.core.model import HostSnapshot, Proc
from gputui.core.store import StoreError, leftovers, saved
from gputui.core.text import fit, visible
from gputui.core.verdict import KilledJob, cleanslate
from gputui.ui.session.cleancheck import CleanChecks, check_operation
from gputui.ui.session.context import Session, TextFetcher
from gputui.ui.session.hosts import REQUEST_TIMEOUT_S, HostState, PendingKill
from gputui.ui.session.tasks import spawn

KILL_POLL_S = 0.25
"""Longest wait on a kill operation before its thread looks whether the user abandoned it."""
QUIT_GRACE_S = 10.0
"""Quitting with kills under way waits for them at most their own delay plus this long."""

_BAD_RESULTS = frozenset({RESULT_REFUSED, RESULT_CHANGED, RESULT_DENIED, RESULT_ERROR, RESULT_UNKNOWN})
_WARN_RESULTS = frozenset({RESULT_STILL_ALIVE, RESULT_UNINTERRUPTIBLE, RESULT_GONE, RESULT_ABANDONED})


def _who(members: Sequence[KillOutcome] | Sequence[Pending]) -> str:
    """``4250 sglang::detokenizer, 4200 python3``; pids alone, in order, when there are more than three."""
    if len(members) <= 3:
        return ", ".join(f"{o.pid} {fit(o.name or '?', 28)}" for o in members)
    return ", ".join(str(pid) for pid in sorted(o.pid for o in members))


def outcome_summary(plan: KillPlan, outcomes: Sequence[KillOutcome]) -> tuple[str, str]:
    """The notification for a finished kill: what finally happened to each process, grouped, and a severity.

    A result is followed by its stage's signal where it has one ("killed (KILL)"); checks and waits have none.
    """
    if not outcomes:
        return f"{plan.signal} on {visible(plan.target, 40)}: the collector reported nothing", "warning"
    groups: dict[tuple[str, str, str], list[KillOutcome]] = {}
    for outcome in final_outcomes(outcomes).values():
        groups.setdefault((outcome.result, outcome.signal or "", outcome.detail or ""), []).append(outcome)
    lines = []
    for (result, sent, detail), members in groups.items():
        line = f"{result}{f' ({sent})' if sent else ''}: {_who(members)}"
        if detail:
            line += f" – {fit(detail, 100)}"
        lines.append(line)
    results = {o.result for o in outcomes}
    severity = "error" if results & _BAD_RESULTS else "warning" if results & _WARN_RESULTS else "information"
    return "\n".join(lines), severity


def pending_summary(pending: Sequence[Pending], delay_s: float | None = None) -> str:
    """``KILL in 3.2 s to 1 process: 4250 sglang::detokenizer`` (or a look, without escalation).

    ``delay_s``: say the plan's delay instead ("KILL after 5 s"), as right after the signals.
    """
    what = "KILL" if any(p.signal == "KILL" for p in pending) else "a look"
    if delay_s is not None:
        when = f"after {delay_s:g} s"
    else:
        when = f"in {max((p.due_in_s or 0.0 for p in pending), default=0.0):.1f} s"
    noun = "process" if len(pending) == 1 else "processes"
    return f"{what} {when} to {len(pending)} {noun}: {_who(pending)}"


def operation_key(target: str, key: int, entry: PendingKill) -> str:
    """The notification key of a kill: ``X`` and the check it starts are one operation, one notification."""
    return check_operation(target) if entry.checking else f"kill:{target}:{key}"


class KillFlow:
    """Every kill of the app, from the key to the last notification."""

    @dataclass
    class Started(Message):
        """The agent checked and signalled: the first outcomes, and what it still waits for."""

        target: str
        key: int
        """The flow's number for this kill (``HostState.kills``)."""
        outcomes: list[KillOutcome]
        pending: tuple[Pending, ...]

    @dataclass
    class Finished(Message):
        """A kill operation ended (or could not start: ``error``)."""

        target: str
        key: int
        outcomes: list[KillOutcome]
        error: str | None
        audit_errors: list[str]
        abandoned: bool = False
        """The user gave up on its escalation (quitting twice)."""
        jobs: tuple[KilledJob, ...] = ()
        """What it took down, to tell survivors later."""

    def __init__(self, session: Session, checks: CleanChecks) -> None:
        self._session = session
        self._checks = checks
        self._next_key = 0
        self.quitting = False
        """Quit was asked for while kills were under way: the app leaves once they are done."""
        self._abandoning = False

    # -- plan and confirm ------------------------------------------------------------------------------

    def request(
        self,
        host: HostState,
        snapshot: HostSnapshot | None,
        pids: Sequence[int],
        signal: str,
        tree: bool = False,
        all_gpu: bool = False,
        owner: tuple[str, str] | None = None,
    ) -> None:
        """Plan a kill from ``snapshot`` (what the user sees) and ask for confirmation.

        A kill-all on a host whose GPU jobs have several owners first asks whose (``Session.choose_owner``);
        ``owner`` is the answer.
        """
        app, settings = self._session, self._session.settings
        pressed_s = app.clock()  # the receipt's "since X" counts from the key, not from the confirmation
        if settings.read_only:
            app.say("read-only: nothing is signalled", severity="warning", title="refused")
            return
        if snapshot is None:
            app.say(f"{visible(host.target, 40)}: no data yet", severity="warning")
            return
        if not pids and not all_gpu:
            app.say("select a process first", severity="warning")
            return
        # Trees escalate TERM to KILL; a single signal is looked at again after the same delay.
        escalates = (tree or all_gpu) and signal != "KILL"
        try:
            plan = plan_kill(
                snapshot,
                pids,
                signal=signal,
                tree=tree,
                all_gpu=all_gpu,
                escalate_s=settings.escalate_s if escalates else None,
                wait_s=None if escalates else settings.escalate_s,
                read_only=settings.read_only,
                owner=owner,
            )
        except OwnersError as exc:
            if all_gpu and owner is None and exc.owners:

                def picked(choice: tuple[str, str] | None) -> None:
                    if choice is None:
                        app.say("cancelled: nothing was signalled")
                    else:
                        self.request(host, snapshot, pids, signal, tree, all_gpu, choice)

                app.choose_owner(host.target, exc.owners, picked)
                return
            app.say(visible(str(exc), 300), severity="error", title="refused")
            return
        except PlanError as exc:
            app.say(visible(str(exc), 300), severity="error", title="refused")
            return
        if not plan.targets:
            reason = "; ".join(plan.notes) or "nothing to signal"
            app.say(visible(reason, 300), severity="warning", title="nothing to signal")
            return

        def decided(confirmed: bool | None) -> None:
            if not confirmed:
                app.say("cancelled: nothing was signalled")
            elif self.quitting:
                app.say("quitting: nothing was signalled", severity="warning")
            else:
                self._send(host, plan, snapshot, all_gpu, pressed_s)

        app.confirm_kill(plan, snapshot, self._text_fetcher(host), decided)

    @staticmethod
    def _text_fetcher(host: HostState) -> TextFetcher:
        """Reads a process's whole command line (blocking; the confirmation calls it on a thread)."""

        def fetch(proc: Proc) -> Proc:
            link = host.link
            if link is None:
                raise LinkError(f"{host.target}: not connected")
            return process_text(link, proc, REQUEST_TIMEOUT_S)

        return fetch

    # -- send and follow -------------------------------------------------------------------------------

    def _send(
        self,
        host: HostState,
        plan: KillPlan,
        snapshot: HostSnapshot,
        checking: bool,
        pressed_s: float | None = None,
    ) -> None:
        if checking:
            # The check starts now (its deadline counts from the confirmation); its receipt counts "since X"
            # from the key press and "since the kill" from the first signal.
            self._checks.start(host, "X", pressed_s=pressed_s)
        self._next_key += 1
        key = self._next_key
        entry = PendingKill(plan, snapshot, checking)
        host.kills[key] = entry
        link = host.link
        if link is None:
            not_connected = "kill not sent: the host is not connected"
            self._session.post_message(self.Finished(host.target, key, [], not_connected, []))
            return
        run = KillRun(link, plan, self._session.audit)
        spawn(f"kill-{host.target[:20]}", lambda: self._follow(host.target, key, entry, run, link))

    def _follow(
        self, target: str, key: int, entry: PendingKill, run: KillRun, link: HostLink | None = None
    ) -> None:
        """Send a confirmed plan and follow it to its end (on its own thread; quitting does not stop it)."""
        post = self._session.post_message
        error: str | None = None
        abandoned = False
        # Before the signals: once the job is gone, what it had open in /dev/shm cannot be read.
        found = leftovers.scan_job(link, [t.pid for t in entry.plan.targets]) if link is not None else None
        try:
            first = run.start()
            if any(o.stage in SIGNALLING_STAGES for o in first.outcomes):
                warning = leftovers.record(target, entry.plan.boot_id, found)
                if warning is not None:
                    self._session.from_thread(self._session.say, warning, severity="warning")
            post(self.Started(target, key, list(first.outcomes), first.pending))
            while not run.done:
                if entry.abandon.is_set():
                    run.abandon()
                    abandoned = True
                    break
                entry.pending = run.wait(KILL_POLL_S).pending
        except StoreError as exc:
            error = (
                f"kill refused, nothing signalled: audit log: {exc} "
                "(start gputui with --no-audit to kill without it)"
            )
        except LinkError as exc:
            if run.started_mono is None:
                error = f"kill not sent: {exc}"
            else:
                error = f"{exc} (the collector finishes the kill on its own; its outcome is not known here)"
        jobs = tuple(killed_jobs(entry.plan, run.outcomes, entry.snapshot)) if run.outcomes else ()
        post(self.Finished(target, key, run.outcomes, error, run.audit_errors, abandoned, jobs))

    def started(self, message: Started) -> None:
        app = self._session
        host = app.hosts.get(message.target)
        entry = None if host is None else host.kills.get(message.key)
        if host is None or entry is None:
            return
        entry.pending = message.pending
        plan = entry.plan
        text, severity = outcome_summary(plan, message.outcomes)
        if message.pending:
            delay_s = plan.escalate_s if plan.escalate_s is not None else plan.wait_s
            text += "\n" + pending_summary(message.pending, delay_s)
        title = f"{plan.signal} on {visible(message.target, 40)}"
        app.say(
            text, severity=severity, title=title, operation=operation_key(message.target, message.key, entry)
        )
        if any(o.stage in SIGNALLING_STAGES for o in message.outcomes):
            ports = saved.watched_ports(plan.ports, entry.snapshot.time)
            host.watch_ports(ports)
            if host.check is not None:
                host.check = cleanslate.kill_sent(host.check, app.clock(), ports)
                self._checks.signalled(host, message.outcomes)
        host.tagged.clear()
        app.host_changed(host)

    def finished(self, message: Finished) -> None:
        app = self._session
        host = app.hosts.get(message.target)
        entry = None if host is None else host.kills.pop(message.key, None)
        if host is None or entry is None:
            return
        title = f"{entry.plan.signal} on {visible(message.target, 40)}"
        operation = operation_key(message.target, message.key, entry)
        if message.error is not None:
            text = f"{visible(message.target, 40)}: {fit(message.error, 300)}"
            app.say(text, severity="error", title="kill failed", operation=operation)
        else:
            text, severity = outcome_summary(entry.plan, message.outcomes)
            if message.abandoned:
                text = "escalation abandoned\n" + text
            app.say(text, severity=severity, title=title, operation=operation)
        for problem in message.audit_errors:
            app.say(f"audit log not written: {visible(problem, 200)}", severity="warning")
        if message.jobs:
            host.killed(message.jobs)
        if host.check is not None and host.check.running:
            self._checks.kill_ended(host, message.outcomes)
            if entry.checking and message.error is not None and not message.outcomes:
                self._checks.cancel(host)  # the kill never ran: nothing to watch drain
            else:
                host.check = cleanslate.kills_settled(host.check, bool(host.kills))
        if message.outcomes:
            app.hosts.sample_now(host)
        app.host_changed(host)
        if self.quitting and not self.under_way():
            app.leave(Text("\n".join(f"gputui: {title}: {line}" for line in text.splitlines())))

    # -- quitting --------------------------------------------------------------------------------------

    def under_way(self) -> list[tuple[HostState, PendingKill]]:
        return [(host, entry) for host in self._session.hosts for entry in host.kills.values()]

    def quit(self) -> bool:
        """The user asked to quit: True when the app may leave now.

        With kills under way, the first ask says what is pending and leaves once they are done (or after
        their delay and a grace period); the second abandons their escalations.
        """
        under_way = self.under_way()
        if not under_way:
            return True
        app = self._session
        if not self.quitting:
            self.quitting = True
            waits = [
                f"{visible(h.target, 40)}: {pending_summary(e.pending)}" for h, e in under_way if e.pending
            ]
            app.say(
                "quitting once the kill is done · "
                + ("; ".join(waits) or "finishing it")
                + " · q again to abandon it",
                severity="warning",
                title="kill under way",
            )
            longest = max((p.due_in_s or 0.0 for _, e in under_way for p in e.pending), default=0.0)
            app.set_timer(longest + QUIT_GRACE_S, self._quit_anyway)
        elif not self._abandoning:
            self._abandoning = True
            for _, entry in under_way:
                entry.abandon.set()
            app.say("abandoning the escalation; quitting", severity="warning", title="kill under way")
            app.set_timer(QUIT_GRACE_S, self._quit_anyway)
        return False

    def _quit_anyway(self) -> None:
        """The kills did not report back in time (a hung host): leave, saying what is not known."""
        under_way = self.under_way()
        if not under_way or not self.quitting:
            return
        unknown = ", ".join(
            f"{visible(h.target, 40)} ({len(e.plan.targets)} processes)" for h, e in under_way
        )
        # Printed after the app left, as a Text: host and process names are never read as markup.
        line = f"gputui: no answer about the kill on {unknown}: its outcome is not known here"
        self._session.leave(Text(line))
