"""``SshLink``: the HostLink of one remote host, a collector started over an SSH session.

The open sequence is the same whichever client logs in: resolve the target, log in, run the collector with
its payload on stdin, fall back to the reduced collector on a host without python3, wait for the hello, send
the health settings. What differs is the ``Session``: paramiko's (``connect.Connection``) or the system ssh
client's (``gputui.transports.ssh.openssh.link.OpenSshSession``), chosen at every open (``client``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from gputui.agent.safefile import UnsafeFile, read_plain
from gputui.core.link import SSH_CLIENTS, HostLink, LinkError, LinkOptions
from gputui.core.model import HostSnapshot
from gputui.transports.freshness import MIN_STALE_S, stale_after_s
from gputui.transports.reconnect import worth_retrying
from gputui.transports.ssh.client_choice import OPENSSH, choose_client
from gputui.transports.ssh.config import (
    IDENTITY_MAX_BYTES,
    KNOWN_HOSTS_MAX_BYTES,
    SshSettings,
    resolve,
)
from gputui.transports.ssh.errors import PythonMissing, PythonTooOld, phase_error
from gputui.transports.ssh.payload import agent_payload, remote_command_line
from gputui.transports.ssh.stream import CollectorStream

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.transports.ssh.interfaces import Pipe, Session

REDUCED_MIN_STALE_S = 10.0
"""The reduced collector runs nvidia-smi twice per sample, each taking seconds on a big host."""
READER_JOIN_S = 0.3
"""How long closing waits for the reader thread (it stops by itself within a second)."""
SWITCH_JOIN_S = 1.0
"""How long the switch to the reduced collector waits for the first attempt's reader to stop."""
OPENSSH_FLAG = "--ssh-client openssh"


