"""The operator's own kill (``kill``, ``pkill``), not gputui's: what is left of the job is named from what the
collector remembered of it, as three facts (RELIABILITY 60).

A real sglang-shaped tree under a process named ``nsys``, below a container init that adopts orphans and
never reaps them: two schedulers that hold GPU memory (the fake NVML lists them) and ignore TERM, and a
detokenizer that holds none. ``gputui check`` sees it once; then the test kills it the way the story's
operator did, and clears the fake NVML's list as the driver would.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.integration.exporter_proc import ExporterProcess
from tests.integration.procs import (
    OUTSIDE_KILL_SCHEDULERS,
    WORKER_MIB,
    gputui_env,
    kill_from_outside,
    node,
    outside_kill_job,
    proc_tree,
    run_gputui,
    start_ticks_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

SCHEDULERS = OUTSIDE_KILL_SCHEDULERS


def check(env: dict[str, str], *extra: str) -> tuple[int, dict[str, Any]]:
    result = run_gputui(["check", "--json", "--no-discover", *extra], env)
    assert result.stdout, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    return result.returncode, host


def test_an_outside_kill_names_the_survivor_and_the_zombies_then_says_clean_as_three_facts(
    fake_nvml: Any, tmp_path: Path
) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    with proc_tree(outside_kill_job()) as tree:
        for gpu, role in enumerate(SCHEDULERS):
            fake_nvml.state.add_holder(gpu, tree[role], WORKER_MIB)
        fake_nvml.write()
        status, host = check(env)
        assert status == 1
        assert host["verdict"]["facts"]["workers"]["ok"] is False  # the schedulers hold the GPUs

        dead = kill_from_outside(tree)  # the operator's own kill, by pid
        fake_nvml.state.holders.clear()
        fake_nvml.write()

        status, host = check(env)
        assert status == 1
        verdict = host["verdict"]
        job = f"of the job of pid {tree['nsys']} (nsys)"
        (survivor,) = [f for f in host["findings"] if f["kind"] == "survivor"]
        assert survivor["pid"] == tree["detok"]
        assert job in survivor["detail"]
        assert "still runs" in survivor["detail"]
        assert survivor["action"] == f"gputui kill local {tree['detok']}"
        zombies = {f["pid"]: f for f in host["findings"] if f["kind"] == "zombie"}
        assert set(zombies) >= {tree[r] for r in dead}
        for role in dead:
            finding = zombies[tree[role]]
            assert job in finding["detail"]
            assert finding["action_pid"] == tree["init"]  # the init that does not reap, never pid 1
            assert finding["action"].startswith(f"stop its parent {tree['init']} (tini)")
        facts = verdict["facts"]
        assert (facts["workers"]["ok"], facts["residue"]["ok"], facts["gpus"]["ok"]) == (False, False, True)
        assert facts["workers"]["reasons"] == [survivor["detail"]]
        assert set(facts["residue"]["reasons"]) == {zombies[tree[r]]["detail"] for r in dead}
        assert facts["gpus"]["line"] == "8/8 GPUs at baseline and fit"

        # The snapshot and the text say the same.
        snapshot = run_gputui(["snapshot", "--json", "--no-discover"], env)
        (same,) = json.loads(snapshot.stdout)["hosts"]
        assert same["verdict"]["facts"] == facts
        assert {f["detail"] for f in same["findings"]} >= {survivor["detail"]}
        text = run_gputui(["check", "--no-discover"], env)
        assert text.returncode == 1
        assert f"  workers: ✗ {survivor['detail']}" in text.stdout.splitlines()
        assert "  GPUs:    ✓ 8/8 GPUs at baseline and fit" in text.stdout.splitlines()

        # Everything gone (the container's init stopped: init reaps what it held): CLEAN, as three facts.
        os.kill(tree["detok"], signal.SIGKILL)
        os.kill(tree["init"], signal.SIGKILL)
        tree.starter.wait(timeout=30)
        members = ("nsys", "launcher", *SCHEDULERS, "detok")
        reaped = lambda: all(start_ticks_of(tree[r]) != tree.ticks[tree[r]] for r in members)  # noqa: E731
        wait_for(reaped, "the job to be reaped")
        status, host = check(env)
        assert status == 0, host["verdict"]["reasons"]
        facts = host["verdict"]["facts"]
        assert (facts["workers"]["ok"], facts["residue"]["ok"], facts["gpus"]["ok"]) == (True, True, True)
        assert facts["workers"]["line"].startswith("5 of 5 processes of the job seen at ")
        assert facts["residue"]["line"] == "none left"
        assert not [f for f in host["findings"] if f["kind"] in ("survivor", "zombie")]


def test_a_segment_of_a_job_killed_outside_gputui_is_residue_until_removed(
    fake_nvml: Any, tmp_path: Path
) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    segment = shm / "sgl_shm_7c1e"
    env = dict(gputui_env(fake_nvml, tmp_path / "state"), GPUTUI_TEST_SHM_DIR=str(shm))
    with (
        proc_tree(node("mps", "nvidia-cuda-mps-control")) as mps,
        proc_tree(outside_kill_job(segment)) as tree,
    ):
        for gpu, role in enumerate(SCHEDULERS):
            fake_nvml.state.add_holder(gpu, tree[role], WORKER_MIB)
        fake_nvml.write()
        # A collector that runs a while (the exporter here; the TUI alike) looks at the job's processes for
        # what they may leave behind, and remembers it.
        record = tmp_path / "state" / "gputui" / "remembered-jobs.json"
        exporter = ExporterProcess(env, tmp_path / "exporter.log").start()
        try:
            wait_for(
                lambda: record.exists() and str(segment) in record.read_text(), "the segment recorded", 60
            )
        finally:
            assert exporter.stop() is not None
        for role in ("detok", *kill_from_outside(tree)):
            os.kill(tree[role], signal.SIGKILL)
        os.kill(tree["init"], signal.SIGKILL)
        tree.starter.wait(timeout=30)
        fake_nvml.state.holders.clear()
        fake_nvml.write()
        members = [tree[r] for r in ("nsys", "launcher", "detok", *SCHEDULERS)]
        wait_for(lambda: all(start_ticks_of(p) != tree.ticks[p] for p in members), "the job to be reaped")
        assert segment.exists()
        status, host = check(env)
        assert status == 1
        left, daemon = [f for f in host["findings"] if f["kind"] == "leftover"]
        assert left["detail"].startswith(f"segment {segment} (1.0 MiB, owner ")
        assert left["action"] == "gputui leftovers local --remove"
        assert daemon["detail"] == f"MPS control daemon pid {mps['mps']} (user root) outlived its killed job"
        residue = host["verdict"]["facts"]["residue"]
        assert residue["reasons"] == [f"leftover: {left['detail']}", f"leftover: {daemon['detail']}"]
        snapshot = run_gputui(["snapshot", "--json", "--no-discover"], env)
        (same,) = json.loads(snapshot.stdout)["hosts"]
        assert same["verdict"]["facts"]["residue"] == residue
        listed = run_gputui(["leftovers", "local"], env)
        assert listed.returncode == 1
        assert str(segment) in listed.stdout
        assert f"MPS control daemon pid {mps['mps']}" in listed.stdout
        removed = run_gputui(["leftovers", "local", "--remove", "--yes"], env)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert not segment.exists()
        assert check(env)[0] == 1  # gputui never stops an MPS daemon: its user does
    status, host = check(env)
    assert status == 0, host["verdict"]["reasons"]
    assert host["verdict"]["facts"]["residue"]["line"] == "none left"


def test_a_pid_reused_by_another_process_is_not_a_survivor(fake_nvml: Any, tmp_path: Path) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    with proc_tree(node("init", "tini", subreaper=True, children=[node("job", "python3")])) as tree:
        fake_nvml.state.add_holder(0, tree["job"], WORKER_MIB)
        fake_nvml.write()
        assert check(env)[0] == 1
        fake_nvml.state.holders.clear()
        fake_nvml.write()
        status, host = check(env)
        assert status == 1  # its member still runs
        # The record says the member by pid and start time: the same pid with another start is not it.
        record = tmp_path / "state" / "gputui" / "remembered-jobs.json"
        document = json.loads(record.read_text())
        for job in document["jobs"]:
            job["members"] = [[pid, ticks + 1, name] for pid, ticks, name in job["members"]]
        record.write_text(json.dumps(document))
        status, host = check(env)
        assert status == 0, host["verdict"]["reasons"]
        assert not [f for f in host["findings"] if f["kind"] == "survivor"]


def test_a_gpu_gone_since_it_was_listed_is_not_ready(fake_nvml: Any, tmp_path: Path) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    for index, gpu in enumerate(fake_nvml.state.gpus):
        gpu.uuid = f"GPU-5e1f0c2a-0000-4000-8000-00000000000{index}"
        gpu.pci = f"00000000:{0x18 + index:02X}:00.0"
    fake_nvml.write()
    assert check(env)[0] == 0
    del fake_nvml.state.gpus[5]  # fallen off the bus: NVML lists seven
    fake_nvml.write()
    status, host = check(env)
    assert status == 1
    verdict = host["verdict"]
    assert verdict["level"] == "NOT READY"
    (gone,) = verdict["not_ready"]
    assert gone.startswith(
        "GPU GPU-5e1f0c2a-0000-4000-8000-000000000005 (PCI 00000000:1D:00.0) was listed at "
    )
    assert gone.endswith(" and is gone: fallen off the bus? reboot the host")
    assert verdict["facts"]["gpus"]["ok"] is False


def test_no_record_is_said_as_no_record(fake_nvml: Any, tmp_path: Path) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    result = run_gputui(["leftovers", "local"], env)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.strip() == "nothing recorded on local since boot (gputui has not seen a GPU job there)"
    )
    status, host = check(env)
    assert status == 0  # a fresh host with nothing on it is still CLEAN
    assert host["verdict"]["facts"]["workers"]["note"] == (
        "nothing recorded on local since boot (gputui has not seen a GPU job there)"
    )


@pytest.mark.parametrize("planted", ["fifo", "symlink", "truncated"])
def test_a_planted_or_broken_record_is_one_line_and_never_trusted(
    fake_nvml: Any, tmp_path: Path, planted: str
) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    folder = tmp_path / "state" / "gputui"
    folder.mkdir(parents=True, mode=0o700)
    record = folder / "remembered-jobs.json"
    elsewhere = tmp_path / "elsewhere.json"
    if planted == "fifo":
        os.mkfifo(record)
    elif planted == "symlink":
        elsewhere.write_text("{}")
        record.symlink_to(elsewhere)
    else:
        record.write_text('{"version": 1, "boot_id": "x", "jobs": [')
    with proc_tree(node("job", "python3")) as tree:
        fake_nvml.state.add_holder(0, tree["job"], WORKER_MIB)
        fake_nvml.write()
        status, host = check(env)
    assert status == 1  # the host is judged as it is
    note = host["verdict"]["facts"]["workers"]["note"]
    assert note is not None
    assert note.startswith("job record not used: ")
    assert "\n" not in note
    if planted == "symlink":
        assert record.is_symlink()  # never replaced
        assert elsewhere.read_text() == "{}"  # nor followed
    if planted == "fifo":
        assert record.is_fifo()


def test_a_calibrated_gpu_not_listed_after_a_reboot_is_not_ready(fake_nvml: Any, tmp_path: Path) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    for index, gpu in enumerate(fake_nvml.state.gpus):
        gpu.uuid = f"GPU-5e1f0c2a-0000-4000-8000-00000000000{index}"
    fake_nvml.write()
    assert run_gputui(["check", "--calibrate", "--no-discover"], env).returncode == 0
    (tmp_path / "state" / "gputui" / "remembered-jobs.json").unlink()  # as after a reboot: no record
    del fake_nvml.state.gpus[3]
    fake_nvml.write()
    status, host = check(env)
    assert status == 1
    (gone,) = host["verdict"]["not_ready"]
    assert gone == (
        "GPU GPU-5e1f0c2a-0000-4000-8000-000000000003 was calibrated on this host and is not listed now: "
        "fallen off the bus? reboot the host (a GPU replaced since: calibrate again)"
    )
    assert host["verdict"]["level"] == "NOT READY"
