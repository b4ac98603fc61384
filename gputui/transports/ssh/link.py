"""Remote hosts over SSH (paramiko): the collector is shipped as source over one exec channel.

Nothing of gputui is installed on the remote host. ``open()`` resolves the target as OpenSSH would
(``sshconfig``), connects (through ProxyJump hops as ``direct-tcpip`` channels, each hop resolved and
host-key checked on its own), checks the host key against known_hosts (``hostkeys``), authenticates with the
ssh-agent's keys and the resolved identity files (never a prompt), then runs::

    python3 -u -c 'import sys,zlib,marshal;exec(<code of N2 bytes if the magic is M, else source of N1>)' \
        --interval S ...

and writes ``gputui/agent.py`` to its stdin, zlib-compressed (N1 bytes), then the same file compiled by this
python, marshalled and compressed (N2 bytes; ``AgentPayload``). A remote python with the same bytecode magic
number runs that code object; any other compiles the source. The command line holds only fixed text, two
integers, the magic number in hex and validated numbers; nothing from process data or user strings ever
becomes part of it (health URLs travel as JSON in a ``configure`` command). After the payload, stdin carries
JSON-line commands and stdout JSON-line messages: a reader thread parses them into a short queue of the
newest snapshots and a table of replies.

Every remote read has a deadline: connect, banner, handshake, auth, channel open and the agent's ``hello`` are
bounded by the connect timeout; after that, a link that delivers no data for ``3 × memory_interval_s`` is
broken (``next_snapshot`` raises "no data for 3.2 s"); its stream keeps NAT state alive. The
caller shows the host stale and reopens it (``open()`` again on the same link) with ``reconnect.Backoff``.
``close()`` returns within 2 s even when the host hangs.

Boot identity: ``boot_id`` is the remote ``/proc/sys/kernel/random/boot_id`` from the agent's hello (snapshots
carry it too). When a reopened link sees another boot id, ``boot_id_changed`` is True and ``previous_boot_id``
holds the old one: the UI must then forget every remembered pid and selection for that host (pids of the old
boot mean nothing now; the agent also refuses kills carrying the old boot id).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import os
import re
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import paramiko
import paramiko.agent

# paramiko logs connection failures at ERROR; with no handler configured Python would print them on stderr,
# over the TUI. Every failure reaches the caller as a LinkError instead.
if not logging.getLogger("paramiko").handlers:
    logging.getLogger("paramiko").addHandler(logging.NullHandler())

from gputui.core.model import PROTOCOL_VERSION, HostSnapshot
from gputui.core.textsafe import visible
from gputui.transports.base import HostLink, LinkError, LinkOptions
from gputui.transports.hostkeys import (
    ChangedHostKey,
    RevokedHostKey,
    UnknownHostKey,
    check_host_key,
    fingerprint_sha256,
    known_key_types,
    load_known_hosts,
    lookup_name,
    record_host_key,
)
from gputui.transports.ssh.payload import _number_arg, agent_command, agent_payload, agent_source
from gputui.transports.sshconfig import SshSettings, resolve

LINE_CAP_BYTES = 16 * 1024 * 1024
"""Longest agent line accepted; a longer one breaks the link (a runaway remote must not eat our memory)."""
PREAMBLE_CAP_BYTES = 64 * 1024
"""Non-JSON output tolerated before the hello (login scripts that print banners)."""
STDERR_TAIL_BYTES = 8 * 1024
SNAPSHOT_QUEUE_LEN = 4
STALE_FACTOR = 3.0
MIN_STALE_S = 1.0
REDUCED_MIN_STALE_S = 10.0
"""The reduced collector runs nvidia-smi twice per sample, each taking seconds on a big host."""
READ_POLL_S = 1.0
"""How often an idle reader thread wakes to look for a closed link (close() also wakes it at once)."""
TRANSPORT_POLL_S = 1.0
"""paramiko's transport thread wakes this often on an idle socket (its default, 0.1 s, is ten wake-ups a
second per host); set once the collector runs, so handshake deadlines keep paramiko's own granularity."""
DEFAULT_KEEPALIVE_S = 15
"""Transport keepalive without ServerAliveInterval: the collector's stream already keeps NAT state alive."""
CLOSE_BUDGET_S = 1.5
MAX_JUMP_DEPTH = 8
RECV_CHUNK_BYTES = 256 * 1024
PYTHON_MISSING_STATUS = 127
PYTHON_MISSING_MESSAGE = "python3 not found on host"

_RSA_HOSTKEY_ALGORITHMS = ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")


class AuthFailed(LinkError):
    """No offered key was accepted; the message names the host and every key tried or skipped."""

    permanent = True


class SetupFailed(LinkError):
    """The host cannot run the collector as configured (protocol mismatch, no python3, ProxyCommand)."""

    permanent = True


def _visible(text: str, limit: int = 160) -> str:
    """One safe line for an error message from remote bytes (control characters escaped, length capped)."""
    return visible(text, limit)


def _phase_error(target: str, what: str, exc: BaseException) -> LinkError:
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        detail = exc.strerror
    return LinkError(f"{target}: {what}: {_visible(detail)}")


