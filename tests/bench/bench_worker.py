"""Measurement workers for ``run_bench.py``; each runs in its own process and prints one JSON line.

The harness starts this file as a script (``python tests/bench/bench_worker.py KIND ...``) with
``LD_LIBRARY_PATH``/``FAKE_NVML_STATE`` pointing at the fake NVML, so every figure is the CPU time of exactly
the code being measured and nothing of the harness. Only the standard library is imported at module level:
the peer workers run under the throwaway peers virtualenv's interpreter, which has no gputui.

CPU figures come from ``time.process_time()`` (user + system CPU of the whole process, all threads) deltas
divided by the number of samples taken; wall figures from ``time.perf_counter()``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# Audit events Python raises whenever this process starts another program or forks.
SPAWN_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
        "os.exec",
        "os.startfile",
        "pty.spawn",
    }
)


class SpawnCounter:
    """Counts process creations of this process via ``sys.addaudithook`` (Python 3.8+).

    Every way CPython offers to create a process (fork, posix_spawn, subprocess, os.system, exec) raises an
    audit event before it happens, so the count is exact for Python code; C libraries that fork on their own
    are caught by the strace cross-check in ``run_bench.py``.
    """

    def __init__(self) -> None:
        self.events: list[str] = []
        self.armed = False
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if self.armed and event in SPAWN_EVENTS:
            self.events.append(event)


def _children_cpu_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def track_missing_nvml_symbols() -> list[str]:
    """Record every NVML entry point a client asked for that the loaded library lacks.

    pynvml resolves C symbols lazily through ``_nvmlGetFunctionPointer`` (module global, looked up at call
    time), and clients such as nvitop swallow the resulting FUNCTION_NOT_FOUND as "N/A": wrapping it is the
    only way to name the symbol a peer missed on the fake library.
    """
    import pynvml

    missing: list[str] = []
    original = pynvml._nvmlGetFunctionPointer

    def lookup(name):  # type: ignore[no-untyped-def]
        try:
            return original(name)
        except pynvml.NVMLError as exc:
            if exc.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND and name not in missing:
                missing.append(name)
            raise

    pynvml._nvmlGetFunctionPointer = lookup
    return missing


def _emit(result: dict) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def _timed_loop(fn, samples: int, warmup: int) -> dict:
    for _ in range(warmup):
        fn()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(samples):
        fn()
    cpu1, wall1 = time.process_time(), time.perf_counter()
    return {
        "cpu_ms": (cpu1 - cpu0) * 1000.0 / samples,
        "wall_ms": (wall1 - wall0) * 1000.0 / samples,
        "samples": samples,
    }


# --- gputui's collector --------------------------------------------------------------------------------


def work_agent(args: argparse.Namespace) -> dict:
    """CPU per full sample and per memory-only sample of gputui.agent.collector.Agent, plus spawn counts."""
    sys.path.insert(0, str(REPO_ROOT))
    counter = SpawnCounter()
    from gputui.agent.collector import Agent

    agent = Agent(
        target="local", read_only=True, memory_interval_s=1.0, process_interval_s=1e9, discover_health=False
    )
    try:
        hello = agent.hello()
        counter.armed = True
        children_cpu0 = _children_cpu_s()
        threads0 = threading.active_count()
        full_snapshots: list[dict] = []

        def full() -> None:
            full_snapshots.append(agent.sample(force_processes=True))
            del full_snapshots[:-1]

        full_result = _timed_loop(full, args.samples, warmup=3)
        last_full = full_snapshots[-1]
        processes_time_full = last_full.get("processes_time")

        mem_snapshots: list[dict] = []

        def memory_only() -> None:
            mem_snapshots.append(agent.sample())
            del mem_snapshots[:-1]

        mem_result = _timed_loop(memory_only, args.samples * 4, warmup=3)
        last_mem = mem_snapshots[-1]

        # The sample the agent takes every second at rest: memory plus utilisation/temperature/power.
        backend = agent.backend
        telemetry_result = None
        if hasattr(backend, "telemetry_interval_s"):
            telemetry_interval_s, backend.telemetry_interval_s = backend.telemetry_interval_s, 0.0
            telemetry_result = _timed_loop(memory_only, args.samples * 4, warmup=3)
            backend.telemetry_interval_s = telemetry_interval_s

        # Process samples on the agent's own schedule: whole-host sweeps every Nth, GPU trees between.
        agent.process_interval_s = 0.0
        interval_result = _timed_loop(memory_only, args.samples, warmup=3)
        agent.process_interval_s = 1e9
        counter.armed = False
        return {
            "mode": hello.get("mode"),
            "full": full_result,
            "memory": mem_result,
            "memory_telemetry": telemetry_result,
            "interval_process": interval_result,
            "full_sweep_every": getattr(agent, "full_sweep_every", None),
            # The memory-only loop must not have refreshed the process list (else it measured full samples).
            "memory_only_refreshed_processes": last_mem.get("processes_time") != processes_time_full,
            "processes_listed": len(last_full.get("processes") or ()),
            "gpus": len(last_full.get("gpus") or ()),
            "gpu_processes": sum(len(g.get("processes") or ()) for g in last_full.get("gpus") or ()),
            "spawn_events": counter.events,
            "children_cpu_s": _children_cpu_s() - children_cpu0,
            "threads_added": threading.active_count() - threads0,
        }
    finally:
        agent.close()


def work_cadence(args: argparse.Namespace) -> dict:
    """How often the agent refreshes the process list, at rest and while memory drains.

    Samples every ``memory_interval_s`` on the agent's own schedule (as ``serve`` does), records each
    distinct ``processes_time``; at ``--drain-at`` seconds the harness-given holder pid is killed so memory
    starts to drain, which is when a clean-slate check wants process lists quickly.
    """
    sys.path.insert(0, str(REPO_ROOT))
    import signal

    from gputui.agent.collector import Agent

    defaults = Agent(target="local", read_only=True, discover_health=False)
    default_intervals = (defaults.memory_interval_s, defaults.process_interval_s)
    defaults.close()
    agent = Agent(
        target="local",
        read_only=True,
        memory_interval_s=args.memory_interval,
        process_interval_s=args.process_interval,
        discover_health=False,
    )
    records: list[tuple[float, float | None, int | None]] = []
    killed_at: float | None = None
    try:
        start = time.monotonic()
        while time.monotonic() - start < args.duration:
            now = time.monotonic()
            if killed_at is None and args.holder_pid and now - start >= args.drain_at:
                os.kill(args.holder_pid, signal.SIGKILL)
                killed_at = now - start
            snap = agent.sample()
            used = sum((g.get("memory_used_mib") or 0) for g in snap.get("gpus") or ())
            records.append((now - start, snap.get("processes_time"), used))
            time.sleep(max(0.0, args.memory_interval - (time.monotonic() - now)))
    finally:
        agent.close()
    return {
        "default_memory_interval_s": default_intervals[0],
        "default_process_interval_s": default_intervals[1],
        "records": records,
        "killed_at": killed_at,
    }


# --- peers ---------------------------------------------------------------------------------------------


def work_pynvml(args: argparse.Namespace) -> dict:
    """The floor: a bare pynvml loop of memory info + compute and graphics process lists per GPU."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

        def full() -> None:
            for handle in handles:
                pynvml.nvmlDeviceGetMemoryInfo(handle)
                pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)

        def memory_only() -> None:
            for handle in handles:
                pynvml.nvmlDeviceGetMemoryInfo(handle)

        return {
            "full": _timed_loop(full, args.samples * 4, warmup=3),
            "memory": _timed_loop(memory_only, args.samples * 4, warmup=3),
            "gpus": len(handles),
        }
    finally:
        pynvml.nvmlShutdown()


