"""``check`` and ``kill --tree`` against a real defunct leader and a true zombie side by side.

The program (``tests/integration/defunct.py``) ends its main thread with ``pthread_exit`` while a worker
thread lives on (in D when it waits in a ``vfork``), and leaves a child it never reaps: a true zombie. The
fake NVML says the defunct process holds GPU memory, as a scheduler whose threads are stuck in the driver
does. Both show as ``<defunct>``; each gets its own finding, and a kill signals the defunct leader itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.defunct import build_defunct_leader, defunct_leader
from tests.integration.procs import gputui_env, is_gone, kill_json, state_of, wait_for
from tests.integration.test_check_kill import check_json

pytestmark = pytest.mark.timeout(180)

HELD_MIB = 2048


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_defunct_leader(tmp_path_factory.mktemp("defunct"))


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    return gputui_env(fake_nvml, tmp_path / "state")


@pytest.fixture
def stuck(program: Path, fake_nvml: Any) -> Iterator[dict[str, int]]:
    """The defunct leader (worker in D) holding GPU0 memory, and its true zombie child."""
    with defunct_leader(program, vfork=True) as running:
        pids = running.pids
        wait_for(lambda: state_of(pids["leader"]) == "Z", "the leader to be defunct")
        wait_for(lambda: state_of(pids["zombie"]) == "Z", "the child to be a zombie")
        wait_for(lambda: state_of(pids["worker"]) == "D", "the worker thread in D")
        fake_nvml.state.add_holder(0, pids["leader"], HELD_MIB, "compute")
        fake_nvml.write()
        yield pids


def test_check_tells_the_defunct_leader_from_the_true_zombie(
    env: dict[str, str], stuck: dict[str, int]
) -> None:
    status, snapshot, document = check_json(env)
    assert status == 1  # GPU0 held: not clean
    leader, zombie = stuck["leader"], stuck["zombie"]
    by_pid = {(f.kind, f.pid): f for f in snapshot.findings}
    defunct = by_pid[("defunct_leader", leader)]
    assert "1 thread lives on (1 in D (uninterruptible))" in defunct.detail
    assert f"holding {HELD_MIB} MiB on GPU0" in defunct.detail
    assert (
        "threads stuck in the driver: memory is released when they exit; if it is still held after 10 "
        "minutes the driver or GPU needs a reset" in defunct.detail
    )
    assert "signalling the parent frees nothing" in defunct.action
    assert defunct.action_pid == leader
    assert ("zombie", leader) not in by_pid
    # The true zombie keeps its finding: its parent (the defunct process) has not reaped it.
    true_zombie = by_pid[("zombie", zombie)]
    assert true_zombie.action_pid == leader
    (host,) = document["hosts"]
    listed = {p["pid"]: p for p in host["processes"]}
    assert listed[leader]["live_threads"] == {"live": 1, "states": {"D": 1}, "omitted": 0}
    assert listed[zombie]["live_threads"] == {"live": 0, "states": {}, "omitted": 0}


def test_kill_tree_signals_the_defunct_leader_itself(env: dict[str, str], stuck: dict[str, int]) -> None:
    leader = stuck["leader"]
    status, payload, stderr = kill_json(env, "--yes", "--tree", "--signal", "KILL", str(leader))
    assert [t["pid"] for t in payload["plan"]["targets"]][-1] == leader, payload
    notes = payload["plan"]["notes"]
    assert not any(f"pid {leader} is a zombie" in note for note in notes), notes
    assert f"pid {stuck['zombie']} is a zombie: it goes when its parent {leader} is signalled" in notes
    results = [(o["pid"], o["result"]) for o in payload["outcomes"] if o["pid"] == leader]
    assert (leader, "sent") in results, payload["outcomes"]
    # SIGKILL ends the vfork wait: the process exits for real, and its zombie child goes to init.
    wait_for(lambda: is_gone(leader) or state_of(stuck["worker"]) is None, "the defunct process to exit")
    assert status == 0, (payload, stderr)
