"""A confirmed local escalation outlives its client (RELIABILITY 58): the kill's keeper, a process of its own
session, sends the KILL when it is due and writes the audit lines of what the client never heard, whether the
client is SIGKILLed or its terminal closes; a client that stays writes every line itself, once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakenvml.plugin import FakeNvml
from tests.integration.procs import Worker, is_gone, launcher, read_until, state_of, wait_for

REPO = Path(__file__).resolve().parents[2]
STUBBORN_TREE = [Worker("scheduler_TP0", gpu=0), Worker("scheduler_TP1", gpu=1, mode="ignore_term")]
"""A launcher with one worker that dies of TERM and one that ignores it."""


def _kill(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gputui.cli", "kill", "--no-discover", *args],
        cwd=str(REPO),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _audit(state: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (state / "gputui" / "audit.jsonl").read_text().splitlines()]


def _env(fake_nvml: FakeNvml, state: Path) -> dict[str, str]:
    return dict(fake_nvml.env(), PYTHONPATH=str(REPO), XDG_STATE_HOME=str(state))


def test_a_client_killed_during_a_local_escalation_leaves_it_to_the_keeper(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with launcher(STUBBORN_TREE, fake_nvml) as tree:
        stubborn = tree["scheduler_TP1"]
        cli = _kill(_env(fake_nvml, state), "--yes", "--tree", "--escalate", "3", "local", str(tree.pid))
        try:
            assert cli.stdout is not None
            read_until(cli.stdout.fileno(), f"{tree.pid}  signal   TERM  sent".encode(), timeout_s=60)
        finally:
            cli.send_signal(signal.SIGKILL)
            cli.communicate()
        assert state_of(stubborn) not in (None, "Z")  # its KILL is not due yet
        wait_for(lambda: is_gone(stubborn), "the keeper to KILL it on its own", timeout_s=60)
        wait_for(
            lambda: any(a["stage"] == "escalate" for a in _audit(state) if a["pid"] == stubborn),
            "the keeper's audit line of the KILL",
            timeout_s=30,
        )
    lines = [a for a in _audit(state) if a["pid"] == stubborn]
    assert [(a["stage"], a["signal"], a["result"]) for a in lines][:2] == [
        ("intent", "TERM", "requested"),
        ("signal", "TERM", "sent"),
    ]
    kill = [a for a in lines if a["stage"] == "escalate"]
    assert len(kill) == 1
    assert kill[0]["signal"] == "KILL"
    assert kill[0]["result"] == "sent"
    assert "written by the kill's keeper: gputui was gone" in str(kill[0]["detail"])
    assert kill[0]["host"] == "local"
    assert kill[0]["command"]  # the process's own command line, as the client writes it


def test_a_client_that_stays_writes_each_line_once(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with launcher(STUBBORN_TREE, fake_nvml) as tree:
        stubborn = tree["scheduler_TP1"]
        done = _kill(_env(fake_nvml, state), "--yes", "--tree", "--escalate", "1", "local", str(tree.pid))
        out, err = done.communicate(timeout=120)
        assert done.returncode == 0, (out, err)
        assert is_gone(stubborn)
    time.sleep(1.0)  # the keeper, let go, would write what the client had not: nothing
    lines = [(a["stage"], a["signal"]) for a in _audit(state) if a["pid"] == stubborn]
    assert len(lines) == len(set(lines)), lines
    assert ("escalate", "KILL") in lines
    assert not any("keeper" in str(a["detail"]) for a in _audit(state))


def test_the_terminal_closed_during_a_local_escalation_ends_the_tui_and_not_the_kill(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """RELIABILITY 50 and 58 together: the TUI's pty closes after ``X``, ``y``: the TUI is gone within 2 s,
    the keeper sends the KILL when it is due and writes its line."""
    import fcntl
    import pty
    import struct
    import termios

    state = tmp_path / "state"
    env = dict(
        _env(fake_nvml, state),
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        TERM="xterm-256color",
    )
    with launcher(STUBBORN_TREE, fake_nvml) as tree:
        stubborn = tree["scheduler_TP1"]
        pid, master = pty.fork()
        if pid == 0:
            try:
                argv = [sys.executable, "-m", "gputui.cli", "--no-discover", "local"]
                os.execve(sys.executable, argv, env)  # noqa: S606
            finally:
                os._exit(127)
        try:
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            read_until(master, b"40963/49152", timeout_s=60)
            time.sleep(2.0)  # the process list follows the first frame
            os.write(master, b"X")
            read_until(master, b"Esc/n: cancel", timeout_s=60)
            os.write(master, b"y")
            wait_for(
                lambda: (
                    any(a["stage"] == "signal" for a in _audit(state) if a["pid"] == stubborn)
                    if (state / "gputui" / "audit.jsonl").exists()
                    else False
                ),
                "the TERM's audit line",
                timeout_s=30,
            )
            os.close(master)
            master = -1
            closed = time.monotonic()
            while not os.waitpid(pid, os.WNOHANG)[0]:
                assert time.monotonic() - closed < 2.0, "the TUI outlived its terminal by 2 s"
                time.sleep(0.02)
            assert state_of(stubborn) not in (None, "Z")  # its KILL is not due yet
            wait_for(lambda: is_gone(stubborn), "the keeper to KILL it", timeout_s=60)
            wait_for(
                lambda: any(a["stage"] == "escalate" for a in _audit(state) if a["pid"] == stubborn),
                "the keeper's audit line of the KILL",
                timeout_s=30,
            )
        finally:
            if master >= 0:
                os.close(master)
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
