"""The process forest is built once per sample: the verdict engine builds it, and the servers' jobs, the
findings, the verdict, ``snapshot``'s document and the monitor's table all read that one."""

from __future__ import annotations

import pytest

from gputui.commands.output.snapshot_document import document
from gputui.core.jobs import forest
from gputui.core.model import HostSnapshot, replace
from gputui.core.verdict import Baselines, judge
from gputui.transports.sim import ManualClock, SimLink
from gputui.ui.screens.monitor_view import table_nodes


def _wedged_sample() -> HostSnapshot:
    link = SimLink("gpu-node-07", clock=ManualClock())
    link.open()
    try:
        return HostSnapshot.from_dict(link.request({"cmd": "sample"}, 1.0)["snapshot"])
    finally:
        link.close()


def test_one_sample_builds_one_forest(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    real = forest._build_forest

    def counted(snapshot: HostSnapshot) -> list[forest.ProcNode]:
        built.append(1)
        return real(snapshot)

    monkeypatch.setattr(forest, "_build_forest", counted)
    sample = _wedged_sample()
    judged = judge(sample, Baselines())
    assert judged.findings  # the wedged host: a job, zombies, memory held
    assert judged.verdict is not None
    entry = document([judged])["hosts"][0]
    rows = table_nodes(judged)
    assert len(built) == 1
    assert {p["pid"] for p in entry["processes"]} >= {node.proc.pid for node in rows if node.depth == 0}

    moved = replace(sample, processes=sample.processes[:-1])  # the next sample: another process list
    judge(moved, Baselines())
    assert len(built) == 2
