"""What a killed job leaves behind: a real process maps a segment in (a stand-in for) /dev/shm and holds GPU
memory; ``gputui kill`` records the segment, its receipt and ``gputui check`` name it, ``gputui leftovers
--remove`` removes it only while no process has it open and it is still the same file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration._procs import is_gone, script, wait_for
from tests.integration.procs import audit_lines, gputui_env, run_gputui

pytestmark = pytest.mark.timeout(180)

SEGMENT_BYTES = 3 << 20


def job_code(path: str) -> str:
    """An sglang-like worker: creates ``path``, maps it, touches every page, and waits."""
    return (
        "import json, mmap, os, time\n"
        f"fd = os.open({path!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
        f"os.ftruncate(fd, {SEGMENT_BYTES})\n"
        f"area = mmap.mmap(fd, {SEGMENT_BYTES})\n"
        f"area.write(b'x' * {SEGMENT_BYTES})\n"
        "os.close(fd)\n"
        'os.write(1, (json.dumps({"role": "worker", "pid": os.getpid()}) + "\\n").encode())\n'
        "time.sleep(600)\n"
    )


def holder_code(path: str) -> str:
    return (
        "import json, os, time\n"
        f"fd = os.open({path!r}, os.O_RDONLY)\n"
        'os.write(1, (json.dumps({"role": "holder", "pid": os.getpid()}) + "\\n").encode())\n'
        "time.sleep(600)\n"
    )


@pytest.fixture
def shm(tmp_path: Path) -> Path:
    folder = tmp_path / "shm"
    folder.mkdir()
    return folder


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path, shm: Path) -> dict[str, str]:
    return dict(gputui_env(fake_nvml, tmp_path / "state"), GPUTUI_TEST_SHM_DIR=str(shm))


def kill_job(env: dict[str, str], fake_nvml: Any, segment: Path) -> dict[str, Any]:
    with script(job_code(str(segment)), ["worker"]) as job:
        pid = job.pids["worker"]
        fake_nvml.state.add_holder(0, pid, 2048)
        fake_nvml.write()
        result = run_gputui(["kill", "--json", "--no-discover", "--yes", "--signal", "KILL", str(pid)], env)
        assert result.returncode == 0, result.stdout + result.stderr
        wait_for(lambda: is_gone(pid), "the worker to die")
        return json.loads(result.stdout)


def test_a_killed_jobs_segment_is_named_by_the_receipt_and_check_then_removed(
    env: dict[str, str], fake_nvml: Any, shm: Path
) -> None:
    segment = shm / "sgl_shm_0f3a"
    document = kill_job(env, fake_nvml, segment)
    (left,) = document["leftovers"]["segments"]
    assert left["path"] == str(segment)
    assert left["size_bytes"] >= SEGMENT_BYTES
    assert left["open_by"] == []
    assert document["leftovers"]["shm"]["total_bytes"] > 0

    result = run_gputui(["check", "--no-discover"], env)
    assert f"! leftover: segment {segment} (3.0 MiB, owner root) outlived its killed job" in result.stdout
    assert "-> gputui leftovers local --remove" in result.stdout
    checked = run_gputui(["check", "--json", "--no-discover"], env)
    (host,) = json.loads(checked.stdout)["hosts"]
    kinds = [f["kind"] for f in host["findings"]]
    assert kinds == ["leftover"]
    assert checked.returncode == 1  # the GPUs are free, but a leftover is residue
    assert any(r.startswith("leftover: segment") for r in host["verdict"]["reasons"])
    residue = host["verdict"]["facts"]["residue"]
    assert residue["ok"] is False
    assert residue["line"].startswith(f"leftover: segment {segment} ")

    listed = run_gputui(["leftovers", "local"], env)
    assert listed.returncode == 1
    assert str(segment) in listed.stdout
    assert run_gputui(["leftovers", "local", "--remove"], env).returncode == 2  # no terminal, no --yes
    assert segment.exists()
    removed = run_gputui(["leftovers", "local", "--remove", "--yes"], env)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert f"removed  {segment}" in removed.stdout
    assert not segment.exists()
    lines = [line for line in audit_lines(env) if line.get("action") == "remove_leftover"]
    assert [(line["stage"], line["result"]) for line in lines] == [
        ("intent", "requested"),
        ("remove", "removed"),
    ]
    assert run_gputui(["leftovers", "local"], env).returncode == 0
    assert "leftover" not in run_gputui(["check", "--no-discover"], env).stdout


def test_a_segment_still_open_or_replaced_is_left_alone(
    env: dict[str, str], fake_nvml: Any, shm: Path
) -> None:
    used = shm / "sgl_shm_used"
    swapped = shm / "sgl_shm_swapped"
    kill_job(env, fake_nvml, used)
    kill_job(env, fake_nvml, swapped)
    (shm / "new").write_bytes(b"another file now")
    os.replace(shm / "new", swapped)  # another inode under the old name: not the job's
    with script(holder_code(str(used)), ["holder"]) as other:
        listed = run_gputui(["leftovers", "local"], env)
        assert f"open or mapped by {other.pids['holder']}" in listed.stdout
        assert str(swapped) not in listed.stdout
        result = run_gputui(["leftovers", "local", "--remove", "--yes"], env)
        assert result.returncode == 1
        assert used.exists()
    assert swapped.read_bytes() == b"another file now"
    assert run_gputui(["leftovers", "local", "--remove", "--yes"], env).returncode == 0
    assert not used.exists()
    assert swapped.exists()


def test_read_only_removes_nothing(env: dict[str, str], fake_nvml: Any, shm: Path) -> None:
    segment = shm / "sgl_shm_ro"
    kill_job(env, fake_nvml, segment)
    result = run_gputui(["leftovers", "local", "--remove", "--yes", "--read-only"], env)
    assert result.returncode == 2
    assert "read-only mode: nothing is removed" in result.stderr
    assert segment.exists()
    os.unlink(segment)


def test_an_mps_daemon_that_outlived_the_job_is_named_and_never_stopped(
    env: dict[str, str], fake_nvml: Any, shm: Path, tmp_path: Path
) -> None:
    daemon_binary = tmp_path / "nvidia-cuda-mps-control"
    shutil.copy("/bin/sleep", daemon_binary)
    daemon = subprocess.Popen([str(daemon_binary), "600"], start_new_session=True)  # noqa: S603
    try:
        document = kill_job(env, fake_nvml, shm / "sgl_shm_mps")
        (left,) = document["leftovers"]["mps"]
        assert left["pid"] == daemon.pid
        result = run_gputui(["check", "--no-discover"], env)
        assert (
            f"! leftover: MPS control daemon pid {daemon.pid} (user root) outlived its killed job"
            in result.stdout
        )
        assert "echo quit | nvidia-cuda-mps-control" in result.stdout
        run_gputui(["leftovers", "local", "--remove", "--yes"], env)
        assert daemon.poll() is None  # reported, never stopped by gputui
    finally:
        daemon.kill()
        daemon.wait(timeout=10)
    assert "MPS control daemon" not in run_gputui(["check", "--no-discover"], env).stdout
