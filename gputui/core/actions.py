"""Kill requests: what will be signalled, the agent commands that do it, their outcomes, the audit log.

A plan is built from one snapshot and carries each process's identity (pid + start time in clock ticks +
the host's boot id), so the agent can refuse a pid that was reused between the confirmation and the signal.
The plan is also what the confirmation lists: pid, user, GPU MiB and command of everything to be signalled.
Nothing here signals anything; the agent does (see ``gputui/agent.py``), and ``KillRun`` drives one plan
through a link: intent in the audit log first, the kill, its outcomes as they come, an abandon if asked.
The names of stages and results are the agent's (its kill vocabulary block).
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui.agent import (
    KILL_ABANDON_COMMAND,
    KILL_COMMAND,
    KILL_WAIT_COMMAND,
    RESULT_REQUESTED,
    RESULT_UNKNOWN,
    RESULTS_GONE,
    STAGE_INTENT,
    STAGE_REQUEST,
)
from gputui.core import state
from gputui.core.analysis import KilledJob, gpu_memory_by_pid, graphics_only_pids, kill_all_roots
from gputui.core.model import STATE_ZOMBIE, HostSnapshot, Proc
from gputui.core.textsafe import json_visible
from gputui.transports.base import HostLink, LinkError

SIGNALS = ("INT", "TERM", "KILL")
PROTECTED_PIDS = frozenset({0, 1})
DEFAULT_ESCALATE_S = 5.0
"""Seconds between TERM and KILL (``t``, ``X``, ``gputui kill``), and how long a kill without escalation
watches before it says whether the process is still alive."""
REQUEST_TIMEOUT_S = 30.0
"""Deadline of the kill command itself (the checks and the signals) and of an abandon."""


class PlanError(Exception):
    """The request cannot be planned (pid 1, unknown pid, nothing to do). ``str()`` is one line."""


class ReadOnlyError(PlanError):
    """A kill was asked for in read-only mode."""


@dataclass(frozen=True)
class KillTarget:
    """One process the plan will signal.

    Attributes:
        pid: Process id on the target host.
        start_ticks: Its start time in clock ticks since boot (identity with pid and boot id).
        name: Process name (untrusted text).
        user: Owner's user name (untrusted text).
        cmdline: argv (untrusted text).
        gpu_mib: GPU memory it holds over all GPUs in MiB, None when the driver would not say.
        descendant_of: The requested pid whose tree brought it in; None for a requested pid itself.
        state: Its process state letter when listed.
        graphics_only: Every GPU lists it as a graphics process only (an X server, a compositor).
    """

    pid: int
    start_ticks: int | None
    name: str | None = None
    user: str | None = None
    cmdline: tuple[str, ...] = ()
    gpu_mib: int | None = None
    descendant_of: int | None = None
    state: str | None = None
    graphics_only: bool = False


@dataclass(frozen=True)
class ZombieNote:
    """A zombie a plan does not signal (a zombie cannot be killed).

    Attributes:
        pid: The zombie.
        parent: Its parent, which the plan signals.
        asked: It was asked for by itself and its parent is signalled instead; False: it is in a tree and goes
            when its parent does.
    """

    pid: int
    parent: int
    asked: bool

    @property
    def text(self) -> str:
        """The note's line, as ``KillPlan.notes`` carries it."""
        if self.asked:
            return f"pid {self.pid} is a zombie: its parent {self.parent} will be signalled instead"
        return f"pid {self.pid} is a zombie: it goes when its parent {self.parent} is signalled"


