"""The inference servers gputui watches: their metrics, what each is doing, and views of it over time.

Everything here is client side and pure: the collector reads the endpoint and the ``/metrics`` body (cut down
on the host by ``gputui.agent.servers.metrics_filter``); these modules parse and judge what it sent.

* ``metrics``: a server's ``/metrics`` read (sglang, vLLM); ``state``: its state (UP, BUSY, STALLED, …);
* ``jobs``: the facts of the job behind an endpoint; ``watch``: the state of every endpoint over time;
* ``view``: state changes as lines, a per-URL history, short labels;
* ``spinning``: a GPU job whose GPUs spin at idle power with nothing moving (a collective likely hung).
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.servers.jobs import JobFacts, job_facts
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
    from gputui.core.servers.spinning import DEFAULT_SPIN_AFTER_S, JobSpin, SpinTracker, spinning_words
    from gputui.core.servers.state import (
        DEFAULT_HISTORY_LEN,
        DEFAULT_STALL_AFTER_S,
        DEFAULT_STARTING_GRACE_S,
        SERVER_STATES,
        ServerState,
        ServerStateTracker,
    )
    from gputui.core.servers.view import (
        BUSY,
        DOWN,
        ERROR,
        STALLED,
        STARTING,
        TIMEOUT,
        UNHEALTHY,
        UP,
        EndpointHistory,
        endpoint_transitions,
        since_text,
        state_word,
        worst_state,
    )
    from gputui.core.servers.watch import (
        DERIVED_STATES,
        FAILING_STATES,
        ServerWatch,
        failing_servers,
        judge_once,
        read_metrics,
        server_reason,
    )

__all__ = [
    "BUSY",
    "CounterDelta",
    "DEFAULT_HISTORY_LEN",
    "DEFAULT_SPIN_AFTER_S",
    "DEFAULT_STALL_AFTER_S",
    "DEFAULT_STARTING_GRACE_S",
    "DERIVED_STATES",
    "DOWN",
    "ENGINE_SGLANG",
    "ENGINE_VLLM",
    "ERROR",
    "FAILING_STATES",
    "EndpointHistory",
    "JobFacts",
    "JobSpin",
    "METRICS_JSON_KEYS",
    "MetricsUnreadable",
    "SERVER_STATES",
    "STALLED",
    "STARTING",
    "ServerMetrics",
    "ServerState",
    "ServerStateTracker",
    "ServerWatch",
    "SpinTracker",
    "TIMEOUT",
    "UNHEALTHY",
    "UP",
    "failing_servers",
    "generation_delta",
    "endpoint_transitions",
    "job_facts",
    "judge_once",
    "metrics_json",
    "parse_server_metrics",
    "read_metrics",
    "server_reason",
    "since_text",
    "spinning_words",
    "state_word",
    "with_rate",
    "worst_state",
]

_HOMES = {
    "BUSY": "view",
    "CounterDelta": "metrics",
    "DEFAULT_HISTORY_LEN": "state",
    "DEFAULT_SPIN_AFTER_S": "spinning",
    "DEFAULT_STALL_AFTER_S": "state",
    "DEFAULT_STARTING_GRACE_S": "state",
    "DERIVED_STATES": "watch",
    "DOWN": "view",
    "ENGINE_SGLANG": "metrics",
    "ENGINE_VLLM": "metrics",
    "ERROR": "view",
    "FAILING_STATES": "watch",
    "EndpointHistory": "view",
    "JobFacts": "jobs",
    "JobSpin": "spinning",
    "METRICS_JSON_KEYS": "metrics",
    "MetricsUnreadable": "metrics",
    "SERVER_STATES": "state",
    "STALLED": "view",
    "STARTING": "view",
    "ServerMetrics": "metrics",
    "ServerState": "state",
    "ServerStateTracker": "state",
    "ServerWatch": "watch",
    "SpinTracker": "spinning",
    "TIMEOUT": "view",
    "UNHEALTHY": "view",
    "UP": "view",
    "failing_servers": "watch",
    "generation_delta": "metrics",
    "endpoint_transitions": "view",
    "job_facts": "jobs",
    "judge_once": "watch",
    "metrics_json": "metrics",
    "parse_server_metrics": "metrics",
    "read_metrics": "watch",
    "server_reason": "watch",
    "since_text": "view",
    "spinning_words": "spinning",
    "state_word": "view",
    "with_rate": "metrics",
    "worst_state": "view",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
