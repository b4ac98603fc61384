"""The fake libcuda.so.1's modes a readiness probe meets beyond the steps: the caller's
``CUDA_VISIBLE_DEVICES`` as the driver reads it, the compute mode, and a hung process that cannot be reaped
once killed (``stuck=1``), as one stuck in the driver cannot exit."""

from __future__ import annotations

import os
import subprocess
import time

from tests.fakecuda import FakeCudaGpu, FakeCudaState
from tests.fakecuda.plugin import FakeCuda
from tests.unit.test_fakecuda import run_py, running

LOOKUP = """
count, dev, mode = c_int(), c_int(), c_int(-1)
out(init=lib.cuInit(0))
lib.cuDeviceGetCount(ctypes.byref(count))
found = {}
for pci in (b"0000:17:00.0", b"0000:19:00.0", b"0000:1a:00.0"):
    rc = lib.cuDeviceGetByPCIBusId(ctypes.byref(dev), pci)
    found[pci.decode()] = dev.value if rc == 0 else rc
out(count=count.value, found=found)
"""


def _said(env: dict[str, str], code: str = LOOKUP) -> dict:
    merged: dict = {}
    for event in run_py(env, code):
        merged.update(event)
    return merged


def test_cuda_visible_devices_limits_and_renumbers_the_devices(fake_cuda: FakeCuda) -> None:
    env = fake_cuda.env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    whole = _said(env)
    assert (whole["count"], whole["found"]) == (8, {"0000:17:00.0": 0, "0000:19:00.0": 2, "0000:1a:00.0": 3})
    # 3 then 2, up to the first token that is not a position: GPU0 has no ordinal (INVALID_DEVICE, 101).
    some = _said(dict(env, CUDA_VISIBLE_DEVICES="3,2,x,0"))
    assert (some["count"], some["found"]) == (2, {"0000:17:00.0": 101, "0000:19:00.0": 1, "0000:1a:00.0": 0})
    none = _said(dict(env, CUDA_VISIBLE_DEVICES=""))
    assert none["init"] == 100  # CUDA_ERROR_NO_DEVICE


def test_compute_mode_is_the_attribute_the_driver_answers(fake_cuda: FakeCuda) -> None:
    fake_cuda.state = FakeCudaState(
        gpus=[FakeCudaGpu(), FakeCudaGpu(compute_mode=3, ctx_error="DEVICE_UNAVAILABLE")]
    )
    fake_cuda.write()
    said = _said(
        fake_cuda.env(),
        """
        out(init=lib.cuInit(0))
        modes, ctx = [], c_void_p()
        for ordinal in (0, 1):
            mode = c_int(-1)
            modes.append([lib.cuDeviceGetAttribute(ctypes.byref(mode), 20, ordinal), mode.value])
        other = lib.cuDeviceGetAttribute(ctypes.byref(c_int()), 1, 0)
        out(modes=modes, other=other, ctx=lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, 1))
        """,
    )
    assert said["modes"] == [[0, 0], [0, 3]]
    assert said["other"] == 1  # only the compute mode is answered
    assert said["ctx"] == 46


def _reaped_within(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_a_stuck_hang_cannot_be_reaped_until_the_state_lets_it_go(fake_cuda: FakeCuda) -> None:
    fake_cuda.state.gpus[0].hang = "ctx"
    fake_cuda.state.gpus[0].stuck = True
    fake_cuda.write()
    with running(fake_cuda.env(), "open_ctx(b'0000:17:00.0')") as child:
        # cuCtxCreate is entered: the tracer is attached before it hangs.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not _tracer_of(child.proc.pid):
            time.sleep(0.05)
        assert _tracer_of(child.proc.pid), "no tracer attached"
        os.kill(child.proc.pid, 9)
        assert not _reaped_within(child.proc, 1.5), "a stuck process was reaped"
        fake_cuda.state.gpus[0].stuck = False
        fake_cuda.write()
        assert _reaped_within(child.proc, 5.0)
    # Without stuck=1 the same hang dies with its SIGKILL.
    fake_cuda.state.gpus[0].stuck = False
    fake_cuda.write()
    with running(fake_cuda.env(), "open_ctx(b'0000:17:00.0')") as child:
        time.sleep(0.5)
        os.kill(child.proc.pid, 9)
        assert _reaped_within(child.proc, 1.0)


def _tracer_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0
