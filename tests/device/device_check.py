"""The device check: gputui against one real NVIDIA GPU, reading only, every figure printed and kept.

Run by ``run_device_check.sh`` (which installs gputui from the wheels carried with the tree); never by the
suite. What it does, each step bounded, the whole within ``--budget`` seconds:

1. records what this driver returns for each GPU-health query gputui makes (the raw NVML answer or error,
   and the call's time), what gputui's own ``read_gpu_fitness`` makes of it, whether an NVML event set takes
   critical Xids, and what the kernel log gives (``/dev/kmsg``, else ``dmesg``, else why not);
2. times the collector: memory-only samples, forced samples, health rounds;
3. allocates GPU memory in a child of its own through the CUDA driver API (``ctypes`` on ``libcuda.so.1``:
   ``cuInit``, ``cuDeviceGet``, ``cuCtxCreate``, ``cuMemAlloc``), watches ``gputui snapshot --json`` until
   it shows the child on its GPU, runs ``gputui check`` (expected: not clean, the child named), kills the
   child with ``gputui kill`` (its own child, in a session of its own, nothing else), and times
   ``gputui check --wait`` until the clean slate (or NOT READY, with the GPU's reasons);
4. prints the figures and writes them to ``<out>/device-report.json``.

It only reads the GPUs: no reset, no persistence-mode change, no MIG change, no clock or power setting.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HOLD_MIB = 4096
REPORT: dict[str, Any] = {"steps": {}}
DEADLINE = [0.0]


def left_s() -> float:
    return DEADLINE[0] - time.monotonic()


def say(text: str) -> None:
    print(text, flush=True)


def step(name: str, value: Any) -> None:
    REPORT["steps"][name] = value


# -- the child that holds GPU memory ---------------------------------------------------------------------


def hold(mib: int) -> int:
    """Allocate ``mib`` MiB on CUDA device 0 through the driver API, say so on stdout, wait to be killed."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        print(json.dumps({"error": f"libcuda.so.1: {exc}"}), flush=True)
        return 3

    def check(what: str, ret: int) -> None:
        if ret != 0:
            print(json.dumps({"error": f"{what} returned CUresult {ret}"}), flush=True)
            raise SystemExit(3)

    check("cuInit", cuda.cuInit(0))
    device = ctypes.c_int(0)
    check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), 0))
    context = ctypes.c_void_p()
    create = getattr(cuda, "cuCtxCreate_v2", None) or cuda.cuCtxCreate
    check("cuCtxCreate", create(ctypes.byref(context), 0, device))
    pointer = ctypes.c_uint64()
    alloc = getattr(cuda, "cuMemAlloc_v2", None) or cuda.cuMemAlloc
    check("cuMemAlloc", alloc(ctypes.byref(pointer), ctypes.c_size_t(mib << 20)))
    print(json.dumps({"pid": os.getpid(), "mib": mib, "pointer": pointer.value}), flush=True)
    while True:
        time.sleep(1.0)


# -- step 1: the raw health queries ----------------------------------------------------------------------


def timed(fn: Any) -> dict[str, Any]:
    """{"value" or "error", "ms"} of one call."""
    start = time.perf_counter()
    try:
        value = fn()
        out: dict[str, Any] = {
            "value": value if isinstance(value, (int, float, str, list, bool)) else repr(value)
        }
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}", "code": getattr(exc, "value", None)}
    out["ms"] = round((time.perf_counter() - start) * 1000, 3)
    return out


def _field_230(pynvml: Any, handle: Any) -> list[Any]:
    """What the driver answers for its recovery action (NVML field 230): [nvmlReturn, valueType, uiVal]."""
    (value,) = pynvml.nvmlDeviceGetFieldValues(handle, [230])
    return [int(value.nvmlReturn), int(value.valueType), int(value.value.uiVal)]


def _fabric(pynvml: Any, handle: Any) -> list[Any]:
    """The NVLink fabric registration as the driver answers it: [state, status, healthMask] (read only)."""
    import ctypes

    info = pynvml.c_nvmlGpuFabricInfo_v2_t()
    pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    return [int(info.state) & 0xFF, int(info.status), int(info.healthMask)]


