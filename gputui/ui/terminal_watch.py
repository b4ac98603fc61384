"""Ending the TUI when its terminal goes away, or on SIGTERM / SIGHUP, within ``EXIT_DEADLINE_S``, every time.

A TUI whose terminal is gone (an SSH connection dropped, a tmux session killed, a closed pty) must not stay
behind on the GPU host it watches: Textual's input thread, reading a hung-up pty, wakes at once, reads
nothing and loops at 100 % of a core, and as a non-daemon thread it holds the interpreter's exit forever.

So a daemon thread of its own watches for the end, asleep in one ``poll`` until it comes: the terminal's
descriptors with no events asked (``poll`` then reports only a hangup or an error, so nothing is read away
from Textual), and a pipe that the signal handlers and ``stop`` write a byte to. Then it stops Textual's
input loop, asks the app to leave as ``q`` does (the hosts stopped, their links closed), and, should the
interpreter still be alive after ``EXIT_DEADLINE_S``, ends it: the exit handlers first (the system ``ssh``
processes end with them), then ``os._exit``. A kill the local collector is escalating is no thread of the
UI's: its own (bounded) thread finishes it first, as it would after ``q``; a remote collector finishes its
kills by itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.app import App

POLL_S = 5.0
"""The longest the watch sleeps without looking at its flags (a wake-up is missed only if a write failed)."""
EXIT_DEADLINE_S = 0.8
"""From the terminal's end to a forced exit: inside the 2 s a user (and the tests) allow."""
KILL_THREAD_PREFIX = "gputui-kill-"
"""The local collector's escalation threads (``agent.kill``): the forced exit waits for them."""
_HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL


class TerminalWatch:
    """Watch the app's terminal and the end signals; leave the app, then the process, when one comes.

    Args:
        app: The running app.
        fds: The terminal's descriptors (stdin and stdout); those that are no terminal are not polled.
    """

    def __init__(self, app: App[Any], fds: tuple[int, ...] = (0, 1)) -> None:
        self._app = app
        self._fds = tuple(fd for fd in fds if _is_tty(fd))
        self._ended = threading.Event()
        self._stopped = threading.Event()
        # Never closed: the signal handlers may write to it until the process ends, and a closed descriptor's
        # number may by then be another file's.
        self._wake_read, self._wake_write = os.pipe()
        for fd in (self._wake_read, self._wake_write):
            os.set_blocking(fd, False)
        self.signum: int | None = None
        """The signal that ended the app (SIGHUP also for a terminal that went away), None if none did."""
        self._thread = threading.Thread(target=self._watch, name="gputui-terminal-watch", daemon=True)

    def install(self) -> None:
        """Take SIGTERM and SIGHUP (a signal set to be ignored, as by ``nohup``, stays ignored); start
        watching."""
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, self._on_signal)
        self._thread.start()

    def stop(self) -> None:
        """The app ended by itself: stop watching."""
        self._stopped.set()
        self._wake()

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        self._ended.set()
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a byte is already waiting) or closed: awake either way
            os.write(self._wake_write, b"!")

    def _wait_for_the_end(self) -> bool:
        """Sleep until the terminal hangs up (True), a signal comes (True) or ``stop`` is called (False)."""
        poller = select.poll()
        for fd in self._fds:
            poller.register(fd, 0)
        poller.register(self._wake_read, select.POLLIN)
        while True:
            if self._ended.is_set():
                return True
            if self._stopped.is_set():
                return False
            try:
                events = poller.poll(POLL_S * 1000)
            except OSError:
                return True
            for fd, event in events:
                if fd == self._wake_read:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_read, 64)
                elif event & _HANGUP:
                    return True

    def _watch(self) -> None:
        if not self._wait_for_the_end():
            return
        if self.signum is None:
            self.signum = signal.SIGHUP
        threading.Thread(target=self._force_exit, name="gputui-exit-deadline", daemon=True).start()
        driver = getattr(self._app, "_driver", None)
        exit_event = getattr(driver, "exit_event", None)
        if isinstance(exit_event, threading.Event):
            exit_event.set()  # Textual's input loop ends instead of spinning on the dead terminal
        with contextlib.suppress(Exception):
            self._app.call_from_thread(self._leave)

    def _leave(self) -> None:
        hosts = getattr(self._app, "hosts", None)
        if hosts is not None:
            hosts.stop()
        self._app.exit(128 + (self.signum or signal.SIGHUP))

    def _force_exit(self) -> None:
        time.sleep(EXIT_DEADLINE_S)  # the app normally leaves well before (then ``end_process``)
        self.end_process()

    def end_process(self) -> None:
        """After the terminal or a signal ended the app: end the process now, not after the interpreter's
        own slow teardown (during which no daemon thread could end it any more). A local escalation under
        way finishes first (bounded by its own delay); the exit handlers run (the system ssh processes end
        with them)."""
        for thread in threading.enumerate():
            if thread.name.startswith(KILL_THREAD_PREFIX) and thread is not threading.current_thread():
                thread.join()
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(128 + (self.signum or signal.SIGHUP))


def _is_tty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False
