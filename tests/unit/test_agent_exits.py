"""The collector's wait on GPU holders' exits (``agent.proc.exits``), on real child processes: pidfds where
this Python has them, the /proc poll where it does not (forced here, and on Python 3.8 itself)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.agent.proc.exits import EXIT_POLL_S, ExitWatch
from tests.interpreters import python38

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["pidfd", "proc"])
def watch(request: pytest.FixtureRequest) -> Iterator[ExitWatch]:
    exits = ExitWatch()
    if request.param == "proc":
        exits._use_pidfd = False
    elif not hasattr(__import__("os"), "pidfd_open"):
        pytest.skip("no os.pidfd_open in this Python")
    yield exits
    exits.close()


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)


def test_a_watched_exit_ends_the_wait_at_once_and_is_not_seen_twice(watch: ExitWatch) -> None:
    child, other = _sleeper(), _sleeper()
    try:
        watch.watch([child.pid, other.pid])
        assert not watch.wait(0.05, threading.Event())  # nobody exited: the whole wait
        threading.Timer(0.2, child.kill).start()
        started = time.monotonic()
        assert watch.wait(5.0, threading.Event())
        assert time.monotonic() - started < 0.2 + EXIT_POLL_S + 0.15
        # Its zombie (not reaped yet) and its pid, still listed, end no further wait.
        watch.watch([child.pid, other.pid])
        assert watch.watched == {other.pid}
        assert not watch.wait(0.05, threading.Event())
        child.wait()
        watch.watch([child.pid, other.pid])
        assert not watch.wait(0.05, threading.Event())
    finally:
        for proc in (child, other):
            proc.kill()
            proc.wait()


def test_a_holder_that_left_the_list_having_exited_ends_the_next_wait(watch: ExitWatch) -> None:
    child = _sleeper()
    watch.watch([child.pid])
    child.kill()
    child.wait()
    # The list read after it died no longer has it, but its memory may still be in that sample's figures.
    watch.watch([])
    assert watch.wait(5.0, threading.Event())
    assert not watch.wait(0.02, threading.Event())


def test_the_wake_event_ends_a_watching_wait_and_nothing_watched_is_a_plain_sleep(watch: ExitWatch) -> None:
    child = _sleeper()
    try:
        watch.watch([child.pid, -1, 0])
        assert watch.watched == {child.pid}
        wake = threading.Event()
        threading.Timer(0.1, wake.set).start()
        started = time.monotonic()
        assert not watch.wait(5.0, wake)
        assert time.monotonic() - started < 0.1 + EXIT_POLL_S + 0.15
        watch.watch([])
        started = time.monotonic()
        assert not watch.wait(0.1, threading.Event())
        assert time.monotonic() - started >= 0.09
    finally:
        child.kill()
        child.wait()


def test_a_pid_already_gone_is_not_watched(watch: ExitWatch) -> None:
    child = _sleeper()
    child.kill()
    child.wait()
    watch.watch([child.pid])
    assert watch.watched == set()


ON_38 = """
import subprocess, sys, threading, time
sys.path.insert(0, sys.argv[1])
from gputui.agent.proc.exits import ExitWatch
child = subprocess.Popen(["sleep", "60"])
watch = ExitWatch()
watch.watch([child.pid])
threading.Timer(0.2, child.kill).start()
started = time.monotonic()
print(watch.wait(5.0, threading.Event()), round(time.monotonic() - started, 2))
child.wait()
"""


def test_the_exit_watch_runs_on_python_38() -> None:
    done = subprocess.run(
        [python38(), "-c", ON_38, str(REPO)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    exited, waited_s = done.stdout.split()
    assert exited == "True"
    assert 0.15 < float(waited_s) < 0.5
