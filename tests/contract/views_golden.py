"""The views a script reads, on the simulated hosts at a frozen clock: ``snapshot``/``check`` JSON and the
exporter's exposition. ``python -m tests.contract.views_golden OUT.json`` writes them; the contract test
compares today's against the file kept in ``tests/data/contract/`` (written by the code before ``core/``
became concept packages, and again whenever the simulated hosts themselves change: never to accept a change
of the code), so a change of layout that changed what a script reads fails there.

Only what a script reads is kept: JSON documents whole, and the exposition's samples (name, labels, value).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from prometheus_client.registry import CollectorRegistry

from gputui.core.fleet.exposition import ExportedSample, ExporterFigures, families
from gputui.core.model import HostSnapshot, snapshots_document
from gputui.core.servers import ServerWatch
from gputui.core.verdict import Baselines, analyze
from gputui.transports.sim import HEALTHY_TARGET, ManualClock, SimLink

TARGETS = ("gpu-node-07", HEALTHY_TARGET)
MOMENTS_S = (0.0, 90.0, 700.0)
"""Seconds after the first sample: wedged and serving, STALLED/UNHEALTHY, and after ten minutes."""


def _samples(target: str) -> list[Any]:
    clock = ManualClock()
    link = SimLink(target, clock=clock)
    link.open()
    watch = ServerWatch()
    baselines = Baselines()
    taken = []
    elapsed = 0.0
    for moment in MOMENTS_S:
        clock.advance(moment - elapsed)
        elapsed = moment
        snapshot = HostSnapshot.from_dict(link.request({"cmd": "sample"}, 1.0)["snapshot"])
        taken.append(analyze(watch.apply(snapshot, clock()), baselines))
    link.close()
    return taken


def _exposition(snapshot: Any) -> list[list[Any]]:
    figures = ExporterFigures()
    sample = ExportedSample(snapshot, Baselines(), snapshot.time, 0.0)

    class _Collector:
        def collect(self):  # type: ignore[no-untyped-def]
            return families(sample, snapshot.time, figures, "host", "test")

    registry = CollectorRegistry()
    registry.register(_Collector())  # type: ignore[arg-type]
    rows = []
    for family in registry.collect():
        for s in family.samples:
            rows.append([s.name, dict(sorted(s.labels.items())), s.value])
    return sorted(rows, key=lambda r: (r[0], json.dumps(r[1])))


def views() -> dict[str, Any]:
    """Every kept view: per target and moment, the JSON document and the exposition's samples."""
    out: dict[str, Any] = {}
    for target in TARGETS:
        for moment, snapshot in zip(MOMENTS_S, _samples(target), strict=True):
            key = f"{target}@{moment:g}"
            out[key] = {
                "json": json.loads(json.dumps(snapshots_document([snapshot]))),
                "exposition": _exposition(snapshot),
            }
    return out


def main(argv: list[str]) -> int:
    with open(argv[0], "w") as f:
        json.dump(views(), f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
