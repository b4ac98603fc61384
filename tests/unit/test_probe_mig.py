"""The probe of a GPU in MIG mode, its pure parts: one target per MIG device (``agent.gpu.probe``), each
under a lock of its own instance (``probelock``), its buffer capped to the instance, and the words the
verdict says of it (``core.verdict.probing``), from a report read without trust (``core.model.probe``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gputui.agent.gpu.probe import MIG_NONE, buffer_for, lock_key, probe_targets
from gputui.agent.gpu.probelock import ProbeLocks, lock_name
from gputui.core.model import Gpu, HostSnapshot, ProbeReport
from gputui.core.verdict.probing import probe_line, probe_reason, probe_unavailable
from tests.fakenvml import FakeMig
from tests.fakenvml.plugin import FakeNvml

BUS = "00000000:17:00.0"
UUID = "MIG-8c4c5a27-e508-5556-b2ea-7e549465741e"


def _gpus(count: int = 2) -> list[dict[str, Any]]:
    return [
        {"index": i, "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{0x17 + i:02X}:00.0", "processes": []}
        for i in range(count)
    ]


def _device(slot: int, **more: Any) -> dict[str, Any]:
    """One MIG device as ``NvmlBackend.mig_devices`` gives it."""
    device: dict[str, Any] = {
        "slot": slot,
        "uuid": f"MIG-{slot}aaaaaaa-0000-5000-8000-000000000000",
        "profile": "1g.10gb",
        "gi": slot + 1,
        "ci": 0,
        "memory_total_mib": 9984,
        "pids": [],
    }
    device.update(more)
    return device


def test_a_mig_gpu_is_one_target_per_mig_device_each_skipped_when_it_lists_a_process() -> None:
    devices = [_device(0), _device(2, pids=[4242])]
    targets = probe_targets(_gpus(), None, False, {1: devices})
    assert [t["index"] for t in targets] == [0, 1, 1]
    assert "mig" not in targets[0]
    assert [t["mig"]["slot"] for t in targets[1:]] == [0, 2]
    assert "skip" not in targets[1]
    assert targets[2]["skip"] == "it lists a process (--force probes it anyway)"
    forced = probe_targets(_gpus(), None, True, {1: devices})
    assert not any("skip" in t for t in forced)


def test_a_mig_gpu_without_devices_and_one_not_read_are_not_probed() -> None:
    targets = probe_targets(_gpus(), None, False, {0: [], 1: "NVML call timed out"})
    assert targets[0][MIG_NONE] is True
    assert targets[1]["unavailable"] == "its MIG devices could not be read: NVML call timed out"
    unknown = probe_targets(_gpus(), None, False, {-1: "NVML call timed out"})
    assert all(t["unavailable"].endswith("NVML call timed out") for t in unknown)


def test_a_mig_uuid_that_cuda_would_not_take_never_reaches_a_child() -> None:
    hostile = _device(0, uuid="MIG-x,0")  # a comma would name a second device
    (target,) = probe_targets(_gpus(1), None, False, {0: [hostile]})
    assert target["unavailable"] == "its MIG device has no UUID that CUDA takes"


def test_each_mig_device_has_a_lock_of_its_own(tmp_path: Path) -> None:
    (first, second) = probe_targets(_gpus(1), None, False, {0: [_device(0), _device(1)]})
    assert lock_key(first) == f"{BUS}/gi1ci0"
    assert lock_name(lock_key(first)) == "gpu-00000000-17-00.0-gi1ci0.lock"
    assert lock_name(f"{BUS}/mig3") == "gpu-00000000-17-00.0-mig3.lock"
    assert lock_name(f"{BUS}/../x") is None
    one, other = ProbeLocks(str(tmp_path / "locks")), ProbeLocks(str(tmp_path / "locks"))
    assert one.acquire([lock_key(first)], time.monotonic()) == set()
    # Another instance of the same GPU is free; the same instance waits and is told.
    assert other.acquire([lock_key(second), lock_key(first)], time.monotonic() + 0.1) == {lock_key(first)}
    other.release()
    one.release()


def test_the_buffer_fits_the_mig_device() -> None:
    (small,) = probe_targets(_gpus(1), None, False, {0: [_device(0, memory_total_mib=4864)]})
    assert buffer_for(small, 64) == 64
    assert buffer_for(small, 4096) == 4864 - 1024
    assert buffer_for({"index": 0, "pci_bus_id": BUS}, 4096) == 4096
    tiny = dict(small, mig=dict(small["mig"], memory_mib=512))
    assert buffer_for(tiny, 64) == 1


def _report(*probes: dict[str, Any]) -> ProbeReport:
    report = ProbeReport.from_dict({"probes": list(probes), "buffer_mib": 64, "deadline_s": 20.0})
    assert report is not None
    return report


def _mig(slot: int, result: str = "ok", **more: Any) -> dict[str, Any]:
    about = {"uuid": f"MIG-{slot}", "profile": "1g.10gb", "gi": slot + 1, "ci": 0, "slot": slot}
    probe: dict[str, Any] = {"index": 2, "result": result, "ms": 120.0, "visible": True, "mig": about}
    probe.update(more)
    return probe


def _snapshot(report: ProbeReport) -> tuple[HostSnapshot, Gpu]:
    gpu = Gpu(index=2, uuid="GPU-2", memory_used_mib=3, memory_total_mib=40960)
    return HostSnapshot(target="h", gpus=[gpu], probe=report), gpu


def test_the_gpus_fact_counts_a_mig_gpu_once_and_names_its_instances() -> None:
    whole = {"index": 0, "result": "ok", "ms": 410.0, "visible": True}
    report = _report(whole, _mig(0), _mig(1), _mig(2, buffer_mib=16))
    line = probe_line(report)
    assert line == (
        "2 of 2 took work (context + 64 MiB write/read, slowest 0.41 s; 16 MiB on the smaller MIG"
        " instances; 3 MIG instances on GPU2)"
    )
    snapshot, gpu = _snapshot(report)
    assert probe_reason(snapshot, gpu) is None
    assert probe_unavailable(snapshot, gpu) is None


def test_a_failing_mig_device_is_named_in_the_reason() -> None:
    failed = _mig(1, "failed", step="context", error="CUDA_ERROR_UNKNOWN", code=999)
    hung = _mig(2, "hung", step="device")
    report = _report(_mig(0), failed, hung)
    snapshot, gpu = _snapshot(report)
    assert probe_reason(snapshot, gpu) == (
        "GPU2 MIG 1g.10gb (MIG-1) did not take work: CUDA_ERROR_UNKNOWN (999) in context creation — an"
        " unknown error: reset the GPU, and reboot if it comes back; GPU2 MIG 1g.10gb (MIG-2) did not take"
        " work within 20.00 s (hung in finding the MIG device (CUDA_VISIBLE_DEVICES)): reboot likely"
    )
    line = probe_line(report)
    assert line is not None
    assert line.startswith("0 of 1 took work")


def test_a_mig_gpu_without_instances_cannot_be_proven_and_hostile_fields_are_dropped() -> None:
    report = _report({"index": 2, "result": "unavailable", "mig_none": True, "mig": "not a dict"})
    snapshot, gpu = _snapshot(report)
    assert probe_unavailable(snapshot, gpu) == "GPU2: MIG mode with no instances: nothing can take work"
    (probe,) = report.gpus
    assert probe.mig is None
    odd = _report(_mig(0, mig={"uuid": "MIG-\x1b[31mred", "gi": -4, "ci": "x", "memory_mib": 1 << 50}))
    about = odd.gpus[0].mig
    assert about is not None
    assert "\x1b" not in str(about.uuid)
    assert (about.gi, about.ci, about.memory_mib) == (None, None, None)
    assert _report({"index": 2, "result": "ok", "mig_none": True}).gpus[0].mig_none is False


READ_MIG = """
import json
from gputui.agent.gpu.nvml import NvmlBackend
backend = NvmlBackend()
backend.start()
print(json.dumps({str(k): v for k, v in backend.mig_devices().items()}))
backend.close()
"""


def test_nvml_lists_each_mig_device_and_passes_over_empty_indexes(fake_nvml: FakeNvml) -> None:
    """Real pynvml on the fake NVML: MIG device indexes 0 and 2 of GPU1 hold one, index 1 answers NOT_FOUND;
    the process NVML lists on index 2 is its; a GPU not in MIG mode is not listed."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gpu = fake_nvml.state.gpus[1]
        gpu.name = "NVIDIA A100-SXM4-40GB"
        gpu.mig_current = True
        gpu.migs = [FakeMig(0, uuid=UUID, gi=7, ci=0, total_mib=4864, profile="1g.5gb"), FakeMig(2, gi=9)]
        fake_nvml.state.gpus[3].mig_current = False
        fake_nvml.state.add_holder(1, sleeper.pid, 300, "compute", mig=2)
        fake_nvml.write()
        done = subprocess.run(
            [sys.executable, "-c", READ_MIG],
            env=fake_nvml.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    found = json.loads(done.stdout)
    assert list(found) == ["1"]
    first, second = found["1"]
    assert first == {
        "slot": 0,
        "uuid": UUID,
        "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        "profile": "1g.5gb",
        "memory_total_mib": 4864,
        "gi": 7,
        "ci": 0,
        "pids": [],
    }
    assert (second["slot"], second["gi"], second["profile"]) == (2, 9, "1g.10gb")
    assert second["pids"] == [sleeper.pid]
    targets = probe_targets(_gpus(2), None, False, {int(k): v for k, v in found.items()})
    assert [t.get("skip") for t in targets] == [None, None, "it lists a process (--force probes it anyway)"]
