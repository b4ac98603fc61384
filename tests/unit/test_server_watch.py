"""The client's side of server metrics: launchers' metrics URLs, the config keys, the watch, the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.agent.protocol import ENDPOINT_STATE_STALLED, ENDPOINT_STATE_UNHEALTHY, ENDPOINT_STATE_UP
from gputui.agent.servers.discovery import discover_launchers, health_launcher_endpoints
from gputui.agent.servers.urls import url_origin
from gputui.core.model import EndpointSample, Gpu, HostSnapshot, replace
from gputui.core.servers import METRICS_JSON_KEYS, ServerWatch, failing_servers
from gputui.core.store import ConfigError, load_config
from gputui.core.verdict import Baselines, analyze, judge

T0 = 1_800_000_000.0
URL = "http://127.0.0.1:30000/health"
METRICS = "http://127.0.0.1:30000/metrics"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["vllm", "serve", "m", "--port", "9000"],
            ("http://127.0.0.1:9000/health", "http://127.0.0.1:9000/metrics"),
        ),
        (
            ["python3", "-m", "sglang.launch_server", "--port", "30001"],
            ("http://127.0.0.1:30001/health", None),
        ),
        (["python3", "-m", "sglang.launch_server", "--enable-metrics"], (URL, METRICS)),
        (["python3", "-m", "sglang.launch_server", "--enable-metrics", "--port", "x"], None),
    ],
)
def test_a_launcher_serves_metrics_as_its_engine_does(argv: list[str], expected: tuple | None) -> None:
    assert health_launcher_endpoints(argv) == expected


def test_discovered_launchers_carry_their_metrics_url_and_pid() -> None:
    launchers = discover_launchers(
        [
            {"pid": 30, "cmdline": ["vllm", "serve", "m"]},
            {
                "pid": 20,
                "cmdline": ["vllm", "serve", "m"],
            },  # the same URL: the lower pid (the parent) is kept
            {"pid": 40, "cmdline": ["python3", "-m", "sglang.launch_server", "--enable-metrics"]},
            {"pid": 50, "cmdline": "vllm serve"},  # not an argv
        ]
    )
    vllm = ("http://127.0.0.1:8000/health", "http://127.0.0.1:8000/metrics", 20)
    assert launchers == [(URL, METRICS, 40), vllm]


def test_origins_pair_metrics_with_health() -> None:
    assert url_origin("http://LOCALHOST:80/health") == url_origin("http://localhost/metrics")
    assert url_origin(URL) != url_origin("https://127.0.0.1:30000/metrics")
    assert url_origin("http://[::1/") is None


def test_config_metrics_and_stall_window(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        'metrics = "http://127.0.0.1:30000/metrics"\nstall_after_s = 45\n'
        '[hosts."a"]\nmetrics = ["http://127.0.0.1:8000/metrics"]\nstall_after_s = 120.5\n'
    )
    config = load_config(path)
    assert config.metrics_urls == ("http://127.0.0.1:30000/metrics",)
    assert config.host_metrics_urls == {"a": ("http://127.0.0.1:8000/metrics",)}
    assert (config.stall_after_s, config.host_stall_after_s) == (45.0, {"a": 120.5})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("stall_after_s = 0", "stall_after_s must be a number of seconds from 1 to 86400"),
        ("stall_after_s = 1e10", "stall_after_s must be a number of seconds from 1 to 86400"),
        ("stall_after_s = true", "stall_after_s must be"),
        ("stall_after_s = 'x'", "stall_after_s must be"),
        ('[hosts."a"]\nstall_after_s = -1', "hosts.'a'.stall_after_s must be"),
        ("metrics = 3", "metrics must be a URL or a list of URLs"),
    ],
)
def test_bad_metrics_settings_are_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value)


def _vllm(running: int, waiting: int, tokens: int) -> str:
    return (
        f'vllm:num_requests_running{{engine="0"}} {running}\n'
        f'vllm:num_requests_waiting{{engine="0"}} {waiting}\n'
        f'vllm:kv_cache_usage_perc{{engine="0"}} 0.5\n'
        f'vllm:generation_tokens_total{{engine="0"}} {tokens}\n'
    )


def _snapshot(
    now: float, text: str | None, state: str = ENDPOINT_STATE_UP, error: str | None = None
) -> HostSnapshot:
    sample = EndpointSample(
        url=URL,
        state=state,
        code=200,
        since=T0,
        checked_at=now,
        metrics_url=METRICS,
        metrics_text=text,
        metrics_at=None if text is None else now,
        metrics_error=error,
    )
    return HostSnapshot(target="h", time=now, endpoints=(sample,))


def test_the_watch_keeps_a_rate_and_a_stall_and_forgets_what_is_gone() -> None:
    watch = ServerWatch(stall_after_s=30, host_stall_after_s={"other": 600})
    (first,) = watch.apply(_snapshot(T0, _vllm(2, 1, 100))).endpoints
    assert first.metrics == {
        "engine": "vllm",
        "running": 2,
        "waiting": 1,
        "kv_cache_usage": 0.5,
        "generation_tokens_per_s": None,
    }
    (second,) = watch.apply(_snapshot(T0 + 10, _vllm(2, 1, 600))).endpoints
    assert second.metrics is not None
    assert second.metrics["generation_tokens_per_s"] == 50.0
    for step in range(1, 5):
        (sample,) = watch.apply(_snapshot(T0 + 10 + 10 * step, _vllm(2, 1, 600))).endpoints
    assert sample.state == ENDPOINT_STATE_STALLED
    assert sample.since == T0 + 40  # 30 s after the last token
    assert sample.detail is not None
    assert "no token generated for 40 s" in sample.detail
    assert failing_servers([sample]) == [f"server {URL} is STALLED: {sample.detail}"]
    assert watch.state("h", URL) is not None
    assert len(watch.states("h")) == 1
    watch.apply(HostSnapshot(target="h", time=T0 + 60))
    assert watch.states("h") == {}


def test_blank_or_unreadable_metrics_are_null_and_say_why() -> None:
    watch = ServerWatch()
    (blank,) = watch.apply(_snapshot(T0, None, error="HTTP 404")).endpoints
    assert blank.metrics == dict.fromkeys(METRICS_JSON_KEYS)
    assert blank.state == ENDPOINT_STATE_UP
    (garbage,) = ServerWatch().apply(_snapshot(T0, "<html>oops</html>\n")).endpoints
    assert garbage.metrics == dict.fromkeys(METRICS_JSON_KEYS)


def test_check_counts_a_failing_server_as_not_clean_only_when_the_gpus_can_be_told() -> None:
    raw = _snapshot(T0, None, state=ENDPOINT_STATE_UNHEALTHY)
    unknown = analyze(raw, Baselines())
    assert judge(raw, Baselines()).verdict == unknown.verdict  # no GPU: still "cannot tell", not "not clean"
    idle = replace(
        _snapshot(T0, None, state=ENDPOINT_STATE_UNHEALTHY), gpus=(Gpu(index=0, memory_used_mib=3),)
    )
    snapshot = analyze(idle, Baselines())
    assert snapshot.verdict is not None
    assert snapshot.verdict.clean
    judged = judge(idle, Baselines())
    assert judged.verdict is not None
    assert not judged.verdict.clean
    assert judged.verdict.reasons[-1].startswith(f"server {URL} is UNHEALTHY")
