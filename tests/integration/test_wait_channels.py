"""Where a real stuck thread waits, named by ``check`` and ``snapshot``; and the findings in their one order.

A real defunct leader whose worker thread waits in a ``vfork`` (state D, ``tests/integration/defunct.py``)
holds GPU0 memory in the fake NVML, beside the true zombie it never reaped. The collector reads the worker's
wait channel (and, as root, its kernel stack); every view names the kernel function the test reads itself
from ``/proc/PID/task/TID/wchan`` (which one depends on the kernel: ``kernel_clone`` on 6.x), and lists the
defunct leader, which holds the memory, before the zombie, whose memory is long gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.proc.procfs import parse_stat, read_small
from gputui.agent.proc.waits import ThreadWaits
from gputui.core.model import ThreadWait
from gputui.core.verdict import place_text
from tests.integration._procs import REPO, Binary, Script, build_vfork_waiter
from tests.integration.defunct import build_defunct_leader, defunct_leader
from tests.integration.procs import gputui_env, run_gputui, state_of, wait_for

pytestmark = pytest.mark.timeout(180)

HELD_MIB = 2048
SYSTEM_PYTHON = "/usr/bin/python3"
"""A Python every user can run (the test venv's interpreter may live under root's private home)."""
CLI_UID = 65533
"""An unprivileged user the collector runs as: it may read its own threads' wait channels, no stack."""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_defunct_leader(tmp_path_factory.mktemp("defunct"))


@pytest.fixture(scope="module")
def waiter_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_vfork_waiter(tmp_path_factory.mktemp("vfork"))


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    return gputui_env(fake_nvml, tmp_path / "state")


def wchan_of(pid: int, tid: int) -> str:
    """What the kernel says the thread waits in, read here the way any tool would."""
    return Path(f"/proc/{pid}/task/{tid}/wchan").read_text().strip()


@pytest.fixture
def stuck(program: Path, fake_nvml: Any) -> Iterator[dict[str, int]]:
    """The defunct leader (its worker in D) holding GPU0 memory, and its true zombie child."""
    with defunct_leader(program, vfork=True) as running:
        pids = running.pids
        wait_for(lambda: state_of(pids["leader"]) == "Z", "the leader to be defunct")
        wait_for(lambda: state_of(pids["zombie"]) == "Z", "the child to be a zombie")
        wait_for(
            lambda: (
                (Path(f"/proc/{pids['leader']}/task/{pids['worker']}/stat").read_text().split(") ")[1][0])
                == "D"
            ),
            "the worker thread in D",
        )
        fake_nvml.state.add_holder(0, pids["leader"], HELD_MIB, "compute")
        fake_nvml.write()
        yield pids


def test_the_collector_names_where_a_real_d_state_process_waits(waiter_binary: Path) -> None:
    waiter = Binary(waiter_binary, ("waiter",))
    try:
        pid = waiter.pids["waiter"]
        # The kernel names the wait once the parent is asleep in it (a busy box can show D a moment before).
        wait_for(
            lambda: state_of(pid) == "D" and wchan_of(pid, pid) not in ("", "0"),
            "the vfork parent in D, its wait channel named",
        )
        expected = wchan_of(pid, pid)
        stat = parse_stat(pid, read_small(f"/proc/{pid}/stat") or b"")
        assert stat is not None
        (wait,) = ThreadWaits().waits(stat, 1000.0, in_job=False) or []
        assert (wait["tid"], wait["state"], wait["since"]) == (pid, "D", 1000.0)
        assert wait["symbol"] == expected
        assert wait["killed"] is False
        # Root reads the stack, which names the module (none: the kernel's own vfork wait).
        assert wait["stack"] is (os.geteuid() == 0)
        assert wait["module"] is None
    finally:
        waiter.kill()


