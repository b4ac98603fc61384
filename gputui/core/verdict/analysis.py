"""Findings and the clean-slate verdict of a host sample's GPUs and processes (``analyze``).

Nothing here does I/O or reads a clock unless no time is given; everything is a function of the sample and
the baselines, so the UI, ``gputui check`` and the tests all see the same answer for the same data. The
verdict engine (``judge``) adds what only a watching view knows: the servers' states, watched ports.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.core.model import HostSnapshot
from gputui.core.verdict.baselines import Baselines
from gputui.core.verdict.findings import KilledJob, find_problems
from gputui.core.verdict.fitness import fitness_findings, with_assessment
from gputui.core.verdict.slate import clean_slate
from gputui.core.verdict.stuck import name_waits


def analyze(
    snapshot: HostSnapshot,
    baselines: Baselines,
    now: float | None = None,
    killed_jobs: Iterable[KilledJob] = (),
    one_shot: bool = False,
) -> HostSnapshot:
    """The snapshot with its findings and clean-slate verdict filled in (GPUs and processes only: the verdict
    engine, ``gputui.core.verdict.engine``, adds the ports and servers every view must judge too). Each GPU's
    fitness is assessed first, so that its action counts in findings and verdict alike."""
    snapshot = with_assessment(snapshot, baselines.accepted_xids)
    findings = find_problems(snapshot, baselines, now, killed_jobs=killed_jobs, one_shot=one_shot)
    findings = name_waits(snapshot, findings, now if now is not None else snapshot.time)
    findings += fitness_findings(snapshot)
    return snapshot.with_analysis(findings, clean_slate(snapshot, baselines, one_shot=one_shot))
