"""The terminal goes away under ``gputui --demo`` (a real pty closed at random moments: idle, in the GPU view,
in a confirmation, during a kill and its escalation), or SIGTERM comes without a tty: every gputui process is
gone within 2 s, and none spins meanwhile (RELIABILITY 50)."""

from __future__ import annotations

import fcntl
import os
import pty
import random
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.integration.procs import hangup_ends_it

REPO = Path(__file__).resolve().parents[2]
GONE_WITHIN_S = 2.0
STARTUP_S = 60.0
"""The first frame: generous, the suite shares its cores."""
SCENARIOS = {
    "idle": [],
    "gpu view": [b"g", b"\r"],
    "confirmation": [b"X"],
    "kill and escalation": [b"X", b"y"],
    "tree kill": [b"T", b"y"],
}


def _env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "PYTHONPATH": str(REPO),
        "TERM": "xterm-256color",
        "COLUMNS": "120",
        "LINES": "40",
    }


def _drain(master: int, seconds: float, until: bytes | None = None) -> bytes:
    """Read what the app draws for ``seconds`` (or until ``until`` appears); the pty must never fill up."""
    seen = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen = (seen + chunk)[-200_000:]
            if until is not None and until in seen:
                break
    return seen


def _session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (gputui and anything it started)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry))
    return members


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _close_under(keys: list[bytes], delay_s: float, home: Path, ignore_hup: bool) -> None:
    pid, master = pty.fork()
    if pid == 0:  # the child: gputui on the pty, its controlling terminal
        try:
            # As under nohup, only the hangup itself is seen; else as a login terminal hands it over.
            signal.signal(signal.SIGHUP, signal.SIG_IGN if ignore_hup else signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.execve(sys.executable, [sys.executable, "-m", "gputui.cli", "--demo"], _env(home))  # noqa: S606
        finally:
            os._exit(127)
    try:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        drawn = _drain(master, STARTUP_S, until=b"gpu-node-07")
        assert b"gpu-node-07" in drawn, drawn[-2000:]
        _drain(master, 1.0)
        for key in keys:
            os.write(master, key)
            _drain(master, 0.6)
        _drain(master, delay_s)
        os.close(master)
        master = -1
        closed = time.monotonic()
        while time.monotonic() - closed < GONE_WITHIN_S:
            done, _status = os.waitpid(pid, os.WNOHANG)
            if done and not _session_members(pid):
                return
            time.sleep(0.02)
        before = _cpu_s(pid)
        time.sleep(0.5)
        spinning = _cpu_s(pid) - before
        pytest.fail(
            f"gputui still running {GONE_WITHIN_S} s after its pty closed ({spinning / 0.5:.0%} of a core); "
            f"session members: {_session_members(pid)}"
        )
    finally:
        if master >= 0:
            os.close(master)
        for member in [pid, *_session_members(pid)]:
            try:
                os.kill(member, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


@pytest.mark.timeout(600)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("round_", range(3))
def test_every_process_is_gone_within_2_s_when_the_pty_closes(
    tmp_path: Path, scenario: str, round_: int
) -> None:
    rng = random.Random(f"{scenario}/{round_}")
    _close_under(SCENARIOS[scenario], rng.uniform(0.0, 2.5), tmp_path, ignore_hup=round_ == 2)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_without_a_tty_ends_it_cleanly(tmp_path: Path, signum: int) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "gputui.cli", "--demo"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        start_new_session=True,
        preexec_fn=hangup_ends_it,  # signal dispositions only, before exec
    )
    try:
        time.sleep(4.0)  # well into the app's start
        assert child.poll() is None
        child.send_signal(signum)
        started = time.monotonic()
        out, err = child.communicate(timeout=10)
        assert time.monotonic() - started < GONE_WITHIN_S
        assert child.returncode == 128 + signum
        assert b"Traceback" not in out + err
        assert not _session_members(child.pid)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
