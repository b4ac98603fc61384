"""Health probes of the collector (``gputui.agent.servers``) against a real HTTP(S) server and real processes.

RELIABILITY cases 26 (each failure a distinct state, bounded deadline, snapshot stream never blocked) and
27 (the generating endpoint is probed only when asked for, at most every 10 s). The tests here run the
prober in-process, through the collector's protocol as SSH ships it, through ``gputui snapshot`` and through
a real sshd.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from gputui.agent.servers import ENDPOINT_GENERATE_MIN_INTERVAL_S
from gputui.agent.servers.discovery import (
    discover_health_urls,
    health_is_local_url,
    health_launcher_url,
    health_local_addresses,
    health_read_proc_cmdlines,
)
from gputui.agent.servers.endpoint import ENDPOINT_NOT_PROBED_GENERATE
from gputui.agent.servers.messages import ENDPOINT_SAMPLE_FIELDS
from gputui.agent.servers.probe import probe_url
from gputui.agent.servers.prober import EndpointProber
from gputui.agent.servers.urls import health_redact_url
from gputui.commands.snapshot import format_health_line
from gputui.core.link import LinkOptions
from gputui.core.model import EndpointSample, HostSnapshot
from gputui.core.model import fields as record_fields
from gputui.transports.ssh import SshLink
from gputui.transports.ssh.bundle import Bundle, boot_source, build, collector_modules, loader
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO, agent_process
from tests.integration.httpserver import (
    AUTH_PASSWORD,
    AUTH_USER,
    HOSTILE_BODY,
    HttpPeer,
    make_self_signed_cert,
)
from tests.integration.procs import state_of as state_of_pid
from tests.integration.sshd import ClientHome, SshdFactory
from tests.interpreters import python38

SLACK_S = 3.0
"""Generous allowance over a deadline for a loaded 2-core machine; only bounds hangs."""


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def peer(tls_files: tuple[Path, Path]) -> Iterator[HttpPeer]:
    server = HttpPeer(*tls_files)
    yield server
    server.close()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening: connections to it are refused, and nobody else can take it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections (the kernel's backlog) but never reads or answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout_s: float = 20.0, step_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(step_s)


def sample_for(prober: EndpointProber, url: str) -> dict[str, Any] | None:
    for sample in prober.samples():
        if sample["url"] == url:
            return sample
    return None


def state_of(prober: EndpointProber, url: str) -> str | None:
    sample = sample_for(prober, url)
    return None if sample is None else sample["state"]


def assert_visible(text: str) -> None:
    """No control, format (bidi) or line-separator character survives."""
    for char in text:
        category = unicodedata.category(char)
        assert category[0] != "C", f"{char!r} in {text!r}"
        assert category not in ("Zl", "Zp"), f"{char!r} in {text!r}"


# ---------------------------------------------------------------------------------------------------------
# The probe as it is shipped


def _probe_bundle() -> Bundle:
    """The shipped collector's modules with an entry that probes the URLs in its arguments."""
    modules = collector_modules()
    modules["gputui_probe"] = (False, "<gputui-bundle>/gputui_probe.py", PROBE_ENTRY)
    return build(modules, "gputui_probe", boot_source())


PROBE_ENTRY = b"""
import json, sys
from gputui.agent.servers.probe import probe_url
assert "gputui.core" not in sys.modules
print(json.dumps([probe_url(url, 10.0) for url in sys.argv[1:]]))
"""


