"""Processes that have not run since the last process sample are not described again.

A GPU job of hundreds of idle members (data-loader helpers, a launcher's children) would otherwise cost every
member's files on every process sample. A member whose stat line has not moved (``ProcStat.unmoved_since``:
no CPU time, no page fault, the same state, rss and parents) keeps its entry, and its children as read last,
for up to ``STILL_ENTRY_KEEP_S``, and one that held nothing in /dev/shm at the last live look
(``leftovers.LiveLooks``) is not looked at again; one that ran, forked or changed is read afresh. Real
processes throughout:
the "GPU process" is a real child that the test names as the holder of GPU 0.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.proc import details, leftovers, owners, processes, proctree
from gputui.agent.proc.processes import ProcessSampler
from gputui.agent.proc.procfs import children_file_supported, read_stat
from gputui.agent.proc.proctree import ChildrenBook, scan_trees
from gputui.agent.protocol import PROCESS_CPU_PCT
from tests.integration._procs import state_of, wait_for

# A job's root: forks a child for every line on stdin (blocked in the read meanwhile: it takes no CPU time),
# a busy child for a line "busy", and reports each child's pid on stdout.
FORKER = r"""
import os, sys, time
while True:
    line = sys.stdin.readline()
    if not line:
        break
    pid = os.fork()
    if pid == 0:
        if line.strip() == "busy":
            while True:
                sum(range(20000))
                time.sleep(0.01)
        time.sleep(600)
        os._exit(0)
    sys.stdout.write(f"{pid}\n")
    sys.stdout.flush()
