"""Section 7: an inference server's metrics, from its ~50 KB /metrics body to the client's figures.

    .venv/bin/python tests/bench/metrics_bench.py [--quick]     # this section alone (run_bench.py --section 7)

The server is the suite's fake vLLM/sglang (``tests/integration/metrics_server.py``): bodies written by
``prometheus_client`` from the engines' documented metric names, with their histogram bulk (vLLM ~53 KB,
sglang ~49 KB). Each part runs in a fresh process:

- ``collector`` (under this Python, and again under Python 3.8 when one is installed, as on an old GPU
  host): one metrics probe as the collector runs it beside each health probe
  (``gputui.agent.servers.probe.fetch_metrics``: lookup, connect, request, headers, the body up to its cap,
  then the filter that cuts it down to the series gputui reads), in CPU time per sample; the filter
  (``gputui.agent.servers.metrics_filter``) alone is shown beside it.
- ``client``: the client's parse of what arrives (``parse_server_metrics`` on the filtered text) and one
  tracker update; for comparison, the same parse given the whole body, and ``prometheus_client``'s parser
  alone over the whole body (what parsing without the filter would cost).

Also the bytes per sample on the wire: what the metrics add to the endpoint's entry of a snapshot line (the
collector's ``endpoint_messages.endpoint_sample`` with the filtered text, against the same entry without metrics, as
compact JSON), against the whole body.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

TARGET_PROBE_CPU_MS = 5.0
"""One probe + filter of a 50 KB body on the collector: at a 5 s interval, 0.1 % of a core."""
TARGET_WIRE_BYTES = 1024
"""Bytes a sample's metrics add to a snapshot line."""
TARGET_PARSE_CPU_MS = 2.0
"""The client's parse and state update per server per sample."""
ENGINES = ("vllm", "sglang")

# Runs under any Python >= 3.8 with the repository on sys.path: imports only the collector-side modules.
COLLECTOR_WORKER = r"""
import json, sys, time
from gputui.agent.servers import messages as endpoint_messages
from gputui.agent.servers.probe import fetch_metrics
from gputui.agent.servers.metrics_filter import filter_metrics
url, repeats = sys.argv[1], int(sys.argv[2])
body = sys.stdin.buffer.read()
def per_call_ms(call):
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(10):
            call()
        samples.append((time.process_time() - start) * 100.0)
    samples.sort()
    return samples[len(samples) // 2]
answer = fetch_metrics(url, deadline_s=10.0)
probe_ms = per_call_ms(lambda: fetch_metrics(url, deadline_s=10.0))
filter_ms = per_call_ms(lambda: filter_metrics(body))
print(json.dumps({"python": sys.version.split()[0], "probe_ms": probe_ms, "filter_ms": filter_ms,
                  "state": "UP" if answer["error"] is None and answer["text"] else answer["error"]}))
"""


def _client(args: argparse.Namespace) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    from gputui.agent.servers import messages as protocol
    from gputui.agent.servers.metrics_filter import filter_metrics
    from gputui.core.model import EndpointSample
    from gputui.core.servers import ServerStateTracker, parse_server_metrics

    body = Path(args.body).read_bytes()
    text, dropped = filter_metrics(body)
    filtered = text.decode()
    whole = body.decode()
    tracker = ServerStateTracker()
    health = EndpointSample(url="http://127.0.0.1:8000/health", state="UP", code=200)

    def per_call_ms(call: Any) -> float:
        samples = []
        for _ in range(args.repeats):
            start = time.process_time()
            for _ in range(10):
                call()
            samples.append((time.process_time() - start) * 100.0)
        return statistics.median(samples)

    clock = [1.7e9]

    def parse_and_update() -> None:
        clock[0] += 5.0
        reading = parse_server_metrics(filtered, clock[0], dropped)
        tracker.update(health, reading, None, clock[0])

    return {
        "parse_ms": per_call_ms(parse_and_update),
        "parse_whole_ms": per_call_ms(lambda: parse_server_metrics(whole, 1.0)),
        "library_whole_ms": per_call_ms(lambda: list(text_string_to_metric_families(whole))),
        "filtered_bytes": len(text),
        "wire_bytes": _entry_bytes(protocol, filtered, dropped) - _entry_bytes(protocol, None, []),
        "body_bytes": len(body),
    }


