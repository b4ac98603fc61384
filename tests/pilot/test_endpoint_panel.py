"""EndpointPanel mounted in a small app: hostile samples shown literally, compact mode, the overview dot."""

from __future__ import annotations

import time

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region

from gputui.core.model import EndpointSample, replace
from gputui.core.servers import EndpointHistory
from gputui.ui.widgets.endpoint_panel import EndpointPanel, endpoint_block, endpoint_line, health_dot

NOW_S = 1_800_000_000.0
SGLANG = "http://127.0.0.1:30000/health"
HOSTILE_URL = "http://127.0.0.1:1/[@click=app.quit]x[/][bold]B[/bold][$x]\x1b]0;t\x07"
HOSTILE_DETAIL = "HTTP 503: \x1b[2J\x9b31m[red]boom[/red]\u202eevil\nsecond"


def samples() -> list[EndpointSample]:
    return [
        EndpointSample(
            url=SGLANG,
            state="UNHEALTHY",
            code=503,
            latency_ms=20_004.0,
            since=NOW_S - 125,
            last_ok=NOW_S - 130,
            consecutive_failures=7,
            detail="HTTP 503 Service Unavailable",
            discovered=True,
            checked_at=NOW_S,
        ),
        EndpointSample(
            url=HOSTILE_URL,
            state="[blink]X",  # an agent that says nonsense is shown literally, coloured like ERROR
            code=None,
            latency_ms=None,
            since=NOW_S - 5,
            detail=HOSTILE_DETAIL,
            consecutive_failures=1,
            checked_at=NOW_S,
        ),
        EndpointSample(
            url="http://127.0.0.1:30000/health_generate", detail="not probed: generating endpoint"
        ),
    ]


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield EndpointPanel(id="health")


def screen_lines(panel: EndpointPanel) -> list[str]:
    return [strip.text for strip in panel.render_lines(Region(0, 0, panel.size.width, panel.size.height))]


def history() -> dict[str, tuple[str | None, ...]]:
    kept = EndpointHistory(max_len=20)
    for step, state in enumerate(["UP", "UP", "TIMEOUT", "UNHEALTHY", "UNHEALTHY"]):
        kept.update([EndpointSample(url=SGLANG, state=state, checked_at=NOW_S - 100 + step)])
    return kept.as_dict()


async def test_full_rendering_shows_every_field_literally() -> None:
    app = PanelApp()
    async with app.run_test(size=(120, 20)) as pilot:
        panel = app.query_one(EndpointPanel)
        panel.show(samples()[:2], history(), now_s=NOW_S)
        await pilot.pause()
        lines = screen_lines(panel)
        text = "\n".join(lines)
        since_clock = time.strftime("%H:%M:%S", time.localtime(NOW_S - 125))
        last_ok_clock = time.strftime("%H:%M:%S", time.localtime(NOW_S - 130))
        # What is wrong and since when first, then the latency and the history strip (oldest left).
        assert lines[0].startswith(f"UNHEALTHY 503 since {since_clock} (2 min 05 s) · 20.0 s ▁▁▆▅▅")
        assert lines[1].startswith(f"  {SGLANG} (discovered)")
        assert f"HTTP 503 Service Unavailable · last ok {last_ok_clock} · 7 failures" in lines[2]
        # Hostile strings: literal, escapes visible, nothing interpreted.
        assert "[@click=app.quit]x[/][bold]B[/bold][$x]\\x1b]0;t\\x07" in text
        assert lines[3].startswith("[blink]X")
        assert "\\x1b[2J\\x9b31m[red]boom[/red]\\u202eevil\\nsecond" in text
        assert "last ok – · 1 failure" in text
        for bad in ("\x1b", "\x9b", "\u202e", "\x07"):
            assert bad not in text
        assert len(lines) == 3 + 3
        assert panel.rows == 6


async def test_more_endpoints_than_fit_condense_to_one_line_each_state_first() -> None:
    """Three endpoints do not fit in full: every one gets a line, and every line starts with its state."""
    app = PanelApp()
    async with app.run_test(size=(120, 20)) as pilot:
        panel = app.query_one(EndpointPanel)
        panel.show(samples(), history(), now_s=NOW_S)
        await pilot.pause()
        lines = screen_lines(panel)
        since_clock = time.strftime("%H:%M:%S", time.localtime(NOW_S - 125))
        assert len(lines) == 3
        assert lines[0].startswith(f"UNHEALTHY 503 since {since_clock} (2 min 05 s) · 20.0 s ▁▆▅▅ {SGLANG}")
        assert lines[1].startswith("[blink]X  – since ")
        assert lines[2].startswith("–         – not probed yet http://127.0.0.1:30000/health_generate")


