"""One system ssh child: its pipes read and written without blocking, its process group ended with the link,
and every ssh still running ended when gputui exits."""

from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POLL_S = 1.0
"""How long a read or write of an ssh pipe waits before the stream looks for a closed link again."""
CONNECT_STEPS = 2
"""A command's hello may take this many connect deadlines: ssh reaching the host (its ConnectTimeout), then
the login and the collector's start."""
POLITE_S = 0.5
"""How long closing waits for ssh to end by itself once its stdin is closed (the collector quits on that)."""
TERM_GRACE_S = 0.5
"""How long ssh has after SIGTERM before its whole process group gets SIGKILL."""
REAP_S = 1.0
EXIT_WAIT_S = 0.2
"""How long explaining a failed start waits for ssh's exit status (its stdout has already ended)."""
STDERR_KEEP_BYTES = 16 * 1024
"""ssh's stderr kept to explain its failure (a changed-key warning is about 1 KiB)."""
STDERR_READ_BYTES = 1024 * 1024
"""Most stderr bytes taken in one go (a flood must not keep the reader from stdout)."""
SSH_FAILED = 255
"""ssh's own exit status for its failures; any other status is the remote command's."""
FIXED_OPTIONS = (
    "BatchMode=yes",  # never a prompt: a background thread cannot answer one
    "ControlMaster=no",  # use the user's running master, never become one
    "ClearAllForwardings=yes",  # the user's port forwards belong to their own sessions
    "RemoteCommand=none",  # the collector is the command
)
PROBE_OPTIONS = (
    "ControlPath=none",  # the host itself, not a master's connection
    "PreferredAuthentications=none",  # stop at the host key: nothing is offered or run
    "LogLevel=DEBUG1",  # "Server host key: TYPE SHA256:..."
)
PROBE_COMMAND = "true"
SSH_ENV = {"SSH_ASKPASS_REQUIRE": "never"}
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeVar

    _T = TypeVar("_T")


# -- one ssh child ---------------------------------------------------------------------------------------