class SshLink(HostLink):
    """A link to the collector on one remote host over SSH.

    Args:
        target: Alias or ``[user@]host[:port]``.
        options: Intervals, read-only mode, ``accept_new``, connect timeout.
        config_path: An ssh config file used instead of the defaults (``ssh -F``); default
            ``options.extra["ssh_config"]``, then ``$GPUTUI_SSH_CONFIG``.
        use_openssh: Force or avoid ``ssh -G`` (default: use it when installed).
        source: Collector source to ship instead of ``gputui/agent.py`` (tests use a stand-in).

    Attributes:
        boot_id: The remote boot id from the last hello (None before the first open).
        previous_boot_id: The boot id of the connection before, when ``boot_id_changed``.
        boot_id_changed: The last ``open()`` found a different boot id than the connection before.
        mode: The collector's mode from the hello (``nvml``, ``smi``, ``ps``).
        hello: The whole hello message.
        settings: The resolved SSH settings of the target.
    """

    def __init__(
        self,
        target: str,
        options: LinkOptions | None = None,
        *,
        config_path: str | None = None,
        use_openssh: bool | None = None,
        source: bytes | None = None,
    ) -> None:
        self.target = target
        self.options = options or LinkOptions()
        extra_config = self.options.extra.get("ssh_config")
        self.config_path = config_path or (str(extra_config) if extra_config else None)
        self.use_openssh = use_openssh
        self._source = source
        self.boot_id: str | None = None
        self.previous_boot_id: str | None = None
        self.boot_id_changed = False
        self.mode: str | None = None
        self.hello: dict[str, Any] | None = None
        self.settings: SshSettings | None = None
        self._cond = threading.Condition()
        self._generation = 0
        self._snapshots: deque[HostSnapshot] = deque(maxlen=SNAPSHOT_QUEUE_LEN)
        self._replies: dict[int, dict[str, Any]] = {}
        self._pending: set[int] = set()
        self._error: LinkError | None = None
        self._last_data_mono = 0.0
        self._had_snapshot = False
        self._first_grace_s = max(MIN_STALE_S, self.options.connect_timeout_s)
        self._next_id = 1
        self._channel: Any = None
        self._transports: list[Any] = []
        self._sockets: list[socket.socket] = []
        self._reader: threading.Thread | None = None
        self._write_lock = threading.Lock()
        self._stderr_tail = bytearray()
        self.reduced = False
        """True when the host has no python3 and the link streams nvidia-smi/ps output (monitoring only)."""
        self._reduced: _ReducedStream | None = None
        self._latest_reduced: HostSnapshot | None = None

    # -- properties ----------------------------------------------------------------------------------------

    @property
    def stale_after_s(self) -> float:
        """Seconds without any data from the agent after which the link counts as broken."""
        floor_s = REDUCED_MIN_STALE_S if self.reduced else MIN_STALE_S
        return max(floor_s, STALE_FACTOR * self.options.memory_interval_s)

    @property
    def last_data_age_s(self) -> float | None:
        """Seconds since the agent last sent anything (None when never connected)."""
        with self._cond:
            if not self._last_data_mono:
                return None
            return time.monotonic() - self._last_data_mono

    def _timeout_s(self, settings: SshSettings) -> float:
        timeout_s = self.options.connect_timeout_s
        if settings.connect_timeout_s:
            timeout_s = min(timeout_s, settings.connect_timeout_s)
        return max(0.1, timeout_s)

    # -- open ----------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Connect, start the collector and wait for its hello. Raises LinkError (one line).

        May be called again after ``close()`` or a failure to reconnect.
        """
        self._teardown()
        with self._cond:
            self._generation += 1
            generation = self._generation
            self._snapshots.clear()
            self._replies.clear()
            self._pending.clear()
            self._error = None
            self._last_data_mono = 0.0
            self._had_snapshot = False
            self._stderr_tail = bytearray()
            self.reduced = False
            self._reduced = None
            self._latest_reduced = None
        try:
            self._open(generation)
        except LinkError:
            self._teardown()
            raise
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self._teardown()
            raise _phase_error(self.target, "connection failed", exc) from None

    def _open(self, generation: int) -> None:
        source = self._source if self._source is not None else agent_source()
        settings = resolve(self.target, self.config_path, self.use_openssh)
        self.settings = settings
        timeout_s = self._timeout_s(settings)
        transport = self._connect(settings, None, 0)
        keepalive_s = settings.server_alive_interval_s or DEFAULT_KEEPALIVE_S
        transport.set_keepalive(max(1, math.ceil(keepalive_s)))

        try:
            hello = self._start_collector(transport, generation, timeout_s, source)
        except SetupFailed as exc:
            if not str(exc).endswith(PYTHON_MISSING_MESSAGE) or not transport.is_active():
                raise
            hello = self._start_reduced(transport, generation, timeout_s)
        self._accept_hello(hello)
        self._slow_transport_polls()
        if self.options.health_urls or self.options.health_generate:
            # URLs are user strings: they go as JSON data, never on the command line.
            try:
                self.request(
                    {
                        "cmd": "configure",
                        "health_urls": list(self.options.health_urls),
                        "discover_health": self.options.discover_health,
                        "health_generate": self.options.health_generate,
                    },
                    timeout_s,
                )
            except LinkError as exc:
                if self._error is not None:
                    raise
                # The collector refused the URLs: the same URLs will be refused again.
                raise SetupFailed(f"{exc} (health URLs)") from None

    def _start_channel(
        self, transport: Any, generation: int, timeout_s: float, command: str, handler: Any, payload: bytes
    ) -> dict[str, Any]:
        """Exec ``command``, start the reader with ``handler``, write ``payload``, wait for the hello."""
        # Past authentication, paramiko's exec request and the source write wait without deadlines of their
        # own: a watchdog closes everything if the host stops answering. Generous: exec, source write and
        # hello each have a deadline of timeout_s; this only catches hangs.
        watchdog = threading.Timer(2 * timeout_s + 1.0, self._abort, args=(generation,))
        watchdog.daemon = True
        watchdog.start()
        try:
            try:
                channel = transport.open_session(timeout=timeout_s)
                channel.settimeout(READ_POLL_S)
                with self._cond:
                    self._channel = channel
                channel.exec_command(command)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise self._aborted_or(generation, "cannot start the collector", exc) from None
            reader = threading.Thread(
                target=self._read_loop,
                args=(channel, generation, handler),
                name=f"gputui-ssh-{self.target}",
                daemon=True,
            )
            with self._cond:
                self._reader = reader
                self._last_data_mono = time.monotonic()
            reader.start()
            if payload:
                try:
                    self._send_bytes(payload, time.monotonic() + timeout_s, "collector source")
                except LinkError:
                    # The remote may have exited at once (no python3): its status says more than the write.
                    with self._cond:
                        self._cond.wait_for(lambda: self._error is not None, timeout=min(1.0, timeout_s))
                        if self._error is not None:
                            raise self._error_again() from None
                    raise
            return self._wait_hello(generation, time.monotonic() + timeout_s, timeout_s)
        finally:
            watchdog.cancel()

    def _start_collector(
        self, transport: Any, generation: int, timeout_s: float, source: bytes
    ) -> dict[str, Any]:
        payload = agent_payload(source)
        command = agent_command(payload, self.options)
        return self._start_channel(transport, generation, timeout_s, command, self._handle_line, payload.data)

    def _start_reduced(self, transport: Any, generation: int, timeout_s: float) -> dict[str, Any]:
        """No python3 there: stream ``nvidia-smi`` and ``ps`` output from a fixed POSIX sh loop instead."""
        with self._cond:
            if generation != self._generation:  # closed meanwhile
                raise LinkError(f"{self.target}: link closed")
            old_channel, self._channel = self._channel, None
            old_reader, self._reader = self._reader, None
            self._error = None
            self.hello = None
        if old_channel is not None:
            old_channel.close()
        if old_reader is not None:
            old_reader.join(1.0)
        nonce = os.urandom(8).hex()
        self._reduced = _ReducedStream(self.target, nonce)
        command = reduced_command(nonce, self.options)
        self.reduced = True
        return self._start_channel(transport, generation, timeout_s, command, self._handle_reduced_line, b"")

    def _handle_reduced_line(self, raw: bytes, generation: int) -> str | None:
        stream = self._reduced
        if stream is None:
            return None
        try:
            event = stream.feed(raw.decode("utf-8", "replace"))
        except LinkError as exc:
            return str(exc)
        if event == "hello":
            with self._cond:
                if generation == self._generation:
                    self.hello = stream.hello()
                    self._hello_generation = generation
                self._cond.notify_all()
        elif isinstance(event, HostSnapshot):
            with self._cond:
                if generation == self._generation:
                    self._snapshots.append(event)
                    self._latest_reduced = event
                self._cond.notify_all()
        elif event == "preamble":
            return "preamble"
        return None

    def _aborted_or(self, generation: int, what: str, exc: BaseException) -> LinkError:
        with self._cond:
            if self._error is not None and self._generation == generation:
                return self._error_again()
        return _phase_error(self.target, what, exc)

    def _abort(self, generation: int) -> None:
        with self._cond:
            if generation != self._generation:
                return
            if self._error is None:
                self._error = LinkError(f"{self.target}: no answer within the connect deadline after login")
            self._cond.notify_all()
        self._force_close_transports()

    def _wait_hello(self, generation: int, deadline: float, timeout_s: float) -> dict[str, Any]:
        with self._cond:
            while self.hello is None or self._generation != generation:
                if self._error is not None:
                    raise self._error_again()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LinkError(f"{self.target}: no hello from the collector within {timeout_s:.1f} s")
                self._cond.wait(left)
            return self.hello

    def _accept_hello(self, hello: dict[str, Any]) -> None:
        protocol = hello.get("protocol")
        if protocol != PROTOCOL_VERSION:
            raise SetupFailed(
                f"{self.target}: the collector speaks protocol {protocol!r}, this gputui speaks "
                f"{PROTOCOL_VERSION}"
            )
        boot_id = hello.get("boot_id")
        new_boot_id = None if boot_id is None else str(boot_id)
        self.boot_id_changed = self.boot_id is not None and new_boot_id != self.boot_id
        if self.boot_id_changed:
            self.previous_boot_id = self.boot_id
        self.boot_id = new_boot_id
        mode = hello.get("mode")
        self.mode = None if mode is None else str(mode)

    # -- connecting ----------------------------------------------------------------------------------------

    def _connect(self, settings: SshSettings, jump_override: tuple[str, ...] | None, depth: int) -> Any:
        """An authenticated transport to ``settings``' host, through its jump hosts if any."""
        if depth > MAX_JUMP_DEPTH:
            raise LinkError(f"{self.target}: more than {MAX_JUMP_DEPTH} ProxyJump hops (a loop?)")
        if settings.proxy_command:
            raise SetupFailed(
                f"{self.target}: ProxyCommand is not supported for {settings.target}; use ProxyJump"
            )
        timeout_s = self._timeout_s(settings)
        hops = settings.proxy_jump if jump_override is None else jump_override
        sock: Any
        where = f"{settings.hostname} port {settings.port}"
        if hops:
            hop_settings = resolve(hops[-1], self.config_path, self.use_openssh)
            # A single hop is reached as its own config says; in a list, each goes through the ones before.
            jump = self._connect(hop_settings, hops[:-1] if len(hops) > 1 else None, depth + 1)
            try:
                sock = jump.open_channel(
                    "direct-tcpip", (settings.hostname, settings.port), ("127.0.0.1", 0), timeout=timeout_s
                )
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise _phase_error(
                    self.target, f"jump host {hop_settings.target} cannot reach {where}", exc
                ) from None
        else:
            sock = self._tcp_connect(settings, timeout_s)
        transport = paramiko.Transport(sock)
        with self._cond:
            self._transports.append(transport)
        transport.banner_timeout = timeout_s
        transport.handshake_timeout = timeout_s
        transport.auth_timeout = timeout_s
        name = lookup_name(settings.hostname, settings.port, settings.host_key_alias)
        known_lines = load_known_hosts(settings.user_known_hosts_files + settings.global_known_hosts_files)
        self._prefer_known_key_types(transport, known_key_types(known_lines, name))
        handshake_failed = f"no SSH handshake with {where} within {timeout_s:.1f} s"
        try:
            transport.start_client(timeout=timeout_s)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise _phase_error(self.target, handshake_failed, exc) from None
        # start_client returns quietly when its timeout passes: check that the key exchange really finished.
        if not transport.is_active() or transport.host_key is None:
            raise LinkError(f"{self.target}: {handshake_failed}")
        key = transport.get_remote_server_key()
        self._verify_host_key(settings, name, known_lines, key)
        self._authenticate(transport, settings)
        return transport

    def _tcp_connect(self, settings: SshSettings, timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + timeout_s
        where = f"{settings.hostname} port {settings.port}"
        addresses = _resolve_address(settings.hostname, settings.port, timeout_s)
        if addresses is None:
            raise LinkError(f"{self.target}: cannot resolve {settings.hostname} within {timeout_s:.1f} s")
        if isinstance(addresses, BaseException):
            raise _phase_error(self.target, f"cannot resolve {settings.hostname}", addresses)
        last_error: BaseException | None = None
        for family, socktype, proto, _canon, address in addresses:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock = socket.socket(family, socktype, proto)
            with self._cond:
                self._sockets.append(sock)
            sock.settimeout(left)
            try:
                sock.connect(address)
            except (TimeoutError, OSError) as exc:
                last_error = exc
                sock.close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        if last_error is None or isinstance(last_error, TimeoutError):
            raise LinkError(f"{self.target}: cannot connect to {where} within {timeout_s:.1f} s")
        raise _phase_error(self.target, f"cannot connect to {where}", last_error)

    @staticmethod
    def _prefer_known_key_types(transport: Any, known_types: list[str]) -> None:
        """Ask first for host key types known_hosts holds (as OpenSSH does), so a server with several keys
        presents the one we can check instead of looking "changed"."""
        if not known_types:
            return
        options = transport.get_security_options()
        offered = list(options.key_types)
        wanted: list[str] = []
        for key_type in known_types:
            for algorithm in _RSA_HOSTKEY_ALGORITHMS if key_type == "ssh-rsa" else (key_type,):
                if algorithm in offered and algorithm not in wanted:
                    wanted.append(algorithm)
        if wanted:
            options.key_types = wanted + [k for k in offered if k not in wanted]

    def _verify_host_key(self, settings: SshSettings, name: str, known_lines: list[Any], key: Any) -> None:
        blob = key.asbytes()
        key_type = key.get_name()
        fingerprint = fingerprint_sha256(blob)
        verdict = check_host_key(known_lines, name, blob)
        if verdict.status == "known":
            return
        if verdict.status == "revoked" and verdict.line is not None:
            raise RevokedHostKey(
                f"{self.target}: the host key of {name} ({key_type} {fingerprint}) is marked @revoked in "
                f"{verdict.line.where}; refusing to connect"
            )
        if verdict.status == "changed" and verdict.line is not None:
            raise ChangedHostKey(
                f"{self.target}: HOST KEY CHANGED for {name}: it presents {key_type} {fingerprint} but "
                f"{verdict.line.where} records another key; refusing to connect (remove that line if the "
                "change is expected)"
            )
        if not (self.options.accept_new or settings.accepts_new_host_keys):
            raise UnknownHostKey(self.target, settings.target, name, key, key_type, blob)
        if not settings.user_known_hosts_files:
            raise LinkError(f"{self.target}: no UserKnownHostsFile to record the key of {name} in")
        try:
            record_host_key(
                settings.user_known_hosts_files[0], name, key_type, blob, settings.hash_known_hosts
            )
        except OSError as exc:
            raise _phase_error(
                self.target, f"cannot record the host key in {settings.user_known_hosts_files[0]}", exc
            ) from None

    def _authenticate(self, transport: Any, settings: SshSettings) -> None:
        """Public-key auth with agent keys and identity files; no prompts; one connection, each key once."""
        tried: list[str] = []
        file_blobs: dict[bytes, str] = {}
        for path in settings.identity_files:
            public = _public_blob(path)
            if public is not None:
                file_blobs[public] = path
        agent_keys: list[Any] = []
        agent: _AgentAt | None = None
        agent_path = _agent_socket_path(settings.identity_agent)
        if agent_path is not None:
            try:
                agent = _AgentAt(agent_path, self._timeout_s(settings))
                agent_keys = list(agent.get_keys())
            except (paramiko.SSHException, OSError, EOFError) as exc:
                tried.append(f"ssh-agent at {agent_path} ({_visible(str(exc) or type(exc).__name__, 60)})")
        try:
            self._try_keys(transport, settings, tried, agent_keys, file_blobs)
        finally:
            if agent is not None:
                agent.close()

    def _try_keys(
        self,
        transport: Any,
        settings: SshSettings,
        tried: list[str],
        agent_keys: list[Any],
        file_blobs: dict[bytes, str],
    ) -> None:
        candidates: list[tuple[str, Any]] = []
        seen_blobs: set[bytes] = set()
        for key in agent_keys:
            blob = key.asbytes()
            if settings.identities_only and blob not in file_blobs:
                continue
            seen_blobs.add(blob)
            label = f"agent key {file_blobs.get(blob) or key.get_name()}"
            candidates.append((label, key))
        for path in settings.identity_files:
            if not Path(path).exists():
                continue
            try:
                key = paramiko.PKey.from_path(path)
            except paramiko.PasswordRequiredException:
                if _public_blob(path) not in seen_blobs:
                    tried.append(f"{path} (encrypted, not in ssh-agent: skipped)")
                continue
            except TypeError:  # cryptography's way of saying "encrypted, and no password given"
                if _public_blob(path) not in seen_blobs:
                    tried.append(f"{path} (encrypted, not in ssh-agent: skipped)")
                continue
            except (paramiko.SSHException, OSError, ValueError) as exc:
                tried.append(f"{path} (unusable: {_visible(str(exc), 60)})")
                continue
            if key.asbytes() in seen_blobs:
                continue
            seen_blobs.add(key.asbytes())
            candidates.append((path, key))
        for label, key in candidates:
            try:
                transport.auth_publickey(settings.user, key)
            except paramiko.BadAuthenticationType as exc:
                tried.append(f"{label} (server allows only {', '.join(exc.allowed_types) or 'nothing'})")
                break
            except paramiko.AuthenticationException:
                tried.append(f"{label} (rejected)")
                continue
            except (paramiko.SSHException, OSError, EOFError) as exc:
                tried.append(f"{label} ({_visible(str(exc), 60)})")
                break
            if transport.is_authenticated():
                return
            tried.append(f"{label} (needs a further method)")
        if not candidates and not tried:
            tried.append("no keys: ssh-agent empty or absent and no identity file found")
        where = f"{settings.user}@{settings.hostname} port {settings.port}"
        raise AuthFailed(f"{self.target}: authentication failed for {where}; tried: {'; '.join(tried)}")

    # -- the agent stream ----------------------------------------------------------------------------------

    def _fail(self, generation: int, message: str, permanent: bool = False) -> None:
        with self._cond:
            if generation == self._generation and self._error is None:
                self._error = SetupFailed(message) if permanent else LinkError(message)
            self._cond.notify_all()

    def _error_again(self) -> LinkError:
        """A fresh exception like the stored one (the same instance raised twice would pile up tracebacks)."""
        error = self._error
        if error is None:
            return LinkError(f"{self.target}: link not open")
        return type(error)(str(error))

    def _read_loop(self, channel: Any, generation: int, handler: Any) -> None:
        buffer = bytearray()
        scanned = 0
        preamble_bytes = 0
        while True:
            with self._cond:
                if generation != self._generation or self._error is not None:
                    return
            try:
                data: bytes | None = channel.recv(RECV_CHUNK_BYTES)
            except TimeoutError:
                data = None
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self._fail(
                    generation, f"{self.target}: connection lost: {_visible(str(exc) or type(exc).__name__)}"
                )
                return
            self._drain_stderr(channel)
            if data is None:
                continue
            if not data:
                before_hello = self._hello_generation != generation
                message, exited = self._exit_message(channel, before_hello)
                # A collector that exited before it could even say hello (no python3, too old a python)
                # will do so again: a lasting problem. A connection dropped later is worth retrying.
                self._fail(generation, message, permanent=before_hello and exited)
                return
            with self._cond:
                if generation == self._generation:
                    self._last_data_mono = time.monotonic()
            buffer += data
            while True:
                end = buffer.find(b"\n", scanned)
                if end < 0:
                    scanned = len(buffer)
                    break
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                scanned = 0
                problem = handler(line, generation)
                if problem == "preamble":
                    preamble_bytes += len(line) + 1
                    if preamble_bytes > PREAMBLE_CAP_BYTES:
                        problem = f"{self.target}: no hello, only {preamble_bytes} bytes of other output"
                    else:
                        continue
                if problem:
                    self._fail(generation, problem)
                    return
            if len(buffer) > LINE_CAP_BYTES:
                self._fail(
                    generation,
                    f"{self.target}: the collector sent a line over {LINE_CAP_BYTES // (1024 * 1024)} MiB",
                )
                return

    def _drain_stderr(self, channel: Any) -> None:
        try:
            while channel.recv_stderr_ready():
                chunk = channel.recv_stderr(RECV_CHUNK_BYTES)
                if not chunk:
                    break
                self._stderr_tail += chunk
                del self._stderr_tail[:-STDERR_TAIL_BYTES]
        except (OSError, EOFError, paramiko.SSHException):
            pass

    def _exit_message(self, channel: Any, before_hello: bool) -> tuple[str, bool]:
        """One line for the end of the collector's channel, and whether the remote process really exited."""
        # The exit status follows the EOF closely; wait a moment for it, never forever.
        channel.status_event.wait(1.0)
        self._drain_stderr(channel)
        status = channel.exit_status if channel.status_event.is_set() else None
        exited = status is not None and status >= 0
        stderr = self._stderr_tail.decode("utf-8", "replace")
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        if self.reduced and before_hello:
            why = _visible(lines[-1]) if lines else f"exit status {status}"
            return f"{self.target}: no python3 on host, and the reduced collector (sh) failed: {why}", exited
        if before_hello and (
            status == PYTHON_MISSING_STATUS
            or "python3: not found" in stderr
            or "python3: command not found" in stderr
        ):
            return f"{self.target}: {PYTHON_MISSING_MESSAGE}", True
        last = f": {_visible(lines[-1])}" if lines else ""
        if not exited:
            return f"{self.target}: the collector's channel closed{last}", False
        return f"{self.target}: the collector exited with status {status}{last}", True

    def _handle_line(self, raw: bytes, generation: int) -> str | None:
        """Take one line; returns an error message, "preamble" for pre-hello junk, or None."""
        line = raw.strip()
        if not line:
            return None
        with self._cond:
            have_hello = self._hello_generation == generation
        try:
            message = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            message = None
        if not isinstance(message, dict):
            if not have_hello:
                return "preamble"
            excerpt = _visible(repr(line[:80]))
            return f"{self.target}: the collector sent a line that is not a JSON object: {excerpt}"
        kind = message.get("t")
        if kind == "hello":
            with self._cond:
                if generation == self._generation:
                    self.hello = message
                    self._hello_generation = generation
                self._cond.notify_all()
            return None
        if not have_hello:
            return "preamble"
        if kind == "snapshot":
            data = message.get("snapshot")
            try:
                if not isinstance(data, dict):
                    raise TypeError("not an object")
                data["target"] = self.target
                previous = self._stream_last if self._stream_generation == generation else None
                snapshot = HostSnapshot.from_dict(data, previous)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                return f"{self.target}: the collector sent a malformed snapshot: {_visible(str(exc))}"
            self._stream_last, self._stream_generation = snapshot, generation
            with self._cond:
                if generation == self._generation:
                    self._snapshots.append(snapshot)
                self._cond.notify_all()
        elif kind == "reply":
            reply_id = message.get("id")
            with self._cond:
                if generation == self._generation and isinstance(reply_id, int) and reply_id in self._pending:
                    self._replies[reply_id] = message
                self._cond.notify_all()
        return None

    _hello_generation = -1
    _stream_last: HostSnapshot | None = None
    """The last snapshot parsed from the stream (only the reader thread of ``_stream_generation`` uses it)."""
    _stream_generation = -1

    def _send_bytes(self, data: bytes, deadline: float, what: str) -> None:
        with self._cond:
            channel = self._channel
        if channel is None:
            raise LinkError(f"{self.target}: link not open")
        view = memoryview(data)
        with self._write_lock:
            while view:
                if time.monotonic() > deadline:
                    raise LinkError(f"{self.target}: cannot send the {what}: the host does not read")
                try:
                    sent = channel.send(view[:RECV_CHUNK_BYTES])
                except TimeoutError:
                    continue
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    raise _phase_error(self.target, f"cannot send the {what}", exc) from None
                if sent <= 0:
                    raise LinkError(f"{self.target}: cannot send the {what}: channel closed")
                view = view[sent:]

    # -- HostLink ------------------------------------------------------------------------------------------

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        """The newest snapshot not yet returned (older unread ones are dropped); None on timeout.

        Raises:
            LinkError: The link broke, or no data came for ``stale_after_s`` ("no data for 3.2 s").
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while True:
                if self._snapshots:
                    self._had_snapshot = True
                    newest = self._snapshots.pop()
                    self._snapshots.clear()
                    return newest
                if self._error is not None:
                    raise self._error_again()
                if self._channel is None:
                    raise LinkError(f"{self.target}: link not open")
                now = time.monotonic()
                age_s = now - self._last_data_mono
                # The first sample (a full process walk, NVML start-up) may take longer than a steady one.
                limit_s = (
                    self.stale_after_s if self._had_snapshot else max(self.stale_after_s, self._first_grace_s)
                )
                if age_s > limit_s:
                    self._error = LinkError(f"{self.target}: no data for {age_s:.1f} s")
                    raise self._error_again()
                if now >= deadline:
                    return None
                self._cond.wait(min(deadline - now, self._last_data_mono + limit_s - now + 0.05))

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one command and wait for its reply's result. Raises LinkError on error, failure or timeout."""
        name = str(command.get("cmd"))
        if self.reduced:
            return self._reduced_request(name, timeout_s)
        with self._cond:
            if self._error is not None:
                raise self._error_again()
            request_id = self._next_id
            self._next_id += 1
            self._pending.add(request_id)
        deadline = time.monotonic() + max(0.0, timeout_s)
        try:
            line = json.dumps(dict(command, id=request_id), ensure_ascii=False, separators=(",", ":")) + "\n"
            self._send_bytes(line.encode("utf-8"), deadline, f"{name} command")
            with self._cond:
                while request_id not in self._replies:
                    if self._error is not None:
                        raise self._error_again()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise LinkError(f"{self.target}: no reply to {name} within {timeout_s:.1f} s")
                    self._cond.wait(left)
                reply = self._replies.pop(request_id)
        finally:
            with self._cond:
                self._pending.discard(request_id)
                self._replies.pop(request_id, None)
        if not reply.get("ok"):
            raise LinkError(
                f"{self.target}: {name} failed: {_visible(str(reply.get('error') or 'no reason'))}"
            )
        result = reply.get("result")
        if not isinstance(result, dict):
            return {}
        snapshot = result.get("snapshot")
        if isinstance(snapshot, dict):
            # The remote collector does not know the name the user gave (it is kept off its command line).
            result["snapshot"] = dict(snapshot, target=self.target)
        return result

    def _reduced_request(self, name: str, timeout_s: float) -> dict[str, Any]:
        """The commands a monitoring-only host can answer from its stream."""
        if name == "configure":
            return {}
        if name in ("sample", "calibrate"):
            deadline = time.monotonic() + max(0.0, timeout_s)
            with self._cond:
                while self._latest_reduced is None:
                    if self._error is not None:
                        raise self._error_again()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise LinkError(f"{self.target}: no reply to {name} within {timeout_s:.1f} s")
                    self._cond.wait(left)
                snapshot = self._latest_reduced
            if name == "sample":
                return {"snapshot": snapshot.to_dict()}
            return {
                "memory_used_mib": {
                    g.key: g.memory_used_mib for g in snapshot.gpus if g.memory_used_mib is not None
                }
            }
        raise LinkError(f"{self.target}: {name} needs python3 on the host (reduced mode: monitoring only)")

    def close(self) -> None:
        """Ask the collector to quit, then close channel and transports; returns within about 2 s."""
        with self._cond:
            channel = self._channel
            if self._error is None:
                self._error = LinkError(f"{self.target}: link closed")
            self._cond.notify_all()
        if channel is not None and self.hello is not None and not self.reduced:
            try:
                self._send_bytes(b'{"cmd":"quit"}\n', time.monotonic() + 0.3, "quit command")
            except LinkError:
                pass
        self._teardown()

    def _teardown(self) -> None:
        with self._cond:
            self._generation += 1  # readers of the old connection stop touching this link's state
            channel, self._channel = self._channel, None
            transports, self._transports = self._transports, []
            sockets, self._sockets = self._sockets, []
            reader, self._reader = self._reader, None
            self.hello = None
            self._cond.notify_all()
        if channel is None and not transports and not sockets:
            return

        def shut() -> None:
            for closer in [channel] + list(reversed(transports)):
                if closer is None:
                    continue
                try:
                    closer.close()
                except Exception:  # noqa: S110 - best effort on a dying connection
                    pass

        closer_thread = threading.Thread(target=shut, name=f"gputui-ssh-close-{self.target}", daemon=True)
        closer_thread.start()
        closer_thread.join(CLOSE_BUDGET_S)
        for sock in sockets:
            _hard_close(sock)
        if reader is not None and reader is not threading.current_thread():
            reader.join(0.3)

    def _slow_transport_polls(self) -> None:
        """Let every transport thread of this link sleep ``TRANSPORT_POLL_S`` between idle checks."""
        with self._cond:
            transports = list(self._transports)
        for transport in transports:
            try:
                transport.sock.settimeout(TRANSPORT_POLL_S)
            except (OSError, AttributeError):
                pass

    def _force_close_transports(self) -> None:
        with self._cond:
            sockets = list(self._sockets)
            transports = list(self._transports)
        for sock in sockets:
            _hard_close(sock)
        for transport in transports:
            try:
                transport.sock.close()
            except Exception:  # noqa: S110 - best effort on a dying connection
                pass


REDUCED_PS_LINES_CAP = 200_000
"""Most ``ps`` lines taken from one reduced-mode sample (a runaway host must not eat our memory)."""
REDUCED_PS_LINE_CHARS = 4096
"""Most characters kept of one ``ps`` line: a process's command line is cut there, as the collector cuts it
(``gputui.agent.WIRE_CMDLINE_BYTES``), and marked ``cmdline_truncated``."""


def reduced_command(nonce: str, options: LinkOptions) -> str:
    """The reduced collector: a fixed POSIX sh loop (no python3 needed) printing marked sections.

    Only fixed text, a hex nonce made here and a validated number go into it. Sections per sample:
    ``gpus`` (nvidia-smi --query-gpu CSV, then its exit status), ``apps`` (--query-compute-apps CSV), ``ps``
    (``pid ppid stat user args``), ``end``.
    """
    if not re.fullmatch(r"[0-9a-f]{8,64}", nonce):
        raise LinkError("reduced mode: bad marker")
    interval = _number_arg(options.memory_interval_s, "interval")
    from gputui.agent import SMI_QUERY_APPS, SMI_QUERY_GPU

    smi_format = "--format=csv,noheader,nounits"
    script = (
        f"M=@gputui-{nonce}; "
        'echo "$M boot $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"; '
        'echo "$M host $(cat /proc/sys/kernel/hostname 2>/dev/null)"; '
        "while :; do "
        'echo "$M gpus"; '
        f"nvidia-smi --query-gpu={SMI_QUERY_GPU} {smi_format} 2>&1; "
        'echo "$M rc $?"; '
        'echo "$M apps"; '
        f"nvidia-smi --query-compute-apps={SMI_QUERY_APPS} {smi_format} 2>/dev/null; "
        'echo "$M ps"; '
        "ps -eo pid=,ppid=,stat=,user=,args= 2>/dev/null; "
        'echo "$M end"; '
        f"sleep {interval} || exit 0; "
        "done"
    )
    if "'" in script:  # the whole script travels inside one pair of single quotes
        raise LinkError("reduced mode: script would need quoting")
    return f"sh -c '{script}'"


class _ReducedStream:
    """Turns the reduced collector's marked sections into snapshots (mode "ps": monitoring only)."""

    def __init__(self, target: str, nonce: str) -> None:
        self.target = target
        self.marker = f"@gputui-{nonce} "
        self.boot_id: str | None = None
        self.hostname: str | None = None
        self.section: str | None = None
        self.lines: dict[str, list[str]] = {"gpus": [], "apps": [], "ps": []}
        self.smi_status: int | None = None
        self.started = False

    def hello(self) -> dict[str, Any]:
        return {
            "t": "hello",
            "protocol": PROTOCOL_VERSION,
            "mode": "ps",
            "boot_id": self.boot_id,
            "hostname": self.hostname,
            "python": None,
            "reduced": True,
        }

    def feed(self, line: str) -> str | HostSnapshot | None:
        if not line.startswith(self.marker):
            if not self.started:
                return "preamble"
            if self.section is not None:
                bucket = self.lines[self.section]
                if len(bucket) >= REDUCED_PS_LINES_CAP:
                    raise LinkError(
                        f"{self.target}: reduced collector sent over {REDUCED_PS_LINES_CAP} lines"
                    )
                bucket.append(line[: REDUCED_PS_LINE_CHARS + 1])  # one more: _reduced_processes sees the cut
            return None
        word, _, rest = line[len(self.marker) :].partition(" ")
        if word == "boot":
            self.boot_id = rest.strip() or None
            return None
        if word == "host":
            self.hostname = rest.strip() or None
            self.started = True
            return "hello"
        if word in self.lines:
            self.section = word
            self.lines[word] = []
            return None
        if word == "rc":
            self.section = None
            try:
                self.smi_status = int(rest.strip())
            except ValueError:
                self.smi_status = None
            return None
        if word == "end":
            self.section = None
            return self._snapshot()
        return None

    def _snapshot(self) -> HostSnapshot:
        from gputui.agent import (
            SMI_EXIT_GPU_LOST,
            parse_smi_apps_output,
            parse_smi_gpu_output,
            smi_exit_error,
        )

        now = time.time()
        gpu_text = "\n".join(self.lines["gpus"])
        error: str | None = None
        gpus: list[dict[str, Any]] = []
        # Exit 15 (a GPU is lost) follows the lines of the GPUs nvidia-smi could still read, and the lost
        # one becomes an error row.
        if self.smi_status in (0, SMI_EXIT_GPU_LOST):
            gpus = parse_smi_gpu_output(gpu_text)
        if self.smi_status == PYTHON_MISSING_STATUS:
            error = "reduced mode (no python3): nvidia-smi not found on host"
        elif self.smi_status != 0 and not gpus:
            error = "reduced mode (no python3): " + smi_exit_error(self.smi_status or 0, gpu_text)
        apps = parse_smi_apps_output("\n".join(self.lines["apps"]))
        held: dict[int, dict[int, int]] = {}
        for gpu in gpus:
            listed = apps.get(str(gpu.get("uuid"))) or []
            gpu["processes"] = listed
            for app in listed:
                if app.get("used_mib") is not None:
                    held.setdefault(int(app["pid"]), {})[int(gpu["index"])] = int(app["used_mib"])
        processes = _reduced_processes(self.lines["ps"], held)
        snapshot = {
            "target": self.target,
            "hostname": self.hostname,
            "boot_id": self.boot_id,
            "time": now,
            "error": error,
            "mode": "ps",
            "processes_time": now,
            "gpus": gpus,
            "processes": processes,
        }
        return HostSnapshot.from_dict(snapshot)


def _reduced_processes(ps_lines: list[str], held: dict[int, dict[int, int]]) -> list[dict[str, Any]]:
    """GPU processes, their ancestors and descendants, and zombie / D-state processes from ``ps`` lines.

    ``args`` is split on whitespace (ps joins argv with spaces), so cmdlines are approximate in this mode.
    """
    table: dict[int, dict[str, Any]] = {}
    for line in ps_lines:
        truncated = len(line) > REDUCED_PS_LINE_CHARS
        words = line[:REDUCED_PS_LINE_CHARS].split(None, 4)
        if len(words) < 4 or not words[0].isdigit() or not words[1].isdigit():
            continue
        args = words[4].split() if len(words) > 4 else []
        table[int(words[0])] = {
            "pid": int(words[0]),
            "ppid": int(words[1]),
            "state": words[2][:1] or None,
            "user": words[3],
            "name": Path(args[0]).name if args else None,
            "cmdline": args,
            "cmdline_truncated": truncated,
        }
    wanted = set(held)
    children: dict[int, list[int]] = {}
    for pid, row in table.items():
        children.setdefault(row["ppid"], []).append(pid)
        if row["state"] in ("Z", "D"):
            wanted.add(pid)
    for pid in list(held):
        parent = table.get(pid, {}).get("ppid")
        while parent and parent > 1 and parent not in wanted and parent in table:
            wanted.add(parent)
            parent = table[parent]["ppid"]
        stack = list(children.get(pid, []))
        while stack:
            child = stack.pop()
            if child not in wanted:
                wanted.add(child)
                stack.extend(children.get(child, []))
    rows = []
    for pid in sorted(wanted):
        row = dict(table.get(pid) or {"pid": pid})
        row["gpu_memory_mib"] = {str(k): v for k, v in held.get(pid, {}).items()}
        rows.append(row)
    return rows


class _AgentAt(paramiko.agent.AgentSSH):
    """An ssh-agent client for a given socket path, with a deadline on every read (a hung agent must not
    hang the connect)."""

    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout_s)
        try:
            conn.connect(path)
        except OSError:
            conn.close()
            raise
        self._connect(conn)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._close()  # type: ignore[attr-defined]