class SshLink(HostLink):
    """A link to the collector on one remote host over SSH.

    ``open()`` resolves the target as OpenSSH would (``sshconfig``), logs in (``connect`` with paramiko, or
    the system ssh client), runs the collector (``payload``) and waits for its hello; on a host without
    python3 it runs the reduced collector instead (``reduced``). The stream (``stream``) then delivers the
    snapshots and carries the commands. ``open()`` may be called again after ``close()`` or a failure.

    Args:
        target: Alias or ``[user@]host[:port]``.
        options: Intervals, read-only mode, ``accept_new``, connect timeout, ``ssh_client``.
        config_path: An ssh config file used instead of the defaults (``ssh -F``); default
            ``options.extra["ssh_config"]``, then ``$GPUTUI_SSH_CONFIG``.
        use_openssh: Force or avoid ``ssh -G`` (default: use it when installed).
        source: Collector source to ship instead of the installed collector (tests use a stand-in).
        client: ``paramiko``, ``openssh`` (the system ssh client), ``auto`` (openssh where an ``ssh`` is
            installed, paramiko where none is) or ``config`` (openssh where the host's ssh config needs it):
            ``client_choice``'s rule; default ``options.ssh_client``.

    Attributes:
        boot_id: The remote boot id from the last hello (None before the first open).
        mode: The collector's mode from the hello (``nvml``, ``smi``, ``ps``).
        hello: The whole hello message (None while the link is not open).
        reduced: The host has no python3 and the reduced collector runs (monitoring only).
        settings: The resolved SSH settings of the target.
        client_used: ``paramiko`` or ``openssh``: the client of the last open (None before).
    """

    def __init__(
        self,
        target: str,
        options: LinkOptions | None = None,
        *,
        config_path: str | None = None,
        use_openssh: bool | None = None,
        source: bytes | None = None,
        client: str | None = None,
    ) -> None:
        self.target = target
        self.options = options or LinkOptions()
        extra_config = self.options.extra.get("ssh_config")
        self.config_path = config_path or (str(extra_config) if extra_config else None)
        self.use_openssh = use_openssh
        self.client = client or self.options.ssh_client
        if self.client not in SSH_CLIENTS:
            raise ValueError(f"unknown SSH client {self.client!r}")
        self.client_used: str | None = None
        self._source = source
        self.boot_id: str | None = None
        self.mode: str | None = None
        self.hello: dict[str, Any] | None = None
        self.reduced = False
        self.settings: SshSettings | None = None
        self._lock = threading.Lock()
        self._opening: object | None = None
        """The open under way: ``close()`` clears it, so an open still resolving the target stops."""
        self._session: Session | None = None
        self._stream: CollectorStream | None = None
        """The stream of the last open, kept after it ended so that later calls raise its error."""
        self._closed = False
        self._first_grace_s = max(MIN_STALE_S, self.options.connect_timeout_s)

    @property
    def stale_after_s(self) -> float:
        """Seconds without any data from the collector after which the link counts as broken."""
        floor_s = REDUCED_MIN_STALE_S if self.reduced else MIN_STALE_S
        return stale_after_s(self.options.memory_interval_s, floor_s)

    # -- open ------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Connect, start the collector and wait for its hello. Raises LinkError (one line)."""
        self._release()
        opening = object()
        with self._lock:
            self._opening = opening
            self._stream = None
            self._closed = False
        self.hello = None
        self.reduced = False
        settings = resolve(self.target, self.config_path, self.use_openssh)
        self.settings = settings
        session = self._new_session(settings)
        with self._lock:
            superseded = self._opening is not opening
            if not superseded:
                self._session = session
        if superseded:
            session.close()
            raise LinkError(f"{self.target}: link closed")
        try:
            self._open(session, settings)
        except LinkError as exc:
            self._release(session)
            raise self._with_hint(exc, settings) from None
        except session.errors as exc:
            self._release(session)
            raise phase_error(self.target, "connection failed", exc) from None

    def _new_session(self, settings: SshSettings) -> Session:
        """The session of the client this open uses (``client_choice.choose_client``)."""
        if choose_client(self.client, settings) == OPENSSH:
            from gputui.transports.ssh.openssh.link import OpenSshSession

            self.client_used = "openssh"
            return OpenSshSession(self.target, self.options, settings, config_path=self.config_path)
        from gputui.transports.ssh.paramiko.connect import Connection

        self.client_used = "paramiko"
        return Connection(
            self.target, self.options, config_path=self.config_path, use_openssh=self.use_openssh
        )

    def _with_hint(self, error: LinkError, settings: SshSettings) -> LinkError:
        """``error``, saying which flag helps when paramiko failed at what only the system ssh does."""
        if self.client_used != "paramiko" or worth_retrying(error):
            return error
        needs = settings.openssh_only()
        if not needs or OPENSSH_FLAG in str(error):
            return error
        error.args = (
            f"{error} (its ssh config asks for {', '.join(needs)}, which only the system ssh client does: "
            f"use {OPENSSH_FLAG})",
        )
        return error

    def _open(self, session: Session, settings: SshSettings) -> None:
        timeout_s = settings.step_timeout_s(self.options.connect_timeout_s)
        _check_user_files(settings)
        session.login(settings)
        payload = agent_payload(self._source)
        command = remote_command_line(payload, self.options)
        try:
            stream = self._start(session, command, self._collector_stream, payload.data, timeout_s)
        except PythonMissing as missing:
            if not session.can_exec_again():
                raise
            too_old = missing if isinstance(missing, PythonTooOld) else None
            stream = self._start_reduced(session, timeout_s, too_old)
        self._accept_hello(stream)
        session.collector_started()
        stream.configure(self.options, timeout_s)

    def _collector_stream(self, pipe: Pipe) -> CollectorStream:
        return CollectorStream(
            self.target, pipe, stale_after_s=self.stale_after_s, first_grace_s=self._first_grace_s
        )

    def _start(
        self,
        session: Session,
        command: str,
        make_stream: Callable[[Pipe], CollectorStream],
        payload: bytes,
        timeout_s: float,
    ) -> CollectorStream:
        """Run ``command``, write ``payload`` to it and wait for the hello of the stream it starts."""
        start_s = session.start_timeout_s(timeout_s)
        # Past authentication, paramiko's exec request and the payload write wait without deadlines of their
        # own: a watchdog ends the session if the host stops answering. Generous: exec, payload write and
        # hello each have a deadline of start_s; this only catches hangs.
        watchdog = threading.Timer(2 * start_s + 1.0, self._abort, args=(session,))
        watchdog.daemon = True
        watchdog.start()
        try:
            stream = make_stream(session.exec(command, timeout_s))
            with self._lock:
                if session is not self._session:
                    raise LinkError(f"{self.target}: link closed")
                self._stream = stream
            ended = session.ended  # the watchdog may have fired before there was a stream to fail
            if ended is not None:
                stream.fail(LinkError(ended))
            try:
                stream.start(payload, start_s)
            except LinkError as exc:
                raise session.explain(exc) from None
            return stream
        finally:
            watchdog.cancel()

    def _start_reduced(
        self, session: Session, timeout_s: float, too_old: PythonTooOld | None = None
    ) -> CollectorStream:
        """No python3 there (or one too old: ``too_old``): stream ``nvidia-smi`` and ``ps`` output from a
        fixed POSIX sh loop instead."""
        with self._lock:
            if session is not self._session:
                raise LinkError(f"{self.target}: link closed")
            first, self._stream = self._stream, None
        if first is not None:
            first.end(SWITCH_JOIN_S)
        from gputui.transports.ssh.reduced import ReducedStream, reduced_command  # for hosts without python3

        nonce = os.urandom(8).hex()
        command = reduced_command(nonce, self.options)
        self.reduced = True

        def make_stream(pipe: Pipe) -> CollectorStream:
            return ReducedStream(
                self.target,
                pipe,
                nonce,
                stale_after_s=self.stale_after_s,
                first_grace_s=self._first_grace_s,
                too_old=too_old,
            )

        return self._start(session, command, make_stream, b"", timeout_s)

    def _abort(self, session: Session) -> None:
        message = f"{self.target}: no answer within the connect deadline after login"
        with self._lock:
            stream = self._stream if session is self._session else None
        if stream is not None:
            stream.fail(LinkError(message))
        session.abort(message)

    def _accept_hello(self, stream: CollectorStream) -> None:
        hello = stream.hello or {}
        boot_id = hello.get("boot_id")
        self.boot_id = None if boot_id is None else str(boot_id)
        mode = hello.get("mode")
        self.mode = None if mode is None else str(mode)
        self.hello = hello

    # -- HostLink --------------------------------------------------------------------------------------

    def _current(self) -> CollectorStream:
        with self._lock:
            stream, closed = self._stream, self._closed
        if stream is None:
            raise LinkError(f"{self.target}: link {'closed' if closed else 'not open'}")
        return stream

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        """The newest snapshot not yet returned (older unread ones are dropped); None on timeout.

        Raises:
            LinkError: The link broke, or no data came for ``stale_after_s`` ("no data for 3.2 s").
        """
        return self._current().next_snapshot(timeout_s)

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one command and wait for its reply's result. Raises LinkError on error, failure or timeout."""
        return self._current().request(command, timeout_s)

    def close(self) -> None:
        """Ask the collector to quit, then close the session; returns within about 2 s."""
        with self._lock:
            self._closed = True
            self._opening = None
            stream = self._stream if self._session is not None else None
        if stream is not None:
            stream.close()
        self._release()

    def _release(self, session: Session | None = None) -> None:
        """End ``session`` (default: the current one) and its stream; returns within about 2 s."""
        with self._lock:
            if session is None:
                session = self._session
                self._opening = None
            current = session is not None and session is self._session
            stream = self._stream if current else None
            if current:
                self._session = None
        if session is None:
            return
        if stream is not None:
            stream.fail(LinkError(f"{self.target}: link closed"))
        session.close()  # its channel or process is the stream's pipe
        if stream is not None:
            stream.join(READER_JOIN_S)
        if current:
            self.hello = None


def _check_user_files(settings: SshSettings) -> None:
    """Refuse, in one line, a known-hosts or identity file that is no regular file or is too large.

    Checked here rather than left to a client that would block on a FIFO or read a device for ever; the
    files are only checked (ssh parses them itself, paramiko through ``knownhosts``).

    Raises:
        LinkError: The first such file, named.
    """
    known_hosts = settings.user_known_hosts_files + settings.global_known_hosts_files
    checks = [("known hosts", os.path.expanduser(path), KNOWN_HOSTS_MAX_BYTES) for path in known_hosts]
    for identity in settings.identity_files:
        checks += [("identity file", path, IDENTITY_MAX_BYTES) for path in (identity, f"{identity}.pub")]
    for label, path, max_bytes in checks:
        try:
            read_plain(path, max_bytes)
        except UnsafeFile as exc:
            raise LinkError(f"{label}: {exc}") from None
