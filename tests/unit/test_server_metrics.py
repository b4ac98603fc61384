"""A server's figures from its Prometheus text: the parser's gaps closed, the engines' meanings kept."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.agent.servers.metrics_filter import (
    METRICS_BODY_CAP_BYTES,
    METRICS_NAMES,
    METRICS_VLLM_GENERATION_TOKENS,
    METRICS_VLLM_KV_CACHE_USAGE,
    METRICS_VLLM_RUNNING,
    filter_metrics,
)
from gputui.core.servers import (
    METRICS_JSON_KEYS,
    MetricsUnreadable,
    ServerMetrics,
    generation_delta,
    metrics_json,
    parse_server_metrics,
    with_rate,
)
from tests.integration.metrics_server import _DEFAULTS, render_metrics

VLLM = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0
vllm:generation_tokens_total{engine="1",model_name="m"} 500.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 4.0
"""


def _replace(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_vllm_engines_add_up_and_the_fullest_cache_counts() -> None:
    metrics = parse_server_metrics(VLLM, 100.0)
    assert metrics.engine == "vllm"
    assert (metrics.running, metrics.waiting) == (3, 3)
    assert metrics.kv_cache_usage == 0.75
    assert metrics.generation_tokens_total == 1500
    assert metrics.preemptions_total == 4
    assert metrics.generation_tokens_per_s is None  # one reading has no rate
    assert metrics.unreadable == ()


def test_the_older_vllm_cache_name_is_read_and_the_newer_preferred() -> None:
    old = VLLM.replace("kv_cache_usage_perc", "gpu_cache_usage_perc")
    assert parse_server_metrics(old, 1.0).kv_cache_usage == 0.75
    both = VLLM + 'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.1\n'
    assert parse_server_metrics(both, 1.0).kv_cache_usage == 0.75


def test_sglang_ranks_of_one_group_count_once_and_groups_add_up() -> None:
    body = render_metrics(
        dict(
            _DEFAULTS,
            engine="sglang",
            engines=2,
            ranks=4,
            running=5,
            waiting=2,
            kv_cache_usage=0.5,
            throughput=40.0,
        ),
        [700.0, 300.0],
    )
    metrics = parse_server_metrics(body.decode(), 1.0)
    assert metrics.engine == "sglang"
    assert (metrics.running, metrics.waiting) == (10, 4)  # 2 data-parallel groups, not 8 ranks
    assert metrics.kv_cache_usage == 0.5
    assert metrics.generation_tokens_total == 1000
    assert metrics.engine_tokens_per_s == 80.0
    assert metrics.preemptions_total is None  # sglang has no such figure


def test_a_whole_body_parses_like_its_filtered_cut() -> None:
    body = render_metrics(dict(_DEFAULTS, running=2, waiting=1, kv_cache_usage=0.3), [4321.0])
    text, dropped = filter_metrics(body)
    assert parse_server_metrics(body.decode(), 5.0) == parse_server_metrics(text.decode(), 5.0, dropped)


def test_a_malformed_line_blanks_only_its_metric() -> None:
    text = _replace(
        VLLM,
        'vllm:num_requests_running{engine="1",model_name="m"} 1.0',
        'vllm:num_requests_running{engine="1" model_name="m"} 1.0',
    )
    metrics = parse_server_metrics(text, 1.0)
    assert metrics.running is None  # one engine unreadable: the sum would be wrong
    assert metrics.waiting == 3
    assert metrics.generation_tokens_total == 1500
    assert metrics.unreadable == ((METRICS_VLLM_RUNNING, "malformed"),)


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "1e400", "-1"])
def test_nan_infinite_and_negative_figures_blank_their_metric(value: str) -> None:
    text = _replace(
        VLLM,
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75',
        f'vllm:kv_cache_usage_perc{{engine="1",model_name="m"}} {value}',
    )
    metrics = parse_server_metrics(text, 1.0)
    assert metrics.kv_cache_usage is None
    assert metrics.unreadable[0][0] == METRICS_VLLM_KV_CACHE_USAGE
    assert metrics.running == 3