def _shipped_probe(python: str, urls: list[str], prefix: str = "") -> list[dict[str, Any]]:
    payload = _probe_bundle()
    done = subprocess.run(
        [python, "-I", "-c", prefix + loader(payload), *urls],
        input=payload.data,
        capture_output=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return json.loads(done.stdout)


def test_shipped_source_probes_on_python38(peer: HttpPeer) -> None:
    unhealthy, up = _shipped_probe(python38(), [peer.url("/status/503"), peer.url("/health")])
    assert (unhealthy["state"], unhealthy["code"]) == ("UNHEALTHY", 503)
    assert (up["state"], up["code"]) == ("UP", 200)


def test_shipped_source_without_ssl_module(peer: HttpPeer) -> None:
    """A remote python3 built without OpenSSL: http probes work, https ones say why they cannot."""
    no_ssl = 'import sys;sys.modules["ssl"]=None;'  # makes "import ssl" raise ImportError
    plain, tls = _shipped_probe(sys.executable, [peer.url("/health"), peer.tls_url("/health")], no_ssl)
    assert plain["state"] == "UP"
    assert tls["state"] == "ERROR"
    assert tls["detail"] == "TLS: this python3 has no ssl module"


# ---------------------------------------------------------------------------------------------------------
# One probe: each state distinct


@pytest.mark.parametrize(
    ("path", "state", "code", "detail_part"),
    [
        ("/status/200", "UP", 200, None),
        ("/status/204", "UP", 204, None),
        ("/chunked", "UP", 200, None),
        ("/status/503", "UNHEALTHY", 503, "HTTP 503"),
        ("/status/500", "UNHEALTHY", 500, "status 500 body"),
        ("/status/429", "UNHEALTHY", 429, "429"),
        ("/status/404", "ERROR", 404, "HTTP 404"),
        ("/status/401", "ERROR", 401, "HTTP 401"),
        ("/redirect", "ERROR", 302, "redirect not followed"),
        ("/close", "ERROR", None, "connection closed without a response"),
    ],
)
def test_probe_states(
    peer: HttpPeer, path: str, state: str, code: int | None, detail_part: str | None
) -> None:
    result = probe_url(peer.url(path), deadline_s=10.0)
    assert result["state"] == state, result
    assert result["code"] == code
    assert result["latency_ms"] is not None
    assert 0 <= result["latency_ms"] < 10_000
    if detail_part is None:
        assert result["detail"] is None
    else:
        assert detail_part in result["detail"]


def test_a_body_without_words_is_never_the_wording(peer: HttpPeer) -> None:
    """A 503 whose body is ``{}`` says its reason phrase, not the body."""
    result = probe_url(peer.url("/status/503-json"), deadline_s=10.0)
    assert (result["state"], result["code"]) == ("UNHEALTHY", 503)
    assert result["detail"] == "HTTP 503 Service Unavailable"


def test_a_503_whose_body_is_cut_short_is_unhealthy(peer: HttpPeer) -> None:
    """The status line already said the server is unhealthy; a body that then breaks off changes nothing."""
    result = probe_url(peer.url("/503-cut"), deadline_s=10.0)
    assert (result["state"], result["code"]) == ("UNHEALTHY", 503)
    assert result["detail"] == "response truncated (HTTP 503)"


def test_credentials_in_a_url_are_sent_as_basic_auth_and_never_shown(
    peer: HttpPeer, make_prober: Callable[..., EndpointProber]
) -> None:
    secret = quote(AUTH_PASSWORD, safe="")
    url = f"http://{AUTH_USER}:{secret}@127.0.0.1:{peer.http_port}/auth"
    assert probe_url(url, deadline_s=10.0)["state"] == "UP"
    assert probe_url(peer.url("/auth"), deadline_s=10.0)["code"] == 401  # the server does check them
    prober = make_prober(urls=[url], discover=False, interval_s=0.2)
    shown = f"http://***@127.0.0.1:{peer.http_port}/auth"
    wait_for(lambda: state_of(prober, shown) == "UP")
    everything = json.dumps([prober.samples(), prober.config()])
    for leak in (secret, AUTH_PASSWORD, "s3cr", AUTH_USER):
        assert leak not in everything
    assert health_redact_url("https://u:p@h:1/x?y=1") == "https://***@h:1/x?y=1"
    assert health_redact_url("http://h/a@b") == "http://h/a@b"  # an @ in the path is not userinfo


def test_connection_reset_is_error(peer: HttpPeer) -> None:
    result = probe_url(peer.url("/reset"), deadline_s=10.0)
    assert result["state"] == "ERROR"
    assert "reset" in result["detail"] or "closed" in result["detail"]


def test_connection_refused_is_down(closed_port: int) -> None:
    result = probe_url(f"http://127.0.0.1:{closed_port}/health", deadline_s=10.0)
    assert result == {
        "state": "DOWN",
        "code": None,
        "latency_ms": result["latency_ms"],
        "detail": "connection refused",
    }


@pytest.mark.parametrize(
    ("path", "detail_part", "code"),
    [
        ("/hang", "no response within 1.5s", None),
        ("/drip", "body incomplete", 200),
        ("/drip-headers", "headers incomplete", None),
    ],
)
def test_deadline_covers_silence_and_drip(
    peer: HttpPeer, path: str, detail_part: str, code: int | None
) -> None:
    deadline_s = 1.5
    started = time.monotonic()
    result = probe_url(peer.url(path), deadline_s=deadline_s)
    elapsed_s = time.monotonic() - started
    assert result["state"] == "TIMEOUT", result
    assert detail_part in result["detail"]
    assert result["code"] == code
    assert deadline_s * 0.9 <= elapsed_s < deadline_s + SLACK_S


def test_accepted_but_never_read_is_timeout(silent_port: int) -> None:
    started = time.monotonic()
    result = probe_url(f"http://127.0.0.1:{silent_port}/health", deadline_s=1.0)
    assert result["state"] == "TIMEOUT"
    assert time.monotonic() - started < 1.0 + SLACK_S


def test_self_signed_tls_is_error(peer: HttpPeer) -> None:
    result = probe_url(peer.tls_url("/health"), deadline_s=10.0)
    assert result["state"] == "ERROR"
    assert "certificate verify failed" in result["detail"]
    assert "self" in result["detail"].lower()  # "self-signed certificate" / "self signed certificate"


def test_trusted_tls_is_up(peer: HttpPeer, tls_files: tuple[Path, Path]) -> None:
    context = ssl.create_default_context(cafile=str(tls_files[0]))
    assert probe_url(peer.tls_url("/health"), deadline_s=10.0, ssl_context=context)["state"] == "UP"
    assert probe_url(peer.tls_url("/status/503"), deadline_s=10.0, ssl_context=context)["code"] == 503


def test_https_to_a_plain_port_is_error(peer: HttpPeer) -> None:
    result = probe_url(f"https://127.0.0.1:{peer.http_port}/health", deadline_s=10.0)
    assert result["state"] == "ERROR"
    assert result["detail"].startswith("TLS")


@pytest.mark.parametrize(
    ("url", "detail_part"),
    [
        ("ftp://127.0.0.1/health", "unsupported URL"),
        ("file:///etc/passwd", "unsupported URL"),
        ("127.0.0.1:30000/health", "unsupported URL"),
        ("", "bad URL"),
        ("http://", "bad URL: no host"),
        ("http://127.0.0.1:99999/health", "bad URL"),
        ("http://127.0.0.1:0/health", "bad URL"),
        ("http://127.0.0.1:8000/health\r\nX-Injected: 1", "bad URL"),
        ("http://127.0.0.1:8000/he alth", "bad URL"),
        ("http://no-such-host.invalid/health", "cannot resolve no-such-host.invalid"),
    ],
)
def test_bad_urls_are_errors(url: str, detail_part: str) -> None:
    result = probe_url(url, deadline_s=10.0)
    assert result["state"] == "ERROR"
    assert detail_part in result["detail"]
    assert_visible(result["detail"])


def test_hostile_body_excerpt_is_short_and_visible(peer: HttpPeer) -> None:
    result = probe_url(peer.url("/escapes"), deadline_s=10.0)
    assert result["state"] == "UNHEALTHY"
    assert result["code"] == 503
    detail = result["detail"]
    assert len(detail) <= 120
    assert_visible(detail)
    # The escapes are shown, not dropped: an operator can see what the server said.
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in detail
    assert "\\x9b" in detail
    assert "\\u202e" in detail
    assert "\\xff" in detail
    assert "[@click=app.quit]" in detail  # literal text; the UI renders it as Text, never markup
    assert HOSTILE_BODY  # the server really sent the hostile body (imported constant, same source)


def test_huge_body_is_capped(peer: HttpPeer) -> None:
    result = probe_url(peer.url("/big"), deadline_s=10.0, body_cap_bytes=4096)
    assert result["state"] == "UNHEALTHY"
    assert len(result["detail"]) <= 120
    assert result["detail"].endswith("…")


# ---------------------------------------------------------------------------------------------------------
# The prober


@pytest.fixture
def make_prober() -> Iterator[Callable[..., EndpointProber]]:
    probers: list[EndpointProber] = []

    def make(**kwargs: Any) -> EndpointProber:
        prober = EndpointProber(**kwargs)
        probers.append(prober)
        return prober

    yield make
    for prober in probers:
        prober.close()


def test_samples_have_the_model_shape(peer: HttpPeer, make_prober: Callable[..., EndpointProber]) -> None:
    url = peer.url("/status/200")
    prober = make_prober(urls=[url], discover=False, interval_s=0.2)
    wait_for(lambda: state_of(prober, url) == "UP")
    sample = prober.samples()[0]
    assert tuple(sample) == ENDPOINT_SAMPLE_FIELDS
    assert ENDPOINT_SAMPLE_FIELDS == record_fields(EndpointSample)
    assert EndpointSample.from_dict(sample).to_dict() == sample
    assert sample["code"] == 200
    assert sample["consecutive_failures"] == 0
    assert sample["discovered"] is False
    assert sample["last_ok"] == sample["checked_at"]
    assert sample["since"] is not None


def test_state_changes_are_tracked(peer: HttpPeer, make_prober: Callable[..., EndpointProber]) -> None:
    path = "/flip"
    url = peer.url(path)
    peer.set_mode(path, "200")
    try:
        prober = make_prober(urls=[url], discover=False, interval_s=0.1)
        up = wait_for(lambda: (s := sample_for(prober, url)) and s["state"] == "UP" and s)
        peer.set_mode(path, "503")
        down = wait_for(lambda: (s := sample_for(prober, url)) and s["consecutive_failures"] >= 2 and s)
        assert down["state"] == "UNHEALTHY"
        assert down["code"] == 503
        assert down["since"] > up["since"]
        assert down["last_ok"] is not None
        assert down["last_ok"] < down["since"]
        assert down["checked_at"] > down["since"]  # a second failure did not move "since"
        peer.set_mode(path, "200")
        again = wait_for(lambda: (s := sample_for(prober, url)) and s["state"] == "UP" and s)
        assert again["consecutive_failures"] == 0
        assert again["since"] > down["since"]
    finally:
        peer.set_mode(path, None)


def test_samples_never_wait_for_a_hanging_probe(
    peer: HttpPeer, make_prober: Callable[..., EndpointProber]
) -> None:
    """A snapshot stream calling samples() every 50 ms keeps its pace while the endpoint hangs."""
    url = peer.url("/hang")
    deadline_s = 3.0
    hits_before = len(peer.hits("/hang"))
    started = time.monotonic()
    started_wall = time.time()
    prober = make_prober(urls=[url], discover=False, interval_s=0.1, deadline_s=deadline_s)
    wait_for(lambda: len(peer.hits("/hang")) > hits_before)  # the probe is in flight now
    call_durations_s = []
    emitted_at = []
    while time.monotonic() - started < deadline_s - 0.5:
        before = time.monotonic()
        samples = prober.samples()
        call_durations_s.append(time.monotonic() - before)
        emitted_at.append(time.monotonic())
        assert samples[0]["state"] is None  # still in flight: no result yet
        time.sleep(0.05)
    assert len(emitted_at) >= 5
    assert max(call_durations_s) < 0.5
    assert max(b - a for a, b in zip(emitted_at, emitted_at[1:], strict=False)) < 1.0
    # One probe in flight per URL: the 0.1 s interval did not start more.
    assert len(peer.hits("/hang")) == hits_before + 1
    timed_out = wait_for(
        lambda: (s := sample_for(prober, url)) and s["state"] and s, timeout_s=deadline_s + 10
    )
    assert timed_out["state"] == "TIMEOUT"
    assert timed_out["checked_at"] - started_wall < deadline_s + SLACK_S
    assert deadline_s * 1000 * 0.9 <= timed_out["latency_ms"] < (deadline_s + SLACK_S) * 1000


def test_close_returns_promptly_while_a_probe_hangs(
    peer: HttpPeer, make_prober: Callable[..., EndpointProber]
) -> None:
    hits_before = len(peer.hits("/hang"))
    prober = make_prober(urls=[peer.url("/hang")], discover=False, deadline_s=20.0)
    wait_for(lambda: len(peer.hits("/hang")) > hits_before)
    started = time.monotonic()
    prober.close()
    assert time.monotonic() - started < 2.0


def test_generating_endpoint_probed_only_when_asked_and_at_most_every_10s(
    peer: HttpPeer, make_prober: Callable[..., EndpointProber]
) -> None:
    health = peer.url("/health")
    generate = peer.url("/health_generate")
    generate_before = len(peer.hits("/health_generate"))
    health_before = len(peer.hits("/health"))
    prober = make_prober(urls=[health, generate], discover=False, interval_s=0.2)
    wait_for(lambda: len(peer.hits("/health")) >= health_before + 4)
    assert len(peer.hits("/health_generate")) == generate_before
    assert sample_for(prober, generate)["detail"] == ENDPOINT_NOT_PROBED_GENERATE  # type: ignore[index]
    assert sample_for(prober, generate)["state"] is None  # type: ignore[index]

    result = prober.handle_command({"cmd": "health", "urls": [health, generate], "generate": True})
    assert result["config"]["generate"] is True
    asked_at = time.time()
    wait_for(lambda: state_of(prober, generate) == "UP")
    # Removing and re-adding the URL, or switching generate off and on, does not reset its rate limit.
    prober.configure(urls=[health])
    prober.configure(urls=[health, generate], generate=False)
    prober.configure(generate=True)
    time.sleep(ENDPOINT_GENERATE_MIN_INTERVAL_S + 1.5)
    hits = [t for t in peer.hits("/health_generate")[generate_before:] if t >= asked_at - 0.5]
    assert 1 <= len(hits) <= 2
    gaps = [b - a for a, b in zip(hits, hits[1:], strict=False)]
    assert all(gap >= ENDPOINT_GENERATE_MIN_INTERVAL_S - 0.2 for gap in gaps), gaps
    # The plain /health kept its own 0.2 s pace meanwhile.
    assert len(peer.hits("/health")) >= health_before + 10


def test_configure_adds_removes_and_validates(
    peer: HttpPeer, make_prober: Callable[..., EndpointProber]
) -> None:
    first, second = peer.url("/status/200"), peer.url("/status/503")
    prober = make_prober(urls=[first], discover=False, interval_s=0.2)
    prober.configure(urls=[second, first, second])
    assert [s["url"] for s in prober.samples()] == [second, first]
    wait_for(lambda: state_of(prober, second) == "UNHEALTHY")
    prober.configure(urls=[first])
    assert [s["url"] for s in prober.samples()] == [first]
    for bad in (
        {"urls": "http://x/"},
        {"urls": [1]},
        {"generate": "yes"},
        {"interval_s": 0},
        {"deadline_s": -1},
        {"deadline_s": True},
    ):
        with pytest.raises(ValueError, match=r"^[^\n]+$"):
            prober.handle_command({"cmd": "health", **bad})
    assert [s["url"] for s in prober.samples()] == [first]  # nothing changed by the bad commands
    unsupported = prober.handle_command({"cmd": "health", "urls": ["ftp://127.0.0.1/"]})
    assert unsupported["config"]["urls"] == ["ftp://127.0.0.1/"]
    wait_for(lambda: state_of(prober, "ftp://127.0.0.1/") == "ERROR")
    assert sample_for(prober, "ftp://127.0.0.1/")["detail"].startswith("unsupported URL")  # type: ignore[index]


# ---------------------------------------------------------------------------------------------------------
# Discovery


@pytest.mark.parametrize(
    ("argv", "url"),
    [
        (["python3", "-m", "sglang.launch_server", "--model-path", "m"], "http://127.0.0.1:30000/health"),
        (
            ["/usr/bin/python3.10", "-u", "-m", "sglang.launch_server", "--port", "31234"],
            "http://127.0.0.1:31234/health",
        ),
        (
            ["python", "-msglang.launch_server", "--port=31235", "--host", "0.0.0.0"],
            "http://127.0.0.1:31235/health",
        ),
        (["python", "-m", "sglang.launch_server", "--host=::", "--port", "1"], "http://127.0.0.1:1/health"),
        (["python", "-m", "sglang.launch_server", "--host", "::1"], "http://[::1]:30000/health"),
        (
            ["python", "-m", "sglang.launch_server", "--host", "10.1.230.174"],
            "http://10.1.230.174:30000/health",
        ),
        (
            ["python", "-m", "sglang.launch_server", "--host", "gpu-node.example"],
            "http://gpu-node.example:30000/health",
        ),
        (["python", "-m", "sglang.launch_server", "--port", "1", "--port", "2"], "http://127.0.0.1:2/health"),
        (
            ["python", "/opt/sglang/python/sglang/launch_server.py", "--port", "7"],
            "http://127.0.0.1:7/health",
        ),
        (
            ["/venv/bin/sglang", "serve", "--model-path", "m", "--port", "30001"],
            "http://127.0.0.1:30001/health",
        ),
        (
            ["/venv/bin/python3", "/venv/bin/sglang", "serve", "--port", "30002"],
            "http://127.0.0.1:30002/health",
        ),
        (["vllm", "serve", "meta/llama"], "http://127.0.0.1:8000/health"),
        (
            ["/venv/bin/python", "/venv/bin/vllm", "serve", "m", "--port=8100", "--host", "localhost"],
            "http://127.0.0.1:8100/health",
        ),
        (
            ["python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8001"],
            "http://127.0.0.1:8001/health",
        ),
        (["python -m sglang.launch_server --port 30003"], "http://127.0.0.1:30003/health"),
        # Not launchers, or not a port / host one could probe:
        (["python", "-m", "sglang.launch_server", "--port", "abc"], None),
        (["python", "-m", "sglang.launch_server", "--port=70000"], None),
        (["python", "-m", "sglang.launch_server", "--port", "0"], None),
        (["python", "-m", "sglang.launch_server", "--port", "-1"], None),
        (["python", "-m", "sglang.launch_server", "--port"], None),
        (["python", "-m", "sglang.launch_server", "--host", "evil/x@y#"], None),
        (["python", "-m", "sglang.launch_server", "--host", "a b"], None),
        (["pgrep", "-f", "sglang.launch_server"], None),
        (["python3", "-c", "import time", "-m", "sglang.launch_server"], None),
        (["vim", "sglang/launch_server.py"], None),
        (["vllm", "bench", "--port", "1"], None),
        (["python", "-m", "sglang.launch_server_other"], None),
        ([], None),
    ],
)
def test_launcher_urls(argv: list[str], url: str | None) -> None:
    assert health_launcher_url(argv) == url


def test_discover_dedupes_and_tolerates_junk() -> None:
    processes: list[Any] = [
        {"pid": 1, "cmdline": ["python", "-m", "sglang.launch_server", "--port", "30000"]},
        {"pid": 2, "cmdline": ["python", "-m", "sglang.launch_server"]},  # a forked child: same URL
        {"pid": 3, "cmdline": []},
        {"pid": 4},
        {"pid": 5, "cmdline": "python -m sglang.launch_server"},  # not an argv list
        {"pid": 6, "cmdline": ["vllm", "serve", "m"]},
    ]
    assert discover_health_urls(processes) == [
        "http://127.0.0.1:30000/health",
        "http://127.0.0.1:8000/health",
    ]


FAKE_LAUNCHER = """
import argparse, http.server
parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=30000)
parser.add_argument("--host")
args, _ = parser.parse_known_args()

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
"""


@pytest.fixture
def launchers(tmp_path: Path) -> Iterator[Callable[[list[str]], subprocess.Popen[bytes]]]:
    """Starts fake launchers: real processes with a launcher's command line that serve /health."""
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(FAKE_LAUNCHER)
    (tmp_path / "vllm").write_text(FAKE_LAUNCHER)
    started: list[subprocess.Popen[bytes]] = []

    def start(args: list[str]) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, *args], cwd=tmp_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait(10)


