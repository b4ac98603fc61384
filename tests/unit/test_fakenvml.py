"""The fake libnvidia-ml.so.1, exercised through NVIDIA's own pynvml (and raw
ctypes) in subprocesses, the way a GPU tool would load it."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakenvml import SOURCE, FakeGpu, FakeNvmlState, build
from tests.fakenvml.plugin import FakeNvml

MIB = 1024 * 1024

PRELUDE = """
import ctypes, json, sys, time
import pynvml
def out(obj):
    print(json.dumps(obj), flush=True)
def err_name(fn, *args):
    try:
        fn(*args)
    except pynvml.NVMLError as exc:
        return type(exc).__name__
    return None
"""


def run_py(fake: FakeNvml, code: str, env: dict[str, str] | None = None, timeout: float = 60):
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        env=env if env is not None else fake.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def memory_of(fake: FakeNvml, index: int = 0):
    return run_py(
        fake,
        f"""
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex({index})
        m1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        gprocs = pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)
        out({{
            "v1": [m1.total, m1.free, m1.used],
            "v2": [m2.version, m2.total, m2.reserved, m2.free, m2.used],
            "procs": [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId]
                      for p in procs],
            "gprocs": [[p.pid, p.usedGpuMemory] for p in gprocs],
        }})
        """,
    )


def wait_for_state(pid: int, want: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == want:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never reached state {want}")


def unused_pid() -> int:
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid += 1
    return pid


def test_enumeration_and_identity(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[3] = FakeGpu(
        name="NVIDIA H200", uuid="GPU-12345678-aaaa-bbbb-cccc-0123456789ab", pci="00000000:9A:00.0"
    )
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        pci3 = pynvml.nvmlDeviceGetPciInfo(hs[3])
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(b"GPU-12345678-aaaa-bbbb-cccc-0123456789ab")
        by_pci = pynvml.nvmlDeviceGetHandleByPciBusId(b"0000:9a:00.0")
        out({
            "count": n,
            "names": [pynvml.nvmlDeviceGetName(h) for h in hs],
            "uuids": [pynvml.nvmlDeviceGetUUID(h) for h in hs],
            "pcis": [pynvml.nvmlDeviceGetPciInfo(h).busId for h in hs],
            "pci3": [pci3.domain, pci3.bus, pci3.device, pci3.busIdLegacy],
            "minor": [pynvml.nvmlDeviceGetMinorNumber(h) for h in hs],
            "idx_uuid": pynvml.nvmlDeviceGetIndex(by_uuid),
            "idx_pci": pynvml.nvmlDeviceGetIndex(by_pci),
            "missing_uuid": err_name(pynvml.nvmlDeviceGetHandleByUUID, b"GPU-nope"),
            "bad_index": err_name(pynvml.nvmlDeviceGetHandleByIndex, 8),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "nvml": pynvml.nvmlSystemGetNVMLVersion(),
            "cuda": pynvml.nvmlSystemGetCudaDriverVersion(),
            "cuda2": pynvml.nvmlSystemGetCudaDriverVersion_v2(),
            "cc": list(pynvml.nvmlDeviceGetCudaComputeCapability(hs[0])),
            "arch": pynvml.nvmlDeviceGetArchitecture(hs[0]),
        })
        """,
    )
    assert got["count"] == 8
    assert got["names"][0] == "NVIDIA RTX PRO 6000 Blackwell"
    assert got["names"][3] == "NVIDIA H200"
    assert got["uuids"][0] == "GPU-fa4e0000-0000-0000-0000-000000000000"
    assert got["uuids"][7] == "GPU-fa4e0000-0000-0000-0000-000000000007"
    assert got["uuids"][3] == "GPU-12345678-aaaa-bbbb-cccc-0123456789ab"
    assert got["pcis"][0] == "00000000:17:00.0"
    assert got["pcis"][1] == "00000000:18:00.0"
    assert got["pcis"][3] == "00000000:9A:00.0"
    assert got["pci3"] == [0, 0x9A, 0, "0000:9A:00.0"]
    assert got["minor"] == list(range(8))
    assert got["idx_uuid"] == 3
    assert got["idx_pci"] == 3
    assert got["missing_uuid"] == "NVMLError_NotFound"
    assert got["bad_index"] == "NVMLError_InvalidArgument"
    assert got["driver"] == "570.124.06"
    assert got["nvml"] == "12.570.124.06"
    assert got["cuda"] == got["cuda2"] == 12080
    assert got["cc"] == [12, 0]
    assert got["arch"] == 10


