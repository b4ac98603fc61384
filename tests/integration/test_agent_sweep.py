"""Partial process samples: between full sweeps the agent reads only the GPU trees, never less than that.

A full sweep reads the stat of every pid on the host; the samples between read the GPU processes, their
ancestors, everything below their tree roots (/proc/<pid>/task/*/children) and what the last list had. The
agent runs in-process here with a stand-in GPU backend that lists real child processes as GPU processes, so
the test chooses which sample is forced. Nothing here sends a signal except the scripts' own cleanup of
the processes they started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gputui.agent import collector
from gputui.agent.collector import Agent
from gputui.agent.proc.procfs import children_file_supported, read_stat, scan_proc
from gputui.agent.proc.proctree import ancestors_of, scan_trees, tree_members, tree_root
from gputui.agent.proc.statfds import StatFds
from tests.integration._procs import CHAIN, TREE, ZOMBIE_MAKER, script, state_of, wait_for

# The GPU process forks a zombie and a sleeping child only once the test creates the trigger file, so both
# appear after the agent's full sweep. Their pids go to a second file.
LATE_CHILDREN = r"""
import json, os, sys, time
trigger, report = sys.argv[1], sys.argv[2]
os.write(1, (json.dumps({"role": "holder", "pid": os.getpid()}) + "\n").encode())
while not os.path.exists(trigger):
    time.sleep(0.01)
zombie = os.fork()
if zombie == 0:
    os._exit(0)
sleeper = os.fork()
if sleeper == 0:
    time.sleep(600)
    os._exit(0)
with open(report + ".tmp", "w") as fh:
    json.dump({"zombie": zombie, "sleeper": sleeper}, fh)