def test_a_duplicated_series_blanks_its_metric() -> None:
    line = 'vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0\n'
    metrics = parse_server_metrics(_replace(VLLM, line, line + line), 1.0)
    assert metrics.generation_tokens_total is None
    assert metrics.generation_tokens_series == ()
    assert metrics.unreadable == ((METRICS_VLLM_GENERATION_TOKENS, "duplicated series"),)
    # The same labels in another order are the same series.
    swapped = 'vllm:generation_tokens_total{model_name="m",engine="0"} 1.0\n'
    assert parse_server_metrics(_replace(VLLM, line, line + swapped), 1.0).generation_tokens_total is None


def test_a_usage_fraction_out_of_range_is_unknown() -> None:
    assert parse_server_metrics(VLLM.replace(" 0.75", " 1.0000001"), 1.0).kv_cache_usage == 1.0
    percent = parse_server_metrics(VLLM.replace(" 0.75", " 75"), 1.0)
    assert percent.kv_cache_usage is None
    assert percent.unreadable == ((METRICS_VLLM_KV_CACHE_USAGE, "not a fraction: 75.0"),)


def test_a_counter_renamed_by_its_type_line_is_still_read() -> None:
    text = "# TYPE vllm:num_requests_running counter\nvllm:num_requests_running 7\n"
    assert parse_server_metrics(text, 1.0).running == 7  # the parser calls it ..._total


def test_a_type_line_without_samples_is_not_a_zero() -> None:
    text = VLLM + "# TYPE vllm:num_preemptions_total counter\n"
    text = text.replace('vllm:num_preemptions_total{engine="0",model_name="m"} 4.0\n', "")
    assert parse_server_metrics(text, 1.0).preemptions_total is None


def test_names_the_collector_dropped_are_unknown() -> None:
    metrics = parse_server_metrics(
        VLLM.replace("vllm:num_requests_running", "vllm:x"),
        1.0,
        dropped=[METRICS_VLLM_RUNNING, "something:else"],
    )
    assert metrics.running is None
    assert metrics.unreadable == ((METRICS_VLLM_RUNNING, "over a size cap"),)


def test_a_text_over_the_cap_is_cut_as_the_collector_would() -> None:
    filler = "vllm:other_bucket 1\n" * (METRICS_BODY_CAP_BYTES // 20 + 10)
    with pytest.raises(MetricsUnreadable, match="no metrics of a known inference server"):
        parse_server_metrics(filler + VLLM, 1.0)
    metrics = parse_server_metrics(VLLM + filler, 1.0)
    assert metrics.running == 3


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no metrics of a known inference server"),
        ("<html><body>502 Bad Gateway</body></html>\n", "no metrics of a known inference server"),
        ("process_cpu_seconds_total 12.5\n", "no metrics of a known inference server"),
        ("vllm:num_requests_running{ 1\n", "vllm metrics unreadable: vllm:num_requests_running: malformed"),
        ("sglang:token_usage NaN\n", "sglang metrics unreadable: sglang:token_usage: not a usable figure"),
    ],
)
def test_nothing_usable_is_one_clear_reason(text: str, reason: str) -> None:
    with pytest.raises(MetricsUnreadable, match=reason):
        parse_server_metrics(text, 1.0)


def test_hostile_label_values_are_only_keys() -> None:
    text = 'vllm:generation_tokens_total{engine="\\x1b]0;t\\x07",model_name="[bold]x\\n"} 5\n'
    metrics = parse_server_metrics(text, 1.0)
    assert metrics.generation_tokens_total == 5
    assert metrics.to_dict() == {
        "engine": "vllm",
        "running": None,
        "waiting": None,
        "kv_cache_usage": None,
        "generation_tokens_per_s": None,
    }