def raw_queries() -> None:
    import pynvml

    from gputui.agent.gpu.fitness import XidEvents, read_gpu_fitness

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        driver = pynvml.nvmlSystemGetDriverVersion()
        REPORT["driver"] = driver if isinstance(driver, str) else driver.decode()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = []
        for index, handle in enumerate(handles):
            queries = {
                "name": timed(lambda h=handle: pynvml.nvmlDeviceGetName(h)),
                "pci_bus_id": timed(lambda h=handle: str(pynvml.nvmlDeviceGetPciInfo_v3(h).busId)),
                "remapped_rows": timed(lambda h=handle: list(pynvml.nvmlDeviceGetRemappedRows(h))),
                "retired_pages_pending": timed(
                    lambda h=handle: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h)
                ),
                "ecc_mode": timed(lambda h=handle: list(pynvml.nvmlDeviceGetEccMode(h))),
                "ecc_uncorrected_volatile": timed(
                    lambda h=handle: pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 0)
                ),
                "ecc_uncorrected_aggregate": timed(
                    lambda h=handle: pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 1)
                ),
                "ecc_corrected_volatile": timed(lambda h=handle: pynvml.nvmlDeviceGetTotalEccErrors(h, 0, 0)),
                "clocks_event_reasons": timed(
                    lambda h=handle: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
                ),
                "clocks_throttle_reasons": timed(
                    lambda h=handle: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
                ),
                "persistence_mode": timed(lambda h=handle: pynvml.nvmlDeviceGetPersistenceMode(h)),
                "supported_event_types": timed(lambda h=handle: pynvml.nvmlDeviceGetSupportedEventTypes(h)),
                "mig_mode": timed(lambda h=handle: list(pynvml.nvmlDeviceGetMigMode(h))),
                "recovery_action_field_230": timed(lambda h=handle: _field_230(pynvml, h)),
                "fabric_info": timed(lambda h=handle: _fabric(pynvml, h)),
            }
            health = timed(lambda h=handle: read_gpu_fitness(h))
            gpus.append({"index": index, "queries": queries, "gputui_read_gpu_fitness": health})
        events_start = time.perf_counter()
        events = XidEvents()
        for index, handle in enumerate(handles):
            events.register(index, handle)
        made_ms = (time.perf_counter() - events_start) * 1000
        take = timed(events.take)
        events.close()
        step(
            "nvml_health",
            {
                "gpus": gpus,
                "xid_event_set": {
                    "registered_gpus": events.registered,
                    "create_and_register_ms": round(made_ms, 3),
                    "take": take,
                },
            },
        )
    finally:
        pynvml.nvmlShutdown()
    for gpu in REPORT["steps"]["nvml_health"]["gpus"]:
        q = gpu["queries"]
        say(
            f"GPU{gpu['index']} {q['name'].get('value')} {q['pci_bus_id'].get('value')}: "
            + ", ".join(
                f"{k}={v.get('value', v.get('error'))} ({v['ms']} ms)"
                for k, v in q.items()
                if k not in ("name", "pci_bus_id")
            )
        )
        say(f"  gputui read_gpu_fitness: {gpu['gputui_read_gpu_fitness']}")
    say(f"NVML Xid event set: {REPORT['steps']['nvml_health']['xid_event_set']}")


def kernel_log() -> None:
    from gputui.agent.gpu.xid import TEST_SOURCE_ENV, KernelLog
    from gputui.agent.pci import pci_text

    os.environ.pop(TEST_SOURCE_ENV, None)  # the machine's own kernel log, read only
    log = KernelLog()
    start = time.perf_counter()
    log.read()
    first_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    log.read()
    again_ms = (time.perf_counter() - start) * 1000
    events = [dict(e, pci=pci_text(e["pci"])) for e in log.events[-20:]]
    log.close()
    step(
        "kernel_log",
        {
            "source": log.source,
            "error": log.error,
            "xids": len(log.events),
            "last": events,
            "driver_load_time": log.driver_load_time,
            "first_read_ms": round(first_ms, 3),
            "incremental_read_ms": round(again_ms, 3),
        },
    )
    say(
        f"kernel log: source={log.source} error={log.error} xids={len(log.events)} "
        f"first read {first_ms:.1f} ms, next {again_ms:.1f} ms"
    )