os.rename(report + ".tmp", report)
time.sleep(600)
"""

FIELDS = ("ppid", "state", "name", "start_ticks", "pgid", "sid", "cmdline", "gpu_memory_mib")


class GpuStandIn:
    """A GPU backend that lists chosen pids as compute processes of GPU 0 and accounts for all its memory."""

    mode = "nvml"
    host_error = None
    driver_version = "570.124.06"
    cuda_driver_version = None

    def __init__(self) -> None:
        self.holders: dict[int, int] = {}
        self.unaccounted_mib = 0

    def start(self) -> None:
        pass

    def poll(self, want_processes: bool) -> list[dict[str, Any]]:
        gpu: dict[str, Any] = {
            "index": 0,
            "uuid": "GPU-stand-in",
            "memory_total_mib": 49152,
            "memory_used_mib": 3 + sum(self.holders.values()) + self.unaccounted_mib,
            "memory_reserved_mib": 0,
        }
        if want_processes:
            gpu["processes"] = [
                {"pid": pid, "used_mib": mib, "type": "compute"} for pid, mib in sorted(self.holders.items())
            ]
        return [gpu]

    def close(self) -> None:
        pass


@contextmanager
def agent_with(gpu: GpuStandIn) -> Iterator[Agent]:
    agent = Agent(
        use_pynvml=False, discover_health=False, process_interval_s=0.0, full_sweep_every=3, backend=gpu
    )
    try:
        yield agent
    finally:
        agent.close()


def procs_by_pid(snapshot: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["pid"]: p for p in snapshot["processes"]}


@pytest.fixture(autouse=True)
def _children_files() -> None:
    assert children_file_supported(), "this kernel lacks /proc/<pid>/task/<tid>/children"


def test_scan_trees_reads_the_same_tree_as_the_whole_table() -> None:
    with script(TREE, ["root", "A", "G"]) as tree:
        whole = scan_proc()
        part = scan_trees([tree.pids["A"]])
        root = tree_root(tree.pids["A"], whole)
        assert tree_root(tree.pids["A"], part) == root
        members = tree_members([root], whole)
        assert {tree.pids[r] for r in ("root", "A", "G")} <= members
        # The script leads a session of its own, so its job stops there, below this test process.
        assert root == tree.pids["root"]
        # The script's session, G aside (a group member, not a descendant), and the chain above it.
        expected = {pid for pid in members if whole[pid].session == tree.pid} - {tree.pids["G"]}
        expected.update(ancestors_of(tree.pids["root"], whole))
        assert os.getpid() in expected
        assert expected <= set(part), sorted(expected - set(part))
        for pid in expected:
            assert (part[pid].ppid, part[pid].start_ticks) == (whole[pid].ppid, whole[pid].start_ticks)
        # Known pids are read too, so a double-forked group member found by a full sweep stays listed.
        assert tree.pids["G"] in scan_trees([tree.pids["A"]], [tree.pids["G"]])


def test_a_partial_sample_lists_what_the_full_one_listed() -> None:
    gpu = GpuStandIn()
    with script(TREE, ["root", "A", "G"]) as tree, agent_with(gpu) as agent:
        gpu.holders[tree.pids["A"]] = 1000
        # The script reports its pids just before it goes to sleep: compare states only once it sleeps.
        for role in ("root", "A", "G"):
            wait_for(lambda pid=tree.pids[role]: state_of(pid) == "S", f"{role} asleep")
        full = agent.sample(force_processes=True)
        assert agent.processes.last_sweep_full is True
        partial = agent.sample()
        assert agent.processes.last_sweep_full is False
        before, after = procs_by_pid(full), procs_by_pid(partial)
        # The script's own session and the chain above it; the rest of the tree root's subtree (this test
        # run's neighbours) may change between the two samples.
        session = {pid for pid, proc in before.items() if proc["sid"] == tree.pid}
        assert session == {tree.pids[r] for r in ("root", "A", "G")}
        chain, pid = [], before[tree.pids["root"]]["ppid"]
        while pid in before:
            chain.append(pid)
            pid = before[pid]["ppid"]
        assert os.getpid() in chain
        for pid in session | set(chain):
            assert pid in after, pid
            assert {f: after[pid][f] for f in FIELDS} == {f: before[pid][f] for f in FIELDS}, pid
        assert {pid for pid, proc in after.items() if proc["sid"] == tree.pid} == session
        assert after[tree.pids["A"]]["gpu_memory_mib"] == {"0": 1000}
        assert partial["processes_time"] > full["processes_time"]


def test_a_partial_sample_sees_new_children_and_zombies_below_a_gpu_process(tmp_path: Path) -> None:
    gpu = GpuStandIn()
    trigger, report = tmp_path / "go", tmp_path / "children.json"
    with (
        script(LATE_CHILDREN, ["holder"], argv_extra=[str(trigger), str(report)]) as late,
        agent_with(gpu) as agent,
    ):
        holder = late.pids["holder"]
        gpu.holders[holder] = 2000
        agent.sample(force_processes=True)
        assert agent.processes.last_sweep_full is True
        trigger.touch()
        wait_for(report.exists, "the late children")
        children = json.loads(report.read_text())
        wait_for(lambda: state_of(children["zombie"]) == "Z", "the zombie")
        snapshot = agent.sample()
        assert agent.processes.last_sweep_full is False
        procs = procs_by_pid(snapshot)
        assert procs[children["zombie"]]["state"] == "Z"
        assert procs[children["zombie"]]["ppid"] == holder
        assert procs[children["sleeper"]]["ppid"] == holder
        assert procs[holder]["gpu_memory_mib"] == {"0": 2000}


def test_a_zombie_outside_every_gpu_tree_is_listed_by_the_next_full_sweep_at_the_latest() -> None:
    gpu = GpuStandIn()
    with script(TREE, ["root", "A", "G"]) as tree, agent_with(gpu) as agent:
        gpu.holders[tree.pids["A"]] = 1000
        agent.sample()
        with script(ZOMBIE_MAKER, ["parent", "zombie"]) as maker:
            zombie = maker.pids["zombie"]
            wait_for(lambda: state_of(zombie) == "Z", "the zombie")
            # A forced sample is always a full sweep: the `sample` command never misses it.
            forced = procs_by_pid(agent.sample(force_processes=True))
            assert agent.processes.last_sweep_full is True
            assert forced[zombie]["state"] == "Z"
            assert maker.pids["parent"] in forced  # its parent, the one a kill would target
            # Once listed, partial samples keep re-reading it.
            partial = procs_by_pid(agent.sample())
            assert agent.processes.last_sweep_full is False
            assert partial[zombie]["state"] == "Z"
        with script(ZOMBIE_MAKER, ["parent", "zombie"]) as maker:
            zombie = maker.pids["zombie"]
            wait_for(lambda: state_of(zombie) == "Z", "the zombie")
            sweeps = []
            for _ in range(agent.processes.full_sweep_every):
                listed = procs_by_pid(agent.sample())
                sweeps.append(agent.processes.last_sweep_full)
                if agent.processes.last_sweep_full:
                    assert listed[zombie]["state"] == "Z"
            assert True in sweeps, "no full sweep within full_sweep_every process samples"


def test_the_first_snapshot_lists_the_gpu_trees_and_the_next_one_sweeps_the_host() -> None:
    gpu = GpuStandIn()
    with (
        script(TREE, ["root", "A", "G"]) as tree,
        script(ZOMBIE_MAKER, ["parent", "zombie"]) as maker,
        agent_with(gpu) as agent,
    ):
        gpu.holders[tree.pids["A"]] = 1000
        zombie = maker.pids["zombie"]
        wait_for(lambda: state_of(zombie) == "Z", "the zombie")
        first = procs_by_pid(agent.sample())
        assert agent.processes.last_sweep_full is False
        assert first[tree.pids["A"]]["gpu_memory_mib"] == {"0": 1000}
        assert tree.pids["root"] in first  # the tree's root and what is below it (G, double-forked away, is
        # only in its process group: the sweep finds it too)
        assert zombie not in first  # outside every GPU tree: the whole-host sweep finds it
        second = procs_by_pid(agent.sample())
        assert agent.processes.last_sweep_full is True
        assert second[zombie]["state"] == "Z"
        assert tree.pids["G"] in second


def test_memory_nobody_accounts_for_always_gets_a_full_sweep_and_the_device_scan() -> None:
    gpu = GpuStandIn()
    with script(TREE, ["root", "A", "G"]) as tree, agent_with(gpu) as agent:
        gpu.holders[tree.pids["A"]] = 1000
        agent.sample()
        gpu.unaccounted_mib = 4096
        for _ in range(agent.processes.full_sweep_every):
            snapshot = agent.sample()
            assert agent.processes.last_sweep_full is True
            assert isinstance(snapshot["device_holders"], list)


def test_full_sweeps_only_without_children_files() -> None:
    gpu = GpuStandIn()
    with script(TREE, ["root", "A", "G"]) as tree, agent_with(gpu) as agent:
        gpu.holders[tree.pids["A"]] = 1000
        agent.processes._children_file = False  # a kernel built without CONFIG_PROC_CHILDREN
        for _ in range(agent.processes.full_sweep_every + 1):
            agent.sample()
            assert agent.processes.last_sweep_full is True


def test_full_sweep_every_one_means_always() -> None:
    gpu = GpuStandIn()
    agent = Agent(
        use_pynvml=False, discover_health=False, process_interval_s=0.0, full_sweep_every=1, backend=gpu
    )
    try:
        for _ in range(3):
            agent.sample()
            assert agent.processes.last_sweep_full is True
    finally:
        agent.close()


def open_fd_targets() -> set[str]:
    targets = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.add(os.readlink("/proc/self/fd/" + fd))
        except OSError:
            pass
    return targets


def test_kept_schedstat_fds_read_what_a_fresh_scan_reads_and_close_when_the_process_is_gone() -> None:
    reader = StatFds(max_fds=100000)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        first = reader.scan()
        assert child.pid in first
        assert f"/proc/{child.pid}/schedstat" not in open_fd_targets()  # kept from the second sight on
        reader.scan()
        assert f"/proc/{child.pid}/schedstat" in open_fd_targets()
        again = reader.scan()
        for pid in (os.getpid(), child.pid):
            fresh = read_stat(pid)
            assert fresh is not None
            kept = again[pid]
            assert (kept.name, kept.ppid, kept.pgrp, kept.start_ticks) == (
                fresh.name,
                fresh.ppid,
                fresh.pgrp,
                fresh.start_ticks,
            )
    finally:
        child.kill()
        child.wait()
    assert child.pid not in reader.scan()
    assert f"/proc/{child.pid}/schedstat" not in open_fd_targets()
    reader.close()
    assert reader.open_count == 0
    assert not any(t.startswith("/proc/") and t.endswith("/schedstat") for t in open_fd_targets())


def test_a_kept_fd_of_a_reaped_process_never_stands_for_a_new_process_with_that_pid() -> None:
    """Simulates pid reuse: the fd kept for a pid belongs to a reaped process; the pid is read anew."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    child_stat = read_stat(child.pid)
    stale = os.open(f"/proc/{child.pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
    gate = os.pread(stale, 256, 0)
    child.wait()
    reader = StatFds(max_fds=100000, gate=True)
    name = str(os.getpid())
    # As if our pid had belonged to the reaped child before, with its stat line cached behind that fd.
    assert child_stat is not None
    reader._fds[name] = stale
    reader._gates[name] = gate
    reader._parsed[name] = child_stat
    try:
        table = reader.scan()
        mine = read_stat(os.getpid())
        assert mine is not None
        assert table[os.getpid()].start_ticks == mine.start_ticks != child_stat.start_ticks
        assert reader.open_count == 0  # the stale fd is closed; the pid counts as seen for the first time
        reader.scan()
        assert f"/proc/{os.getpid()}/schedstat" in open_fd_targets()
    finally:
        reader.close()


def test_an_idle_process_is_not_read_again_until_it_runs_and_a_zombie_always_is() -> None:
    """The schedstat gate: an unchanged process keeps its parsed line; exiting makes it run, so Z is seen."""
    reader = StatFds(max_fds=100000)
    assert reader.gate, "this kernel's /proc/<pid>/schedstat does not say when a process ran"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wait_for(lambda: state_of(child.pid) == "S", "the child asleep")
        reader.scan()
        assert child.pid not in reader.from_cache
        reader.scan()  # the fd is opened now, its stat line read with it
        assert child.pid not in reader.from_cache
        table = reader.scan()
        assert child.pid in reader.from_cache
        assert table[child.pid].state == "S"
        assert reader.stat_reads < len(table)
        os.kill(child.pid, signal.SIGKILL)  # our own child, not reaped yet: a zombie
        wait_for(lambda: state_of(child.pid) == "Z", "the child a zombie")
        assert reader.scan()[child.pid].state == "Z"
        assert child.pid not in reader.from_cache
        reader.scan()
        assert child.pid not in reader.from_cache  # a zombie is read every time: its reaping needs no run
    finally:
        child.kill()
        child.wait()
        reader.close()


def test_a_child_reparented_while_it_sleeps_shows_its_new_parent() -> None:
    """Reparenting changes the ppid of a process that does not run: a gone parent's children are re-read."""
    reader = StatFds(max_fds=100000)
    with script(CHAIN, ["root", "holder", "leaf"]) as chain, contextlib.closing(reader):
        holder, leaf = chain.pids["holder"], chain.pids["leaf"]
        wait_for(lambda: state_of(holder) == "S" and state_of(leaf) == "S", "the chain asleep")
        reader.scan()
        reader.scan()
        table = reader.scan()
        assert holder in reader.from_cache
        assert table[holder].ppid == chain.pid
        os.kill(chain.pid, signal.SIGKILL)  # the root, our own child; reaped at once
        chain.proc.wait(timeout=10)
        wait_for(lambda: (read_stat(holder) or table[holder]).ppid != chain.pid, "the holder reparented")
        table = reader.scan()
        fresh = read_stat(holder)
        assert fresh is not None
        assert table[holder].ppid == fresh.ppid != chain.pid
        assert table[leaf].ppid == holder


def test_without_the_gate_every_stat_line_is_read() -> None:
    reader = StatFds(max_fds=100000, gate=False)
    try:
        reader.scan()
        table = reader.scan()
        # Every listed pid's stat is read; one that exits between the listing and its read is read, not a row
        # (a busy host starts and ends processes during the scan).
        assert reader.stat_reads >= len(table)
        assert not reader.from_cache
        assert reader.open_count == 0
    finally:
        reader.close()


def test_without_an_fd_budget_the_scan_is_still_complete() -> None:
    reader = StatFds(max_fds=0)
    table = reader.scan()
    assert reader.open_count == 0
    assert {os.getpid(), os.getppid()} <= set(table)
    assert set(scan_proc()) & set(table) >= {os.getpid(), 1}


def test_closing_the_agent_closes_its_stat_fds() -> None:
    gpu = GpuStandIn()
    with agent_with(gpu) as agent:
        agent.sample(force_processes=True)
        agent.sample(force_processes=True)
        assert f"/proc/{os.getpid()}/schedstat" in open_fd_targets()
    assert f"/proc/{os.getpid()}/schedstat" not in open_fd_targets()


def test_a_kept_fd_reports_a_state_change_of_an_otherwise_idle_process() -> None:
    """Unchanged stat lines are not parsed again; a changed one (here: stopped, then continued) always is."""
    reader = StatFds(max_fds=100000)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wait_for(lambda: state_of(child.pid) == "S", "the child asleep")
        assert reader.scan()[child.pid].state == "S"
        assert reader.scan()[child.pid].state == "S"
        assert reader.scan()[child.pid].state == "S"
        assert child.pid in reader.from_cache
        os.kill(child.pid, signal.SIGSTOP)  # our own child
        wait_for(lambda: state_of(child.pid) == "T", "the child stopped")
        assert reader.scan()[child.pid].state == "T"
        os.kill(child.pid, signal.SIGCONT)
        wait_for(lambda: state_of(child.pid) == "S", "the child asleep again")
        assert reader.scan()[child.pid].state == "S"
    finally:
        child.kill()
        child.wait()
        reader.close()


def test_process_lists_come_faster_while_memory_drains_and_slow_down_after() -> None:
    """Memory falling on a GPU shortens the process interval for DRAIN_WINDOW_S; steady memory restores it."""

    gpu = GpuStandIn()
    gpu.holders = {os.getpid(): 4000}
    agent = Agent(
        use_pynvml=False, discover_health=False, memory_interval_s=0.1, process_interval_s=60.0, backend=gpu
    )
    try:
        first = agent.sample()
        listed_at = first["processes_time"]
        assert agent.sample()["processes_time"] == listed_at  # at rest: 60 s between lists
        gpu.holders = {os.getpid(): 1000}  # 3000 MiB freed: draining
        agent.sample()
        assert agent.draining
        agent._processes_mono -= collector.DRAIN_PROCESS_INTERVAL_S  # as if half a second had passed
        assert agent.sample()["processes_time"] != listed_at
        agent._draining_until_mono = 0.0  # the drain window is over
        relisted_at = agent.sample(force_processes=True)["processes_time"]
        agent._processes_mono -= collector.DRAIN_PROCESS_INTERVAL_S
        assert agent.sample()["processes_time"] == relisted_at
        assert not agent.draining
        gpu.holders = {os.getpid(): 1000 - collector.DRAIN_DROP_MIB}  # a wobble, not a drain
        agent.sample()
        assert not agent.draining
    finally:
        agent.close()
