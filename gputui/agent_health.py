# ruff: noqa: UP006, UP007, UP035, UP041, UP045
# (This code runs inside the agent on the GPU host's python3, which may be 3.8: typing.List/Optional are
# used on purpose so that it works with or without `from __future__ import annotations`, and socket.timeout
# is only an alias of TimeoutError from 3.10 on.)
"""Inference-server health probes, run by the agent on the GPU host itself.

Self-contained and standard-library only, Python 3.8 compatible: this module is pasted verbatim into
``gputui/agent.py`` (the one collector file shipped over SSH), so it imports nothing from gputui and every
top-level name carries a ``HEALTH_`` / ``Health`` / ``health_`` prefix (or is ``probe_url`` /
``discover_health_urls``) so as not to collide with the agent's own names.

``http://127.0.0.1:30000/health`` therefore means the GPU host's own loopback.

States (``HealthSample.state`` in ``gputui/model.py``):

* ``UP``: a 2xx answer with its whole body (up to the read cap) inside the deadline.
* ``UNHEALTHY``: a 5xx answer (sglang answers 503 when its scheduler is wedged), and 429 (the server is
  alive but shedding load, which is a health problem of the server, not of the probe).
* ``DOWN``: connection refused: nothing listens on the port (the server is gone).
* ``TIMEOUT``: the total deadline (connect + TLS + headers + body) passed: accepted but silent, or a
  dripping body.
* ``ERROR``: the probe itself cannot tell: bad or unsupported URL, unresolvable name, TLS failure
  (self-signed certificate...), connection closed or reset without an answer (an SSH forward whose far side
  is prohibited looks like this), redirects, and other 4xx answers. A 4xx other than 429 means the server
  answered but the URL is wrong or needs credentials: a configuration problem to fix in gputui, not an
  unhealthy server, so it must not look like the server's own 503.

Probing never blocks its caller: :class:`HealthProber` runs one scheduler thread and at most one probe thread
per URL; :meth:`HealthProber.samples` only copies the latest state under a lock that is never held during I/O.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
import time
import unicodedata
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple
from urllib.parse import urlsplit

try:
    import ssl
except ImportError:  # a python3 built without OpenSSL: https probes say so, everything else still works
    ssl = None  # type: ignore[assignment]

HEALTH_STATE_UP = "UP"
HEALTH_STATE_UNHEALTHY = "UNHEALTHY"
HEALTH_STATE_DOWN = "DOWN"
HEALTH_STATE_TIMEOUT = "TIMEOUT"
HEALTH_STATE_ERROR = "ERROR"

HEALTH_DEFAULT_DEADLINE_S = 30.0
"""Total deadline of one probe: longer than sglang's own 20 s generation check behind /health."""
HEALTH_DEFAULT_INTERVAL_S = 5.0
"""Seconds between the starts of two probes of one URL."""
HEALTH_GENERATE_MIN_INTERVAL_S = 10.0
"""Floor on the interval of endpoints that generate tokens (/health_generate): the monitor must not load
the server it watches. It cannot be configured lower."""
HEALTH_MIN_GAP_S = 0.5
"""Least pause between the end of one probe of a URL and the start of the next (a slow endpoint is not
probed back to back)."""
HEALTH_BODY_CAP_BYTES = 4096
"""At most this much of a response body is read; the rest is never downloaded."""
HEALTH_HEADER_CAP_BYTES = 16384
HEALTH_DETAIL_MAX_CHARS = 120
HEALTH_MAX_URL_CHARS = 2048
HEALTH_MAX_URLS = 32
"""At most this many configured URLs, and as many discovered ones: bounds the probe threads."""
HEALTH_DISCOVERED_LINGER_S = 60.0
"""A discovered endpoint stays listed this long after its launcher vanished, so that the operator sees it go
DOWN after a kill instead of silently disappearing."""
HEALTH_SGLANG_DEFAULT_PORT = 30000
HEALTH_VLLM_DEFAULT_PORT = 8000
HEALTH_SAMPLE_FIELDS = (
    "url",
    "state",
    "code",
    "latency_ms",
    "since",
    "last_ok",
    "consecutive_failures",
    "detail",
    "discovered",
    "checked_at",
)
HEALTH_NOT_PROBED_GENERATE = "not probed: generating endpoint (enable generate probes)"


class _HealthNoSslError(Exception):
    """Stands in for ssl.SSLError where there is no ssl module (it is then never raised)."""


_HEALTH_SSL_ERROR = ssl.SSLError if ssl is not None else _HealthNoSslError
_health_default_ssl_context: Any = None

_HEALTH_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_HEALTH_STATUS_RE = re.compile(rb"^HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?$")


