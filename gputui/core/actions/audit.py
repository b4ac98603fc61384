"""The kill audit log: every intent written before anything is sent, every outcome as it comes back."""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from gputui.agent.protocol import RESULT_REQUESTED, RESULT_UNKNOWN, STAGE_INTENT, STAGE_REQUEST, audit_line
from gputui.core.actions.plan import KillPlan
from gputui.core.actions.replies import KillOutcome
from gputui.core.store import saved
from gputui.core.text import json_visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _local_user() -> str:
    """Who runs gputui, by real uid (not $USER/$LOGNAME, which sudo and su may leave pointing elsewhere)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


class AuditLog:
    """The kill audit log: one JSON line per intent and per outcome, appended (``saved.append_line``).

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
        self.observer: Callable[[dict[str, Any]], None] | None = None
        """Called with every line once it is written (a recording keeps them); on the writer's thread."""

    @property
    def path(self) -> Path:
        """The log file (its directory may not exist yet)."""
        return Path(saved.state_dir() if self.state_dir is None else self.state_dir) / saved.AUDIT_FILE

    def _line(
        self,
        plan: KillPlan,
        pid: int,
        start_ticks: int | None,
        name: str | None,
        command: Iterable[str],
        signal: str | None,
        stage: str,
        result: str,
        detail: str,
    ) -> dict[str, Any]:
        return audit_line(
            self._clock(),
            self.base(plan),
            pid=pid,
            start_ticks=start_ticks,
            name=name,
            command=list(command),
            signal=signal,
            stage=stage,
            result=result,
            detail=detail,
        )

    @staticmethod
    def base(plan: KillPlan) -> dict[str, Any]:
        """What every line of ``plan``'s kill carries (``protocol.audit_line``'s base)."""
        return {
            "host": plan.target,
            "boot_id": plan.boot_id,
            "local_user": _local_user(),
            "requested_signal": plan.signal,
        }

    def keeper_spec(self, plan: KillPlan) -> dict[str, Any]:
        """What a local kill's keeper needs to write the lines its client was gone for
        (``agent.kill.keeper``): the log's path, the lines' base, each target's command line."""
        return {
            "path": str(self.path),
            "base": self.base(plan),
            "commands": {str(t.pid): list(t.cmdline) for t in plan.targets},
        }

    def _write(self, lines: list[dict[str, Any]]) -> Path:
        path = Path(saved.ensure_state_dir(self.state_dir)) / saved.AUDIT_FILE
        for line in lines:
            saved.append_line(path, json_visible(line, separators=(",", ":")))
            if self.observer is not None:
                self.observer(line)
        return path

    def record(self, host: str, boot_id: str | None, entries: Iterable[dict[str, Any]]) -> Path:
        """Append other destructive actions' lines (a GPU reset's steps): each entry's fields after time,
        host, boot_id and local_user.

        Raises:
            saved.StoreError: The log cannot be written (one line): the action must not run.
        """
        base = {"host": host, "boot_id": boot_id, "local_user": _local_user()}
        return self._write([dict({"time": self._clock()}, **base, **entry) for entry in entries])

    def intent(self, plan: KillPlan) -> Path:
        """Write what ``plan`` will signal, before anything is sent.

        Raises:
            saved.StoreError: The log cannot be written (one line): the kill must not be sent.
        """
        then = (
            f", then KILL after {plan.escalate_s:g} s to what is still alive"
            if plan.escalate_s
            else f", then a look after {plan.wait_s:g} s"
            if plan.wait_s
            else ""
        )
        detail = f"{plan.signal}{' to the whole tree' if plan.tree else ''}{then}"
        lines = []
        for target in plan.targets:
            line = self._line(
                plan,
                target.pid,
                target.start_ticks,
                target.name,
                target.cmdline,
                plan.signal,
                STAGE_INTENT,
                RESULT_REQUESTED,
                detail,
            )
            line.update(tree=plan.tree, escalate_s=plan.escalate_s, wait_s=plan.wait_s)
            lines.append(line)
        return self._write(lines)

    def outcomes(self, plan: KillPlan, outcomes: Iterable[KillOutcome]) -> Path:
        """Append one line per outcome (an outcome's own argv, else the plan's for that pid).

        Raises:
            saved.StoreError: The log cannot be written (one line).
        """
        by_pid = {t.pid: t for t in plan.targets}
        lines = []
        for outcome in outcomes:
            known = by_pid.get(outcome.pid)
            command = list(outcome.cmdline) or (list(known.cmdline) if known is not None else [])
            lines.append(
                self._line(
                    plan,
                    outcome.pid,
                    outcome.start_ticks,
                    outcome.name,
                    command,
                    outcome.signal,
                    outcome.stage,
                    outcome.result,
                    outcome.detail,
                )
            )
        return self._write(lines)

    def unknown(self, plan: KillPlan, pids: Iterable[int], detail: str) -> Path:
        """Lines with result "unknown" for ``pids``: their command was sent, the answer never came.

        Raises:
            saved.StoreError: The log cannot be written (one line).
        """
        by_pid = {t.pid: t for t in plan.targets}
        lines = []
        for pid in pids:
            known = by_pid.get(pid)
            lines.append(
                self._line(
                    plan,
                    pid,
                    known.start_ticks if known else None,
                    known.name if known else None,
                    known.cmdline if known else (),
                    None,
                    STAGE_REQUEST,
                    RESULT_UNKNOWN,
                    detail,
                )
            )
        return self._write(lines)
