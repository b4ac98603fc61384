"""Server states from a real HTTP server: the collector's health probe, its metrics cut, the client's parse.

The peer (``tests/integration/metrics_server.py``) serves vLLM- or sglang-format ``/metrics`` (about 50 KB,
written by ``prometheus_client`` as the engines' are) and ``/health``. Each tick probes ``/health`` with the
collector's own ``probe_url``, reads ``/metrics`` over HTTP within a deadline and a size cap, filters it with
the collector's filter, parses it with the client's parser and feeds the tracker. The tracker's clock is the
test's: five seconds a tick, so a 30 s stall is seven reads, not thirty seconds of waiting. The peer's
counters grow at each ``/metrics`` read, so what a tick sees is fixed by the test.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from gputui.agent.protocol import (
    ENDPOINT_STATE_BUSY,
    ENDPOINT_STATE_DOWN,
    ENDPOINT_STATE_ERROR,
    ENDPOINT_STATE_STALLED,
    ENDPOINT_STATE_STARTING,
    ENDPOINT_STATE_TIMEOUT,
    ENDPOINT_STATE_UNHEALTHY,
    ENDPOINT_STATE_UP,
)
from gputui.agent.servers.metrics_filter import METRICS_BODY_CAP_BYTES, filter_metrics
from gputui.agent.servers.probe import probe_url
from gputui.core.model import EndpointSample
from gputui.core.servers import MetricsUnreadable, ServerState, ServerStateTracker, parse_server_metrics
from tests.integration._procs import REPO
from tests.integration.metrics_server import FetchFailed, MetricsPeer, fetch_body
from tests.interpreters import python38

pytestmark = pytest.mark.timeout(120)

TICK_S = 5.0
T0 = 1_700_000_000.0
OLD_LAUNCHER_S = 7200.0
ENDPOINT_DEADLINE_S = 0.5
METRICS_DEADLINE_S = 1.0


class Watch:
    """One endpoint watched as gputui will watch it, on the test's clock."""

    def __init__(self, peer: MetricsPeer, stall_after_s: float = 30.0) -> None:
        self.peer = peer
        self.tracker = ServerStateTracker(stall_after_s=stall_after_s)
        self.now = T0
        self.metrics_error: str | None = None
        self.wire_bytes: list[int] = []

    def tick(self, launcher_age_s: float | None = OLD_LAUNCHER_S) -> ServerState:
        self.now += TICK_S
        probe = probe_url(self.peer.url("/health"), deadline_s=ENDPOINT_DEADLINE_S)
        health = EndpointSample(
            url=self.peer.url("/health"),
            state=probe["state"],
            code=probe["code"],
            detail=probe["detail"],
            checked_at=self.now,
        )
        metrics = None
        self.metrics_error = None
        try:
            url = self.peer.url("/metrics")
            body, truncated = fetch_body(url, METRICS_DEADLINE_S, METRICS_BODY_CAP_BYTES)
            text, dropped = filter_metrics(body, truncated)
            self.wire_bytes.append(len(text))
            metrics = parse_server_metrics(text.decode("utf-8", "replace"), self.now, dropped)
        except (FetchFailed, MetricsUnreadable) as exc:
            self.metrics_error = str(exc)
        return self.tracker.update(health, metrics, launcher_age_s, self.now, self.metrics_error)

    def ticks(self, count: int, **kwargs: float | None) -> list[str | None]:
        return [self.tick(**kwargs).state for _ in range(count)]