# -- step 2: collector timing --------------------------------------------------------------------------


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    if not values:
        return {}
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values) * 1000, 3),
        "p95_ms": round(values[min(len(values) - 1, int(len(values) * 0.95))] * 1000, 3),
        "max_ms": round(values[-1] * 1000, 3),
    }


def collector_timing() -> None:
    from gputui.agent.collector import Agent

    start = time.perf_counter()
    agent = Agent(discover_health=False)
    startup_s = time.perf_counter() - start
    try:
        first = time.perf_counter()
        agent.sample(force_processes=True)
        first_s = time.perf_counter() - first
        memory, forced, health = [], [], []
        for _ in range(50):
            t = time.perf_counter()
            agent.sample()
            memory.append(time.perf_counter() - t)
        for _ in range(10):
            t = time.perf_counter()
            agent.sample(force_processes=True)
            forced.append(time.perf_counter() - t)
        backend = agent._backend
        for _ in range(10):
            t = time.perf_counter()
            backend.poll(False, True) if getattr(backend, "reads_fitness", False) else backend.poll(False)
            health.append(time.perf_counter() - t)
        cpu = os.times()
        figures = {
            "mode": agent.mode,
            "startup_ms": round(startup_s * 1000, 3),
            "first_forced_sample_ms": round(first_s * 1000, 3),
            "memory_sample": percentiles(memory),
            "forced_sample": percentiles(forced),
            "nvml_poll_with_health": percentiles(health),
            "process_cpu_s": round(cpu.user + cpu.system, 3),
        }
    finally:
        agent.close()
    step("collector_timing", figures)
    say(f"collector: {json.dumps(figures)}")


# -- step 3: allocate, see, kill, clean slate ---------------------------------------------------------


def gputui(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own CLI, fixed words and our child's pid
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=max(5.0, min(timeout_s, left_s() - 5)),
        check=False,
        env=ENV,
    )


ENV: dict[str, str] = {}


def allocate_and_clean(hold_mib: int) -> None:
    start = time.monotonic()
    child = subprocess.Popen(  # noqa: S603 - this script, holding memory
        [sys.executable, __file__, "--hold", str(hold_mib)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a job of its own: gputui kill takes it alone
        env=ENV,
    )
    result: dict[str, Any] = {"hold_mib": hold_mib}
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        said = json.loads(line) if line.strip() else {"error": "the allocator said nothing"}
        if "error" in said:
            result["error"] = said["error"]
            say(f"allocation failed: {said['error']}")
            return
        pid = said["pid"]
        result["allocated_s"] = round(time.monotonic() - start, 3)
        seen_s = None
        seen_mib = None
        while left_s() > 30:
            done = gputui("snapshot", "--json", "--no-discover", timeout_s=30)
            if done.returncode == 0:
                host = json.loads(done.stdout)["hosts"][0]
                for gpu in host["gpus"]:
                    for proc in gpu.get("processes") or ():
                        if proc["pid"] == pid and (proc.get("used_mib") or 0) >= hold_mib:
                            seen_s, seen_mib = time.monotonic() - start, proc["used_mib"]
                            result["gpu"] = gpu["index"]
                            result["health_while_held"] = gpu.get("health")
                            result["kernel_log_note"] = host.get("kernel_log")
            if seen_s is not None:
                break
            time.sleep(0.5)
        result["seen_by_snapshot_s"] = None if seen_s is None else round(seen_s, 3)
        result["seen_mib"] = seen_mib
        held = gputui("check", "--no-discover", timeout_s=60)
        result["check_while_held"] = {
            "rc": held.returncode,
            "stdout": held.stdout[-3000:],
            "stderr": held.stderr[-1000:],
        }
        say(
            f"allocated {hold_mib} MiB in pid {pid}; seen by snapshot after {result['seen_by_snapshot_s']} s "
            f"({seen_mib} MiB); check while held: exit {held.returncode}"
        )
        with tempfile.TemporaryDirectory() as state:
            kill_env = dict(ENV, XDG_STATE_HOME=state)
            kill_start = time.monotonic()
            killed = subprocess.run(  # noqa: S603 - our own CLI on our own child
                [sys.executable, "-m", "gputui.cli", "kill", "--yes", "--no-discover", str(pid)],
                capture_output=True,
                text=True,
                timeout=max(5.0, min(60.0, left_s() - 5)),
                check=False,
                env=kill_env,
            )
            result["kill"] = {
                "rc": killed.returncode,
                "s": round(time.monotonic() - kill_start, 3),
                "stdout": killed.stdout[-3000:],
                "stderr": killed.stderr[-1000:],
            }
        say(f"gputui kill: exit {killed.returncode} in {result['kill']['s']} s")
        clean_start = time.monotonic()
        clean = gputui("check", "--wait", "60", "--no-discover", timeout_s=90)
        result["check_wait"] = {
            "rc": clean.returncode,
            "s": round(time.monotonic() - clean_start, 3),
            "stdout": clean.stdout[-3000:],
            "stderr": clean.stderr[-1000:],
        }
        say(
            f"gputui check --wait 60 after the kill: exit {clean.returncode} in {result['check_wait']['s']} s"
        )
        say(clean.stdout.rstrip())
        after = gputui("snapshot", "--json", "--no-discover", timeout_s=30)
        if after.returncode == 0:
            host = json.loads(after.stdout)["hosts"][0]
            result["health_after"] = [g.get("health") for g in host["gpus"]]
            result["verdict_after"] = host.get("verdict")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)  # our own child's session, if gputui kill did not end it
        child.wait(timeout=10)
        step("allocate_kill_clean", result)


