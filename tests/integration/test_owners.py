"""Owners of real processes in real cgroups, owner-scoped kills, per-process GPU figures from the fake NVML.

The cgroups are shaped like a Slurm step, a Docker container and a Kubernetes pod (v2, in the unified
hierarchy) and a Slurm v1 step (in systemd's named v1 hierarchy): both without controllers, made under a
folder of this test's own and removed after. The CLI runs in a subprocess, its agent reading real /proc and
real pynvml over the fake NVML.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.kill.guard import KillGuard
from gputui.agent.proc.procfs import scan_proc
from gputui.core.jobs import build_forest
from gputui.core.model import HostSnapshot
from tests.integration._procs import agent_process
from tests.integration.procs import (
    WORKER_MIB,
    gputui_env,
    is_gone,
    kill_json,
    run_gputui,
    start_ticks_of,
    state_of,
    wait_for,
)
from tests.interpreters import python38

pytestmark = pytest.mark.timeout(180)

CID = "5e" * 32
POD_UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
HOLDER = r"""
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode()[:15], 0, 0, 0)  # PR_SET_NAME
if len(sys.argv) > 2:  # a child that holds nothing, of the same session and process group
    child = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(600)"])
    os.write(1, ("%d %d\n" % (os.getpid(), child.pid)).encode())
else:
    os.write(1, ("%d\n" % os.getpid()).encode())
time.sleep(600)
"""


def _mount_of(fstype: str, option: str | None = None) -> Path:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        at = fields.index("-")
        if fields[at + 1] != fstype or (option is not None and option not in fields[at + 3].split(",")):
            continue
        if os.access(fields[4], os.W_OK):
            return Path(fields[4])
    raise AssertionError(
        f"these tests put processes in cgroups of their own: they need a writable {fstype} hierarchy "
        f"{option or ''} (run the suite as root on a host with one, as CI does)"
    )


@contextmanager
def cgroup(hierarchy: Path, relative: str) -> Iterator[Path]:
    """A nested cgroup under a top folder of this test's own; removed (deepest first) once empty."""
    top = hierarchy / f"gputui-test-{os.getpid()}-{os.urandom(3).hex()}"
    path = top / relative
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        wait_for(lambda: not (path / "cgroup.procs").read_text().split(), "the cgroup to empty")
        current = path
        while current != hierarchy:
            current.rmdir()
            current = current.parent


