"""The system OpenSSH client as the SSH transport: every host the user's ``ssh`` reaches, gputui reaches.

``OpenSshSession`` is the ``ssh.link.Session`` of ``SshLink(client="openssh")``: each command the link runs
(the collector, or the reduced collector) is one child process::

    ssh [-F FILE] -T -e none -o BatchMode=yes -o StrictHostKeyChecking=yes -o ControlMaster=no \\
        -o ClearAllForwardings=yes -o RemoteCommand=none -o ConnectTimeout=N [-p PORT] [-l USER] -- HOST CMD

with the collector's payload written to its stdin and its stdout read as the JSON-line stream, exactly as over
a paramiko channel (``ssh.stream``). ProxyCommand, ProxyJump, certificates and ``@cert-authority``, GSSAPI,
agent settings and CheckHostIP work because ssh does them. The command line holds fixed options, the target
word ``parse_target`` validated (after ``--``), and the collector command of ``ssh.payload``; nothing else.

- Never a prompt: BatchMode, no controlling terminal (a session of its own, so no jump host's ssh can open
  /dev/tty either) and ``SSH_ASKPASS_REQUIRE=never``.
- Host keys: StrictHostKeyChecking is ``yes`` unless unknown keys may be recorded (``--accept-new``, the
  user's own ``accept-new``, or a key the user accepted in the app: ``OfferedHostKey``), then ``accept-new``;
  a changed or revoked key is refused every time. An unknown key's fingerprint is read through the same route
  by a second, verbose connection that stops at the key (nothing is authenticated or run).
- ControlMaster: an existing master (the user's ControlPath) is used; ``ControlMaster=no`` keeps ssh from
  ever starting one, and nothing here stops one.
- Every ssh runs in a process group of its own with its ProxyCommand; closing the link ends the group, so no
  ssh or proxy process outlives it, and gputui's exit ends any group still running (``end_at_exit``). The
  remote collector ends on its closed stdin.
- ssh's own failures (exit status 255) become one line from its stderr: auth and host-key failures are
  permanent (no retry storm), network failures are retried with backoff by the caller.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from gputui.core.link import LinkError, LinkOptions
from gputui.transports.ssh.config import SshSettings, config_file, parse_target, target_words
from gputui.transports.ssh.errors import AuthFailed, SetupFailed, phase_error, shown
from gputui.transports.ssh.knownhosts import (
    ChangedHostKey,
    HostKeyError,
    RevokedHostKey,
    UnknownHostKey,
    fingerprint_sha256,
    load_known_hosts,
    lookup_name,
)
from gputui.transports.ssh.trust import records_unknown_keys

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
_T = TypeVar("_T")

_UNKNOWN_RE = re.compile(r"No (\S+) host key is known for (\S+) and you have requested strict checking")
_CHANGED_RE = re.compile(r"Host key for (\S+) has changed and you have requested strict checking")
_SENT_RE = re.compile(r"The fingerprint for the (\S+) key sent by the remote host is")
_FINGERPRINT_RE = re.compile(r"(SHA256:[A-Za-z0-9+/]+)")
_OFFENDING_RE = re.compile(r"Offending \S+ key in (\S+:\d+)")
_REVOKED_RE = re.compile(r"The (\S+) host key for (\S+) is marked as revoked")
_SERVER_KEY_RE = re.compile(r"debug1: Server host key: (\S+) (SHA256:[A-Za-z0-9+/]+)")
_CONNECTION_ENDED_RE = re.compile(r"Connection (?:to|closed by) \S+ port \d+")
"""ssh's closing words after a failure it has already named on the line before."""
HOST_KEY_FAILED = "Host key verification failed."
AUTH_FAILURES = ("Permission denied", "Too many authentication failures", "Authentication failed")
CONFIG_FAILURES = ("Bad configuration option", "command-line line", "Bad owner or permissions")
NOISE_PREFIXES = ("Warning: Permanently added", "debug1:")
"""stderr lines that never explain a failure."""


