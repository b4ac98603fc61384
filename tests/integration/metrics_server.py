"""A fake inference server on loopback, run in a subprocess: vLLM's or sglang's ``/metrics`` and ``/health``.

The metrics are rendered by ``prometheus_client``'s own exposition (what both engines use), from the
metric names and labels the engines document, with their histogram bulk (about 50 KB per body). Nothing
here is tuned to gputui's parser.

Run as a module (``python -m tests.integration.metrics_server``) it listens on a free loopback port,
prints ``{"port": N}`` and obeys JSON-line commands on stdin, one JSON line answered for each:

* ``{"cmd": "set", ...}``: change any of the server's figures or behaviours (keys of ``_DEFAULTS``):
  ``engine`` (``vllm``, ``vllm-old``: the older ``gpu_cache_usage_perc`` name, ``sglang``), ``engines``
  (data-parallel engines), ``ranks`` (sglang: tensor-parallel ranks that all report, as with
  ``--enable-metrics-for-all-schedulers``), ``running``, ``waiting``, ``kv_cache_usage``,
  ``tokens_per_scrape`` (each engine's counter grows this much at every ``/metrics`` request: 0 is a
  stall), ``throughput`` (sglang's ``gen_throughput`` gauge), ``health`` and ``metrics`` (behaviours below).
* ``{"cmd": "reset_counters"}``: the counters start again from zero (a restarted server).
* ``{"cmd": "listen", "on": false}``: stop listening (connections are refused); ``true`` listens again on
  the same port.
* ``{"cmd": "state"}``: the current figures, the counters and the request counts per path.
* ``{"cmd": "quit"}``.

``health`` behaviours: an HTTP status (``"200"``, ``"503"``, ``"404"``), ``hang`` (read the request, never
answer). ``metrics`` behaviours: ``ok``; an HTTP status (``"404"``: the endpoint vanished); ``hang``;
``drip`` (a 200 whose body comes 100 bytes every 0.1 s); ``huge`` (the real body after 2 MiB of other
histogram lines); ``malformed`` (the running-requests line broken); ``garbage`` (an HTML error page);
``nan`` (KV usage NaN); ``duplicate`` (the running-requests series twice); ``no_counter`` (the generated-token
counter missing).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from tests.integration.httpserver import QuietHandler, QuietServer
from tests.integration.jsonlines import JsonLinesChild, serve_commands

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
HUGE_BYTES = 2 << 20

_DEFAULTS: dict[str, Any] = {
    "engine": "vllm",
    "engines": 1,
    "ranks": 1,
    "running": 0,
    "waiting": 0,
    "kv_cache_usage": 0.0,
    "tokens_per_scrape": 0,
    "throughput": 0.0,
    "health": "200",
    "metrics": "ok",
}

# Bucket bounds as the engines define them (vLLM's latency and token-count buckets, sglang's latencies).
_LATENCY_S = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
_TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000]
_VLLM_HISTOGRAMS = [
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _LATENCY_S),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _LATENCY_S),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", _LATENCY_S),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", _LATENCY_S),
    (
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        _LATENCY_S,
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        _LATENCY_S,
    ),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", _LATENCY_S),
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKENS),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKENS),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", _TOKENS),
    (
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        _TOKENS,
    ),
    ("vllm:request_params_n", "Histogram of the n request parameter.", [1, 2, 5, 10, 20]),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", _TOKENS),
]
# sglang's finer latency buckets.
_SGLANG_LATENCY_S = sorted(
    {
        *_LATENCY_S,
        0.15,
        0.2,
        0.3,
        0.4,
        0.6,
        0.7,
        0.8,
        0.9,
        1.5,
        2.0,
        3.0,
        4.0,
        6.0,
        8.0,
        15.0,
        30.0,
        60.0,
        120.0,
        300.0,
        600.0,
        1200.0,
    }
)
# The API server's own instrumentation (prometheus-fastapi-instrumentator) and the Python runtime: the
# bulk every body carries beside the engine's figures.
_HANDLERS = ["/v1/completions", "/v1/chat/completions", "/health"]
_HTTP_S = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    7.5,
    10.0,
    30.0,
    60.0,
]
_SGLANG_HISTOGRAMS = [
    ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _SGLANG_LATENCY_S),
    ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _SGLANG_LATENCY_S),
    (
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        _SGLANG_LATENCY_S,
    ),
    ("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", _SGLANG_LATENCY_S),
    ("sglang:per_stage_req_latency_seconds", "The latency of each stage of requests.", _SGLANG_LATENCY_S),
    ("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", _TOKENS),
    ("sglang:generation_tokens_histogram", "Histogram of generation token length.", _TOKENS),
]

_lock = threading.Lock()
_settings: dict[str, Any] = dict(_DEFAULTS)
_tokens: list[float] = []
"""The generated-token counter of each engine."""
_requests: dict[str, int] = {}
_stop = threading.Event()


def _histogram(name: str, doc: str, bounds: list[float], labels: dict[str, str], count: int) -> Metric:
    family = HistogramMetricFamily(name, doc, labels=list(labels))
    cumulative = [(repr(float(b)), float(count * (i + 1) // (len(bounds) + 1))) for i, b in enumerate(bounds)]
    family.add_metric(list(labels.values()), [*cumulative, ("+Inf", float(count))], sum_value=count * 0.37)
    return family


def _runtime_families(requests: int) -> Iterator[Metric]:
    for generation in range(3):
        gc = CounterMetricFamily(
            "python_gc_objects_collected", "Objects collected during gc", labels=["generation"]
        )
        gc.add_metric([str(generation)], float(1000 * (generation + 1)))
        yield gc
    yield _histogram(
        "http_request_duration_highr_seconds",
        "Latency with many buckets but no API specific labels.",
        _HTTP_S,
        {},
        requests,
    )
    for handler in _HANDLERS:
        labels = {"handler": handler, "method": "POST" if handler.startswith("/v1/c") else "GET"}
        yield _histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler.",
            _HTTP_S,
            labels,
            requests,
        )
        yield _histogram(
            "http_request_size_bytes",
            "Content length of incoming requests by handler.",
            [float(b) for b in _TOKENS],
            labels,
            requests,
        )
        yield _histogram(
            "http_response_size_bytes",
            "Content length of outgoing responses by handler.",
            [float(b) for b in _TOKENS],
            labels,
            requests,
        )


def _counters(engines: int) -> list[float]:
    while len(_tokens) < engines:
        _tokens.append(0.0)
    return _tokens[:engines]


def _vllm_families(settings: dict[str, Any], tokens: list[float]) -> Iterator[Metric]:
    kv_name = "vllm:gpu_cache_usage_perc" if settings["engine"] == "vllm-old" else "vllm:kv_cache_usage_perc"
    engines = [{"engine": str(i), "model_name": MODEL} for i in range(settings["engines"])]
    gauges = [
        ("vllm:num_requests_running", "Number of requests in model execution batches.", settings["running"]),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", settings["waiting"]),
        (kv_name, "KV-cache usage. 1 means 100 percent usage.", settings["kv_cache_usage"]),
    ]
    for name, doc, value in gauges:
        family = GaugeMetricFamily(name, doc, labels=["engine", "model_name"])
        for labels in engines:
            family.add_metric(list(labels.values()), float(value))
        yield family
    preemptions = CounterMetricFamily(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        labels=["engine", "model_name"],
    )
    generated = CounterMetricFamily(
        "vllm:generation_tokens", "Number of generation tokens processed.", labels=["engine", "model_name"]
    )
    for labels, count in zip(engines, tokens, strict=True):
        preemptions.add_metric(list(labels.values()), 0.0)
        generated.add_metric(list(labels.values()), count)
    yield preemptions
    if settings["metrics"] != "no_counter":
        yield generated
    for labels, count in zip(engines, tokens, strict=True):
        for name, doc, bounds in _VLLM_HISTOGRAMS:
            yield _histogram(name, doc, bounds, labels, int(count) // 7)


def _sglang_families(settings: dict[str, Any], tokens: list[float]) -> Iterator[Metric]:
    names = ["model_name", "engine_type", "tp_rank", "pp_rank", "dp_rank"]
    schedulers = [
        [MODEL, "unified", str(rank), "0", str(dp)]
        for dp in range(settings["engines"])
        for rank in range(settings["ranks"])
    ]
    gauges = [
        ("sglang:num_running_reqs", "The number of running requests.", settings["running"]),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", settings["waiting"]),
        ("sglang:token_usage", "The token usage.", settings["kv_cache_usage"]),
        ("sglang:gen_throughput", "The generation throughput (token/s).", settings["throughput"]),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.25),
    ]
    for name, doc, value in gauges:
        family = GaugeMetricFamily(name, doc, labels=names)
        for labels in schedulers:
            family.add_metric(labels, float(value))
        yield family
    generated = CounterMetricFamily(
        "sglang:generation_tokens", "Number of generation tokens processed.", labels=["model_name"]
    )
    generated.add_metric([MODEL], sum(tokens))
    if settings["metrics"] != "no_counter":
        yield generated
    for name, doc, bounds in _SGLANG_HISTOGRAMS:
        yield _histogram(name, doc, bounds, {"model_name": MODEL}, int(sum(tokens)) // 7)


class _Families:
    """A ``prometheus_client`` collector of one rendering's families."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render_metrics(settings: dict[str, Any], tokens: list[float]) -> bytes:
    """The ``/metrics`` body of an engine with these figures, as ``prometheus_client`` writes it."""
    families = _sglang_families if settings["engine"] == "sglang" else _vllm_families
    rendered = [*_runtime_families(int(sum(tokens)) // 50), *families(settings, tokens)]
    body = generate_latest(_Families(rendered))  # type: ignore[arg-type]
    behaviour = settings["metrics"]
    running = b"sglang:num_running_reqs{" if settings["engine"] == "sglang" else b"vllm:num_requests_running{"
    lines = body.split(b"\n")
    first = next(i for i, line in enumerate(lines) if line.startswith(running))
    if behaviour == "malformed":
        lines[first] = lines[first].replace(b'",', b'" ', 1)  # labels without their comma
    elif behaviour == "duplicate":
        lines.insert(first + 1, lines[first])
    elif behaviour == "nan":
        kv = (b"vllm:kv_cache_usage_perc{", b"vllm:gpu_cache_usage_perc{", b"sglang:token_usage{")
        lines = [line.rsplit(b" ", 1)[0] + b" NaN" if line.startswith(kv) else line for line in lines]
    elif behaviour == "huge":
        filler = b'vllm:request_queue_time_seconds_bucket{engine="9",le="1.0",model_name="filler"} 1.0'
        lines = [filler] * (HUGE_BYTES // len(filler) + 1) + lines
    elif behaviour == "garbage":
        return b"<html><body><h1>502 Bad Gateway</h1></body></html>\n"
    return b"\n".join(lines)


class _Handler(QuietHandler):
    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path = self.path.split("?", 1)[0]
        with _lock:
            _requests[path] = _requests.get(path, 0) + 1
            settings = dict(_settings)
            behaviour = settings["metrics"] if path == "/metrics" else settings["health"]
            ok_metrics = path == "/metrics" and not behaviour.isdigit() and behaviour != "hang"
            if ok_metrics:
                for i, _ in enumerate(_counters(settings["engines"])):
                    _tokens[i] += settings["tokens_per_scrape"]
            tokens = list(_counters(settings["engines"]))
        if path not in ("/metrics", "/health"):
            self._send(404, b"not found")
        elif behaviour == "hang":
            _stop.wait(300)
        elif behaviour.isdigit():
            self._send(int(behaviour), b"" if behaviour == "200" else f"status {behaviour}".encode())
        elif behaviour == "drip":
            self._drip(render_metrics(settings, tokens))
        else:
            self._send(200, render_metrics(settings, tokens))

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drip(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for start in range(0, len(body), 100):
            if _stop.wait(0.1):
                return
            self.wfile.write(body[start : start + 100])
            self.wfile.flush()


class _Listener:
    """The HTTP server on one port, which can stop listening and listen again."""

    def __init__(self) -> None:
        self.server: QuietServer | None = None
        self.port = 0
        self.listen(True)

    def listen(self, on: bool) -> None:
        if on and self.server is None:
            self.server = QuietServer(("127.0.0.1", self.port), _Handler)
            self.port = self.server.server_address[1]
            threading.Thread(
                target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            ).start()
        elif not on and self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def main() -> int:
    argparse.ArgumentParser().parse_args()
    listener = _Listener()

    def answer(command: dict[str, Any]) -> dict[str, Any]:
        name = command.get("cmd")
        with _lock:
            if name == "set":
                unknown = set(command) - set(_DEFAULTS) - {"cmd"}
                if unknown:
                    return {"error": f"unknown settings {sorted(unknown)}"}
                _settings.update({k: v for k, v in command.items() if k != "cmd"})
                return {"ok": True}
            if name == "reset_counters":
                _tokens[:] = [0.0] * len(_tokens)
                return {"ok": True}
            if name == "state":
                return {"settings": dict(_settings), "tokens": list(_tokens), "requests": dict(_requests)}
        if name == "listen":
            listener.listen(bool(command.get("on")))
            return {"ok": True}
        return {"error": "unknown command"}

    sys.stdout.write(json.dumps({"port": listener.port}) + "\n")
    sys.stdout.flush()
    serve_commands(answer)
    _stop.set()
    listener.listen(False)
    return 0


# ---------------------------------------------------------------------------------------------------------
# Test side


class MetricsPeer(JsonLinesChild):
    """This server in a subprocess, driven by a test."""

    def __init__(self, timeout_s: float = 20.0) -> None:
        super().__init__(__name__, [], "fake inference server", timeout_s)
        self.port: int = self.hello["port"]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def set(self, **settings: Any) -> None:
        """Change figures or behaviours (see the module docstring)."""
        answer = self._command({"cmd": "set", **settings})
        assert answer.get("ok"), answer

    def reset_counters(self) -> None:
        self._command({"cmd": "reset_counters"})

    def listen(self, on: bool) -> None:
        """Listen on the port (True) or refuse connections (False)."""
        self._command({"cmd": "listen", "on": on})

    def state(self) -> dict[str, Any]:
        return self._command({"cmd": "state"})


class FetchFailed(Exception):
    """A ``/metrics`` read that gave no body; ``str()`` is the one-line reason."""


def fetch_body(url: str, deadline_s: float, cap_bytes: int) -> tuple[bytes, bool]:
    """GET ``url`` over plain HTTP within ``deadline_s`` in all, reading at most ``cap_bytes`` of the body.

    Returns:
        ``(body, truncated)``.

    Raises:
        FetchFailed: Refused, timed out, not a 200, or a broken response.
    """
    host_port = url.split("/", 3)[2]
    host, port = host_port.rsplit(":", 1)
    path = "/" + url.split("/", 3)[3]
    deadline = time.monotonic() + deadline_s
    try:
        with socket.create_connection((host, int(port)), timeout=deadline_s) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FetchFailed(f"no whole answer within {deadline_s:g} s")
                sock.settimeout(left)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > cap_bytes + 65536:
                    break
    except ConnectionRefusedError:
        raise FetchFailed("connection refused") from None
    except TimeoutError:
        raise FetchFailed(f"no whole answer within {deadline_s:g} s") from None
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or not status[1].isdigit():
        raise FetchFailed("not an HTTP answer")
    if status[1] != b"200":
        raise FetchFailed(f"HTTP {status[1].decode()}")
    return body[:cap_bytes], len(body) > cap_bytes


if __name__ == "__main__":
    sys.exit(main())
