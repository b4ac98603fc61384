"""A job's idle members that are alike are one row of the process panel (``fold_members``): the data side.

The forest is built from a sample as the collector writes it (a launcher, GPU workers, idle children), then
folded; the forest itself, what a kill takes, keeps every member.
"""

from __future__ import annotations

from gputui.core.jobs import FoldedMembers, build_forest, flatten, fold_key, fold_members
from gputui.core.model import HostSnapshot, Proc

LAUNCHER = 1000


def _proc(pid: int, ppid: int, cmdline: list[str], **extra: object) -> dict[str, object]:
    data: dict[str, object] = {
        "pid": pid,
        "ppid": ppid,
        "user": "alice",
        "uid": 1000,
        "state": "S",
        "name": cmdline[0].rsplit("/", 1)[-1][:15],
        "cmdline": cmdline,
        "start_ticks": pid,
        "create_time": 1_700_000_000.0 + pid,
        "rss_kib": 2048,
        "sid": LAUNCHER,
        "pgid": LAUNCHER,
        "cgroup": "/user.slice",
    }
    data.update(extra)
    return data


def _sample(idle: int = 40, *, zombie: bool = False) -> HostSnapshot:
    processes = [_proc(LAUNCHER, 1, ["python", "serve.py"])]
    gpus = []
    for index in range(2):
        pid = 2000 + index
        processes.append(
            _proc(pid, LAUNCHER, ["python", "worker.py", str(index)], gpu_memory_mib={str(index): 900})
        )
        gpus.append(
            {
                "index": index,
                "memory_used_mib": 903,
                "memory_total_mib": 49152,
                "processes": [{"pid": pid, "used_mib": 900, "type": "compute", "visible": True}],
            }
        )
    for n in range(idle):
        processes.append(_proc(3000 + n, LAUNCHER, ["sleep", "3600"], cpu_pct=0.5))
    processes.append(_proc(3500, LAUNCHER, ["tokenizer", "--fast"]))
    if zombie:
        processes.append(_proc(3600, LAUNCHER, ["sleep", "3600"], state="Z"))
    return HostSnapshot.from_dict({"target": "local", "mode": "nvml", "gpus": gpus, "processes": processes})


def _rows(snapshot: HostSnapshot, **kwargs: object) -> list[object]:
    return fold_members(flatten(build_forest(snapshot)), **kwargs)  # type: ignore[arg-type]


def test_alike_idle_members_are_one_row_and_the_rest_keep_theirs() -> None:
    snapshot = _sample()
    nodes = flatten(build_forest(snapshot))
    assert len(nodes) == 1 + 2 + 40 + 1  # the forest keeps every member: a kill takes them all
    rows = _rows(snapshot)
    folds = [row for row in rows if isinstance(row, FoldedMembers)]
    assert len(rows) == 1 + 2 + 1 + 1
    (fold,) = folds
    assert fold.count == 40
    assert fold.pids == tuple(range(3000, 3040))
    assert fold.parent == LAUNCHER
    assert fold.depth == 1
    assert fold.proc.cmdline == ("sleep", "3600")
    assert fold.rss_kib == 40 * 2048
    assert fold.cpu_pct == 20.0
    assert fold.create_time == 1_700_000_000.0 + 3000
    assert fold.key == fold_key(LAUNCHER, fold.proc)
    assert fold.key.startswith("fold:")  # a row key that is never read as a pid
    # The fold stands where its first member stood; GPU workers and the odd one out keep their rows.
    shown = [row.proc.pid for row in rows]
    assert shown == [LAUNCHER, 2000, 2001, 3000, 3500]


def test_the_key_stays_while_members_come_and_go() -> None:
    first = [r for r in _rows(_sample(40)) if isinstance(r, FoldedMembers)][0]
    later = [r for r in _rows(_sample(12)) if isinstance(r, FoldedMembers)][0]
    assert later.count == 12
    assert later.key == first.key


def test_expanded_kept_and_too_few_are_not_folded() -> None:
    snapshot = _sample()
    key = next(r for r in _rows(snapshot) if isinstance(r, FoldedMembers)).key
    assert len(_rows(snapshot, expanded={key})) == 44
    rows = _rows(snapshot, keep={3005})
    fold = next(r for r in rows if isinstance(r, FoldedMembers))
    assert fold.count == 39
    assert 3005 in [r.proc.pid for r in rows if not isinstance(r, FoldedMembers)]
    assert not any(isinstance(r, FoldedMembers) for r in _rows(_sample(3)))
    assert len(_rows(_sample(3))) == 1 + 2 + 3 + 1


def test_a_zombie_member_is_never_folded() -> None:
    rows = _rows(_sample(zombie=True))
    zombie = [r for r in rows if not isinstance(r, FoldedMembers) and r.proc.pid == 3600]
    assert len(zombie) == 1
    assert isinstance(zombie[0].proc, Proc)
    assert zombie[0].proc.is_zombie
