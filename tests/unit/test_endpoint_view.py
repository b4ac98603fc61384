"""servers.view: state changes as lines, the per-URL history, labels."""

from __future__ import annotations

import subprocess
import sys
import time

from gputui.core.model import EndpointSample
from gputui.core.servers import EndpointHistory, endpoint_transitions, since_text, state_word, worst_state
from gputui.core.text import clock_time

URL = "http://127.0.0.1:30000/health"
OTHER = "http://127.0.0.1:8000/health"
T0 = 1_800_000_000.0


def sample(url: str = URL, state: str | None = "UP", **fields: object) -> EndpointSample:
    defaults: dict[str, object] = {"code": 200 if state == "UP" else None, "checked_at": T0, "since": T0}
    defaults.update(fields)
    return EndpointSample(url=url, state=state, **defaults)  # type: ignore[arg-type]


def test_up_to_unhealthy_names_the_code() -> None:
    lines = endpoint_transitions([sample()], [sample(state="UNHEALTHY", code=503)])
    assert lines == [f"{URL} UP → UNHEALTHY (503)"]


def test_failures_without_a_code_name_the_detail() -> None:
    prev = [sample(state="UNHEALTHY", code=503)]
    assert endpoint_transitions(prev, [sample(state="DOWN", detail="connection refused")]) == [
        f"{URL} UNHEALTHY → DOWN (connection refused)"
    ]
    assert endpoint_transitions([sample()], [sample(state="TIMEOUT", detail="no response within 30s")]) == [
        f"{URL} UP → TIMEOUT (no response within 30s)"
    ]
    assert endpoint_transitions([sample()], [sample(state="ERROR", code=404, detail="HTTP 404")]) == [
        f"{URL} UP → ERROR (404)"
    ]


def test_recovery_has_no_reason() -> None:
    assert endpoint_transitions([sample(state="DOWN")], [sample()]) == [f"{URL} DOWN → UP"]


def test_same_state_is_silent_even_when_details_change() -> None:
    prev = [sample(state="UNHEALTHY", code=503, consecutive_failures=1)]
    cur = [sample(state="UNHEALTHY", code=500, consecutive_failures=2, checked_at=T0 + 5)]
    assert endpoint_transitions(prev, cur) == []
    assert endpoint_transitions([], []) == []


def test_first_results_only_speak_when_not_up() -> None:
    cur = [sample(), sample(OTHER, state="DOWN", detail="connection refused")]
    assert endpoint_transitions([], cur) == [f"{OTHER} is DOWN (connection refused)"]
    # Not probed yet, then a first result: same rule.
    assert endpoint_transitions([sample(state=None)], [sample()]) == []
    assert endpoint_transitions([sample(state=None)], [sample(state="UNHEALTHY", code=503)]) == [
        f"{URL} is UNHEALTHY (503)"
    ]
    assert endpoint_transitions([], [sample(state=None)]) == []


def test_removed_endpoints_are_reported_once() -> None:
    prev = [sample(), sample(OTHER, state="DOWN")]
    assert endpoint_transitions(prev, [sample()]) == [f"{OTHER} no longer probed (was DOWN)"]
    assert endpoint_transitions([sample(state=None)], []) == []


def test_several_changes_in_order() -> None:
    prev = [sample(), sample(OTHER)]
    cur = [sample(state="UNHEALTHY", code=503), sample(OTHER, state="TIMEOUT", detail="slow")]
    assert endpoint_transitions(prev, cur) == [
        f"{URL} UP → UNHEALTHY (503)",
        f"{OTHER} UP → TIMEOUT (slow)",
    ]


def test_hostile_strings_are_made_visible_and_short() -> None:
    url = "http://127.0.0.1:1/\x1b]0;pwned\x07[bold]x[/]\u202e" + "a" * 500
    detail = "\x1b[2J\x9bboom\nline" + "b" * 500
    lines = endpoint_transitions([sample(url)], [sample(url, state="TIMEOUT", detail=detail)])
    assert len(lines) == 1
    line = lines[0]
    assert "\x1b" not in line
    assert "\x9b" not in line
    assert "\u202e" not in line
    assert "\n" not in line
    assert "\\x1b]0;pwned\\x07[bold]x[/]\\u202e" in line
    assert "(\\x1b[2J\\x9bboom\\nline" in line
    assert len(line) < 100 + 120 + 40


def test_worst_state_ranks_down_over_everything() -> None:
    assert worst_state([]) is None
    assert worst_state([sample()]) == "UP"
    assert worst_state([sample(), sample(OTHER, state=None)]) is None
    assert worst_state([sample(state="ERROR"), sample(OTHER, state="UNHEALTHY")]) == "UNHEALTHY"
    assert worst_state([sample(state="TIMEOUT"), sample(OTHER, state="DOWN")]) == "DOWN"
    assert worst_state([sample(state="UP"), sample(OTHER, state="WEIRD")]) == "WEIRD"


def test_since_text_names_the_code_and_local_time() -> None:
    since = T0 - 125
    expected_clock = time.strftime("%H:%M:%S", time.localtime(since))
    unhealthy = sample(state="UNHEALTHY", code=503, since=since)
    assert since_text(unhealthy, T0) == f"503 since {expected_clock}"
    assert since_text(sample(state="DOWN", since=since), T0) == f"DOWN since {expected_clock}"
    assert since_text(sample(state=None), T0) == "not probed yet"
    assert since_text(sample(state="UP", since=None), T0) == "UP"
    assert state_word(sample(state="ERROR", code=404)) == "404"
    assert state_word(sample(state="\x1b[31mX")) == "\\x1b[31mX"
    # Older than a day: the date is part of it.
    assert clock_time(T0 - 3 * 86400, T0).startswith(
        time.strftime("%Y-%m-%d", time.localtime(T0 - 3 * 86400))
    )


def test_history_records_each_probe_once_and_forgets_removed_urls() -> None:
    history = EndpointHistory(max_len=3)
    history.update([sample(checked_at=None, state=None)])
    assert history.states(URL) == ()
    history.update([sample(checked_at=T0)])
    history.update([sample(checked_at=T0)])  # the same probe in a second snapshot
    history.update([sample(state="UNHEALTHY", code=503, checked_at=T0 + 5), sample(OTHER, checked_at=T0)])
    assert history.states(URL) == ("UP", "UNHEALTHY")
    for step in range(3):
        history.update([sample(state="DOWN", checked_at=T0 + 10 + step)])
    assert history.states(URL) == ("DOWN", "DOWN", "DOWN")
    assert history.as_dict() == {URL: ("DOWN", "DOWN", "DOWN")}  # OTHER was not in the last snapshot
    assert history.states("http://unknown/") == ()


def test_no_textual_or_rich_import() -> None:
    code = "import sys, gputui.core.servers.view; print('textual' in sys.modules, 'rich' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False False"


def test_history_keeps_tokens_per_s_once_per_metrics_reading() -> None:
    from gputui.core.model import EndpointSample
    from gputui.core.servers import EndpointHistory

    url = "http://127.0.0.1:30000/health"
    kept = EndpointHistory(max_len=3)
    for at, rate in ((1.0, None), (1.0, None), (2.0, 50.0), (3.0, 0.0), (4.0, 10.0)):
        metrics = {"generation_tokens_per_s": rate}
        kept.update([EndpointSample(url=url, state="UP", checked_at=at, metrics_at=at, metrics=metrics)])
    assert kept.tokens_per_s() == {url: (50.0, 0.0, 10.0)}
    kept.update([])
    assert kept.tokens_per_s() == {}
