"""GPU figures through NVML (pynvml), every call bounded by a deadline."""

from __future__ import annotations

import functools
import time

from gputui.agent.calls import CallTimeout, Worker
from gputui.agent.gpu import fitness, nvmlapi
from gputui.agent.gpu.limits import NVML_DEADLINE_S, PROCESS_UTIL_INTERVAL_S, TELEMETRY_INTERVAL_S
from gputui.agent.gpu.nvmlapi import (
    NvmlVersions,
    nvml_count_v1,
    nvml_error_text,
    nvml_function_missing,
    nvml_handle_v1,
    nvml_is_lost,
    nvml_library_missing,
    nvml_memory_v1,
    nvml_memory_v2,
    nvml_mig_devices,
    nvml_pci_bus_id,
    nvml_processes_v1,
    nvml_text,
    nvml_unreachable,
    pynvml_call,
)
from gputui.agent.gpu.process_util import read_process_util
from gputui.agent.proc.figures import PROCESS_UTIL_KEY
from gputui.agent.protocol import (
    GPU_MEMORY_UNREPORTED,
    GPU_TIMEOUTS_IN_ROW,
    GPU_UNREACHABLE,
    MODE_NVML,
    UNREACHABLE_TIMED_OUT,
)
from gputui.agent.wire import MIB

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

NVML_INIT_DEADLINE_S = 5.0
NVML_INIT_RETRY_S = 5.0
"""A failed nvmlInit (no driver yet) is retried at most this often."""


def _memory_not_reported(exc: BaseException) -> bool:
    """Whether a memory info call failed with NOT_SUPPORTED: the GPU has no memory of its own to report."""
    nv = nvmlapi.pynvml
    code = getattr(exc, "value", None) if nv is not None and isinstance(exc, nv.NVMLError) else None
    return code is not None and code == getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3)