def test_memory_v1_and_v2_semantics(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[0] = FakeGpu(total_mib=49152, baseline_mib=3, reserved_mib=512)
    fake_nvml.write()
    got = memory_of(fake_nvml, 0)
    total = 49152 * MIB
    # v2: used excludes the reserved memory, reported separately.
    assert got["v2"] == [0x02000028, total, 512 * MIB, total - 515 * MIB, 3 * MIB]
    # v1: used is reserved + allocated; free is the same.
    assert got["v1"] == [total, total - 515 * MIB, 515 * MIB]
    assert got["procs"] == []
    assert got["gprocs"] == []


def test_live_child_holder_counts_until_killed(fake_nvml: FakeNvml) -> None:
    child = subprocess.Popen(["sleep", "60"])  # noqa: S607
    try:
        fake_nvml.state.add_holder(0, child.pid, 40960)
        fake_nvml.write()
        got = memory_of(fake_nvml, 0)
        assert got["v2"][4] == (3 + 40960) * MIB
        assert got["v1"][2] == (3 + 40960) * MIB
        assert got["procs"] == [[child.pid, 40960 * MIB, 0xFFFFFFFF, 0xFFFFFFFF]]
        name = run_py(
            fake_nvml,
            f"pynvml.nvmlInit(); out(pynvml.nvmlSystemGetProcessName({child.pid}))",
        )
        assert name == "sleep"
    finally:
        child.kill()
        child.wait()
    got = memory_of(fake_nvml, 0)
    assert got["v2"][4] == 3 * MIB
    assert got["procs"] == []


def test_zombie_holder_does_not_count(fake_nvml: FakeNvml) -> None:
    child = subprocess.Popen(["true"])  # noqa: S607
    try:
        wait_for_state(child.pid, "Z")
        fake_nvml.state.add_holder(0, child.pid, 1000)
        fake_nvml.write()
        got = memory_of(fake_nvml, 0)
        assert got["v2"][4] == 3 * MIB
        assert got["procs"] == []
    finally:
        child.wait()


def test_invisible_ghost_and_graphics_holders(fake_nvml: FakeNvml) -> None:
    gone = unused_pid()
    fake_nvml.state.add_holder(3, gone, 2048, "invisible")
    fake_nvml.state.add_holder(5, gone + 1, 1024, "ghost")
    fake_nvml.state.add_holder(5, os.getpid(), 512, "graphics")
    fake_nvml.write()
    inv = memory_of(fake_nvml, 3)
    assert inv["v2"][4] == (3 + 2048) * MIB
    assert inv["procs"] == [[gone, 2048 * MIB, 0xFFFFFFFF, 0xFFFFFFFF]]
    ghost = memory_of(fake_nvml, 5)
    assert ghost["v2"][4] == (3 + 1024 + 512) * MIB
    assert ghost["procs"] == []
    assert ghost["gprocs"] == [[os.getpid(), 512 * MIB]]
    # Holders on other GPUs do not leak onto GPU 0.
    assert memory_of(fake_nvml, 0)["v2"][4] == 3 * MIB


def test_gpu_is_lost_on_one_gpu_only(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[1].error = "GPU_IS_LOST"
    fake_nvml.state.gpus[2].error = "NOT_SUPPORTED"
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        pynvml.nvmlInit()
        h0, h1, h2 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
        exc = None
        try:
            pynvml.nvmlDeviceGetMemoryInfo(h1)
        except pynvml.NVMLError_GpuIsLost as e:
            exc = [e.value, str(e)]
        out({
            "lost": exc,
            "lost_name": err_name(pynvml.nvmlDeviceGetName, h1),
            "lost_procs": err_name(pynvml.nvmlDeviceGetComputeRunningProcesses, h1),
            "unsupported": err_name(pynvml.nvmlDeviceGetUtilizationRates, h2),
            "ok_name": pynvml.nvmlDeviceGetName(h0),
            "ok_used": pynvml.nvmlDeviceGetMemoryInfo(h0).used,
            "count": pynvml.nvmlDeviceGetCount(),
        })
        """,
    )
    assert got["lost"] == [15, "GPU is lost"]
    assert got["lost_name"] == "NVMLError_GpuIsLost"
    assert got["lost_procs"] == "NVMLError_GpuIsLost"
    assert got["unsupported"] == "NVMLError_NotSupported"
    assert got["ok_name"] == "NVIDIA RTX PRO 6000 Blackwell"
    assert got["ok_used"] == 3 * MIB
    assert got["count"] == 8


@pytest.mark.parametrize(
    ("error", "exc_name"),
    [
        ("DRIVER_NOT_LOADED", "NVMLError_DriverNotLoaded"),
        ("LIB_RM_VERSION_MISMATCH", "NVMLError_LibRmVersionMismatch"),
        ("NO_PERMISSION", "NVMLError_NoPermission"),
        ("UNKNOWN", "NVMLError_Unknown"),
    ],
)
def test_init_error(fake_nvml: FakeNvml, error: str, exc_name: str) -> None:
    fake_nvml.state.init_error = error
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        name = err_name(pynvml.nvmlInit)
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        out([name, lib.nvmlDeviceGetCount_v2(ctypes.byref(ctypes.c_uint()))])
        """,
    )
    assert got == [exc_name, 1]  # and still uninitialised afterwards


def test_unset_or_missing_state_is_driver_not_loaded(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    env = fake_nvml.env()
    del env["FAKE_NVML_STATE"]
    code = "out([err_name(pynvml.nvmlInit), str(pynvml.NVMLError(9))])"
    assert run_py(fake_nvml, code, env=env) == ["NVMLError_DriverNotLoaded", "Driver Not Loaded"]
    env["FAKE_NVML_STATE"] = str(tmp_path / "does-not-exist")
    assert run_py(fake_nvml, code, env=env)[0] == "NVMLError_DriverNotLoaded"


def test_hang_ms_delays_only_that_gpu(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[2].hang_ms = 1500
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        import threading
        pynvml.nvmlInit()
        h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
        h2 = pynvml.nvmlDeviceGetHandleByIndex(2)  # getting the handle does not hang
        t = time.monotonic()
        pynvml.nvmlDeviceGetMemoryInfo(h0)
        fast = time.monotonic() - t
        t = time.monotonic()
        pynvml.nvmlDeviceGetMemoryInfo(h2)
        slow = time.monotonic() - t
        # While one thread is stuck on GPU 2, another can still query GPU 0.
        th = threading.Thread(target=pynvml.nvmlDeviceGetName, args=(h2,))
        th.start()
        time.sleep(0.2)
        t = time.monotonic()
        pynvml.nvmlDeviceGetName(h0)
        concurrent = time.monotonic() - t
        th.join()
        out([fast, slow, concurrent])
        """,
    )
    fast, slow, concurrent = got
    assert fast < 0.5
    assert 1.45 <= slow < 5
    assert concurrent < 0.5


def test_process_query_size_protocol_via_ctypes(fake_nvml: FakeNvml) -> None:
    gone = unused_pid()
    fake_nvml.state.add_holder(0, gone, 100, "invisible")
    fake_nvml.state.add_holder(0, gone + 1, 200, "invisible")
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        class V1(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
        V3 = pynvml.c_nvmlProcessInfo_v3_t
        n = ctypes.c_uint(0)
        res = {"uninit": lib.nvmlDeviceGetComputeRunningProcesses_v3(None, ctypes.byref(n), None)}
        res["init"] = lib.nvmlInit_v2()
        h = ctypes.c_void_p()
        lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
        n = ctypes.c_uint(0)
        res["probe"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None),
                        n.value]
        n = ctypes.c_uint(1)
        small = (V3 * 1)()
        res["small"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), small),
                        n.value]
        n = ctypes.c_uint(5)
        big = (V3 * 5)()
        res["big"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), big),
                      n.value, [[p.pid, p.usedGpuMemory, p.gpuInstanceId] for p in big[:2]]]
        n = ctypes.c_uint(4)
        v1 = (V1 * 4)()
        res["v1"] = [lib.nvmlDeviceGetComputeRunningProcesses(h, ctypes.byref(n), v1),
                     n.value, [[p.pid, p.usedGpuMemory] for p in v1]]
        n = ctypes.c_uint(4)
        res["null_infos"] = lib.nvmlDeviceGetComputeRunningProcesses_v2(h, ctypes.byref(n), None)
        res["null_count"] = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, None, big)
        h1 = ctypes.c_void_p()
        lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(h1))
        n = ctypes.c_uint(0)
        res["empty"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h1, ctypes.byref(n), None),
                        n.value]
        n = ctypes.c_uint(0)
        res["mps"] = [lib.nvmlDeviceGetMPSComputeRunningProcesses_v3(h, ctypes.byref(n), None),
                      n.value]
        res["bad_handle"] = lib.nvmlDeviceGetComputeRunningProcesses_v3(
            ctypes.c_void_p(16), ctypes.byref(n), None)
        m = pynvml.c_nvmlMemory_v2_t()
        m.version = 0x01000028
        res["mem_bad_version"] = lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m))
        out(res)
        """,
    )
    assert got["uninit"] == 1  # NVML_ERROR_UNINITIALIZED
    assert got["init"] == 0
    assert got["probe"] == [7, 2]  # NVML_ERROR_INSUFFICIENT_SIZE, count needed
    assert got["small"] == [7, 2]
    assert got["big"] == [0, 2, [[gone, 100 * MIB, 0xFFFFFFFF], [gone + 1, 200 * MIB, 0xFFFFFFFF]]]
    # v1 structs are 16 bytes: pid + usedGpuMemory, no instance ids.
    assert got["v1"] == [0, 2, [[gone, 100 * MIB], [gone + 1, 200 * MIB], [0, 0], [0, 0]]]
    assert got["null_infos"] == 2
    assert got["null_count"] == 2
    assert got["empty"] == [0, 0]
    assert got["mps"] == [0, 0]
    assert got["bad_handle"] == 2
    assert got["mem_bad_version"] == 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_init_is_reference_counted(fake_nvml: FakeNvml) -> None:
    got = run_py(
        fake_nvml,
        """
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        n = ctypes.c_uint()
        count = lambda: lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        r = [count(), lib.nvmlInit(), lib.nvmlInitWithFlags(0), lib.nvmlShutdown(), count(),
             lib.nvmlShutdown(), count(), lib.nvmlShutdown()]
        lib.nvmlErrorString.restype = ctypes.c_char_p
        out([r, lib.nvmlErrorString(15).decode(), lib.nvmlErrorString(9).decode()])
        """,
    )
    assert got == [[1, 0, 0, 0, 0, 0, 1, 1], "GPU is lost", "Driver Not Loaded"]


def test_state_file_is_reread_live(fake_nvml: FakeNvml) -> None:
    script = PRELUDE + textwrap.dedent(
        """
        pynvml.nvmlInit()
        for _ in sys.stdin:
            n = pynvml.nvmlDeviceGetCount()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            out([n, pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                 pynvml.nvmlDeviceGetMemoryInfo(h).used])
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=fake_nvml.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None

    def ask():
        proc.stdin.write("\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        assert ask() == [8, 0, 3 * MIB]
        # Same-size rewrites in quick succession are still noticed.
        for pct in (11, 22, 33):
            fake_nvml.state.gpus[0].util_pct = pct
            fake_nvml.write()
            assert ask() == [8, pct, 3 * MIB]
        fake_nvml.state.gpus = fake_nvml.state.gpus[:2]
        fake_nvml.state.add_holder(0, unused_pid(), 7, "ghost")
        fake_nvml.write()
        assert ask() == [2, 33, 10 * MIB]
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert proc.returncode == 0


def test_tool_style_sweep(fake_nvml: FakeNvml) -> None:
    """Every query a monitor typically makes either answers or says NotSupported."""
    fake_nvml.state.gpus[0] = FakeGpu(util_pct=35, mem_util_pct=10, temp_c=45, power_mw=120000, fan_pct=30)
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        P = pynvml
        calls = {
            "util": lambda: [P.nvmlDeviceGetUtilizationRates(h).gpu,
                             P.nvmlDeviceGetUtilizationRates(h).memory],
            "temp": lambda: P.nvmlDeviceGetTemperature(h, P.NVML_TEMPERATURE_GPU),
            "tempv": lambda: P.nvmlDeviceGetTemperatureV(h, P.NVML_TEMPERATURE_GPU),
            "power": lambda: P.nvmlDeviceGetPowerUsage(h),
            "limit": lambda: P.nvmlDeviceGetPowerManagementLimit(h),
            "enforced": lambda: P.nvmlDeviceGetEnforcedPowerLimit(h),
            "constraints": lambda: P.nvmlDeviceGetPowerManagementLimitConstraints(h),
            "energy": lambda: P.nvmlDeviceGetTotalEnergyConsumption(h) >= 0,
            "fan": lambda: P.nvmlDeviceGetFanSpeed(h),
            "fan2": lambda: P.nvmlDeviceGetFanSpeed_v2(h, 0),
            "fans": lambda: P.nvmlDeviceGetNumFans(h),
            "enc": lambda: P.nvmlDeviceGetEncoderUtilization(h),
            "dec": lambda: P.nvmlDeviceGetDecoderUtilization(h),
            "pstate": lambda: P.nvmlDeviceGetPerformanceState(h),
            "persist": lambda: P.nvmlDeviceGetPersistenceMode(h),
            "disp_active": lambda: P.nvmlDeviceGetDisplayActive(h),
            "disp_mode": lambda: P.nvmlDeviceGetDisplayMode(h),
            "ecc": lambda: P.nvmlDeviceGetTotalEccErrors(h, 0, 0),
            "compute_mode": lambda: P.nvmlDeviceGetComputeMode(h),
            "mig": lambda: P.nvmlDeviceGetMigMode(h),
            "is_mig": lambda: P.nvmlDeviceIsMigDeviceHandle(h).value,
            "clock": lambda: P.nvmlDeviceGetClockInfo(h, P.NVML_CLOCK_SM),
            "max_clock": lambda: P.nvmlDeviceGetMaxClockInfo(h, P.NVML_CLOCK_SM),
            "pcie": lambda: [P.nvmlDeviceGetCurrPcieLinkGeneration(h),
                             P.nvmlDeviceGetCurrPcieLinkWidth(h),
                             P.nvmlDeviceGetMaxPcieLinkGeneration(h),
                             P.nvmlDeviceGetMaxPcieLinkWidth(h)],
            "pcie_tx": lambda: P.nvmlDeviceGetPcieThroughput(h, 0),
            "bar1": lambda: P.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total,
            "brand": lambda: P.nvmlDeviceGetBrand(h),
            "serial": lambda: P.nvmlDeviceGetSerial(h),
            "reasons": lambda: P.nvmlDeviceGetCurrentClocksThrottleReasons(h),
            "events": lambda: P.nvmlDeviceGetCurrentClocksEventReasons(h),
            "driver_model": lambda: P.nvmlDeviceGetDriverModel(h),
            "proc_util": lambda: P.nvmlDeviceGetProcessUtilization(h, 0),
            "mps": lambda: P.nvmlDeviceGetMPSComputeRunningProcesses(h),
            "pci_v2": lambda: P.nvmlDeviceGetPciInfo(h).pciDeviceId != 0,
        }
        res = {}
        for key, fn in calls.items():
            try:
                res[key] = fn()
            except P.NVMLError as exc:
                res[key] = type(exc).__name__
        h1 = pynvml.nvmlDeviceGetHandleByIndex(1)
        res["no_fan"] = err_name(P.nvmlDeviceGetFanSpeed, h1)
        out(res)
        """,
    )
    assert got["util"] == [35, 10]
    assert got["temp"] == got["tempv"] == 45
    assert got["power"] == 120000
    assert got["limit"] == got["enforced"] == 600000
    assert got["constraints"] == [150000, 600000]
    assert got["energy"] is True
    assert got["fan"] == got["fan2"] == 30
    assert got["fans"] == 1
    assert got["no_fan"] == "NVMLError_NotSupported"
    assert got["pstate"] == 0
    assert got["mig"] == [0, 0]
    assert got["is_mig"] == 0
    assert got["pcie"] == [5, 16, 5, 16]
    assert got["bar1"] == 49152 * MIB
    assert got["brand"] == 13
    assert got["driver_model"] == "NVMLError_NotSupported"
    assert got["proc_util"] == "NVMLError_NotFound"
    assert got["mps"] == []
    assert got["pci_v2"] is True
    assert got["reasons"] == got["events"] == 0
    unexpected = {k: v for k, v in got.items() if isinstance(v, str) and v.startswith("NVMLError")}
    assert set(unexpected) <= {"driver_model", "proc_util", "no_fan"}


def _exported(lib_dir: Path) -> set[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib_dir / "libnvidia-ml.so.1")],  # noqa: S607
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split()[-1] for line in out.splitlines() if " T " in line}


