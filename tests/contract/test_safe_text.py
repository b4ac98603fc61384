"""Every string of the client's model is visible text, whatever a machine sent: hostile collector samples,
Prometheus answers and HTTP bodies go through the real readers, and every string field of every object they
make is walked (generically: a field added later is covered without a change here)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from gputui.agent.protocol import KERNEL_LOG
from gputui.core.actions import parse_reply
from gputui.core.link import LinkOptions
from gputui.core.model import EndpointSample, HostSnapshot, fields, is_record
from gputui.core.servers import ServerWatch
from gputui.transports.prometheus import parse_answer
from gputui.transports.prometheus.parts import PART_LABEL
from gputui.transports.sim import SimLink
from tests.data.prometheus import load_answer

HOSTILE = (
    "\x1b]0;t\x07\x1b[2J"  # OSC retitle, clear screen
    "\x9b31m"  # C1 CSI
    "\u202eevil"  # bidi override
    "zero\u200bwidth\u2060"
    "\ud800-\udcff"  # lone surrogates (invalid UTF-8 arrives as these); side by side JSON would pair them
    "[bold]x[/] [$x] [@click=app.quit]q[/]"
    "\x00\x7f\t\n"
)
ACTIVE = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0), 0x202E, 0x200B, 0x2060, 0xD800, 0xDCFF]]
RAW_FIELDS = {(EndpointSample, "metrics_text")}
"""Fields that hold a body for a parser, never shown: what is read from them is made visible there."""


def strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, string) for every string reachable in ``value``: record fields, containers, dict keys."""
    if isinstance(value, str):
        yield path, value
    elif is_record(value):
        for name in fields(value):
            if (type(value), name) not in RAW_FIELDS:
                yield from strings(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key, f"{path}[key]")
            yield from strings(item, f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for index, item in enumerate(value):
            yield from strings(item, f"{path}[{index}]")


def assert_visible(value: Any) -> int:
    """Assert no string in ``value`` holds a terminal-active character; returns how many were hostile."""
    hostile = 0
    for path, text in strings(value):
        bad = [c for c in ACTIVE if c in text]
        assert not bad, f"{path} holds {bad!r}: {text[:120]!r}"
        hostile += "\\x1b]0;t\\x07" in text
    return hostile


def poisoned(value: Any, keep: frozenset[str] = frozenset()) -> Any:
    """``value`` with the hostile text added to every string in it (dict keys in ``keep`` left alone)."""
    if isinstance(value, str):
        return value + HOSTILE
    if isinstance(value, dict):
        return {k: v if k in keep else poisoned(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [poisoned(item, keep) for item in value]
    return value


def collector_sample() -> dict[str, Any]:
    """A collector's sample line with every part the model reads, in the collector's JSON shape."""
    link = SimLink("gpu-node-08", LinkOptions(memory_interval_s=0.01))
    link.open()
    try:
        data = copy.deepcopy(link.request({"cmd": "sample"}, timeout_s=5)["snapshot"])
    finally:
        link.close()
    data["device_holders"] = [{"pid": 9, "name": "holder", "device": "/dev/nvidia0"}]
    xid = {"xid": 79, "time": 1.0, "source": "kernel log", "detail": "fell off the bus", "pci": "0000:99:00"}
    cleared = dict(xid, cleared="GPU reset since")
    data["gpus"][0]["health"] = {"xids": [cleared], "causes": ["c"], "notes": ["n"]}
    data[KERNEL_LOG] = {"source": "/dev/kmsg", "error": "cannot read", "unmatched": [xid]}
    data["findings"] = [{"kind": "zombie", "target": "t", "detail": "d", "action": "a"}]
    data["verdict"] = {"clean": False, "reasons": ["r"], "baseline_mib": {"GPU-x": 3}, "not_ready": ["n"]}
    gpu_verdict = {"index": 0, "used_mib": 1, "baseline_mib": 3, "clean": False, "reasons": ["r"]}
    data["verdict"]["gpus"] = [gpu_verdict]
    data["health"] = [
        {
            "url": "http://127.0.0.1:30000/health",
            "state": "UNHEALTHY",
            "detail": "HTTP 503: body",
            "metrics_url": "http://127.0.0.1:30000/metrics",
            "metrics_dropped": ["vllm:x"],
            "metrics_error": "malformed",
            "metrics": {"engine": "vllm"},
        }
    ]
    for proc in data["processes"]:
        proc["owner"] = {"kind": "pod", "id": "uid", "name": "web-0", "namespace": "ns", "container": "c"}
        proc["live_threads"] = {"live": 1, "states": {"D": 1}}
    return data


def test_a_hostile_collector_sample_reads_as_visible_text_only() -> None:
    keep = frozenset({"kind", "pid", "index"})  # words the readers check against their own tables
    line = json.dumps(poisoned(collector_sample(), keep))  # lone surrogates travel as \\ud800 escapes
    snapshot = HostSnapshot.from_json(line)
    assert snapshot.processes
    assert snapshot.gpus
    assert snapshot.endpoints
    assert snapshot.findings
    assert all(p.owner is not None for p in snapshot.processes)
    assert snapshot.kernel_log is not None
    assert snapshot.kernel_log.unmatched
    assert assert_visible(snapshot) > 50
    assert any("[bold]x[/] [$x]" in p.name for p in snapshot.processes if p.name)  # markup stays text
    # A line marked "processes_same" takes the earlier lists over: still visible text.
    same = dict(json.loads(line), processes_same=True)
    assert assert_visible(HostSnapshot.from_dict(same, snapshot)) > 50


def test_a_hostile_prometheus_answer_reads_as_visible_text_only() -> None:
    document = load_answer()
    keep = frozenset({"__name__", PART_LABEL, "gpu"})
    for item in document["data"]["result"]:
        item["metric"] = poisoned(item["metric"], keep)
    sample = parse_answer(document)
    assert sample.hosts
    assert all(host.snapshot.gpus for host in sample.hosts)
    assert assert_visible(sample) > 10


def test_a_hostile_http_body_reads_as_visible_text_only() -> None:
    body = f'vllm:num_requests_running{{model_name="{HOSTILE}",engine="0"}} 2\n'
    body += f'vllm:num_requests_waiting{{model_name="m",engine="{HOSTILE}"}} 1\n'
    body += HOSTILE + "\n"
    health = {
        "url": "http://10.0.0.1:8000/health" + HOSTILE,
        "state": "UNHEALTHY",
        "code": 503,
        "detail": "HTTP 503: " + HOSTILE,
        "since": 1.0,
        "checked_at": 2.0,
        "metrics_url": "http://10.0.0.1:8000/metrics",
        "metrics_text": body,
        "metrics_at": 2.0,
        "metrics_error": HOSTILE,
        "metrics_dropped": [HOSTILE],
    }
    snapshot = HostSnapshot.from_json(json.dumps({"target": "gpu-a", "time": 2.0, "health": [health]}))
    judged = ServerWatch().apply(snapshot, now=2.0)
    assert judged.endpoints[0].metrics is not None
    assert assert_visible(judged) >= 4
    assert assert_visible(ServerWatch().states("gpu-a")) == 0


def test_a_hostile_kill_reply_reads_as_visible_text_only() -> None:
    """What the agent says about each signalled process (its name, user, command, why) is machine text too."""
    outcome = {"pid": 7, "start_ticks": 1, "stage": "TERM", "result": "gone", "signal": "SIGTERM"}
    outcome.update(name="python", user="alice", detail="exited", cmdline=["python", "serve.py"])
    pending = {"pid": 8, "start_ticks": 2, "name": "x", "signal": "SIGKILL"}
    reply = {"outcomes": [outcome], "pending": [pending]}
    parsed = parse_reply(json.loads(json.dumps(poisoned(reply))))
    assert parsed.outcomes
    assert parsed.pending
    assert assert_visible(parsed) >= 9