@dataclass(frozen=True)
class KillPlan:
    """Everything one kill request will signal, in signal order (children before their roots).

    Attributes:
        target: Host target word.
        boot_id: The host's boot id when the snapshot was taken (the agent refuses after a reboot).
        signal: INT, TERM or KILL.
        tree: Whether descendants are signalled too (the agent re-reads them at kill time).
        escalate_s: Seconds after which survivors get KILL; None: no escalation.
        targets: What will be signalled, children first; the roots are the entries with ``descendant_of``
            None.
        notes: Human lines about substitutions and omissions (zombies, invisible pids, graphics holders).
        wait_s: Without escalation, seconds after which the agent says whether each process is gone.
        zombies: The zombies among those notes, as data.
    """

    target: str
    boot_id: str | None
    signal: str
    tree: bool
    escalate_s: float | None
    targets: tuple[KillTarget, ...]
    notes: tuple[str, ...] = ()
    wait_s: float | None = None
    zombies: tuple[ZombieNote, ...] = ()

    @property
    def roots(self) -> tuple[KillTarget, ...]:
        """The requested processes (after zombie substitution): what the agent command names."""
        return tuple(t for t in self.targets if t.descendant_of is None)


@dataclass(frozen=True)
class KillOutcome:
    """One stage of what happened to one process.

    Attributes:
        stage: One of the agent's ``KILL_STAGES``.
        signal: The signal that stage sent (``SIGNALLING_STAGES``) or concerns; None for checks and waits.
        result: One of the agent's ``KILL_RESULTS``.
        detail: One human line (untrusted text from the agent).
    """

    pid: int
    start_ticks: int | None
    name: str | None
    stage: str
    signal: str | None
    result: str
    detail: str = ""
    user: str | None = None
    cmdline: tuple[str, ...] = ()
    gpu_mib: int | None = None


def _gpu_mib(proc: Proc, snapshot: HostSnapshot, held: dict[int, dict[int, int]]) -> int | None:
    for gpu in snapshot.gpus:
        for listed in gpu.processes:
            if listed.visible and listed.pid == proc.pid and listed.used_mib is None:
                return None
    return sum(held.get(proc.pid, {}).values())


def _target_for(proc: Proc, snapshot: HostSnapshot, held: dict[int, dict[int, int]],
                descendant_of: int | None, graphics: set[int]) -> KillTarget:
    return KillTarget(
        pid=proc.pid,
        start_ticks=proc.start_ticks,
        name=proc.name,
        user=proc.user,
        cmdline=proc.cmdline,
        gpu_mib=_gpu_mib(proc, snapshot, held),
        descendant_of=descendant_of,
        state=proc.state,
        graphics_only=proc.pid in graphics,
    )


def _refuse_early(pid: int, snapshot: HostSnapshot) -> None:
    if pid in PROTECTED_PIDS:
        what = "init" if pid == 1 else "not a process"
        raise PlanError(f"pid {pid} is {what}: it is never signalled")
    if snapshot.agent_pid is not None and pid == snapshot.agent_pid:
        raise PlanError(f"pid {pid} is the gputui agent itself: it is never signalled")


def _descendants(root: int, children: dict[int, list[int]]) -> list[tuple[int, int]]:
    """(pid, depth) of every listed descendant of ``root``, deepest first, then by pid.

    ``children`` maps a pid to its children and to the members of the process group it leads: a
    double-forked grandchild whose middle parent died is tied to the tree only by its group, and the agent
    signals it as part of the tree, so the listing must show it too.
    """
    found: dict[int, int] = {}
    frontier = [root]
    depth = 0
    seen = {root}
    while frontier:
        depth += 1
        nxt: list[int] = []
        for pid in frontier:
            for child in children.get(pid, ()):
                if child in seen or child in PROTECTED_PIDS:
                    continue
                seen.add(child)
                found[child] = depth
                nxt.append(child)
        frontier = nxt
    return sorted(found.items(), key=lambda item: (-item[1], item[0]))