def test_check_names_the_wait_and_lists_the_memory_first(env: dict[str, str], stuck: dict[str, int]) -> None:
    leader, zombie, worker = stuck["leader"], stuck["zombie"], stuck["worker"]
    place = f"thread {worker} (D) in {wchan_of(leader, worker)}"
    done = run_gputui(["check", "--no-discover"], env)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    said = [line for line in lines if line.startswith("! ")]
    assert said[0].startswith(f"! defunct_leader: pid {leader} (defunct_leader)"), said
    assert place in said[0]
    assert any(line.startswith(f"! zombie: pid {zombie} ") for line in said[1:]), said
    # The verdict's residue is the finding's sentence, word for word (one fact, one sentence).
    (residue,) = [line for line in lines if line.lstrip().startswith("residue:")]
    assert residue.endswith(said[0].removeprefix("! defunct_leader: ")), "\n".join(lines)

    done = run_gputui(["snapshot", "--json", "--no-discover"], env)
    assert done.returncode == 0, done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    kinds = [(f["kind"], f["pid"]) for f in host["findings"]]
    assert kinds.index(("defunct_leader", leader)) < kinds.index(("zombie", zombie)), kinds
    (listed,) = [p for p in host["processes"] if p["pid"] == leader]
    (wait,) = listed["waits"]
    assert (wait["tid"], wait["state"], wait["symbol"]) == (worker, "D", wchan_of(leader, worker))
    assert place in host["findings"][0]["detail"]

    done = run_gputui(["snapshot", "--no-discover"], env)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.index(f"defunct_leader: pid {leader}") < text.index(f"zombie: pid {zombie}"), text
    assert place in text


READ_WAITS = """
import json, sys
from gputui.agent.proc.procfs import parse_stat, read_small
from gputui.agent.proc.waits import ThreadWaits
out = {}
for pid in map(int, sys.argv[1:]):
    stat = parse_stat(pid, read_small("/proc/%d/stat" % pid))
    out[pid] = ThreadWaits().waits(stat, 1000.0, in_job=False)
print(json.dumps(out))
"""


def test_unprivileged_the_wait_channel_names_its_own_and_another_users_is_unknown(
    waiter_binary: Path,
) -> None:
    """Not root: no stack, so no module; its own process's wait channel is read, another user's reads "0"
    (the kernel will not say): unknown, never a guess. Needs root to start processes as another user."""
    if os.geteuid() != 0:
        raise AssertionError("this test starts processes as another user: run the suite as root (CI does)")
    shared = Path(tempfile.mkdtemp(prefix="gputui-waits-"))
    shared.chmod(0o755)
    binary = shared / "vfork_waiter"
    shutil.copy2(waiter_binary, binary)
    binary.chmod(0o755)
    # The checkout may be private (a 0700 mktemp clone): the reader runs on a copy anyone may read.
    code = shared / "py"
    shutil.copytree(REPO / "gputui", code / "gputui", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [code, *code.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    own = Script("", ("waiter",), python=str(binary), user=CLI_UID)
    foreign = Binary(waiter_binary, ("waiter",))
    try:
        mine, roots = own.pids["waiter"], foreign.pids["waiter"]
        for pid in (mine, roots):
            wait_for(lambda pid=pid: state_of(pid) == "D", "the vfork parent in D")
        done = subprocess.run(
            [SYSTEM_PYTHON, "-S", "-c", READ_WAITS, str(mine), str(roots)],
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code)},
            user=CLI_UID,
            group=CLI_UID,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        found = {int(pid): waits for pid, waits in json.loads(done.stdout).items()}
        (own_wait,) = found[mine]
        assert own_wait["symbol"] == wchan_of(mine, mine)
        assert (own_wait["stack"], own_wait["module"]) == (False, None)
        (other_wait,) = found[roots]
        assert other_wait["symbol"] is None
        wait = ThreadWait.from_dict(other_wait)
        assert wait is not None
        assert place_text(wait) == "where unknown (wait channel unreadable)"
    finally:
        own.kill()
        foreign.kill()
        shutil.rmtree(shared, ignore_errors=True)
