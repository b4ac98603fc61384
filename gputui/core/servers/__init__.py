"""The inference servers gputui watches: their metrics (``metrics``) and what they are doing (``state``).

Everything here is client side and pure: the collector reads the health endpoint and the ``/metrics`` body
(cut down on the host by ``gputui.core.metrics_filter``); these modules parse and judge what it sent.
"""

from gputui.core.servers.metrics import (
    ENGINE_SGLANG,
    ENGINE_VLLM,
    METRICS_JSON_KEYS,
    CounterDelta,
    MetricsUnreadable,
    ServerMetrics,
    generation_delta,
    metrics_json,
    parse_server_metrics,
    with_rate,
)

__all__ = [
    "ENGINE_SGLANG",
    "ENGINE_VLLM",
    "METRICS_JSON_KEYS",
    "CounterDelta",
    "MetricsUnreadable",
    "ServerMetrics",
    "generation_delta",
    "metrics_json",
    "parse_server_metrics",
    "with_rate",
]
