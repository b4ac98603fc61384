"""Every finding kind the exporter publishes reads in the fleet as the monitor says it, built from the
exported fields alone: the simulated hosts (a wedged job, the healthy one, the shared one with every
finding kind) sampled over twenty minutes, each judged sample written by prometheus_client's own
exposition, read back by its parser into an instant-vector answer as Prometheus's HTTP API gives it, and
parsed by the fleet source.

The real exporter and a real Prometheus carry the zombie, the defunct leader and the ghost in
``test_exporter``; this one holds every other kind to the same rule on the same code path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gputui.core.fleet import analyze_fleet
from gputui.core.fleet.exposition import ExportedSample, ExporterFigures, families
from gputui.core.fleet.schema import EXPORTED_KINDS
from gputui.core.model import Finding, HostSnapshot
from gputui.core.servers import ServerWatch
from gputui.core.verdict import Baselines, headline, judge
from gputui.transports.prometheus.parse import parse_answer
from gputui.transports.sim import HEALTHY_TARGET, ManualClock, SimLink

TARGETS = ("gpu-node-07", HEALTHY_TARGET, "gpu-node-09")
STEP_S = 30.0
STEPS = 40


def _judged(target: str) -> Iterator[HostSnapshot]:
    clock = ManualClock()
    link = SimLink(target, clock=clock)
    link.open()
    watch = ServerWatch()
    try:
        for _ in range(STEPS):
            clock.advance(STEP_S)
            sample = HostSnapshot.from_dict(link.request({"cmd": "sample"}, 1.0)["snapshot"])
            yield judge(sample, Baselines(), servers=watch)
    finally:
        link.close()


def _exposition(snapshot: HostSnapshot) -> str:
    sample = ExportedSample(snapshot, Baselines(), snapshot.time, 0.0)

    class _Collector:
        def collect(self) -> Any:
            return families(sample, snapshot.time, ExporterFigures(), snapshot.target, "test")

    registry = CollectorRegistry()
    registry.register(_Collector())  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def _instant_vector(text: str, instance: str, now: float | None) -> dict[str, Any]:
    """The samples as ``/api/v1/query`` answers them: each with the ``instance`` and ``job`` a scrape adds."""
    result = [
        {
            "metric": {"__name__": s.name, **s.labels, "instance": instance, "job": "gputui"},
            "value": [now, repr(float(s.value))],
        }
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
    result.append({"metric": {"__name__": "up", "instance": instance, "job": "gputui"}, "value": [now, "1"]})
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def _said(findings: tuple[Finding, ...] | list[Finding], kinds: tuple[str, ...]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for f in findings:
        if f.kind in kinds:
            out.setdefault(f.kind, []).append((f.pid, f.gpu_index, f.detail, f.action))
    return {kind: sorted(said, key=repr) for kind, said in out.items()}


def _read_back() -> Iterator[tuple[str, HostSnapshot, HostSnapshot]]:
    """(target, the monitor's judged sample, the fleet's host as read back from its exposition)."""
    for target in TARGETS:
        for judged in _judged(target):
            answer = _instant_vector(_exposition(judged), f"{target}:9400", judged.time)
            (host,) = [h for h in analyze_fleet(parse_answer(answer), Baselines()).hosts if h.name == target]
            assert host.exported is not None, target
            yield target, judged, host.snapshot


def _both(kinds: tuple[str, ...]) -> Iterator[tuple[str, dict[str, list[Any]], dict[str, list[Any]]]]:
    """(target, the monitor's sentences, the fleet's) of each judged sample, for ``kinds``."""
    for target, judged, fleet in _read_back():
        yield target, _said(judged.findings, kinds), _said(fleet.findings, kinds)


def test_each_exported_kind_reads_in_the_fleet_as_the_monitor_says_it() -> None:
    seen: set[str] = set()
    stuck_actions: set[str] = set()
    for target, monitor, fleet in _both(EXPORTED_KINDS):
        assert fleet == monitor, target
        seen |= set(monitor)
        stuck_actions |= {action for *_, action in monitor.get("stuck_thread", [])}
    # Not vacuous: the simulated hosts show these kinds, and each went through the exposition; a stuck
    # thread's places and the reboot they call for, a spinning collective's window and what did not move.
    assert seen >= {
        "zombie",
        "defunct_leader",
        "orphan",
        "uninterruptible",
        "invisible_pid",
        "survivor",
        "profiled",
        "profiler_unknown",
        "stuck_thread",
        "spinning",
    }
    # The reboot a stuck thread's places call for, once it has been in the driver past the window.
    assert any("if it is still there, reboot the host" in action for action in stuck_actions)


def test_the_fleet_s_verdict_is_the_monitor_s_level_and_headline() -> None:
    levels: set[str] = set()
    for target, judged, fleet in _read_back():
        monitor, read = judged.verdict, fleet.verdict
        assert monitor is not None
        assert read is not None
        assert headline(read) == headline(monitor), target
        assert read.not_ready == monitor.not_ready, target
        levels.add(monitor.level)
    # Not vacuous: the wedged host turns NOT READY (a defunct leader's threads in the driver for 10 min).
    assert levels == {"NOT CLEAN", "NOT READY"}