def health_visible(text: Any, max_chars: int = HEALTH_DETAIL_MAX_CHARS) -> str:
    """Make a machine string safe to show on one line, at most ``max_chars`` characters long.

    Control characters (C0, DEL, C1 such as the CSI ``\\x9b``), format characters (bidi overrides such as
    U+202E, zero-width characters), line separators and surrogates are replaced by their Python escape
    (``\\x1b``, ``\\n``, ``\\u202e``), so an escape sequence shows as text instead of acting on the terminal.
    Over-long text is cut at a character boundary and ends with "…".

    Args:
        text: Any value; bytes are decoded as UTF-8 with invalid bytes shown as ``\\xNN``.
        max_chars: Length limit of the result in characters (at least 2).

    Returns:
        The visible, possibly shortened text.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "backslashreplace")
    elif not isinstance(text, str):
        text = str(text)
    pieces: List[str] = []
    length = 0
    limit = max(2, max_chars)
    for char in text:
        category = unicodedata.category(char)
        if category[0] == "C" or category in ("Zl", "Zp"):
            code_point = ord(char)
            if char == "\n":
                piece = "\\n"
            elif char == "\r":
                piece = "\\r"
            elif char == "\t":
                piece = "\\t"
            elif code_point <= 0xFF:
                piece = f"\\x{code_point:02x}"
            elif code_point <= 0xFFFF:
                piece = f"\\u{code_point:04x}"
            else:
                piece = f"\\U{code_point:08x}"
        else:
            piece = char
        if length + len(piece) > limit:
            # Leave room for the ellipsis; drop the piece rather than cut an escape in half.
            while pieces and length + 1 > limit:
                length -= len(pieces.pop())
            pieces.append("…")
            return "".join(pieces)
        pieces.append(piece)
        length += len(piece)
    return "".join(pieces)


def health_is_generating_url(url: str) -> bool:
    """Whether probing ``url`` makes the server generate tokens (sglang's ``/health_generate``).

    Errs on the side of caution: any last path segment mentioning "generate" counts, so such endpoints are
    only probed when asked for and never more often than ``HEALTH_GENERATE_MIN_INTERVAL_S``.
    """
    try:
        path = urlsplit(str(url)).path
    except ValueError:
        return False
    last_segment = path.rstrip("/").rsplit("/", 1)[-1]
    return "generate" in last_segment.lower()


class HealthProbeFailure(Exception):
    """A probe ended in a non-UP state; ``str()`` is the one-line detail."""

    def __init__(self, state: str, detail: str, code: Optional[int] = None) -> None:
        super().__init__(detail)
        self.state = state
        self.detail = detail
        self.code = code


class _HealthTarget:
    """A parsed, validated probe URL."""

    __slots__ = ("scheme", "host", "port", "request_target", "host_header")

    def __init__(self, scheme: str, host: str, port: int, request_target: str, host_header: str) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.request_target = request_target
        self.host_header = host_header


def _health_parse_url(url: Any) -> _HealthTarget:
    if not isinstance(url, str) or not url:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad URL: empty")
    if len(url) > HEALTH_MAX_URL_CHARS:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"bad URL: over {HEALTH_MAX_URL_CHARS} characters")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "unsupported URL (only http:// and https://)")
    # Anything that could split the request line or a header is refused before it reaches the socket.
    if any(ord(c) <= 0x20 or ord(c) >= 0x7F for c in url):
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad URL: spaces, control or non-ASCII characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"bad URL: {exc}") from None
    host = parts.hostname
    if not host:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad URL: no host")
    if port == 0:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad URL: port 0")
    default_port = 443 if scheme == "https" else 80
    host_in_header = f"[{host}]" if ":" in host else host
    if port is not None and port != default_port:
        host_in_header = f"{host_in_header}:{port}"
    request_target = parts.path or "/"
    if parts.query:
        request_target += "?" + parts.query
    return _HealthTarget(scheme, host, port or default_port, request_target, host_in_header)


class _HealthPendingLookup:
    __slots__ = ("done", "result", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Optional[List[Any]] = None
        self.error: Optional[BaseException] = None


_health_lookups_lock = threading.Lock()
_health_lookups: Dict[Tuple[str, int], _HealthPendingLookup] = {}


def _health_lookup_worker(key: Tuple[str, int], pending: _HealthPendingLookup) -> None:
    try:
        pending.result = socket.getaddrinfo(key[0], key[1], 0, socket.SOCK_STREAM)
    except BaseException as exc:  # handed to the waiting probe
        pending.error = exc
    finally:
        with _health_lookups_lock:
            _health_lookups.pop(key, None)
        pending.done.set()


def _health_resolve(host: str, port: int, deadline: float) -> List[Any]:
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
    with _health_lookups_lock:
        pending = _health_lookups.get(key)
        if pending is None:
            pending = _HealthPendingLookup()
            _health_lookups[key] = pending
            threading.Thread(
                target=_health_lookup_worker, args=(key, pending), name="gputui-health-dns", daemon=True
            ).start()
    if not pending.done.wait(max(0.0, deadline - time.monotonic())):
        raise HealthProbeFailure(HEALTH_STATE_TIMEOUT, f"name lookup of {host} timed out")
    if pending.error is not None:
        reason = getattr(pending.error, "strerror", None) or str(pending.error)
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"cannot resolve {host}: {reason}")
    if not pending.result:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"cannot resolve {host}: no address")
    return pending.result


def _health_remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise socket.timeout("deadline passed")
    return remaining


def _health_connect(target: _HealthTarget, deadline: float, deadline_s: float) -> socket.socket:
    addresses = _health_resolve(target.host, target.port, deadline)
    refused = 0
    last_error: Optional[OSError] = None
    for family, socktype, proto, _canonname, address in addresses:
        sock = socket.socket(family, socktype, proto)
        try:
            sock.settimeout(_health_remaining(deadline))
            sock.connect(address)
            return sock
        except socket.timeout:
            sock.close()
            raise HealthProbeFailure(
                HEALTH_STATE_TIMEOUT, f"connect timed out (deadline {deadline_s:g}s)"
            ) from None
        except ConnectionRefusedError:
            sock.close()
            refused += 1
        except OSError as exc:
            sock.close()
            last_error = exc
    if refused and last_error is None:
        raise HealthProbeFailure(HEALTH_STATE_DOWN, "connection refused")
    reason = (last_error.strerror if last_error is not None else None) or str(last_error)
    raise HealthProbeFailure(HEALTH_STATE_ERROR, f"connect failed: {reason}")


def _health_wrap_tls(
    sock: socket.socket, target: _HealthTarget, deadline: float, ssl_context: Any
) -> socket.socket:
    global _health_default_ssl_context
    if ssl is None:
        sock.close()
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "TLS: this python3 has no ssl module")
    context = ssl_context
    if context is None:
        # Loading the system's CA store costs milliseconds of CPU: once per agent, not once per probe.
        if _health_default_ssl_context is None:
            _health_default_ssl_context = ssl.create_default_context()
        context = _health_default_ssl_context
    try:
        sock.settimeout(_health_remaining(deadline))
        return context.wrap_socket(sock, server_hostname=target.host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc)
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"TLS: certificate verify failed: {reason}") from None
    except socket.timeout:
        sock.close()
        raise HealthProbeFailure(HEALTH_STATE_TIMEOUT, "TLS handshake timed out") from None
    except ssl.SSLError as exc:
        sock.close()
        reason = getattr(exc, "reason", None) or str(exc)
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"TLS: {reason}") from None
    except OSError as exc:
        sock.close()
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"TLS: {exc.strerror or exc}") from None


def _health_dechunk(raw: bytes) -> Tuple[bytes, bool]:
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
            raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad chunked encoding") from None
        if size == 0:
            return bytes(decoded), True
        start = line_end + 2
        decoded += raw[start : start + size]
        if len(raw) < start + size + 2:
            return bytes(decoded), False
        position = start + size + 2


def _health_recv(sock: socket.socket, deadline: float) -> bytes:
    sock.settimeout(_health_remaining(deadline))
    return sock.recv(65536)


def _health_exchange(
    sock: socket.socket, target: _HealthTarget, deadline: float, deadline_s: float, body_cap_bytes: int
) -> Tuple[int, str, bytes]:
    """Send the request and read the answer; returns (status code, reason phrase, body up to the cap)."""
    request = (
        f"GET {target.request_target} HTTP/1.1\r\nHost: {target.host_header}\r\n"
        "User-Agent: gputui-agent\r\nAccept: */*\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    try:
        sock.settimeout(_health_remaining(deadline))
        sock.sendall(request)
    except socket.timeout:
        raise HealthProbeFailure(HEALTH_STATE_TIMEOUT, "sending the request timed out") from None
    except OSError as exc:
        raise HealthProbeFailure(
            HEALTH_STATE_ERROR, f"connection closed before a response ({exc.strerror or exc})"
        ) from None

    buffer = b""
    received_any = False
    code: Optional[int] = None
    phase = "headers"
    try:
        while True:
            header_end = buffer.find(b"\r\n\r\n")
            if header_end < 0:
                if len(buffer) > HEALTH_HEADER_CAP_BYTES:
                    raise HealthProbeFailure(HEALTH_STATE_ERROR, "response headers too long")
                chunk = _health_recv(sock, deadline)
                if not chunk:
                    if not received_any:
                        raise HealthProbeFailure(
                            HEALTH_STATE_ERROR,
                            "connection closed without a response (refused by a proxy or forward?)",
                        )
                    raise HealthProbeFailure(HEALTH_STATE_ERROR, "connection closed mid-headers")
                received_any = True
                buffer += chunk
                continue
            head = buffer[:header_end]
            buffer = buffer[header_end + 4 :]
            lines = head.split(b"\r\n")
            match = _HEALTH_STATUS_RE.match(lines[0])
            if match is None:
                raise HealthProbeFailure(
                    HEALTH_STATE_ERROR, "not an HTTP response: " + health_visible(lines[0])
                )
            code = int(match.group(1))
            reason = (match.group(2) or b"").decode("latin-1")
            if 100 <= code < 200:
                continue  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            headers: Dict[str, str] = {}
            for line in lines[1:]:
                name, _sep, value = line.partition(b":")
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
            break

        phase = "body"
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length: Optional[int] = None
        if not chunked and "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise HealthProbeFailure(HEALTH_STATE_ERROR, "bad Content-Length", code) from None
        if code in (204, 304):
            return code, reason, b""
        while True:
            if chunked:
                body, complete = _health_dechunk(buffer)
                if complete or len(body) >= body_cap_bytes or len(buffer) > 4 * body_cap_bytes:
                    return code, reason, body[:body_cap_bytes]
            elif length is not None:
                if len(buffer) >= min(length, body_cap_bytes):
                    return code, reason, buffer[:body_cap_bytes]
            elif len(buffer) >= body_cap_bytes:
                return code, reason, buffer[:body_cap_bytes]
            chunk = _health_recv(sock, deadline)
            if not chunk:
                if chunked or length is not None:
                    raise HealthProbeFailure(HEALTH_STATE_ERROR, f"response truncated (HTTP {code})", code)
                return code, reason, buffer[:body_cap_bytes]
            buffer += chunk
    except socket.timeout:
        if code is not None and phase == "body":
            raise HealthProbeFailure(
                HEALTH_STATE_TIMEOUT, f"body incomplete at the {deadline_s:g}s deadline (HTTP {code})", code
            ) from None
        if received_any:
            raise HealthProbeFailure(
                HEALTH_STATE_TIMEOUT, f"response headers incomplete at the {deadline_s:g}s deadline"
            ) from None
        raise HealthProbeFailure(HEALTH_STATE_TIMEOUT, f"no response within {deadline_s:g}s") from None
    except ConnectionResetError:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, "connection reset by peer", code) from None
    except _HEALTH_SSL_ERROR as exc:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"TLS: {getattr(exc, 'reason', None) or exc}") from None
    except OSError as exc:
        raise HealthProbeFailure(HEALTH_STATE_ERROR, f"read failed: {exc.strerror or exc}", code) from None


def _health_classify(code: int, reason: str, body: bytes) -> Tuple[str, Optional[str]]:
    excerpt = body.strip()
    if 200 <= code < 300:
        return HEALTH_STATE_UP, None
    # The body says more than the reason phrase, and the detail line is short: one or the other.
    if excerpt:
        detail = f"HTTP {code}: {health_visible(excerpt, HEALTH_DETAIL_MAX_CHARS)}"
    else:
        detail = f"HTTP {code} {health_visible(reason, HEALTH_DETAIL_MAX_CHARS)}".strip()
    if code >= 500 or code == 429:
        return HEALTH_STATE_UNHEALTHY, detail
    if 300 <= code < 400:
        return HEALTH_STATE_ERROR, "redirect not followed: " + detail
    return HEALTH_STATE_ERROR, detail


def probe_url(
    url: str,
    deadline_s: float = HEALTH_DEFAULT_DEADLINE_S,
    body_cap_bytes: int = HEALTH_BODY_CAP_BYTES,
    ssl_context: Any = None,
) -> Dict[str, Any]:
    """Probe one health URL once, blocking for at most ``deadline_s`` (plus scheduling noise).

    The deadline covers everything: name lookup, connect, TLS handshake, request, headers and body. No
    proxy from the environment is used (the URL is the GPU host's own endpoint) and redirects are not
    followed.

    Args:
        url: An http:// or https:// URL; anything else is an ERROR "unsupported URL".
        deadline_s: Total deadline in seconds.
        body_cap_bytes: At most this many body bytes are read.
        ssl_context: An ``ssl.SSLContext`` for https; default: the system's verifying context.

    Returns:
        ``{"state", "code", "latency_ms", "detail"}``: the state name, the HTTP status code (None when
        none was read), milliseconds until the answer or failure, and a sanitised detail line (None when UP).
    """
    started = time.monotonic()
    deadline = started + deadline_s
    code: Optional[int] = None
    sock: Optional[socket.socket] = None
    try:
        target = _health_parse_url(url)
        sock = _health_connect(target, deadline, deadline_s)
        if target.scheme == "https":
            sock = _health_wrap_tls(sock, target, deadline, ssl_context)
        code, reason, body = _health_exchange(sock, target, deadline, deadline_s, body_cap_bytes)
        state, detail = _health_classify(code, reason, body)
    except HealthProbeFailure as failure:
        state, detail = failure.state, failure.detail
        code = failure.code if failure.code is not None else code
    except socket.timeout:
        state, detail = HEALTH_STATE_TIMEOUT, f"no response within {deadline_s:g}s"
    except Exception as exc:  # one bad endpoint must never take the agent down
        state, detail = HEALTH_STATE_ERROR, f"probe failed: {type(exc).__name__}: {exc}"
    finally:
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
    latency_ms = round((time.monotonic() - started) * 1000.0, 1)
    return {
        "state": state,
        "code": code,
        "latency_ms": latency_ms,
        "detail": None if detail is None else health_visible(detail, HEALTH_DETAIL_MAX_CHARS),
    }


# ---------------------------------------------------------------------------------------------------------
# Discovery


def _health_valid_port(text: str) -> Optional[int]:
    if not text.isdigit() or len(text) > 5:
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


def _health_url_host(host: Optional[str]) -> Optional[str]:
    """The host part of a discovered URL for a launcher's ``--host`` value; None when it is not usable."""
    if host is None or host == "" or host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host if _HEALTH_HOSTNAME_RE.match(host) else None
    if address.is_unspecified:
        return "127.0.0.1"  # bound to every address: the loopback one answers
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def _health_option(argv: List[str], name: str) -> Tuple[bool, Optional[str]]:
    """The last value of ``--name V`` / ``--name=V`` in argv (argparse semantics) and whether it was given."""
    found = False
    value: Optional[str] = None
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            break
        if arg == name:
            found = True
            value = argv[index + 1] if index + 1 < len(argv) else ""
            index += 2
            continue
        if arg.startswith(name + "="):
            found = True
            value = arg[len(name) + 1 :]
        index += 1
    return found, value


def _health_entry_point(argv: List[str]) -> Tuple[str, str, str]:
    """What a command line runs: (kind, name, first argument after it), kind "module", "script" or "program".

    For a Python interpreter the interpreter's own options are skipped, so ``python -u -m pkg.mod`` runs the
    module ``pkg.mod`` and ``python /venv/bin/vllm serve`` the script ``/venv/bin/vllm``; ``python -c`` runs
    nothing recognisable (so ``python -c ... -m sglang.launch_server`` is not a launcher, and neither is
    ``pgrep -f sglang.launch_server``).
    """
    if not argv:
        return "program", "", ""
    if not os.path.basename(argv[0]).startswith("python"):
        return "program", argv[0], argv[1] if len(argv) > 1 else ""
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "-m":
            following = argv[index + 2] if index + 2 < len(argv) else ""
            return "module", argv[index + 1] if index + 1 < len(argv) else "", following
        if arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
            return "module", arg[2:], argv[index + 1] if index + 1 < len(argv) else ""
        if arg.startswith("-c") or arg == "-":
            return "code", "", ""
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            index += 2
            continue
        if arg.startswith("-"):
            index += 1
            continue
        return "script", arg, argv[index + 1] if index + 1 < len(argv) else ""
    return "program", argv[0], ""


def _health_launcher_kind(argv: List[str]) -> Optional[str]:
    kind, name, following = _health_entry_point(argv)
    base = os.path.basename(name)
    if kind == "module":
        if name == "sglang.launch_server":
            return "sglang"
        if name == "vllm.entrypoints.openai.api_server":
            return "vllm"
        return None
    if kind == "script" and name.replace(os.sep, "/").endswith("sglang/launch_server.py"):
        return "sglang"
    if kind == "script" and name.replace(os.sep, "/").endswith("vllm/entrypoints/openai/api_server.py"):
        return "vllm"
    if kind in ("script", "program") and following == "serve":
        if base == "sglang":
            return "sglang"
        if base == "vllm":
            return "vllm"
    return None


def health_launcher_url(cmdline: Iterable[Any]) -> Optional[str]:
    """The /health URL an sglang or vLLM launcher command line serves, or None.

    Recognises ``python -m sglang.launch_server``, ``sglang serve``, ``vllm serve`` and
    ``python -m vllm.entrypoints.openai.api_server``; reads ``--port N`` / ``--port=N`` (defaults 30000 and
    8000) and ``--host`` (unset, 0.0.0.0, :: and localhost become 127.0.0.1). A launcher whose port or host is
    not valid yields nothing rather than a guess.
    """
    argv = [str(arg) for arg in cmdline]
    if len(argv) == 1 and " " in argv[0]:
        argv = argv[0].split()  # a process that rewrote its title into one string
    kind = _health_launcher_kind(argv)
    if kind is None:
        return None
    port_given, port_text = _health_option(argv, "--port")
    if port_given:
        port = _health_valid_port(port_text or "")
        if port is None:
            return None
    else:
        port = HEALTH_SGLANG_DEFAULT_PORT if kind == "sglang" else HEALTH_VLLM_DEFAULT_PORT
    _host_given, host_text = _health_option(argv, "--host")
    host = _health_url_host(host_text)
    if host is None:
        return None
    return f"http://{host}:{port}/health"


def discover_health_urls(processes: Iterable[Any]) -> List[str]:
    """Health URLs proposed by the inference-server launchers among ``processes``.

    Args:
        processes: Dicts with a "cmdline" argv list (other keys ignored), or objects with a ``cmdline``.

    Returns:
        Distinct URLs in a stable (sorted) order, at most ``HEALTH_MAX_URLS``.
    """
    urls: Set[str] = set()
    for process in processes:
        cmdline = process.get("cmdline") if isinstance(process, dict) else getattr(process, "cmdline", None)
        if not cmdline or isinstance(cmdline, (str, bytes)):
            continue
        url = health_launcher_url(cmdline)
        if url is not None:
            urls.add(url)
    return sorted(urls)[:HEALTH_MAX_URLS]


def health_read_proc_cmdlines(proc_root: str = "/proc") -> List[Dict[str, Any]]:
    """Every process's ``{"pid", "cmdline"}`` from /proc, for discovery when no full process list is at hand.

    Processes that vanish or cannot be read are skipped; zombies and kernel threads have an empty cmdline.
    """
    result: List[Dict[str, Any]] = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        return result
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, name, "cmdline"), "rb") as handle:
                raw = handle.read(65536)
        except OSError:
            continue
        argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0")]
        if argv and argv[-1] == "":
            argv.pop()
        if argv:
            result.append({"pid": int(name), "cmdline": argv})
    return result