def read_cmdline(pid: int) -> list[str]:
    """The argv of a just-started process, as /proc shows it once its exec is complete (empty before)."""

    def read() -> list[str]:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [part.decode() for part in raw.split(b"\0") if part]

    return wait_for(lambda: len(read()) > 2 and read())


def test_discovery_from_a_real_sglang_launcher(
    launchers: Callable[[list[str]], subprocess.Popen[bytes]], make_prober: Callable[..., EndpointProber]
) -> None:
    port = free_port()
    process = launchers(["-m", "sglang.launch_server", "--host", "0.0.0.0", "--port", str(port)])
    url = f"http://127.0.0.1:{port}/health"
    argv = read_cmdline(process.pid)
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert url in discover_health_urls(health_read_proc_cmdlines())
    assert any(p["pid"] == process.pid and p["cmdline"] == argv for p in health_read_proc_cmdlines())

    prober = make_prober(discover=True, interval_s=0.2, discovered_linger_s=60.0)
    prober.update_discovered([{"pid": process.pid, "cmdline": argv, "name": "python3"}])
    up = wait_for(lambda: (s := sample_for(prober, url)) and s["state"] == "UP" and s)
    assert up["discovered"] is True
    assert prober.config()["discovered_urls"] == [url]

    # The agent's usual call: no list, the prober scans /proc on its own thread; the caller does not wait.
    background = make_prober(discover=True, interval_s=0.2)
    before = time.monotonic()
    background.update_discovered()
    assert time.monotonic() - before < 0.5
    assert wait_for(lambda: (s := sample_for(background, url)) and s["state"] == "UP" and s)["discovered"]

    # The server is killed: its endpoint lingers and shows DOWN instead of silently vanishing.
    process.kill()
    process.wait(10)
    prober.update_discovered([])
    wait_for(lambda: state_of(prober, url) == "DOWN")
    assert sample_for(prober, url)["last_ok"] == up["last_ok"]  # type: ignore[index]


