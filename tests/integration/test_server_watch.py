"""Server states end to end: the collector's prober reads a real server's /health and /metrics, the client's
watch judges them.

The peer (``tests/integration/metrics_server.py``) serves vLLM- or sglang-format ``/metrics`` (about 50 KB)
whose counters advance at each read, stall, or vanish, and a ``/health`` the test sets. The collector's own
``EndpointProber`` probes both (its threads, its deadlines, its filter on the host); its samples go through
the wire shape (``HostSnapshot.from_dict``) into a ``ServerWatch`` with a short stall window, so each state
is reached, and left, in seconds. The CLI runs are the real ``snapshot`` and ``check`` in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest

from gputui.agent.protocol import (
    ENDPOINT_STATE_BUSY,
    ENDPOINT_STATE_STALLED,
    ENDPOINT_STATE_UNHEALTHY,
    ENDPOINT_STATE_UP,
)
from gputui.agent.servers.prober import EndpointProber
from gputui.core.model import EndpointSample, HostSnapshot
from gputui.core.servers import METRICS_JSON_KEYS, ServerWatch
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO
from tests.integration.metrics_server import MetricsPeer

pytestmark = pytest.mark.timeout(180)

STALL_AFTER_S = 1.5
INTERVAL_S = 0.2
DEADLINE_S = 2.0
REACH_S = 30.0
"""Generous bound for a state to be reached on a loaded machine (a few probe intervals are enough)."""


class Watched:
    """One endpoint probed by the collector's prober and judged by a client's watch."""

    def __init__(self, peer: MetricsPeer) -> None:
        self.prober = EndpointProber(
            [peer.url("/health")],
            discover=False,
            interval_s=INTERVAL_S,
            deadline_s=DEADLINE_S,
            metrics_urls=[peer.url("/metrics")],
        )
        self.watch = ServerWatch(stall_after_s=STALL_AFTER_S)
        self.seen: list[str | None] = []

    def judged(self) -> EndpointSample:
        snapshot = HostSnapshot.from_dict(
            {"target": "h", "time": time.time(), "health": self.prober.samples()}
        )
        (sample,) = self.watch.apply(snapshot).endpoints
        if not self.seen or self.seen[-1] != sample.state:
            self.seen.append(sample.state)
        return sample

    def until(self, what: str, ok: Callable[[EndpointSample], bool]) -> EndpointSample:
        deadline = time.monotonic() + REACH_S
        while time.monotonic() < deadline:
            sample = self.judged()
            if ok(sample):
                return sample
            time.sleep(INTERVAL_S / 2)
        raise AssertionError(f"never {what}; states seen: {self.seen}; last: {self.judged()}")

    def close(self) -> None:
        self.prober.close()


@pytest.fixture
def watched(peer: MetricsPeer) -> Iterator[Watched]:
    running = Watched(peer)
    try:
        yield running
    finally:
        running.close()


def _serving(sample: EndpointSample) -> bool:
    rate = (sample.metrics or {}).get("generation_tokens_per_s")
    return sample.state == ENDPOINT_STATE_UP and rate is not None and rate > 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_state_is_reached_and_left(peer: MetricsPeer, watched: Watched, engine: str) -> None:
    peer.set(engine=engine, running=2, waiting=1, kv_cache_usage=0.25, tokens_per_scrape=40)
    up = watched.until("UP and generating", _serving)
    assert up.metrics is not None
    assert tuple(up.metrics) == METRICS_JSON_KEYS
    assert (up.metrics["engine"], up.metrics["running"], up.metrics["waiting"]) == (engine, 2, 1)
    assert up.metrics["kv_cache_usage"] == 0.25
    assert up.metrics_text is not None
    assert len(up.metrics_text) < 16384
    # The counter stops with requests pending: STALLED, whatever /health says.
    peer.set(tokens_per_scrape=0)
    stalled = watched.until("STALLED", lambda s: s.state == ENDPOINT_STATE_STALLED)
    assert stalled.detail is not None
    assert "no token generated for" in stalled.detail
    peer.set(tokens_per_scrape=40)
    watched.until("UP again once tokens flow", _serving)
    # Health failing while tokens flow: BUSY, not dead.
    peer.set(health="503")
    busy = watched.until("BUSY", lambda s: s.state == ENDPOINT_STATE_BUSY)
    assert busy.detail is not None
    assert "do not kill" in busy.detail
    # The metrics endpoint vanishes: metrics blank, the state from health alone.
    peer.set(metrics="404")
    unhealthy = watched.until(
        "UNHEALTHY with blank metrics", lambda s: s.state == ENDPOINT_STATE_UNHEALTHY and s.metrics_error
    )
    assert unhealthy.metrics == dict.fromkeys(METRICS_JSON_KEYS)
    assert unhealthy.metrics_error == "HTTP 404"
    peer.set(health="200", metrics="ok")
    watched.until("UP once more", _serving)
    assert watched.seen[0] in (None, ENDPOINT_STATE_UP)
    for state in (ENDPOINT_STATE_STALLED, ENDPOINT_STATE_BUSY, ENDPOINT_STATE_UNHEALTHY):
        assert state in watched.seen


def test_a_hanging_metrics_endpoint_leaves_health_to_itself(peer: MetricsPeer, watched: Watched) -> None:
    peer.set(metrics="hang", health="200")
    sample = watched.until("UP with the metrics read timed out", lambda s: s.metrics_error is not None)
    assert sample.state == ENDPOINT_STATE_UP
    assert "within" in sample.metrics_error
    assert sample.metrics == dict.fromkeys(METRICS_JSON_KEYS)


def _cli(fake_nvml: FakeNvml, *args: str) -> tuple[int, dict]:
    with tempfile.TemporaryDirectory() as state:
        done = subprocess.run(
            [sys.executable, "-m", "gputui.cli", *args, "--json", "--no-discover"],
            cwd=REPO,
            env=dict(fake_nvml.env(), XDG_STATE_HOME=state),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_snapshot_and_check_carry_the_metrics_and_check_fails_an_unhealthy_server(
    peer: MetricsPeer, fake_nvml: FakeNvml
) -> None:
    peer.set(engine="vllm", running=3, waiting=4, kv_cache_usage=0.5, tokens_per_scrape=10)
    endpoints = ("--health", peer.url("/health"), "--metrics", peer.url("/metrics"))
    status, document = _cli(fake_nvml, "snapshot", *endpoints)
    assert status == 0
    (sample,) = document["hosts"][0]["health"]
    # One reading has no rate: tokens/s is null in a one-shot command.
    assert sample["metrics"] == {
        "engine": "vllm",
        "running": 3,
        "waiting": 4,
        "kv_cache_usage": 0.5,
        "generation_tokens_per_s": None,
    }
    assert sample["state"] == ENDPOINT_STATE_UP
    status, document = _cli(fake_nvml, "check", *endpoints)
    assert status == 0, document["hosts"][0]["verdict"]
    peer.set(health="503")
    status, document = _cli(fake_nvml, "check", *endpoints)
    assert status == 1
    reasons = document["hosts"][0]["verdict"]["reasons"]
    assert any(r.startswith(f"server {peer.url('/health')} is UNHEALTHY") for r in reasons), reasons


def test_the_collector_on_python38_carries_the_cut_metrics_in_its_samples(peer: MetricsPeer) -> None:
    """The collector as SSH runs it, on the oldest Python it supports: configured by a ``configure`` command
    as the SSH link sends it, it reads the metrics beside the health probe and ships them cut down."""
    from gputui.agent import protocol
    from tests.integration._procs import agent_process, wait_for
    from tests.interpreters import python38

    peer.set(engine="sglang", running=3, waiting=2, tokens_per_scrape=7)
    with agent_process("--no-discover", python=python38()) as collector:
        collector.result(
            {
                "cmd": protocol.CMD_CONFIGURE,
                "health_urls": [peer.url("/health")],
                "metrics_urls": [peer.url("/metrics")],
            }
        )

        def read() -> dict | None:
            (sample,) = collector.result({"cmd": protocol.CMD_HEALTH})["samples"]
            return sample if sample["metrics_at"] is not None else None

        wait_for(read, "the first metrics read")
        sample = read()
        snapshot = collector.result({"cmd": protocol.CMD_SAMPLE})["snapshot"]
    assert sample is not None
    assert sample["metrics_url"] == peer.url("/metrics")
    assert sample["metrics_error"] is None
    assert "sglang:num_running_reqs" in sample["metrics_text"]
    assert "_bucket" not in sample["metrics_text"]  # the histograms stayed on the host
    (judged,) = ServerWatch().apply(HostSnapshot.from_dict(snapshot)).endpoints
    metrics = judged.metrics
    assert metrics is not None
    assert (metrics["engine"], metrics["running"], metrics["waiting"]) == ("sglang", 3, 2)
