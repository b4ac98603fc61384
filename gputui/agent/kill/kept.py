"""The collector's side of a local kill run by a keeper process (``keeper``): ``KeptOperation`` answers as a
``KillOperation`` does, from what the keeper says.

Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from gputui.agent.protocol import KILL_ABANDON_COMMAND, KILL_WAIT_COMMAND

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.agent.kill.operation import KillContext

LINE_MAX_BYTES = 16 << 20
"""The longest line the keeper reads (a tree kill of thousands of listed members)."""
KEPT_DETAIL = " (written by the kill's keeper: gputui was gone)"
ANSWER_MARGIN_S = 30.0
ACK_COMMAND = "kill_ack"
"""The client has every outcome before ``since`` (its audit lines written): the keeper answers nothing."""
NO_WAIT_S = 0.001
"""The wait of a ``kill_wait`` that only asks what happened so far."""
"""How much longer than the wait it asked for the client waits for a keeper's answer."""


class KeptOperation:
    """A local kill operation run by a keeper process, answering as a ``KillOperation`` does.

    Args:
        op_id: Its id among the collector's operations.
        command: The ``kill`` command (with the client's ``audit`` spec, if any).
        context: The collector's kill facts.
    """

    def __init__(self, op_id: int, command: dict[str, Any], context: KillContext) -> None:
        self.op_id = op_id
        self._command = command
        self._context = context
        self._lock = threading.Lock()
        self._done = False
        self._delivered = 0
        """How many outcomes the collector handed on (``reply``): the client writes their lines."""
        self._asked_mono = 0.0
        self.finished_mono: float | None = None
        self._keeper: subprocess.Popen[bytes] | None = None

    @property
    def done(self) -> bool:
        if self._done:
            return True
        now = time.monotonic()
        if now - self._asked_mono < 0.25 or not self._lock.acquire(blocking=False):
            return False
        try:
            self._asked_mono = now
            self._ask({"cmd": KILL_WAIT_COMMAND, "since": 0, "timeout_s": NO_WAIT_S}, 5.0, keep=False)
        except OSError:
            self._finished()
        finally:
            self._lock.release()
        return self._done

    def _finished(self) -> None:
        if not self._done:
            self._done = True
            self.finished_mono = time.monotonic()

    def forgettable(self, now_mono: float) -> bool:
        from gputui.agent.kill.operation import KILL_KEEP_S

        return self.finished_mono is not None and now_mono - self.finished_mono > KILL_KEEP_S

    def _ask(self, message: dict[str, Any] | None, timeout_s: float, keep: bool = True) -> dict[str, Any]:
        """Send one line (None: nothing, the first answer is read) and read its answer; under ``_lock``."""
        keeper = self._keeper
        if keeper is None or keeper.stdin is None or keeper.stdout is None:
            raise OSError("no keeper")
        if message is not None:
            keeper.stdin.write((json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8"))
            keeper.stdin.flush()
        import select

        ready, _, _ = select.select([keeper.stdout], [], [], timeout_s)
        if not ready:
            raise OSError("the kill's keeper did not answer")
        line = keeper.stdout.readline(LINE_MAX_BYTES)
        if not line:
            raise OSError("the kill's keeper is gone")
        reply = json.loads(line)
        if not isinstance(reply, dict) or "error" in reply:
            raise OSError(f"the kill's keeper answered without a reply ({str(reply)[:200]})")
        reply["op"] = self.op_id
        if reply.get("done"):
            self._finished()
        return reply if keep else {}

    def start(self, targets: list[tuple[int, int | None]], boot_id: str | None) -> dict[str, Any]:
        """Start the keeper, hand it the command, and return its first answer (after the signals)."""
        context = self._context
        gpu_mib = {}
        for pid, _ticks in targets:
            mib = context.gpu_mib_of(pid)
            if mib is not None:
                gpu_mib[str(pid)] = mib
        first = {
            "command": dict(self._command, detach=True),
            "context": {
                "read_only": context.read_only,
                "boot_id": context.boot_id,
                "agent_pid": context.agent_pid,
                "use_psutil": context.use_psutil,
            },
            "gpu_mib": gpu_mib,
            "audit": self._command.get("audit"),
        }
        with self._lock:
            self._keeper = subprocess.Popen(
                [sys.executable, "-m", "gputui.agent.kill.keeper"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
            try:
                return self._ask(first, ANSWER_MARGIN_S)
            except (OSError, ValueError):
                self._finished()
                raise

    def reply(self, since: int) -> dict[str, Any]:
        with self._lock:
            reply = self._ask(
                {"cmd": KILL_WAIT_COMMAND, "since": since, "timeout_s": NO_WAIT_S}, ANSWER_MARGIN_S
            )
        count = reply.get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            self._delivered = max(self._delivered, count)
        return reply

    def wait(self, timeout_s: float | None) -> bool:
        if self._done:
            return True
        with self._lock:
            wait_s = timeout_s if timeout_s is not None else 600.0
            self._ask({"cmd": KILL_WAIT_COMMAND, "since": 0, "timeout_s": wait_s}, wait_s + ANSWER_MARGIN_S)
        return self._done

    def abandon(self) -> None:
        with self._lock:
            self._ask({"cmd": KILL_ABANDON_COMMAND, "since": 0}, 600.0)

    def close(self) -> None:
        """Let the keeper go, saying which outcomes were handed on (it finishes the operation, then writes the
        lines of the others)."""
        with self._lock:
            keeper, self._keeper = self._keeper, None
            if keeper is None or keeper.stdin is None:
                return
            try:
                ack = {"cmd": ACK_COMMAND, "since": self._delivered}
                keeper.stdin.write((json.dumps(ack) + "\n").encode("utf-8"))
                keeper.stdin.close()
            except OSError:
                pass
