"""The server state machine on its own: each rule, its edges and its settings (real HTTP in integration)."""

from __future__ import annotations

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
from gputui.core.model import EndpointSample
from gputui.core.servers import SERVER_STATES, ServerMetrics, ServerStateTracker, parse_server_metrics

URL = "http://127.0.0.1:8000/health"
T0 = 1_700_000_000.0


def health(
    state: str | None, at: float, code: int | None = None, detail: str | None = None
) -> EndpointSample:
    return EndpointSample(url=URL, state=state, code=code, checked_at=at, detail=detail)


def metrics(
    at: float, tokens: float | None, running: int = 0, waiting: int = 0, throughput: float | None = None
) -> ServerMetrics:
    lines = [f"sglang:num_running_reqs {running}", f"sglang:num_queue_reqs {waiting}"]
    if tokens is not None:
        lines.append(f"sglang:generation_tokens_total {tokens}")
    if throughput is not None:
        lines.append(f"sglang:gen_throughput {throughput}")
    return parse_server_metrics("\n".join(lines) + "\n", at)


def test_the_vocabulary_is_one_list_with_the_collectors_five() -> None:
    assert set(SERVER_STATES) == {
        ENDPOINT_STATE_STARTING,
        ENDPOINT_STATE_UP,
        ENDPOINT_STATE_BUSY,
        ENDPOINT_STATE_STALLED,
        ENDPOINT_STATE_UNHEALTHY,
        ENDPOINT_STATE_DOWN,
        ENDPOINT_STATE_TIMEOUT,
        ENDPOINT_STATE_ERROR,
    }
    assert len(SERVER_STATES) == 8


def test_nothing_probed_yet() -> None:
    tracker = ServerStateTracker()
    assert tracker.current.state is None
    state = tracker.update(health(None, T0), None, None, T0)
    assert (state.state, state.reason, state.since) == (None, "not probed yet", None)


def test_stalled_needs_pending_work_and_a_flat_counter_for_the_whole_window() -> None:
    tracker = ServerStateTracker(stall_after_s=30.0)
    t = T0
    tracker.update(health(ENDPOINT_STATE_UP, t), metrics(t, 1000.0), None, t)
    # Idle with a flat counter: nothing to generate, nothing stalled.
    for _ in range(10):
        t += 5
        state = tracker.update(health(ENDPOINT_STATE_UP, t), metrics(t, 1000.0), None, t)
    assert state.state == ENDPOINT_STATE_UP
    assert state.stalled_for_s is None
    # Requests arrive; the counter stays flat. The window starts when work arrived, not when tokens stopped.
    started = t + 5
    while t < started + 25:
        t += 5
        state = tracker.update(
            health(ENDPOINT_STATE_UP, t), metrics(t, 1000.0, running=2, waiting=3), None, t
        )
        assert state.state == ENDPOINT_STATE_UP, t - started
    t += 5
    state = tracker.update(health(ENDPOINT_STATE_UP, t), metrics(t, 1000.0, running=2, waiting=3), None, t)
    assert state.state == ENDPOINT_STATE_STALLED
    assert state.stalled_for_s == 30.0
    assert state.since == t
    assert state.previous_state == ENDPOINT_STATE_UP
    assert state.reason == "stalled: 2 running, 3 waiting, no token generated for 30 s (health UP)"
    # One token later it serves again.
    t += 5
    state = tracker.update(health(ENDPOINT_STATE_UP, t), metrics(t, 1040.0, running=2, waiting=3), None, t)
    assert state.state == ENDPOINT_STATE_UP
    assert state.previous_state == ENDPOINT_STATE_STALLED
    assert state.reason == "serving: 2 running, 3 waiting, 8 tokens/s"


def test_waiting_alone_with_nothing_running_can_stall() -> None:
    tracker = ServerStateTracker(stall_after_s=10.0)
    for i in range(4):
        state = tracker.update(
            health(ENDPOINT_STATE_UP, T0 + 5 * i), metrics(T0 + 5 * i, 0.0, waiting=3), None, T0 + 5 * i
        )
    assert state.state == ENDPOINT_STATE_STALLED
    assert state.reason.startswith("stalled: 0 running, 3 waiting")


def test_the_engines_own_throughput_moving_is_progress() -> None:
    """sglang counts tokens as outputs reach the tokenizer; its scheduler's figure moves while it decodes."""
    tracker = ServerStateTracker(stall_after_s=10.0)
    for i in range(6):
        t = T0 + 5 * i
        state = tracker.update(
            health(ENDPOINT_STATE_UP, t), metrics(t, 500.0, running=4, throughput=30.0 + i), None, t
        )
    assert state.state == ENDPOINT_STATE_UP
    # The figure freezes (the scheduler stopped logging): stalled after the window.
    for i in range(6, 9):
        t = T0 + 5 * i
        state = tracker.update(
            health(ENDPOINT_STATE_UP, t), metrics(t, 500.0, running=4, throughput=35.0), None, t
        )
    assert state.state == ENDPOINT_STATE_STALLED