def _entry_bytes(protocol: Any, text: str | None, dropped: list[str]) -> int:
    """Bytes of one endpoint's entry in a snapshot line (compact JSON, as the collector writes it)."""
    url = "http://127.0.0.1:8000"
    entry = protocol.endpoint_sample(
        url + "/health",
        "UP",
        code=200,
        latency_ms=3.1,
        since=1.7e9,
        last_ok=1.7e9,
        checked_at=1.7e9,
        metrics_url=None if text is None else url + "/metrics",
        metrics_text=text,
        metrics_at=None if text is None else 1.7e9,
        metrics_dropped=dropped,
        launcher_age_s=3600.0,
    )
    return len(json.dumps(entry, separators=(",", ":")))


def worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--body", required=True)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        result = _client(args)
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


# --- harness side ----------------------------------------------------------------------------------------


def _json_line(cmd: list[str], what: str, stdin: bytes = b"") -> dict[str, Any]:
    try:
        proc = subprocess.run(
            cmd,
            input=stdin,
            capture_output=True,
            timeout=600,
            cwd=REPO_ROOT,
            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{what} timed out"}
    lines = [line for line in proc.stdout.decode().splitlines() if line.startswith("{")]
    if not lines:
        tail = (proc.stderr.decode().strip().splitlines() or ["no output"])[-1]
        return {"error": f"{what} exit {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def run(args: argparse.Namespace, report: Any, sec: int) -> None:
    """Section 7 of ``run_bench.py``: the collector's probe + filter, the wire, the client's parse."""
    from tests.bench.run_bench import verdict
    from tests.integration.metrics_server import MetricsPeer, fetch_body
    from tests.interpreters import find_python38

    repeats = "5" if args.quick else "20"
    peer = MetricsPeer()
    scratch = tempfile.TemporaryDirectory(prefix="gputui-metrics-bench-")
    try:
        for engine in ENGINES:
            peer.set(
                engine=engine,
                running=6,
                waiting=2,
                kv_cache_usage=0.42,
                throughput=850.0,
                tokens_per_scrape=4000,
            )
            for _ in range(3):  # counters and histograms of a server that has been working
                body, _ = fetch_body(peer.url("/metrics"), 10.0, 1 << 22)
            body_path = Path(scratch.name) / f"{engine}.metrics"
            body_path.write_bytes(body)
            for python in (sys.executable, find_python38()):
                metric = f"{engine} metrics probe + filter, {len(body) / 1000:.0f} kB body"
                target = f"<= {TARGET_PROBE_CPU_MS:g} ms"
                if python is None:
                    report.na(sec, metric + " (Python 3.8)", "no Python 3.8 installed", target=target)
                    continue
                res = _json_line(
                    [python, "-c", COLLECTOR_WORKER, peer.url("/metrics"), repeats],
                    f"collector worker ({python})",
                    body,
                )
                if "error" in res:
                    report.na(sec, metric, res["error"], target=target)
                    continue
                total = res["probe_ms"]
                report.add(
                    sec,
                    f"{metric} (Python {res['python']})",
                    total,
                    "CPU ms/sample",
                    compare=f"of which the filter {res['filter_ms']:.2f} ms",
                    target=target,
                    verdict=verdict(total <= TARGET_PROBE_CPU_MS and res["state"] == "UP"),
                )
            res = _json_line(
                [
                    sys.executable,
                    str(Path(__file__)),
                    "client",
                    "--body",
                    str(body_path),
                    "--repeats",
                    repeats,
                ],
                "client worker",
            )
            if "error" in res:
                report.na(sec, f"{engine} metrics on the wire", res["error"])
                continue
            report.add(
                sec,
                f"{engine} metrics on the wire per sample",
                res["wire_bytes"],
                "bytes",
                compare=f"filtered {res['filtered_bytes']} B of a {res['body_bytes']} B body",
                target=f"<= {TARGET_WIRE_BYTES}",
                verdict=verdict(res["wire_bytes"] <= TARGET_WIRE_BYTES),
            )
            report.add(
                sec,
                f"{engine} client parse + state update",
                res["parse_ms"],
                "CPU ms/sample",
                target=f"<= {TARGET_PARSE_CPU_MS:g} ms",
                verdict=verdict(res["parse_ms"] <= TARGET_PARSE_CPU_MS),
            )
            report.add(sec, "  the same parse given the whole body", res["parse_whole_ms"], "CPU ms")
            report.add(sec, "  prometheus_client parser alone, whole body", res["library_whole_ms"], "CPU ms")
    finally:
        peer.close()
        scratch.cleanup()
    report.note(
        sec,
        "metrics: fake vLLM/sglang server on loopback (tests/integration/metrics_server.py), "
        "bodies by prometheus_client; CPU per sample is a median over batches of 10",
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        return worker_main(sys.argv[2:])
    from tests.bench import run_bench

    return run_bench.main(["--section", "7", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