def probe() -> None:
    """The readiness probe as ``check --probe`` runs it, on every GPU: each step's time, the first context
    creation included (the figure to quote), and whether NVML listed the allocation."""
    result = subprocess.run(
        [sys.executable, "-m", "gputui.cli", "check", "--probe", "--json", "--no-discover"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=max(30.0, min(120.0, left_s() - 10)),
        check=False,
    )
    step("probe_exit", result.returncode)
    try:
        host = json.loads(result.stdout)["hosts"][0]
    except (ValueError, KeyError, IndexError):
        step("probe_error", (result.stdout + result.stderr)[-2000:])
        return
    step("probe", host.get("probe"))
    for gpu in (host.get("probe") or {}).get("gpus") or []:
        steps = ", ".join(f"{s['step']} {s.get('ms')} ms" for s in gpu.get("steps") or [])
        say(
            f"  probe GPU{gpu.get('index')}: {gpu.get('result')} ({steps});"
            f" NVML listed it: {gpu.get('visible')}"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=os.environ.get("OUT") or ".")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for the whole check")
    parser.add_argument("--hold-mib", type=int, default=HOLD_MIB)
    args = parser.parse_args()
    if args.hold is not None:
        return hold(args.hold)
    DEADLINE[0] = time.monotonic() + args.budget
    ENV.update(os.environ)
    ENV.pop("GPUTUI_TEST_KERNEL_LOG", None)
    REPORT["python"] = sys.version.split()[0]
    REPORT["started"] = time.time()
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)  # noqa: S607
        REPORT["nvidia_smi_L"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        REPORT["nvidia_smi_L"] = f"{type(exc).__name__}: {exc}"
    say(REPORT["nvidia_smi_L"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    for name, fn in (
        ("nvml_health", raw_queries),
        ("kernel_log", kernel_log),
        ("collector_timing", collector_timing),
        ("allocate_kill_clean", lambda: allocate_and_clean(args.hold_mib)),
        ("probe", probe),
    ):
        if left_s() < 20:
            step(name, {"skipped": "out of time"})
            continue
        try:
            fn()
        except Exception as exc:  # every step reports; one failing does not stop the others
            step(name + "_error", f"{type(exc).__name__}: {exc}")
            say(f"{name}: {type(exc).__name__}: {exc}")
            status = 1
        (out / "device-report.json").write_text(json.dumps(REPORT, indent=1, default=repr))
    REPORT["elapsed_s"] = round(time.time() - REPORT["started"], 3)
    (out / "device-report.json").write_text(json.dumps(REPORT, indent=1, default=repr))
    say(f"report: {out / 'device-report.json'} ({REPORT['elapsed_s']} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
