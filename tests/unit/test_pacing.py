"""Long work in slices: ``pacing.loads`` is ``json.loads`` (the same values, the same errors) on real and
generated answers, pauses only on the thread that asked for them, and the fleet poller's pause waits while
keys are pressed, never longer than its budget; the collector is paused while the fleet source reads, and a
read leaves nothing for it."""

from __future__ import annotations

import gc
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.core.fleet import analyze_fleet, summarize
from gputui.core.verdict import Baselines
from gputui.transports import pacing
from gputui.transports.prometheus import FleetSettings, PrometheusSource
from gputui.transports.prometheus.query import PrometheusError, fetch
from gputui.ui.session import fleet_poller

DATA = Path(__file__).resolve().parents[1] / "data" / "prometheus"


def _outcome(decode: Any, text: str | bytes) -> tuple[str, Any]:
    try:
        return "value", decode(text)
    except ValueError as exc:
        return "error", f"{type(exc).__name__}: {exc}"
    except RecursionError:
        return "error", "RecursionError"


def _same(text: str | bytes) -> None:
    assert _outcome(pacing.loads, text) == _outcome(json.loads, text)


@pytest.mark.parametrize("name", ["fleet.json", "demo.json"])
def test_answers_recorded_from_a_real_prometheus_decode_as_json_loads_does(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = (DATA / name).read_bytes()
    assert len(json.loads(raw)["data"]["result"]) > 10
    monkeypatch.setattr(pacing, "SLICE_ITEMS", 3)  # many runs, and a tail decoded one element at a time
    _same(raw)
    _same(raw.decode())


LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
TEXTS = st.sampled_from(["},{", '},{"metric":', '"', "\\", "]", "[", "\u2028", "\x1b[2J"]) | st.text(
    max_size=8
)
DOCUMENTS = st.recursive(
    LEAVES | TEXTS,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(TEXTS, inner, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(document=DOCUMENTS, separators=st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
def test_any_document_decodes_as_json_loads_does(document: Any, separators: tuple[str, str]) -> None:
    old = pacing.SLICE_ITEMS
    pacing.SLICE_ITEMS = 2
    try:
        _same(json.dumps({"data": {"result": document}}, separators=separators))
        _same(json.dumps(document, separators=separators))
    finally:
        pacing.SLICE_ITEMS = old


@settings(max_examples=300, deadline=None)
@given(
    document=st.lists(st.dictionaries(TEXTS, LEAVES | TEXTS, max_size=3), min_size=1, max_size=12),
    cut=st.integers(min_value=0, max_value=400),
    insert=st.sampled_from(["", ",", "}", "]", "{", '"', "},{", " x"]),
)
def test_broken_text_fails_as_json_loads_fails(document: Any, cut: int, insert: str) -> None:
    old = pacing.SLICE_ITEMS
    pacing.SLICE_ITEMS = 2
    try:
        text = json.dumps({"status": "success", "data": {"result": document}}, separators=(",", ":"))
        at = cut % (len(text) + 1)
        _same(text[:at] + insert + text[at:])
        _same(text[:at])
    finally:
        pacing.SLICE_ITEMS = old


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"   ",
        b"\xef\xbb\xbf{}",
        "\ufeff{}",
        b"\xff\xfe{\x00}\x00",
        b'{"a":1} x',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"data":{"result":[' + b"[" * 100_000 + b"]" * 100_000 + b"]}}",
        b'{"data":{"result":[{"metric":{"x":"},{\\"metric\\":"},"value":[1,"2"]},{"metric":{}}]}}',
        b'{"data":{"result":[{"a":[{"b":1},{"c":2}]},{"d":3}]}}',
        b'{"data":{"result":[{"a":1},{"b":2},{"c":3} ,{"d":4}]}}',
        b'{"data":{"result":[{"a":1},{"b":2},{"c":3},{"d":4}',
        b'{"data":{"result":[{"a":1},{"b":2},{"c":3},{"d":NaN}]}}',
        b'{"data":{"result":[{"a":"\xc3\x28"}]}}',
    ],
)
def test_edge_cases_decode_or_fail_as_json_loads_does(
    text: bytes | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pacing, "SLICE_ITEMS", 2)
    _same(text)


def test_pauses_happen_on_the_thread_that_asked_for_them() -> None:
    raw = json.dumps(
        {"data": {"result": [{"metric": {"i": str(i)}, "value": [1, "2"]} for i in range(2000)]}}
    )
    here: list[int] = []
    pacing.paced_by(lambda: here.append(threading.get_ident()))
    try:
        pacing.loads(raw)
        elsewhere = threading.Thread(target=pacing.loads, args=(raw,))
        elsewhere.start()
        elsewhere.join()
    finally:
        pacing.paced_by(None)
    assert len(here) >= 2000 // pacing.SLICE_ITEMS - 1
    assert set(here) == {threading.get_ident()}
    count = len(here)
    pacing.loads(raw)  # no hook any more
    assert len(here) == count


def test_fetch_decodes_a_served_answer_and_says_one_line_for_a_broken_one() -> None:
    raw = (DATA / "fleet.json").read_bytes()
    body = [raw]

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body[0])))
            self.end_headers()
            self.wfile.write(body[0])

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert fetch(url, "up", 5.0) == json.loads(raw)
        body[0] = raw[: len(raw) // 2]
        with pytest.raises(PrometheusError) as caught:
            fetch(url, "up", 5.0)
    finally:
        server.shutdown()
        server.server_close()
        serving.join()
    assert "\n" not in str(caught.value)
    assert "not a Prometheus API answer (not JSON" in str(caught.value)


def test_a_refresh_waits_while_keys_are_pressed_and_never_past_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fleet_poller, "QUIET_S", 0.2)
    monkeypatch.setattr(fleet_poller, "MAX_PAUSED_S", 0.5)
    pressed = [time.monotonic()]
    make_way = fleet_poller._MakeWay(lambda: pressed[0])
    started = time.monotonic()
    make_way()
    waited = time.monotonic() - started
    assert 0.15 <= waited < 0.45  # until the keys had been quiet for QUIET_S
    pressed[0] = 0.0  # long quiet: no pause at all
    started = time.monotonic()
    make_way()
    assert time.monotonic() - started < 0.05
    # Keys held down: the pauses of one refresh add up to the budget, then it goes on regardless.
    held = fleet_poller._MakeWay(time.monotonic)
    started = time.monotonic()
    for _ in range(10):
        held()
    assert 0.45 <= time.monotonic() - started < 1.0


def test_the_collector_is_paused_until_the_last_overlapping_pause_ends() -> None:
    assert gc.isenabled()
    first_in = threading.Event()
    second_done = threading.Event()
    seen: list[bool] = []

    def other_thread() -> None:
        first_in.wait()
        with pacing.collector_paused():
            seen.append(gc.isenabled())
        second_done.set()

    elsewhere = threading.Thread(target=other_thread)
    elsewhere.start()
    with pacing.collector_paused():
        first_in.set()
        second_done.wait()
        seen.append(gc.isenabled())  # the other thread's pause ended, this one holds
        with pacing.collector_paused():
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
    elsewhere.join()
    assert seen == [False, False, False, False]
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off_after_a_pause() -> None:
    gc.disable()
    try:
        with pacing.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_fleet_source_decodes_and_parses_with_the_collector_paused() -> None:
    document = json.loads((DATA / "fleet.json").read_bytes())
    during: list[bool] = []

    def fetcher(*_: Any) -> dict[str, Any]:
        during.append(gc.isenabled())
        return document

    source = PrometheusSource(FleetSettings(url="http://prometheus:9090"), fetcher=fetcher)
    assert source.sample().hosts
    assert during == [False]
    assert gc.isenabled()


def test_reading_a_recorded_answer_makes_no_reference_cycles() -> None:
    """What ``collector_paused`` relies on: a refresh's objects are all freed by reference counting."""
    document = json.loads((DATA / "fleet.json").read_bytes())
    source = PrometheusSource(FleetSettings(url="http://prometheus:9090"), fetcher=lambda *_: document)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage, to be named
    try:
        with pacing.collector_paused():
            for _ in range(2):  # the second answer replaces what the source remembered of the first
                sample = analyze_fleet(source.sample(), Baselines())
                rows = [summarize(host, 1.0, 90.0) for host in sample.hosts]
            assert rows
            del sample, rows
        gc.collect()
        ours = [type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("gputui")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert ours == []


def test_settled_objects_are_frozen_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacing, "_frozen", False)
    try:
        pacing.freeze_settled()
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        pacing.freeze_settled()  # once per process
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