def test_discovery_from_a_real_vllm_script_and_linger_expiry(
    launchers: Callable[[list[str]], subprocess.Popen[bytes]], make_prober: Callable[..., EndpointProber]
) -> None:
    port = free_port()
    process = launchers(["vllm", "serve", "some/model", f"--port={port}"])
    url = f"http://127.0.0.1:{port}/health"
    processes = [{"pid": process.pid, "cmdline": read_cmdline(process.pid)}]
    prober = make_prober(discover=True, interval_s=0.2, discovered_linger_s=0.0)
    prober.update_discovered(processes)
    wait_for(lambda: state_of(prober, url) == "UP")
    time.sleep(0.05)
    prober.update_discovered([])  # launcher gone and no linger: the endpoint is dropped
    assert sample_for(prober, url) is None


def test_discovery_probes_only_this_hosts_own_addresses(
    peer: HttpPeer, make_prober: Callable[..., EndpointProber]
) -> None:
    """Any user's process can claim to be a launcher listening anywhere: only this host's addresses are
    probed. Elsewhere, the launcher is listed as found but not probed (no connection, no name lookup)."""

    def launcher(host: str) -> dict[str, Any]:
        argv = ["python", "-m", "sglang.launch_server", "--host", host, "--port", str(peer.http_port)]
        return {"pid": 1, "cmdline": argv}

    local = f"http://127.0.0.1:{peer.http_port}/health"
    elsewhere = f"http://192.0.2.10:{peer.http_port}/health"  # TEST-NET-1: nobody's address
    named = f"http://gpu-node.example:{peer.http_port}/health"
    prober = make_prober(discover=True, interval_s=0.2)
    prober.update_discovered([launcher("0.0.0.0"), launcher("192.0.2.10"), launcher("gpu-node.example")])
    wait_for(lambda: state_of(prober, local) == "UP")
    time.sleep(1.0)  # five probe intervals: the others would have been tried by now
    for url, host in ((elsewhere, "192.0.2.10"), (named, "gpu-node.example")):
        sample = sample_for(prober, url)
        assert sample is not None
        assert sample["discovered"] is True
        assert sample["state"] is None
        assert sample["detail"] == (
            f"not probed: found on {host}, not an address of this host (add it with --health)"
        )
    # Configured, the same URL is probed: the operator asked for it.
    prober.configure(urls=[elsewhere], deadline_s=0.5)
    wait_for(lambda: state_of(prober, elsewhere) in ("TIMEOUT", "ERROR"))


