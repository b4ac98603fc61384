"""TGI- and llama.cpp-shaped servers (their real ``/metrics`` bodies, ``tests/data/metrics``) watched as
gputui watches any server: the collector's probe, its metrics read and filter, the client's parse and
tracker. A server whose counters stop moving with work waiting goes STALLED; one whose token counter waits
for long requests to end while the engine still steps stays UP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gputui.agent.protocol import ENDPOINT_STATE_STALLED, ENDPOINT_STATE_UP
from tests.integration.field_server import FieldServer
from tests.integration.test_server_states import Watch

pytestmark = pytest.mark.timeout(120)

TGI_TOKENS = "tgi_request_generated_tokens_sum"
TGI_PASSES = "tgi_batch_inference_duration_count{method=\"{'method': 'decode'}\"}"
LLAMA_TOKENS = "llamacpp:tokens_predicted_total"
LLAMA_DECODES = "llamacpp:n_decode_total"


@pytest.fixture
def tgi() -> Iterator[FieldServer]:
    server = FieldServer(
        "tgi.prom",
        counters={TGI_TOKENS: 27520.0, TGI_PASSES: 4120.0},
        gauges={"tgi_queue_size": 7.0, "tgi_batch_current_size": 4.0},
    )
    yield server
    server.close()


@pytest.fixture
def llamacpp() -> Iterator[FieldServer]:
    server = FieldServer(
        "llamacpp.prom",
        counters={LLAMA_TOKENS: 7557.0, LLAMA_DECODES: 7602.0},
        gauges={"llamacpp:requests_processing": 4.0, "llamacpp:requests_deferred": 2.0},
    )
    yield server
    server.close()


def test_tgi_serving_then_stalled_with_work_waiting(tgi: FieldServer) -> None:
    tgi.set(per_scrape={TGI_TOKENS: 500.0, TGI_PASSES: 60.0})
    watch = Watch(tgi)  # type: ignore[arg-type] - any server with url()
    assert watch.ticks(2) == [ENDPOINT_STATE_UP, ENDPOINT_STATE_UP]
    assert watch.tracker.current.reason == "serving: 4 running, 7 waiting, 100 tokens/s"
    tgi.set(per_scrape={TGI_TOKENS: 0.0, TGI_PASSES: 0.0})
    states = watch.ticks(6)
    assert states == [ENDPOINT_STATE_UP] * 5 + [ENDPOINT_STATE_STALLED]
    reason = watch.tracker.current.reason
    assert reason == "stalled: 4 running, 7 waiting, no token generated for 30 s (health UP)"
    assert max(watch.wire_bytes) < 1024  # the histograms stay on the host


def test_tgi_decoding_long_requests_is_not_stalled(tgi: FieldServer) -> None:
    tgi.set(per_scrape={TGI_PASSES: 60.0})  # no request ends: the token histogram stays where it is
    watch = Watch(tgi)  # type: ignore[arg-type]
    assert watch.ticks(10) == [ENDPOINT_STATE_UP] * 10


def test_llamacpp_serving_then_stalled_with_work_waiting(llamacpp: FieldServer) -> None:
    llamacpp.set(per_scrape={LLAMA_TOKENS: 250.0, LLAMA_DECODES: 60.0})
    watch = Watch(llamacpp)  # type: ignore[arg-type]
    assert watch.ticks(2) == [ENDPOINT_STATE_UP, ENDPOINT_STATE_UP]
    assert watch.tracker.current.reason == "serving: 4 running, 2 waiting, 50 tokens/s"
    llamacpp.set(per_scrape={LLAMA_TOKENS: 0.0, LLAMA_DECODES: 0.0})
    states = watch.ticks(6)
    assert states == [ENDPOINT_STATE_UP] * 5 + [ENDPOINT_STATE_STALLED]
    reason = watch.tracker.current.reason
    assert reason == "stalled: 4 running, 2 waiting, no token generated for 30 s (health UP)"


def test_llamacpp_decoding_long_requests_reads_its_own_rate(llamacpp: FieldServer) -> None:
    llamacpp.set(per_scrape={LLAMA_DECODES: 60.0})
    watch = Watch(llamacpp)  # type: ignore[arg-type]
    assert watch.ticks(10) == [ENDPOINT_STATE_UP] * 10
    assert watch.tracker.current.reason == "serving: 4 running, 2 waiting, 86 tokens/s"