def test_exported_symbols(fake_nvml_lib: Path) -> None:
    symbols = _exported(fake_nvml_lib)
    for required in (
        "nvmlInit",
        "nvmlInit_v2",
        "nvmlInitWithFlags",
        "nvmlShutdown",
        "nvmlErrorString",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetGpuFabricInfo",
        "nvmlDeviceGetGpuFabricInfoV",
    ):
        assert required in symbols
    # nvitop picks its process struct layout from the presence of these.
    assert "nvmlDeviceGetConfComputeMemSizeInfo" not in symbols
    assert "nvmlDeviceGetRunningProcessDetailList" not in symbols
    assert all(s.startswith("nvml") for s in symbols), symbols - {s for s in symbols if s.startswith("nvml")}


def test_older_driver_builds_lack_exactly_their_symbols(
    fake_nvml_lib: Path, fake_nvml_older: Callable[..., Path]
) -> None:
    full = _exported(fake_nvml_lib)
    pre_r510 = _exported(fake_nvml_older("v3"))
    assert full - pre_r510 == {
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        "nvmlDeviceGetMemoryInfo_v2",
    }
    older = _exported(fake_nvml_older("v3", "v2"))
    assert pre_r510 - older == {
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
        "nvmlDeviceGetMPSComputeRunningProcesses_v2",
        "nvmlDeviceGetPciInfo_v2",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2",
    }
    assert "nvmlDeviceGetComputeRunningProcesses" in older  # v1 stays
    assert full - _exported(fake_nvml_older("power")) == {
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
    }
    assert full - _exported(fake_nvml_older("fabric")) == {
        "nvmlDeviceGetGpuFabricInfo",
        "nvmlDeviceGetGpuFabricInfoV",
    }


