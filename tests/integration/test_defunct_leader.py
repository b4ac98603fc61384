"""``<defunct>`` told apart: a true zombie (no live thread) and a leader whose threads live on, in D or not.

Against real processes (``tests/integration/defunct.py``): a C program whose main thread ends with
``pthread_exit`` while a worker thread lives on, optionally stuck in the kernel (state D) in a ``vfork``,
and its never-reaped child, a true zombie.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.agent.proc.threads import zombie_live_threads
from tests.integration._procs import (
    REPO,
    is_gone,
    proc_stat_fields,
    start_ticks,
    state_of,
    wait_for,
)
from tests.integration.defunct import build_defunct_leader, defunct_leader
from tests.interpreters import python38

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_defunct_leader(tmp_path_factory.mktemp("defunct"))


def _settled(pids: dict[str, int], worker_state: str) -> None:
    wait_for(lambda: state_of(pids["leader"]) == "Z", "the leader to be defunct")
    wait_for(lambda: state_of(pids["zombie"]) == "Z", "the child to be a zombie")
    wait_for(lambda: state_of(pids["worker"]) == worker_state, f"the worker in state {worker_state}")


def _group_members(pgid: int) -> list[int]:
    members = []
    for name in os.listdir("/proc"):
        fields = proc_stat_fields(int(name)) if name.isdigit() else None
        if fields is not None and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(name))
    return members


@pytest.mark.parametrize(("vfork", "worker_state"), [(False, "S"), (True, "D")])
def test_a_defunct_leader_shows_its_live_thread_and_a_true_zombie_none(
    program: Path, vfork: bool, worker_state: str
) -> None:
    with defunct_leader(program, vfork=vfork) as running:
        pids = running.pids
        _settled(pids, worker_state)
        # What ps shows for both: Z, <defunct>.
        assert state_of(pids["leader"]) == state_of(pids["zombie"]) == "Z"
        assert zombie_live_threads(pids["leader"]) == {
            "threads": [{"tid": pids["worker"], "state": worker_state}],
            "omitted": 0,
        }
        assert zombie_live_threads(pids["zombie"]) == {"threads": [], "omitted": 0}
        # Identity: the right start time matches, another reads as gone.
        ticks = start_ticks(pids["leader"])
        assert zombie_live_threads(pids["leader"], start_ticks=ticks) is not None
        assert zombie_live_threads(pids["leader"], start_ticks=ticks + 1) is None
        # Over the cap, threads are counted, not read.
        assert zombie_live_threads(pids["leader"], max_threads=0) == {"threads": [], "omitted": 1}
    wait_for(lambda: is_gone(pids["leader"]), "the program to end")
    wait_for(lambda: not _group_members(running.pid), "every process of the program to end")


def test_processes_that_are_not_zombies_or_are_gone_read_as_none(program: Path) -> None:
    assert zombie_live_threads(os.getpid()) is None  # alive
    with defunct_leader(program) as running:
        _settled(running.pids, "S")
        assert zombie_live_threads(running.pids["worker"]) is None  # a live thread of the defunct process
    wait_for(lambda: is_gone(running.pids["leader"]), "the program to end")
    assert zombie_live_threads(running.pids["leader"]) is None


def _fake_task(root: Path, pid: int, tid: int, stat: str) -> None:
    task = root / str(pid) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "stat").write_text(stat)


def _stat(tid: int, name: str, state: str, ticks: int = 777) -> str:
    fields = [state, "1", "1", "1", "0", "-1", "0"] + ["0"] * 12 + [str(ticks)] + ["0"] * 30
    return f"{tid} ({name}) " + " ".join(fields) + "\n"


def test_names_that_look_like_fields_and_broken_stat_files(tmp_path: Path) -> None:
    _fake_task(tmp_path, 40, 40, _stat(40, "x) R 1 (y", "Z"))
    _fake_task(tmp_path, 40, 41, _stat(41, "evil) Z (", "D"))
    _fake_task(tmp_path, 40, 42, _stat(42, "gone", "X"))
    _fake_task(tmp_path, 40, 43, "43 (cut) S 1")  # too short
    _fake_task(tmp_path, 40, 44, _stat(44, "t", "Z"))  # an exited thread, not yet reaped
    (tmp_path / "40" / "task" / "self-ish").mkdir()
    assert zombie_live_threads(40, proc_root=str(tmp_path)) == {
        "threads": [{"tid": 41, "state": "D"}],
        "omitted": 0,
    }
    assert zombie_live_threads(40, start_ticks=777, proc_root=str(tmp_path)) is not None
    _fake_task(tmp_path, 50, 50, "garbage without parentheses")
    assert zombie_live_threads(50, proc_root=str(tmp_path)) is None
    assert zombie_live_threads(60, proc_root=str(tmp_path)) is None


PROBE_ON_38 = """
import json, sys
from gputui.agent.proc.threads import zombie_live_threads
print(json.dumps([zombie_live_threads(int(pid)) for pid in sys.argv[1:]]))
"""


@pytest.fixture
def stuck(program: Path) -> Iterator[dict[str, int]]:
    with defunct_leader(program, vfork=True) as running:
        _settled(running.pids, "D")
        yield running.pids


def test_the_probe_runs_on_python_38_as_it_does_here(stuck: dict[str, int]) -> None:
    pids = [str(stuck["leader"]), str(stuck["zombie"]), str(os.getpid())]
    done = subprocess.run(
        [python38(), "-c", PROBE_ON_38, *pids],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [zombie_live_threads(int(pid)) for pid in pids]
    assert json.loads(done.stdout)[0]["threads"] == [{"tid": stuck["worker"], "state": "D"}]
