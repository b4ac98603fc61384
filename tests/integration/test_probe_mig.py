"""The readiness probe on a GPU in MIG mode, end to end: real pynvml on the fake NVML lists the GPU's MIG
devices, and each is probed by a child of its own that the fake ``libcuda.so.1`` sees through
``CUDA_VISIBLE_DEVICES=MIG-<uuid>`` alone (the GPU itself, by its PCI bus id, fails there: a probe that used
it would say so). Locally and through a real sshd on a bare python3.8.

The GPU and its MIG devices are those of a real A100 host's ``nvidia-smi -L`` (hashicorp/nomad-device-nvidia
pull request #53): "GPU 5: NVIDIA A100-SXM4-40GB" with "MIG 1g.5gb Device 0: (UUID:
MIG-8c4c5a27-e508-5556-b2ea-7e549465741e)" and the next two; a 1g.5gb instance of an A100 40GB holds 4864 MiB.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.fakecuda import FakeCudaGpu
from tests.fakecuda.plugin import FakeCuda
from tests.fakenvml import FakeMig
from tests.fakenvml.plugin import FakeNvml
from tests.integration.sshd import ClientHome, SshdFactory
from tests.integration.test_probe import _host, check_over_ssh, run_cli
from tests.kernellog import KernelLog

MIG_GPU = 2
UUIDS = (
    "MIG-8c4c5a27-e508-5556-b2ea-7e549465741e",
    "MIG-1d89abd8-d10a-5361-bd06-77a807048472",
    "MIG-c6b63f1b-a006-5803-b4f4-cc1b2867b34b",
)
PROFILE = "1g.5gb"
INSTANCE_MIB = 4864


def _mig_host(fake_nvml: FakeNvml, fake_cuda: FakeCuda, instances: int = 3, **failing: Any) -> None:
    """GPU2 an A100 in MIG mode with ``instances`` MIG devices; ``failing``: fakecuda keys for the second."""
    gpu = fake_nvml.state.gpus[MIG_GPU]
    gpu.name = "NVIDIA A100-SXM4-40GB"
    gpu.total_mib = 40960
    gpu.mig_current = True
    gpu.migs = [
        FakeMig(slot, uuid=UUIDS[slot], profile=PROFILE, total_mib=INSTANCE_MIB, gi=slot + 7, ci=0)
        for slot in range(instances)
    ]
    fake_nvml.write()
    fake_cuda.state.show_in_nvml(fake_nvml.state_path)
    # The GPU as a whole is no device CUDA can use in MIG mode: a probe that took it would fail.
    fake_cuda.state.gpus[MIG_GPU].ctx_error = "INVALID_DEVICE"
    for slot in range(instances):
        device = FakeCudaGpu(
            index=100 + slot,
            mig=UUIDS[slot],
            total_mib=INSTANCE_MIB,
            nvml_state=fake_nvml.state_path,
            nvml_gpu=MIG_GPU,
            nvml_mig=slot,
        )
        if slot == 1:
            for key, value in failing.items():
                setattr(device, key, value)
        fake_cuda.state.gpus.append(device)
    fake_cuda.write()


def _probes_of(host: dict[str, Any], index: int) -> list[dict[str, Any]]:
    return [p for p in host["probe"]["gpus"] if p["index"] == index]


def test_a_failing_mig_instance_is_not_ready_naming_it(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    _mig_host(fake_nvml, fake_cuda, ctx_error="UNKNOWN")
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe")
    assert done.returncode == 1, done.stdout + done.stderr
    words = (
        f"GPU2 MIG {PROFILE} ({UUIDS[1]}) did not take work: CUDA_ERROR_UNKNOWN (999) in context creation"
        " — an unknown error: reset the GPU, and reboot if it comes back"
    )
    assert f"  GPUs:    ✗ {words}" in done.stdout.splitlines(), done.stdout
    host = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json"))
    assert host["verdict"]["not_ready"] == [words]
    mig = _probes_of(host, MIG_GPU)
    assert [(p["mig"]["uuid"], p["result"]) for p in mig] == [
        (UUIDS[0], "ok"),
        (UUIDS[1], "failed"),
        (UUIDS[2], "ok"),
    ]
    assert [p["mig"]["gi"] for p in mig] == [7, 8, 9]
    assert all(p["result"] == "ok" for p in host["probe"]["gpus"] if p["index"] != MIG_GPU)


def test_a_mig_gpu_whose_instances_all_take_work_is_clean_with_the_count(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    _mig_host(fake_nvml, fake_cuda)
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe")
    assert done.returncode == 0, done.stdout + done.stderr
    (gpus_line,) = [line for line in done.stdout.splitlines() if line.startswith("  GPUs: ")]
    assert "8 of 8 took work (context + 64 MiB write/read, slowest " in gpus_line, gpus_line
    assert "; 3 MIG instances on GPU2)" in gpus_line, gpus_line
    assert "NVML did not list" not in gpus_line  # each instance's allocation showed on its GPU
    # Instances smaller than any real profile (so that the test allocates little) get the buffer that fits
    # beside a context; a whole GPU the one asked for.
    for mig_device in fake_nvml.state.gpus[MIG_GPU].migs:
        mig_device.total_mib = 1024 + 40
    fake_nvml.write()
    host = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json"))
    mig = _probes_of(host, MIG_GPU)
    assert [p["result"] for p in mig] == ["ok"] * 3
    assert [p["buffer_mib"] for p in mig] == [40] * 3
    assert host["probe"]["buffer_mib"] == 64
    assert _probes_of(host, 0)[0]["buffer_mib"] is None
    proof = host["verdict"]["facts"]["proof"]
    assert "40 MiB on the smaller MIG instances; 3 MIG instances on GPU2)" in proof
    assert host["verdict"]["clean"] is True
    assert host["gpus"][MIG_GPU]["memory_used_mib"] == 3  # the probes' memory drained before the verdict


def test_a_mig_gpu_without_instances_cannot_tell(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    _mig_host(fake_nvml, fake_cuda, instances=0)
    done = run_cli(fake_nvml, fake_cuda, "check", "--probe")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot tell: GPU2: MIG mode with no instances: nothing can take work" in done.stdout, done.stdout
    host = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json"))
    (only,) = _probes_of(host, MIG_GPU)
    assert (only["result"], only["mig_none"]) == ("unavailable", True)


def test_a_mig_instance_that_lists_a_process_is_not_probed_unless_forced(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog
) -> None:
    _mig_host(fake_nvml, fake_cuda)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        fake_nvml.state.add_holder(MIG_GPU, holder.pid, 900, "compute", mig=0)
        fake_nvml.write()
        host = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--json"))
        mig = _probes_of(host, MIG_GPU)
        assert [p["result"] for p in mig] == ["skipped", "ok", "ok"]
        assert mig[0]["detail"] == "it lists a process (--force probes it anyway)"
        proof = host["verdict"]["facts"]["proof"]
        assert f"GPU2 MIG {PROFILE} ({UUIDS[0]}) not probed: it lists a process" in proof
        forced = _host(run_cli(fake_nvml, fake_cuda, "check", "--probe", "--force", "--json"))
        assert [p["result"] for p in _probes_of(forced, MIG_GPU)] == ["ok"] * 3
    finally:
        holder.kill()
        holder.wait()


def test_mig_instances_are_probed_over_ssh_on_a_bare_python38(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, fake_cuda: FakeCuda
) -> None:
    _mig_host(fake_nvml, fake_cuda, alloc_error="OUT_OF_MEMORY")
    done = check_over_ssh(sshd_factory, ssh_client, fake_cuda, "host-m")
    assert done.returncode == 1, done.stdout + done.stderr
    host = _host(done)
    assert host["mode"] == "nvml"
    assert [p["result"] for p in _probes_of(host, MIG_GPU)] == ["ok", "failed", "ok"]
    assert host["verdict"]["not_ready"] == [
        f"GPU2 MIG {PROFILE} ({UUIDS[1]}) did not take work: CUDA_ERROR_OUT_OF_MEMORY (2) in allocation — out"
        " of memory: something else holds it"
    ]
