"""The inference servers gputui watches: their metrics (``metrics``) and what they are doing (``state``).

Everything here is client side and pure: the collector reads the health endpoint and the ``/metrics`` body
(cut down on the host by ``gputui.agent.health.metrics_filter``); these modules parse and judge what it
sent.
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
from gputui.core.servers.state import (
    DEFAULT_HISTORY_LEN,
    DEFAULT_STALL_AFTER_S,
    DEFAULT_STARTING_GRACE_S,
    SERVER_STATES,
    ServerState,
    ServerStateTracker,
)
from gputui.core.servers.watch import (
    DERIVED_STATES,
    FAILING_STATES,
    ServerWatch,
    failing_servers,
    judge_once,
    read_metrics,
)

__all__ = [
    "DERIVED_STATES",
    "FAILING_STATES",
    "ServerWatch",
    "failing_servers",
    "judge_once",
    "read_metrics",
    "DEFAULT_HISTORY_LEN",
    "DEFAULT_STALL_AFTER_S",
    "DEFAULT_STARTING_GRACE_S",
    "ENGINE_SGLANG",
    "ENGINE_VLLM",
    "METRICS_JSON_KEYS",
    "SERVER_STATES",
    "CounterDelta",
    "MetricsUnreadable",
    "ServerMetrics",
    "ServerState",
    "ServerStateTracker",
    "generation_delta",
    "metrics_json",
    "parse_server_metrics",
    "with_rate",
]