def plan_kill(
    snapshot: HostSnapshot,
    pids: Iterable[int],
    signal: str = "TERM",
    tree: bool = False,
    all_gpu: bool = False,
    escalate_s: float | None = None,
    read_only: bool = False,
    wait_s: float | None = None,
    include_graphics: bool = False,
) -> KillPlan:
    """Work out what a kill request will signal, for the confirmation and for ``kill_command``.

    Args:
        snapshot: A full snapshot of the host (with its process list).
        pids: The requested process ids.
        signal: INT, TERM or KILL.
        tree: Signal each process's listed descendants too, children first.
        all_gpu: The root of every GPU job on the host (``analysis.kill_all_roots``; implies ``tree``);
            ``pids`` may then be empty.
        escalate_s: Send KILL to survivors after this many seconds.
        read_only: Refuse with ReadOnlyError.
        wait_s: Without escalation, say after this many seconds whether each process is gone.
        include_graphics: With ``all_gpu``, take graphics-only holders (the display stack) too.

    Returns:
        The plan. A zombie is replaced by its parent (with a note): a zombie cannot be killed, reaping it is
        the parent's job. Zombie descendants are left out of the listing (they go when their parent does).
        pid 1 is never in it.

    Raises:
        ReadOnlyError: In read-only mode.
        PlanError: pid 0/1 or the agent itself was asked for, a pid is not in the snapshot, the signal is
            unknown, or nothing is left to signal.
    """
    if read_only:
        raise ReadOnlyError(f"{snapshot.target}: read-only mode: nothing is signalled")
    if signal not in SIGNALS:
        raise PlanError(f"unknown signal {signal!r}: use one of {', '.join(SIGNALS)}")
    for delay in (escalate_s, wait_s):
        if delay is not None and not delay > 0:
            raise PlanError("escalation delay must be a positive number of seconds")
    requested = list(dict.fromkeys(int(p) for p in pids))
    for pid in requested:
        _refuse_early(pid, snapshot)
    table = {p.pid: p for p in snapshot.processes}
    held = gpu_memory_by_pid(snapshot)
    graphics = graphics_only_pids(snapshot)
    notes: list[str] = []
    zombies: list[ZombieNote] = []
    if all_gpu:
        tree = True
        roots_of_jobs, left_out = kill_all_roots(snapshot, include_graphics)
        notes.extend(left_out)
        for pid in roots_of_jobs:
            if pid == snapshot.agent_pid:
                notes.append(f"pid {pid} is the gputui agent itself: never signalled")
            elif pid not in requested:
                requested.append(pid)
        for gpu in snapshot.gpus:
            for listed in gpu.processes:
                if not listed.visible:
                    notes.append(
                        f"pid {listed.pid} on GPU{gpu.index} is not visible here (another PID namespace): "
                        "not signalled"
                    )
    roots: list[Proc] = []
    for pid in requested:
        proc = table.get(pid)
        if proc is None:
            raise PlanError(
                f"pid {pid} is not a GPU process or part of a GPU process tree on {snapshot.target}"
            )
        if proc.state == STATE_ZOMBIE:
            parent = table.get(proc.ppid) if proc.ppid is not None else None
            if proc.ppid in PROTECTED_PIDS or parent is None:
                notes.append(
                    f"pid {pid} is a zombie whose parent is init: it holds nothing and cannot be signalled; "
                    "skipped"
                )
                continue
            zombies.append(ZombieNote(pid, parent.pid, asked=True))
            notes.append(zombies[-1].text)
            proc = parent
            _refuse_early(proc.pid, snapshot)
        if all(r.pid != proc.pid for r in roots):
            roots.append(proc)
    if not roots:
        raise PlanError("nothing to signal" + (f": {notes[-1]}" if notes else ""))

    targets: list[KillTarget] = []
    listed_pids: set[int] = set()
    if tree:
        children: dict[int, list[int]] = {}
        for proc in snapshot.processes:
            if proc.ppid is not None and proc.ppid != proc.pid:
                children.setdefault(proc.ppid, []).append(proc.pid)
            # Process groups, where the collector reports them (an optional ``pgid`` on Proc).
            pgid = getattr(proc, "pgid", None)
            if isinstance(pgid, int) and pgid != proc.pid and pgid != proc.ppid:
                children.setdefault(pgid, []).append(proc.pid)
        root_pids = {r.pid for r in roots}
        for root in roots:
            for pid, _depth in _descendants(root.pid, children):
                member = table[pid]
                if pid in listed_pids or pid in root_pids:
                    continue
                if member.state == STATE_ZOMBIE:
                    if member.ppid is not None:
                        zombies.append(ZombieNote(pid, member.ppid, asked=False))
                        notes.append(zombies[-1].text)
                    continue
                listed_pids.add(pid)
                targets.append(_target_for(member, snapshot, held, root.pid, graphics))
        notes.append(
            "the agent re-reads each tree (children and process-group members) when it signals: processes "
            "started or double-forked away since this listing are signalled too"
        )
    for root in roots:
        targets.append(_target_for(root, snapshot, held, None, graphics))
    return KillPlan(
        target=snapshot.target,
        boot_id=snapshot.boot_id,
        signal=signal,
        tree=tree,
        escalate_s=escalate_s,
        targets=tuple(targets),
        notes=tuple(dict.fromkeys(notes)),
        wait_s=None if escalate_s is not None else wait_s,
        zombies=tuple(dict.fromkeys(zombies)),
    )


