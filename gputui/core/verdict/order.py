"""The order every view lists a host's findings in: by what they hold.

GPU memory held first, most first (a defunct leader holding 288 GiB before a zombie whose memory is long
gone); then the findings that block the next job on a GPU (a GPU that needs a reset or reboot, a process stuck
in the driver) before those that do not (a zombie, an advisory Xid, a leftover file); then the oldest first.
Findings alike in all three keep the order they were found in. The verdict engine (``judge``) orders the
findings once, and the TUI's findings panel, ``check``, ``snapshot`` and their JSON list them as judged: at 50
columns the first line of the panel is the biggest finding.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.core.model import Finding

BLOCKING_KINDS = frozenset(
    {
        "gpu_health",
        "stuck_thread",
        "uninterruptible",
        "defunct_leader",
        "ghost_memory",
        "invisible_pid",
        "survivor",
        "orphan",
    }
)
"""Kinds whose finding keeps the next job off a GPU until it is dealt with: its fitness asks for an action,
or a process (or memory no process accounts for) still holds it or may never let go of it."""


def held_mib(finding: Finding) -> int:
    """The GPU memory, in MiB, the thing a finding is about holds: its process's
    (``FindingFacts.memory_mib``), a ghost's excess, an invisible pid's; 0 where none or not known."""
    facts = finding.facts
    if facts is None:
        return 0
    if finding.kind == "ghost_memory":
        return max(0, facts.excess_mib or 0)
    if finding.kind == "invisible_pid":
        return max(0, facts.used_mib or 0)
    return max(0, facts.held_mib)


def weight(finding: Finding) -> tuple[int, int, float]:
    """The sort key: memory held (most first), blocking before not, the oldest first (unknown start last)."""
    since = finding.since
    if since is None or since != since:  # unknown, or NaN from a hostile collector: last
        since = float("inf")
    return (-held_mib(finding), 0 if finding.kind in BLOCKING_KINDS else 1, since)


def ordered_findings(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """The findings in the order every view lists them (see the module docstring); a stable sort."""
    return tuple(sorted(findings, key=weight))
