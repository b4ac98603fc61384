"""Pure functions over host snapshots: GPU process trees, findings and the clean-slate verdict.

Nothing here does I/O or reads a clock unless no time is given; everything is a function of the snapshot and
the baselines, so the UI, ``gputui check`` and the tests all see the same answer for the same data.

* ``baselines``: the idle figure of each GPU and the tolerance above it;
* ``trees``: the GPU process trees, rooted and walked as the collector roots and walks them;
* ``findings``: zombies, orphans, D-state processes, invisible pids, ghost memory, a killed job's survivors;
* ``verdict``: the clean slate (or, for a source without processes, memory alone).

The names below are the package's interface; each is defined in one of those modules.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.core.jobs import (
    D_STATE_THRESHOLD_S,
    GRAPHICS,
    NAME_MAX,
    ProcNode,
    build_forest,
    flatten,
    gpu_memory_by_pid,
    gpu_tree_pids,
    graphics_only_pids,
    is_session_boundary,
    kill_all_roots,
    proc_label,
)
from gputui.core.model import NOT_READY, HostSnapshot
from gputui.core.text import age_text
from gputui.core.verdict.baselines import DEFAULT_BASELINE_MIB, DEFAULT_TOLERANCE_MIB, Baselines
from gputui.core.verdict.findings import (
    FINDING_KINDS,
    GHOST_TOLERANCE_MIB,
    KilledJob,
    find_problems,
    find_survivors,
    job_remnants,
)
from gputui.core.verdict.fitness import health_findings, with_assessment
from gputui.core.verdict.slate import MEMORY_ONLY, clean_slate, memory_at_baseline, memory_verdict

__all__ = [
    "D_STATE_THRESHOLD_S",
    "DEFAULT_BASELINE_MIB",
    "DEFAULT_TOLERANCE_MIB",
    "FINDING_KINDS",
    "GHOST_TOLERANCE_MIB",
    "GRAPHICS",
    "MEMORY_ONLY",
    "NOT_READY",
    "NAME_MAX",
    "Baselines",
    "KilledJob",
    "ProcNode",
    "age_text",
    "analyze",
    "build_forest",
    "clean_slate",
    "find_problems",
    "find_survivors",
    "flatten",
    "gpu_memory_by_pid",
    "gpu_tree_pids",
    "graphics_only_pids",
    "is_session_boundary",
    "job_remnants",
    "kill_all_roots",
    "memory_at_baseline",
    "memory_verdict",
    "proc_label",
]


def analyze(
    snapshot: HostSnapshot,
    baselines: Baselines,
    now: float | None = None,
    killed_jobs: Iterable[KilledJob] = (),
    one_shot: bool = False,
) -> HostSnapshot:
    """The snapshot with its findings and clean-slate verdict filled in (GPUs and processes only: the verdict
    engine, ``gputui.core.verdict.judge``, adds the ports and servers every view must judge too). Each GPU's
    fitness is assessed first, so that its action counts in findings and verdict alike."""
    snapshot = with_assessment(snapshot)
    findings = find_problems(snapshot, baselines, now, killed_jobs=killed_jobs, one_shot=one_shot)
    findings += health_findings(snapshot)
    return snapshot.with_analysis(findings, clean_slate(snapshot, baselines, one_shot=one_shot))