def kill_command(plan: KillPlan, detach: bool = True) -> dict[str, Any]:
    """The agent's ``kill`` command for this plan (the link adds the request id).

    ``detach``: the agent answers right after the signals; ``kill_wait`` then brings the rest.
    """
    return {
        "cmd": KILL_COMMAND,
        "boot_id": plan.boot_id,
        "targets": [{"pid": t.pid, "start_ticks": t.start_ticks} for t in plan.roots],
        # The trees as listed and confirmed: signalled even if their root is gone when the command runs.
        "members": [{"pid": t.pid, "start_ticks": t.start_ticks} for t in plan.targets
                    if t.descendant_of is not None],
        "signal": plan.signal,
        "tree": plan.tree,
        "escalate_s": plan.escalate_s,
        "wait_s": plan.wait_s,
        "detach": detach,
    }


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_outcomes(result: dict[str, Any]) -> list[KillOutcome]:
    """The outcomes of a ``kill`` reply's result, in the agent's order.

    Raises:
        ValueError: The result has no outcome list, or an outcome has no pid (one-line message).
    """
    raw = result.get("outcomes") if isinstance(result, dict) else None
    if not isinstance(raw, list):
        raise ValueError("the agent's kill reply has no outcome list")
    outcomes = []
    for item in raw:
        if not isinstance(item, dict) or _opt_int(item.get("pid")) is None:
            raise ValueError("the agent's kill reply has an outcome without a pid")
        cmdline = item.get("cmdline")
        outcomes.append(
            KillOutcome(
                pid=int(item["pid"]),
                start_ticks=_opt_int(item.get("start_ticks")),
                name=_opt_str(item.get("name")),
                stage=str(item.get("stage") or ""),
                signal=_opt_str(item.get("signal")),
                result=str(item.get("result") or "error"),
                detail=str(item.get("detail") or ""),
                user=_opt_str(item.get("user")),
                cmdline=tuple(str(a) for a in cmdline) if isinstance(cmdline, list) else (),
                gpu_mib=_opt_int(item.get("gpu_mib")),
            )
        )
    return outcomes


def final_outcomes(outcomes: Iterable[KillOutcome]) -> dict[int, KillOutcome]:
    """pid -> the last stage reported for it (what finally happened)."""
    last: dict[int, KillOutcome] = {}
    for outcome in outcomes:
        last[outcome.pid] = outcome
    return last


def all_gone(outcomes: Iterable[KillOutcome]) -> bool:
    """Whether every process ended gone (exited, killed, reaped, or already gone before its signal)."""
    final = final_outcomes(outcomes)
    return bool(final) and all(o.result in RESULTS_GONE for o in final.values())


@dataclass(frozen=True)
class Pending:
    """A signalled process the agent is still watching.

    Attributes:
        pid: Process id.
        start_ticks: Its start time in clock ticks.
        name: Its name (untrusted text).
        signal: What it gets when the delay is up ("KILL"), None when the agent only looks then.
        due_in_s: Seconds until then, None when not known.
    """

    pid: int
    start_ticks: int | None
    name: str | None
    signal: str | None
    due_in_s: float | None


