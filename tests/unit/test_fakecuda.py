"""The fake libcuda.so.1, driven through ctypes in subprocesses the way a readiness probe would load it:
cuInit, a device by PCI bus id, a context, an allocation written and read back."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fakecuda import FakeCudaGpu, FakeCudaState, build
from tests.fakecuda.plugin import FakeCuda
from tests.fakenvml.plugin import FakeNvml

MIB = 1024 * 1024

PRELUDE = r'''
import ctypes, json, sys, time
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_ubyte, c_uint, c_void_p

lib = ctypes.CDLL("libcuda.so.1")
CUdeviceptr = ctypes.c_ulonglong
SIGNATURES = {
    "cuInit": [c_uint],
    "cuDriverGetVersion": [POINTER(c_int)],
    "cuDeviceGetCount": [POINTER(c_int)],
    "cuDeviceGet": [POINTER(c_int), c_int],
    "cuDeviceGetByPCIBusId": [POINTER(c_int), c_char_p],
    "cuDeviceGetPCIBusId": [c_char_p, c_int, c_int],
    "cuDeviceGetAttribute": [POINTER(c_int), c_int, c_int],
    "cuCtxCreate_v2": [POINTER(c_void_p), c_uint, c_int],
    "cuCtxDestroy_v2": [c_void_p],
    "cuCtxSetCurrent": [c_void_p],
    "cuCtxSynchronize": [],
    "cuDevicePrimaryCtxRetain": [POINTER(c_void_p), c_int],
    "cuDevicePrimaryCtxRelease_v2": [c_int],
    "cuMemAlloc_v2": [POINTER(CUdeviceptr), c_size_t],
    "cuMemFree_v2": [CUdeviceptr],
    "cuMemsetD8_v2": [CUdeviceptr, c_ubyte, c_size_t],
    "cuMemcpyHtoD_v2": [CUdeviceptr, c_void_p, c_size_t],
    "cuMemcpyDtoH_v2": [c_void_p, CUdeviceptr, c_size_t],
    "cuGetErrorName": [c_int, POINTER(c_char_p)],
    "cuGetErrorString": [c_int, POINTER(c_char_p)],
}
for _name, _args in SIGNATURES.items():
    _fn = getattr(lib, _name, None)
    if _fn is not None:
        _fn.argtypes = _args
        _fn.restype = c_int


def out(**kw):
    print(json.dumps(kw), flush=True)


def err_name(rc):
    s = c_char_p()
    return s.value.decode() if lib.cuGetErrorName(rc, ctypes.byref(s)) == 0 else None


def err_string(rc):
    s = c_char_p()
    return s.value.decode() if lib.cuGetErrorString(rc, ctypes.byref(s)) == 0 else None


def alloc(nbytes):
    dptr = CUdeviceptr()
    rc = lib.cuMemAlloc_v2(ctypes.byref(dptr), nbytes)
    return rc, dptr.value


def open_ctx(pci):
    dev, ctx = c_int(), c_void_p()
    assert lib.cuInit(0) == 0
    assert lib.cuDeviceGetByPCIBusId(ctypes.byref(dev), pci) == 0
    assert lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    return ctx


def probe(pci=b"0000:17:00.0", nbytes=1 << 20, pattern=0xA5):
    """The readiness sequence: {"start": step} before each call, {"step", "rc", "ms"} after it."""

    def call(step, fn, *args):
        out(start=step)
        t = time.monotonic()
        rc = fn(*args)
        out(step=step, rc=rc, ms=round((time.monotonic() - t) * 1000))
        return rc

    count, dev, ctx, dptr = c_int(), c_int(), c_void_p(), CUdeviceptr()
    if call("init", lib.cuInit, 0) or call("count", lib.cuDeviceGetCount, ctypes.byref(count)):
        return
    if call("device", lib.cuDeviceGetByPCIBusId, ctypes.byref(dev), pci):
        return
    if call("ctx", lib.cuCtxCreate_v2, ctypes.byref(ctx), 0, dev):
        return
    if call("alloc", lib.cuMemAlloc_v2, ctypes.byref(dptr), nbytes) == 0:
        host = ctypes.create_string_buffer(nbytes)
        set_ok = (
            call("memset", lib.cuMemsetD8_v2, dptr, pattern, nbytes) == 0
            and call("dtoh", lib.cuMemcpyDtoH_v2, host, dptr, nbytes) == 0
            and host.raw == bytes([pattern]) * nbytes
        )
        src = bytes(range(256)) * (nbytes // 256)
        copy_ok = (
            call("htod", lib.cuMemcpyHtoD_v2, dptr, src, nbytes) == 0
            and call("dtoh2", lib.cuMemcpyDtoH_v2, host, dptr, nbytes) == 0
            and host.raw == src
        )
        out(match=[set_ok, copy_ok])
        call("free", lib.cuMemFree_v2, dptr)
    call("destroy", lib.cuCtxDestroy_v2, ctx)
    out(done=True, count=count.value, dev=dev.value)
'''


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def run_py(env: dict[str, str], code: str, timeout: float = 60) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return _lines(proc.stdout)


def rcs(events: list[dict]) -> dict[str, int]:
    return {e["step"]: e["rc"] for e in events if "step" in e}


def last(events: list[dict], key: str) -> dict:
    return [e for e in events if key in e][-1]


class Child:
    """A probe child whose output is read line by line with deadlines; killed on leaving ``running``."""

    def __init__(self, env: dict[str, str], code: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.events: list[dict] = []
        self.stderr = b""
        self._buf = b""
        self._done = False

    def _take(self, chunk: bytes) -> None:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        self.events.extend(json.loads(line) for line in lines if line.startswith(b"{"))

    def _read(self, timeout: float) -> bool:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], max(timeout, 0))
        if not ready:
            return False
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        self._take(chunk)
        return bool(chunk)

    def wait_for(self, pred: Callable[[dict], bool], timeout: float = 15) -> dict:
        """The first line that satisfies ``pred``, waiting up to ``timeout`` seconds for it."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if pred(event):
                    return event
            if not self._read(deadline - time.monotonic()):
                if self.proc.poll() is not None:
                    self.finish()
                    raise AssertionError(f"child exited: {self.events} {self.stderr!r}")
                if time.monotonic() >= deadline:
                    raise AssertionError(f"child never printed the awaited line; got {self.events}")

    def send(self, line: str = "") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 15) -> int:
        """Wait for the child to exit (killing it if it is still there after ``timeout``) and read the rest
        of its output; its exit status."""
        if not self._done:
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
            self._done = True
            self._take(out + b"\n")
            self.stderr = err
        return self.proc.returncode

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        return self.finish()


