"""A controllable HTTP(S) server on loopback, run in a subprocess, for the health-probe tests.

Run as a module (``python -m tests.integration.httpserver``) it listens on a free loopback port (and a
second, TLS one when given a certificate), prints one JSON line ``{"http_port": N, "tls_port": M|null}`` and
then obeys JSON-line commands on stdin, answering each with one JSON line on stdout:

* ``{"cmd": "mode", "path": "/health", "behaviour": "503"}``: how that path answers from now on.
* ``{"cmd": "hits"}``: ``{"hits": {path: [epoch seconds, ...]}}``, every request received so far.
* ``{"cmd": "quit"}``.

Behaviours (a path's mode, else the path itself names one: ``/status/503``, ``/hang``, ...):

* ``"200"``, ``"503"``, any status code: that status with a short body; ``"503-json"``: 503 with ``{}``.
* ``hang``: read the request, then never answer (until the server quits).
* ``drip``: a 200 with Content-Length 100000 whose body comes one byte every 0.1 s.
* ``drip-headers``: the status line, then header bytes one every 0.1 s.
* ``escapes``: a 503 whose body is full of terminal escapes, markup and invalid UTF-8.
* ``big``: a 503 with a 1 MiB body.
* ``chunked``: a 200 with a chunked body.
* ``redirect``: a 302 to /elsewhere.
* ``close``: accept, read the request, close without a byte (what an SSH local forward does when the far
  side answers "administratively prohibited").
* ``503-cut``: a 503 whose Content-Length promises 1000 bytes, then 12 bytes and the connection closes.
* ``auth``: 200 with ``Authorization: Basic`` of ``AUTH_USER``:``AUTH_PASSWORD``, else 401.
* ``reset``: accept, read the request, then reset the connection (RST).

:class:`HttpPeer` starts and drives it from a test.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import json
import socket
import ssl
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.integration.jsonlines import JsonLinesChild, serve_commands

HOSTILE_BODY = (
    b"boom \x1b]0;pwned\x07\x1b[2J\x1b[31mred[/] [bold]x[/bold] [@click=app.quit]q[/] \x9b\xc2\x9b"
    + "\u202eevil".encode()
    + b" \xff\xfe tail\r\nsecond line"
)
"""The ``escapes`` body: OSC title, clear screen, SGR, markup, a raw C1 byte, an encoded CSI, a bidi
override, invalid UTF-8 and a line break."""

AUTH_USER = "gputui"
AUTH_PASSWORD = "s3cr@t:pw"  # noqa: S105 - a test server's password
"""Credentials the ``auth`` behaviour accepts (the password holds characters a URL must percent-encode)."""

_stop = threading.Event()
_lock = threading.Lock()
_modes: dict[str, str] = {}
_hits: dict[str, list[float]] = {}


class QuietHandler(BaseHTTPRequestHandler):
    """An HTTP/1.1 handler that logs nothing: the base of the test servers' handlers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class _Handler(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path = self.path.split("?", 1)[0]
        with _lock:
            _hits.setdefault(path, []).append(time.time())
            behaviour = _modes.get(path)
        if behaviour is None:
            if path.startswith("/status/"):
                behaviour = path[len("/status/") :]
            elif path in ("/health", "/health_generate"):
                behaviour = "200"
            else:
                behaviour = path.lstrip("/")
        self._answer(behaviour)

    def _send(self, code: int, body: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, behaviour: str) -> None:
        if behaviour.isdigit():
            code = int(behaviour)
            self._send(code, b"" if code == 200 else f"status {code} body".encode())
        elif behaviour == "hang":
            _stop.wait(300)
        elif behaviour == "drip":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.flush()
            while not _stop.is_set():
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.1)
        elif behaviour == "drip-headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self.wfile.flush()
            while not _stop.is_set():
                self.wfile.write(b"X")
                self.wfile.flush()
                time.sleep(0.1)
        elif behaviour == "escapes":
            self._send(503, HOSTILE_BODY)
        elif behaviour == "big":
            self._send(503, b"A" * (1 << 20))
        elif behaviour == "chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello ", b"chunked ", b"world"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif behaviour == "503-cut":
            self.close_connection = True
            self.send_response(503)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"overloaded: ")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        elif behaviour == "auth":
            expected = "Basic " + base64.b64encode(f"{AUTH_USER}:{AUTH_PASSWORD}".encode()).decode()
            self._send(200 if self.headers.get("Authorization") == expected else 401, b"")
        elif behaviour == "redirect":
            self._send(302, b"", {"Location": "/elsewhere"})
        elif behaviour == "close":
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        elif behaviour == "503-json":  # what a launcher whose workers are gone answers on /health
            self._send(503, b"{}", {"Content-Type": "application/json"})
        elif behaviour == "reset":
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        else:
            self._send(404, b"no such behaviour")


class QuietServer(ThreadingHTTPServer):
    """A threaded test server that reuses its port and ignores clients that give up."""

    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that abort (TLS verify failures, deadlines) are the point of these tests


class _TlsServer(QuietServer):
    def __init__(self, address: tuple[str, int], context: ssl.SSLContext) -> None:
        super().__init__(address, _Handler)
        self.context = context

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = self.socket.accept()
        # The handshake happens in the handler thread on first read, so a stuck client cannot block accept.
        return self.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False), address


def _answer(command: dict[str, Any]) -> dict[str, Any]:
    name = command.get("cmd")
    if name == "mode":
        with _lock:
            if command.get("behaviour") is None:
                _modes.pop(command["path"], None)
            else:
                _modes[command["path"]] = str(command["behaviour"])
        return {"ok": True}
    if name == "hits":
        with _lock:
            return {"hits": {k: list(v) for k, v in _hits.items()}}
    return {"error": "unknown command"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    servers: list[QuietServer] = [QuietServer(("127.0.0.1", 0), _Handler)]
    tls_port = None
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        tls_server = _TlsServer(("127.0.0.1", 0), context)
        servers.append(tls_server)
        tls_port = tls_server.server_address[1]
    for server in servers:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    sys.stdout.write(json.dumps({"http_port": servers[0].server_address[1], "tls_port": tls_port}) + "\n")
    sys.stdout.flush()
    serve_commands(_answer)
    _stop.set()
    for server in servers:
        server.shutdown()
    return 0


# ---------------------------------------------------------------------------------------------------------
# Test side


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """Write a fresh self-signed certificate for 127.0.0.1/localhost and its key; returns their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gputui-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "cert.pem"
    key_path = directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


class HttpPeer(JsonLinesChild):
    """This server in a subprocess, driven by a test."""

    def __init__(self, cert: Path | None = None, key: Path | None = None, timeout_s: float = 20.0) -> None:
        args = []
        if cert is not None and key is not None:
            args = ["--tls-cert", str(cert), "--tls-key", str(key)]
        self.cert = cert
        super().__init__(__name__, args, "test HTTP server", timeout_s)
        self.http_port: int = self.hello["http_port"]
        self.tls_port: int | None = self.hello["tls_port"]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.http_port}{path}"

    def tls_url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.tls_port}{path}"

    def set_mode(self, path: str, behaviour: str | None) -> None:
        """Make ``path`` answer with ``behaviour`` from now on (None: its default)."""
        self._command({"cmd": "mode", "path": path, "behaviour": behaviour})

    def hits(self, path: str) -> list[float]:
        """Epoch times of every request for ``path`` so far."""
        return self._command({"cmd": "hits"})["hits"].get(path, [])


if __name__ == "__main__":
    sys.exit(main())
