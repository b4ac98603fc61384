"""One confirmed plan driven through a link: intent in the audit log first, the kill, its outcomes as they
come, an abandon if asked; and what the finished kill took down."""

from __future__ import annotations

import time
from collections.abc import Iterable

from gputui.agent.kill import messages as kill_messages
from gputui.agent.protocol import RESULTS_GONE
from gputui.core.actions.audit import AuditLog
from gputui.core.actions.plan import KillPlan, kill_command
from gputui.core.actions.replies import KillOutcome, KillReply, Pending, final_outcomes, parse_reply
from gputui.core.jobs import gpu_memory_by_pid
from gputui.core.link import HostLink, LinkError
from gputui.core.model import HostSnapshot
from gputui.core.store import saved
from gputui.core.verdict import KilledJob

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REQUEST_TIMEOUT_S = 30.0
"""Deadline of the kill command itself (the checks and the signals) and of an abandon."""
UNASKED_MAX = 256
"""Processes a tree kill may report beyond its plan (the collector re-reads each tree when it signals, and
a zombie member goes with its parent): more than this are not believed."""
FINISH_MARGIN_S = 60.0
"""How long past the plan's own delay (escalation or wait) a collector may take to say it is done; past it,
the outcome is unknown here and the run ends (a collector that answers "not done" for ever ends nothing)."""


