"""The readiness probe end to end: the CLI's ``--probe`` over a real collector, real pynvml on the fake NVML
and the probe's children loading the fake ``libcuda.so.1`` the suite builds, locally and through a real sshd.

Each mode of the fake gives its verdict (exit status, reason, JSON); no probe process outlives its deadline
plus a second; the probe's own memory never makes a clean host read NOT CLEAN.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest

from tests.fakecuda.plugin import FakeCuda
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO
from tests.integration.sshd import ClientHome, SshdFactory
from tests.kernellog import KernelLog

GPUS = 8


def _env(fake_nvml: FakeNvml, fake_cuda: FakeCuda, state: str) -> dict[str, str]:
    return dict(fake_cuda.env(fake_nvml.env()), XDG_STATE_HOME=state)


def run_cli(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as state:
        return subprocess.run(
            [sys.executable, "-m", "gputui.cli", *args],
            cwd=REPO,
            env=_env(fake_nvml, fake_cuda, state),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def check_over_ssh(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_cuda: FakeCuda, host: str, *options: str
) -> subprocess.CompletedProcess[str]:
    """``gputui check --probe OPTIONS --json HOST`` through the real sshd, whose collector runs on a bare
    python3.8 with this test's fake libcuda."""
    server = sshd_factory(python="py38", extra_env=fake_cuda.env({}))
    ssh_client.add_host(host, server)
    ssh_client.trust(server)
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", "check", "--probe", *options, "--json", host],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _host(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(done.stdout)["hosts"][0]


def _shown(fake_nvml: FakeNvml, fake_cuda: FakeCuda) -> None:
    """Every GPU's allocations show in the fake NVML while they live (``nvml_state``)."""
    fake_cuda.state.show_in_nvml(fake_nvml.state_path)
    fake_cuda.write()


def test_a_healthy_host_takes_work_and_says_so(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    _shown(fake_nvml, fake_cuda)
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CLEAN: 8/8 GPUs at baseline" in done.stdout
    (gpus_line,) = [line for line in done.stdout.splitlines() if line.startswith("  GPUs: ")]
    assert (
        "8/8 GPUs at baseline and fit; 8 of 8 took work (context + 64 MiB write/read, slowest " in gpus_line
    )
    assert "NVML did not list" not in gpus_line  # the driver's accounting saw each allocation
    host = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--probe-mib", "8", "--json"))
    probe = host["probe"]
    assert probe["buffer_mib"] == 8
    assert [p["result"] for p in probe["gpus"]] == ["ok"] * GPUS
    first = probe["gpus"][0]
    assert [s["step"] for s in first["steps"]] == [
        "load",
        "init",
        "device",
        "context",
        "alloc",
        "write",
        "read",
        "compare",
        "free",
        "destroy",
    ]
    assert all(p["visible"] is True for p in probe["gpus"])
    assert first["pci_bus_id"].lower().endswith("17:00.0")
    # Its memory is gone before the host is judged: clean, every GPU at its baseline, no job listed.
    assert host["verdict"]["clean"] is True
    assert all(g["memory_used_mib"] == 3 for g in host["gpus"])
    assert host["processes"] == [] or all(p["gpu_memory_mib"] == {} for p in host["processes"])


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        (
            {"ctx_error": "SYSTEM_NOT_READY"},
            "GPU3 did not take work: CUDA_ERROR_SYSTEM_NOT_READY (802) in context creation — the system is"
            " not initialised: on an NVSwitch system, the NVLink fabric (fabric manager up?)",
        ),
        (
            {"alloc_error": "OUT_OF_MEMORY"},
            "GPU3 did not take work: CUDA_ERROR_OUT_OF_MEMORY (2) in allocation — out of memory: something"
            " else holds it",
        ),
        ({"corrupt": 1}, "GPU3 did not take work: read-back differs from what was written in the comparison"),
    ],
)
def test_a_gpu_that_fails_a_step_is_not_ready_naming_it(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog, setting: dict[str, Any], words: str
) -> None:
    for key, value in setting.items():
        setattr(fake_cuda.state.gpus[3], key, value)
    fake_cuda.write()
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "NOT READY: 8/8 GPUs at baseline (3 MiB + 2)" in lines, done.stdout  # memory: all back
    assert f"GPU3  3 MiB  ✗ {words.removeprefix('GPU3 ')}" in lines, done.stdout
    assert f"  GPUs:    ✗ {words}" in lines, done.stdout
    host = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json"))
    assert host["verdict"]["level"] == "NOT READY"
    assert [p["result"] for p in host["probe"]["gpus"]] == ["ok"] * 3 + ["failed"] + ["ok"] * 4
    assert host["verdict"]["facts"]["gpus"]["ok"] is False