@contextmanager
def running(env: dict[str, str], code: str) -> Iterator[Child]:
    child = Child(env, code)
    try:
        yield child
    finally:
        child.kill()


def test_healthy_probe_round_trips(fake_cuda: FakeCuda) -> None:
    events = run_py(fake_cuda.env(), "probe(b'0000:17:00.0'); probe(b'0000:1a:00.0', nbytes=4096)")
    steps = [e for e in events if "step" in e]
    assert len(steps) == 2 * 11
    assert all(e["rc"] == 0 for e in steps), steps
    dones = [e for e in events if "done" in e]
    assert [(d["count"], d["dev"]) for d in dones] == [(8, 0), (8, 3)]
    assert [e["match"] for e in events if "match" in e] == [[True, True], [True, True]]


def test_devices_contexts_and_error_codes(fake_cuda: FakeCuda) -> None:
    fake_cuda.state.gpus = [FakeCudaGpu(index=5), FakeCudaGpu(index=2, pci="0000:c1:00.0")]
    fake_cuda.write()
    (got,) = run_py(
        fake_cuda.env(),
        r"""
        n, dev, ctx, ctx2, buf = c_int(), c_int(), c_void_p(), c_void_p(), ctypes.create_string_buffer(32)
        version = c_int()
        before = [lib.cuDeviceGetCount(ctypes.byref(n)), lib.cuDriverGetVersion(ctypes.byref(version))]
        assert lib.cuInit(0) == 0 and lib.cuInit(0) == 0
        ids = []
        for i in range(2):
            assert lib.cuDeviceGet(ctypes.byref(dev), i) == 0
            assert lib.cuDeviceGetPCIBusId(buf, 32, dev) == 0
            ids.append(buf.value.decode())
        lookups = {}
        for pci in [b"0000:1c:00.0", b"1C:00.0", b"00000000:C1:00.0", b"0000:c1:00", b"0000:99:00.0",
                    b"garbage", b"0000:1c:00.0x"]:
            dev.value = -1
            lookups[pci.decode()] = [lib.cuDeviceGetByPCIBusId(ctypes.byref(dev), pci), dev.value]
        no_ctx = list(alloc(4096)) + [lib.cuCtxSynchronize()]
        assert lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, 1) == 0
        rc, p = alloc(8192)
        host = ctypes.create_string_buffer(8192)
        bad = [lib.cuMemcpyDtoH_v2(host, p + 4096, 8192), lib.cuMemFree_v2(p + 1),
               lib.cuMemsetD8_v2(p + 8192, 0, 1), lib.cuMemAlloc_v2(None, 1), alloc(0)[0]]
        retain, release = lib.cuDevicePrimaryCtxRetain, lib.cuDevicePrimaryCtxRelease_v2
        primary = [retain(ctypes.byref(ctx2), 0), retain(ctypes.byref(ctx2), 0),
                   release(0), release(0), release(0), lib.cuCtxDestroy_v2(ctx2)]
        freed = [lib.cuMemFree_v2(p), lib.cuMemFree_v2(p), lib.cuCtxSynchronize(), lib.cuCtxDestroy_v2(ctx),
                 lib.cuCtxDestroy_v2(ctx), lib.cuCtxSynchronize(), lib.cuCtxSetCurrent(None)]
        bad_dev = [lib.cuDeviceGet(ctypes.byref(dev), 2), lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, 7),
                   lib.cuDeviceGetPCIBusId(buf, 32, 2)]
        codes = (0, 1, 2, 3, 46, 100, 101, 201, 700, 802, 999, 12345)
        names = {rc: [err_name(rc), err_string(rc)] for rc in codes}
        count = n.value if lib.cuDeviceGetCount(ctypes.byref(n)) == 0 else None
        out(before=before, version=version.value, count=count, ids=ids, lookups=lookups, no_ctx=no_ctx,
            alloc=[rc, hex(p)], bad=bad, primary=primary, freed=freed, bad_dev=bad_dev, names=names)
        """,
    )
    assert got["before"] == [3, 0]
    assert got["version"] == 12080
    assert got["count"] == 2
    assert got["ids"] == ["0000:1C:00.0", "0000:C1:00.0"]  # ordinals in the order of the gpu lines
    assert got["lookups"] == {
        "0000:1c:00.0": [0, 0],
        "1C:00.0": [0, 0],
        "00000000:C1:00.0": [0, 1],
        "0000:c1:00": [0, 1],
        "0000:99:00.0": [101, -1],
        "garbage": [101, -1],
        "0000:1c:00.0x": [101, -1],
    }
    assert got["no_ctx"] == [201, 0, 201]
    assert got["alloc"] == [0, "0x302000000"]
    assert got["bad"] == [1, 1, 1, 1, 1]
    assert got["primary"] == [0, 0, 0, 0, 201, 201]
    assert got["freed"] == [0, 1, 0, 0, 201, 201, 0]
    assert got["bad_dev"] == [101, 101, 101]
    names = got["names"]
    assert names["0"] == ["CUDA_SUCCESS", "no error"]
    assert names["2"] == ["CUDA_ERROR_OUT_OF_MEMORY", "out of memory"]
    assert names["46"] == [
        "CUDA_ERROR_DEVICE_UNAVAILABLE",
        "CUDA-capable device(s) is/are busy or unavailable",
    ]
    assert names["201"][0] == "CUDA_ERROR_INVALID_CONTEXT"
    assert names["700"][0] == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert names["802"] == ["CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"]
    assert names["999"] == ["CUDA_ERROR_UNKNOWN", "unknown error"]
    assert names["12345"] == [None, None]