class NvmlBackend:
    """GPU figures through pynvml, every call bounded by a deadline.

    All devices are queried one after another on one batch worker thread: one thread hand-off per sample,
    which keeps a memory-only sample cheap. A device whose call overran the deadline is isolated: the
    stuck batch thread becomes that device's own worker (it reports "NVML call timed out" until the call
    returns) and a fresh batch thread serves the others, so one wedged GPU never blocks the rest.
    """

    mode = MODE_NVML

    def __init__(
        self, deadline_s: float = NVML_DEADLINE_S, telemetry_interval_s: float = TELEMETRY_INTERVAL_S
    ) -> None:
        self.deadline_s = deadline_s
        self.telemetry_interval_s = float(telemetry_interval_s)
        self.bindings = nvmlapi.bindings_origin()
        """Where pynvml comes from: "installed" on the host or "bundled" with the collector."""
        self.host_error: str | None = None
        self.driver_version: str | None = None
        self.cuda_driver_version: str | None = None
        self.library_missing = False
        """The last initialisation failed because the NVML library itself cannot be loaded."""
        self._system = Worker("gputui-nvml-system")
        self._batch = Worker("gputui-nvml-batch")
        self._workers: list[Worker | None] = []
        self._handles: list[Any] = []
        self._static: list[dict[str, Any] | None] = []
        self._memory: list[NvmlVersions] = []
        self._memory_jobs: list[Callable[[], dict[str, Any]]] = []
        self._base: list[dict[str, Any] | None] = []
        self._telemetry: list[dict[str, Any] | None] = []
        self._telemetry_mono = -1e18
        self._timeouts_in_row: list[int] = []
        self.process_util_interval_s = PROCESS_UTIL_INTERVAL_S
        self._util_mono: list[float] = []
        self._util_since_us: list[int] = []
        self._initialized = False
        self._last_init_try = -1e18
        self.reads_fitness = True
        """``poll`` takes ``want_fitness`` (``fitness.read_gpu_fitness`` in each device job)."""
        self._xid_events: Any = None
        # Every versioned call, newest version first (drivers before R510 lack the _v3 process lists and v2
        # memory info; older ones the _v2 calls too).
        self._count = NvmlVersions("nvmlDeviceGetCount", pynvml_call("nvmlDeviceGetCount"), nvml_count_v1)
        self._handle = NvmlVersions(
            "nvmlDeviceGetHandleByIndex", pynvml_call("nvmlDeviceGetHandleByIndex"), nvml_handle_v1
        )
        self._pci_bus_id = NvmlVersions(
            "nvmlDeviceGetPciInfo",
            lambda handle: pynvml_call("nvmlDeviceGetPciInfo_v3")(handle).busId,
            nvml_pci_bus_id("nvmlDeviceGetPciInfo_v2"),
            nvml_pci_bus_id("nvmlDeviceGetPciInfo"),
        )
        self._process_lists: list[tuple[str, NvmlVersions]] = [
            (
                kind,
                NvmlVersions(
                    name, pynvml_call(name + "_v3"), pynvml_call(name + "_v2"), nvml_processes_v1(name)
                ),
            )
            for kind, name in (
                ("compute", "nvmlDeviceGetComputeRunningProcesses"),
                ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
            )
        ]

    def start(self) -> None:
        """Initialise NVML now (bounded) instead of at the first sample."""
        if not self._initialized:
            self._init()

    def _init(self) -> None:
        nv = nvmlapi.pynvml
        if nv is None:
            raise RuntimeError("pynvml is not importable")

        def init() -> tuple[list[Any], str | None, str | None]:
            self._close_events()
            nv.nvmlInit()
            count = self._count()
            handles: list[Any] = []
            for index in range(count):
                try:
                    handles.append(self._handle(index))
                except Exception as exc:  # that GPU shows the error, the others still work
                    handles.append(exc)
            try:
                driver = nvml_text(nv.nvmlSystemGetDriverVersion)
            except nv.NVMLError:
                driver = None
            try:
                cuda_int = nv.nvmlSystemGetCudaDriverVersion()
                cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"
            except nv.NVMLError:
                cuda = None
            self._xid_events = fitness.XidEvents()
            return handles, driver, cuda

        self._last_init_try = time.monotonic()
        try:
            handles, driver, cuda = self._system.call(init, NVML_INIT_DEADLINE_S)
        except CallTimeout:
            self.host_error = "NVML initialisation timed out"
            return
        except Exception as exc:
            self.host_error = nvml_error_text(exc)
            self.library_missing = nvml_library_missing(exc)
            return
        self.host_error = None
        self.library_missing = False
        self.driver_version = driver
        self.cuda_driver_version = cuda
        self._handles = handles
        # A device gets a worker of its own only once one of its calls overran (see the class docstring).
        self._workers = [None] * len(handles)
        self._static = [None] * len(handles)
        # Per GPU: v2 memory info (reserved memory apart) until it fails once, then v1 (older drivers).
        self._memory = [
            NvmlVersions("nvmlDeviceGetMemoryInfo", nvml_memory_v2, nvml_memory_v1, sticky=True)
            for _handle in handles
        ]
        self._memory_jobs = [self._memory_job(index) for index in range(len(handles))]
        # Per GPU: index, static facts and the latest telemetry, the part a memory-only sample reuses.
        self._base = [None] * len(handles)
        self._telemetry = [None] * len(handles)
        self._telemetry_mono = -1e18
        self._util_mono = [-1e18] * len(handles)
        self._util_since_us = [0] * len(handles)
        self._timeouts_in_row = [0] * len(handles)
        self._initialized = True

    def _device_job(
        self,
        index: int,
        want_static: bool,
        want_processes: bool,
        want_telemetry: bool = True,
        want_fitness: bool = False,
        want_util: bool = False,
    ) -> Callable[[], dict[str, Any]]:
        nv = nvmlapi.pynvml
        if nv is None:
            raise RuntimeError("pynvml is not importable")
        handle = self._handles[index]

        def optional(fn: Callable[[], Any]) -> Any:
            """A figure this GPU (or driver) may not give: None instead of an error, except for a lost GPU."""
            try:
                return fn()
            except Exception as exc:
                if nvml_is_lost(exc):
                    raise
                if isinstance(exc, nv.NVMLError) or nvml_function_missing(exc):
                    return None
                raise

        def job() -> dict[str, Any]:
            if isinstance(handle, BaseException):
                raise handle
            out: dict[str, Any] = {}
            if want_static:
                out["static"] = {
                    "name": optional(lambda: nvml_text(lambda: nv.nvmlDeviceGetName(handle))),
                    "uuid": optional(lambda: nvml_text(lambda: nv.nvmlDeviceGetUUID(handle))),
                    "pci_bus_id": optional(lambda: nvml_text(lambda: self._pci_bus_id(handle))),
                }
            out.update(self._read_memory(index, handle))
            if want_telemetry:
                rates = optional(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
                temperature = optional(
                    lambda: int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
                )
                power = optional(lambda: nv.nvmlDeviceGetPowerUsage(handle))
                limit = optional(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
                out["telemetry"] = {
                    "utilization_pct": None if rates is None else int(rates.gpu),
                    "memory_utilization_pct": None if rates is None else int(rates.memory),
                    "temperature_c": temperature,
                    "power_w": None if power is None else power / 1000.0,
                    # With the telemetry, not the static facts: `nvidia-smi -pl` changes it at run time.
                    "power_limit_w": None if limit is None else limit / 1000.0,
                }
            if want_processes:
                procs: list[dict[str, Any]] = []
                for kind, process_list in self._process_lists:
                    listed: list[Any] | None = optional(functools.partial(process_list, handle))
                    for info in listed or ():
                        used = getattr(info, "usedGpuMemory", None)
                        procs.append(
                            {
                                "pid": int(info.pid),
                                "used_mib": None if used is None else int(used) // MIB,
                                "type": kind,
                            }
                        )
                out["processes"] = procs
            if want_fitness:
                out["health"] = fitness.read_gpu_fitness(handle)
                if self._xid_events is not None:
                    self._xid_events.register(index, handle)
            if want_util:
                out[PROCESS_UTIL_KEY] = self._process_util(index, handle)
            return out

        return job

    def _process_util(self, index: int, handle: Any) -> list[dict[str, Any]] | None:
        """The per-process samples of one GPU since its last read (worker thread); None: not supported."""
        since_us = self._util_since_us[index] or int((time.time() - self.process_util_interval_s) * 1e6)
        read = read_process_util(handle, since_us)
        if read is None:
            return None
        rows, newest_us = read
        if newest_us is not None:
            self._util_since_us[index] = newest_us
        return rows

    def _read_memory(self, index: int, handle: Any) -> dict[str, Any]:
        """One GPU's memory figures (runs on a worker thread; raises NVMLError).

        A GPU whose driver answers NOT_SUPPORTED has no memory of its own to report (unified memory, e.g.
        GB10): its figures are None with ``GPU_MEMORY_UNREPORTED``, not an error, and it is judged by its
        processes.
        """
        if isinstance(handle, BaseException):
            raise handle
        try:
            used, total, reserved = self._memory[index](handle)
        except Exception as exc:
            if not _memory_not_reported(exc):
                raise
            return {
                "memory_used_mib": None,
                "memory_total_mib": None,
                "memory_reserved_mib": None,
                GPU_MEMORY_UNREPORTED: True,
            }
        return {
            "memory_used_mib": int(used) // MIB,
            "memory_total_mib": int(total) // MIB,
            "memory_reserved_mib": None if reserved is None else int(reserved) // MIB,
        }

    def _memory_job(self, index: int) -> Callable[[], dict[str, Any]]:
        """The job of a memory-only sample for one GPU, made once per initialisation."""
        handle = self._handles[index]
        return lambda: self._read_memory(index, handle)

    def poll(self, want_processes: bool, want_fitness: bool = False) -> list[dict[str, Any]]:
        """One sample of every GPU: a list of Gpu dicts (``processes`` only when ``want_processes``, the
        ``fitness`` figures only when ``want_fitness``)."""
        if not self._initialized:
            if time.monotonic() - self._last_init_try >= NVML_INIT_RETRY_S:
                self._init()
            if not self._initialized:
                return []
        now_mono = time.monotonic()
        deadline = now_mono + self.deadline_s
        want_telemetry = want_processes or now_mono - self._telemetry_mono >= self.telemetry_interval_s
        if want_telemetry:
            self._telemetry_mono = now_mono
        pending: dict[int, Any] = {}
        batch_jobs: list[tuple[int, Callable[[], Any]]] = []
        for index, worker in enumerate(self._workers):
            # Name, uuid and PCI address do not change while NVML stays initialised: read once (again with
            # the process lists while the uuid is unknown).
            static = self._static[index]
            want_static = static is None or (want_processes and not static.get("uuid"))
            want_util = want_processes and now_mono - self._util_mono[index] >= self.process_util_interval_s
            if want_util:
                self._util_mono[index] = now_mono
            if want_static or want_processes or want_telemetry or want_fitness:
                job = self._device_job(
                    index, want_static, want_processes, want_telemetry, want_fitness, want_util
                )
            else:
                job = self._memory_jobs[index]
            if worker is None:
                batch_jobs.append((index, job))
                continue
            try:
                pending[index] = worker.submit(job)
            except CallTimeout as exc:
                pending[index] = exc
        if batch_jobs:
            pending.update(self._run_batch(batch_jobs, deadline))
        gpus: list[dict[str, Any]] = []
        for index in range(len(self._workers)):
            submitted = pending[index]
            try:
                if isinstance(submitted, BaseException):
                    raise submitted
                if isinstance(submitted, dict):
                    out = submitted
                else:
                    out = Worker.result(submitted[0], submitted[1], deadline)
            except Exception as exc:
                gpu: dict[str, Any] = {"index": index}
                gpu.update(self._static[index] or {})
                gpu["error"] = nvml_error_text(exc)
                unreachable = nvml_unreachable(exc)
                if unreachable is not None:
                    gpu[GPU_UNREACHABLE] = unreachable
                timed_out = unreachable == UNREACHABLE_TIMED_OUT
                self._timeouts_in_row[index] = self._timeouts_in_row[index] + 1 if timed_out else 0
                if timed_out:
                    gpu[GPU_TIMEOUTS_IN_ROW] = self._timeouts_in_row[index]
                if want_processes:
                    gpu["processes"] = []
                gpus.append(gpu)
                continue
            self._timeouts_in_row[index] = 0
            base = self._base[index]
            static_new = None
            if "static" in out or "telemetry" in out or base is None:
                static_new = out.pop("static", None)
                if static_new is not None and (self._static[index] is None or static_new.get("uuid")):
                    self._static[index] = static_new
                if "telemetry" in out:
                    self._telemetry[index] = out.pop("telemetry")
                base = {"index": index}
                base.update(self._static[index] or {})
                base.update(self._telemetry[index] or {})
                self._base[index] = base
            gpu = dict(base)
            if static_new is not None:  # this sample's own reading, even one not kept (no uuid)
                gpu.update(static_new)
            gpu.update(out)
            gpus.append(gpu)
        return gpus

    def _run_batch(self, jobs: list[tuple[int, Callable[[], Any]]], deadline: float) -> dict[int, Any]:
        """Run device jobs one after another on the batch worker, each round bounded by a deadline.

        A round that overruns isolates the device it is stuck in (see the class docstring); the devices
        after it get a fresh round, so only the first overrun of each wedged device costs extra time.

        Returns:
            index -> the job's result dict, or the exception it raised (CallTimeout for a device whose call
            overran or could not be started).
        """
        out: dict[int, Any] = {}
        remaining = list(jobs)
        while remaining:
            results: dict[int, Any] = {}
            progress: dict[str, Any] = {"current": None, "cancelled": False}

            # Defaults bind this round's lists: a stuck round from before must not see the next one's.
            def batch(todo: list = remaining, results: dict = results, progress: dict = progress) -> None:
                for index, job in todo:
                    if progress["cancelled"]:
                        return
                    progress["current"] = index
                    try:
                        results[index] = job()
                    except Exception as exc:
                        results[index] = exc
                progress["current"] = None

            try:
                done, _box = self._batch.submit(batch)
            except CallTimeout as exc:
                out.update((index, exc) for index, _job in remaining)
                break
            finished = done.wait(max(0.0, deadline - time.monotonic()))
            if not finished:
                progress["cancelled"] = True
            out.update(results)
            if finished:
                break
            culprit = progress["current"]
            if culprit is None or culprit in results:
                self._batch.stop()  # it overran between calls: nothing is stuck, the rest waits a sample
                self._batch = Worker("gputui-nvml-batch")
                break
            # The batch thread is stuck inside this device's call: it becomes that device's worker.
            self._workers[culprit] = self._batch
            self._batch = Worker("gputui-nvml-batch")
            out[culprit] = CallTimeout()
            remaining = [(index, job) for index, job in remaining if index not in out]
            deadline = time.monotonic() + self.deadline_s
        for index, _job in jobs:
            out.setdefault(index, CallTimeout())
        return out

    def mig_devices(self) -> dict[int, list[dict[str, Any]] | str]:
        """The MIG devices of each GPU in MIG mode (``nvmlapi.nvml_mig_devices``, each with the pids NVML
        lists on it), by GPU index; for a GPU whose MIG devices cannot be read, why (text); at -1, why none
        could be read (which GPUs are in MIG mode is unknown). A GPU not in MIG mode, or not readable at all,
        is not in it. Read on the system worker, bounded by the deadline."""
        if not self._initialized:
            return {}

        def pids(mig: Any) -> list[int]:
            found: list[int] = []
            for _kind, process_list in self._process_lists:
                found.extend(int(info.pid) for info in process_list(mig) or ())
            return found

        def read() -> dict[int, list[dict[str, Any]] | str]:
            out: dict[int, list[dict[str, Any]] | str] = {}
            for index, handle in enumerate(self._handles):
                if isinstance(handle, BaseException) or self._workers[index] is not None:
                    continue  # unreadable, or its own worker is stuck in a call: the sample says so
                try:
                    devices = nvml_mig_devices(handle, pids)
                except Exception as exc:
                    out[index] = nvml_error_text(exc)
                    continue
                if devices is not None:
                    out[index] = devices
            return out

        try:
            return self._system.call(read, self.deadline_s * max(1, len(self._handles)))
        except Exception as exc:
            return {-1: nvml_error_text(exc)}  # whether any GPU is in MIG mode is unknown

    def take_events(self) -> list[tuple[int, int, int]]:
        """The Xid and recovery-action events NVML delivered since the last call (``XidEvents.take``;
        bounded, never waits for one)."""
        events = self._xid_events
        if not self._initialized or events is None:
            return []
        try:
            return self._system.call(events.take, self.deadline_s)
        except Exception:
            return []

    def _close_events(self) -> None:
        if self._xid_events is not None:
            self._xid_events.close()
            self._xid_events = None

    def close(self) -> None:
        nv = nvmlapi.pynvml
        workers = [w for w in self._workers if w is not None] + [self._batch, self._system]
        stuck = any(w.stuck for w in workers)
        if self._initialized and nv is not None and not stuck:
            try:
                self._system.call(self._close_events, 1.0)
            except Exception:  # noqa: S110 - shutting down: nothing left to report to
                pass
            try:
                self._system.call(nv.nvmlShutdown, 1.0)
            except Exception:  # noqa: S110 - shutting down: nothing left to report to
                pass
        for worker in self._workers:
            if worker is not None:
                worker.stop()
        self._batch.stop()
        self._system.stop()
        self._initialized = False