class SshProcess:
    """One ``ssh`` child as an ``interfaces.Pipe``, in a process group of its own (with its ProxyCommand).

    The pipes may be closed from any thread while the stream's reader waits on them: a wake-up pipe ends
    every wait at once, and the descriptors are closed only when no call is using them any more (a number
    closed under a waiting call could be reused by another file meanwhile).

    Args:
        argv: The ssh command line (fixed words and validated values only).
    """

    def __init__(self, argv: list[str]) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - fixed options, a validated target, the command
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                env={**os.environ, **SSH_ENV},
                start_new_session=True,
            )
        except BaseException:
            os.close(self._wake_r)
            os.close(self._wake_w)
            raise
        self.pid = self._proc.pid
        with _running_lock:
            _running.add(self)
        stdin, stdout, stderr = self._proc.stdin, self._proc.stdout, self._proc.stderr
        if stdin is None or stdout is None or stderr is None:  # never: all three are pipes
            raise OSError("ssh started without its pipes")
        self._files = (stdin, stdout, stderr)
        self._stdin, self._stdout, self._stderr = (f.fileno() for f in self._files)
        for fd in (self._stdin, self._stdout, self._stderr):
            os.set_blocking(fd, False)
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._users = 0
        self._closed = False
        self._fds_closed = False
        self._stderr_open = True
        self._unread = bytearray()
        self._kept = bytearray()
        self._status: int | None = None
        self._reaped = False

    # -- using the descriptors ----------------------------------------------------------------------------

    @contextmanager
    def _using(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise EOFError("ssh pipe closed")
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                last = self._closed and self._users == 0
            if last:
                self._close_fds()

    def _close_fds(self) -> None:
        with self._lock:
            if self._fds_closed:
                return
            self._fds_closed = True
        for file in self._files:
            try:
                file.close()
            except OSError:
                pass
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _wait(self, fd: int, event: int) -> bool:
        """Whether ``fd`` is ready for ``event`` within ``POLL_S`` (stderr is drained meanwhile).

        Raises:
            EOFError: The pipe was closed.
        """
        poller = select.poll()
        poller.register(fd, event)
        poller.register(self._wake_r, select.POLLIN)
        if self._stderr_open and fd != self._stderr:
            poller.register(self._stderr, select.POLLIN)
        ready = dict(poller.poll(POLL_S * 1000))
        if self._wake_r in ready:
            raise EOFError("ssh pipe closed")
        if self._stderr in ready and fd != self._stderr:
            self._drain_stderr()
        return fd in ready

    def _drain_now(self) -> None:
        """Take what stderr holds now (nothing more once the pipe is closed)."""
        try:
            with self._using():
                self._drain_stderr()
        except EOFError:
            pass

    def _drain_stderr(self) -> None:
        with self._drain_lock:  # one reader at a time keeps the chunks in order
            taken = 0
            while self._stderr_open and taken < STDERR_READ_BYTES:
                try:
                    chunk = os.read(self._stderr, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    chunk = b""
                if not chunk:
                    self._stderr_open = False
                    return
                taken += len(chunk)
                with self._lock:
                    self._unread += chunk
                    del self._unread[:-STDERR_KEEP_BYTES]
                    self._kept += chunk
                    del self._kept[:-STDERR_KEEP_BYTES]

    # -- interfaces.Pipe ------------------------------------------------------------------------------------

    def recv(self, max_bytes: int) -> bytes | None:
        return self._when_ready(self._stdout, select.POLLIN, lambda: os.read(self._stdout, max_bytes))

    def send(self, data: memoryview) -> int | None:
        return self._when_ready(self._stdin, select.POLLOUT, lambda: os.write(self._stdin, data))

    def _when_ready(self, fd: int, event: int, call: Callable[[], _T]) -> _T | None:
        """``call()`` once ``fd`` is ready for ``event``; None when it is not within ``POLL_S``."""
        with self._using():
            if not self._wait(fd, event):
                return None
            try:
                return call()
            except BlockingIOError:
                return None

    def stderr(self, tail_bytes: int) -> bytes:
        self._drain_now()
        with self._lock:
            chunk = bytes(self._unread[-tail_bytes:]) if tail_bytes > 0 else b""
            self._unread.clear()
        return chunk

    def exit_status(self, wait_s: float) -> int | None:
        """The remote command's exit status; -1 when ssh itself failed (255) or was killed."""
        status = self.wait_exit(wait_s)
        if status is None:
            return None
        return -1 if status < 0 or status == SSH_FAILED else status

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle = self._users == 0
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass
        if idle:
            self._close_fds()

    # -- the process ----------------------------------------------------------------------------------------

    def stderr_lines(self) -> list[str]:
        """What ssh wrote to stderr (its last ``STDERR_KEEP_BYTES``), as lines without blanks."""
        self._drain_now()
        with self._lock:
            text = bytes(self._kept).decode("utf-8", "replace")
        return [line.strip() for line in text.splitlines() if line.strip()]

    def wait_exit(self, wait_s: float) -> int | None:
        """ssh's exit status (negative: the signal that ended it) once it ended within ``wait_s``, else None.

        The process is not reaped here: its pid, which is also its process group's id, stays reserved until
        ``end()`` has signalled the group.
        """
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            status = self._peek()
            if status is not None or time.monotonic() >= deadline:
                return status
            time.sleep(0.02)

    def _peek(self) -> int | None:
        with self._lock:
            if self._status is not None:
                return self._status
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            # Collected elsewhere: its status is lost, and its pid may already be another process's.
            with self._lock:
                self._reaped = True
                if self._status is None:
                    self._status = -1
                return self._status
        if info is None or info.si_pid == 0:
            return None
        status = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        with self._lock:
            if self._status is None:
                self._status = status
            return self._status

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to ssh and everything in its process group (its ProxyCommand), until reaped."""
        with self._lock:
            if self._reaped:
                return
            try:
                os.killpg(self.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def reap(self, wait_s: float) -> None:
        """Collect ssh's exit once it ended (within ``wait_s``); from then on its group is never signalled."""
        if self.wait_exit(wait_s) is None:
            return
        with self._lock:
            if self._reaped:
                return
            self._reaped = True
        with _running_lock:
            _running.discard(self)
        try:
            self._proc.wait(REAP_S)
        except (subprocess.TimeoutExpired, ChildProcessError):
            pass


_running: set[SshProcess] = set()
"""Every ssh started and not yet reaped: ``end_at_exit`` ends them."""
_running_lock = threading.Lock()


@atexit.register
def end_at_exit() -> None:
    """End every ssh still running when gputui exits.

    Quitting closes the links on daemon threads and does not wait for them: the close of a hung host's link
    may still be waiting for its ssh to end politely, and an ssh in a session of its own outlives its parent
    (with a host that never answers, for as long as TCP keeps the connection).
    """
    with _running_lock:
        procs = list(_running)
    end_processes(procs, 0.0)


def end_processes(procs: list[SshProcess], polite_s: float) -> None:
    """End ``procs`` and their process groups: stdin closed and ``polite_s`` to end by themselves, then
    SIGTERM, then SIGKILL for whatever is left in each group (a ProxyCommand that ignores SIGHUP)."""
    for proc in procs:
        proc.close()
    for grace_s, signum in ((polite_s, signal.SIGTERM), (TERM_GRACE_S, signal.SIGKILL)):
        deadline = time.monotonic() + grace_s
        for proc in procs:
            if proc.wait_exit(max(0.0, deadline - time.monotonic())) is None:
                proc.signal_group(signum)
    for proc in procs:
        proc.signal_group(signal.SIGKILL)
        proc.reap(REAP_S)
