"""The readiness probe's bounds, against the fake ``libcuda.so.1``: no child outlives its deadline by more
than a second, even when its collector is killed mid-probe (locally, or its SSH session cut); children
that do not die are reported stuck, never waited on, and stay hidden from every sample until they die; a
busy exclusive-process GPU is left out with its reason; the caller's ``CUDA_VISIBLE_DEVICES`` changes
nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.gpu.probe import KILL_GRACE_S, run_probes
from tests.fakecuda.plugin import FakeCuda
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO
from tests.integration.sshd import ClientHome, SshdFactory
from tests.kernellog import KernelLog

pytestmark = pytest.mark.timeout(180)


def _live_probe_processes(fake_cuda: FakeCuda) -> list[int]:
    """This test's probe children and their tracers that are not zombies."""
    return [pid for pid, state in fake_cuda.probe_processes().items() if state != "Z"]


def _until(condition: Any, seconds: float) -> float | None:
    """Seconds until ``condition()`` held, None if it did not within ``seconds``."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if condition():
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def _env(fake_nvml: FakeNvml, fake_cuda: FakeCuda, state: str, **extra: str) -> dict[str, str]:
    return dict(fake_cuda.env(fake_nvml.env()), XDG_STATE_HOME=state, **extra)


def test_a_collector_killed_mid_probe_leaves_no_child_past_its_deadline(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    fake_cuda.state.gpus[5].hang = "ctx"
    fake_cuda.write()
    deadline_s = 3.0
    with tempfile.TemporaryDirectory() as state:
        cli = subprocess.Popen(
            [sys.executable, "-m", "gputui.cli", "check", "--probe", "--probe-deadline", f"{deadline_s:g}"],
            cwd=REPO,
            env=_env(fake_nvml, fake_cuda, state),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert _until(lambda: _live_probe_processes(fake_cuda), 30) is not None
            seen = time.monotonic()
            cli.send_signal(signal.SIGKILL)
            cli.wait()
            gone = _until(lambda: not _live_probe_processes(fake_cuda), deadline_s + 5)
            assert gone is not None, "a probe child outlived its collector and its deadline"
            assert time.monotonic() - seen <= deadline_s + 1.0 + 0.5  # the grace, and this loop's poll
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()


def test_a_probe_cut_off_over_ssh_leaves_no_child_past_its_deadline(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, fake_cuda: FakeCuda
) -> None:
    fake_cuda.state.gpus[2].hang = "ctx"
    fake_cuda.write()
    server = sshd_factory(extra_env=fake_cuda.env({}))
    ssh_client.add_host("host-c", server)
    ssh_client.trust(server)
    deadline_s = 4.0
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gputui.cli",
            "check",
            "--probe",
            "--probe-deadline",
            f"{deadline_s:g}",
            "host-c",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert _until(lambda: _live_probe_processes(fake_cuda), 60) is not None
        seen = time.monotonic()
        os.killpg(cli.pid, signal.SIGKILL)  # the client and its ssh: the session is cut
        cli.wait()
        gone = _until(lambda: not _live_probe_processes(fake_cuda), deadline_s + 5)
        assert gone is not None, "a remote probe child outlived its session and its deadline"
        assert time.monotonic() - seen <= deadline_s + 1.0 + 0.5
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()


def test_children_that_cannot_be_killed_are_stuck_hidden_and_never_waited_on(
    fake_cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    for gpu in (1, 2):
        fake_cuda.state.gpus[gpu].hang = "ctx"
        fake_cuda.state.gpus[gpu].stuck = True
    fake_cuda.state.gpus[3].hang = "alloc"
    fake_cuda.write()
    for key, value in fake_cuda.env({}).items():
        monkeypatch.setenv(key, value)
    targets = [
        {"index": i, "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{0x17 + i:02X}:00.0"} for i in range(5)
    ]
    hidden: list[frozenset[int]] = []
    deadline_s = 2.0
    started = time.monotonic()
    try:
        reports = run_probes(targets, deadline_s, 8, hide=hidden.append)
        took = time.monotonic() - started
        assert [r["result"] for r in reports] == ["ok", "stuck", "stuck", "hung", "ok"]
        assert [r.get("step") for r in reports[1:4]] == ["context", "context", "alloc"]
        # Killed together: two stuck children cost one grace, not one each.
        assert took < deadline_s + KILL_GRACE_S + 0.8, took
        stuck = _children_of(os.getpid())
        assert len(stuck) == 2  # still there, not reaped: not waited on
        assert hidden[-1] == frozenset(stuck)  # and never sampled as a job, a survivor or a leftover
    finally:
        for gpu in (1, 2):
            fake_cuda.state.gpus[gpu].stuck = False
        fake_cuda.write()
    # Once they can die, the reaper takes them and nothing stays hidden.
    assert _until(lambda: hidden[-1] == frozenset(), 10) is not None
    assert not _children_of(os.getpid())
    assert _until(lambda: not _live_probe_processes(fake_cuda), 5) is not None  # their tracers too


def _children_of(parent: int) -> frozenset[int]:
    """Every process (zombies too) whose parent is ``parent``."""
    found = set()
    for entry in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if entry.isdigit() and int(fields[1]) == parent:
            found.add(int(entry))
    return frozenset(found)


def _check_json(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, *args: str, **extra: str
) -> tuple[int, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as state:
        done = subprocess.run(
            [sys.executable, "-m", "gputui.cli", "check", "--probe", "--json", *args],
            cwd=REPO,
            env=_env(fake_nvml, fake_cuda, state, **extra),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    return done.returncode, json.loads(done.stdout)["hosts"][0]


def test_a_busy_exclusive_process_gpu_is_left_out_with_its_reason(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    busy = fake_cuda.state.gpus[3]
    busy.compute_mode, busy.ctx_error = 3, "DEVICE_UNAVAILABLE"
    fake_cuda.write()
    code, host = _check_json(fake_nvml, fake_cuda)
    probe = host["probe"]["gpus"][3]
    assert (probe["result"], probe["detail"]) == (
        "skipped",
        "exclusive-process mode, and another process holds its one context",
    )
    assert host["verdict"]["not_ready"] == []
    assert host["verdict"]["facts"]["proof"].startswith("7 of 7 took work (context + 64 MiB write/read")
    assert (
        "GPU3 not probed: exclusive-process mode, and another process holds its one context"
        in (host["verdict"]["facts"]["proof"])
    )
    assert code == 0
    # Compute-prohibited is no such case: that GPU takes no work.
    busy.compute_mode = 2
    fake_cuda.write()
    code, host = _check_json(fake_nvml, fake_cuda)
    assert code == 1
    assert host["verdict"]["not_ready"][0].startswith(
        "GPU3 did not take work: CUDA_ERROR_DEVICE_UNAVAILABLE (46)"
    )


def test_the_callers_cuda_visible_devices_changes_nothing(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    for visible in ("1", "", "GPU-fa4e0000-0000-0000-0000-000000000002"):
        code, host = _check_json(
            fake_nvml, fake_cuda, CUDA_VISIBLE_DEVICES=visible, CUDA_DEVICE_ORDER="PCI_BUS_ID"
        )
        assert code == 0, visible
        assert [p["result"] for p in host["probe"]["gpus"]] == ["ok"] * 8


def test_a_stuck_child_through_check_is_not_ready_and_not_listed(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    fake_cuda.state.gpus[6].hang = "ctx"
    fake_cuda.state.gpus[6].stuck = True
    fake_cuda.write()
    try:
        started = time.monotonic()
        code, host = _check_json(fake_nvml, fake_cuda, "--probe-deadline", "2")
        assert time.monotonic() - started < 30
        assert code == 1, host["verdict"]
        stuck = host["probe"]["gpus"][6]
        assert (stuck["result"], stuck["step"]) == ("stuck", "context")
        assert host["verdict"]["not_ready"] == [
            "GPU6 did not take work within 2.00 s, and its probe could not be killed (stuck in the driver in"
            " context creation): needs a reboot of the host"
        ]
        # Killed and still not reaped when the check answered (never waited on): the fake library's tracer,
        # which holds it, still runs. Meanwhile the sample judged left it out: no zombie, no residue.
        assert fake_cuda.probe_processes()
        assert [p["pid"] for p in host["processes"] if p["state"] == "Z"] == []
        assert [f for f in host["findings"] if f["kind"] == "zombie"] == []
        assert host["verdict"]["reasons"] == host["verdict"]["not_ready"]
    finally:
        fake_cuda.state.gpus[6].stuck = False
        fake_cuda.write()
    assert _until(lambda: not fake_cuda.probe_processes(), 10) is not None
