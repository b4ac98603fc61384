"""The simulated collector's kill operations: the protocol's checks, signals, waits and escalation."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gputui.agent import protocol
from gputui.agent.args import optional_seconds
from gputui.agent.kill import messages as kill_messages
from gputui.agent.proc.proctree import deepest_first, related_map, walk
from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import Record, field
from gputui.transports.sim.scenario import SimProc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _true_zombie(proc: SimProc) -> bool:
    """State Z with no thread left: only its parent can make it go. A defunct leader (threads alive) is
    signalled like a live process: a signal ends its threads as soon as they are out of the driver."""
    return proc.state == "Z" and not proc.live_threads


class SimKills:
    """The kill half of ``SimLink``: the protocol's kill commands against the simulated processes.

    Checks and signals happen at once; the wait and escalation become due on the real clock and are settled
    on every command and sample (``_settle``), as the collector's own thread would.
    """

    target: str
    boot_id: str
    agent_pid: int
    _options: LinkOptions
    _clock: Callable[[], float]
    _lock: threading.Lock
    _closed: threading.Event
    _procs: dict[int, SimProc]
    _draining: list[tuple[int, int, float]]
    _closing_ports: list[tuple[int, float]]
    _server_pid: int
    _server_dead_at: float | None
    _ops: dict[int, SimKill]
    _next_op: int

    def _advance(self, now_s: float) -> None:
        raise NotImplementedError

    def _outcome(
        self,
        proc: SimProc | None,
        pid: int,
        ticks: Any,
        stage: str,
        signal: str | None,
        result: str,
        detail: str = "",
    ) -> dict[str, Any]:
        return kill_messages.outcome(
            pid,
            proc.start_ticks if proc else ticks,
            stage,
            signal,
            result,
            detail,
            name=proc.name if proc else None,
            user=proc.user if proc else None,
            cmdline=proc.cmdline if proc else (),
            gpu_mib=sum(proc.gpu_mib.values()) if proc else None,
            time=self._clock(),
        )

    def _say(
        self, op: SimKill, proc: SimProc, stage: str, signal: str | None, result: str, detail: str = ""
    ) -> None:
        op.add(self._outcome(proc, proc.pid, proc.start_ticks, stage, signal, result, detail))

    def _descendants(self, pid: int) -> list[SimProc]:
        """Descendants of ``pid``, deepest first (children are signalled before parents), walked as the
        collector walks a tree (the simulated processes have no process groups)."""
        children = related_map(
            (p.pid, p.ppid, None) for p in sorted(self._procs.values(), key=lambda p: p.pid)
        )
        return [self._procs[member] for member in deepest_first(walk([pid], children))]

    def _die(self, proc: SimProc, now_s: float) -> None:
        """Remove a process: its memory starts draining, its zombie children are reaped, the rest orphaned."""
        self._procs.pop(proc.pid, None)
        for gpu, mib in proc.gpu_mib.items():
            self._draining.append((gpu, mib, now_s))
        self._closing_ports.extend((port, now_s) for port in proc.listen_ports)
        if proc.pid == self._server_pid:
            self._server_dead_at = now_s
        for child in list(self._procs.values()):
            if child.ppid == proc.pid:
                if _true_zombie(child):
                    self._die(child, now_s)
                else:
                    child.ppid = 1

    def _deliver(self, proc: SimProc, signal: str, now_s: float) -> None:
        """A signal reaches a live process: KILL always ends it, TERM and INT unless it ignores them."""
        if signal == "KILL" or not proc.ignores_term:
            self._die(proc, now_s)

    def _kill(self, command: dict[str, Any]) -> dict[str, Any]:
        """Checks and signals now; the wait and escalation become due on the real clock (``_settle``)."""
        signal = str(command.get("signal") or "TERM")
        if signal not in protocol.SIGNAL_NAMES:
            raise LinkError(f"{self.target}: unknown signal {signal!r}")
        escalate_s = optional_seconds(command, "escalate_s")
        wait_s = optional_seconds(command, "wait_s")
        if signal == "KILL" and escalate_s is not None:
            wait_s, escalate_s = (wait_s if wait_s is not None else escalate_s), None
        with self._lock:
            now_s = self._clock()
            self._advance(now_s)
            self._next_op += 1
            op = SimKill(self._next_op, signal, escalate_s, wait_s, time.monotonic())
            self._ops[op.op] = op
            self._check_and_signal(op, command, now_s)
            if not op.done and (op.delay_s is None or not (op.watched or op.zombies)):
                self._finish(op, now_s)  # nothing to wait for: zombies are reaped or not, right now
        if not command.get("detach"):
            self._wait_op(op, None)
        return self._reply(op, 0)

    def _check_and_signal(self, op: SimKill, command: dict[str, Any], now_s: float) -> None:
        tree = bool(command.get("tree"))
        members: list[SimProc] = []
        asked_zombies: list[SimProc] = []
        # The trees' members as listed come after the roots: signalled too, should their root be gone.
        listed = list(command.get("members") or ()) if tree else []
        for entry in list(command.get("targets") or ()) + listed:
            pid = int(entry.get("pid"))
            ticks = entry.get("start_ticks")
            proc = self._procs.get(pid)
            if proc is not None and proc in members + asked_zombies:
                continue
            refusal = self._refusal(command, pid, ticks, proc)
            if refusal is not None:
                op.add(self._outcome(proc, pid, ticks, protocol.STAGE_CHECK, None, *refusal))
            elif proc is not None and _true_zombie(proc):
                asked_zombies.append(proc)
            elif proc is not None:
                for member in (self._descendants(pid) if tree else []) + [proc]:
                    if member not in members:
                        members.append(member)
        signalled = {m.pid for m in members if not _true_zombie(m)}
        for zombie in asked_zombies:
            if zombie.ppid in signalled:
                members.append(zombie)
            else:
                parent = f"zombie: cannot be killed; signal its parent {zombie.ppid}"
                self._say(op, zombie, protocol.STAGE_CHECK, None, protocol.RESULT_REFUSED, parent)
        for member in members:
            if _true_zombie(member):
                op.zombies.append((member, member.ppid))
                continue
            self._say(op, member, protocol.STAGE_SIGNAL, op.signal, protocol.RESULT_SENT)
            op.watched.append(member)
            if member.pid in self._procs:
                self._deliver(member, op.signal, now_s)
        if op.delay_s is not None and all(m.pid not in self._procs for m in op.watched):
            self._finish(op, now_s)  # everything went at once: the wait ends early, as the agent's does

    def _refusal(
        self, command: dict[str, Any], pid: int, ticks: Any, proc: SimProc | None
    ) -> tuple[str, str] | None:
        """(result, detail) when a target is not signalled, as the collector's checks would say."""
        if self._options.read_only:
            return protocol.RESULT_REFUSED, "read-only: nothing is signalled"
        if command.get("boot_id") != self.boot_id:
            return (
                protocol.RESULT_CHANGED,
                "process changed: the host rebooted since it was listed (boot id differs)",
            )
        if pid == 1:
            return protocol.RESULT_REFUSED, "pid 1 (init) is never signalled"
        if pid == self.agent_pid:
            return protocol.RESULT_REFUSED, "this is the gputui collector itself"
        if proc is None:
            return protocol.RESULT_GONE, "no such process"
        if ticks is not None and int(ticks) != proc.start_ticks:
            return protocol.RESULT_CHANGED, f"process changed: pid {pid} now belongs to another process"
        return None

    def _finish(self, op: SimKill, now_s: float, abandoned: bool = False) -> None:
        """The end of an operation: what went, then the escalation (or the look) for what did not."""
        alive = [m for m in op.watched if m.pid in self._procs]
        if op.delay_s is not None:
            for member in op.watched:
                if member.pid not in self._procs:
                    self._say(
                        op,
                        member,
                        protocol.STAGE_WAIT,
                        None,
                        protocol.RESULT_EXITED,
                        f"gone after {op.signal}",
                    )
        self._report_zombies(op, protocol.STAGE_WAIT, final=False)
        for member in alive:
            if abandoned and op.escalate_s is not None:
                detail = f"alive after {op.signal}; KILL not sent: the escalation was abandoned"
                self._say(op, member, protocol.STAGE_ABANDON, None, protocol.RESULT_ABANDONED, detail)
            elif abandoned:
                self._say(
                    op,
                    member,
                    protocol.STAGE_WAIT,
                    None,
                    protocol.RESULT_STILL_ALIVE,
                    f"still alive after {op.signal}",
                )
            elif op.escalate_s is not None:
                escalated = f"still alive after {op.escalate_s:g} s: escalated"
                self._say(op, member, protocol.STAGE_ESCALATE, "KILL", protocol.RESULT_SENT, escalated)
                self._deliver(member, "KILL", now_s)
            elif op.delay_s is not None:
                detail = f"still alive {op.delay_s:g} s after {op.signal}"
                self._say(op, member, protocol.STAGE_WAIT, None, protocol.RESULT_STILL_ALIVE, detail)
        if op.escalate_s is not None and not abandoned:
            for member in alive:
                self._say(
                    op, member, protocol.STAGE_CONFIRM, "KILL", protocol.RESULT_KILLED, "gone after KILL"
                )
            self._report_zombies(op, protocol.STAGE_CONFIRM, final=True)
        self._report_zombies(op, protocol.STAGE_ABANDON if abandoned else protocol.STAGE_WAIT, final=True)
        op.watched = [m for m in alive if m.pid in self._procs]
        op.done = True

    def _report_zombies(self, op: SimKill, stage: str, final: bool) -> None:
        """Zombies of the operation that were reaped; with ``final``, those left too."""
        remaining = []
        for zombie, parent in op.zombies:
            if zombie.pid not in self._procs:
                self._say(op, zombie, stage, None, protocol.RESULT_REAPED, f"reaped with its parent {parent}")
            elif final:
                left = f"still a zombie: its parent {zombie.ppid} has not reaped it"
                self._say(op, zombie, stage, None, protocol.RESULT_STILL_ALIVE, left)
            else:
                remaining.append((zombie, parent))
        op.zombies = remaining

    def _settle(self) -> None:
        """Finish every operation whose delay is up (with the lock held: on every command and sample)."""
        now_mono = time.monotonic()
        for op in self._ops.values():
            if not op.done and op.due_mono is not None and now_mono >= op.due_mono:
                self._finish(op, self._clock())

    def _wait_op(self, op: SimKill, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._lock:
                self._settle()
                if op.done:
                    return
                due = op.due_mono if op.due_mono is not None else time.monotonic()
            until = due if deadline is None else min(due, deadline)
            if self._closed.wait(max(0.0, until - time.monotonic())) or (
                deadline is not None and time.monotonic() >= deadline
            ):
                with self._lock:
                    self._settle()
                return

    def _op(self, command: dict[str, Any]) -> SimKill:
        op = self._ops.get(command.get("op"))  # type: ignore[arg-type]
        if op is None:
            raise LinkError(f"{self.target}: kill_wait failed: no kill operation {command.get('op')!r} here")
        return op

    def _reply(self, op: SimKill, since: Any) -> dict[str, Any]:
        with self._lock:
            outcomes = list(op.outcomes)
            now_mono = time.monotonic()
            pending = (
                []
                if op.done
                else [
                    kill_messages.pending(
                        m.pid,
                        m.start_ticks,
                        m.name,
                        "KILL" if op.escalate_s is not None else None,
                        None if op.due_mono is None else max(0.0, op.due_mono - now_mono),
                    )
                    for m in op.watched
                    if m.pid in self._procs
                ]
            )
            return kill_messages.kill_reply(
                op.op,
                outcomes[int(since or 0) :],
                len(outcomes),
                op.done,
                pending,
                op.escalate_s,
                op.wait_s,
                round((op.finished_mono or now_mono) - op.started_mono, 3),
            )


class SimKill(Record, frozen=False):
    """One simulated kill operation: its outcomes, and what it still watches until ``due_mono``."""

    op: int
    signal: str
    escalate_s: float | None
    wait_s: float | None
    started_mono: float
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    watched: list[SimProc] = field(default_factory=list)
    zombies: list[tuple[SimProc, int]] = field(default_factory=list)
    finished_mono: float | None = None
    _done: bool = False

    @property
    def delay_s(self) -> float | None:
        return self.escalate_s if self.escalate_s is not None else self.wait_s

    @property
    def due_mono(self) -> float | None:
        return None if self.delay_s is None else self.started_mono + self.delay_s

    @property
    def done(self) -> bool:
        return self._done

    @done.setter
    def done(self, value: bool) -> None:
        self._done = value
        if value and self.finished_mono is None:
            self.finished_mono = time.monotonic()

    def add(self, outcome: dict[str, Any]) -> None:
        self.outcomes.append(outcome)
