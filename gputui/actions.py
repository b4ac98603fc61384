"""Kill requests: what will be signalled, the agent command that does it, its outcomes, the audit log.

A plan is built from one snapshot and carries each process's identity (pid + start time in clock ticks +
the host's boot id), so the agent can refuse a pid that was reused between the confirmation and the signal.
The plan is also what the confirmation lists: pid, user, GPU MiB and command of everything to be signalled.
Nothing here signals anything; the agent does (see ``gputui/agent.py``).
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui import state
from gputui.analysis import build_forest, gpu_memory_by_pid
from gputui.model import STATE_ZOMBIE, HostSnapshot, Proc
from gputui.textsafe import json_visible

SIGNALS = ("INT", "TERM", "KILL")
HANDLED_RESULTS = frozenset({"sent", "exited", "killed", "gone"})
"""Final results that mean the process was dealt with (``gone``: it had already exited)."""
PROTECTED_PIDS = frozenset({0, 1})


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
    """

    pid: int
    start_ticks: int | None
    name: str | None = None
    user: str | None = None
    cmdline: tuple[str, ...] = ()
    gpu_mib: int | None = None
    descendant_of: int | None = None
    state: str | None = None


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
        notes: Human lines about substitutions and omissions (zombies, invisible pids).
    """

    target: str
    boot_id: str | None
    signal: str
    tree: bool
    escalate_s: float | None
    targets: tuple[KillTarget, ...]
    notes: tuple[str, ...] = ()

    @property
    def roots(self) -> tuple[KillTarget, ...]:
        """The requested processes (after zombie substitution): what the agent command names."""
        return tuple(t for t in self.targets if t.descendant_of is None)


@dataclass(frozen=True)
class KillOutcome:
    """One stage of what happened to one process.

    Attributes:
        stage: check, signal, wait, escalate or confirm.
        signal: The signal of that stage, None for checks.
        result: sent, exited, killed, refused, changed, gone, denied, uninterruptible, still_alive or error.
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
                descendant_of: int | None) -> KillTarget:
    return KillTarget(
        pid=proc.pid,
        start_ticks=proc.start_ticks,
        name=proc.name,
        user=proc.user,
        cmdline=proc.cmdline,
        gpu_mib=_gpu_mib(proc, snapshot, held),
        descendant_of=descendant_of,
        state=proc.state,
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
) -> KillPlan:
    """Work out what a kill request will signal, for the confirmation and for ``kill_command``.

    Args:
        snapshot: A full snapshot of the host (with its process list).
        pids: The requested process ids.
        signal: INT, TERM or KILL.
        tree: Signal each process's listed descendants too, children first.
        all_gpu: Every GPU process tree root on the host (implies ``tree``); ``pids`` may then be empty.
        escalate_s: Send KILL to survivors after this many seconds.
        read_only: Refuse with ReadOnlyError.

    Returns:
        The plan. A zombie is replaced by its parent (with a note): a zombie cannot be killed, reaping it is
        the parent's job. Zombie descendants are left out of the listing (they go when their parent does).

    Raises:
        ReadOnlyError: In read-only mode.
        PlanError: pid 0/1 or the agent itself was asked for, a pid is not in the snapshot, the signal is
            unknown, or nothing is left to signal.
    """
    if read_only:
        raise ReadOnlyError(f"{snapshot.target}: read-only mode: nothing is signalled")
    if signal not in SIGNALS:
        raise PlanError(f"unknown signal {signal!r}: use one of {', '.join(SIGNALS)}")
    if escalate_s is not None and not escalate_s > 0:
        raise PlanError("escalation delay must be a positive number of seconds")
    requested = list(dict.fromkeys(int(p) for p in pids))
    for pid in requested:
        _refuse_early(pid, snapshot)
    table = {p.pid: p for p in snapshot.processes}
    held = gpu_memory_by_pid(snapshot)
    notes: list[str] = []
    if all_gpu:
        tree = True
        for node in build_forest(snapshot):
            if node.proc.pid not in requested:
                requested.append(node.proc.pid)
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
            notes.append(f"pid {pid} is a zombie: its parent {parent.pid} will be signalled instead")
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
                    notes.append(f"pid {pid} is a zombie: it goes when its parent {member.ppid} is signalled")
                    continue
                listed_pids.add(pid)
                targets.append(_target_for(member, snapshot, held, root.pid))
        notes.append(
            "the agent re-reads each tree (children and process-group members) when it signals: processes "
            "started or double-forked away since this listing are signalled too"
        )
    for root in roots:
        targets.append(_target_for(root, snapshot, held, None))
    return KillPlan(
        target=snapshot.target,
        boot_id=snapshot.boot_id,
        signal=signal,
        tree=tree,
        escalate_s=escalate_s,
        targets=tuple(targets),
        notes=tuple(dict.fromkeys(notes)),
    )