def test_no_state_or_no_gpu_is_no_device(fake_cuda: FakeCuda, tmp_path: Path) -> None:
    env = fake_cuda.env()
    env["FAKE_CUDA_STATE"] = str(tmp_path / "missing")
    code = "n = c_int(); out(init=lib.cuInit(0), count=lib.cuDeviceGetCount(ctypes.byref(n)))"
    assert run_py(env, code) == [{"init": 100, "count": 3}]
    fake_cuda.state.gpus = []
    fake_cuda.write()
    assert run_py(fake_cuda.env(), code) == [{"init": 100, "count": 3}]


def test_slow_steps_take_their_time(fake_cuda: FakeCuda) -> None:
    fake_cuda.state.gpus[0].slow_ms = 300
    fake_cuda.write()
    events = run_py(fake_cuda.env(), "probe(b'0000:17:00.0'); probe(b'0000:18:00.0')")
    first, second = [e for e in events if "step" in e][:11], [e for e in events if "step" in e][11:]
    assert all(e["rc"] == 0 for e in first + second)
    slow = {e["step"]: e["ms"] for e in first}
    for step in ("ctx", "alloc", "memset", "dtoh", "htod", "dtoh2", "free"):
        assert slow[step] >= 290, (step, slow)
    assert slow["destroy"] < 250
    assert slow["count"] < 250
    assert all(e["ms"] < 250 for e in second if e["step"] != "init"), second  # only GPU 0 is slow
    assert [e["match"] for e in events if "match" in e] == [[True, True], [True, True]]