def test_starting_then_up_then_busy_through_a_failing_health_then_up(peer: MetricsPeer) -> None:
    watch = Watch(peer)
    peer.listen(False)
    state = watch.tick(launcher_age_s=5.0)
    assert state.state == ENDPOINT_STATE_STARTING
    assert state.reason == "starting: connection refused, launcher 5 s old"
    assert watch.metrics_error == "connection refused"
    peer.listen(True)
    peer.set(health="503", metrics="404")  # the API server is up, the engine still loading
    state = watch.tick(launcher_age_s=40.0)
    assert (state.state, state.since) == (ENDPOINT_STATE_STARTING, T0 + TICK_S)
    assert watch.metrics_error == "HTTP 404"
    peer.set(health="200", metrics="ok", running=2, tokens_per_scrape=50)
    assert watch.ticks(2, launcher_age_s=50.0) == [ENDPOINT_STATE_UP, ENDPOINT_STATE_UP]
    assert watch.tracker.current.reason == "serving: 2 running, 0 waiting, 10 tokens/s"
    assert watch.tracker.current.previous_state == ENDPOINT_STATE_STARTING
    # /health fails while tokens keep coming (sglang during a long chunked prefill): busy, not dead.
    peer.set(health="503")
    state = watch.tick(launcher_age_s=60.0)
    assert state.state == ENDPOINT_STATE_BUSY
    assert state.reason == "busy: health HTTP 503 but generating 10 tokens/s; not dead, do not kill"
    assert state.metrics is not None
    assert state.metrics.to_dict() == {
        "engine": "vllm",
        "running": 2,
        "waiting": 0,
        "kv_cache_usage": 0.0,
        "generation_tokens_per_s": 10.0,
    }
    peer.set(health="200")
    state = watch.tick(launcher_age_s=65.0)
    assert (state.state, state.previous_state) == (ENDPOINT_STATE_UP, ENDPOINT_STATE_BUSY)
    # Refused, 404, a first reading (no rate yet), then three rates.
    assert state.tokens_per_s_history == (None, None, None, 10.0, 10.0, 10.0)
    # What went on the wire each time: a few hundred bytes of a ~50 KB body.
    assert watch.wire_bytes
    assert max(watch.wire_bytes) < 1024


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_up_then_stalled_while_health_says_200_then_up(peer: MetricsPeer, engine: str) -> None:
    """The engine stops generating behind a /health that keeps answering 200."""
    peer.set(
        engine=engine, engines=2, ranks=2, running=2, waiting=3, kv_cache_usage=0.0, tokens_per_scrape=100
    )
    watch = Watch(peer)
    assert watch.ticks(2) == [ENDPOINT_STATE_UP, ENDPOINT_STATE_UP]
    peer.set(tokens_per_scrape=0)
    states = watch.ticks(6)  # the last tokens came with the second reading: 30 s later it is stalled
    assert states == [ENDPOINT_STATE_UP] * 5 + [ENDPOINT_STATE_STALLED]
    state = watch.tracker.current
    assert state.reason == "stalled: 4 running, 6 waiting, no token generated for 30 s (health UP)"
    assert state.since == watch.now
    assert state.metrics is not None
    assert state.metrics.generation_tokens_per_s == 0.0
    peer.set(tokens_per_scrape=25)
    state = watch.tick()
    assert (state.state, state.previous_state) == (ENDPOINT_STATE_UP, ENDPOINT_STATE_STALLED)
    assert state.metrics is not None
    assert state.metrics.generation_tokens_per_s == 10.0  # two engines, 25 tokens each in 5 s


def test_each_health_failure_is_reached_and_left(peer: MetricsPeer) -> None:
    peer.set(running=0, tokens_per_scrape=0)
    watch = Watch(peer)
    assert watch.tick().state == ENDPOINT_STATE_UP
    steps = [
        ({"health": "503"}, ENDPOINT_STATE_UNHEALTHY, "HTTP 503"),
        ({"health": "hang"}, ENDPOINT_STATE_TIMEOUT, "no response within 0.5s"),
        ({"health": "404"}, ENDPOINT_STATE_ERROR, "HTTP 404"),
    ]
    for settings, failed, reason in steps:
        peer.set(**settings)
        state = watch.tick()
        assert (state.state, state.reason) == (failed, reason)
        peer.set(health="200")
        state = watch.tick()
        assert (state.state, state.previous_state) == (ENDPOINT_STATE_UP, failed)
    # Refused by a launcher that has long served: DOWN, not STARTING; its metrics are gone with it.
    peer.listen(False)
    state = watch.tick()
    assert state.state == ENDPOINT_STATE_DOWN
    assert state.reason == "connection refused; metrics: connection refused"
    assert state.metrics is None
    peer.listen(True)
    assert watch.tick().state == ENDPOINT_STATE_UP


BLANKING = {
    "404": "HTTP 404",
    "hang": f"no whole answer within {METRICS_DEADLINE_S:g} s",
    "drip": f"no whole answer within {METRICS_DEADLINE_S:g} s",
    "huge": "no metrics of a known inference server in the text",
    "garbage": "no metrics of a known inference server in the text",
}


@pytest.mark.parametrize("fault", sorted(BLANKING))
def test_slow_huge_vanished_or_foreign_metrics_leave_the_state_to_health(
    peer: MetricsPeer, fault: str
) -> None:
    """A stall the metrics would show cannot be seen without them: health alone decides, and says so."""
    peer.set(running=2, waiting=1, tokens_per_scrape=0, metrics=fault)
    watch = Watch(peer)
    states = watch.ticks(8)
    assert states == [ENDPOINT_STATE_UP] * 8
    state = watch.tracker.current
    assert state.metrics is None
    assert state.reason == f"health UP; metrics: {BLANKING[fault]}"
    assert state.tokens_per_s_history == (None,) * 8
    # Failing health with tokens flowing reads UNHEALTHY, not BUSY, while metrics are blank.
    peer.set(health="503", tokens_per_scrape=100)
    assert watch.tick().state == ENDPOINT_STATE_UNHEALTHY
    # The metrics come back: from the second reading on (a first has no rate) they count again.
    peer.set(metrics="ok")
    assert watch.ticks(2) == [ENDPOINT_STATE_UNHEALTHY, ENDPOINT_STATE_BUSY]


