"""The driver's command-line tools: found as this host's PATH finds them, run with a deadline."""

from __future__ import annotations

import os
import signal
import subprocess

from gputui.agent.wire import wire_text


def which(name: str) -> str | None:
    """The executable ``name`` on PATH, as a shell would find it."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


OUTPUT_CHARS = 2000
"""What is kept of a tool's output (its tail)."""


def run_bounded(argv: list[str], timeout_s: float) -> tuple[int | None, str]:
    """Run ``argv`` (no shell) with stdin from /dev/null; (exit status or None on timeout, output tail).

    Past ``timeout_s`` its whole process group is killed.
    """
    try:
        child = subprocess.Popen(  # noqa: S603 - argv of fixed tools and words read from the driver
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return 127, wire_text(f"cannot run {argv[0]}: {exc.strerror or exc}", OUTPUT_CHARS) or ""
    try:
        output, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            output, _ = child.communicate(timeout=5.0)
        except subprocess.TimeoutExpired:
            output = b""
        return None, _tail(output)
    return child.returncode, _tail(output)


def _tail(output: bytes | None) -> str:
    text = (output or b"").decode("utf-8", "replace").strip()
    return wire_text(text[-OUTPUT_CHARS:], OUTPUT_CHARS) or ""
