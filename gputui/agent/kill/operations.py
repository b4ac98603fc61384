"""The kill commands (``kill``, ``kill_wait``, ``kill_abandon``): checking them, and the operations they
started."""

from __future__ import annotations

import threading
import time

from gputui.agent.args import CommandError, optional_seconds
from gputui.agent.kill.kept import KeptOperation
from gputui.agent.kill.operation import KILL_KEEP_S, KillContext, KillOperation
from gputui.agent.kill.signals import SIGNALS
from gputui.agent.protocol import (
    ESCALATE_MAX_S,
    KILL_ABANDON_COMMAND,
    KILL_COMMAND,
    KILL_WAIT_COMMAND,
    SIGNAL_NAMES,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class KillOperations:
    """Every kill operation of one collector, by id, kept ``KILL_KEEP_S`` after it finished.

    Args:
        context: What each operation needs of the collector.
    """

    def __init__(self, context: KillContext, keeper: bool = False) -> None:
        self.context = context
        self.keeper = keeper
        """Hand each kill that goes on after its signals to a keeper process (``keeper``): the local
        collector, whose process is the client's."""
        self._lock = threading.Lock()
        self._operations: dict[int, KillOperation | KeptOperation] = {}
        self._next_id = 0

    def handle(self, name: str, command: dict[str, Any]) -> dict[str, Any]:
        """Answer one of ``protocol.KILL_COMMANDS``; raises CommandError for a malformed one."""
        if name == KILL_COMMAND:
            return self.kill(command)
        operation, since = self._operation(command)
        if name == KILL_WAIT_COMMAND:
            operation.wait(optional_seconds(command, "timeout_s"))
        elif name == KILL_ABANDON_COMMAND:
            operation.abandon()
        return operation.reply(since)

    def kill(self, command: dict[str, Any]) -> dict[str, Any]:
        """The ``kill`` command (``protocol.KILL_COMMAND``).

        Checks and signals in this thread; the wait, the escalation and the confirmation then run on a thread
        of the operation's own, which finishes whether or not the client stays (``pending``). Answers at once
        with ``detach``, else once the whole operation is done (``KillOperation.reply``).
        """
        signal_name = command.get("signal") or "TERM"
        if signal_name not in SIGNAL_NAMES:
            raise CommandError("signal must be one of {}".format(", ".join(SIGNAL_NAMES)))
        raw_targets = command.get("targets")
        if not isinstance(raw_targets, list) or not raw_targets:
            raise CommandError("targets must be a non-empty list of {pid, start_ticks}")
        raw_members = command.get("members") or []
        if not isinstance(raw_members, list):
            raise CommandError("members must be a list of {pid, start_ticks}")
        targets: list[tuple[int, int | None]] = []
        owners: dict[tuple[int, int | None], dict[str, Any]] = {}
        for item in raw_targets + raw_members:
            if not isinstance(item, dict):
                raise CommandError("each target must be an object with pid and start_ticks")
            pid = item.get("pid")
            ticks = item.get("start_ticks")
            if isinstance(pid, bool) or not isinstance(pid, int):
                raise CommandError("target pid must be an integer")
            if ticks is not None and (isinstance(ticks, bool) or not isinstance(ticks, int)):
                raise CommandError("target start_ticks must be an integer")
            owner = item.get("owner")
            if owner is not None:
                if not isinstance(owner, dict) or not isinstance(owner.get("kind"), str):
                    raise CommandError("a target's owner must be an object with a kind and an id")
                owners[(pid, ticks)] = {"kind": owner["kind"], "id": owner.get("id")}
            targets.append((pid, ticks))
        if not command.get("tree"):
            del targets[len(raw_targets) :]  # members only mean something to a tree kill
        escalate_s = optional_seconds(command, "escalate_s")
        if escalate_s is not None and escalate_s > ESCALATE_MAX_S:
            raise CommandError(f"escalate_s must be seconds up to {ESCALATE_MAX_S:g}, or null")
        wait_s = optional_seconds(command, "wait_s")
        with self._lock:
            now = time.monotonic()
            for old_id in [i for i, o in self._operations.items() if o.forgettable(now)]:
                forgotten = self._operations.pop(old_id)
                if isinstance(forgotten, KeptOperation):
                    forgotten.close()
            self._next_id += 1
            op_id = self._next_id
        if self.keeper and (escalate_s is not None or wait_s is not None):
            kept = KeptOperation(op_id, command, self.context)
            try:
                kept.start(targets, command.get("boot_id"))
                started = True
            except (OSError, ValueError):
                started = False  # no keeper could start (nothing was signalled): the kill runs here
            if started:
                with self._lock:
                    self._operations[op_id] = kept
                if not command.get("detach"):
                    kept.wait(None)
                return kept.reply(0)
        operation = KillOperation(
            self.context,
            op_id,
            SIGNALS[signal_name],
            signal_name,
            bool(command.get("tree")),
            escalate_s,
            wait_s,
        )
        with self._lock:
            self._operations[operation.op_id] = operation
        operation.start(targets, command.get("boot_id"), owners)
        if not command.get("detach"):
            operation.wait(None)
        return operation.reply(0)

    def _operation(self, command: dict[str, Any]) -> tuple[KillOperation | KeptOperation, int]:
        op_id = command.get("op")
        since = command.get("since", 0)
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise CommandError("since must be a non-negative integer")
        with self._lock:
            operation = self._operations.get(op_id) if isinstance(op_id, int) else None
        if operation is None:
            raise CommandError(
                f"no kill operation {op_id!r} here (unknown, or finished more than {KILL_KEEP_S:g} s ago)"
            )
        return operation, since

    def close(self) -> None:
        """Let every keeper go (``KeptOperation.close``): the collector is closing."""
        with self._lock:
            kept = [o for o in self._operations.values() if isinstance(o, KeptOperation)]
        for operation in kept:
            operation.close()

    def pending(self) -> bool:
        """Whether a kill operation is still waiting, escalating or confirming."""
        with self._lock:
            return any(not o.done for o in self._operations.values())

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until every kill operation is done; True when they are.

        Args:
            timeout_s: The longest wait; None: as long as the operations themselves are bounded to take
                (their delay plus the KILL confirmation).
        """
        with self._lock:
            operations = [o for o in self._operations.values() if not o.done]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for operation in operations:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            operation.wait(left)
        return not self.pending()