def test_a_counter_reset_restarts_the_window() -> None:
    tracker = ServerStateTracker(stall_after_s=10.0)
    tracker.update(health(ENDPOINT_STATE_UP, T0), metrics(T0, 9000.0, running=1), None, T0)
    tracker.update(health(ENDPOINT_STATE_UP, T0 + 5), metrics(T0 + 5, 9000.0, running=1), None, T0 + 5)
    state = tracker.update(
        health(ENDPOINT_STATE_UP, T0 + 10), metrics(T0 + 10, 0.0, running=1), None, T0 + 10
    )
    assert state.state == ENDPOINT_STATE_UP
    assert state.stalled_for_s == 0.0
    assert state.metrics is not None
    assert state.metrics.generation_tokens_per_s == 0.0


def test_busy_when_health_fails_but_tokens_advance_and_not_after() -> None:
    tracker = ServerStateTracker(stall_after_s=20.0)
    t = T0
    tracker.update(health(ENDPOINT_STATE_UP, t), metrics(t, 0.0, running=1), 3600.0, t)
    for failing, code in ((ENDPOINT_STATE_UNHEALTHY, 503), (ENDPOINT_STATE_TIMEOUT, None)):
        t += 5
        state = tracker.update(health(failing, t, code), metrics(t, t - T0, running=1), 3600.0, t)
        assert state.state == ENDPOINT_STATE_BUSY
    assert state.reason == "busy: health TIMEOUT but generating 1 tokens/s; not dead, do not kill"
    # Tokens stop but work is still there: BUSY for the rest of the window, then STALLED.
    last = t - T0
    states = []
    for _ in range(5):
        t += 5
        states.append(
            tracker.update(
                health(ENDPOINT_STATE_UNHEALTHY, t, 503), metrics(t, last, running=1), 3600.0, t
            ).state
        )
    assert states == [ENDPOINT_STATE_BUSY] * 3 + [ENDPOINT_STATE_STALLED] * 2
    # With nothing pending, a failing health with a flat counter is just UNHEALTHY.
    t += 5
    state = tracker.update(health(ENDPOINT_STATE_UNHEALTHY, t, 503), metrics(t, last), 3600.0, t)
    assert state.state == ENDPOINT_STATE_UNHEALTHY
    assert state.reason == "HTTP 503"


def test_errors_and_refusals_are_never_busy() -> None:
    for failing in (ENDPOINT_STATE_ERROR, ENDPOINT_STATE_DOWN):
        tracker = ServerStateTracker()
        tracker.update(health(ENDPOINT_STATE_UP, T0), metrics(T0, 0.0, running=1), None, T0)
        state = tracker.update(
            health(failing, T0 + 5, detail="x"), metrics(T0 + 5, 500.0, running=1), None, T0 + 5
        )
        assert state.state == failing


def test_starting_while_the_launcher_is_young_and_has_not_served() -> None:
    tracker = ServerStateTracker(starting_grace_s=600.0)
    state = tracker.update(health(ENDPOINT_STATE_DOWN, T0, detail="connection refused"), None, 5.0, T0)
    assert state.state == ENDPOINT_STATE_STARTING
    assert state.reason == "starting: connection refused, launcher 5 s old"
    state = tracker.update(health(ENDPOINT_STATE_UNHEALTHY, T0 + 60, 503), None, 65.0, T0 + 60)
    assert state.state == ENDPOINT_STATE_STARTING
    assert state.since == T0
    # Not 503: a server that answers 500 while loading is unhealthy, not starting.
    state = tracker.update(health(ENDPOINT_STATE_UNHEALTHY, T0 + 70, 500), None, 75.0, T0 + 70)
    assert state.state == ENDPOINT_STATE_UNHEALTHY
    state = tracker.update(health(ENDPOINT_STATE_UP, T0 + 80), None, 85.0, T0 + 80)
    assert state.state == ENDPOINT_STATE_UP
    assert state.previous_state == ENDPOINT_STATE_UNHEALTHY
    # Once it has served, the same launcher refusing is DOWN, however young.
    state = tracker.update(health(ENDPOINT_STATE_DOWN, T0 + 90), None, 95.0, T0 + 90)
    assert state.state == ENDPOINT_STATE_DOWN
    # A new launcher (younger than the time since the last one started) may load again.
    state = tracker.update(health(ENDPOINT_STATE_DOWN, T0 + 100), None, 3.0, T0 + 100)
    assert state.state == ENDPOINT_STATE_STARTING


def test_a_warm_up_before_the_first_answer_is_starting_not_stalled() -> None:
    """A warm-up request queued while the server compiles: 503 and a flat counter, but it never served."""
    tracker = ServerStateTracker(stall_after_s=10.0, starting_grace_s=60.0)
    states = []
    for i in range(14):
        t = T0 + 5 * i
        states.append(
            tracker.update(
                health(ENDPOINT_STATE_UNHEALTHY, t, 503), metrics(t, 0.0, running=1), 30.0 + 5 * i, t
            ).state
        )
    # Young and never served: starting; past the grace, the same picture is a stall.
    assert states == [ENDPOINT_STATE_STARTING] * 6 + [ENDPOINT_STATE_STALLED] * 8


