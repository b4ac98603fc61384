"""Scripts run in a subprocess and driven from a test with JSON lines: one command on the script's
stdin, one answer on its stdout. The script's first line says it is ready (its ports, ...).

The test side is :class:`JsonLinesChild`; the script side answers with :func:`serve_commands`. Scripts run as
modules of this repository (``python -m tests.integration.NAME``), so they can import this one.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[2]


class JsonLinesChild:
    """The running script; ``hello`` is its first line."""

    def __init__(self, module: str, args: list[str], what: str, timeout_s: float = 20.0) -> None:
        self.what = what
        self.timeout_s = timeout_s
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.hello = self._read_line()

    def _read_line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout_s)
        if not ready:
            raise TimeoutError(f"{self.what} did not answer")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.what} exited")
        return json.loads(line)

    def _command(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._read_line()

    def close(self) -> None:
        """Ask it to quit; kill it when it does not (or is gone already)."""
        if self.process.poll() is not None:
            return
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.process.stdin.close()
            self.process.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(5)


def serve_commands(
    answer: Callable[[dict[str, Any]], dict[str, Any]], stdin: TextIO = sys.stdin, out: TextIO = sys.stdout
) -> None:
    """The script side: answer each command with ``answer(command)`` until ``quit`` or the end of stdin."""
    for line in stdin:
        try:
            command = json.loads(line)
        except ValueError:
            continue
        if not isinstance(command, dict):
            continue
        if command.get("cmd") == "quit":
            return
        out.write(json.dumps(answer(command)) + "\n")
        out.flush()
