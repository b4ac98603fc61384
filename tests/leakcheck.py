"""The suite leaves no process behind: a check at the end of the run, of this run's own processes only.

Every process this run starts carries ``GPUTUI_TEST_RUN=<token>`` in its environment: the variable is set in
this process before any test starts one, children inherit it, and the test sshd passes it on to its sessions
(``SetEnv``), so collectors shipped over SSH carry it too. Other test runs on the same machine have tokens
of their own and are never looked at. At the end of the run, processes of this run still there after a grace
period (a collector needs a moment to notice its client is gone) are listed, the run fails, and they are
killed so that nothing stays behind even then.

A pytest plugin: ``pytest_plugins`` in ``tests/conftest.py``, or ``-p tests.leakcheck``.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

RUN_TOKEN_VAR = "GPUTUI_TEST_RUN"
GRACE_S = 15.0

_left: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--leak-grace",
        type=float,
        default=GRACE_S,
        metavar="SECONDS",
        help="how long the run's processes may take to end after the last test (default %(default)s)",
    )


def pytest_configure(config: pytest.Config) -> None:
    os.environ[RUN_TOKEN_VAR] = uuid.uuid4().hex


def run_token() -> str:
    return os.environ[RUN_TOKEN_VAR]


def processes_of_this_run() -> dict[int, str]:
    """pid -> command line of every live process (but this one) whose environment carries this run's token."""
    needle = f"{RUN_TOKEN_VAR}={run_token()}".encode()
    found: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read().split(b"\0")
            if needle not in environ:
                continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X"):
                    continue  # exited; its parent reaps it
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found[int(name)] = cmdline[:200]
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    deadline = time.monotonic() + session.config.getoption("--leak-grace")
    left = processes_of_this_run()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_of_this_run()
    if not left:
        return
    _left.extend(f"pid {pid}: {cmdline}" for pid, cmdline in sorted(left.items()))
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _left:
        what = f"FAILED: the run left {len(_left)} process(es) behind (killed now): "
        terminalreporter.write_line(what + "; ".join(_left), red=True)