class Holders:
    """Real processes (each its own session), killed and reaped at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, env: dict[str, str] | None = None, with_child: bool = False) -> list[int]:
        argv = [sys.executable, "-S", "-c", HOLDER, name] + (["child"] if with_child else [])
        proc = subprocess.Popen(  # noqa: S603
            argv,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        return [int(word) for word in proc.stdout.readline().split()]

    def close(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


@pytest.fixture
def holders() -> Iterator[Holders]:
    running = Holders()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    return gputui_env(fake_nvml, tmp_path / "state")


def snapshot_of(env: dict[str, str]) -> HostSnapshot:
    result = run_gputui(["check", "--json", "--no-discover"], env)
    assert result.stdout, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    return HostSnapshot.from_dict(host)


def owner_json(env: dict[str, str], pid: int) -> dict[str, Any]:
    result = run_gputui(["check", "--json", "--no-discover"], env)
    (host,) = json.loads(result.stdout)["hosts"]
    (entry,) = [p for p in host["processes"] if p["pid"] == pid]
    return entry["owner"]


def join(path: Path, pid: int) -> None:
    (path / "cgroup.procs").write_text(str(pid))


@contextmanager
def three_owners(holders: Holders, fake_nvml: Any) -> Iterator[dict[str, int]]:
    """A Slurm step, a Docker container and a Kubernetes pod, each holding GPU memory, and a plain process."""
    unified = _mount_of("cgroup2")
    with ExitStack() as stack:
        step = stack.enter_context(
            cgroup(unified, "system.slice/slurmstepd.scope/job_4242/step_0/user/task_0")
        )
        box = stack.enter_context(cgroup(unified, f"system.slice/docker-{CID}.scope"))
        pod_slice = f"kubepods-besteffort-pod{POD_UID.replace('-', '_')}.slice"
        pod = stack.enter_context(
            cgroup(
                unified,
                f"kubepods.slice/kubepods-besteffort.slice/{pod_slice}/cri-containerd-{CID[::-1]}.scope",
            )
        )
        pids = {
            "slurm": holders.start("trainer", {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "llama-ft"})[0],
            "docker": holders.start("server")[0],
            "pod": holders.start(
                "infer", {"POD_NAME": "infer-0", "POD_NAMESPACE": "prod", "AWS_TOKEN": "s3cr3t"}
            )[0],
        }
        join(step, pids["slurm"])
        join(box, pids["docker"])
        join(pod, pids["pod"])
        for index, pid in enumerate(pids.values()):
            fake_nvml.state.add_holder(index, pid, WORKER_MIB)
        fake_nvml.write()
        try:
            yield pids
        finally:
            holders.close()


def test_owners_of_processes_in_real_cgroups(env: dict[str, str], fake_nvml: Any, holders: Holders) -> None:
    with three_owners(holders, fake_nvml) as pids:
        plain = holders.start("plain")[0]
        result = run_gputui(["check", "--json", "--no-discover"], env)
        (host,) = json.loads(result.stdout)["hosts"]
        owners = {p["pid"]: p["owner"] for p in host["processes"]}
        assert owners[pids["slurm"]] == {
            "kind": "slurm",
            "id": "4242.0",
            "name": "llama-ft",
            "job": "4242",
            "step": "0",
            "source": "cgroup",
        }
        assert owners[pids["docker"]]["kind"] == "container"
        assert (owners[pids["docker"]]["id"], owners[pids["docker"]]["runtime"]) == (CID, "docker")
        pod = owners[pids["pod"]]
        assert (pod["kind"], pod["id"], pod["name"], pod["namespace"]) == ("pod", POD_UID, "infer-0", "prod")
        assert pod["container"] == CID[::-1]
        assert "s3cr3t" not in result.stdout  # nothing of the environment but the named variables
        if plain in owners:  # not a GPU process: listed only as what it is, never guessed
            assert owners[plain]["kind"] == "user"
        assert all(
            entry["owner"]["kind"] in {"slurm", "pod", "container", "unit", "user"}
            for entry in host["processes"]
        )
        # Each is a job of its own: a cgroup change ends a tree.
        roots = {tree.proc.pid for tree in build_forest(HostSnapshot.from_dict(host))}
        assert roots >= set(pids.values())


def test_a_slurm_v1_step_in_systemds_named_hierarchy(
    env: dict[str, str], fake_nvml: Any, holders: Holders
) -> None:
    named = _mount_of("cgroup", "name=systemd")
    with cgroup(named, "slurm/uid_0/job_77/step_batch/task_0") as step:
        (pid,) = holders.start("batch")
        join(step, pid)
        assert Path(f"/proc/{pid}/cgroup").read_text().count("job_77") == 1
        fake_nvml.state.add_holder(0, pid, 1024)
        fake_nvml.write()
        owner = owner_json(env, pid)
        assert (owner["kind"], owner["id"], owner["step"]) == ("slurm", "77.batch", "batch")
        holders.close()


def test_kill_all_is_scoped_to_the_owner_named(env: dict[str, str], fake_nvml: Any, holders: Holders) -> None:
    with three_owners(holders, fake_nvml) as pids:
        ticks = {pid: start_ticks_of(pid) for pid in pids.values()}
        # Several owners and none named: refused, naming them; nothing is signalled.
        result = run_gputui(["kill", "--no-discover", "--yes", "--all-gpu"], env)
        assert result.returncode != 0
        (line,) = result.stderr.strip().splitlines()
        assert "slurm:4242.0" in line
        assert "pod:prod/infer-0" in line
        assert f"container:{CID[:12]}" in line
        assert "--owner" in line
        assert all(state_of(pid) in ("S", "R") for pid in pids.values())
        # An owner that holds no GPU job: one line, nothing signalled.
        result = run_gputui(["kill", "--no-discover", "--yes", "--all-gpu", "--owner", "slurm:999"], env)
        assert result.returncode != 0
        assert "no GPU job of slurm:999" in result.stderr
        bad = run_gputui(["kill", "--no-discover", "--yes", "--all-gpu", "--owner", "nope"], env)
        assert bad.returncode != 0
        assert bad.stderr.count("\n") == 1
        assert "Traceback" not in bad.stderr
        # The Slurm job's only: the container and the pod are spared.
        status, payload, stderr = kill_json(env, "--yes", "--all-gpu", "--owner", "slurm:4242")
        assert status == 0, (payload, stderr)
        assert {t["pid"] for t in payload["plan"]["targets"]} == {pids["slurm"]}
        assert payload["plan"]["targets"][0]["owner"]["id"] == "4242.0"
        wait_for(lambda: is_gone(pids["slurm"], ticks[pids["slurm"]]), "the Slurm job to die")
        assert state_of(pids["docker"]) in ("S", "R")
        assert state_of(pids["pod"]) in ("S", "R")
        # The confirmation groups what it signals by owner.
        listing = run_gputui(["kill", "--no-discover", "--yes", "--all-gpu", "--owner", "all"], env)
        assert listing.returncode == 0, listing.stdout + listing.stderr
        assert "  owner pod:prod/infer-0:" in listing.stdout
        assert f"  owner container:{CID[:12]}:" in listing.stdout
        wait_for(lambda: is_gone(pids["docker"]) and is_gone(pids["pod"]), "every job to die")


def test_a_tree_kill_never_crosses_into_another_owner(
    env: dict[str, str], fake_nvml: Any, holders: Holders
) -> None:
    unified = _mount_of("cgroup2")
    with (
        cgroup(unified, "system.slice/slurmstepd.scope/job_5/step_0/user/task_0") as step,
        cgroup(unified, f"system.slice/docker-{CID}.scope") as box,
    ):
        parent, child = holders.start("launcher", with_child=True)
        join(step, parent)
        join(box, child)  # its child now runs in a container: not the Slurm step's to kill
        fake_nvml.state.add_holder(0, parent, WORKER_MIB)
        fake_nvml.write()
        # The collector's own tree walk leaves it out, as the kill re-reads the tree.
        guard = KillGuard(os.getpid())
        assert child not in guard.tree_members(parent, scan_proc())
        status, payload, stderr = kill_json(env, "--yes", "--tree", str(parent))
        assert status == 0, (payload, stderr)
        assert {t["pid"] for t in payload["plan"]["targets"]} == {parent}
        assert any(f"pid {child} belongs to another owner (container:" in n for n in payload["plan"]["notes"])
        assert {o["pid"] for o in payload["outcomes"]} == {parent}
        wait_for(lambda: is_gone(parent), "the step's process to die")
        assert state_of(child) in ("S", "R")
        holders.close()


@pytest.mark.parametrize("python", [sys.executable, "3.8"], ids=["client python", "python 3.8"])
def test_per_process_gpu_figures_from_the_fake_nvml(fake_nvml: Any, holders: Holders, python: str) -> None:
    (busy,) = holders.start("busy")
    (idle,) = holders.start("idle")
    fake_nvml.state.add_holder(2, busy, 2048, sm_pct=87, mem_pct=31, enc_pct=4, dec_pct=9)
    fake_nvml.state.add_holder(2, idle, 1024)
    fake_nvml.state.gpus[5].proc_util_error = "NOT_SUPPORTED"
    fake_nvml.state.add_holder(5, idle, 512, sm_pct=50)
    fake_nvml.write()
    interpreter = python38() if python == "3.8" else python
    with agent_process(python=interpreter, env=fake_nvml.env()) as agent:
        snapshot = agent.sample()
    entries = {p["pid"]: p for p in snapshot["processes"]}
    assert entries[busy]["gpu_sm_pct"] == {"2": 87}
    assert entries[busy]["gpu_mem_bw_pct"] == {"2": 31}
    assert (entries[busy]["gpu_enc_pct"], entries[busy]["gpu_dec_pct"]) == ({"2": 4}, {"2": 9})
    # No sample (GPU 2) and a GPU that does not support the query (5): blank, never a zero.
    assert entries[idle]["gpu_sm_pct"] == {}  # never a sample: the key is there, empty
    assert "process_util" not in json.dumps(snapshot["gpus"])
    procs = {p.pid: p for p in HostSnapshot.from_dict(snapshot).processes}
    assert procs[busy].gpu_sm_pct == {2: 87}
    assert procs[idle].gpu_sm_pct == {}
    assert procs[busy].rss_kib is not None
    assert procs[busy].create_time is not None
    assert procs[busy].owner is not None
    assert procs[busy].owner.kind in {"user", "unit", "container", "pod", "slurm"}