def work_nvitop(args: argparse.Namespace) -> dict:
    """nvitop's API: a full snapshot of every device and its processes plus host figures, per loop turn."""
    missing = track_missing_nvml_symbols()
    from nvitop import Device, GpuProcess, host

    counts: list[int] = []

    def snapshot() -> None:
        devices = Device.all()
        processes = 0
        for device in devices:
            device.as_snapshot()
            procs = device.processes()
            GpuProcess.take_snapshots(procs.values(), failsafe=True)
            processes += len(procs)
        host.cpu_percent()
        host.virtual_memory()
        host.swap_memory()
        counts.append(processes)
        del counts[:-1]

    result = _timed_loop(snapshot, args.samples, warmup=3)
    return {"full": result, "gpu_processes": counts[-1], "missing_symbols": missing}


def work_gpustat_once(args: argparse.Namespace) -> dict:
    """One ``gpustat --json`` in this process, to name the NVML symbols it missed (not timed)."""
    import contextlib
    import io

    missing = track_missing_nvml_symbols()
    from gpustat import main as gpustat_main

    out = io.StringIO()
    sys.argv = ["gpustat", "--json"]
    with contextlib.redirect_stdout(out):
        try:
            gpustat_main()
        except SystemExit:
            pass
    data = json.loads(out.getvalue())
    return {"missing_symbols": missing, "gpus": len(data["gpus"])}


def work_gpustat(args: argparse.Namespace) -> dict:
    """``gpustat --json`` one-shot: CPU of each whole child process via getrusage(RUSAGE_CHILDREN)."""
    import resource
    import subprocess

    exe = str(Path(sys.executable).with_name("gpustat"))
    cpu_ms: list[float] = []
    wall_ms: list[float] = []
    processes = 0
    for _ in range(args.samples):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall0 = time.perf_counter()
        out = subprocess.run([exe, "--json"], capture_output=True, check=True, timeout=120).stdout
        wall_ms.append((time.perf_counter() - wall0) * 1000.0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_ms.append(((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000.0)
        data = json.loads(out)
        processes = sum(len(g.get("processes") or ()) for g in data["gpus"])
    cpu_ms.sort()
    wall_ms.sort()
    return {
        "full": {
            "cpu_ms": cpu_ms[len(cpu_ms) // 2],
            "wall_ms": wall_ms[len(wall_ms) // 2],
            "samples": args.samples,
        },
        "gpu_processes": processes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("agent", "cadence", "pynvml", "nvitop", "gpustat", "gpustat_once"))
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--memory-interval", type=float, default=0.2)
    parser.add_argument("--process-interval", type=float, default=1.0)
    parser.add_argument("--drain-at", type=float, default=3.0)
    parser.add_argument("--holder-pid", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        result = globals()["work_" + args.kind](args)
    except Exception as exc:  # the harness prints n/a with this one line
        _emit({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    _emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