def _agent_socket_path(identity_agent: str | None) -> str | None:
    """The agent socket OpenSSH would use for ``IdentityAgent`` (default ``$SSH_AUTH_SOCK``); None: none."""
    value = identity_agent or "SSH_AUTH_SOCK"
    if value.lower() == "none":
        return None
    if value == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    if value.startswith("$"):
        return os.environ.get(value[1:].strip("{}")) or None
    return os.path.expanduser(value)


def _hard_close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _public_blob(path: str) -> bytes | None:
    """The key blob of ``path``.pub, when that file exists (lets encrypted keys be matched to agent keys)."""
    try:
        words = Path(f"{path}.pub").read_text(encoding="ascii", errors="replace").split()
        return base64.b64decode(words[1], validate=True) if len(words) >= 2 else None
    except (OSError, binascii.Error, ValueError):
        return None


def _resolve_address(host: str, port: int, timeout_s: float) -> list[Any] | BaseException | None:
    """getaddrinfo with a deadline (the resolver's own retries can take far longer): None on timeout."""
    result: list[Any] = []

    def lookup() -> None:
        try:
            result.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            result.append(exc)

    thread = threading.Thread(target=lookup, name=f"gputui-resolve-{host}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not result:
        return None
    return result[0]


def accept_host_key(
    target: str, key: Any, *, config_path: str | None = None, use_openssh: bool | None = None
) -> str:
    """Record an unknown host key after the user confirmed it (the TUI's "accept" button).

    Pass ``error.hop`` and ``error.key`` of the ``UnknownHostKey`` that was shown. The name is written hashed
    when the target's ``HashKnownHosts`` is yes (OpenSSH's own rule), to its first ``UserKnownHostsFile``.
    A changed or revoked key is never recorded.

    Returns:
        The line appended, or "" when the key was already known.

    Raises:
        ChangedHostKey, RevokedHostKey: The key must not be accepted.
        LinkError: The target cannot be resolved or the file cannot be written.
    """
    settings = resolve(target, config_path, use_openssh)
    name = lookup_name(settings.hostname, settings.port, settings.host_key_alias)
    blob = key.asbytes()
    key_type = key.get_name()
    lines = load_known_hosts(settings.user_known_hosts_files + settings.global_known_hosts_files)
    verdict = check_host_key(lines, name, blob)
    if verdict.status == "known":
        return ""
    if verdict.status == "revoked" and verdict.line is not None:
        raise RevokedHostKey(
            f"{target}: the key {fingerprint_sha256(blob)} is revoked in {verdict.line.where}"
        )
    if verdict.status == "changed" and verdict.line is not None:
        raise ChangedHostKey(
            f"{target}: {name} has another key recorded at {verdict.line.where}; not accepting a changed key"
        )
    if not settings.user_known_hosts_files:
        raise LinkError(f"{target}: no UserKnownHostsFile to record the key in")
    try:
        return record_host_key(
            settings.user_known_hosts_files[0], name, key_type, blob, settings.hash_known_hosts
        )
    except OSError as exc:
        raise _phase_error(target, f"cannot write {settings.user_known_hosts_files[0]}", exc) from None
