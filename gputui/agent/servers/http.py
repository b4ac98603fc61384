"""One bounded HTTP/1.1 GET on a socket of its own: every step (lookup, connect, TLS, request, headers,
body) under one total deadline, at most a capped number of body bytes read, no proxy, no redirect."""

from __future__ import annotations

import base64
import re
import socket
import sys
import threading
import time
from urllib.parse import unquote, urlsplit

from gputui.agent.protocol import (
    ENDPOINT_STATE_DOWN,
    ENDPOINT_STATE_ERROR,
    ENDPOINT_STATE_TIMEOUT,
    ENDPOINT_STATE_UNHEALTHY,
)
from gputui.agent.servers import ENDPOINT_DETAIL_MAX_CHARS, ENDPOINT_HEADER_CAP_BYTES, ENDPOINT_MAX_URL_CHARS
from gputui.agent.textpolicy import visible_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_default_ssl_context: Any = None


def _ssl_module() -> Any:
    """The ssl module, or None for a python3 built without OpenSSL.

    Imported on the first https probe, not at start: it costs milliseconds of CPU at every agent start,
    and most hosts probe plain http or nothing.
    """
    try:
        import ssl
    except ImportError:  # https probes say so, everything else still works
        return None
    return ssl


def _is_ssl_error(exc: BaseException) -> bool:
    ssl = sys.modules.get("ssl")  # never imported: no TLS socket exists, so it cannot be a TLS error
    return ssl is not None and isinstance(exc, ssl.SSLError)


_STATUS_RE = re.compile(rb"^HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?$")


class ProbeFailure(Exception):
    """A probe ended in a non-UP state; ``str()`` is the one-line detail."""

    def __init__(self, state: str, detail: str, code: int | None = None) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail
        self.code = code


class Target:
    """A parsed, validated probe URL."""

    __slots__ = ("scheme", "host", "port", "request_target", "host_header", "authorization")

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        request_target: str,
        host_header: str,
        authorization: str | None = None,
    ) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.request_target = request_target
        self.host_header = host_header
        self.authorization = authorization


def parse_url(url: Any) -> Target:
    if not isinstance(url, str) or not url:
        raise ProbeFailure(ENDPOINT_STATE_ERROR, "bad URL: empty")
    if len(url) > ENDPOINT_MAX_URL_CHARS:
        raise ProbeFailure(ENDPOINT_STATE_ERROR, f"bad URL: over {ENDPOINT_MAX_URL_CHARS} characters")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        raise ProbeFailure(ENDPOINT_STATE_ERROR, "unsupported URL (only http:// and https://)")
    # Anything that could split the request line or a header is refused before it reaches the socket.
    if any(ord(c) <= 0x20 or ord(c) >= 0x7F for c in url):
        raise ProbeFailure(ENDPOINT_STATE_ERROR, "bad URL: spaces, control or non-ASCII characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ProbeFailure(ENDPOINT_STATE_ERROR, f"bad URL: {exc}") from None
    host = parts.hostname
    if not host:
        raise ProbeFailure(ENDPOINT_STATE_ERROR, "bad URL: no host")
    if port == 0:
        raise ProbeFailure(ENDPOINT_STATE_ERROR, "bad URL: port 0")
    default_port = 443 if scheme == "https" else 80
    host_in_header = f"[{host}]" if ":" in host else host
    if port is not None and port != default_port:
        host_in_header = f"{host_in_header}:{port}"
    request_target = parts.path or "/"
    if parts.query:
        request_target += "?" + parts.query
    authorization = None
    if parts.username is not None or parts.password is not None:
        # Percent-decoded, as browsers and curl send them; the URL has no control characters (checked above).
        credentials = "{}:{}".format(unquote(parts.username or ""), unquote(parts.password or ""))
        authorization = "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")
    return Target(scheme, host, port or default_port, request_target, host_in_header, authorization)