@dataclass(frozen=True)
class KillReply:
    """One answer about a kill operation.

    Attributes:
        op: The agent's operation id (for ``kill_wait`` and ``kill_abandon``).
        outcomes: The outcomes this answer adds.
        count: How many outcomes the operation has reported so far (the next ``since``).
        done: Nothing is pending any more.
        pending: What the agent still watches or will KILL.
        elapsed_s: Seconds since the operation started (to its end once done).
    """

    op: int | None
    outcomes: tuple[KillOutcome, ...]
    count: int
    done: bool
    pending: tuple[Pending, ...] = ()
    elapsed_s: float | None = None


def parse_reply(result: dict[str, Any]) -> KillReply:
    """A ``kill`` / ``kill_wait`` / ``kill_abandon`` result.

    Raises:
        ValueError: No outcome list, or an outcome without a pid (one-line message).
    """
    outcomes = tuple(parse_outcomes(result))
    pending = []
    for item in result.get("pending") or ():
        if isinstance(item, dict) and _opt_int(item.get("pid")) is not None:
            due = item.get("due_in_s")
            pending.append(
                Pending(
                    pid=int(item["pid"]),
                    start_ticks=_opt_int(item.get("start_ticks")),
                    name=_opt_str(item.get("name")),
                    signal=_opt_str(item.get("signal")),
                    due_in_s=_opt_float(due),
                )
            )
    count = _opt_int(result.get("count"))
    elapsed = result.get("elapsed_s")
    return KillReply(
        op=_opt_int(result.get("op")),
        outcomes=outcomes,
        count=len(outcomes) if count is None else count,
        # An agent that does not say is one that answered at the end (the kill command without detach).
        done=bool(result.get("done", True)),
        pending=tuple(pending),
        elapsed_s=_opt_float(elapsed),
    )


