"""Real ``/metrics`` bodies of the servers gputui reads (``tests/data/metrics``, sources named there), through
the collector's filter and the client's parser, and the states they make."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.agent.protocol import ENDPOINT_STATE_UP
from gputui.agent.servers.metrics_filter import filter_metrics
from gputui.core.model import EndpointSample
from gputui.core.servers import ServerStateTracker, parse_server_metrics
from gputui.core.servers.metrics import ServerMetrics

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"
T0 = 1_700_000_000.0
DECODE_PASSES = "tgi_batch_inference_duration_count{method=\"{'method': 'decode'}\"}"


def _read(name: str, at: float = T0, replace: dict[str, str] | None = None) -> ServerMetrics:
    body = (DATA / name).read_text()
    for old, new in (replace or {}).items():
        assert old in body
        body = body.replace(old, new)
    text, dropped = filter_metrics(body.encode())
    assert not dropped
    return parse_server_metrics(text.decode(), at, dropped)


@pytest.mark.parametrize(
    ("name", "engine", "running", "waiting", "kv", "tokens"),
    [
        ("tgi.prom", "tgi", 0, 0, None, 27520),
        ("llamacpp.prom", "llamacpp", 4, 2, None, 7557),
        ("triton_trtllm.prom", "triton", 1, 1, 0.4875, None),
        ("sglang_router.prom", "sglang", 324, 5652, 0.28, 2 * 7557572),
    ],
)
def test_a_real_body_is_read_as_its_engine(
    name: str, engine: str, running: int, waiting: int, kv: float | None, tokens: int | None
) -> None:
    metrics = _read(name)
    assert (metrics.engine, metrics.running, metrics.waiting) == (engine, running, waiting)
    assert metrics.kv_cache_usage == kv
    assert metrics.generation_tokens_total == tokens
    assert metrics.unreadable == ()


def test_the_progress_figures_are_the_engines_own() -> None:
    assert _read("tgi.prom").progress == 215 + 4120  # forward passes, prefill and decode
    llama = _read("llamacpp.prom")
    assert (llama.progress, llama.engine_tokens_per_s) == (7602, 86.5)
    assert _read("triton_trtllm.prom").progress == 0  # the batch manager's iterations
    router = _read("sglang_router.prom")
    assert router.engine_tokens_per_s == pytest.approx(2 * 86.50814177726902)


def _health(at: float) -> EndpointSample:
    return EndpointSample(
        url="http://127.0.0.1:8080/health", state=ENDPOINT_STATE_UP, code=200, checked_at=at
    )


def test_llamacpp_with_a_flat_counter_and_moving_decode_calls_is_serving_at_its_own_rate() -> None:
    """llama.cpp counts a request's tokens when it ends: while a long one decodes, its decode calls move."""
    tracker = ServerStateTracker(stall_after_s=30.0)
    tracker.update(_health(T0), _read("llamacpp.prom", T0), None, T0)
    for tick in range(1, 10):
        at = T0 + 5.0 * tick
        moved = {"llamacpp:n_decode_total 7602": f"llamacpp:n_decode_total {7602 + 40 * tick}"}
        state = tracker.update(_health(at), _read("llamacpp.prom", at, moved), None, at)
    assert state.state == ENDPOINT_STATE_UP
    assert state.reason == "serving: 4 running, 2 waiting, 86 tokens/s"  # the engine's figure, not "0"


def test_tgi_with_everything_flat_and_work_waiting_is_stalled() -> None:
    queued = {
        "tgi_queue_size 0.0": "tgi_queue_size 7.0",
        "tgi_batch_current_size 0.0": "tgi_batch_current_size 4",
    }
    tracker = ServerStateTracker(stall_after_s=30.0)
    states = []
    for tick in range(8):
        at = T0 + 5.0 * tick
        states.append(tracker.update(_health(at), _read("tgi.prom", at, queued), None, at).state)
    assert states[-1] == "STALLED"
    assert tracker.current.reason == "stalled: 4 running, 7 waiting, no token generated for 35 s (health UP)"


def test_tgi_with_a_flat_counter_but_moving_forward_passes_is_not_stalled() -> None:
    tracker = ServerStateTracker(stall_after_s=30.0)
    for tick in range(10):
        at = T0 + 5.0 * tick
        body = {
            "tgi_queue_size 0.0": "tgi_queue_size 7.0",
            "tgi_batch_current_size 0.0": "tgi_batch_current_size 4",
            DECODE_PASSES + " 4120.0": f"{DECODE_PASSES} {4120 + tick}",
        }
        state = tracker.update(_health(at), _read("tgi.prom", at, body), None, at)
    assert state.state == ENDPOINT_STATE_UP
    assert state.reason == "serving: 4 running, 7 waiting, – tokens/s"  # the counter says nothing yet