def test_a_name_can_hold_any_bytes(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[1].name = b'Tesla \xff\xfe "#\\ V100'
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(1)
        buf = ctypes.create_string_buffer(96)
        pynvml._nvmlGetFunctionPointer("nvmlDeviceGetName")(h, buf, 96)
        out({"raw": list(buf.value)})
        """,
    )
    assert bytes(got["raw"]) == b'Tesla \xff\xfe "#\\ V100'


def test_build_fails_loudly_without_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(RuntimeError, match="fakenvml"):
        build(tmp_path / "out")


def test_state_rejects_unrenderable_values(tmp_path: Path) -> None:
    state = FakeNvmlState(gpus=[FakeGpu(name='bad "name"')])
    with pytest.raises(ValueError, match="cannot be written"):
        state.write(tmp_path / "s")
    assert not (tmp_path / "s").exists()
    assert list(tmp_path.iterdir()) == []


def test_recovery_action_field_value(fake_nvml: FakeNvml) -> None:
    gpus = fake_nvml.state.gpus
    gpus[1].recovery_action = 4  # NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET
    gpus[2].recovery_action = 1
    gpus[2].unsupported = "recovery"
    gpus[3].recovery_action = 1
    gpus[3].error = "GPU_IS_LOST"
    gpus[4].recovery_action = 2
    gpus[4].health_error = "RESET_REQUIRED"
    gpus[5].recovery_action = 0
    gpus[5].hang_ms = 300
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        pynvml.nvmlInit()
        hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        FI = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
        def read(h):
            vals = pynvml.nvmlDeviceGetFieldValues(h, [FI, (FI, 3), pynvml.NVML_FI_DEV_ECC_CURRENT])
            return [[v.fieldId, v.scopeId, v.nvmlReturn, v.valueType, v.value.uiVal, v.timestamp]
                    for v in vals]
        res = {"fi": FI, "now": time.time() * 1e6, "one": read(hs[1]), "absent": read(hs[0])}
        t = time.monotonic()
        res["hung"] = read(hs[5])
        res["hang_s"] = time.monotonic() - t
        res["unsupported"] = err_name(read, hs[2])
        res["lost"] = err_name(read, hs[3])
        res["health_error"] = err_name(read, hs[4])
        lib = pynvml.nvmlLib
        res["null"] = lib.nvmlDeviceGetFieldValues(hs[1], 1, None)
        res["negative"] = lib.nvmlDeviceGetFieldValues(hs[1], -1, ctypes.byref(pynvml.c_nvmlFieldValue_t()))
        out(res)
        """,
    )
    assert got["fi"] == 230
    one = got["one"]
    # NVML_SUCCESS, NVML_VALUE_TYPE_UNSIGNED_INT, the action; the scope id is kept.
    assert [v[:5] for v in one[:2]] == [[230, 0, 0, 1, 4], [230, 3, 0, 1, 4]]
    assert one[2][:3] == [1, 0, 3]  # any other field (here ECC_CURRENT): NOT_SUPPORTED in its value
    for value in one:
        assert abs(value[5] - got["now"]) < 60e6  # microseconds since 1970
    # No recovery_action: the call succeeds, the value says NOT_SUPPORTED (a driver before R565).
    assert [v[2] for v in got["absent"]] == [3, 3, 3]
    assert got["hung"][0][2:5] == [0, 1, 0]
    assert got["hang_s"] >= 0.28
    assert got["unsupported"] == "NVMLError_NotSupported"
    assert got["lost"] == "NVMLError_GpuIsLost"
    assert got["health_error"] == "NVMLError_ResetRequired"
    assert got["null"] == got["negative"] == 2  # NVML_ERROR_INVALID_ARGUMENT