def test_this_hosts_own_addresses_come_from_proc(tmp_path: Path) -> None:
    assert "127.0.0.1" in health_local_addresses()
    (tmp_path / "fib_trie").write_text(
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n"
        "     +-- 10.1.2.0/24 2 0 2\n        |-- 10.1.2.0\n           /24 link UNICAST\n"
        "        |-- 10.1.2.7\n           /32 host LOCAL\n        |-- 10.1.2.255\n"
        "           /32 link BROADCAST\n"
    )
    (tmp_path / "if_inet6").write_text(
        "00000000000000000000000000000001 01 80 10 80       lo\n"
        "fe800000000000000000000000000abc 02 40 20 80     eth0\n"
    )
    addresses = health_local_addresses(str(tmp_path))
    assert addresses == {"10.1.2.7", "::1", "fe80::abc"}
    assert health_is_local_url("http://10.1.2.7:1/health", addresses)
    assert health_is_local_url("http://[::ffff:10.1.2.7]:1/health", addresses)
    assert health_is_local_url("http://127.0.0.5:1/health", set())
    assert health_is_local_url("http://Node-7:1/health", set(), hostname="node-7.cluster")
    assert not health_is_local_url("http://10.1.2.8:1/health", addresses)
    assert not health_is_local_url("http://node-8:1/health", addresses, hostname="node-7")


def test_configured_url_wins_over_discovery_and_discovery_can_be_disabled(
    make_prober: Callable[..., EndpointProber],
) -> None:
    launcher = [{"pid": 1, "cmdline": ["python", "-m", "sglang.launch_server", "--port", "1"]}]
    url = "http://127.0.0.1:1/health"
    prober = make_prober(urls=[url], discover=True, interval_s=60.0)
    prober.update_discovered(launcher)
    assert [(s["url"], s["discovered"]) for s in prober.samples()] == [(url, False)]

    quiet = make_prober(discover=False)
    quiet.update_discovered(launcher)
    assert quiet.samples() == []
    quiet.configure(discover=True)
    quiet.update_discovered(launcher)
    assert [s["discovered"] for s in quiet.samples()] == [True]
    quiet.configure(discover=False)
    assert quiet.samples() == []


def test_no_thread_without_urls() -> None:
    before = {t.name for t in threading.enumerate()}
    prober = EndpointProber(discover=True)
    prober.update_discovered([{"pid": 1, "cmdline": ["bash"]}])
    assert prober.samples() == []
    assert "gputui-health" not in {t.name for t in threading.enumerate()} - before
    prober.close()