class KillRun:
    """One confirmed plan driven through a link: intent, kill, outcomes as they come, abandon on request.

    Every step's outcomes go to the audit log (None: not audited, ``--no-audit`` and the demo) as soon as
    they arrive. The collector's answers are held to what was asked: an outcome for a pid the plan does not
    name (beyond ``UNASKED_MAX`` members a tree kill found since the listing; none for a kill of single
    processes), or a second one of the same stage for a pid, is dropped (counted in ``ignored``), so a
    hostile collector can neither grow the audit log nor be shown as having killed what was not asked; and
    the run ends by the plan's delay plus ``FINISH_MARGIN_S`` whatever the collector says. Used from one
    thread at a time (the CLI's main thread, or one UI worker).

    Args:
        link: The host's link.
        plan: The confirmed plan.
        audit: The audit log; None: nothing is written.
    """

    WAIT_MARGIN_S = 10.0
    """A ``kill_wait`` reply may come this much later than the wait it asked for (a slow link)."""

    def __init__(self, link: HostLink, plan: KillPlan, audit: AuditLog | None) -> None:
        self.link = link
        self.plan = plan
        self.audit = audit
        self.op: int | None = None
        self.outcomes: list[KillOutcome] = []
        self.pending: tuple[Pending, ...] = ()
        self.done = False
        self.elapsed_s: float | None = None
        self.audit_errors: list[str] = []
        self.started_mono: float | None = None
        """Monotonic seconds at which the kill command was answered (the signals went out)."""
        self._count = 0
        self._asked = frozenset(t.pid for t in plan.targets)
        self._unasked: set[int] = set()
        self._seen: set[tuple[int, str]] = set()
        self.ignored = 0
        """Outcomes the collector sent that were not asked for (dropped)."""

    def _believed(self, pid: int) -> bool:
        if pid in self._asked or pid in self._unasked:
            return True
        if self.plan.tree and len(self._unasked) < UNASKED_MAX:
            self._unasked.add(pid)
            return True
        return False

    def _held_to_the_plan(self, outcomes: Iterable[KillOutcome]) -> list[KillOutcome]:
        kept = []
        for outcome in outcomes:
            key = (outcome.pid, outcome.stage)
            if key in self._seen or not self._believed(outcome.pid):
                self.ignored += 1
                continue
            self._seen.add(key)
            kept.append(outcome)
        return kept

    @property
    def finish_by_s(self) -> float:
        """Seconds after the signals by which the run ends, done or not."""
        delay = self.plan.escalate_s if self.plan.escalate_s is not None else self.plan.wait_s
        return (delay or 0.0) + FINISH_MARGIN_S

    def _take(self, reply: KillReply) -> KillReply:
        new = self._held_to_the_plan(reply.outcomes)
        self.outcomes.extend(new)
        self._count = max(self._count, reply.count)
        believed = self._asked | self._unasked
        self.pending = tuple(p for p in reply.pending if p.pid in believed)[: len(believed)]
        self.done = reply.done
        self.elapsed_s = reply.elapsed_s
        if reply.op is not None:
            self.op = reply.op
        if self.audit is not None and new:
            try:
                self.audit.outcomes(self.plan, new)
            except saved.StoreError as exc:
                self.audit_errors.append(str(exc))
        return reply

    def start(self) -> KillReply:
        """Write the intent, send the kill; returns the first answer (the checks and the signals).

        Raises:
            saved.StoreError: The audit log cannot be written: nothing was sent.
            LinkError: The host could not be asked (the audit log says the outcome is unknown), or answered
                badly.
        """
        if self.audit is not None:
            self.audit.intent(self.plan)
        try:
            command = kill_command(self.plan)
            if self.audit is not None and getattr(self.link, "keeps_kills", False):
                command["audit"] = self.audit.keeper_spec(self.plan)
            result = self.link.request(command, REQUEST_TIMEOUT_S)
            reply = parse_reply(result)
        except (LinkError, ValueError) as exc:
            self._unknown([t.pid for t in self.plan.roots], f"no answer to the kill command: {exc}")
            self.done = True
            raise LinkError(str(exc)) from None
        self.started_mono = time.monotonic()
        return self._take(reply)

    def wait(self, timeout_s: float) -> KillReply:
        """Wait up to ``timeout_s`` for the operation to end; returns what came meanwhile.

        Raises:
            LinkError: The link broke: the collector still finishes the operation, but its outcome will not
                be known here (the audit log says so).
        """
        if self.done or self.op is None:
            return KillReply(self.op, (), self._count, True)
        if self.started_mono is not None and time.monotonic() - self.started_mono > self.finish_by_s:
            self._unknown(
                [p.pid for p in self.pending] or sorted(self._asked),
                f"the collector did not finish the kill within {self.finish_by_s:.0f} s",
            )
            self.done = True
            raise LinkError(f"the collector did not finish the kill within {self.finish_by_s:.0f} s")
        command = kill_messages.kill_wait_command(self.op, self._count, timeout_s)
        return self._ask(command, timeout_s + self.WAIT_MARGIN_S)

    def abandon(self) -> KillReply:
        """Cancel the escalation unless it is under way; returns what it leaves (result abandoned).

        Raises:
            LinkError: As for ``wait``.
        """
        if self.done or self.op is None:
            return KillReply(self.op, (), self._count, True)
        command = kill_messages.kill_abandon_command(self.op, self._count)
        return self._ask(command, REQUEST_TIMEOUT_S)

    def _ask(self, command: dict[str, Any], timeout_s: float) -> KillReply:
        try:
            reply = parse_reply(self.link.request(command, timeout_s))
        except (LinkError, ValueError) as exc:
            self._unknown(
                [p.pid for p in self.pending],
                f"the link broke while the collector finished the kill: {exc}",
            )
            self.done = True
            raise LinkError(str(exc)) from None
        return self._take(reply)

    def _unknown(self, pids: list[int], detail: str) -> None:
        if self.audit is None or not pids:
            return
        try:
            self.audit.unknown(self.plan, pids, detail)
        except saved.StoreError as exc:
            self.audit_errors.append(str(exc))

    @property
    def left(self) -> list[KillOutcome]:
        """The final outcome of every process that is not gone (refused, denied, still alive, abandoned)."""
        return [o for o in final_outcomes(self.outcomes).values() if o.result not in RESULTS_GONE]


def killed_jobs(plan: KillPlan, outcomes: Iterable[KillOutcome], snapshot: HostSnapshot) -> list[KilledJob]:
    """What a finished kill took down, one job per requested root, to tell its survivors later.

    The GPUs of a job are those its listed processes (and their zombie children) held in ``snapshot``, the
    one the plan was made from.
    """
    members = frozenset((o.pid, o.start_ticks) for o in outcomes)
    held = gpu_memory_by_pid(snapshot)
    gpus: set[int] = set()
    listed = {t.pid for t in plan.targets}
    for proc in snapshot.processes:
        if proc.pid in listed or (proc.is_zombie and proc.ppid in listed):
            gpus.update(held.get(proc.pid, {}))
    jobs = []
    for root in plan.roots:
        root_proc = snapshot.process(root.pid)
        jobs.append(
            KilledJob(
                root_pid=root.pid,
                root_name=root.name,
                start_ticks=root.start_ticks,
                uid=None if root_proc is None else root_proc.uid,
                cgroup=None if root_proc is None else root_proc.cgroup,
                gpus=frozenset(gpus),
                members=members,
                boot_id=plan.boot_id,
            )
        )
    return jobs