def test_hang_in_ctx_never_returns_and_is_killed(fake_cuda: FakeCuda) -> None:
    fake_cuda.state.gpus[0].hang = "ctx"
    fake_cuda.write()
    with running(fake_cuda.env(), "probe(b'0000:17:00.0')") as child:
        child.wait_for(lambda e: e.get("start") == "ctx")
        with pytest.raises(subprocess.TimeoutExpired):
            child.proc.wait(timeout=1.0)
        assert child.kill() == -9
        assert "ctx" not in rcs(child.events)
        assert rcs(child.events) == {"init": 0, "count": 0, "device": 0}


def test_hang_ends_when_the_state_drops_it(fake_cuda: FakeCuda) -> None:
    fake_cuda.state.gpus[0].hang = "alloc,memcpy"
    fake_cuda.write()
    with running(fake_cuda.env(), "probe(b'0000:17:00.0')") as child:
        child.wait_for(lambda e: e.get("start") == "alloc")
        time.sleep(0.3)
        assert child.proc.poll() is None
        assert "alloc" not in rcs(child.events)
        fake_cuda.state.gpus[0].hang = "memcpy"
        fake_cuda.write()
        assert child.wait_for(lambda e: e.get("step") == "alloc")["rc"] == 0
        child.wait_for(lambda e: e.get("start") == "memset")
        time.sleep(0.3)
        assert "memset" not in rcs(child.events)
        fake_cuda.state.gpus[0].hang = None
        fake_cuda.write()
        assert child.finish() == 0, child.stderr
        assert last(child.events, "match")["match"] == [True, True]


@pytest.mark.parametrize("error", ["802", "SYSTEM_NOT_READY", "CUDA_ERROR_SYSTEM_NOT_READY"])
def test_init_error_system_not_ready(fake_cuda: FakeCuda, error: str) -> None:
    fake_cuda.state.init_error = error
    fake_cuda.write()
    (got,) = run_py(
        fake_cuda.env(),
        """
        rc = lib.cuInit(0)
        n = c_int()
        out(rc=rc, name=err_name(rc), text=err_string(rc), count=lib.cuDeviceGetCount(ctypes.byref(n)))
        """,
    )
    assert got == {
        "rc": 802,
        "name": "CUDA_ERROR_SYSTEM_NOT_READY",
        "text": "system not yet initialized",
        "count": 3,  # a failed cuInit leaves the library uninitialised
    }


def test_hang_in_init_is_killed(fake_cuda: FakeCuda) -> None:
    fake_cuda.state.gpus[5].hang = "init"
    fake_cuda.write()
    with running(fake_cuda.env(), "probe()") as child:
        child.wait_for(lambda e: e.get("start") == "init")
        with pytest.raises(subprocess.TimeoutExpired):
            child.proc.wait(timeout=1.0)
    assert child.proc.returncode == -9
    assert rcs(child.events) == {}


def test_alloc_out_of_memory_and_step_errors(fake_cuda: FakeCuda) -> None:
    gpus = fake_cuda.state.gpus
    gpus[0].total_mib = 64
    gpus[0].ctx_mib = 8
    gpus[1].alloc_error = "DEVICE_UNAVAILABLE"
    gpus[2].ctx_error = 999
    gpus[3].memcpy_error = "CUDA_ERROR_ILLEGAL_ADDRESS"
    fake_cuda.write()
    (got,) = run_py(
        fake_cuda.env(),
        """
        ctx = open_ctx(b"0000:17:00.0")
        big = alloc(64 * 1024 * 1024)[0]
        rc1, p1 = alloc(40 * 1024 * 1024)
        rc2 = alloc(17 * 1024 * 1024)[0]
        rc3 = alloc(16 * 1024 * 1024)[0]
        lib.cuMemFree_v2(p1)
        rc4 = alloc(56 * 1024 * 1024)[0]
        out(oom=[big, rc1, rc2, rc3, rc4], name=err_name(big), huge=alloc(1 << 40)[0])
        """,
    )
    assert got == {"oom": [2, 0, 2, 0, 2], "name": "CUDA_ERROR_OUT_OF_MEMORY", "huge": 2}
    events = run_py(fake_cuda.env(), "probe(b'0000:18:00.0'); probe(b'0000:19:00.0'); probe(b'0000:1a:00.0')")
    steps = [(e["step"], e["rc"]) for e in events if "step" in e]
    assert ("alloc", 46) in steps
    assert ("ctx", 999) in steps
    assert ("memset", 700) in steps
    assert ("htod", 700) in steps
    assert [e["match"] for e in events if "match" in e] == [[False, False]]
    assert steps.count(("free", 0)) == 1