def test_state_styles_in_the_text() -> None:
    block = endpoint_block(samples()[0], ("UP", "UNHEALTHY", "DOWN"), NOW_S, width=120)
    styles = {block.plain[span.start : span.end].strip(): str(span.style) for span in block.spans}
    assert styles["UNHEALTHY"] == "bold yellow"
    assert styles["▁"] == "green"
    assert styles["█"] == "red"
    line = endpoint_line(samples()[1], (), NOW_S)
    assert {str(span.style) for span in line.spans if "[blink]X" in line.plain[span.start : span.end]} == {
        "bold magenta"
    }


async def test_states_have_distinct_colours_on_screen() -> None:
    app = PanelApp()
    async with app.run_test(size=(120, 20)) as pilot:
        panel = app.query_one(EndpointPanel)
        panel.show(samples(), history(), now_s=NOW_S)
        await pilot.pause()
        colours: dict[str, object] = {}
        for strip in panel.render_lines(Region(0, 0, panel.size.width, panel.size.height)):
            for segment in strip:
                word = segment.text.strip()
                if word in ("UNHEALTHY", "[blink]X") and segment.style is not None:
                    colours[word] = segment.style.color
        assert set(colours) == {"UNHEALTHY", "[blink]X"}
        assert colours["UNHEALTHY"] is not None
        assert colours["UNHEALTHY"] != colours["[blink]X"]


async def test_clicking_hostile_text_runs_nothing() -> None:
    app = PanelApp()
    async with app.run_test(size=(120, 20)) as pilot:
        panel = app.query_one(EndpointPanel)
        panel.show(samples(), history(), now_s=NOW_S)
        await pilot.pause()
        hostile_row = next(i for i, line in enumerate(screen_lines(panel)) if "[@click=app.quit]" in line)
        column = screen_lines(panel)[hostile_row].index("[@click")
        for offset in (1, 20, 22):
            await pilot.click(EndpointPanel, offset=(column + offset, hostile_row))
        await pilot.pause()
        assert app.is_running
        assert app.return_code is None


async def test_narrow_keeps_state_url_and_reason_on_lines_of_their_own() -> None:
    """A side pane: each endpoint is its state line, its URL and what is wrong, wrapped, never cut."""
    app = PanelApp()
    async with app.run_test(size=(50, 20)) as pilot:
        panel = app.query_one(EndpointPanel)
        panel.show(samples(), history(), now_s=NOW_S)
        panel.compact = True
        await pilot.pause()
        lines = screen_lines(panel)
        since_clock = time.strftime("%H:%M:%S", time.localtime(NOW_S - 125))
        assert lines[0].startswith(f"UNHEALTHY 503 since {since_clock} (2 min 05 s) · ")
        assert lines[1].rstrip() == f"  {SGLANG} (discovered)"
        assert lines[2].strip() == "HTTP 503 Service Unavailable"
        assert "…" not in "".join(lines)
        assert all(len(line) <= 50 for line in lines)
        assert panel.size.height == panel.rows == len(lines)
        panel.show(samples()[:1], history(), now_s=NOW_S)
        panel.compact = False
        await pilot.pause()
        # One endpoint in full: state, URL, what is wrong (wrapped at 50 cells, not cut).
        assert panel.size.height == panel.rows == 4
        assert "…" not in "".join(screen_lines(panel))


async def test_empty_and_updated() -> None:
    app = PanelApp()
    async with app.run_test(size=(80, 10)) as pilot:
        panel = app.query_one(EndpointPanel)
        await pilot.pause()
        assert "no health endpoints" in screen_lines(panel)[0]
        up = EndpointSample(
            url=SGLANG, state="UP", code=200, latency_ms=3.4, since=NOW_S - 10, checked_at=NOW_S
        )
        panel.show([up], {SGLANG: ("UP",)}, now_s=NOW_S)
        await pilot.pause()
        lines = screen_lines(panel)
        assert len(lines) == 2
        assert lines[0].startswith("UP        200 since ")
        assert "(10 s) · 3 ms" in lines[0]
        assert panel.samples == (up,)


def test_health_dot() -> None:
    def dot(*states: str | None) -> Text:
        return health_dot(EndpointSample(url=f"http://h/{i}", state=s) for i, s in enumerate(states))

    assert health_dot([]).plain == "–"
    assert dot("UP", "UP").plain == "●"
    assert "green" in str(dot("UP").style)
    assert dot("UP", None).plain == "○"
    assert dot("UP", "UNHEALTHY").plain == "▲"
    assert "yellow" in str(dot("UNHEALTHY").style)
    assert dot("TIMEOUT", "DOWN", "UP").plain == "✖"
    assert "red" in str(dot("DOWN").style)
    assert dot("ERROR").plain == "◇"  # one glyph a state (gputui.ui.legend)


