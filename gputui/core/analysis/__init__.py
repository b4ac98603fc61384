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

from gputui.core.analysis.baselines import DEFAULT_BASELINE_MIB, DEFAULT_TOLERANCE_MIB, Baselines
from gputui.core.analysis.findings import (
    D_STATE_THRESHOLD_S,
    FINDING_KINDS,
    GHOST_TOLERANCE_MIB,
    KilledJob,
    find_problems,
    find_survivors,
    job_remnants,
)
from gputui.core.analysis.gpu_health import health_findings, with_assessment
from gputui.core.analysis.trees import (
    GRAPHICS,
    NAME_MAX,
    ProcNode,
    age_text,
    build_forest,
    flatten,
    gpu_memory_by_pid,
    gpu_tree_pids,
    graphics_only_pids,
    is_session_boundary,
    kill_all_roots,
    proc_label,
)
from gputui.core.analysis.verdict import (
    MEMORY_ONLY,
    clean_slate,
    memory_at_baseline,
    memory_verdict,
)
from gputui.core.levels import NOT_READY
from gputui.core.model import HostSnapshot

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
    engine, ``gputui.core.judge``, adds the ports and servers every view must judge too). Each GPU's health is
    assessed first, so that its action counts in findings and verdict alike."""
    snapshot = with_assessment(snapshot)
    findings = find_problems(snapshot, baselines, now, killed_jobs=killed_jobs, one_shot=one_shot)
    findings += health_findings(snapshot)
    return snapshot.with_analysis(findings, clean_slate(snapshot, baselines, one_shot=one_shot))