"""


class Forker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.children: list[int] = []
        self.busy: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fork(self, kind: str = "idle") -> int:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(kind + "\n")
        self.proc.stdin.flush()
        child = int(self.proc.stdout.readline())
        self.children.append(child)
        wait_for(lambda: state_of(child) in ("S", "R"), "the child running")
        return child

    def still(self) -> None:
        """Wait until the root and every child show a stat line twice the same (the forks settled)."""
        quiet = [self.pid] + [c for c in self.children if c != self.busy]

        def settled() -> bool:
            first = {pid: read_stat(pid) for pid in quiet}
            time.sleep(0.3)
            return all(
                (now := read_stat(pid)) is not None
                and (was := first[pid]) is not None
                and now.unmoved_since(was)
                for pid in quiet
            )

        wait_for(settled, "the job's idle processes still")

    def close(self) -> None:
        for child in self.children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.kill()
        self.proc.wait()
        for child in self.children:  # reparented to init (or a subreaper) once the root is gone
            wait_for(lambda child=child: state_of(child) in (None, "Z"), "the child gone")


@pytest.fixture
def job() -> Iterator[Forker]:
    assert children_file_supported(), "this kernel lacks /proc/<pid>/task/<tid>/children"
    forker = Forker()
    try:
        yield forker
    finally:
        forker.close()


def gpus_held_by(pid: int) -> list[dict[str, Any]]:
    return [
        {
            "index": 0,
            "uuid": "GPU-still",
            "memory_total_mib": 49152,
            "memory_used_mib": 1003,
            "memory_reserved_mib": 0,
            "processes": [{"pid": pid, "used_mib": 1000, "type": "compute"}],
        }
    ]


def listed(sampler: ProcessSampler, holder: int, full: bool) -> dict[int, dict[str, Any]]:
    sampler.sample(gpus_held_by(holder), time.time(), full=full)
    return {p["pid"]: p for p in sampler.processes}


def test_a_still_member_keeps_its_entry_and_one_that_runs_gets_a_new_one(job: Forker) -> None:
    idle = job.fork()
    job.busy = job.fork("busy")
    job.still()
    sampler = ProcessSampler(child_pid_namespace=False)
    try:
        listed(sampler, job.pid, full=True)  # the first CPU share is unknown (None), the next 0.0
        time.sleep(0.2)
        first = listed(sampler, job.pid, full=True)
        time.sleep(0.5)
        second = listed(sampler, job.pid, full=False)
        third = listed(sampler, job.pid, full=True)
    finally:
        sampler.close()
    assert {idle, job.busy} <= set(first)
    # The idle member: the very entry made first, through a partial and a full sweep.
    assert second[idle] is first[idle]
    assert third[idle] is first[idle]
    # The busy one ran: described afresh, with the CPU it took.
    assert second[job.busy] is not first[job.busy]
    assert (second[job.busy].get(PROCESS_CPU_PCT) or 0) > 0
    # The GPU process is always new: its GPU figures are this sample's, and once it holds nothing (still
    # as it is) its entry says so.
    assert second[job.pid] is not first[job.pid]
    assert first[job.pid]["gpu_memory_mib"] == {"0": 1000}
    sampler = ProcessSampler(child_pid_namespace=False)
    try:
        listed(sampler, job.pid, full=True)
        listed(sampler, job.pid, full=True)
        sampler.sample(gpus_held_by(idle), time.time(), full=True)  # the memory moved to another member
        after = {p["pid"]: p for p in sampler.processes}
    finally:
        sampler.close()
    assert after[job.pid]["gpu_memory_mib"] == {}
    assert after[idle]["gpu_memory_mib"] == {"0": 1000}
    # What the kept entry says is what a new description says.
    fresh = ProcessSampler(child_pid_namespace=False)
    try:
        again = listed(fresh, job.pid, full=True)[idle]
    finally:
        fresh.close()
    same = ("ppid", "user", "uid", "state", "name", "cmdline", "start_ticks", "rss_kib", "cgroup", "owner")
    for field in same:
        assert again[field] == first[idle][field], field


def test_a_still_members_cgroup_is_read_again_after_the_limit_and_a_move_makes_a_new_entry(
    job: Forker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cgroup changes from outside, with no run of the process: what a still entry may not keep past the
    limit. The cgroup and environment files are read from a planted /proc (stat lines from the real one)."""
    idle = job.fork()
    job.still()
    planted = tmp_path / "proc"
    for pid in (job.pid, idle):
        (planted / str(pid)).mkdir(parents=True)
        (planted / str(pid) / "environ").write_bytes(b"")
        (planted / str(pid) / "cgroup").write_text("0::/job.slice/first.scope\n")
    for module, name in (
        (processes, "STILL_ENTRY_KEEP_S"),
        (details, "CMDLINE_CACHE_S"),
        (owners, "CGROUP_CACHE_S"),
    ):
        monkeypatch.setattr(module, name, 0.2)
    sampler = ProcessSampler(child_pid_namespace=False, owners=owners.OwnerReader(proc_root=str(planted)))
    try:
        listed(sampler, job.pid, full=True)  # the first CPU share is unknown (None), the next 0.0
        first = listed(sampler, job.pid, full=True)[idle]
        assert first["cgroup"] == "/job.slice/first.scope"
        (planted / str(idle) / "cgroup").write_text("0::/job.slice/moved.scope\n")
        assert listed(sampler, job.pid, full=True)[idle] is first  # within the limit: not read
        time.sleep(0.3)
        moved = listed(sampler, job.pid, full=True)[idle]
        assert moved is not first
        assert moved["cgroup"] == "/job.slice/moved.scope"
        assert moved["owner"]["kind"] == owners.OWNER_UNIT
        assert moved["owner"]["id"] == "moved.scope"
        time.sleep(0.3)
        assert listed(sampler, job.pid, full=True)[idle] is moved  # read again, the same: kept
    finally:
        sampler.close()