@pytest.mark.parametrize(
    ("fault", "blank_figure", "unreadable", "stalls"),
    [
        ("malformed", "running", "malformed", True),  # the waiting request alone is work pending
        ("duplicate", "running", "duplicated series", True),
        ("nan", "kv_cache_usage", "not a usable figure: nan", True),
        ("no_counter", "generation_tokens_total", None, False),  # no counter, no claim of a stall
    ],
)
def test_a_bad_series_blanks_its_figure_and_the_rest_still_count(
    peer: MetricsPeer, fault: str, blank_figure: str, unreadable: str | None, stalls: bool
) -> None:
    peer.set(running=2, waiting=1, kv_cache_usage=0.5, tokens_per_scrape=0, metrics=fault)
    watch = Watch(peer)
    states = watch.ticks(8)
    state = watch.tracker.current
    assert state.metrics is not None
    assert getattr(state.metrics, blank_figure) is None
    assert [reason for _, reason in state.metrics.unreadable] == ([unreadable] if unreadable else [])
    assert state.metrics.waiting == 1
    # Flat from the first reading on: 30 s later (the seventh) stalled, when the counter can be read.
    assert states == [ENDPOINT_STATE_UP] * 6 + [ENDPOINT_STATE_STALLED if stalls else ENDPOINT_STATE_UP] * 2


def test_metrics_that_vanish_and_return_keep_their_counter(peer: MetricsPeer) -> None:
    peer.set(running=1, tokens_per_scrape=30)
    watch = Watch(peer)
    watch.ticks(2)
    peer.set(metrics="404")
    watch.ticks(2)  # the counter grows on the server meanwhile only when read: it reads flat
    peer.set(metrics="ok")
    state = watch.tick()
    assert state.state == ENDPOINT_STATE_UP
    assert state.metrics is not None
    # 30 tokens over the three ticks since the last reading.
    assert state.metrics.generation_tokens_per_s == pytest.approx(30 / (3 * TICK_S))
    assert state.tokens_per_s_history == (None, 6.0, None, None, 2.0)


def test_a_restarted_counter_is_no_negative_rate_and_no_stall(peer: MetricsPeer) -> None:
    peer.set(running=3, tokens_per_scrape=500)
    watch = Watch(peer, stall_after_s=10.0)
    watch.ticks(3)
    peer.reset_counters()
    state = watch.tick()
    assert state.state == ENDPOINT_STATE_UP
    assert state.metrics is not None
    assert state.metrics.generation_tokens_per_s == 100.0
    assert all(rate is None or rate >= 0 for rate in state.tokens_per_s_history)


FILTER_ON_38 = """
import json, sys
from gputui.agent.servers.metrics_filter import filter_metrics
body = sys.stdin.buffer.read()
for truncated in (False, True):
    text, dropped = filter_metrics(body, truncated)
    sys.stdout.write(json.dumps({"text": text.decode("utf-8", "replace"), "dropped": dropped}) + "\\n")
"""


def test_the_filter_runs_on_python_38_as_it_does_here(peer: MetricsPeer) -> None:
    peer.set(
        engine="sglang", running=4, waiting=2, kv_cache_usage=0.25, throughput=120.0, tokens_per_scrape=10
    )
    body, truncated = fetch_body(peer.url("/metrics"), METRICS_DEADLINE_S, METRICS_BODY_CAP_BYTES)
    assert not truncated
    assert len(body) > 40_000
    cut = body[: body.index(b"sglang:generation_tokens_total{") + 40]
    done = subprocess.run(
        [python38(), "-c", FILTER_ON_38], input=cut, capture_output=True, cwd=REPO, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    whole, at_cut = (json.loads(line) for line in done.stdout.decode().splitlines())
    for answer, flag in ((whole, False), (at_cut, True)):
        text, dropped = filter_metrics(cut, flag)
        assert (answer["text"], answer["dropped"]) == (text.decode(), dropped)
    assert at_cut["dropped"] == ["sglang:generation_tokens_total"]
    metrics = parse_server_metrics(at_cut["text"], T0, at_cut["dropped"])
    assert (metrics.running, metrics.waiting, metrics.generation_tokens_total) == (4, 2, None)
