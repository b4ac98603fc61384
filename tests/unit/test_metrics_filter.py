"""The collector's cut of a /metrics body: only the names gputui reads, whole lines, bounded."""

from __future__ import annotations

from gputui.agent.servers.metrics_filter import (
    METRICS_FILTERED_CAP_BYTES,
    METRICS_MAX_LINE_BYTES,
    METRICS_MAX_SERIES_PER_NAME,
    METRICS_NAMES,
    METRICS_VLLM_GENERATION_TOKENS,
    METRICS_VLLM_RUNNING,
    METRICS_VLLM_WAITING,
    filter_metrics,
    metric_line_name,
    select_metric_lines,
)
from tests.integration.metrics_server import _DEFAULTS, render_metrics

RUNNING = 'vllm:num_requests_running{engine="0",model_name="m"} 2.0'
WAITING = 'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0'
TOKENS = 'vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0'


def _body(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def test_a_real_body_shrinks_to_the_named_series_and_their_type_lines() -> None:
    body = render_metrics(dict(_DEFAULTS, running=2, waiting=3, kv_cache_usage=0.5), [1234.0])
    assert len(body) > 40_000  # histogram bulk, as a real server sends
    text, dropped = filter_metrics(body)
    assert dropped == []
    assert len(text) < 1024
    lines = text.decode().splitlines()
    samples = [line for line in lines if not line.startswith("#")]
    assert {line.split("{")[0] for line in samples} == {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
    }
    assert "# TYPE vllm:generation_tokens_total counter" in lines
    assert "# TYPE vllm:num_requests_running gauge" in lines
    assert not any(line.startswith("# HELP") for line in lines)
    # Every kept line is a whole line of the original body.
    original = set(body.decode().splitlines())
    assert set(lines) <= original


def test_names_that_only_share_a_prefix_are_not_kept() -> None:
    body = _body(RUNNING, 'vllm:num_requests_running_max{engine="0"} 9', "vllm:num_requests_runningx 1")
    text, _ = filter_metrics(body)
    assert text.decode().splitlines() == [RUNNING]


def test_crlf_blanks_and_leading_spaces_are_tolerated() -> None:
    body = (
        b"\r\n  "
        + RUNNING.encode()
        + b"\r\n\r\n# TYPE vllm:num_requests_waiting gauge\r\n"
        + WAITING.encode()
    )
    groups, dropped = select_metric_lines(body)
    assert dropped == []
    assert groups[METRICS_VLLM_RUNNING] == [RUNNING.encode()]
    assert groups[METRICS_VLLM_WAITING] == [b"# TYPE vllm:num_requests_waiting gauge", WAITING.encode()]


def test_an_openmetrics_type_line_counts_for_its_total_series() -> None:
    groups, _ = select_metric_lines(_body("# TYPE vllm:generation_tokens counter", TOKENS))
    assert groups[METRICS_VLLM_GENERATION_TOKENS] == [
        b"# TYPE vllm:generation_tokens counter",
        TOKENS.encode(),
    ]


def test_a_cut_body_loses_its_partial_line_and_the_name_being_read() -> None:
    body = _body(RUNNING, WAITING, TOKENS)
    cut = body[: body.index(b"1234.0") + 2]  # "... 12": would parse as 12 tokens
    text, dropped = filter_metrics(cut, truncated=True)
    assert dropped == [METRICS_VLLM_GENERATION_TOKENS]  # the partial line is gone, and said so
    assert text.decode().splitlines() == [RUNNING, WAITING]  # its name closed the block before it
    # Cut inside a name: the line before it may have more series of its name after it.
    cut_in_name = body[: body.index(b"vllm:generation") + len(b"vllm:gen")]
    text, dropped = filter_metrics(cut_in_name, truncated=True)
    assert (text.decode().splitlines(), dropped) == ([RUNNING], [METRICS_VLLM_WAITING])
    # Cut right after a whole line of the counter: its next series may be past the cut.
    engines = _body(RUNNING, TOKENS, 'vllm:generation_tokens_total{engine="1",model_name="m"} 5.0')
    cut_after_line = engines[: engines.index(b"1234.0") + len(b"1234.0\n")]
    text, dropped = filter_metrics(cut_after_line, truncated=True)
    assert dropped == [METRICS_VLLM_GENERATION_TOKENS]
    assert text.decode().splitlines() == [RUNNING]
    # A block that another metric's line closed is whole.
    closed = _body(TOKENS, "vllm:other 1", "vllm:other 2")
    text, dropped = filter_metrics(closed[:-3], truncated=True)
    assert (text.decode().splitlines(), dropped) == ([TOKENS], [])


def test_an_untruncated_body_keeps_a_last_line_without_a_line_break() -> None:
    text, dropped = filter_metrics(RUNNING.encode())
    assert (text.decode().splitlines(), dropped) == ([RUNNING], [])


def test_an_over_long_line_drops_its_name_whole() -> None:
    long_label = "x" * METRICS_MAX_LINE_BYTES
    body = _body(RUNNING, f'vllm:num_requests_running{{engine="1",model_name="{long_label}"}} 1', WAITING)
    text, dropped = filter_metrics(body)
    assert dropped == [METRICS_VLLM_RUNNING]
    assert text.decode().splitlines() == [WAITING]


def test_too_many_series_drop_the_name() -> None:
    many = [f'vllm:num_requests_running{{engine="{i}"}} 1' for i in range(METRICS_MAX_SERIES_PER_NAME + 1)]
    text, dropped = filter_metrics(_body(*many, WAITING))
    assert dropped == [METRICS_VLLM_RUNNING]
    assert text.decode().splitlines() == [WAITING]
    exactly = many[:METRICS_MAX_SERIES_PER_NAME]
    text, dropped = filter_metrics(_body(*exactly))
    assert dropped == []
    assert len(text.splitlines()) == METRICS_MAX_SERIES_PER_NAME


def test_the_output_cap_drops_whole_names() -> None:
    label = "y" * 600
    lines = [f'{name}{{engine="{i}",model_name="{label}"}} 1' for name in METRICS_NAMES for i in range(8)]
    text, dropped = filter_metrics(_body(*lines))
    assert len(text) <= METRICS_FILTERED_CAP_BYTES
    assert dropped  # some names did not fit
    kept = {line.split(b"{")[0].decode() for line in text.splitlines()}
    assert kept.isdisjoint(dropped)
    assert len(kept) + len(dropped) == len(METRICS_NAMES)
    for name in kept:  # a kept name has all of its series
        assert sum(line.startswith(name.encode() + b"{") for line in text.splitlines()) == 8


def test_hostile_bytes_never_break_the_filter() -> None:
    body = (
        b"\x00\xff\xfe garbage\n# TYPE\n#\n# TYPE vllm:num_requests_running\n{}\n"
        + RUNNING.encode()
        + b"\x1b[2J\n"
        + b"vllm:num_requests_waiting\xff 1\n"
    )
    text, dropped = filter_metrics(body)
    assert dropped == []
    assert text.splitlines() == [RUNNING.encode() + b"\x1b[2J", b"vllm:num_requests_waiting\xff 1"]


def test_metric_line_name() -> None:
    assert metric_line_name(b'  vllm:a_b{x="1"} 2') == b"vllm:a_b"
    assert metric_line_name(b"sglang:token_usage 0.5") == b"sglang:token_usage"
    assert metric_line_name(b"# TYPE x gauge") is None
    assert metric_line_name(b"") is None
    assert metric_line_name(b"9abc 1") is None