def _local_user() -> str:
    """Who runs gputui, by real uid (not $USER/$LOGNAME, which sudo and su may leave pointing elsewhere)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


class AuditLog:
    """The kill audit log: one JSON line per intent and per outcome, appended (``state.append_line``).

    Fields: time (epoch s), host (target), boot_id, local_user (who ran gputui, by real uid), pid,
    start_ticks, name, command (argv), signal (the one that stage sent or, for an intent, will send; null for
    checks and waits), requested_signal, stage, result, detail; intent lines add tree, escalate_s and wait_s.

    Args:
        state_dir: Where ``audit.jsonl`` goes (None: the XDG state directory).
        clock: Epoch seconds for the lines' time.
    """

    def __init__(self, state_dir: Path | None = None, clock: Any = None) -> None:
        self.state_dir = state_dir
        self._clock = clock or time.time

    @property
    def path(self) -> Path:
        """The log file (its directory may not exist yet)."""
        return (state.state_dir() if self.state_dir is None else Path(self.state_dir)) / state.AUDIT_FILE

    def _line(self, plan: KillPlan, pid: int, start_ticks: int | None, name: str | None,
              command: Iterable[str], signal: str | None, stage: str, result: str,
              detail: str) -> dict[str, Any]:
        return {
            "time": self._clock(),
            "host": plan.target,
            "boot_id": plan.boot_id,
            "local_user": _local_user(),
            "pid": pid,
            "start_ticks": start_ticks,
            "name": name,
            "command": list(command),
            "signal": signal,
            "requested_signal": plan.signal,
            "stage": stage,
            "result": result,
            "detail": detail,
        }

    def _write(self, lines: list[dict[str, Any]]) -> Path:
        directory = state.ensure_state_dir(self.state_dir)
        path = directory / state.AUDIT_FILE
        for line in lines:
            state.append_line(path, json_visible(line, separators=(",", ":")))
        return path

    def intent(self, plan: KillPlan) -> Path:
        """Write what ``plan`` will signal, before anything is sent.

        Raises:
            state.StateError: The log cannot be written (one line): the kill must not be sent.
        """
        then = (f", then KILL after {plan.escalate_s:g} s to what is still alive" if plan.escalate_s
                else f", then a look after {plan.wait_s:g} s" if plan.wait_s else "")
        detail = f"{plan.signal}{' to the whole tree' if plan.tree else ''}{then}"
        lines = []
        for target in plan.targets:
            line = self._line(plan, target.pid, target.start_ticks, target.name, target.cmdline, plan.signal,
                              STAGE_INTENT, RESULT_REQUESTED, detail)
            line.update(tree=plan.tree, escalate_s=plan.escalate_s, wait_s=plan.wait_s)
            lines.append(line)
        return self._write(lines)

    def outcomes(self, plan: KillPlan, outcomes: Iterable[KillOutcome]) -> Path:
        """Append one line per outcome (an outcome's own argv, else the plan's for that pid).

        Raises:
            state.StateError: The log cannot be written (one line).
        """
        by_pid = {t.pid: t for t in plan.targets}
        lines = []
        for outcome in outcomes:
            known = by_pid.get(outcome.pid)
            command = list(outcome.cmdline) or (list(known.cmdline) if known is not None else [])
            lines.append(self._line(plan, outcome.pid, outcome.start_ticks, outcome.name, command,
                                    outcome.signal, outcome.stage, outcome.result, outcome.detail))
        return self._write(lines)

    def unknown(self, plan: KillPlan, pids: Iterable[int], detail: str) -> Path:
        """Lines with result "unknown" for ``pids``: their command was sent, the answer never came.

        Raises:
            state.StateError: The log cannot be written (one line).
        """
        by_pid = {t.pid: t for t in plan.targets}
        lines = []
        for pid in pids:
            known = by_pid.get(pid)
            lines.append(self._line(
                plan, pid, known.start_ticks if known else None, known.name if known else None,
                known.cmdline if known else (), None, STAGE_REQUEST, RESULT_UNKNOWN, detail,
            ))
        return self._write(lines)


class KillRun:
    """One confirmed plan driven through a link: intent, kill, outcomes as they come, abandon on request.

    Every step's outcomes go to the audit log (None: not audited, ``--no-audit`` and the demo) as soon as
    they arrive. Used from one thread at a time (the CLI's main thread, or one UI worker).

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

    def _take(self, reply: KillReply) -> KillReply:
        new = list(reply.outcomes)
        self.outcomes.extend(new)
        self._count = max(self._count, reply.count)
        self.pending = reply.pending
        self.done = reply.done
        self.elapsed_s = reply.elapsed_s
        if reply.op is not None:
            self.op = reply.op
        if self.audit is not None and new:
            try:
                self.audit.outcomes(self.plan, new)
            except state.StateError as exc:
                self.audit_errors.append(str(exc))
        return reply

    def start(self) -> KillReply:
        """Write the intent, send the kill; returns the first answer (the checks and the signals).

        Raises:
            state.StateError: The audit log cannot be written: nothing was sent.
            LinkError: The host could not be asked (the audit log says the outcome is unknown), or answered
                badly.
        """
        if self.audit is not None:
            self.audit.intent(self.plan)
        try:
            result = self.link.request(kill_command(self.plan), REQUEST_TIMEOUT_S)
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
        command = {"cmd": KILL_WAIT_COMMAND, "op": self.op, "since": self._count, "timeout_s": timeout_s}
        return self._ask(command, timeout_s + self.WAIT_MARGIN_S)

    def abandon(self) -> KillReply:
        """Cancel the escalation unless it is under way; returns what it leaves (result abandoned).

        Raises:
            LinkError: As for ``wait``.
        """
        if self.done or self.op is None:
            return KillReply(self.op, (), self._count, True)
        command = {"cmd": KILL_ABANDON_COMMAND, "op": self.op, "since": self._count}
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
        except state.StateError as exc:
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