# -- keys the user accepted ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OfferedHostKey:
    """An unknown host key the system ssh client refused, as the user is shown it (``UnknownHostKey.key``).

    ``accept()`` lets the next connection to ``target`` run with ``StrictHostKeyChecking=accept-new``: ssh
    records the key itself (in the file, the form and under the names its config says), and the link then
    checks that the key recorded for ``lookup_name`` is this one before it sends anything more.
    """

    target: str
    lookup_name: str
    key_type: str
    fingerprint: str

    def accept(self) -> str:
        """Have the next connection to ``target`` record this key; returns "" (ssh writes the line)."""
        with _accepted_lock:
            _accepted[self.target] = self
        return ""


_accepted: dict[str, OfferedHostKey] = {}
_accepted_lock = threading.Lock()


def _take_accepted(target: str) -> OfferedHostKey | None:
    with _accepted_lock:
        return _accepted.pop(target, None)


# -- one ssh child ---------------------------------------------------------------------------------------


class SshProcess:
    """One ``ssh`` child as a ``stream.Pipe``, in a process group of its own (with its ProxyCommand).

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

    # -- stream.Pipe ----------------------------------------------------------------------------------------

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


# -- ssh's failures in one line ---------------------------------------------------------------------------


def explain_failure(target: str, lines: list[str]) -> LinkError:
    """The error for ssh's failure (exit status 255) from its stderr ``lines``.

    Host-key and authentication failures are permanent (``worth_retrying`` is False for them), a broken
    configuration too; a network failure is a plain LinkError, worth retrying. An unknown host key gives a
    ``HostKeyError`` here; ``OpenSshSession`` reads its fingerprint and offers it instead.
    """
    text = "\n".join(lines)
    if HOST_KEY_FAILED in text or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return _host_key_failure(target, lines, text)
    for line in reversed(lines):
        if any(marker in line for marker in AUTH_FAILURES):
            return AuthFailed(f"{target}: authentication failed: {shown(line)}")
    telling = [line for line in lines if not line.startswith(NOISE_PREFIXES)]
    if not telling:
        return LinkError(f"{target}: ssh failed (exit status {SSH_FAILED}) without saying why")
    last = telling[-1]
    if any(marker in last for marker in CONFIG_FAILURES):
        return SetupFailed(f"{target}: {shown(last)}")
    detail = shown(last)
    if len(telling) > 1 and _CONNECTION_ENDED_RE.match(last):
        detail = f"{shown(telling[-2])} ({detail})"
    return LinkError(f"{target}: {detail}")


def _host_key_failure(target: str, lines: list[str], text: str) -> HostKeyError:
    changed = _CHANGED_RE.search(text)
    if changed is not None or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        sent = _SENT_RE.search(text)
        offending = _OFFENDING_RE.search(text)
        return ChangedHostKey.at(
            target,
            shown(changed.group(1)) if changed else "the host",
            shown(sent.group(1)) if sent else "a key",
            _fingerprint_after(lines, _SENT_RE) or "(no fingerprint shown)",
            shown(offending.group(1)) if offending else "known_hosts",
        )
    revoked = _REVOKED_RE.search(text)
    if revoked is not None:
        return RevokedHostKey.at(target, shown(revoked.group(2)), shown(revoked.group(1)), None, None)
    unknown = _UNKNOWN_RE.search(text)
    if unknown is not None:
        key_type, name = shown(unknown.group(1)), shown(unknown.group(2))
        return HostKeyError(f"{target}: unknown {key_type} host key for {name}; not connecting")
    if lines and lines[-1] != HOST_KEY_FAILED:
        # The ssh of a ProxyJump or ProxyCommand hop refused its host's key, and the connection it carried
        # closed: that hop's key is for the user to check, with ssh itself.
        return HostKeyError(
            f"{target}: the host key of a jump host was refused (its ssh: {HOST_KEY_FAILED}); not connecting "
            "(connect to the jump host once with ssh to check and accept its key)"
        )
    return HostKeyError(f"{target}: host key verification failed; not connecting")


def _fingerprint_after(lines: list[str], pattern: re.Pattern[str]) -> str | None:
    """The SHA256 fingerprint on the line matching ``pattern`` or the line after it."""
    for index, line in enumerate(lines):
        if pattern.search(line):
            for candidate in lines[index : index + 2]:
                found = _FINGERPRINT_RE.search(candidate)
                if found is not None:
                    return found.group(1)
    return None


# -- the session ------------------------------------------------------------------------------------------


class OpenSshSession:
    """The ``ssh.link.Session`` of the system ssh client: one ssh child per command.

    Args:
        target: The target word the user asked for (validated again here; it starts every error line).
        options: The link's options (connect timeout, ``accept_new``).
        settings: The target's resolved settings (known_hosts files and names, ConnectTimeout, the user's
            StrictHostKeyChecking).
        config_path: The ssh config file used instead of the defaults (``ssh -F``); default
            ``$GPUTUI_SSH_CONFIG``.
    """

    errors: tuple[type[BaseException], ...] = (OSError, EOFError)

    def __init__(
        self, target: str, options: LinkOptions, settings: SshSettings, *, config_path: str | None
    ) -> None:
        self.target = target
        self.options = options
        self.settings = settings
        self.config_file = config_file(config_path)
        self.spec = parse_target(target)
        self.timeout_s = settings.step_timeout_s(options.connect_timeout_s)
        self.accepting = _take_accepted(target)
        """A key the user accepted in the app: this session records it (accept-new) and checks it."""
        self._lock = threading.Lock()
        self._ended: str | None = None
        self._procs: list[SshProcess] = []
        self._last: SshProcess | None = None
        """The ssh of the last command run (not a probe)."""

    @property
    def ended(self) -> str | None:
        with self._lock:
            return self._ended

    @property
    def strict_host_key_checking(self) -> str:
        """``accept-new`` when this connection may record an unknown key, else ``yes``; never weaker."""
        if self.accepting is not None or records_unknown_keys(self.options, self.settings):
            return "accept-new"
        return "yes"

    def argv(self, command: str, *, strict: str, extra: tuple[str, ...] = ()) -> list[str]:
        """The ssh command line that runs ``command`` on the target."""
        ssh = shutil.which("ssh")
        if ssh is None:
            raise SetupFailed(f"{self.target}: the OpenSSH client (ssh) is not installed")
        argv = [ssh]
        if self.config_file:
            argv += ["-F", self.config_file]
        argv += ["-T", "-e", "none"]
        connect_timeout = max(1, math.ceil(self.timeout_s))
        for option in (
            *FIXED_OPTIONS,
            f"StrictHostKeyChecking={strict}",
            f"ConnectTimeout={connect_timeout}",
            *extra,
        ):
            argv += ["-o", option]
        return [*argv, *target_words(self.spec), command]

    # -- Session --------------------------------------------------------------------------------------------

    def login(self, settings: SshSettings) -> None:
        """Nothing to do: each command's ssh logs in by itself (or through the user's running master)."""

    def start_timeout_s(self, timeout_s: float) -> float:
        return CONNECT_STEPS * timeout_s

    def exec(self, command: str, timeout_s: float) -> SshProcess:
        self._end_finished()
        proc = self._spawn(self.argv(command, strict=self.strict_host_key_checking))
        with self._lock:
            self._last = proc
        return proc

    def can_exec_again(self) -> bool:
        return self.ended is None

    def explain(self, error: LinkError) -> LinkError:
        """ssh's own failure in one line (``explain_failure``) when it failed; else ``error`` as it is."""
        with self._lock:
            proc = self._last
        if proc is None or proc.wait_exit(EXIT_WAIT_S) != SSH_FAILED:
            return error
        lines = proc.stderr_lines()
        failure = explain_failure(self.target, lines)
        unknown = _UNKNOWN_RE.search("\n".join(lines))
        if unknown is not None and not isinstance(failure, ChangedHostKey | RevokedHostKey):
            return self._unknown_key(unknown.group(2), failure)
        return failure

    def collector_started(self) -> None:
        """Check that a key the user accepted is the one ssh recorded, before anything more is sent."""
        offer = self.accepting
        if offer is None:
            return
        settings = self.settings
        known = load_known_hosts(settings.user_known_hosts_files + settings.global_known_hosts_files)
        recorded = {
            fingerprint_sha256(line.blob)
            for line in known
            if line.marker is None and line.matches(offer.lookup_name)
        }
        if offer.fingerprint not in recorded:
            name = shown(offer.lookup_name)
            raise ChangedHostKey(
                f"{self.target}: the host presented a key other than the {shown(offer.key_type)} "
                f"{offer.fingerprint} accepted for {name}, and ssh recorded it; not connecting (remove it "
                f"with ssh-keygen -R '{name}' and check the host)"
            )

    def abort(self, reason: str) -> None:
        with self._lock:
            if self._ended is None:
                self._ended = reason
            procs = list(self._procs)
        for proc in procs:
            proc.close()
            proc.signal_group(signal.SIGKILL)

    def close(self) -> None:
        with self._lock:
            if self._ended is None:
                self._ended = f"{self.target}: link closed"
            procs, self._procs = self._procs, []
        end_processes(procs, POLITE_S)

    # -- its steps -------------------------------------------------------------------------------------------

    def _spawn(self, argv: list[str]) -> SshProcess:
        ended = self.ended
        if ended is not None:
            raise LinkError(ended)
        try:
            proc = SshProcess(argv)
        except OSError as exc:
            raise phase_error(self.target, "cannot run ssh", exc) from None
        with self._lock:
            ended = self._ended
            if ended is None:
                self._procs.append(proc)
        if ended is not None:
            end_processes([proc], 0.0)
            raise LinkError(ended)
        return proc

    def _end_finished(self) -> None:
        """End the ssh processes whose command finished (the collector that found no python3)."""
        with self._lock:
            finished = [proc for proc in self._procs if proc.wait_exit(0.0) is not None]
            self._procs = [proc for proc in self._procs if proc not in finished]
        end_processes(finished, 0.0)

    def _unknown_key(self, name: str, refusal: LinkError) -> LinkError:
        """The refusal of an unknown key for ``name``, offering the key when its fingerprint can be read.

        A second connection, as strict and through the same route, says which key the host presents and
        stops there (``PROBE_OPTIONS``). A jump host's key cannot be accepted from here: ssh checks it in a
        process of its own, with the user's own settings.
        """
        own_name = lookup_name(self.settings.hostname, self.settings.port, self.settings.host_key_alias)
        if name != own_name:
            return HostKeyError(
                f"{self.target}: unknown host key for {shown(name)} (a jump host); not connecting (connect "
                "to it once with ssh to check and accept its key)"
            )
        probe = self._spawn(self.argv(PROBE_COMMAND, strict="yes", extra=PROBE_OPTIONS))
        deadline = time.monotonic() + self.start_timeout_s(self.timeout_s)
        try:
            while time.monotonic() < deadline and probe.wait_exit(0.0) is None:
                if probe.recv(65536) == b"":
                    probe.wait_exit(min(1.0, max(0.0, deadline - time.monotonic())))
                    break
        except (EOFError, OSError):
            pass
        lines = probe.stderr_lines()
        with self._lock:
            if probe in self._procs:
                self._procs.remove(probe)
        end_processes([probe], 0.0)
        presented = None
        for line in lines:
            found = _SERVER_KEY_RE.fullmatch(line)
            if found is not None:
                presented = found
        if presented is None:
            return HostKeyError(f"{refusal} (its fingerprint could not be read)")
        key_type, fingerprint = presented.group(1), presented.group(2)
        offer = OfferedHostKey(self.target, name, key_type, fingerprint)
        return UnknownHostKey(self.target, self.target, name, offer, key_type, None, fingerprint)