def _server_samples() -> tuple[list[EndpointSample], dict[str, tuple[float | None, ...]]]:
    """A STALLED sglang server and a BUSY vLLM one, as a ``ServerWatch`` judges them."""
    stalled_url, busy_url = SGLANG, "http://127.0.0.1:8000/health"
    metrics_stalled = {
        "engine": "sglang",
        "running": 2,
        "waiting": 3,
        "kv_cache_usage": 0.45,
        "generation_tokens_per_s": 0.0,
    }
    metrics_busy = {
        "engine": "vllm",
        "running": 8,
        "waiting": 0,
        "kv_cache_usage": 0.9,
        "generation_tokens_per_s": 1234.0,
    }
    stalled = EndpointSample(
        url=stalled_url,
        state="STALLED",
        code=200,
        latency_ms=4.0,
        since=NOW_S - 40,
        checked_at=NOW_S,
        detail="stalled: 2 running, 3 waiting, no token generated for 40 s (health UP)",
        metrics_url="http://127.0.0.1:30000/metrics",
        metrics=metrics_stalled,
    )
    busy = EndpointSample(
        url=busy_url,
        state="BUSY",
        code=503,
        latency_ms=20_000.0,
        since=NOW_S - 12,
        checked_at=NOW_S,
        detail="busy: health HTTP 503 but generating 1234 tokens/s; not dead, do not kill",
        metrics_url="http://127.0.0.1:8000/metrics",
        metrics=metrics_busy,
    )
    tokens = {stalled_url: (900.0, 1200.0, 400.0, 0.0, 0.0, 0.0), busy_url: (None, 1000.0, 1234.0)}
    return [stalled, busy], tokens


@pytest.mark.parametrize("width", [50, 120, 200])
async def test_stalled_and_busy_servers_stand_out_with_their_figures(width: int) -> None:
    shown, tokens = _server_samples()
    app = PanelApp()
    async with app.run_test(size=(width, 20)) as pilot:
        panel = app.query_one(EndpointPanel)
        panel.show(shown[:1], {SGLANG: ("UP", "UP", "STALLED")}, now_s=NOW_S, tokens=tokens)
        await pilot.pause()
        text = " ".join(" ".join(screen_lines(panel)).split())
        assert screen_lines(panel)[0].startswith("STALLED   200 since ")
        assert "sglang · 2 running · 3 waiting · KV 45% · 0 tok/s" in text
        assert "no token generated for 40 s (health UP)" in text
        assert "failures" not in text
        panel.show(shown, {}, now_s=NOW_S, tokens=tokens)
        panel.compact = True
        await pilot.pause()
        lines = [line.rstrip() for line in screen_lines(panel)]
        stalled = next(i for i, line in enumerate(lines) if line.startswith("STALLED   200 since "))
        busy = next(i for i, line in enumerate(lines) if line.startswith("BUSY      503 since "))
        assert stalled == 0 < busy
        assert "  2r 3w KV45% 0t/s" in lines
        assert "  8r 0w KV90% 1234t/s" in lines


def test_server_states_are_coloured_apart_and_tokens_get_a_sparkline() -> None:
    shown, tokens = _server_samples()
    block = endpoint_block(shown[0], (), NOW_S, 120, tokens[SGLANG])
    styles = {block.plain[span.start : span.end].strip(): str(span.style) for span in block.spans}
    assert styles["STALLED"] == "bold white on red"
    assert "tok/s ▆█▃▁▁▁" in block.plain  # the tokens/s history, falling to nothing
    busy = endpoint_block(shown[1], (), NOW_S, 120, tokens[shown[1].url])
    styles = {busy.plain[span.start : span.end].strip(): str(span.style) for span in busy.spans}
    assert styles["BUSY"] == "bold black on yellow"
    assert "tok/s ·▇█" in busy.plain  # a reading without a rate is a dot
    assert health_dot(shown).plain == "■"  # the worse of the two: STALLED, a glyph of its own (not DOWN's)
    assert health_dot(shown[1:]).plain == "◆"  # BUSY: never UNHEALTHY's ▲


def test_a_metrics_read_that_failed_says_why() -> None:
    sample = EndpointSample(
        url=SGLANG,
        state="UP",
        code=200,
        checked_at=NOW_S,
        metrics_url="http://127.0.0.1:30000/metrics",
        metrics_error="HTTP 404",
    )
    assert "metrics: HTTP 404" in endpoint_block(sample, (), NOW_S, 120).plain
    assert (
        "metrics"
        not in endpoint_block(replace(sample, metrics_url=None, metrics_error=None), (), NOW_S, 120).plain
    )