class _PendingLookup:
    __slots__ = ("done", "result", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: list[Any] | None = None
        self.error: BaseException | None = None


_lookups_lock = threading.Lock()
_lookups: dict[tuple[str, int], _PendingLookup] = {}


def _lookup_worker(key: tuple[str, int], pending: _PendingLookup) -> None:
    try:
        pending.result = socket.getaddrinfo(key[0], key[1], 0, socket.SOCK_STREAM)
    except BaseException as exc:  # handed to the waiting probe
        pending.error = exc
    finally:
        with _lookups_lock:
            _lookups.pop(key, None)
        pending.done.set()


def _resolve(host: str, port: int, deadline: float) -> list[Any]:
    """Resolve ``host`` within the deadline.

    getaddrinfo has no timeout of its own, so names are looked up in a daemon thread that the probe waits for
    at most until its deadline; one lookup per (host, port) runs at a time, so a hung resolver cannot pile up
    threads. IP literals are converted without any lookup.
    """
    try:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        pass
    key = (host, port)
    with _lookups_lock:
        pending = _lookups.get(key)
        if pending is None:
            pending = _PendingLookup()
            _lookups[key] = pending
            threading.Thread(
                target=_lookup_worker, args=(key, pending), name="gputui-health-dns", daemon=True
            ).start()
    if not pending.done.wait(max(0.0, deadline - time.monotonic())):
        raise ProbeFailure(ENDPOINT_STATE_TIMEOUT, f"name lookup of {host} timed out")
    if pending.error is not None:
        reason = getattr(pending.error, "strerror", None) or str(pending.error)
        raise ProbeFailure(ENDPOINT_STATE_ERROR, f"cannot resolve {host}: {reason}")
    if not pending.result:
        raise ProbeFailure(ENDPOINT_STATE_ERROR, f"cannot resolve {host}: no address")
    return pending.result


def _remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise socket.timeout("deadline passed")
    return remaining


def connect(target: Target, deadline: float, deadline_s: float) -> socket.socket:
    addresses = _resolve(target.host, target.port, deadline)
    refused = 0
    last_error: OSError | None = None
    for family, socktype, proto, _canonname, address in addresses:
        sock = socket.socket(family, socktype, proto)
        try:
            sock.settimeout(_remaining(deadline))
            sock.connect(address)
            return sock
        except socket.timeout:
            sock.close()
            raise ProbeFailure(
                ENDPOINT_STATE_TIMEOUT, f"connect timed out (deadline {deadline_s:g}s)"
            ) from None
        except ConnectionRefusedError:
            sock.close()
            refused += 1
        except OSError as exc:
            sock.close()
            last_error = exc
    if refused and last_error is None:
        raise ProbeFailure(ENDPOINT_STATE_DOWN, "connection refused")
    reason = (last_error.strerror if last_error is not None else None) or str(last_error)
    raise ProbeFailure(ENDPOINT_STATE_ERROR, f"connect failed: {reason}")


def wrap_tls(sock: socket.socket, target: Target, deadline: float, ssl_context: Any) -> socket.socket:
    global _default_ssl_context
    ssl = _ssl_module()
    if ssl is None:
        sock.close()
        raise ProbeFailure(ENDPOINT_STATE_ERROR, "TLS: this python3 has no ssl module")
    context = ssl_context
    if context is None:
        # Loading the system's CA store costs milliseconds of CPU: once per agent, not once per probe.
        if _default_ssl_context is None:
            _default_ssl_context = ssl.create_default_context()
        context = _default_ssl_context
    try:
        sock.settimeout(_remaining(deadline))
        return context.wrap_socket(sock, server_hostname=target.host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc)
        raise ProbeFailure(ENDPOINT_STATE_ERROR, f"TLS: certificate verify failed: {reason}") from None
    except socket.timeout:
        sock.close()
        raise ProbeFailure(ENDPOINT_STATE_TIMEOUT, "TLS handshake timed out") from None
    except ssl.SSLError as exc:
        sock.close()
        reason = getattr(exc, "reason", None) or str(exc)
        raise ProbeFailure(ENDPOINT_STATE_ERROR, f"TLS: {reason}") from None
    except OSError as exc:
        sock.close()
        raise ProbeFailure(ENDPOINT_STATE_ERROR, f"TLS: {exc.strerror or exc}") from None


def _dechunk(raw: bytes) -> tuple[bytes, bool]:
    """Decode as much of a chunked body as ``raw`` holds; returns (decoded bytes, whether it is complete)."""
    decoded = bytearray()
    position = 0
    while True:
        line_end = raw.find(b"\r\n", position)
        if line_end < 0:
            return bytes(decoded), False
        size_text = raw[position:line_end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ProbeFailure(ENDPOINT_STATE_ERROR, "bad chunked encoding") from None
        if size == 0:
            return bytes(decoded), True
        start = line_end + 2
        decoded += raw[start : start + size]
        if len(raw) < start + size + 2:
            return bytes(decoded), False
        position = start + size + 2


def _recv(sock: socket.socket, deadline: float) -> bytes:
    sock.settimeout(_remaining(deadline))
    return sock.recv(65536)


def exchange(
    sock: socket.socket, target: Target, deadline: float, deadline_s: float, body_cap_bytes: int
) -> tuple[int, str, bytes]:
    """Send the request and read the answer; returns (status code, reason phrase, body up to the cap)."""
    authorization = f"Authorization: {target.authorization}\r\n" if target.authorization else ""
    request = (
        f"GET {target.request_target} HTTP/1.1\r\nHost: {target.host_header}\r\n{authorization}"
        "User-Agent: gputui-agent\r\nAccept: */*\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    try:
        sock.settimeout(_remaining(deadline))
        sock.sendall(request)
    except socket.timeout:
        raise ProbeFailure(ENDPOINT_STATE_TIMEOUT, "sending the request timed out") from None
    except OSError as exc:
        raise ProbeFailure(
            ENDPOINT_STATE_ERROR, f"connection closed before a response ({exc.strerror or exc})"
        ) from None

    buffer = b""
    received_any = False
    code: int | None = None
    phase = "headers"
    try:
        while True:
            header_end = buffer.find(b"\r\n\r\n")
            if header_end < 0:
                if len(buffer) > ENDPOINT_HEADER_CAP_BYTES:
                    raise ProbeFailure(ENDPOINT_STATE_ERROR, "response headers too long")
                chunk = _recv(sock, deadline)
                if not chunk:
                    if not received_any:
                        raise ProbeFailure(
                            ENDPOINT_STATE_ERROR,
                            "connection closed without a response (refused by a proxy or forward?)",
                        )
                    raise ProbeFailure(ENDPOINT_STATE_ERROR, "connection closed mid-headers")
                received_any = True
                buffer += chunk
                continue
            head = buffer[:header_end]
            buffer = buffer[header_end + 4 :]
            lines = head.split(b"\r\n")
            match = _STATUS_RE.match(lines[0])
            if match is None:
                excerpt = visible_text(lines[0], ENDPOINT_DETAIL_MAX_CHARS)
                raise ProbeFailure(ENDPOINT_STATE_ERROR, "not an HTTP response: " + excerpt)
            code = int(match.group(1))
            reason = (match.group(2) or b"").decode("latin-1")
            if 100 <= code < 200:
                continue  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, _sep, value = line.partition(b":")
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
            break

        phase = "body"
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length: int | None = None
        if not chunked and "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise ProbeFailure(ENDPOINT_STATE_ERROR, "bad Content-Length", code) from None
        if code in (204, 304):
            return code, reason, b""
        while True:
            if chunked:
                body, complete = _dechunk(buffer)
                if complete or len(body) >= body_cap_bytes or len(buffer) > 4 * body_cap_bytes:
                    return code, reason, body[:body_cap_bytes]
            elif length is not None:
                if len(buffer) >= min(length, body_cap_bytes):
                    return code, reason, buffer[:body_cap_bytes]
            elif len(buffer) >= body_cap_bytes:
                return code, reason, buffer[:body_cap_bytes]
            chunk = _recv(sock, deadline)
            if not chunk:
                if chunked or length is not None:
                    raise ProbeFailure(
                        _cut_state(code, ENDPOINT_STATE_ERROR), f"response truncated (HTTP {code})", code
                    )
                return code, reason, buffer[:body_cap_bytes]
            buffer += chunk
    except socket.timeout:
        if code is not None and phase == "body":
            raise ProbeFailure(
                _cut_state(code, ENDPOINT_STATE_TIMEOUT),
                f"body incomplete at the {deadline_s:g}s deadline (HTTP {code})",
                code,
            ) from None
        if received_any:
            raise ProbeFailure(
                ENDPOINT_STATE_TIMEOUT, f"response headers incomplete at the {deadline_s:g}s deadline"
            ) from None
        raise ProbeFailure(ENDPOINT_STATE_TIMEOUT, f"no response within {deadline_s:g}s") from None
    except ConnectionResetError:
        raise ProbeFailure(ENDPOINT_STATE_ERROR, "connection reset by peer", code) from None
    except OSError as exc:  # ssl.SSLError is one
        if _is_ssl_error(exc):
            tls_reason = getattr(exc, "reason", None) or exc
            raise ProbeFailure(ENDPOINT_STATE_ERROR, f"TLS: {tls_reason}") from None
        raise ProbeFailure(ENDPOINT_STATE_ERROR, f"read failed: {exc.strerror or exc}", code) from None


def _cut_state(code: int, otherwise: str) -> str:
    """The state of an answer whose body was cut short: its status line already said 5xx or 429, so the
    server is UNHEALTHY whatever became of the body; for any other status the probe cannot tell."""
    return ENDPOINT_STATE_UNHEALTHY if code >= 500 or code == 429 else otherwise
