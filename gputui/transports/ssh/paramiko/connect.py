"""Reaching a host with paramiko: TCP or ProxyJump hops, banner, key exchange, host key, login, exec.

Every step has the connect deadline: name lookup, TCP connect, SSH banner, key exchange, authentication and
the opening of a channel. ProxyJump hops are ``direct-tcpip`` channels of the hop before, each hop resolved
(``sshconfig``), host-key checked and logged in to on its own. ProxyCommand is refused, naming the client
that runs it (``--ssh-client openssh``).
"""

from __future__ import annotations

import math
import socket
import threading
import time

import paramiko

from gputui.core.link import LinkError, LinkOptions
from gputui.transports.ssh.config import SshSettings, resolve
from gputui.transports.ssh.errors import SetupFailed, phase_error
from gputui.transports.ssh.hostkeys.accepted import records_unknown_keys
from gputui.transports.ssh.hostkeys.knownhosts import known_key_types
from gputui.transports.ssh.hostkeys.trust import known_hosts, trust_host_key
from gputui.transports.ssh.paramiko.auth import authenticate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

READ_POLL_S = 1.0
"""How long a channel read or write waits before the stream looks for a closed link again."""
TRANSPORT_POLL_S = 1.0
"""paramiko's transport thread wakes this often on an idle socket (its default, 0.1 s, is ten wake-ups a
second per host); set once the collector runs, so handshake deadlines keep paramiko's own granularity."""
DEFAULT_KEEPALIVE_S = 15
"""Transport keepalive without ServerAliveInterval: the collector's stream already keeps NAT state alive."""
CLOSE_BUDGET_S = 1.5
"""How long closing waits for channels and transports to close politely before it shuts the sockets."""
MAX_JUMP_DEPTH = 8
RECV_STDERR_BYTES = 256 * 1024
_RSA_HOSTKEY_ALGORITHMS = ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")


class ChannelPipe:
    """The ``interfaces.Pipe`` of a command run on a paramiko session channel."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        channel.settimeout(READ_POLL_S)

    def recv(self, max_bytes: int) -> bytes | None:
        data: bytes | None = self._polled(self._channel.recv, max_bytes)
        return data

    def send(self, data: memoryview) -> int | None:
        sent: int | None = self._polled(self._channel.send, data)
        return sent

    @staticmethod
    def _polled(call: Any, arg: Any) -> Any:
        """``call(arg)``; None when it timed out, ConnectionError for paramiko's own errors."""
        try:
            return call(arg)
        except TimeoutError:
            return None
        except paramiko.SSHException as exc:
            raise ConnectionError(str(exc) or type(exc).__name__) from None

    def stderr(self, tail_bytes: int) -> bytes:
        tail = bytearray()
        try:
            while self._channel.recv_stderr_ready():
                chunk = self._channel.recv_stderr(RECV_STDERR_BYTES)
                if not chunk:
                    break
                tail += chunk
                del tail[:-tail_bytes]
        except (OSError, EOFError, paramiko.SSHException):
            pass
        return bytes(tail)

    def exit_status(self, wait_s: float) -> int | None:
        self._channel.status_event.wait(wait_s)
        status: int | None = self._channel.exit_status if self._channel.status_event.is_set() else None
        return status

    def close(self) -> None:
        self._channel.close()