def test_corrupt_read_back_is_detected(fake_cuda: FakeCuda) -> None:
    fake_cuda.state.gpus[0].corrupt = True
    fake_cuda.write()
    events = run_py(fake_cuda.env(), "probe(b'0000:17:00.0', nbytes=65536)")
    assert all(e["rc"] == 0 for e in events if "step" in e)
    assert last(events, "match")["match"] == [False, False]
    (got,) = run_py(
        fake_cuda.env(),
        """
        open_ctx(b"0000:17:00.0")
        rc, p = alloc(1024)
        lib.cuMemsetD8_v2(p, 0, 1024)
        host = ctypes.create_string_buffer(1024)
        lib.cuMemcpyDtoH_v2(host, p, 1024)
        out(diff=[i for i, b in enumerate(host.raw) if b])
        """,
    )
    assert got == {"diff": [512]}


def _exported(lib_dir: Path) -> set[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib_dir / "libcuda.so.1")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split()[-1] for line in out.splitlines() if " T " in line}


V2 = {
    "cuCtxCreate_v2",
    "cuCtxDestroy_v2",
    "cuDevicePrimaryCtxRelease_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemsetD8_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
}


def test_variant_builds_lack_their_symbols(
    fake_cuda: FakeCuda, fake_cuda_lib: Path, fake_cuda_older: Callable[..., Path]
) -> None:
    full = _exported(fake_cuda_lib)
    assert full == V2 | {
        "cuInit",
        "cuDriverGetVersion",
        "cuDeviceGetCount",
        "cuDeviceGet",
        "cuDeviceGetByPCIBusId",
        "cuDeviceGetPCIBusId",
        "cuDeviceGetAttribute",
        "cuCtxCreate",
        "cuCtxDestroy",
        "cuCtxSetCurrent",
        "cuCtxSynchronize",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease",
        "cuGetErrorName",
        "cuGetErrorString",
    }
    old = fake_cuda_older("v2", "pci")
    assert full - _exported(old) == V2 | {"cuDeviceGetByPCIBusId", "cuDeviceGetPCIBusId"}
    foreign = fake_cuda_older("foreign")
    assert _exported(foreign) == {"cuInit"}
    # What a probe needs, and what each build lacks of it; both still initialise.
    code = """
    needed = ["cuInit", "cuDeviceGetByPCIBusId", "cuCtxCreate_v2", "cuCtxCreate", "cuMemAlloc_v2",
              "cuMemcpyDtoH_v2", "cuGetErrorName"]
    out(init=lib.cuInit(0), missing=[name for name in needed if not hasattr(lib, name)])
    """
    (got,) = run_py(fake_cuda_env(old, fake_cuda), code)
    assert got["init"] == 0
    assert got["missing"] == ["cuDeviceGetByPCIBusId", "cuCtxCreate_v2", "cuMemAlloc_v2", "cuMemcpyDtoH_v2"]
    assert run_py(fake_cuda_env(foreign, fake_cuda), code) == [
        {
            "init": 0,
            "missing": [
                "cuDeviceGetByPCIBusId",
                "cuCtxCreate_v2",
                "cuCtxCreate",
                "cuMemAlloc_v2",
                "cuMemcpyDtoH_v2",
                "cuGetErrorName",
            ],
        }
    ]


def fake_cuda_env(lib_dir: Path, fake: FakeCuda) -> dict[str, str]:
    """The fixture's environment with another build of the library."""
    env = fake.env()
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    return env