def test_a_gpu_that_hangs_is_killed_at_the_deadline_and_is_not_ready(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    fake_cuda.state.gpus[5].hang = "ctx"
    fake_cuda.write()
    started = time.monotonic()
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe", "--probe-deadline", "2", "--json")
    elapsed = time.monotonic() - started
    host = _host(done)
    assert done.returncode == 1, done.stderr
    hung = host["probe"]["gpus"][5]
    assert (hung["result"], hung["step"]) == ("hung", "context")
    assert host["verdict"]["not_ready"] == [
        "GPU5 did not take work within 2.00 s (hung in context creation): reboot likely"
    ]
    assert [p["result"] for i, p in enumerate(host["probe"]["gpus"]) if i != 5] == ["ok"] * 7
    # The killed child left nothing: no process of the probe is listed or left (the suite's leak check too).
    assert elapsed < 60
    leftover = subprocess.run(
        ["pgrep", "-f", "gputui-probe-never|import ctypes, json, os, select"], check=False
    )
    assert leftover.returncode == 1


def test_a_host_where_the_probe_cannot_run_cannot_tell(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, fake_cuda_older: Any, kernel_log: KernelLog
) -> None:
    foreign = FakeCuda(
        lib_dir=fake_cuda_older("foreign"), state_path=fake_cuda.state_path, state=fake_cuda.state
    )
    done = run_cli(fake_nvml, foreign, "check", "--probe")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "GPU0  3 MiB  ✗ cannot be probed: libcuda.so.1 has no cuDeviceGetByPCIBusId" in done.stdout
    assert "cannot tell: GPU0 cannot be probed: libcuda.so.1 has no cuDeviceGetByPCIBusId" in done.stdout
    # Without --probe nothing changes: the probe runs only when asked.
    assert run_cli(fake_nvml, foreign, "check").returncode == 0


def test_a_gpu_that_lists_a_process_is_not_probed_unless_forced(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        fake_nvml.state.add_holder(2, holder.pid, 900, "compute")
        fake_nvml.write()
        host = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json"))
        skipped = host["probe"]["gpus"][2]
        assert skipped["result"] == "skipped"
        assert skipped["detail"] == "it lists a process (--force probes it anyway)"
        assert host["verdict"]["level"] == "NOT CLEAN"  # its memory is someone's
        forced = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--force", "--json"))
        assert forced["probe"]["gpus"][2]["result"] == "ok"
    finally:
        holder.kill()
        holder.wait()


def test_bad_probe_options_are_one_line(fake_nvml: FakeNvml, fake_cuda: FakeCuda) -> None:
    for args, said in (
        (("--probe-deadline", "0.5"), "--probe-deadline: must be seconds from 1 to 300: '0.5'"),
        (("--probe-mib", "5000"), "--probe-mib: must be a whole number from 1 to 4096: '5000'"),
        (("--probe-mib", "x"), "--probe-mib: not a whole number: 'x'"),
    ):
        done = run_cli(fake_nvml, fake_cuda, "check", "--probe", *args)
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr == f"gputui: argument {said}\n"


def test_the_probe_over_ssh_on_a_bare_python38(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, fake_cuda: FakeCuda
) -> None:
    """A shipped collector on a host with only a bare python3.8 runs the probe's children there."""
    fake_cuda.state.gpus[1].ctx_error = "UNKNOWN"
    fake_cuda.write()
    done = check_over_ssh(sshd_factory, ssh_client, fake_cuda, "host-p")
    assert done.returncode == 1, done.stdout + done.stderr
    host = _host(done)
    assert host["agent_version"]
    assert host["mode"] == "nvml"  # the shipped bundle carries pynvml: a bare python is enough
    assert [p["result"] for p in host["probe"]["gpus"]] == ["ok", "failed"] + ["ok"] * 6
    assert host["verdict"]["not_ready"][0].startswith("GPU1 did not take work: CUDA_ERROR_UNKNOWN (999)")


def test_a_driver_that_is_not_initialised_fails_every_gpu_in_cuinit(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    fake_cuda.state.init_error = "SYSTEM_NOT_READY"
    fake_cuda.write()
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "  GPUs:    ✗ GPU0 did not take work: CUDA_ERROR_SYSTEM_NOT_READY (802) in driver initialisation"
        " (cuInit) — the system is not initialised: on an NVSwitch system, the NVLink fabric (fabric manager"
        " up?)" in done.stdout.splitlines()
    ), done.stdout
    host = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json"))
    assert host["verdict"]["level"] == "NOT READY"
    assert [(p["result"], p["step"], p["code"]) for p in host["probe"]["gpus"]] == [
        ("failed", "init", 802)
    ] * 8
    assert len(host["verdict"]["not_ready"]) == GPUS


def test_a_slow_gpu_takes_work_and_the_line_names_the_slowest_time(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    _shown(fake_nvml, fake_cuda)
    fake_cuda.state.gpus[4].slow_ms = 400  # init, context, allocation, write, read and free: 2.4 s at least
    fake_cuda.write()
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    host = _host(done)
    probes = host["probe"]["gpus"]
    assert [p["result"] for p in probes] == ["ok"] * GPUS
    slowest = max(probes, key=lambda p: p["ms"])
    assert slowest["index"] == 4
    assert slowest["ms"] >= 2400
    assert {s["step"]: s["ms"] >= 400 for s in slowest["steps"]} == {
        "load": False,
        "init": True,
        "device": False,
        "context": True,
        "alloc": True,
        "write": True,
        "read": True,
        "compare": False,
        "free": True,
        "destroy": False,
    }
    assert f"slowest {slowest['ms'] / 1000.0:.2f} s)" in host["verdict"]["facts"]["proof"]


def test_an_allocation_nvml_does_not_list_is_said_and_changes_no_verdict(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    # The fake libcuda's allocations are not written to the fake NVML: the driver's accounting misses them.
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    host = _host(done)
    assert [(p["result"], p["visible"]) for p in host["probe"]["gpus"]] == [("ok", False)] * GPUS
    names = ", ".join(f"GPU{i}" for i in range(GPUS))
    assert f"; NVML did not list the allocation on {names})" in host["verdict"]["facts"]["proof"]


def test_a_libcuda_that_cannot_be_loaded_cannot_tell(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog, tmp_path: Any
) -> None:
    """A host (or a container given NVML alone) whose ``libcuda.so.1`` does not load: the GPU fact cannot be
    proven, and says why."""
    broken = tmp_path / "broken-lib"
    broken.mkdir()
    (broken / "libcuda.so.1").write_bytes(b"not a shared object\n" * 64)
    unloadable = FakeCuda(lib_dir=broken, state_path=fake_cuda.state_path, state=fake_cuda.state)
    done = run_cli(fake_nvml, unloadable, "check", "--probe", "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    host = _host(done)
    assert [(p["result"], p["step"]) for p in host["probe"]["gpus"]] == [("unavailable", "load")] * GPUS
    assert host["verdict"]["known"] is False
    reason = host["verdict"]["reasons"][0]
    assert reason.startswith(f"GPU0 cannot be probed: {broken / 'libcuda.so.1'}: "), reason
    assert not [p for p in host["processes"] if p["gpu_memory_mib"]]


def test_each_mode_of_the_fake_over_ssh(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, fake_cuda: FakeCuda
) -> None:
    """One GPU per mode behind a real sshd, on a bare python3.8: each gets its own verdict, and no child of
    the probe is left after its deadline and the kill's grace."""
    _shown(fake_nvml, fake_cuda)
    gpus = fake_cuda.state.gpus
    gpus[1].ctx_error = "SYSTEM_NOT_READY"
    gpus[2].alloc_error = "OUT_OF_MEMORY"
    gpus[3].corrupt = True
    gpus[4].hang = "ctx"
    gpus[5].slow_ms = 300
    gpus[7].nvml_state = None  # its allocation never shows in NVML
    fake_cuda.write()
    done = check_over_ssh(sshd_factory, ssh_client, fake_cuda, "host-m", "--probe-deadline", "4")
    assert done.returncode == 1, done.stdout + done.stderr
    host = _host(done)
    probes = host["probe"]["gpus"]
    assert [(p["result"], p.get("step"), p.get("code")) for p in probes] == [
        ("ok", None, None),
        ("failed", "context", 802),
        ("failed", "alloc", 2),
        ("failed", "compare", None),
        ("hung", "context", None),
        ("ok", None, None),
        ("ok", None, None),
        ("ok", None, None),
    ]
    # Looked at while the buffer lived: not where the context or the allocation failed, or it hung first.
    assert [p["visible"] for p in probes] == [True, None, None, True, None, True, True, False]
    assert max(probes, key=lambda p: p["ms"] if p["result"] == "ok" else 0)["index"] == 5
    assert [reason.split(":")[0] for reason in host["verdict"]["not_ready"]] == [
        "GPU1 did not take work",
        "GPU2 did not take work",
        "GPU3 did not take work",
        "GPU4 did not take work within 4.00 s (hung in context creation)",
    ]
    proof = host["verdict"]["facts"]["proof"]
    assert proof.startswith("4 of 8 took work (context + 64 MiB write/read, slowest "), proof
    assert proof.endswith("; NVML did not list the allocation on GPU7)"), proof
    # The probe's own memory is gone before the host is judged.
    assert all(g["memory_used_mib"] == 3 for g in host["gpus"])
    # The hung child was killed at its deadline: none is left once the check has answered.
    assert not fake_cuda.probe_processes()
