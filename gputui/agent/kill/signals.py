"""Signals with an identity check, and watching the signalled go."""

from __future__ import annotations

import os
import signal
import threading
import time

from gputui.agent.proc.procfs import read_stat
from gputui.agent.protocol import RESULT_CHANGED, RESULT_DENIED, RESULT_ERROR, RESULT_GONE, RESULT_SENT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "KILL": signal.SIGKILL}
"""The signal of each name a kill may ask for (``protocol.SIGNAL_NAMES``)."""
KILL_POLL_S = 0.05
"""How often a kill operation looks whether what it signalled is gone."""


def defunct_leader(pid: int, ticks: int) -> bool:
    """Whether (pid, start_ticks) is in state Z with threads still alive: a defunct leader, which has not
    exited (it holds its files and GPU memory) and can still be signalled."""
    from gputui.agent.proc.threads import zombie_live_threads  # read only for a process in state Z

    found = zombie_live_threads(pid, ticks)
    return found is not None and bool(found["threads"] or found["omitted"])


def alive(pid: int, ticks: int) -> bool:
    """Whether the process (pid, start_ticks) still exists and has not exited: a true zombie counts as gone,
    a defunct leader (state Z, threads alive) as there."""
    stat = read_stat(pid)
    if stat is None or stat.start_ticks != ticks or stat.state == "X":
        return False
    return stat.state != "Z" or defunct_leader(pid, ticks)


def present(pid: int, ticks: int) -> bool:
    """Whether the process (pid, start_ticks) is still in the process table, as a zombie too."""
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == ticks


def wait_gone(
    procs: list[tuple[int, int]],
    timeout_s: float,
    cancel: threading.Event | None = None,
    reaped: Iterable[tuple[int, int]] = (),
) -> set[tuple[int, int]]:
    """Poll until every process is gone, ``timeout_s`` passed or ``cancel`` is set; returns those still there.

    ``procs`` are gone once they exited (a zombie counts as gone); ``reaped`` (zombies already) once reaped.
    """
    zombies = set(reaped)

    def there(proc: tuple[int, int]) -> bool:
        return present(*proc) if proc in zombies else alive(*proc)

    deadline = time.monotonic() + timeout_s
    left = set(p for p in list(procs) + list(zombies) if there(p))
    while left and time.monotonic() < deadline:
        pause = min(KILL_POLL_S, max(0.0, deadline - time.monotonic()))
        if cancel is not None:
            if cancel.wait(pause):
                break
        else:
            time.sleep(pause)
        left = set(p for p in left if there(p))
    return set(p for p in left if there(p))


def send_signal_checked(pid: int, start_ticks: int, signo: int) -> tuple[str, str]:
    """Signal ``pid`` only if it is still the process that started at ``start_ticks``.

    With a pidfd the identity check happens after the pidfd is open, so the pid cannot be reused between the
    check and the signal; without one (old kernels, Python 3.8) a small window remains between them.

    Returns:
        (result, detail) with result one of sent, gone, changed, denied, error.
    """
    pidfd: int | None = None
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return RESULT_GONE, "no such process"
        except OSError:
            pidfd = None  # no pidfd support in this kernel: plain kill below
    try:
        stat = read_stat(pid)
        if stat is None:
            return RESULT_GONE, "no such process"
        if stat.start_ticks != start_ticks:
            return RESULT_CHANGED, f"process changed: pid {pid} now belongs to another process"
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signo)
            else:
                os.kill(pid, signo)
        except ProcessLookupError:
            return RESULT_GONE, "exited before the signal"
        except PermissionError:
            return RESULT_DENIED, "permission denied (process of another user)"
        except OSError as exc:
            return RESULT_ERROR, f"{type(exc).__name__}: {exc.strerror or exc}"
        return RESULT_SENT, ""
    finally:
        if pidfd is not None:
            os.close(pidfd)
