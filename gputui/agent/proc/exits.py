"""Waiting for GPU holders to exit, so that the sample that sees their memory back is taken at once.

While a clean-slate check or a kill is under way the collector waits between samples on the holders
themselves: a pidfd per holder (``os.pidfd_open``, Python 3.9 and Linux 5.3 on) turns readable when its whole
thread group has exited; without pidfds, each holder's /proc stat is read every ``EXIT_POLL_S`` (a process
whose stat is gone, turned zombie, or started at another time has exited). Either way the wait also returns
within ``EXIT_POLL_S`` of its wake event being set. Outside those moments nothing here runs: the collector
sleeps its interval as before.
"""

from __future__ import annotations

import errno
import os
import select
import threading
import time

from gputui.agent.proc.procfs import EXITED_STATES, read_stat, still_running

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

EXIT_POLL_S = 0.01
"""How often a wait looks at its wake event, and at the holders' /proc stat where there are no pidfds."""


class ExitWatch:
    """The exits of a set of pids (``watch``), waited for by ``wait``.

    A pid seen exited is not watched again while it stays in the set given to ``watch``: a holder still
    listed by a process list read before it exited (or a zombie) must not end every wait at once.
    """

    def __init__(self) -> None:
        self._pidfds: dict[int, int] = {}
        self._start_ticks: dict[int, int] = {}
        """pid -> start time, for pids watched through /proc."""
        self._exited: set[int] = set()
        self._left_exited = False
        """A pid dropped from the watch had exited: the next wait returns at once."""
        self._use_pidfd = hasattr(os, "pidfd_open")

    @property
    def watched(self) -> set[int]:
        """The pids whose exit a wait would see now."""
        return set(self._pidfds) | set(self._start_ticks)

    def watch(self, pids: Iterable[int]) -> None:
        """Watch exactly ``pids`` (positive pids only) from now on."""
        wanted = {pid for pid in pids if pid > 0}
        # A watched pid that left the list may have exited after the list's GPU figures were read (its
        # memory still counted there): the next wait ends at once if it did, and the sample after shows it.
        self._left_exited = self._left_exited or self._any_exited(0.0, None, self.watched - wanted)
        for pid in [pid for pid in self._pidfds if pid not in wanted]:
            os.close(self._pidfds.pop(pid))
        for pid in [pid for pid in self._start_ticks if pid not in wanted]:
            del self._start_ticks[pid]
        self._exited &= wanted
        for pid in sorted(wanted - self._exited - self.watched):
            self._add(pid)

    def _add(self, pid: int) -> None:
        if self._use_pidfd:
            try:
                self._pidfds[pid] = os.pidfd_open(pid)
                return
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    self._exited.add(pid)
                    return
                self._use_pidfd = False  # an old kernel (ENOSYS), or a sandbox that forbids it: /proc
        stat = read_stat(pid)
        if stat is None or stat.state in EXITED_STATES:
            self._exited.add(pid)
        else:
            self._start_ticks[pid] = stat.start_ticks

    def wait(self, timeout_s: float, wake: threading.Event) -> bool:
        """Wait up to ``timeout_s`` for a watched pid to exit; returns early, False, once ``wake`` is set.

        Returns:
            True when a watched pid exited (it is watched no more).
        """
        if self._left_exited:
            self._left_exited = False
            return True
        if not self._pidfds and not self._start_ticks:
            wake.wait(max(0.0, timeout_s))
            return False
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            left = deadline - time.monotonic()
            if self._any_exited(min(EXIT_POLL_S, max(0.0, left)), wake, self.watched):
                return True
            if wake.is_set() or left <= 0:
                return False

    def _any_exited(self, wait_s: float, wake: threading.Event | None, among: set[int]) -> bool:
        """Whether a pid of ``among`` (watched ones) has exited, waiting up to ``wait_s`` for it to (or for
        ``wake``); those that did are watched no more."""
        fired: set[int] = set()
        pidfds = {pid: fd for pid, fd in self._pidfds.items() if pid in among}
        by_stat = {pid: ticks for pid, ticks in self._start_ticks.items() if pid in among}
        if pidfds:
            poller = select.poll()
            by_fd = {}
            for pid, fd in pidfds.items():
                poller.register(fd, select.POLLIN)
                by_fd[fd] = pid
            waited_ms = 0 if by_stat else int(wait_s * 1000)
            fired.update(by_fd[fd] for fd, _events in poller.poll(waited_ms))
        if by_stat:
            fired.update(pid for pid, ticks in by_stat.items() if not still_running(pid, ticks))
            if not fired and wake is not None and wait_s > 0:
                wake.wait(wait_s)
        for pid in fired:
            if pid in self._pidfds:
                os.close(self._pidfds.pop(pid))
            self._start_ticks.pop(pid, None)
            self._exited.add(pid)
        return bool(fired)

    def close(self) -> None:
        """Stop watching (closes the pidfds)."""
        self.watch(())
        self._left_exited = False
