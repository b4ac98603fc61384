"""The shape of ``gputui snapshot --json``: each host's GPU jobs and what its findings name, the rest counted.

The sample behind it is the whole-host sweep ``check`` judges (so both give the same verdict); what the
document leaves out is weight: the processes of a sample that are neither in a GPU job's tree nor named by a
finding (the jobs' ancestors up to init, a zombie no finding names) are counted by state, not listed.
``--all-processes`` lists every process of the sample.
"""

from __future__ import annotations

from gputui.core.jobs import build_forest, flatten
from gputui.core.model import HostSnapshot, snapshots_document

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROCESSES_NOT_LISTED = "processes_not_listed"
"""Key of a host's entry: ``{"count": N, "states": {state letter: N}}`` of the processes left out; null
when the host gave no process list to leave anything out of (unreachable, no data)."""


def listed_pids(snapshot: HostSnapshot) -> set[int]:
    """The pids a host's entry lists: every process of its GPU jobs' trees and every pid a finding names."""
    pids = {node.proc.pid for node in flatten(build_forest(snapshot))}
    for finding in snapshot.findings:
        pids.update(pid for pid in (finding.pid, finding.action_pid) if pid is not None)
    return pids


def host_entry(snapshot: HostSnapshot, all_processes: bool = False) -> dict[str, Any]:
    """One host of the document (``HostSnapshot.to_dict`` with its processes chosen)."""
    (entry,) = snapshots_document([snapshot])["hosts"]
    if all_processes:
        return entry
    keep = listed_pids(snapshot)
    listed: list[dict[str, Any]] = []
    states: dict[str, int] = {}
    for proc, data in zip(snapshot.processes, entry["processes"], strict=True):
        if proc.pid in keep:
            listed.append(data)
        else:
            state = proc.state or "?"
            states[state] = states.get(state, 0) + 1
    entry["processes"] = listed
    no_data = snapshot.error is not None and not snapshot.processes
    entry[PROCESSES_NOT_LISTED] = (
        None if no_data else {"count": sum(states.values()), "states": dict(sorted(states.items()))}
    )
    return entry


def document(snapshots: list[HostSnapshot], all_processes: bool = False) -> dict[str, Any]:
    """The top-level JSON document: ``{"hosts": [...]}``."""
    return {"hosts": [host_entry(s, all_processes) for s in snapshots]}