CLUSTER = "5f1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"


def test_gpu_fabric_info(fake_nvml: FakeNvml) -> None:
    gpus = fake_nvml.state.gpus
    gpus[0].fabric_state = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
    gpus[0].fabric_clique = 32766
    gpus[0].fabric_cluster_uuid = CLUSTER
    gpus[0].fabric_health_mask = 0x1 | (0x2 << 2) | (0x1 << 8)  # degraded BW, no route recovery
    gpus[0].fabric_health_summary = 3  # LIMITED_CAPACITY
    gpus[2].fabric_state = "IN_PROGRESS"
    gpus[2].fabric_status = "NOT_READY"
    gpus[3].fabric_state = 3
    gpus[3].unsupported = "fabric"
    gpus[4].fabric_state = 3
    gpus[4].error = "GPU_IS_LOST"
    gpus[5].fabric_state = 0  # the call answers, the state says NOT_SUPPORTED
    fake_nvml.write()
    got = run_py(
        fake_nvml,
        """
        pynvml.nvmlInit()
        hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        def v1(h):
            info = pynvml.c_nvmlGpuFabricInfo_t()
            pynvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
            return [bytes(info.clusterUuid).hex(), info.status, info.cliqueId, info.state]
        def v2(h):
            info = pynvml.c_nvmlGpuFabricInfoV_t()
            pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
            return [info.version, bytes(info.clusterUuid).hex(), info.status, info.cliqueId, info.state,
                    info.healthMask]
        def v3(h):
            info = pynvml.c_nvmlGpuFabricInfo_v3_t()
            pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
            return [info.version, bytes(info.clusterUuid).hex(), info.status, info.cliqueId, info.state,
                    info.healthMask, info.healthSummary]
        res = {}
        for i in (0, 1, 2, 3, 4, 5):
            res[i] = [err_name(fn, hs[i]) or fn(hs[i]) for fn in (v1, v2, v3)]
        bad = pynvml.c_nvmlGpuFabricInfo_v2_t()
        bad.version = 0x01000024
        res["bad_version"] = pynvml.nvmlLib.nvmlDeviceGetGpuFabricInfoV(hs[0], ctypes.byref(bad))
        res["null"] = pynvml.nvmlLib.nvmlDeviceGetGpuFabricInfoV(hs[0], None)
        res["versions"] = [pynvml.nvmlGpuFabricInfo_v2, pynvml.nvmlGpuFabricInfo_v3]
        out(res)
        """,
    )
    uuid = CLUSTER.replace("-", "")
    mask = 0x1 | (0x2 << 2) | (0x1 << 8)
    assert got["0"] == [
        [uuid, 0, 32766, 3],
        [0x02000024, uuid, 0, 32766, 3, mask],
        [0x03000028, uuid, 0, 32766, 3, mask, 3],
    ]
    # No fabric_state: a GPU without an NVSwitch fabric.
    assert got["1"] == ["NVMLError_NotSupported"] * 3
    assert got["2"] == [
        ["00" * 16, 27, 0, 2],  # NVML_ERROR_NOT_READY, NVML_GPU_FABRIC_STATE_IN_PROGRESS
        [0x02000024, "00" * 16, 27, 0, 2, 0],
        [0x03000028, "00" * 16, 27, 0, 2, 0, 0],
    ]
    assert got["3"] == ["NVMLError_NotSupported"] * 3
    assert got["4"] == ["NVMLError_GpuIsLost"] * 3
    assert got["5"][0] == ["00" * 16, 0, 0, 0]
    assert got["bad_version"] == 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert got["null"] == 2
    assert got["versions"] == [0x02000024, 0x03000028]