class Connection:
    """One login to a host (through its jump hosts) and the channels run on it: paramiko's
    ``interfaces.Session``.

    Every socket, transport and channel is registered as soon as it exists, so that ``close()`` or
    ``abort()`` from another thread ends a connect or a start at any step; one registered after that is
    closed at once, and the step fails with the reason.

    Args:
        target: The target word the user asked for (starts every error line).
        options: The link's options (connect timeout, ``accept_new``).
        config_path: An ssh config file used instead of the defaults (``ssh -F``).
        use_openssh: Force or avoid ``ssh -G`` for resolving hops (default: use it when installed).
    """

    errors: tuple[type[BaseException], ...] = (paramiko.SSHException, OSError, EOFError)

    def __init__(
        self, target: str, options: LinkOptions, *, config_path: str | None, use_openssh: bool | None
    ) -> None:
        self.target = target
        self.options = options
        self.config_path = config_path
        self.use_openssh = use_openssh
        self._lock = threading.Lock()
        self._ended: str | None = None
        self._sockets: list[socket.socket] = []
        self._transports: list[Any] = []
        self._channels: list[Any] = []
        self._transport: Any = None
        """The logged-in transport to the target (the last hop)."""

    def timeout_s(self, settings: SshSettings) -> float:
        """The deadline of each step for ``settings``' host: the link's, or ConnectTimeout when shorter."""
        return settings.step_timeout_s(self.options.connect_timeout_s)

    def start_timeout_s(self, timeout_s: float) -> float:
        """Logged in already: the exec, the payload and the hello each get the step deadline."""
        return timeout_s

    def explain(self, error: LinkError) -> LinkError:
        return error

    def can_exec_again(self) -> bool:
        return self._transport is not None and bool(self._transport.is_active())

    def collector_started(self) -> None:
        self.slow_polls()

    # -- what was opened ---------------------------------------------------------------------------------

    def _adopt(self, registry: list[Any], thing: Any) -> None:
        with self._lock:
            ended = self._ended
            if ended is None:
                registry.append(thing)
                return
        if isinstance(thing, socket.socket):
            _hard_close(thing)
        else:
            _close_quietly(thing)
        raise LinkError(ended)

    @property
    def ended(self) -> str | None:
        """Why the connection was closed or aborted (one error line); None while it is not."""
        with self._lock:
            return self._ended

    def failure(self, what: str, exc: BaseException) -> LinkError:
        """The error for ``exc``, raised while doing ``what``; the reason the connection ended, if it did."""
        ended = self.ended
        return LinkError(ended) if ended is not None else phase_error(self.target, what, exc)

    def abort(self, reason: str) -> None:
        """End the connection at once (a host that stopped answering): sockets shut, no polite close."""
        with self._lock:
            if self._ended is None:
                self._ended = reason
            sockets = list(self._sockets)
            transports = list(self._transports)
        for sock in sockets:
            _hard_close(sock)
        for transport in transports:
            try:
                transport.sock.close()
            except Exception:  # noqa: S110 - best effort on a dying connection
                pass

    def close(self) -> None:
        """Close channels and transports politely for up to ``CLOSE_BUDGET_S``, then shut the sockets."""
        with self._lock:
            if self._ended is None:
                self._ended = f"{self.target}: link closed"
            channels, self._channels = self._channels, []
            transports, self._transports = self._transports, []
            sockets, self._sockets = self._sockets, []
        if not (channels or transports or sockets):
            return

        def shut() -> None:
            for closer in channels + list(reversed(transports)):
                _close_quietly(closer)

        closer_thread = threading.Thread(target=shut, name=f"gputui-ssh-close-{self.target}", daemon=True)
        closer_thread.start()
        closer_thread.join(CLOSE_BUDGET_S)
        for sock in sockets:
            _hard_close(sock)

    def slow_polls(self) -> None:
        """Let every transport thread of this connection sleep ``TRANSPORT_POLL_S`` between idle checks."""
        with self._lock:
            transports = list(self._transports)
        for transport in transports:
            try:
                transport.sock.settimeout(TRANSPORT_POLL_S)
            except (OSError, AttributeError):
                pass

    # -- connecting --------------------------------------------------------------------------------------

    def login(self, settings: SshSettings) -> None:
        """Log in to ``settings``' host, through its jump hosts if any: the transport ``exec`` runs on."""
        transport = self._connect(settings, None, 0)
        keepalive_s = settings.server_alive_interval_s or DEFAULT_KEEPALIVE_S
        transport.set_keepalive(max(1, math.ceil(keepalive_s)))
        self._transport = transport

    def exec(self, command: str, timeout_s: float) -> ChannelPipe:
        """Run ``command`` on a new session channel of the login; LinkError when it cannot start."""
        transport = self._transport
        if transport is None:
            raise LinkError(f"{self.target}: not logged in")
        try:
            channel = transport.open_session(timeout=timeout_s)
            self._adopt(self._channels, channel)
            pipe = ChannelPipe(channel)
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self.failure("cannot start the collector", exc) from None
        return pipe

    def _connect(self, settings: SshSettings, jump_override: tuple[str, ...] | None, depth: int) -> Any:
        if depth > MAX_JUMP_DEPTH:
            raise LinkError(f"{self.target}: more than {MAX_JUMP_DEPTH} ProxyJump hops (a loop?)")
        if settings.proxy_command:
            raise SetupFailed(
                f"{self.target}: {settings.target} is reached through a ProxyCommand, which only the system "
                "ssh client runs: use --ssh-client openssh"
            )
        timeout_s = self.timeout_s(settings)
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
                raise self.failure(f"jump host {hop_settings.target} cannot reach {where}", exc) from None
        else:
            sock = self._tcp_connect(settings, timeout_s)
        transport = paramiko.Transport(sock)
        self._adopt(self._transports, transport)
        transport.banner_timeout = timeout_s
        transport.handshake_timeout = timeout_s
        transport.auth_timeout = timeout_s
        name, known = known_hosts(settings)
        _prefer_known_key_types(transport, known_key_types(known, name))
        handshake_failed = f"no SSH handshake with {where} within {timeout_s:.1f} s"
        try:
            transport.start_client(timeout=timeout_s)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self.failure(handshake_failed, exc) from None
        # start_client returns quietly when its timeout passes: check that the key exchange really finished.
        if not transport.is_active() or transport.host_key is None:
            raise LinkError(f"{self.target}: {handshake_failed}")
        key = transport.get_remote_server_key()
        record_unknown = records_unknown_keys(self.options, settings)
        trust_host_key(self.target, settings, name, known, key, record_unknown=record_unknown)
        authenticate(transport, settings, self.target, timeout_s)
        return transport

    def _tcp_connect(self, settings: SshSettings, timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + timeout_s
        where = f"{settings.hostname} port {settings.port}"
        addresses = _resolve_address(settings.hostname, settings.port, timeout_s)
        if addresses is None:
            raise LinkError(f"{self.target}: cannot resolve {settings.hostname} within {timeout_s:.1f} s")
        if isinstance(addresses, BaseException):
            raise phase_error(self.target, f"cannot resolve {settings.hostname}", addresses)
        last_error: BaseException | None = None
        for family, socktype, proto, _canon, address in addresses:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock = socket.socket(family, socktype, proto)
            self._adopt(self._sockets, sock)
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
        raise self.failure(f"cannot connect to {where}", last_error)


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


def _close_quietly(closer: Any) -> None:
    try:
        closer.close()
    except Exception:  # noqa: S110 - best effort on a dying connection
        pass


def _hard_close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
