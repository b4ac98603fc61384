"""The one wording table: every finding kind and every verdict reason, and the function that words it.

Each sentence is built once, from plain fields, by the function named here, and every view shows the
sentence as built (the TUI, ``snapshot``, ``check``, JSON, the fleet view); no view words a finding or a
reason its own way. A new finding kind or verdict reason gets its entry here (a test holds every kind of
``FINDING_KINDS`` to that). The kinds worded from facts (``FINDING_WORDS``) are what ``gputui exporter``
publishes: the fleet calls ``word_finding`` with the exported facts, the monitor's finding was built by the
same function from the same facts (``Finding.facts``).
"""

from __future__ import annotations

from collections.abc import Callable

from gputui.core.model import Finding, FindingFacts
from gputui.core.servers import server_reason, spinning_words
from gputui.core.store import leftovers
from gputui.core.verdict import findings as finding_rules
from gputui.core.verdict import fitness, probing, profiling, readiness, remains, stuck
from gputui.core.verdict import slate as verdict
from gputui.core.verdict.cleanslate import busy_port_reason
from gputui.core.verdict.engine import no_data_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FINDING_WORDS: dict[str, Callable[[str, FindingFacts], Finding]] = {
    "zombie": finding_rules.zombie_words,
    "defunct_leader": stuck.defunct_leader_words,
    "orphan": finding_rules.orphan_words,
    "uninterruptible": stuck.uninterruptible_words,
    "ghost_memory": finding_rules.ghost_words,
    "invisible_pid": finding_rules.invisible_pid_words,
    "survivor": finding_rules.survivor_words,
    "stuck_thread": stuck.stuck_thread_words,
    "profiled": profiling.profiled_words,
    "profiler_unknown": profiling.profiler_unknown_words,
    "spinning": spinning_words,
}
"""Finding kind -> the function that words it from its facts (target, ``FindingFacts``)."""

FINDING_SENTENCES: dict[str, Callable[..., Any]] = {
    **FINDING_WORDS,
    "xid": finding_rules.xid_finding,
    "duplicate_host": finding_rules.duplicate_host_finding,
    "gpu_health": fitness.fitness_findings,
    "xid_history": fitness.fitness_findings,
    "leftover": leftovers.findings,
}
"""Finding kind -> the function that builds its finding (detail and action): from facts where it travels
(``FINDING_WORDS``), else from what only the host shows."""


def word_finding(kind: str, target: str, facts: FindingFacts) -> Finding | None:
    """The finding of ``kind`` worded from ``facts``; None for a kind that is not worded from facts."""
    words = FINDING_WORDS.get(kind)
    return None if words is None else words(target, facts)


REASON_SENTENCES: dict[str, Callable[..., Any]] = {
    "held": verdict.held_reason,
    "ghost_memory": verdict.ghost_reason,
    "memory_only": verdict.memory_only_reason,
    "unreadable": verdict.unreadable_reason,
    "unreported_memory": verdict.unreported_memory_note,
    "unreported_held": verdict.unreported_held_reason,
    "unreported": verdict.unreported_reason,
    "remnant": stuck.remnant_sentence,
    "port": busy_port_reason,
    "server": server_reason,
    "not_ready": readiness.stuck_in_driver,
    "killed_in_driver": stuck.killed_in_driver_reason,
    "defunct_in_driver": readiness.defunct_reset_reason,
    "gpu_health": fitness.unfit_reason,
    "lost_gpu": fitness.lost_gpu_reason,
    "gone_gpu": remains.gone_gpu_reason,
    "probe": probing.probe_reason,
    "probe_unprovable": probing.probe_unavailable,
    "no_data": no_data_text,
}
"""Verdict reason -> the function that words it (a zombie or D-state remnant: its finding's sentence; the two
sentences of ``not_ready`` by themselves, for the fleet's findings read back from an exporter)."""