def test_recovery_events_share_the_event_sequence_with_xids(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.xids.append((0, 13))  # present before the sets: never delivered
    fake_nvml.state.recoveries.append((0, 1))
    fake_nvml.state.gpus[2].unsupported = "recovery"
    fake_nvml.write()
    script = PRELUDE + textwrap.dedent(
        """
        P = pynvml
        P.nvmlInit()
        h0, h1, h2 = (P.nvmlDeviceGetHandleByIndex(i) for i in range(3))
        XID, REC = P.nvmlEventTypeXidCriticalError, P.nvmlEventTypeGpuRecoveryAction
        both = P.nvmlEventSetCreate()
        P.nvmlDeviceRegisterEvents(h0, XID | REC, both)
        P.nvmlDeviceRegisterEvents(h1, REC, both)
        xid_only = P.nvmlEventSetCreate()
        P.nvmlDeviceRegisterEvents(h0, XID, xid_only)
        P.nvmlDeviceRegisterEvents(h1, XID, xid_only)
        out({
            "types": [REC, P.nvmlDeviceGetSupportedEventTypes(h0), P.nvmlDeviceGetSupportedEventTypes(h2)],
            "refused": err_name(P.nvmlDeviceRegisterEvents, h2, XID | REC, xid_only),
        })
        def drain(s):
            got = []
            while True:
                try:
                    d = P.nvmlEventSetWait_v2(s, 0)
                except P.NVMLError_Timeout:
                    return got
                got.append([P.nvmlDeviceGetIndex(d.device), d.eventType, d.eventData])
        for _ in sys.stdin:
            out({"both": drain(both), "xid_only": drain(xid_only)})
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=fake_nvml.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None

    def ask():
        proc.stdin.write("\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    xid, rec = 0x8, 0x8000
    try:
        first = json.loads(proc.stdout.readline())
        assert first["types"][0] == rec
        assert first["types"][1] == 0x1 | 0x2 | xid | rec
        assert first["types"][2] == 0x1 | 0x2 | xid  # unsupported=recovery: as a driver before R565
        assert first["refused"] == "NVMLError_NotSupported"
        assert ask() == {"both": [], "xid_only": []}
        state = fake_nvml.state
        state.recoveries += [(0, 4), (1, 2), (3, 1)]  # GPU 3: registered by no set
        state.xids.append((1, 79))  # GPU 1: "both" registered only recovery actions there
        fake_nvml.write()
        assert ask() == {"both": [[0, rec, 4], [1, rec, 2]], "xid_only": [[1, xid, 79]]}
        state.recoveries.append((0, 5))
        state.xids.append((0, 48))
        state.recoveries.append((2, 1))  # GPU 2 cannot register them
        fake_nvml.write()
        assert ask() == {"both": [[0, xid, 48], [0, rec, 5]], "xid_only": [[0, xid, 48]]}
        assert ask() == {"both": [], "xid_only": []}  # once each
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert "xid 1 79\nxid 0 48\nrecovery 0 1\nrecovery 0 4" in fake_nvml.state_path.read_text()


# (fake's typedef in fakenvml.c, pynvml's ctypes Structure)
LAYOUTS = [
    ("nvmlFieldValue_t", "c_nvmlFieldValue_t"),
    ("nvmlValue_t", "c_nvmlValue_t"),
    ("nvmlGpuFabricInfo_t", "c_nvmlGpuFabricInfo_t"),
    ("nvmlGpuFabricInfo_v2_t", "c_nvmlGpuFabricInfo_v2_t"),
    ("nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v3_t"),
    ("nvmlGpuFabricInfoV_t", "c_nvmlGpuFabricInfo_v3_t"),
    ("nvmlEventData_t", "c_nvmlEventData_t"),
    ("nvmlMemory_v2_t", "c_nvmlMemory_v2_t"),
]


def test_struct_layouts_match_pynvml(tmp_path: Path) -> None:
    """sizeof and every field's offset of the fake's structs (compiled from fakenvml.c itself) equal those of
    pynvml's ctypes Structures, and its version macros equal pynvml's constants."""
    import pynvml

    lines = []
    for c_name, py_name in LAYOUTS:
        fields = [name for name, *_ in getattr(pynvml, py_name)._fields_]
        offsets = " ".join(f'printf(" %zu", offsetof({c_name}, {f}));' for f in fields)
        lines.append(f'printf("%zu", sizeof({c_name})); {offsets} printf("\\n");')
    lines.append('printf("%u %u %u\\n", nvmlGpuFabricInfo_v2, nvmlGpuFabricInfo_v3, nvmlMemory_v2);')
    probe = tmp_path / "probe.c"
    probe.write_text(
        f'#include "{SOURCE}"\n#include <stddef.h>\nint main(void)\n{{\n'
        + "\n".join(lines)
        + "\nreturn 0;\n}\n"
    )
    cc = os.environ.get("CC") or "cc"
    subprocess.run([cc, "-o", str(tmp_path / "probe"), str(probe), "-lpthread"], check=True)
    printed = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, check=True).stdout
    rows = printed.splitlines()
    for (c_name, py_name), row in zip(LAYOUTS, rows, strict=False):
        cls = getattr(pynvml, py_name)
        want = [ctypes.sizeof(cls)] + [getattr(cls, name).offset for name, *_ in cls._fields_]
        assert [int(x) for x in row.split()] == want, (c_name, py_name)
    assert [int(x) for x in rows[-1].split()] == [
        pynvml.nvmlGpuFabricInfo_v2,
        pynvml.nvmlGpuFabricInfo_v3,
        pynvml.nvmlMemory_v2,
    ]
    assert len(rows) == len(LAYOUTS) + 1
