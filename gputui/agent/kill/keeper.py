"""A confirmed local kill that outlives its client: ``python3 -m gputui.agent.kill.keeper``.

A remote kill runs in the remote collector, which finishes it when the client goes (``remote.session``). A
local one would run in the client's own process, so a client killed (SIGKILL, the OOM killer) or a terminal
closed during the escalation would take it along: TERM sent, KILL never. So a local collector hands every kill
that goes on after its signals (an escalation, a wait) to this keeper, a process of its own session that no
terminal hang-up reaches, and answers for it (``kept.KeptOperation``): the keeper signals, waits, escalates
and confirms exactly as the collector would (``KillOperations``), and the client reads its outcomes as it
would read the collector's.

The conversation is JSON lines. The first line on stdin is ``{"command": <the kill command>, "context": {...},
"gpu_mib": {pid: MiB}, "audit": <spec or null>}``; each later line is a ``kill_wait`` or ``kill_abandon``
command for the one operation; each line in is answered by one reply line out (the first once the signals
are sent). A client that goes (stdin closes) leaves the operation to finish; then every outcome the client
never confirmed having (its last ``since``) gets its audit line here, in the audit log's one shape
(``protocol.audit_line``), so that every signal sent has its line.

Standard library only.
"""

from __future__ import annotations

import json
import signal
import sys
import time

from gputui.agent.args import CommandError
from gputui.agent.kill.kept import KEPT_DETAIL, LINE_MAX_BYTES, NO_WAIT_S
from gputui.agent.kill.operation import KillContext
from gputui.agent.kill.operations import KillOperations
from gputui.agent.protocol import KILL_ABANDON_COMMAND, KILL_WAIT_COMMAND, audit_line
from gputui.agent.safefile import UnsafeFile, append

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO


def _outcome_lines(audit: dict[str, Any], outcomes: list[dict[str, Any]]) -> bytes:
    base: dict[str, Any] = audit["base"] if isinstance(audit.get("base"), dict) else {}
    commands: dict[str, Any] = audit["commands"] if isinstance(audit.get("commands"), dict) else {}
    lines = []
    for outcome in outcomes:
        pid = outcome.get("pid")
        command = outcome.get("cmdline") or commands.get(str(pid)) or []
        line = audit_line(
            time.time(),
            base,
            pid=pid,
            start_ticks=outcome.get("start_ticks"),
            name=outcome.get("name"),
            command=list(command),
            signal=outcome.get("signal"),
            stage=outcome.get("stage"),
            result=outcome.get("result"),
            detail=str(outcome.get("detail") or "") + KEPT_DETAIL,
        )
        lines.append(json.dumps(line, separators=(",", ":")) + "\n")
    return "".join(lines).encode("utf-8")


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    """The keeper's loop (see the module docstring); returns the exit status."""
    first = json.loads(stdin.readline(LINE_MAX_BYTES))
    facts = first["context"]
    gpu_mib = {int(pid): mib for pid, mib in (first.get("gpu_mib") or {}).items()}
    context = KillContext(
        bool(facts["read_only"]),
        facts.get("boot_id"),
        int(facts["agent_pid"]),
        bool(facts.get("use_psutil")),
        gpu_mib.get,
    )
    operations = KillOperations(context)
    reply = operations.kill(first["command"])
    op_id = reply.get("op")
    acknowledged = 0

    def answer(message: dict[str, Any]) -> bool:
        try:
            stdout.write((json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8"))
            stdout.flush()
            return True
        except (OSError, ValueError):
            return False

    if answer(reply):
        while True:
            line = stdin.readline(LINE_MAX_BYTES)
            if not line:
                break
            command = json.loads(line)
            name = command.get("cmd")
            since = command.get("since")
            if isinstance(since, int) and not isinstance(since, bool):
                acknowledged = max(acknowledged, since)
            if name not in (KILL_WAIT_COMMAND, KILL_ABANDON_COMMAND):
                continue  # ACK_COMMAND: the client has written the lines of the first ``since`` outcomes
            try:
                said = operations.handle(name, dict(command, op=op_id))
            except CommandError as exc:
                said = {"error": str(exc)}
            if not answer(said):
                break
    # The client is gone: the operation ends as it would have with it, and what it never heard is written.
    operations.wait(None)
    audit = first.get("audit")
    if isinstance(audit, dict) and isinstance(audit.get("path"), str):
        left = operations.handle(
            KILL_WAIT_COMMAND, {"op": op_id, "since": acknowledged, "timeout_s": NO_WAIT_S}
        )
        outcomes = [o for o in left.get("outcomes") or () if isinstance(o, dict)]
        if outcomes:
            try:
                append(audit["path"], _outcome_lines(audit, outcomes))
            except UnsafeFile as exc:
                sys.stderr.write(f"gputui: kill keeper: {exc}\n")
                return 1
    return 0


def main() -> int:
    # A hang-up or an interrupt meant for the terminal's foreground is not meant for a confirmed kill.
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    try:
        return serve(sys.stdin.buffer, sys.stdout.buffer)
    except (ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"gputui: kill keeper: malformed request ({type(exc).__name__})\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