def test_a_launcher_that_exits_between_scans_has_no_age_at_the_next_sample() -> None:
    """Discovery runs at the process-list rate; a sample made after the launcher exited (a zombie not yet
    reaped, then gone) must not carry the age it had, whatever the last scan saw."""
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        prober = EndpointProber(discover=True, interval_s=60.0)
        argv = ["python3", "-m", "sglang.launch_server", "--port", "1"]
        prober.update_discovered([{"pid": launcher.pid, "cmdline": argv}])
        (sample,) = prober.samples()
        assert sample["launcher_pid"] == launcher.pid
        assert sample["launcher_age_s"] is not None
        assert 0 <= sample["launcher_age_s"] < 60
        launcher.kill()
        wait_for(lambda: state_of_pid(launcher.pid) == "Z")
        (sample,) = prober.samples()
        assert (sample["launcher_pid"], sample["launcher_age_s"]) == (None, None)
        launcher.wait()
        (sample,) = prober.samples()
        assert (sample["launcher_pid"], sample["launcher_age_s"]) == (None, None)
        prober.close()
    finally:
        launcher.kill()
        launcher.wait()


def test_a_dead_launchers_endpoint_reads_down_at_once_not_its_last_probe(peer: HttpPeer) -> None:
    """The launcher's /health answered 503 while its workers were being killed; the launcher is gone: the
    endpoint is DOWN from the sample that sees it gone, without waiting for the next probe (a minute away
    here), and stays so after discovery drops the launcher."""
    peer.set_mode("/health", "503-json")  # the peer is shared: its mode is put back at the end
    port = peer.url("/health").split(":")[2].split("/")[0]
    hits_before = len(peer.hits("/health"))
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    prober = EndpointProber(discover=True, interval_s=60.0)
    try:
        argv = ["python3", "-m", "sglang.launch_server", "--port", port]
        prober.update_discovered([{"pid": launcher.pid, "cmdline": argv}])
        wait_for(lambda: prober.samples()[0]["state"] == "UNHEALTHY")
        (sample,) = prober.samples()
        assert sample["detail"] == "HTTP 503 Service Unavailable"  # its body, {}, says nothing
        launcher.kill()
        launcher.wait()
        (sample,) = prober.samples()
        assert (sample["state"], sample["detail"]) == ("DOWN", f"its launcher (pid {launcher.pid}) is gone")
        prober.update_discovered([])  # the next scan no longer finds it
        (sample,) = prober.samples()
        assert (sample["state"], sample["detail"]) == ("DOWN", f"its launcher (pid {launcher.pid}) is gone")
        assert len(peer.hits("/health")) - hits_before == 1  # no probe was needed to say it
    finally:
        prober.close()
        launcher.kill()
        launcher.wait()
        peer.set_mode("/health", None)


def test_proc_scan_survives_missing_proc() -> None:
    assert health_read_proc_cmdlines("/nonexistent-proc-root") == []
    assert os.getpid() in {p["pid"] for p in health_read_proc_cmdlines()}


# ---------------------------------------------------------------------------------------------------------
# Wired into the agent: snapshots, commands, command line


def _health_of(snapshot: dict[str, Any], url: str) -> dict[str, Any] | None:
    for sample in snapshot["health"]:
        if sample["url"] == url:
            return sample
    return None


