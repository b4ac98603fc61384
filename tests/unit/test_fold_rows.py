"""The folds a view places: found once, placed with the expanded ones left out, each with a row key of its
own; what a finding names is never folded; too few alike members read one by one."""

from __future__ import annotations

from gputui.core.jobs import (
    FOLD_AT,
    FoldedMembers,
    build_forest,
    find_folds,
    finding_pids,
    flatten,
    fold_members,
    place_folds,
)
from gputui.core.model import Finding, HostSnapshot, Owner, replace

LAUNCHER = 1000


def _proc(pid: int, ppid: int, cmdline: list[str], **extra: object) -> dict[str, object]:
    data: dict[str, object] = {
        "pid": pid,
        "ppid": ppid,
        "user": "alice",
        "uid": 1000,
        "state": "S",
        "name": cmdline[0],
        "cmdline": cmdline,
        "start_ticks": pid,
        "sid": LAUNCHER,
        "pgid": LAUNCHER,
        "cgroup": "/user.slice",
    }
    data.update(extra)
    return data


def _snapshot(loaders: int) -> HostSnapshot:
    """A launcher, one GPU worker, ``loaders`` idle loaders and as many more that differ only in owner."""
    processes = [
        _proc(LAUNCHER, 1, ["python3", "train.py"]),
        _proc(2000, LAUNCHER, ["python3", "train.py", "--rank", "0"]),
    ]
    processes += [_proc(3000 + n, LAUNCHER, ["python3", "loader.py"]) for n in range(loaders)]
    gpus = [
        {
            "index": 0,
            "memory_used_mib": 903,
            "memory_total_mib": 49152,
            "processes": [{"pid": 2000, "used_mib": 900, "type": "compute", "visible": True}],
        }
    ]
    snapshot = HostSnapshot.from_dict({"target": "t", "processes": processes, "gpus": gpus})
    # The same loaders again in a container of their own: alike but for the owner, the same words.
    others = tuple(
        replace(proc, pid=proc.pid + 1000, owner=Owner("container", "c0ffee"))
        for proc in snapshot.processes
        if proc.pid >= 3000
    )
    return replace(snapshot, processes=snapshot.processes + others)


def test_folds_alike_but_for_the_owner_are_two_rows_with_keys_of_their_own() -> None:
    nodes = flatten(build_forest(_snapshot(FOLD_AT)))
    folds = find_folds(nodes)
    assert [fold.count for fold in folds] == [FOLD_AT, FOLD_AT]
    assert len({fold.key for fold in folds}) == 2
    rows = place_folds(nodes, folds)
    assert [row.key for row in rows if isinstance(row, FoldedMembers)] == [fold.key for fold in folds]
    assert len(rows) == 2 + 2
    # One of them expanded: its members are rows again, where they stood.
    opened = fold_members(nodes, expanded={folds[1].key})
    assert [r.proc.pid for r in opened if not isinstance(r, FoldedMembers)][2:] == list(folds[1].pids)


def test_one_fewer_than_the_threshold_is_listed_one_by_one() -> None:
    nodes = flatten(build_forest(_snapshot(FOLD_AT - 1)))
    assert find_folds(nodes) == []
    assert place_folds(nodes, []) == nodes


def test_what_a_finding_names_keeps_its_row() -> None:
    snapshot = _snapshot(FOLD_AT + 2)
    named = Finding(kind="orphan", target="t", detail="x", pid=3001, action_pid=3002)
    snapshot = replace(snapshot, findings=(named, Finding(kind="ghost_memory", target="t", detail="y")))
    assert finding_pids(snapshot) == {3001, 3002}
    nodes = flatten(build_forest(snapshot))
    (fold, _other) = find_folds(nodes, keep=finding_pids(snapshot))
    assert fold.count == FOLD_AT
    assert {3001, 3002}.isdisjoint(fold.pids)
    # One more named, and what is left is too few to fold.
    assert len(find_folds(nodes, keep={3001, 3002, 3003})) == 1