def _nvml_memory(fake_nvml: FakeNvml, index: int = 0) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import json, pynvml
                pynvml.nvmlInit()
                h = pynvml.nvmlDeviceGetHandleByIndex({index})
                m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                print(json.dumps({{"used_mib": m.used // {MIB},
                                   "procs": [[p.pid, p.usedGpuMemory // {MIB}] for p in procs]}}))
                """
            ),
        ],
        env=fake_nvml.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(proc.stdout)


def test_allocations_show_in_fake_nvml(fake_cuda: FakeCuda, fake_nvml: FakeNvml) -> None:
    fake_cuda.state.show_in_nvml(fake_nvml.state_path)
    fake_cuda.state.gpus[0].ctx_mib = 300
    fake_cuda.state.gpus[1].nvml_gpu = 6
    fake_cuda.write()
    original = fake_nvml.state_path.read_text()
    code = """
    ctx = open_ctx(b"0000:17:00.0")
    rc, p = alloc(64 * 1024 * 1024 + 1)
    rc2, p2 = alloc(1024)
    out(step="alloc", rc=[rc, rc2])
    sys.stdin.readline()
    out(step="free", rc=lib.cuMemFree_v2(p))
    sys.stdin.readline()
    ctx2 = c_void_p()
    assert lib.cuCtxCreate_v2(ctypes.byref(ctx2), 0, 1) == 0
    out(step="other", rc=alloc(2 * 1024 * 1024)[0])
    sys.stdin.readline()
    """
    with running(fake_cuda.env(fake_nvml.env()), code) as child:
        pid = child.proc.pid
        assert child.wait_for(lambda e: e.get("step") == "alloc")["rc"] == [0, 0]
        assert fake_nvml.state_path.read_text() == original + f"holder 0 {pid} 365\n"
        assert _nvml_memory(fake_nvml) == {"used_mib": 3 + 365, "procs": [[pid, 365]]}
        child.send()
        assert child.wait_for(lambda e: e.get("step") == "free")["rc"] == 0
        assert fake_nvml.state_path.read_text() == original + f"holder 0 {pid} 301\n"
        assert _nvml_memory(fake_nvml) == {"used_mib": 3 + 301, "procs": [[pid, 301]]}
        child.send()
        assert child.wait_for(lambda e: e.get("step") == "other")["rc"] == 0
        assert fake_nvml.state_path.read_text() == original + f"holder 0 {pid} 301\nholder 6 {pid} 2\n"
        assert _nvml_memory(fake_nvml, 6)["procs"] == [[pid, 2]]
        child.send()
        assert child.finish() == 0, child.stderr
    # A normal exit takes the lines away, the rest of the file as it was.
    assert fake_nvml.state_path.read_text() == original
    assert _nvml_memory(fake_nvml) == {"used_mib": 3, "procs": []}


def test_killed_child_leaves_a_dead_holder_line(fake_cuda: FakeCuda, fake_nvml: FakeNvml) -> None:
    fake_cuda.state.show_in_nvml(fake_nvml.state_path)
    fake_cuda.state.gpus[0].hang = "memcpy"
    fake_cuda.write()
    original = fake_nvml.state_path.read_text()
    with running(fake_cuda.env(fake_nvml.env()), "probe(b'0000:17:00.0', nbytes=8 * 1024 * 1024)") as child:
        pid = child.proc.pid
        child.wait_for(lambda e: e.get("start") == "memset")
        assert _nvml_memory(fake_nvml)["procs"] == [[pid, 8]]
    assert fake_nvml.state_path.read_text() == original + f"holder 0 {pid} 8\n"
    assert _nvml_memory(fake_nvml) == {"used_mib": 3, "procs": []}


def test_build_fails_loudly_without_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(RuntimeError, match="fakecuda"):
        build(tmp_path / "out")
    with pytest.raises(ValueError, match="unknown symbol groups"):
        build(tmp_path / "out", omit=("v3",))


def test_state_renders_and_rejects_unrenderable_values(tmp_path: Path) -> None:
    state = FakeCudaState(
        init_error="SYSTEM_NOT_READY",
        gpus=[FakeCudaGpu(hang="ctx", slow_ms=5, corrupt=True), FakeCudaGpu(index=7, nvml_state="/a b/s")],
    )
    assert state.render() == (
        "driver_version 12080\ninit_error SYSTEM_NOT_READY\n"
        "gpu 0 hang=ctx slow_ms=5 corrupt=1\n"
        'gpu 7 nvml_state="/a b/s"\n'
    )
    bad = FakeCudaState(gpus=[FakeCudaGpu(pci='bad "pci"')])
    with pytest.raises(ValueError, match="cannot be written"):
        bad.write(tmp_path / "s")
    assert list(tmp_path.iterdir()) == []
