"""THE verdict engine: one function (``judge``) from a host sample to everything a view says about it.

* ``engine``: ``judge``, the entry point — server states, findings and the clean-slate verdict of one sample;
* ``analysis``: findings and verdict over the GPUs and processes (``analyze``);
* ``findings``: zombies, defunct leaders, orphans, D-state, ghosts, invisible pids, survivors;
* ``remains``: what a job whose GPU memory is gone left (from what the collector remembers), GPUs gone;
* ``facts``: the verdict as three facts (workers, residue, GPUs), each one line;
* ``fitness``: what a GPU's own fitness figures mean (the action each asks for);
* ``readiness``: NOT READY from processes stuck in the driver;
* ``stuck``: where a stuck thread waits in the kernel, said in findings; a reboot when it stays in the driver;
* ``order``: the one order every view lists findings in (GPU memory held, then blocking, then age);
* ``slate``: the clean slate per GPU and host (or memory alone for a source without processes);
* ``baselines``: the idle figure of each GPU; ``calibration``: which GPUs may be recorded as idle;
* ``cleanslate``: the clean-slate check as a state machine (the TUI's ``c``/``X``, ``check --wait``);
* ``levels``: ``headline``, the one way each level is said, and the exit codes;
* ``wording``: the one wording table every view calls.
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.verdict.analysis import analyze
    from gputui.core.verdict.baselines import DEFAULT_BASELINE_MIB, DEFAULT_TOLERANCE_MIB, Baselines
    from gputui.core.verdict.calibration import IDLE_FLOOR_MIB, idle_limit_mib, refusals
    from gputui.core.verdict.cleanslate import CleanCheck, ports_left
    from gputui.core.verdict.engine import judge, no_data, no_data_text
    from gputui.core.verdict.facts import fact_label, fact_rows, with_facts
    from gputui.core.verdict.findings import (
        DEFUNCT_RESET_AFTER_S,
        FINDING_KINDS,
        KilledJob,
        duplicate_host_finding,
        find_problems,
        find_survivors,
        job_remnants,
        xid_finding,
    )
    from gputui.core.verdict.fitness import (
        ACTION_DRAIN,
        ACTION_NONE,
        ACTION_REBOOT,
        ACTION_RESET,
        ACTION_WORDS,
        RECOVERY_ACTIONS,
        XID_CATALOGUE_AS_OF,
        XID_HISTORY_UNAVAILABLE,
        XID_TABLE,
        assess,
        assessed,
        driver_wedged,
        fitness_figures,
        fitness_summary,
        needs_reset,
        recovery_action,
        unreachable_action,
        with_assessment,
        xid_text,
    )
    from gputui.core.verdict.levels import CANNOT_TELL_WORDS, exit_code, headline, worst_exit_code
    from gputui.core.verdict.order import held_mib, ordered_findings
    from gputui.core.verdict.remains import nothing_recorded
    from gputui.core.verdict.slate import clean_slate, memory_at_baseline, memory_verdict
    from gputui.core.verdict.stuck import STUCK_WINDOW_S, place_text, threads_text
    from gputui.core.verdict.wording import FINDING_SENTENCES, FINDING_WORDS, REASON_SENTENCES, word_finding

__all__ = [
    "ACTION_DRAIN",
    "ACTION_NONE",
    "ACTION_REBOOT",
    "ACTION_RESET",
    "ACTION_WORDS",
    "Baselines",
    "CANNOT_TELL_WORDS",
    "CleanCheck",
    "DEFAULT_BASELINE_MIB",
    "DEFAULT_TOLERANCE_MIB",
    "DEFUNCT_RESET_AFTER_S",
    "FINDING_KINDS",
    "FINDING_SENTENCES",
    "FINDING_WORDS",
    "IDLE_FLOOR_MIB",
    "KilledJob",
    "REASON_SENTENCES",
    "STUCK_WINDOW_S",
    "XID_HISTORY_UNAVAILABLE",
    "XID_TABLE",
    "analyze",
    "assess",
    "unreachable_action",
    "driver_wedged",
    "recovery_action",
    "assessed",
    "XID_CATALOGUE_AS_OF",
    "RECOVERY_ACTIONS",
    "clean_slate",
    "duplicate_host_finding",
    "exit_code",
    "fact_label",
    "fact_rows",
    "find_problems",
    "find_survivors",
    "headline",
    "held_mib",
    "ordered_findings",
    "place_text",
    "threads_text",
    "fitness_figures",
    "fitness_summary",
    "idle_limit_mib",
    "job_remnants",
    "judge",
    "memory_at_baseline",
    "memory_verdict",
    "needs_reset",
    "no_data",
    "no_data_text",
    "nothing_recorded",
    "ports_left",
    "refusals",
    "with_assessment",
    "with_facts",
    "word_finding",
    "worst_exit_code",
    "xid_finding",
    "xid_text",
]

_HOMES = {
    "ACTION_DRAIN": "fitness",
    "ACTION_NONE": "fitness",
    "ACTION_REBOOT": "fitness",
    "ACTION_RESET": "fitness",
    "ACTION_WORDS": "fitness",
    "Baselines": "baselines",
    "CANNOT_TELL_WORDS": "levels",
    "CleanCheck": "cleanslate",
    "DEFAULT_BASELINE_MIB": "baselines",
    "DEFAULT_TOLERANCE_MIB": "baselines",
    "DEFUNCT_RESET_AFTER_S": "findings",
    "FINDING_KINDS": "findings",
    "FINDING_SENTENCES": "wording",
    "FINDING_WORDS": "wording",
    "IDLE_FLOOR_MIB": "calibration",
    "KilledJob": "findings",
    "REASON_SENTENCES": "wording",
    "STUCK_WINDOW_S": "stuck",
    "held_mib": "order",
    "ordered_findings": "order",
    "place_text": "stuck",
    "threads_text": "stuck",
    "XID_HISTORY_UNAVAILABLE": "fitness",
    "XID_TABLE": "fitness",
    "analyze": "analysis",
    "assess": "fitness",
    "unreachable_action": "fitness",
    "driver_wedged": "fitness",
    "recovery_action": "fitness",
    "assessed": "fitness",
    "XID_CATALOGUE_AS_OF": "fitness",
    "RECOVERY_ACTIONS": "fitness",
    "clean_slate": "slate",
    "duplicate_host_finding": "findings",
    "exit_code": "levels",
    "find_problems": "findings",
    "find_survivors": "findings",
    "fact_label": "facts",
    "fact_rows": "facts",
    "nothing_recorded": "remains",
    "with_facts": "facts",
    "headline": "levels",
    "fitness_figures": "fitness",
    "fitness_summary": "fitness",
    "idle_limit_mib": "calibration",
    "job_remnants": "findings",
    "judge": "engine",
    "memory_at_baseline": "slate",
    "memory_verdict": "slate",
    "needs_reset": "fitness",
    "no_data": "engine",
    "no_data_text": "engine",
    "ports_left": "cleanslate",
    "refusals": "calibration",
    "with_assessment": "fitness",
    "worst_exit_code": "levels",
    "xid_finding": "findings",
    "xid_text": "fitness",
    "word_finding": "wording",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