def _reading(at: float, **series: float) -> ServerMetrics:
    lines = [f'vllm:generation_tokens_total{{engine="{engine}"}} {value}' for engine, value in series.items()]
    return parse_server_metrics("\n".join(lines) + "\n", at)


def test_the_rate_comes_from_counter_deltas() -> None:
    first = _reading(100.0, e0=1000.0, e1=500.0)
    second = with_rate(first, _reading(105.0, e0=1300.0, e1=700.0))
    assert second.generation_tokens_per_s == pytest.approx(100.0)
    delta = generation_delta(first, second)
    assert delta is not None
    assert not delta.reset
    assert delta.tokens == 500.0


def test_a_reset_counts_the_new_value_never_a_negative_rate() -> None:
    before = _reading(100.0, e0=100_000.0, e1=50_000.0)
    restarted = with_rate(before, _reading(110.0, e0=40.0, e1=51_000.0))
    delta = generation_delta(before, restarted)
    assert delta is not None
    assert delta.reset
    assert restarted.generation_tokens_per_s == pytest.approx((40.0 + 1000.0) / 10.0)


def test_a_new_series_counts_from_its_first_reading() -> None:
    one = _reading(100.0, e0=1000.0)
    two = with_rate(one, _reading(110.0, e0=1100.0, e1=9_999_999.0))
    assert two.generation_tokens_per_s == pytest.approx(10.0)


def test_no_rate_without_an_earlier_reading_of_the_same_engine_or_a_later_time() -> None:
    first = _reading(100.0, e0=1.0)
    assert with_rate(None, first).generation_tokens_per_s is None
    assert with_rate(first, _reading(100.0, e0=5.0)).generation_tokens_per_s is None
    assert with_rate(first, _reading(90.0, e0=5.0)).generation_tokens_per_s is None
    sglang = parse_server_metrics("sglang:generation_tokens_total 50\n", 110.0)
    assert with_rate(first, sglang).generation_tokens_per_s is None
    no_counter = parse_server_metrics("vllm:num_requests_running 1\n", 110.0)
    assert with_rate(first, no_counter).generation_tokens_per_s is None


def test_the_json_shape_is_exactly_the_documented_one() -> None:
    first = parse_server_metrics(VLLM, 100.0)
    later = with_rate(first, parse_server_metrics(VLLM.replace("1000.0", "1123.0"), 110.0))
    assert list(later.to_dict()) == list(METRICS_JSON_KEYS)
    assert later.to_dict() == {
        "engine": "vllm",
        "running": 3,
        "waiting": 3,
        "kv_cache_usage": 0.75,
        "generation_tokens_per_s": 12.3,
    }
    assert metrics_json(None) == dict.fromkeys(METRICS_JSON_KEYS)
    assert metrics_json(later) == later.to_dict()


_NAME = st.sampled_from(METRICS_NAMES)
_TAIL = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_LINE = st.one_of(
    _TAIL,
    st.builds(lambda n, t: n + t, _NAME, _TAIL),
    st.builds(lambda n, t: f"# TYPE {n} {t}", _NAME, _TAIL),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=12))
def test_any_text_gives_a_reading_or_one_reason(lines: list[str]) -> None:
    try:
        metrics = parse_server_metrics("\n".join(lines) + "\n", 1.0)
    except MetricsUnreadable as exc:
        reason = str(exc)
    else:
        reason = None
    if reason is not None:
        assert reason
        assert "\n" not in reason
        return
    counts = (metrics.running, metrics.waiting, metrics.generation_tokens_total, metrics.preemptions_total)
    for value in counts:
        assert value is None or value >= 0
    for fraction in (metrics.kv_cache_usage, metrics.engine_tokens_per_s):
        assert fraction is None or (math.isfinite(fraction) and fraction >= 0)
    assert metrics.kv_cache_usage is None or metrics.kv_cache_usage <= 1.0
