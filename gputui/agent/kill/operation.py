"""One confirmed kill, run to its end in the collector: checks, signals, the wait, the escalation, the
confirmation; every step an outcome (``messages.outcome``) in the order it happened."""

from __future__ import annotations

import signal
import threading
import time

from gputui.agent.kill.guard import KillGuard
from gputui.agent.kill.messages import kill_reply, pending
from gputui.agent.kill.outcomes import OutcomeLog
from gputui.agent.kill.signals import alive, defunct_leader, send_signal_checked, wait_gone
from gputui.agent.proc.owners import same_owner
from gputui.agent.proc.procfs import ProcStat, read_stat, scan_proc
from gputui.agent.proc.proctree import children_map
from gputui.agent.protocol import (
    RESULT_ABANDONED,
    RESULT_CHANGED,
    RESULT_ERROR,
    RESULT_EXITED,
    RESULT_GONE,
    RESULT_KILLED,
    RESULT_REAPED,
    RESULT_REFUSED,
    RESULT_SENT,
    RESULT_STILL_ALIVE,
    RESULT_UNINTERRUPTIBLE,
    STAGE_ABANDON,
    STAGE_CHECK,
    STAGE_CONFIRM,
    STAGE_ESCALATE,
    STAGE_SIGNAL,
    STAGE_WAIT,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

KILL_CONFIRM_S = 2.0
"""After an escalated KILL, how long to wait for the process to disappear before reporting it."""
OWNER_CHANGED = (
    "process changed: it belongs to another owner (container, pod, job or unit) than when it was listed"
)
KILL_KEEP_S = 60.0
"""A finished kill operation's outcomes stay available to ``kill_wait`` this long."""


class KillContext:
    """What a kill operation needs of its collector, and nothing more.

    Attributes:
        read_only: Refuse every target.
        boot_id: This boot's id: a kill listed in another boot is refused.
        agent_pid: The collector's own pid (never signalled).
        use_psutil: Read who each target is through psutil.
        gpu_mib_of: pid -> the GPU memory the last process list says it holds (None: not listed).
    """

    __slots__ = ("read_only", "boot_id", "agent_pid", "use_psutil", "gpu_mib_of")

    def __init__(
        self,
        read_only: bool,
        boot_id: str | None,
        agent_pid: int,
        use_psutil: bool,
        gpu_mib_of: Callable[[int], int | None],
    ) -> None:
        self.read_only = read_only
        self.boot_id = boot_id
        self.agent_pid = agent_pid
        self.use_psutil = use_psutil
        self.gpu_mib_of = gpu_mib_of


class KillOperation:
    """One confirmed kill: checks and signals at once, then the wait, the escalation and the confirmation.

    ``start`` checks every target (identity, refusals), expands trees (children first) and signals, in the
    caller's thread; it captures the job as it was then: each member's pid and start ticks, and the process
    groups its members lead. The members the client listed come after the roots, each checked the same way:
    one whose root died since (init adopted it) is still signalled, with its own subtree. The rest runs on a
    thread of its own (not a daemon: a collector whose client went away still finishes it), bounded by the
    delay plus ``KILL_CONFIRM_S``:

    * after the signals, and again when the escalation is due, the host is read again: processes that joined
      the job since it was listed (a fork during the kill, which init may have adopted once its parent died)
      are signalled too;
    * zombies of the job are not signalled: they go once their parent does ("reaped"), or are said to remain;
    * with ``escalate_s``, what is still alive then gets KILL, and each KILL is confirmed; with ``wait_s``
      (or a KILL), what is left after it is reported as still alive;
    * ``abandon`` cancels an escalation that is not under way yet, and reports what it leaves.

    Outcomes accumulate in order; ``reply`` hands them out from any index, so a client that lost a reply or
    came back later misses none.
    """

    def __init__(
        self,
        context: KillContext,
        op_id: int,
        signo: int,
        signal_name: str,
        tree: bool,
        escalate_s: float | None,
        wait_s: float | None,
    ) -> None:
        self.context = context
        self.op_id = op_id
        self.signo = signo
        self.signal_name = signal_name
        self.tree = tree
        if signo == signal.SIGKILL and escalate_s is not None:
            # Nothing is stronger than KILL: its delay only bounds the wait for it to take effect.
            wait_s, escalate_s = (wait_s if wait_s is not None else escalate_s), None
        self.escalate_s = escalate_s
        self.wait_s = wait_s
        self._log = OutcomeLog(context.use_psutil, context.gpu_mib_of)
        self._lock = threading.Lock()
        self._queued: set[tuple[int, int]] = set()
        self._members: set[tuple[int, int]] = set()
        self._sent: list[tuple[int, int]] = []
        self._zombies: dict[tuple[int, int], int] = {}
        self._groups: set[int] = set()
        self._guard: KillGuard | None = None
        self._planned_owners: dict[tuple[int, int | None], dict[str, Any]] = {}
        self._done = threading.Event()
        self._cancel = threading.Event()
        self._escalating = False
        self.started_mono = time.monotonic()
        self.finished_mono: float | None = None
        delay = escalate_s if escalate_s is not None else wait_s
        self.due_mono = None if delay is None else self.started_mono + delay
        self.bound_s = (delay or 0.0) + 2 * KILL_CONFIRM_S
        """How long the whole operation may take, from its start."""

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def forgettable(self, now_mono: float) -> bool:
        return self.finished_mono is not None and now_mono - self.finished_mono > KILL_KEEP_S

    def reply(self, since: int) -> dict[str, Any]:
        """The outcomes from index ``since`` on, what is still pending, and whether the operation is done."""
        done = self.done  # read first: outcomes added before it is set are all in the copy below
        outcomes = self._log.all()
        ended = self.finished_mono if done and self.finished_mono is not None else time.monotonic()
        return kill_reply(
            self.op_id,
            outcomes[since:],
            len(outcomes),
            done,
            [] if done else self._pending(),
            self.escalate_s,
            self.wait_s,
            round(ended - self.started_mono, 3),
        )

    def _pending(self) -> list[dict[str, Any]]:
        """Each signalled process still alive: what will happen to it (KILL, or a look) and in how long."""
        with self._lock:
            watched = list(self._sent)
            escalating = self._escalating
        due_in_s = None if self.due_mono is None else max(0.0, self.due_mono - time.monotonic())
        watching: list[dict[str, Any]] = []
        for pid, ticks in watched:
            if not alive(pid, ticks):
                continue
            then = "KILL" if self.escalate_s is not None else None
            watching.append(
                pending(pid, ticks, self._log.name_of(pid), then, 0.0 if escalating else due_in_s)
            )
        return watching

    # -- the operation --------------------------------------------------------------------------------------

    def start(
        self,
        targets: list[tuple[int, int | None]],
        boot_id: str | None,
        owners: dict[tuple[int, int | None], dict[str, Any]] | None = None,
    ) -> None:
        """Check and signal every target (children first); start the rest of the operation when needed.

        ``owners``: the owner each target was listed with: one that belongs to another owner now (moved into
        another container's cgroup since) is refused as changed, never signalled."""
        self._planned_owners = owners or {}
        try:
            self._signal_targets(targets, boot_id)
        except BaseException:
            self._finished()
            raise
        if self._sent or self._zombies:
            threading.Thread(target=self._run, name=f"gputui-kill-{self.op_id}", daemon=False).start()
        else:
            self._finished()

    def _finished(self) -> None:
        self.finished_mono = time.monotonic()
        self._done.set()

    def wait(self, timeout_s: float | None) -> bool:
        """Wait until done or ``timeout_s`` passed (None: as long as the operation is bounded to take)."""
        if timeout_s is None:
            timeout_s = max(0.0, self.started_mono + self.bound_s + 1.0 - time.monotonic())
        return self._done.wait(timeout_s)

    def abandon(self) -> None:
        """Cancel the escalation (or the wait) unless it is under way already, then wait for the report."""
        with self._lock:
            if not self._escalating:
                self._cancel.set()
        self.wait(None)

    def _signal_targets(self, targets: list[tuple[int, int | None]], boot_id: str | None) -> None:
        table = scan_proc()
        if self.context.read_only:
            for pid, ticks in targets:
                read_only = "read-only: nothing is signalled"
                self._log.say(pid, ticks, table.get(pid), STAGE_CHECK, None, RESULT_REFUSED, read_only)
            return
        if boot_id is not None and self.context.boot_id is not None and boot_id != self.context.boot_id:
            for pid, ticks in targets:
                self._log.say(
                    pid,
                    ticks,
                    None,
                    STAGE_CHECK,
                    None,
                    RESULT_CHANGED,
                    "process changed: the host rebooted since it was listed (boot id differs)",
                )
            return
        guard = self._guard = KillGuard(self.context.agent_pid)

        ordered: list[tuple[int, int]] = []
        asked_zombies: list[ProcStat] = []
        for pid, ticks in targets:
            stat = table.get(pid)
            mismatch = identity_mismatch(pid, ticks, stat)
            if mismatch is not None or stat is None or ticks is None:  # the last two never, once it says None
                if mismatch is not None:
                    self._log.say(pid, ticks, stat, STAGE_CHECK, None, *mismatch)
                continue
            if (pid, ticks) in self._queued:
                continue  # a listed member its root's tree already holds
            refusal = guard.refusal(stat)
            if refusal is not None:
                # A refused root is never expanded: the tree of pid 1 or of the agent's own ancestors is the
                # whole host.
                self._queued.add((pid, ticks))
                self._log.say(pid, ticks, stat, STAGE_CHECK, None, RESULT_REFUSED, refusal)
                continue
            planned = self._planned_owners.get((pid, ticks))
            if planned is not None and not same_owner(planned, guard.owner_of(stat)):
                self._queued.add((pid, ticks))
                self._log.say(pid, ticks, stat, STAGE_CHECK, None, RESULT_CHANGED, OWNER_CHANGED)
                continue
            if stat.state == "Z" and not defunct_leader(pid, ticks):
                asked_zombies.append(stat)
                continue
            members = guard.tree_members(pid, table) if self.tree else []
            for member in members + [pid]:
                member_stat = table[member]
                key = (member, member_stat.start_ticks)
                if key in self._queued:
                    continue
                self._queued.add(key)
                if member_stat.state == "Z" and not defunct_leader(*key):
                    self._zombies[key] = member_stat.ppid
                else:
                    ordered.append(key)
        signalled_pids = set(pid for pid, _ in ordered)
        for stat in asked_zombies:
            key = (stat.pid, stat.start_ticks)
            if key in self._queued:
                continue
            self._queued.add(key)
            if stat.ppid in signalled_pids:
                self._zombies[key] = stat.ppid
            else:
                parent = table.get(stat.ppid)
                self._log.say(
                    stat.pid,
                    stat.start_ticks,
                    stat,
                    STAGE_CHECK,
                    None,
                    RESULT_REFUSED,
                    f"zombie: cannot be killed; signal its parent {stat.ppid} "
                    f"({parent.name if parent is not None else '?'})",
                )

        self._members = set(ordered) | set(self._zombies)
        for pid, _ticks in self._members:
            self._log.remember(table[pid])
        for pid, ticks in ordered:
            self._send(table[pid], ticks, self.signo, self.signal_name, STAGE_SIGNAL)
        if self.tree:
            self._groups = set(pid for pid, _ in self._members if table[pid].pgrp == pid)
            self._signal_joiners(self.signo, self.signal_name, STAGE_SIGNAL)

    def _send(
        self,
        stat: ProcStat,
        ticks: int,
        signo: int,
        signal_name: str,
        stage: str,
        detail: str = "",
    ) -> bool:
        """Signal one process after the refusal checks and record the outcome; True when it was sent."""
        refusal = self._guard.refusal(stat) if self._guard is not None else None
        if refusal is not None:
            self._log.say(stat.pid, ticks, stat, STAGE_CHECK, None, RESULT_REFUSED, refusal)
            return False
        result, why = send_signal_checked(stat.pid, ticks, signo)
        if result == RESULT_SENT and stat.state == "D":
            why = "in uninterruptible sleep (D): it may not die until its I/O completes"
        detail = "; ".join(text for text in (detail, why) if text)
        self._log.say(stat.pid, ticks, stat, stage, signal_name, result, detail)
        if result == RESULT_SENT and stage == STAGE_SIGNAL:
            with self._lock:
                self._sent.append((stat.pid, ticks))
        return result == RESULT_SENT

    def _signal_joiners(self, signo: int, signal_name: str, stage: str) -> list[tuple[int, int]]:
        """Signal what joined the job since it was listed; returns those that were sent the signal.

        Members of the process groups the job's members led, and children of live members, that this
        operation has not seen yet: a fork between the listing and the signal, which init adopts once its
        parent dies. Zombies among them are left to whoever reaps them.
        """
        table = scan_proc()
        children = children_map(table)
        found = [stat for stat in table.values() if stat.pgrp in self._groups]
        for pid, ticks in list(self._members):
            member = table.get(pid)
            if member is not None and member.start_ticks == ticks:
                found.extend(table[child] for child in children.get(pid, ()))
        sent: list[tuple[int, int]] = []
        for stat in found:
            key = (stat.pid, stat.start_ticks)
            if key in self._queued or stat.pid in (0, 1, 2) or stat.ppid == 2 or stat.state in ("Z", "X"):
                continue
            if not self._of_members_owner(stat, table):
                continue  # another container, pod, Slurm step or unit: never joins this job
            self._queued.add(key)
            self._members.add(key)
            self._log.remember(stat)
            joined = "joined the job after it was listed"
            if self._send(stat, stat.start_ticks, signo, signal_name, stage, joined):
                sent.append(key)
        return sent

    def _of_members_owner(self, stat: ProcStat, table: dict[int, ProcStat]) -> bool:
        """Whether ``stat`` has the owner of one of the job's members (``guard.same_owner_as``)."""
        guard = self._guard
        if guard is None:
            return True
        for pid, ticks in self._members:
            member = table.get(pid)
            if member is not None and member.start_ticks == ticks and guard.same_owner_as(member, stat):
                return True
        return False

    def _run(self) -> None:
        """The rest of the operation, on its own thread."""
        try:
            self._watch_and_escalate()
        except Exception as exc:  # a bug must not leave the operation pending forever: report it
            with self._lock:
                watched = list(self._sent)
            error = f"{type(exc).__name__}: {exc}"
            for pid, ticks in watched:
                self._log.say(pid, ticks, None, STAGE_WAIT, None, RESULT_ERROR, error)
        finally:
            self._finished()

    def _watch_and_escalate(self) -> None:
        escalating = self.escalate_s is not None
        delay = self.escalate_s if self.escalate_s is not None else self.wait_s
        with self._lock:
            sent = list(self._sent) if delay is not None else []
        zombies = dict(self._zombies)
        if delay is None:  # nothing to watch but the zombies of the job: see them reaped
            delay = KILL_CONFIRM_S
        left = wait_gone(sent, delay, self._cancel, reaped=list(zombies))
        self._report_gone(sent, zombies, left, STAGE_WAIT, f"gone after {self.signal_name}")
        sent = [key for key in sent if key in left]
        zombies = dict((key, parent) for key, parent in zombies.items() if key in left)
        with self._lock:
            cancelled = self._cancel.is_set()
            self._escalating = escalating and not cancelled
        if cancelled:
            for pid, ticks in sent:
                if escalating:
                    detail = f"alive after {self.signal_name}; KILL not sent: the escalation was abandoned"
                    self._log.say(pid, ticks, read_stat(pid), STAGE_ABANDON, None, RESULT_ABANDONED, detail)
                else:
                    self._still_alive(pid, ticks, STAGE_WAIT, None, f"still alive after {self.signal_name}")
            self._report_zombies_left(zombies, STAGE_ABANDON)
            return
        if not escalating:
            for pid, ticks in sent:
                self._still_alive(
                    pid,
                    ticks,
                    STAGE_WAIT,
                    None,
                    f"still alive {delay:g} s after {self.signal_name}",
                )
            self._report_zombies_left(zombies, STAGE_WAIT)
            return
        killed: list[tuple[int, int]] = []
        for pid, ticks in sent:
            stat = read_stat(pid)
            if stat is None or stat.start_ticks != ticks or stat.state in ("Z", "X"):
                gone = "gone after " + self.signal_name
                self._log.say(pid, ticks, None, STAGE_WAIT, None, RESULT_EXITED, gone)
                continue
            escalated = f"still alive after {delay:g} s: escalated"
            if self._send(stat, ticks, signal.SIGKILL, "KILL", STAGE_ESCALATE, escalated):
                killed.append((pid, ticks))
        if self.tree:
            killed.extend(self._signal_joiners(signal.SIGKILL, "KILL", STAGE_ESCALATE))
        left = wait_gone(killed, KILL_CONFIRM_S, reaped=list(zombies))
        for pid, ticks in killed:
            if (pid, ticks) not in left:
                self._log.say(pid, ticks, None, STAGE_CONFIRM, "KILL", RESULT_KILLED, "gone after KILL")
            else:
                self._still_alive(pid, ticks, STAGE_CONFIRM, "KILL", "still alive after KILL")
        self._report_gone([], zombies, left, STAGE_CONFIRM, "")
        self._report_zombies_left(dict((k, p) for k, p in zombies.items() if k in left), STAGE_CONFIRM)

    def _report_gone(
        self,
        sent: list[tuple[int, int]],
        zombies: dict[tuple[int, int], int],
        left: set[tuple[int, int]],
        stage: str,
        detail: str,
    ) -> None:
        for pid, ticks in sent:
            if (pid, ticks) not in left:
                self._log.say(pid, ticks, None, stage, None, RESULT_EXITED, detail)
        for (pid, ticks), parent in zombies.items():
            if (pid, ticks) not in left:
                reaped = f"reaped with its parent {parent}"
                self._log.say(pid, ticks, None, stage, None, RESULT_REAPED, reaped)

    def _report_zombies_left(self, zombies: dict[tuple[int, int], int], stage: str) -> None:
        for (pid, ticks), parent in zombies.items():
            stat = read_stat(pid)
            holder = stat.ppid if stat is not None else parent
            self._log.say(
                pid,
                ticks,
                stat,
                stage,
                None,
                RESULT_STILL_ALIVE,
                f"still a zombie: its parent {holder} has not reaped it",
            )

    def _still_alive(self, pid: int, ticks: int, stage: str, signal_name: str | None, detail: str) -> None:
        stat = read_stat(pid)
        result = RESULT_STILL_ALIVE
        if stat is not None and stat.state == "Z":
            from gputui.agent.proc.threads import zombie_threads_summary

            threads = zombie_threads_summary(pid, ticks)
            states = threads["states"] if threads is not None else {}
            if states.get("D"):
                result = RESULT_UNINTERRUPTIBLE
            listed = ", ".join(f"{count} {state}" for state, count in states.items())
            detail = f"defunct leader: its threads live on ({listed}); memory is released when they exit"
        elif stat is not None and stat.state == "D":
            result = RESULT_UNINTERRUPTIBLE
            detail = "in uninterruptible sleep (D): it may not die until its I/O completes"
        self._log.say(pid, ticks, stat, stage, signal_name, result, detail)


def identity_mismatch(pid: int, ticks: int | None, stat: ProcStat | None) -> tuple[str, str] | None:
    """Why a listed target no longer names the process it was listed as: (result, reason); None: it does.

    ``ticks`` is the start time it was listed with, ``stat`` what ``/proc`` says of the pid now.
    """
    if ticks is None:
        # Without its start time a pid may name any process by now: never signal a bare pid.
        return RESULT_REFUSED, "no start time given: the process's identity cannot be checked"
    if stat is None:
        return RESULT_GONE, "no such process"
    if stat.start_ticks != ticks:
        return RESULT_CHANGED, f"process changed: pid {pid} now belongs to another process"
    return None
