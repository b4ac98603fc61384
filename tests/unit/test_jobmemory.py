"""The collector's record of the GPU jobs and GPUs it saw since boot (``agent.proc.jobmemory``): bounded,
written only on change, forgotten at a new boot, and never trusted when it is not gputui's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.proc import jobmemory
from gputui.agent.proc.jobmemory import JobMemory

BOOT = "1b0c8f7e-0000-4000-8000-000000000001"


def proc(pid: int, ticks: int, gpu_mib: int = 0, ports: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "pid": pid,
        "start_ticks": ticks,
        "name": f"worker{pid}",
        "user": "alice",
        "uid": 1000,
        "owner": {"kind": "user", "id": "alice", "name": "alice"},
        "gpu_memory_mib": {"0": gpu_mib} if gpu_mib else {},
        "listen_ports": list(ports),
    }


GPUS = [{"index": 0, "uuid": "GPU-aaaa", "pci_bus_id": "00000000:17:00.0", "error": None}]


def test_a_job_is_remembered_released_and_judged_by_start_time(tmp_path: Path) -> None:
    path = str(tmp_path / "record.json")
    memory = JobMemory(BOOT, path)
    procs = [proc(100, 5), proc(101, 6, gpu_mib=40960, ports=(30000,)), proc(102, 7)]
    memory.note({100: [100, 101, 102]}, procs, GPUS, now=1000.0)
    assert memory.wire({}, GPUS)["jobs"] == []  # still holding: nothing to judge
    memory.note({}, [], GPUS, now=1010.0)  # its memory is gone
    # 101 is gone, 102 runs on, 100's number now belongs to another process.
    wire = JobMemory(BOOT, path).wire({100: 99, 102: 7}, GPUS)
    (job,) = wire["jobs"]
    assert (job["root"], job["members_total"], job["released"]) == (100, 3, 1010.0)
    assert job["remaining"] == [[102, 7]]
    assert (job["gpus"], job["ports"]) == ([[0, 40960]], [30000])
    assert wire["jobs_seen"] == 1


def test_the_record_stays_bounded_on_a_host_of_many_short_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobmemory, "MAX_JOBS", 8)
    monkeypatch.setattr(jobmemory, "MAX_MEMBERS", 16)
    path = tmp_path / "record.json"
    memory = JobMemory(BOOT, str(path))
    for n in range(40):
        root = 1000 + n * 100
        members = list(range(root, root + 20))
        memory.note({root: members}, [proc(pid, 1 + n, gpu_mib=1) for pid in members], GPUS, now=float(n))
        memory.note({}, [], GPUS, now=n + 0.5)
    document = json.loads(path.read_text())
    assert len(document["jobs"]) == 8
    assert all(len(job["members"]) == 16 and job["members_total"] == 20 for job in document["jobs"])
    assert sorted(job["released"] for job in document["jobs"]) == [n + 0.5 for n in range(32, 40)]


def test_nothing_is_written_while_nothing_changes(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    memory = JobMemory(BOOT, str(path))
    procs = [proc(100, 5, gpu_mib=10)]
    memory.note({100: [100]}, procs, GPUS, now=1.0)
    before = os.stat(path)
    for second in range(2, 50):
        memory.note({100: [100]}, procs, GPUS, now=float(second))
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_another_boots_record_is_forgotten_and_a_gone_gpu_is_said(tmp_path: Path) -> None:
    path = str(tmp_path / "record.json")
    JobMemory("old-boot", path).note({100: [100]}, [proc(100, 5, gpu_mib=10)], GPUS, now=1.0)
    assert JobMemory(BOOT, path).wire({}, GPUS)["jobs_seen"] == 0
    memory = JobMemory(BOOT, path)
    memory.note({}, [], GPUS + [{"index": 1, "uuid": "GPU-bbbb", "pci_bus_id": "00000000:18:00.0"}], now=5.0)
    (gone,) = memory.wire({}, GPUS)["gpus_gone"]
    assert (gone["uuid"], gone["pci_bus_id"], gone["last_seen"]) == ("GPU-bbbb", "00000000:18:00.0", 5.0)
    assert memory.wire({}, None)["gpus_gone"] == []  # a list that failed calls no GPU gone


def test_a_hostile_record_is_read_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "boot_id": BOOT,
                "since": "soon",
                "jobs": [
                    {"root": 1, "root_start": 1, "first_seen": 1.0},  # pid 1 is never a job's
                    {"root": "x"},
                    [1, 2, 3],
                    {
                        "root": 500,
                        "root_start": 9,
                        "first_seen": 2.0,
                        "released": 3.0,
                        "members": [[501, 9, "w"], [1, 9, "init"], ["a", 1, 2], [502, 10, {"x": 1}]] * 400,
                        "gpus": [[0, -5], [-1, 4], [2, 7]],
                        "ports": [0, 70000, 8080, "x"],
                        "members_total": -4,
                    },
                ],
                "gpus": [{"uuid": 7}, {"uuid": "GPU-cccc", "first_seen": 1.0}],
            }
        )
    )
    memory = JobMemory(BOOT, str(path))
    wire = memory.wire({501: 9, 502: 10}, [{"uuid": "GPU-cccc"}])
    (job,) = wire["jobs"]
    assert job["root"] == 500
    assert job["remaining"] == [[501, 9], [502, 10]]
    assert (job["gpus"], job["ports"], job["members_total"]) == ([[2, 7]], [8080], 2)
    assert wire["since"] is None
    assert wire["warning"] is None


def test_a_record_that_is_not_a_file_is_one_line_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    os.mkfifo(path)
    memory = JobMemory(BOOT, str(path))
    memory.note({100: [100]}, [proc(100, 5, gpu_mib=10)], GPUS, now=1.0)
    warning = memory.wire({}, GPUS)["warning"]
    assert warning == f"job record not used: {path}: a FIFO, not a regular file"
    assert path.is_fifo()


def test_what_a_job_may_leave_is_looked_for_on_change_and_kept_by_identity(tmp_path: Path) -> None:
    memory = JobMemory(BOOT, str(tmp_path / "record.json"))
    memory.note({100: [100]}, [proc(100, 5, gpu_mib=10)], GPUS, now=1.0)
    assert memory.scans_due(2.0) == []  # a one-shot's collector ends before it looks
    after = 1.0 + jobmemory.SCAN_AFTER_S
    assert memory.scans_due(after) == [((100, 5), [100])]
    assert memory.scans_due(after + 1) == []  # nothing changed, not a minute yet
    segment = {
        "path": "/dev/shm/sgl_shm_1",
        "dev": 5,
        "inode": 9,
        "uid": 0,
        "size_bytes": 4096,
        "kind": "segment",
    }
    daemon = {"pid": 77, "start_ticks": 3, "uid": 1000, "user": "alice"}
    found = {
        "segments": [segment, dict(segment, path="/dev/shm/renamed"), {"path": 3}],
        "mps": [daemon, daemon],
    }
    memory.add_leftovers((100, 5), found)
    memory.note({100: [100, 101]}, [proc(100, 5, gpu_mib=10), proc(101, 6)], GPUS, now=after + 2)
    assert memory.scans_due(after + 2) == [((100, 5), [100, 101])]  # a new member: looked at again
    assert memory.scans_due(after + 2 + jobmemory.SEGMENT_SCAN_S) == [((100, 5), [100, 101])]
    memory.note({}, [], GPUS, now=100.0)
    (job,) = JobMemory(BOOT, str(tmp_path / "record.json")).wire({}, GPUS, lambda kept: kept)["jobs"]
    assert [s["path"] for s in job["segments"]] == ["/dev/shm/sgl_shm_1"]
    assert job["mps"] == [daemon]


def test_more_live_jobs_than_the_bound_keep_the_first_without_rewriting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobmemory, "MAX_JOBS", 4)
    path = tmp_path / "record.json"
    memory = JobMemory(BOOT, str(path))
    roots = list(range(1000, 1010))
    for n in range(len(roots)):  # ten jobs at once, none released
        seen = roots[: n + 1]
        memory.note({r: [r] for r in seen}, [proc(r, 1, gpu_mib=1) for r in seen], GPUS, now=float(n))
    document = json.loads(path.read_text())
    assert sorted(job["root"] for job in document["jobs"]) == roots[:4]
    before = os.stat(path)
    memory.note({r: [r] for r in roots}, [proc(r, 1, gpu_mib=1) for r in roots], GPUS, now=20.0)
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns  # no swap, no write


def test_every_released_job_whose_processes_are_gone_stops_being_looked_for(tmp_path: Path) -> None:
    memory = JobMemory(BOOT, str(tmp_path / "record.json"))
    roots = [1000 + 10 * n for n in range(jobmemory.MAX_RELEASED_SENT + 4)]
    memory.note({r: [r] for r in roots}, [proc(r, 1, gpu_mib=1) for r in roots], GPUS, now=1.0)
    memory.note({}, [], GPUS, now=2.0)
    assert memory.remembered_pids() == roots
    assert len(memory.wire({}, GPUS)["jobs"]) == jobmemory.MAX_RELEASED_SENT
    assert memory.remembered_pids() == []  # the jobs not sent settle too
    record = json.loads((tmp_path / "record.json").read_text())
    assert all("settled" not in job and "scanned_at" not in job for job in record["jobs"])