def test_a_still_root_keeps_its_children_and_a_fork_is_seen(
    job: Forker, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_child = job.fork()
    job.still()
    reads: list[int] = []
    real = proctree.read_children

    def counted(pid: int) -> list[int]:
        reads.append(pid)
        return real(pid)

    monkeypatch.setattr(proctree, "read_children", counted)
    book = ChildrenBook()
    assert set(scan_trees([job.pid], book=book)) >= {job.pid, first_child}
    assert job.pid in reads
    reads.clear()
    assert set(scan_trees([job.pid], book=book)) >= {job.pid, first_child}
    # Both still: nothing read below them.
    assert job.pid not in reads
    assert first_child not in reads
    # A fork makes the root run: its children are read again, and the new one is in the table.
    second_child = job.fork()
    reads.clear()
    table = scan_trees([job.pid], book=book)
    assert job.pid in reads
    assert {first_child, second_child} <= set(table)
    # A child that is gone (killed and reaped by no one: a zombie until its parent goes) is still below
    # it; one whose pid names another parent now never is.
    os.kill(first_child, signal.SIGKILL)
    wait_for(lambda: state_of(first_child) in (None, "Z"), "the first child dead")
    table = scan_trees([job.pid], book=book)
    assert table[job.pid].pid == job.pid
    assert all(stat.ppid == job.pid for pid, stat in table.items() if pid in (first_child, second_child))


def test_the_book_forgets_processes_the_table_no_longer_has(
    job: Forker, monkeypatch: pytest.MonkeyPatch
) -> None:
    job.fork()
    job.still()
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        book = ChildrenBook()
        scan_trees([job.pid], book=book)
        reads: list[int] = []
        real = proctree.read_children
        monkeypatch.setattr(proctree, "read_children", lambda pid: reads.append(pid) or real(pid))
        root = read_stat(job.pid)
        assert root is not None
        book.children(root)
        assert reads == []  # kept
        scan_trees([other.pid], book=book)  # a walk that does not reach the job
        book.children(root)
        assert reads.count(job.pid) == 1  # forgotten, so read again
    finally:
        other.kill()
        other.wait()


# A job member that opens a file in the shm folder (argv[1]) for each line on stdin and keeps it open.
OPENER = r"""
import os, sys
kept = []
while True:
    line = sys.stdin.readline()
    if not line:
        break
    kept.append(open(os.path.join(sys.argv[1], line.strip()), "w"))
    sys.stdout.write("ok\n")
    sys.stdout.flush()
"""


def test_a_live_look_skips_still_members_that_held_nothing_and_sees_what_one_opens(
    job: Forker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setenv(leftovers.TEST_SHM_ENV, str(shm))
    idle = job.fork()
    opener = subprocess.Popen(
        [sys.executable, "-c", OPENER, str(shm)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    daemon_binary = tmp_path / leftovers.MPS_CONTROL
    shutil.copy("/bin/sleep", daemon_binary)
    daemon = subprocess.Popen([str(daemon_binary), "600"], start_new_session=True)  # noqa: S603
    try:
        assert opener.stdin is not None
        assert opener.stdout is not None
        job.still()
        members = [job.pid, idle, opener.pid]
        looked: list[int] = []
        real = leftovers._held_paths
        monkeypatch.setattr(
            leftovers, "_held_paths", lambda pid, folder: looked.append(pid) or real(pid, folder)
        )
        looks = leftovers.LiveLooks()
        uids = {os.getpid(): os.getuid()}

        def look(host: dict[int, Any] | None = None) -> dict[str, Any]:
            looked.clear()
            stats = {pid: stat for pid in members if (stat := read_stat(pid)) is not None}
            return looks.look(members, 16, stats, uids, host)

        found = look()
        assert sorted(looked) == sorted(members)
        assert found["segments"] == []
        assert [d["pid"] for d in found["mps"]] == [daemon.pid]  # every pid read: the daemon by its name
        wait_for(lambda: (look(), not looked)[1], "no member looked at again once all are still")
        opener.stdin.write("sgl_shm_0\n")
        opener.stdin.flush()
        assert opener.stdout.readline() == "ok\n"
        found = look()
        assert opener.pid in looked  # it ran
        assert idle not in looked
        assert [s["name"] for s in found["segments"]] == ["sgl_shm_0"]
        found = look()
        assert looked == [opener.pid]  # what is held is looked at every time
        assert [s["name"] for s in found["segments"]] == ["sgl_shm_0"]
        # The MPS daemons by name from a host table (each read again); one that table lacks is not found.
        host = {pid: stat for pid in (daemon.pid, job.pid) if (stat := read_stat(pid)) is not None}
        assert [d["pid"] for d in look(host)["mps"]] == [daemon.pid]
        assert look({job.pid: host[job.pid]})["mps"] == []
    finally:
        opener.kill()
        opener.wait()
        daemon.kill()
        daemon.wait()