def _next_with(agent: Any, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snapshot = agent.next_snapshot()
        if predicate(snapshot):
            return snapshot
    raise AssertionError(f"no matching snapshot within {timeout_s}s")


def test_agent_streams_health_and_takes_it_from_configure_and_health_commands(
    peer: HttpPeer, fake_nvml: FakeNvml
) -> None:
    """The remote form as SSH runs it: --health on the command line, configure as the SSH link sends it."""
    up, unhealthy, hang = peer.url("/health"), peer.url("/status/503"), peer.url("/hang")
    with agent_process("--health", up, "--interval", "0.2", "--no-discover", env=fake_nvml.env()) as agent:
        first = _next_with(agent, lambda s: (_health_of(s, up) or {}).get("state") == "UP")
        assert len(first["gpus"]) == 8
        assert HostSnapshot.from_dict(first).endpoints[0].code == 200

        # What SshLink sends right after the hello.
        reply = agent.send({"cmd": "configure", "health_urls": [unhealthy, hang], "discover_health": False})
        assert reply["ok"], reply
        # The hanging probe (30 s deadline) never holds up the stream or the other endpoint.
        streamed = [_next_with(agent, lambda s: (_health_of(s, unhealthy) or {}).get("state") == "UNHEALTHY")]
        streamed += [agent.next_snapshot() for _ in range(4)]
        for snapshot in streamed:
            assert [h["url"] for h in snapshot["health"]] == [unhealthy, hang]
            assert _health_of(snapshot, hang)["state"] is None  # type: ignore[index]
        assert agent.sample()["health"][0]["code"] == 503  # the "sample" reply carries it too

        result = agent.result({"cmd": "health", "urls": [up], "interval_s": 0.2})
        assert result["config"]["urls"] == [up]
        assert result["config"]["discover"] is False
        for bad in (
            {"cmd": "health", "urls": "http://x/"},
            {"cmd": "health", "interval_s": 0},
            {"cmd": "configure", "health_urls": [7]},
            {"cmd": "configure", "discover_health": "yes", "memory_interval_s": 5},
        ):
            reply = agent.send(bad)
            assert reply["ok"] is False, bad
            assert reply["error"]
            assert "\n" not in reply["error"]
        # Nothing of the refused commands took effect (not even the valid interval of the last one).
        assert agent.result({"cmd": "health"})["config"]["urls"] == [up]
        streamed = _next_with(agent, lambda s: (_health_of(s, up) or {}).get("state") == "UP")
        assert [h["url"] for h in streamed["health"]] == [up]


def test_shipped_agent_on_python38_streams_health(peer: HttpPeer) -> None:
    """The whole remote form on Python 3.8 (no psutil there, NVML off): health still flows."""
    url = peer.url("/status/503")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE")}
    env["PATH"] = "/nonexistent"  # no nvidia-smi either
    args = ("--health", url, "--interval", "0.2", "--no-discover", "--no-pynvml", "--no-psutil")
    with agent_process(*args, python=python38(), env=env) as agent:
        assert agent.hello["python"].startswith("3.8.")
        snapshot = _next_with(agent, lambda s: (_health_of(s, url) or {}).get("state") is not None)
    assert _health_of(snapshot, url)["state"] == "UNHEALTHY"  # type: ignore[index]
    assert _health_of(snapshot, url)["code"] == 503  # type: ignore[index]


def test_bad_health_settings_are_error_rows_and_the_gpus_still_show(fake_nvml: FakeNvml) -> None:
    """A URL over 2048 characters, and 33 URLs: before, the collector refused to start and hid the host."""
    long_url = "http://127.0.0.1:9/" + "a" * 3000
    many = [f"http://127.0.0.1:{i + 1}/" for i in range(33)]
    args = ["--health", long_url] + [arg for url in many for arg in ("--health", url)]
    with agent_process("--interval", "0.2", "--no-discover", *args, env=fake_nvml.env()) as agent:
        assert agent.hello["error"] is None
        snapshot = _next_with(agent, lambda s: (s["health"][0] or {}).get("state") == "ERROR")
        assert len(snapshot["gpus"]) == 8
        rows = snapshot["health"]
        assert len(rows) == 33  # the long one and 31 more probed, one row for the two left over
        assert rows[0]["detail"] == "bad URL: over 2048 characters"
        assert len(rows[0]["url"]) <= 200  # the line stays small: the URL is shown cut
        assert rows[-1]["url"] == many[31]
        assert rows[-1]["state"] == "ERROR"
        assert rows[-1]["detail"] == "not probed: at most 32 health URLs; this one and 1 more are ignored"
        # The same through configure, as the SSH link sends URLs: accepted, shown, never a refusal.
        reply = agent.send({"cmd": "configure", "health_urls": [long_url], "discover_health": False})
        assert reply["ok"], reply
        assert agent.sample()["health"][0]["url"].startswith("http://127.0.0.1:9/aaa")


def test_agent_discovers_a_launcher_without_being_told(
    launchers: Callable[[list[str]], subprocess.Popen[bytes]], fake_nvml: FakeNvml
) -> None:
    port = free_port()
    process = launchers(["-m", "sglang.launch_server", "--port", str(port)])
    read_cmdline(process.pid)
    url = f"http://127.0.0.1:{port}/health"
    with agent_process("--interval", "0.2", "--process-interval", "0.2", env=fake_nvml.env()) as agent:
        found = _next_with(agent, lambda s: (_health_of(s, url) or {}).get("state") == "UP")
        assert _health_of(found, url)["discovered"] is True  # type: ignore[index]
    with agent_process("--interval", "0.2", "--no-discover", env=fake_nvml.env()) as agent:
        agent.sample()
        assert all(_health_of(agent.next_snapshot(), url) is None for _ in range(5))


# ---------------------------------------------------------------------------------------------------------
# gputui snapshot


def run_snapshot_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as state:  # no calibration recorded by whoever runs the tests
        return subprocess.run(
            [sys.executable, "-m", "gputui.cli", "snapshot", "--no-discover", *args],
            cwd=REPO,
            env=dict(env, XDG_STATE_HOME=state),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def test_cli_snapshot_json_shows_up_and_unhealthy_from_a_real_server(
    peer: HttpPeer, fake_nvml: FakeNvml
) -> None:
    up, unhealthy = peer.url("/health"), peer.url("/status/503")
    done = run_snapshot_cli("--json", "--health", up, "--health", unhealthy, env=fake_nvml.env())
    assert done.returncode == 0, done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    assert len(host["gpus"]) == 8
    by_url = {h["url"]: h for h in host["health"]}
    assert list(by_url) == [up, unhealthy]
    assert (by_url[up]["state"], by_url[up]["code"], by_url[up]["detail"]) == ("UP", 200, None)
    assert (by_url[unhealthy]["state"], by_url[unhealthy]["code"]) == ("UNHEALTHY", 503)
    assert by_url[unhealthy]["detail"].startswith("HTTP 503")
    for sample in by_url.values():
        assert sample["since"] is not None
        assert sample["latency_ms"] is not None
        assert sample["discovered"] is False


@pytest.mark.parametrize("command", ["snapshot", "check"])
def test_cli_discovers_launchers_like_the_tui_and_no_discover_turns_it_off(
    launchers: Callable[[list[str]], subprocess.Popen[bytes]], fake_nvml: FakeNvml, command: str
) -> None:
    """Before, discovery ran on the agent's own thread after the one sample these commands take: a wedged
    host's snapshot showed no health, and ``check --json`` had ``"health": []``."""
    port = free_port()
    process = launchers(["-m", "sglang.launch_server", "--port", str(port)])
    read_cmdline(process.pid)
    url = f"http://127.0.0.1:{port}/health"

    def health(*extra: str) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory() as state:
            done = subprocess.run(
                [sys.executable, "-m", "gputui.cli", command, "--json", *extra],
                cwd=REPO,
                env=dict(fake_nvml.env(), XDG_STATE_HOME=state),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)["hosts"][0]["health"]

    found = [h for h in health() if h["url"] == url]
    assert [(h["state"], h["discovered"]) for h in found] == [("UP", True)]
    assert all(h["url"] != url for h in health("--no-discover"))


def test_the_tui_takes_no_discover_to_its_collector() -> None:
    from gputui.commands.grammar.parser import build_parser
    from gputui.commands.inputs.targets import open_link, options_from_args
    from gputui.transports.local import LocalLink

    options = options_from_args(build_parser(None).parse_args(["--no-discover"]))
    link = open_link("local", options)
    assert isinstance(link, LocalLink)
    link.open()
    try:
        assert link.agent.discover_health is False
        assert link.request({"cmd": "health"}, 10.0)["config"]["discover"] is False
    finally:
        link.close()


def test_cli_probes_a_generating_endpoint_only_with_health_generate(
    peer: HttpPeer, fake_nvml: FakeNvml
) -> None:
    generate = peer.url("/health_generate")
    asked = run_snapshot_cli("--json", "--health", generate, "--health-generate", env=fake_nvml.env())
    assert asked.returncode == 0, asked.stderr
    (host,) = json.loads(asked.stdout)["hosts"]
    assert [(h["url"], h["state"], h["code"]) for h in host["health"]] == [(generate, "UP", 200)]

    # Without the flag the endpoint is listed but never requested: the monitor does not make the server
    # generate tokens unless told to.
    not_asked = run_snapshot_cli("--json", "--health", generate, env=fake_nvml.env())
    assert not_asked.returncode == 0, not_asked.stderr
    (host,) = json.loads(not_asked.stdout)["hosts"]
    assert [(h["url"], h["state"]) for h in host["health"]] == [(generate, None)]


def test_cli_takes_health_urls_for_this_host_from_the_config_file(
    peer: HttpPeer, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    up, elsewhere = peer.url("/health"), peer.url("/status/503")
    config = tmp_path / "config.toml"
    config.write_text(
        f'[hosts."local"]\nhealth = ["{up}"]\n[hosts."gpu-node-99"]\nhealth = ["{elsewhere}"]\n'
    )
    done = run_snapshot_cli("--json", "--config", str(config), env=fake_nvml.env())
    assert done.returncode == 0, done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    assert [(h["url"], h["state"]) for h in host["health"]] == [(up, "UP")]


def test_cli_snapshot_table_prints_one_health_line_per_endpoint(peer: HttpPeer, fake_nvml: FakeNvml) -> None:
    up, unhealthy = peer.url("/health"), peer.url("/status/503")
    before = time.time()
    done = run_snapshot_cli("--health", up, "--health", unhealthy, env=fake_nvml.env())
    after = time.time()
    assert done.returncode == 0, done.stderr
    during = {time.strftime("%H:%M:%S", time.localtime(t)) for t in range(int(before), int(after) + 2)}
    lines = done.stdout.splitlines()
    start = lines.index("HEALTH")
    up_line, unhealthy_line = lines[start + 1 : start + 3]
    assert up_line.split()[:3] == [up, "UP", "200"]
    assert unhealthy_line.split()[:3] == [unhealthy, "UNHEALTHY", "503"]
    for line in (up_line, unhealthy_line):
        words = line.split()
        assert words[4] == "ms"
        assert float(words[3]) >= 0
        assert words[5] == "since"
        # The state began during this command: the local clock time of one of its seconds.
        assert words[6] in during
    assert "HTTP 503" in unhealthy_line  # the detail of a failure follows
    assert lines[start + 3] in ("GPU FITNESS", "CLEAN SLATE")  # two endpoints, two lines, then the next block


def test_health_line_is_safe_and_shows_missing_values_as_a_dash() -> None:
    hostile = EndpointSample(url="http://127.0.0.1:1/\x1b[2J\u202e[bold]x", detail="\x1b]0;t\x07 boom")
    line = format_health_line(hostile)
    assert_visible(line)
    assert "\\x1b[2J\\u202e[bold]x" in line
    assert line.split()[1:5] == ["–", "–", "–", "since"]
    assert line.endswith("since –  \\x1b]0;t\\x07 boom")
    stamp = time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, -1))
    up = EndpointSample(url="http://h/health", state="UP", code=200, latency_ms=12.4, since=stamp, detail="x")
    assert format_health_line(up).split() == ["http://h/health", "UP", "200", "12", "ms", "since", "03:04:05"]


# ---------------------------------------------------------------------------------------------------------
# Through SSH: the probe runs on the remote side


def test_health_probed_on_the_remote_side_through_ssh(
    peer: HttpPeer, sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    """The sshd runs on this machine, so its sessions reach the server on 127.0.0.1."""
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    url = peer.url("/health")
    options = LinkOptions(
        memory_interval_s=0.3,
        process_interval_s=0.3,
        connect_timeout_s=10.0,
        health_urls=(url,),
        discover_health=False,
    )
    link = SshLink("host-a", options)
    link.open()
    try:
        assert link.mode == "nvml"
        deadline = time.monotonic() + 30.0
        health: tuple[EndpointSample, ...] = ()
        while time.monotonic() < deadline:
            snapshot = link.next_snapshot(1.0)
            if snapshot is not None and snapshot.endpoints and snapshot.endpoints[0].state is not None:
                health = snapshot.endpoints
                break
        assert [(h.url, h.state, h.code, h.discovered) for h in health] == [(url, "UP", 200, False)]
        assert link.request({"cmd": "health"}, 30.0)["config"]["urls"] == [url]
    finally:
        link.close()


def test_credentials_travel_as_data_and_are_never_printed_over_ssh(
    peer: HttpPeer, sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    secret = quote(AUTH_PASSWORD, safe="")
    url = f"http://{AUTH_USER}:{secret}@127.0.0.1:{peer.http_port}/auth"
    with tempfile.TemporaryDirectory() as state:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gputui.cli",
                "snapshot",
                "--json",
                "--no-discover",
                "--health",
                url,
                "host-a",
            ],
            cwd=REPO,
            env=dict(os.environ, XDG_STATE_HOME=state),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    assert [(h["url"], h["state"]) for h in host["health"]] == [
        (f"http://***@127.0.0.1:{peer.http_port}/auth", "UP")
    ]
    for leak in (secret, "s3cr"):
        assert leak not in done.stdout + done.stderr
        assert leak not in server.log()  # nor in the command line sshd ran


TUI_TLS_LATER = r"""
import json, sys
from gputui.commands.grammar.parser import build_parser
from gputui.commands.tui import build_app

args = build_parser(None).parse_args([])
args.config = None
build_app(args)  # the local TUI, as `gputui` builds it: Textual and asyncio imported
maps = open("/proc/self/maps").read()
at_start = {"ssl": "ssl" in sys.modules and sys.modules["ssl"] is not None, "libcrypto": "libcrypto" in maps}
import asyncio

asyncio.run(asyncio.sleep(0))  # the event loop runs without asyncio's TLS transports
from gputui.agent.servers.probe import probe_url
print(json.dumps({"at_start": at_start, "probe": probe_url(sys.argv[1], deadline_s=10.0)}))
"""


def test_the_tui_maps_no_tls_library_until_an_https_probe_needs_one(peer: HttpPeer) -> None:
    """asyncio's own ``import ssl`` (libssl and libcrypto, ~4 MiB resident) is kept out of the TUI's start;
    an https probe later in the same process still loads ``ssl`` and makes a real TLS handshake. (The
    child's home and XDG directories are the suite's temporary ones: ``tests/homeguard.py``.)"""
    done = subprocess.run(
        [sys.executable, "-c", TUI_TLS_LATER, peer.tls_url("/health")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["at_start"] == {"ssl": False, "libcrypto": False}
    assert result["probe"]["state"] == "ERROR"
    assert "certificate verify failed" in result["probe"]["detail"]  # the handshake really happened