def kill_command(plan: KillPlan) -> dict[str, Any]:
    """The agent's ``kill`` command for this plan (the link adds the request id)."""
    return {
        "cmd": "kill",
        "boot_id": plan.boot_id,
        "targets": [{"pid": t.pid, "start_ticks": t.start_ticks} for t in plan.roots],
        "signal": plan.signal,
        "tree": plan.tree,
        "escalate_s": plan.escalate_s,
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


def all_handled(outcomes: Iterable[KillOutcome]) -> bool:
    """Whether every process ended sent, exited, killed or already gone (nothing refused, denied, changed)."""
    final = final_outcomes(outcomes)
    return bool(final) and all(o.result in HANDLED_RESULTS for o in final.values())


def _local_user() -> str:
    """Who runs gputui, by real uid (not $USER/$LOGNAME, which sudo and su may leave pointing elsewhere)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def append_audit(
    plan: KillPlan,
    outcomes: Iterable[KillOutcome],
    state_dir: Path | None = None,
    now: float | None = None,
) -> Path:
    """Append one JSON line per outcome to the audit log and return its path.

    Fields: time (epoch s), host (target), boot_id, local_user (who ran gputui), pid, start_ticks, name,
    command (argv), signal (the one that stage sent; null for checks and waits), requested_signal, stage,
    result, detail. A plan whose request failed before any outcome came back is
    logged with result "unknown" for each requested process: a signal may or may not have been sent.

    Raises:
        state.StateError: The log cannot be written (one line).
    """
    directory = state.ensure_state_dir(state_dir)
    path = directory / state.AUDIT_FILE
    when = time.time() if now is None else now
    user = _local_user()
    by_pid = {t.pid: t for t in plan.targets}
    lines = []
    outcome_list = list(outcomes)
    for outcome in outcome_list:
        known = by_pid.get(outcome.pid)
        command = list(outcome.cmdline) or (list(known.cmdline) if known is not None else [])
        lines.append(
            {
                "time": when,
                "host": plan.target,
                "boot_id": plan.boot_id,
                "local_user": user,
                "pid": outcome.pid,
                "start_ticks": outcome.start_ticks,
                "name": outcome.name,
                "command": command,
                "signal": outcome.signal,
                "requested_signal": plan.signal,
                "stage": outcome.stage,
                "result": outcome.result,
                "detail": outcome.detail,
            }
        )
    if not outcome_list:
        for target in plan.roots:
            lines.append(
                {
                    "time": when,
                    "host": plan.target,
                    "boot_id": plan.boot_id,
                    "local_user": user,
                    "pid": target.pid,
                    "start_ticks": target.start_ticks,
                    "name": target.name,
                    "command": list(target.cmdline),
                    "signal": None,
                    "requested_signal": plan.signal,
                    "stage": "request",
                    "result": "unknown",
                    "detail": "no outcome came back from the agent",
                }
            )
    for line in lines:
        state.append_line(path, json_visible(line, separators=(",", ":")))
    return path