# ---------------------------------------------------------------------------------------------------------
# The prober


class _HealthEndpoint:
    __slots__ = (
        "url",
        "discovered",
        "generating",
        "state",
        "code",
        "latency_ms",
        "since",
        "last_ok",
        "consecutive_failures",
        "detail",
        "checked_at",
        "next_due",
    )

    def __init__(self, url: str, discovered: bool, now_monotonic: float) -> None:
        self.url = url
        self.discovered = discovered
        self.generating = health_is_generating_url(url)
        self.state: Optional[str] = None
        self.code: Optional[int] = None
        self.latency_ms: Optional[float] = None
        self.since: Optional[float] = None
        self.last_ok: Optional[float] = None
        self.consecutive_failures = 0
        self.detail: Optional[str] = None
        self.checked_at: Optional[float] = None
        self.next_due = now_monotonic


class HealthProber:
    """Probes health URLs in background threads; :meth:`samples` returns the latest state at once.

    One scheduler thread (started when the first URL appears) starts at most one probe thread per URL at a
    time; a URL is probed every ``interval_s`` (start to start, and never sooner than ``HEALTH_MIN_GAP_S``
    after the previous probe ended). Generating endpoints are probed only when ``generate`` is on, and then
    at most every ``HEALTH_GENERATE_MIN_INTERVAL_S``.

    Args:
        urls: Configured URLs (probed whatever discovery finds).
        discover: Add URLs that :meth:`update_discovered` finds in the process list.
        generate: Probe generating endpoints (``/health_generate``) too.
        interval_s: Seconds between probes of one URL.
        deadline_s: Total deadline of one probe in seconds.
        body_cap_bytes: Body read cap of one probe in bytes.
        ssl_context: TLS settings for https URLs (default: the system's verifying context).
        discovered_linger_s: Seconds a discovered URL stays after its launcher left the process list.
        clock: Wall clock (epoch seconds) for ``since`` / ``last_ok`` / ``checked_at``.
    """

    def __init__(
        self,
        urls: Iterable[str] = (),
        discover: bool = True,
        generate: bool = False,
        interval_s: float = HEALTH_DEFAULT_INTERVAL_S,
        deadline_s: float = HEALTH_DEFAULT_DEADLINE_S,
        body_cap_bytes: int = HEALTH_BODY_CAP_BYTES,
        ssl_context: Any = None,
        discovered_linger_s: float = HEALTH_DISCOVERED_LINGER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Condition()
        self._configured: List[str] = []
        self._discovered_seen: Dict[str, float] = {}
        self._endpoints: Dict[str, _HealthEndpoint] = {}
        self._in_flight: Set[str] = set()
        # Kept across removal and re-adding of a URL, so reconfiguring cannot beat the rate limits.
        self._last_started: Dict[str, float] = {}
        self._discover = bool(discover)
        self._generate = bool(generate)
        self._interval_s = HEALTH_DEFAULT_INTERVAL_S
        self._deadline_s = HEALTH_DEFAULT_DEADLINE_S
        self._body_cap_bytes = int(body_cap_bytes)
        self._ssl_context = ssl_context
        self._linger_s = float(discovered_linger_s)
        self._clock = clock
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._scan_requested = False
        self.configure(urls=list(urls), interval_s=interval_s, deadline_s=deadline_s)

    # -- configuration -------------------------------------------------------------------------------------

    def configure(
        self,
        urls: Optional[Iterable[str]] = None,
        generate: Optional[bool] = None,
        discover: Optional[bool] = None,
        interval_s: Optional[float] = None,
        deadline_s: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Change what is probed; None leaves a setting as it is. Returns the settings now in force.

        Raises:
            ValueError: With one readable line, for a bad value (nothing is changed then).
        """
        new_urls: Optional[List[str]] = None
        if urls is not None:
            if isinstance(urls, (str, bytes)):
                raise ValueError("urls must be a list of strings")
            new_urls = []
            for url in urls:
                if not isinstance(url, str):
                    raise ValueError("urls must be a list of strings")
                if len(url) > HEALTH_MAX_URL_CHARS:
                    raise ValueError(f"health URL longer than {HEALTH_MAX_URL_CHARS} characters")
                if url not in new_urls:
                    new_urls.append(url)
            if len(new_urls) > HEALTH_MAX_URLS:
                raise ValueError(f"at most {HEALTH_MAX_URLS} health URLs")
        for name, value in (("generate", generate), ("discover", discover)):
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false")
        for name, seconds, upper in (("interval_s", interval_s, 3600.0), ("deadline_s", deadline_s, 600.0)):
            if seconds is not None and (
                isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= upper
            ):
                raise ValueError(f"{name} must be a number of seconds in (0, {upper:g}]")
        with self._lock:
            if new_urls is not None:
                self._configured = new_urls
            if generate is not None:
                self._generate = generate
            if discover is not None:
                self._discover = discover
                if not discover:
                    self._discovered_seen.clear()
            if interval_s is not None:
                self._interval_s = float(interval_s)
            if deadline_s is not None:
                self._deadline_s = float(deadline_s)
            self._sync_endpoints_locked()
            return self._config_locked()

    def handle_command(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """Apply the agent's ``health`` command and return its reply's result.

        ``{"cmd": "health", "urls": [...], "generate": bool, "discover": bool, "interval_s": S,
        "deadline_s": S}``; every key but "cmd" is optional. Result: ``{"config": {...}, "samples": [...]}``.

        Raises:
            ValueError: One readable line for a bad command.
        """
        if not isinstance(command, dict):
            raise ValueError("health command must be a JSON object")
        config = self.configure(
            urls=command.get("urls"),
            generate=command.get("generate"),
            discover=command.get("discover"),
            interval_s=command.get("interval_s"),
            deadline_s=command.get("deadline_s"),
        )
        return {"config": config, "samples": self.samples()}

    def update_discovered(self, processes: Optional[Iterable[Any]] = None) -> None:
        """Look for launchers and add (and retire) discovered URLs; call it at the process-list rate.

        Args:
            processes: The host's processes as dicts with a "cmdline" argv list: pure string work, done
                before returning. It must hold every process, not only GPU ones: a launcher holds no GPU
                memory while its model loads. None: read every process's cmdline from /proc on the
                prober's own thread instead, and return at once (the snapshot stream never waits for it).
        """
        with self._lock:
            if not self._discover or self._closed:
                return
            if processes is None:
                self._scan_requested = True
                self._ensure_thread_locked()
                self._lock.notify_all()
                return
        self._apply_discovered(discover_health_urls(processes))

    def _apply_discovered(self, found: List[str]) -> None:
        now = time.monotonic()
        with self._lock:
            if not self._discover:
                return
            for url in found:
                self._discovered_seen[url] = now
            for url, seen in list(self._discovered_seen.items()):
                if now - seen > self._linger_s:
                    del self._discovered_seen[url]
            while len(self._discovered_seen) > HEALTH_MAX_URLS:
                oldest = min(self._discovered_seen, key=self._discovered_seen.__getitem__)
                del self._discovered_seen[oldest]
            self._sync_endpoints_locked()

    def _config_locked(self) -> Dict[str, Any]:
        return {
            "urls": list(self._configured),
            "discovered_urls": sorted(u for u in self._discovered_seen if u not in self._configured),
            "generate": self._generate,
            "discover": self._discover,
            "interval_s": self._interval_s,
            "deadline_s": self._deadline_s,
            "generate_min_interval_s": HEALTH_GENERATE_MIN_INTERVAL_S,
        }

    def _sync_endpoints_locked(self) -> None:
        wanted: Dict[str, bool] = {}
        for url in self._configured:
            wanted[url] = False
        if self._discover:
            for url in sorted(self._discovered_seen):
                wanted.setdefault(url, True)
        for url in list(self._endpoints):
            if url not in wanted:
                del self._endpoints[url]
        now = time.monotonic()
        forget_before = now - max(self._interval_s, HEALTH_GENERATE_MIN_INTERVAL_S)
        for url, started in list(self._last_started.items()):
            if url not in wanted and started < forget_before:
                del self._last_started[url]
        for url, discovered in wanted.items():
            endpoint = self._endpoints.get(url)
            if endpoint is None:
                endpoint = _HealthEndpoint(url, discovered, now)
                last_started = self._last_started.get(url)
                if last_started is not None:
                    endpoint.next_due = max(now, last_started + self._period_s(endpoint))
                self._endpoints[url] = endpoint
            else:
                endpoint.discovered = discovered
        if self._endpoints:
            self._ensure_thread_locked()
        self._lock.notify_all()

    def _ensure_thread_locked(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._schedule, name="gputui-health", daemon=True)
            self._thread.start()

    # -- reading -------------------------------------------------------------------------------------------

    def samples(self) -> List[Dict[str, Any]]:
        """The latest state of every endpoint (``model.HealthSample`` dicts); never waits for a probe.

        Configured URLs come first in their order, then discovered ones sorted.
        """
        with self._lock:
            result = []
            ordered = [u for u in self._configured if u in self._endpoints]
            ordered += sorted(u for u in self._endpoints if u not in self._configured)
            for url in ordered:
                endpoint = self._endpoints[url]
                detail = endpoint.detail
                if endpoint.generating and not self._generate and endpoint.state is None:
                    detail = HEALTH_NOT_PROBED_GENERATE
                result.append(
                    {
                        "url": endpoint.url,
                        "state": endpoint.state,
                        "code": endpoint.code,
                        "latency_ms": endpoint.latency_ms,
                        "since": endpoint.since,
                        "last_ok": endpoint.last_ok,
                        "consecutive_failures": endpoint.consecutive_failures,
                        "detail": detail,
                        "discovered": endpoint.discovered,
                        "checked_at": endpoint.checked_at,
                    }
                )
            return result

    def config(self) -> Dict[str, Any]:
        """The settings now in force (as :meth:`configure` returns them)."""
        with self._lock:
            return self._config_locked()

    def close(self) -> None:
        """Stop scheduling probes; returns at once (a probe in flight ends by its own deadline)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)

    # -- threads -------------------------------------------------------------------------------------------

    def _period_s(self, endpoint: _HealthEndpoint) -> float:
        if endpoint.generating:
            return max(self._interval_s, HEALTH_GENERATE_MIN_INTERVAL_S)
        return self._interval_s

    def _schedule(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                if self._scan_requested:
                    self._scan_requested = False
                    scan = True
                else:
                    scan = self._start_due_probes_and_wait_locked()
            if scan:
                found: Optional[List[str]] = None
                try:
                    found = discover_health_urls(health_read_proc_cmdlines())
                except Exception:  # a /proc oddity must not stop the probes; keep what was found before
                    found = None
                if found is not None:
                    self._apply_discovered(found)

    def _start_due_probes_and_wait_locked(self) -> bool:
        """Start the probes that are due, then wait (lock released) for the next due time or a change.

        Returns:
            False: no /proc scan to run (the caller's loop shape).
        """
        now = time.monotonic()
        wake_at = now + 60.0
        for endpoint in list(self._endpoints.values()):
            if endpoint.url in self._in_flight:
                continue
            if endpoint.generating and not self._generate:
                continue
            if endpoint.next_due <= now:
                self._in_flight.add(endpoint.url)
                self._last_started[endpoint.url] = now
                endpoint.next_due = now + self._period_s(endpoint)
                threading.Thread(
                    target=self._probe_one,
                    args=(endpoint.url, self._deadline_s),
                    name="gputui-health-probe",
                    daemon=True,
                ).start()
            wake_at = min(wake_at, endpoint.next_due)
        self._lock.wait(max(0.01, wake_at - now))
        return False

    def _probe_one(self, url: str, deadline_s: float) -> None:
        try:
            result = probe_url(url, deadline_s, self._body_cap_bytes, self._ssl_context)
        except Exception as exc:  # probe_url should not raise; never kill the thread silently
            result = {"state": HEALTH_STATE_ERROR, "code": None, "latency_ms": None, "detail": str(exc)}
        finished = time.monotonic()
        now = self._clock()
        with self._lock:
            self._in_flight.discard(url)
            endpoint = self._endpoints.get(url)
            if endpoint is not None:
                state = result["state"]
                if state != endpoint.state:
                    endpoint.since = now
                endpoint.state = state
                endpoint.code = result["code"]
                endpoint.latency_ms = result["latency_ms"]
                endpoint.detail = result["detail"]
                endpoint.checked_at = now
                if state == HEALTH_STATE_UP:
                    endpoint.last_ok = now
                    endpoint.consecutive_failures = 0
                else:
                    endpoint.consecutive_failures += 1
                endpoint.next_due = max(endpoint.next_due, finished + HEALTH_MIN_GAP_S)
            self._lock.notify_all()