def test_starting_ends_with_the_grace_and_needs_a_known_launcher() -> None:
    tracker = ServerStateTracker(starting_grace_s=600.0)
    assert tracker.update(health(ENDPOINT_STATE_DOWN, T0), None, 599.0, T0).state == ENDPOINT_STATE_STARTING
    assert (
        tracker.update(health(ENDPOINT_STATE_DOWN, T0 + 2), None, 601.0, T0 + 2).state == ENDPOINT_STATE_DOWN
    )
    unknown = ServerStateTracker()
    assert unknown.update(health(ENDPOINT_STATE_DOWN, T0), None, None, T0).state == ENDPOINT_STATE_DOWN
    never = ServerStateTracker(starting_grace_s=0.0)
    assert never.update(health(ENDPOINT_STATE_DOWN, T0), None, 0.5, T0).state == ENDPOINT_STATE_DOWN


def test_blank_metrics_leave_the_state_to_health_and_say_why() -> None:
    tracker = ServerStateTracker(stall_after_s=10.0)
    for i in range(4):
        t = T0 + 5 * i
        tracker.update(health(ENDPOINT_STATE_UP, t), metrics(t, 100.0, running=2), None, t)
    assert tracker.current.state == ENDPOINT_STATE_STALLED
    state = tracker.update(health(ENDPOINT_STATE_UP, T0 + 20), None, None, T0 + 20, metrics_error="HTTP 404")
    assert state.state == ENDPOINT_STATE_UP
    assert state.metrics is None
    assert state.reason == "health UP; metrics: HTTP 404"
    # Failing health with blank metrics is never BUSY, however fast tokens went before.
    busy = ServerStateTracker()
    busy.update(health(ENDPOINT_STATE_UP, T0), metrics(T0, 0.0, running=1), None, T0)
    busy.update(
        health(ENDPOINT_STATE_UNHEALTHY, T0 + 5, 503), metrics(T0 + 5, 900.0, running=1), None, T0 + 5
    )
    assert busy.current.state == ENDPOINT_STATE_BUSY
    state = busy.update(health(ENDPOINT_STATE_UNHEALTHY, T0 + 10, 503), None, None, T0 + 10, "timed out")
    assert (state.state, state.reason) == (ENDPOINT_STATE_UNHEALTHY, "HTTP 503; metrics: timed out")


def test_a_repeated_reading_is_taken_once() -> None:
    tracker = ServerStateTracker(stall_after_s=10.0)
    first = metrics(T0, 100.0, running=1)
    for i in range(5):  # snapshots repeat the latest reading while the server is not read again
        state = tracker.update(health(ENDPOINT_STATE_UP, T0 + i), first, None, T0 + i)
    assert state.state == ENDPOINT_STATE_UP
    assert state.tokens_per_s_history == (None,)
    second = metrics(T0 + 5, 150.0, running=1)
    state = tracker.update(health(ENDPOINT_STATE_UP, T0 + 5), second, None, T0 + 5)
    state = tracker.update(health(ENDPOINT_STATE_UP, T0 + 6), first, None, T0 + 6)  # an older one: ignored
    assert state.metrics is not None
    assert state.metrics.sampled_at == T0 + 5
    assert state.tokens_per_s_history == (None, 10.0)


def test_the_history_is_bounded_and_marks_blank_metrics() -> None:
    tracker = ServerStateTracker(history_len=4)
    for i in range(6):
        t = T0 + 10 * i
        tracker.update(health(ENDPOINT_STATE_UP, t), metrics(t, 100.0 * i), None, t)
    tracker.update(health(ENDPOINT_STATE_UP, T0 + 60), None, None, T0 + 60)
    tracker.update(health(ENDPOINT_STATE_UP, T0 + 60), None, None, T0 + 61)  # the same probe again
    assert tracker.current.tokens_per_s_history == (10.0, 10.0, 10.0, None)


def test_reasons_are_visible_text() -> None:
    tracker = ServerStateTracker()
    state = tracker.update(health(ENDPOINT_STATE_ERROR, T0, detail="bad \x1b[2J\u202e"), None, None, T0)
    assert "\x1b" not in state.reason
    assert "\u202e" not in state.reason
    assert state.reason.startswith("bad \\x1b[2J")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stall_after_s": 0}, "stall window"),
        ({"stall_after_s": float("nan")}, "stall window"),
        ({"stall_after_s": float("inf")}, "stall window"),
        ({"starting_grace_s": -1}, "starting grace"),
        ({"history_len": 0}, "history length"),
    ],
)
def test_bad_settings_are_one_clear_error(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerStateTracker(**kwargs)  # type: ignore[arg-type]
