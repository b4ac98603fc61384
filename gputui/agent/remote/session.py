"""The remote form's tie to its client: noticing that the client is gone, and the one way out."""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time

from gputui.agent.proc.procfs import read_children

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.agent.collector import Agent

CLIENT_WATCH_S = 0.5
"""How often the remote form checks that its parent (sshd's session process) is still there."""
LEAVE_CLOSE_S = 3.0
"""Longest the exit path waits for the collector's threads and child processes (nvidia-smi) to stop."""
PR_SET_PDEATHSIG = 1


class ClientSession:
    """The remote form's tie to its client: noticing that the client is gone, and the one way out.

    The client is gone when stdin ends (at any stage, before the hello too: the reader starts before the
    collector does), stdout breaks, the client says ``quit``, or the parent (sshd's session process) exits.
    prctl's PR_SET_PDEATHSIG turns the parent's exit into SIGTERM where Linux offers it, and a watch on the
    parent pid every ``CLIENT_WATCH_S`` catches it everywhere (the collector is reparented); SIGTERM and
    SIGHUP count as gone too. Then ``leave`` is the only way out: confirmed work finishes first (a kill's
    escalation, bounded by its own delay), the collector stops its threads and child processes, and the
    process exits, its child processes with it. The watch runs ``leave`` on a thread of its own, so a main
    thread stuck anywhere (a hung driver call, a read of a D-state process's /proc files) never keeps a
    collector alive after its client.

    Commands read from stdin wait in ``commands`` (None after the last) until ``serve`` takes them.
    """

    def __init__(self, stdin_binary: Any) -> None:
        self.stdin = stdin_binary
        self.commands: queue.Queue = queue.Queue()
        self.gone = threading.Event()
        self.wake = threading.Event()
        """Set when the sampling loop should look again: a changed interval, or the client gone."""
        self.reason: str | None = None
        self.agent: Agent | None = None
        self._parent = os.getppid()
        self._signalled: int | None = None  # set by the signal handler, which may take no lock
        self._pending: list[tuple[threading.Thread, float]] = []
        self._leaving = threading.Lock()

    def start(self) -> None:
        self._arm_parent_death()
        for signo in (signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(signo, self._on_signal)
            except (ValueError, OSError):  # not the main thread, or no such signal here
                pass
        threading.Thread(target=self._read, name="gputui-stdin", daemon=True).start()
        threading.Thread(target=self._watch, name="gputui-client-watch", daemon=True).start()

    @staticmethod
    def _arm_parent_death() -> None:
        """Ask Linux for SIGTERM when the parent exits (a parent gone before this is caught by the watch)."""
        if not sys.platform.startswith("linux"):
            return
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError, ImportError):
            pass

    def _on_signal(self, signo: int, _frame: Any) -> None:
        self._signalled = signo

    def client_gone(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.gone.set()
        self.wake.set()

    def pending(self, thread: threading.Thread, bound_s: float) -> None:
        """Work the client confirmed (a kill, its escalation) that ``leave`` lets finish, for ``bound_s``."""
        self._pending.append((thread, time.monotonic() + bound_s))

    def _read(self) -> None:
        try:
            for raw in iter(self.stdin.readline, b""):
                line = raw.strip()
                if line:
                    self.commands.put(line)
        except (OSError, ValueError):
            pass
        finally:
            self.commands.put(None)
            self.client_gone("stdin closed")

    def _watch(self) -> None:
        while not self.gone.wait(CLIENT_WATCH_S):
            if self._signalled is not None:
                self.client_gone(f"signal {self._signalled}")
            elif os.getppid() != self._parent:
                self.client_gone("parent exited")
        self.leave()

    def leave(self, status: int = 0) -> None:
        """The one exit path once the client is gone: finish confirmed work, stop, exit. Never returns.

        The first caller does it (the watch, or the main thread when ``serve`` returns); a second waits
        until the process exits under it.
        """
        with self._leaving:
            for thread, deadline in list(self._pending):
                thread.join(max(0.0, deadline - time.monotonic()))
            agent = self.agent
            if agent is not None:
                # A confirmed escalation runs to its end, bounded by its own delay and confirmation.
                agent.wait_for_escalations()
                closer = threading.Thread(target=agent.close, name="gputui-close", daemon=True)
                closer.start()
                closer.join(LEAVE_CLOSE_S)
            # A child still running (an nvidia-smi being started, or one hung in the driver) would outlive
            # the collector: nothing of it may stay behind.
            for child in read_children(os.getpid()):
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os._exit(status)
