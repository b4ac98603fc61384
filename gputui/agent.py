"""The collector: GPU figures, the process trees that hold GPU memory, and the kill executor.

One stdlib-only file that runs in-process for the local host (``gputui/transports/local.py``) and is shipped
verbatim over SSH for remote hosts, where it runs under whatever ``python3`` is there (3.8 or newer) with
nothing installed. It uses pynvml and psutil when they are importable; without pynvml it reads a long-lived
``nvidia-smi --query-gpu=... -lms N`` process; without psutil it reads /proc directly.

Remote form: ``python3 -u -c '<exec of this source>' ARGS``; after the source, stdin carries JSON-line
commands and stdout carries JSON-line messages (``hello``, ``snapshot``, ``reply``). See ``serve()``.

Errors are data: a missing driver, a lost GPU or a hung NVML call become an ``error`` string on the host or on
that GPU; every NVML call runs on a per-device worker thread with a deadline, so one stuck device never stalls
the snapshot stream. Nothing here ever builds a shell command line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pwd
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

try:  # NVIDIA's bindings (nvidia-ml-py); the library itself is only loaded by nvmlInit.
    import pynvml as _pynvml
except Exception:  # pragma: no cover - depends on the host
    _pynvml = None

try:
    import psutil as _psutil
except Exception:  # pragma: no cover - depends on the host
    _psutil = None  # type: ignore[assignment]

AGENT_VERSION = "0.1.0"
PROTOCOL_VERSION = 1

MIB = 1024 * 1024
NVML_DEADLINE_S = 2.0
"""Seconds every device's NVML calls of one sample may take before that device is reported as timed out."""
NVML_INIT_DEADLINE_S = 5.0
NVML_INIT_RETRY_S = 5.0
"""A failed nvmlInit (no driver yet) is retried at most this often."""
GHOST_SLACK_MIB = 64
"""Used memory may exceed the sum of listed processes by this much before /dev/nvidia* holders are scanned."""
CMDLINE_CACHE_S = 10.0
"""Cached cmdlines are re-read after this long: servers rename themselves (setproctitle) after start."""
KILL_CONFIRM_S = 2.0
"""After an escalated KILL, how long to wait for the process to disappear before reporting it."""
SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "KILL": signal.SIGKILL}
SMI_QUERY_GPU = (
    "index,name,uuid,pci.bus_id,memory.used,memory.total,"
    "utilization.gpu,temperature.gpu,power.draw,power.limit"
)
SMI_QUERY_APPS = "gpu_uuid,pid,used_memory"
SMI_DEADLINE_S = 5.0

try:
    CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):  # pragma: no cover - non-Linux
    CLOCK_TICKS_PER_S = 100


# ----------------------------------------------------------------------------------------------------
# /proc


def _text(data: bytes) -> str:
    """Bytes from the kernel as text; undecodable bytes stay visible as escapes (JSON-safe, no surrogates)."""
    return data.decode("utf-8", "backslashreplace")


def _clean(value: Optional[str]) -> Optional[str]:
    """A str that may carry surrogate escapes (psutil) as JSON-safe text."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class ProcStat(object):
    """The fields of /proc/<pid>/stat the collector needs."""

    __slots__ = ("pid", "name", "state", "ppid", "pgrp", "session", "start_ticks", "rss_pages")

    def __init__(self, pid, name, state, ppid, pgrp, session, start_ticks, rss_pages):
        # type: (int, str, str, int, int, int, int, int) -> None
        self.pid = pid
        self.name = name
        self.state = state
        self.ppid = ppid
        self.pgrp = pgrp
        self.session = session
        self.start_ticks = start_ticks
        self.rss_pages = rss_pages


def parse_stat(pid: int, data: bytes) -> Optional[ProcStat]:
    """Parse the contents of /proc/<pid>/stat.

    The command name (field 2) is in parentheses and may itself contain ``) `` or spaces, so the fields are
    split after the LAST ``)``.

    Returns:
        The parsed fields, or None when the text is malformed.
    """
    text = _text(data)
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 0 or close_at < open_at:
        return None
    rest = text[close_at + 1 :].split()
    if len(rest) < 22:
        return None
    try:
        return ProcStat(
            pid=pid,
            name=text[open_at + 1 : close_at],
            state=rest[0],
            ppid=int(rest[1]),
            pgrp=int(rest[2]),
            session=int(rest[3]),
            start_ticks=int(rest[19]),  # field 22 (rest[0] is field 3)
            rss_pages=int(rest[21]),  # field 24
        )
    except ValueError:
        return None


def read_stat(pid: int) -> Optional[ProcStat]:
    """/proc/<pid>/stat parsed, or None when the process does not exist (or cannot be read)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return parse_stat(pid, data)


def scan_proc() -> Dict[int, ProcStat]:
    """One pass over /proc/[0-9]*/stat: every process on the host (threads are not listed)."""
    table = {}  # type: Dict[int, ProcStat]
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        stat = read_stat(int(name))
        if stat is not None:
            table[stat.pid] = stat
    return table


def read_cmdline(pid: int) -> Optional[List[str]]:
    """The argv list of a process; [] for kernel threads and zombies, None when it cannot be read."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if not data:
        return []
    if data.endswith(b"\0"):
        data = data[:-1]
    return [_text(part) for part in data.split(b"\0")]


def read_real_uid(pid: int) -> Optional[int]:
    """The real uid of a process (the ``Uid:`` line of /proc/<pid>/status), as psutil reports it."""
    try:
        with open("/proc/%d/status" % pid, "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def read_boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def read_boot_time() -> Optional[float]:
    """Epoch seconds of the boot (``btime`` in /proc/stat)."""
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


INIT_PID_NAMESPACE_INODE = 0xEFFFFFFC
"""The inode of the initial PID namespace (PROC_PID_INIT_INO in the kernel)."""


def in_child_pid_namespace() -> bool:
    """Whether this process lives in a PID namespace other than the host's (a container without host pids).

    There the driver's pids may belong to other namespaces, and a local process with the same number may be
    an unrelated one.
    """
    try:
        return os.stat("/proc/self/ns/pid").st_ino != INIT_PID_NAMESPACE_INODE
    except OSError:
        return False


def has_nvidia_device_open(pid: int) -> bool:
    """Whether ``pid`` has a /dev/nvidia* node open (False when its fds cannot be read)."""
    fd_dir = "/proc/%d/fd" % pid
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd_dir + "/" + fd).startswith("/dev/nvidia"):
                return True
        except OSError:
            continue
    return False


def ancestors_of(pid: int, table: Optional[Dict[int, ProcStat]] = None) -> List[int]:
    """The parent chain of ``pid`` up to pid 1 (excluding ``pid`` itself), from ``table`` or live /proc."""
    chain = []  # type: List[int]
    seen = {pid}
    current = pid
    while True:
        stat = table.get(current) if table is not None else read_stat(current)
        if stat is None or stat.ppid <= 0 or stat.ppid in seen:
            return chain
        chain.append(stat.ppid)
        seen.add(stat.ppid)
        current = stat.ppid


def children_map(table: Dict[int, ProcStat]) -> Dict[int, List[int]]:
    children = {}  # type: Dict[int, List[int]]
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    return children


def scan_device_holders(table: Dict[int, ProcStat]) -> List[Dict[str, Any]]:
    """Processes with a /dev/nvidia* node open: one entry per (pid, device node)."""
    holders = []  # type: List[Dict[str, Any]]
    for pid in sorted(table):
        fd_dir = "/proc/%d/fd" % pid
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        devices = set()  # type: Set[str]
        for fd in fds:
            try:
                link = os.readlink(fd_dir + "/" + fd)
            except OSError:
                continue
            if link.startswith("/dev/nvidia"):
                devices.add(link)
        for device in sorted(devices):
            holders.append({"pid": pid, "name": table[pid].name, "device": device})
    return holders


class _ProcDetails(object):
    """Per-process details (user, cmdline, rss) with caches, from /proc or psutil."""

    def __init__(self, use_psutil: bool) -> None:
        self.use_psutil = bool(use_psutil and _psutil is not None)
        self._users = {}  # type: Dict[int, Optional[str]]
        self._cmdlines = {}  # type: Dict[Tuple[int, int], Tuple[float, List[str]]]

    def user_name(self, uid: Optional[int]) -> Optional[str]:
        if uid is None:
            return None
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except (KeyError, OverflowError):
                self._users[uid] = str(uid)
        return self._users[uid]

    def details(self, stat: ProcStat, now: float) -> Dict[str, Any]:
        """uid, user, cmdline and rss_kib of one process (None for what could not be read)."""
        uid = None  # type: Optional[int]
        user = None  # type: Optional[str]
        cmdline = None  # type: Optional[List[str]]
        rss_kib = None  # type: Optional[int]
        key = (stat.pid, stat.start_ticks)
        cached = self._cmdlines.get(key)
        if cached is not None and now - cached[0] < CMDLINE_CACHE_S:
            cmdline = cached[1]
        if self.use_psutil:
            try:
                proc = _psutil.Process(stat.pid)
                with proc.oneshot():
                    uid = proc.uids().real
                    try:
                        user = _clean(proc.username())
                    except (KeyError, _psutil.Error):
                        user = None
                    if cmdline is None:
                        try:
                            cmdline = [_clean(a) or "" for a in proc.cmdline()]
                        except _psutil.ZombieProcess:
                            cmdline = []
                    try:
                        rss_kib = proc.memory_info().rss // 1024
                    except _psutil.Error:
                        rss_kib = None
            except _psutil.Error:
                pass
        else:
            uid = read_real_uid(stat.pid)
            if cmdline is None:
                cmdline = read_cmdline(stat.pid)
            rss_kib = stat.rss_pages * (_PAGE_SIZE // 1024)
        if user is None:
            user = self.user_name(uid)
        if cmdline is not None and (cached is None or cached[1] is not cmdline):
            self._cmdlines[key] = (now, cmdline)
        return {"uid": uid, "user": user, "cmdline": cmdline or [], "rss_kib": rss_kib}

    def forget_except(self, live: Set[Tuple[int, int]]) -> None:
        for key in [k for k in self._cmdlines if k not in live]:
            del self._cmdlines[key]


try:
    _PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # pragma: no cover - non-Linux
    _PAGE_SIZE = 4096


# ----------------------------------------------------------------------------------------------------
# Bounded calls


class CallTimeout(Exception):
    """A call did not finish within its deadline (it may still be running on its worker)."""


class _Worker(object):
    """One daemon thread that runs calls for one device, so a hung call blocks only that device."""

    def __init__(self, name: str) -> None:
        self._jobs = queue.Queue()  # type: queue.Queue
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def stuck(self) -> bool:
        """Whether an earlier call is still running (it timed out and has not returned yet)."""
        return self._busy.is_set()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: B036 - handed to the caller
                box.append((False, exc))
            finally:
                self._busy.clear()
                done.set()

    def submit(self, fn: Callable[[], Any]) -> Tuple[threading.Event, list]:
        """Start ``fn``; returns (done event, result box).

        Raises:
            CallTimeout: the worker is still stuck in an earlier call.
        """
        if self._busy.is_set():
            raise CallTimeout()
        box = []  # type: list
        done = threading.Event()
        self._busy.set()
        self._jobs.put((fn, box, done))
        return done, box

    @staticmethod
    def result(done: threading.Event, box: list, deadline: float) -> Any:
        """Wait until ``deadline`` (monotonic) for a submitted call; re-raises its exception."""
        if not done.wait(max(0.0, deadline - time.monotonic())):
            raise CallTimeout()
        ok, value = box[0]
        if ok:
            return value
        raise value

    def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        done, box = self.submit(fn)
        return self.result(done, box, time.monotonic() + timeout_s)

    def stop(self) -> None:
        self._jobs.put(None)


# ----------------------------------------------------------------------------------------------------
# NVML backend


def nvml_error_text(exc: BaseException) -> str:
    """A readable one-line description of an NVML failure."""
    if _pynvml is not None and isinstance(exc, _pynvml.NVMLError):
        code = getattr(exc, "value", None)
        known = {
            getattr(_pynvml, "NVML_ERROR_GPU_IS_LOST", -1): "GPU is lost",
            getattr(_pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1): "NVIDIA driver not loaded",
            getattr(_pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1): "libnvidia-ml.so.1 not found",
            getattr(
                _pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", -1
            ): "NVML function not found (driver too old?)",
            getattr(_pynvml, "NVML_ERROR_NO_PERMISSION", -1): "no permission to use NVML",
            getattr(_pynvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", -1): (
                "NVML library and kernel driver versions do not match (reboot or reload the driver)"
            ),
            getattr(_pynvml, "NVML_ERROR_TIMEOUT", -1): "NVML call timed out",
        }
        if code in known:
            return known[code]
        try:
            return "NVML error: %s" % exc
        except Exception:
            return "NVML error %s" % code
    if isinstance(exc, CallTimeout):
        return "NVML call timed out"
    return "%s: %s" % (type(exc).__name__, exc)


def _as_str(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return _text(value)
    return _clean(str(value))


class _NvmlBackend(object):
    """GPU figures through pynvml, every call bounded by a per-device worker thread."""

    mode = "nvml"

    def __init__(self, deadline_s: float = NVML_DEADLINE_S) -> None:
        self.deadline_s = deadline_s
        self.host_error = None  # type: Optional[str]
        self.driver_version = None  # type: Optional[str]
        self.cuda_driver_version = None  # type: Optional[str]
        self._system = _Worker("gputui-nvml-system")
        self._workers = []  # type: List[_Worker]
        self._handles = []  # type: List[Any]
        self._static = []  # type: List[Optional[Dict[str, Any]]]
        self._memory_v2 = []  # type: List[bool]
        self._initialized = False
        self._last_init_try = -1e18

    def start(self) -> None:
        """Initialise NVML now (bounded) instead of at the first sample."""
        if not self._initialized:
            self._init()

    def _init(self) -> None:
        nv = _pynvml
        if nv is None:
            raise RuntimeError("pynvml is not importable")

        def init() -> Tuple[List[Any], Optional[str], Optional[str]]:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
            handles = []  # type: List[Any]
            for index in range(count):
                try:
                    handles.append(nv.nvmlDeviceGetHandleByIndex(index))
                except nv.NVMLError as exc:
                    handles.append(exc)
            try:
                driver = _as_str(nv.nvmlSystemGetDriverVersion())
            except nv.NVMLError:
                driver = None
            try:
                cuda_int = nv.nvmlSystemGetCudaDriverVersion()
                cuda = "%d.%d" % (cuda_int // 1000, (cuda_int % 1000) // 10)
            except nv.NVMLError:
                cuda = None
            return handles, driver, cuda

        self._last_init_try = time.monotonic()
        try:
            handles, driver, cuda = self._system.call(init, NVML_INIT_DEADLINE_S)
        except CallTimeout:
            self.host_error = "NVML initialisation timed out"
            return
        except Exception as exc:
            self.host_error = nvml_error_text(exc)
            return
        self.host_error = None
        self.driver_version = driver
        self.cuda_driver_version = cuda
        self._handles = handles
        self._workers = [_Worker("gputui-nvml-gpu%d" % i) for i in range(len(handles))]
        self._static = [None] * len(handles)
        self._memory_v2 = [True] * len(handles)
        self._initialized = True

    def _device_job(
        self, index: int, want_static: bool, want_processes: bool
    ) -> Callable[[], Dict[str, Any]]:
        nv = _pynvml
        if nv is None:
            raise RuntimeError("pynvml is not importable")
        handle = self._handles[index]

        def optional(fn: Callable[[], Any]) -> Any:
            """A figure this GPU may not support: None instead of an error, except for a lost GPU."""
            try:
                return fn()
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_GPU_IS_LOST", -1):
                    raise
                return None

        def job() -> Dict[str, Any]:
            if isinstance(handle, BaseException):
                raise handle
            out = {}  # type: Dict[str, Any]
            if want_static:
                pci = optional(lambda: nv.nvmlDeviceGetPciInfo(handle))
                out["static"] = {
                    "name": _as_str(optional(lambda: nv.nvmlDeviceGetName(handle))),
                    "uuid": _as_str(optional(lambda: nv.nvmlDeviceGetUUID(handle))),
                    "pci_bus_id": None if pci is None else _as_str(getattr(pci, "busId", None)),
                }
                limit = optional(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
                out["power_limit_w"] = None if limit is None else limit / 1000.0
            memory = None
            reserved = None
            if self._memory_v2[index] and hasattr(nv, "nvmlMemory_v2"):
                try:
                    memory = nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2)
                    reserved = int(memory.reserved) // MIB
                except nv.NVMLError as exc:
                    if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_GPU_IS_LOST", -1):
                        raise
                    self._memory_v2[index] = False  # v1 from now on for this GPU (old driver)
                    memory = None
            if memory is None:
                memory = nv.nvmlDeviceGetMemoryInfo(handle)
            out["memory_used_mib"] = int(memory.used) // MIB
            out["memory_total_mib"] = int(memory.total) // MIB
            out["memory_reserved_mib"] = reserved
            rates = optional(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
            out["utilization_pct"] = None if rates is None else int(rates.gpu)
            out["memory_utilization_pct"] = None if rates is None else int(rates.memory)
            out["temperature_c"] = optional(
                lambda: int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
            )
            power = optional(lambda: nv.nvmlDeviceGetPowerUsage(handle))
            out["power_w"] = None if power is None else power / 1000.0
            if want_processes:
                procs = []  # type: List[Dict[str, Any]]
                for kind, getters in (
                    (
                        "compute",
                        ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"),
                    ),
                    (
                        "graphics",
                        ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2"),
                    ),
                ):
                    listed = None
                    for getter in getters:
                        fn = getattr(nv, getter, None)
                        if fn is None:
                            continue
                        try:
                            listed = fn(handle)
                            break
                        except nv.NVMLError as exc:
                            if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_GPU_IS_LOST", -1):
                                raise
                            continue
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
            return out

        return job

    def poll(self, want_processes: bool) -> List[Dict[str, Any]]:
        """One sample of every GPU: a list of Gpu dicts (``processes`` only when ``want_processes``)."""
        if not self._initialized:
            if time.monotonic() - self._last_init_try >= NVML_INIT_RETRY_S:
                self._init()
            if not self._initialized:
                return []
        deadline = time.monotonic() + self.deadline_s
        pending = []  # type: List[Tuple[int, Any]]
        for index, worker in enumerate(self._workers):
            want_static = self._static[index] is None or want_processes
            try:
                pending.append((index, worker.submit(self._device_job(index, want_static, want_processes))))
            except CallTimeout as exc:
                pending.append((index, exc))
        gpus = []  # type: List[Dict[str, Any]]
        for index, submitted in pending:
            gpu = {"index": index}  # type: Dict[str, Any]
            static = self._static[index]
            if static is not None:
                gpu.update(static)
            try:
                if isinstance(submitted, BaseException):
                    raise submitted
                out = _Worker.result(submitted[0], submitted[1], deadline)
            except Exception as exc:
                gpu["error"] = nvml_error_text(exc)
                if want_processes:
                    gpu["processes"] = []
                gpus.append(gpu)
                continue
            if "static" in out:
                static_new = out.pop("static")
                if self._static[index] is None or static_new.get("uuid"):
                    self._static[index] = static_new
                gpu.update(static_new)
            gpu.update(out)
            gpus.append(gpu)
        return gpus

    def close(self) -> None:
        nv = _pynvml
        stuck = any(w.stuck for w in self._workers) or self._system.stuck
        if self._initialized and nv is not None and not stuck:
            try:
                self._system.call(nv.nvmlShutdown, 1.0)
            except Exception:  # noqa: S110 - shutting down: nothing left to report to
                pass
        for worker in self._workers:
            worker.stop()
        self._system.stop()
        self._initialized = False


# ----------------------------------------------------------------------------------------------------
# nvidia-smi backend

SMI_MISSING = ("N/A", "ERR!", "")
SMI_GPU_FIELDS = 10
SMI_BAD_MEMORY = ("[Unknown Error]", "ERR!", "[GPU is lost]")
_PCI_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_HANDLE_ERROR = re.compile(
    r"device handle for GPU ?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:?\s*(.*)"
)


def _split_csv(line: str) -> List[str]:
    """Fields of one nvidia-smi CSV line (honours double quotes; strips blanks around fields)."""
    fields = []  # type: List[str]
    current = []  # type: List[str]
    quoted = False
    i = 0
    while i < len(line):
        char = line[i]
        if quoted:
            if char == '"':
                if i + 1 < len(line) and line[i + 1] == '"':
                    current.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                current.append(char)
        elif char == '"' and not "".join(current).strip():
            current = []
            quoted = True
        elif char == ",":
            fields.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        i += 1
    fields.append("".join(current).strip())
    return fields


def _smi_value(text: str) -> Optional[str]:
    """A field's text, or None for nvidia-smi's "no value" forms ([N/A], [Not Supported], ERR!, "")."""
    text = text.strip()
    if text in SMI_MISSING or (text.startswith("[") and text.endswith("]")):
        return None
    return text


def _smi_number(text: str) -> Optional[float]:
    value = _smi_value(text)
    if value is None:
        return None
    for suffix in ("MiB", "%", "W", "C"):  # units, should nvidia-smi print them despite nounits
        if value.endswith(suffix):
            value = value[: -len(suffix)].strip()
            break
    try:
        number = float(value)
    except ValueError:
        return None
    if math.isnan(number) or math.isinf(number):
        return None
    return number


def _smi_int(text: str) -> Optional[int]:
    number = _smi_number(text)
    if number is None or abs(number) > 2**53:
        return None
    return int(number)


def _smi_float(text: str) -> Optional[float]:
    return _smi_number(text)


def _regroup_name(fields: List[str]) -> List[str]:
    """Undo the split of an unquoted name containing commas: find where the uuid/PCI fields start again."""
    for start in range(3, len(fields) - 1):
        uuid, pci = fields[start], fields[start + 1]
        if uuid.startswith(("GPU-", "MIG-")) or _PCI_BUS_ID.match(pci):
            if len(fields) - start + 2 >= SMI_GPU_FIELDS:
                return [fields[0], ", ".join(fields[1:start])] + fields[start:]
    return fields


def parse_smi_gpu_line(line: str) -> Optional[Dict[str, Any]]:
    """One line of ``nvidia-smi --query-gpu=<SMI_QUERY_GPU> --format=csv,noheader,nounits``.

    Unreadable values ([N/A], [Not Supported], ERR!, empty) become None; a name containing commas is put
    back together; extra trailing columns are ignored; a GPU whose memory figures cannot be read carries an
    ``error``. Never raises.

    Returns:
        A Gpu dict, or None for a header, blank or otherwise unusable line (no index).
    """
    line = line.strip("\r\n")
    if not line.strip():
        return None
    fields = _split_csv(line)
    index = _smi_int(fields[0]) if fields else None
    if index is None or index < 0 or index > 4095 or not fields[0].strip().isdigit():
        return None
    gpu = {"index": index}  # type: Dict[str, Any]
    if len(fields) < SMI_GPU_FIELDS:
        gpu["error"] = "nvidia-smi printed %d of %d fields" % (len(fields), SMI_GPU_FIELDS)
        return gpu
    if len(fields) > SMI_GPU_FIELDS:
        fields = _regroup_name(fields)[:SMI_GPU_FIELDS]
    gpu["name"] = _smi_value(fields[1])
    gpu["uuid"] = _smi_value(fields[2])
    gpu["pci_bus_id"] = _smi_value(fields[3])
    gpu["memory_used_mib"] = _smi_int(fields[4])
    gpu["memory_total_mib"] = _smi_int(fields[5])
    gpu["memory_reserved_mib"] = None
    gpu["utilization_pct"] = _smi_int(fields[6])
    gpu["temperature_c"] = _smi_int(fields[7])
    gpu["power_w"] = _smi_float(fields[8])
    gpu["power_limit_w"] = _smi_float(fields[9])
    if gpu["memory_used_mib"] is None:
        raw = fields[4].strip()
        if raw in SMI_BAD_MEMORY or raw == "":
            gpu["error"] = "nvidia-smi: memory.used is %s" % (raw or "empty")
        else:
            gpu["error"] = "nvidia-smi: memory.used not available (%s)" % (raw[:40],)
    return gpu


def _pci_key(bus_id: str) -> str:
    """A PCI bus id in one spelling: nvidia-smi writes the domain with 8 digits in CSV, 4 in messages."""
    domain, _, rest = bus_id.partition(":")
    try:
        return "%08X:%s" % (int(domain, 16), rest.upper())
    except ValueError:
        return bus_id.upper()


def parse_smi_handle_error(line: str) -> Optional[Tuple[str, str]]:
    """``Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost...`` -> (bus id, reason)."""
    match = _HANDLE_ERROR.search(line)
    if match is None:
        return None
    reason = match.group(2).strip().rstrip(".") or "unreachable"
    if "is lost" in reason:
        reason = "GPU is lost"
    return _pci_key(match.group(1)), reason


def parse_smi_gpu_output(text: str) -> List[Dict[str, Any]]:
    """Every GPU line of one block of ``--query-gpu`` output (headers and junk lines are skipped)."""
    gpus = []  # type: List[Dict[str, Any]]
    for line in text.splitlines():
        gpu = parse_smi_gpu_line(line)
        if gpu is not None:
            gpus.append(gpu)
    return gpus


def parse_smi_apps_output(text: str) -> Dict[str, List[Dict[str, Any]]]:
    """``--query-compute-apps=gpu_uuid,pid,used_memory`` output: GPU uuid -> process dicts."""
    apps = {}  # type: Dict[str, List[Dict[str, Any]]]
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = _split_csv(line)
        if len(fields) < 3:
            continue
        uuid = _smi_value(fields[0])
        pid = _smi_int(fields[1])
        if uuid is None or pid is None or pid <= 0 or not fields[1].strip().isdigit():
            continue
        apps.setdefault(uuid, []).append({"pid": pid, "used_mib": _smi_int(fields[2]), "type": "compute"})
    return apps


def smi_exit_error(returncode: int, output: str) -> str:
    """One readable line for a failed nvidia-smi run (exit 9: the driver is not loaded)."""
    first = ""
    for line in output.splitlines():
        if line.strip():
            first = line.strip()[:200]
            break
    if returncode == 9:
        return "NVIDIA driver not loaded (nvidia-smi exit 9)" + (": " + first if first else "")
    return "nvidia-smi exited with status %d" % returncode + (": " + first if first else "")


def _which(name: str) -> Optional[str]:
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


class _SmiBackend(object):
    """GPU figures from one long-lived ``nvidia-smi --query-gpu ... -lms N`` process (no pynvml).

    A reader thread parses its lines as they come; a repeated index starts the next block of the loop. The
    process lists come from ``--query-compute-apps`` at the process rate. Every run is an argv list.
    """

    mode = "smi"

    def __init__(self, smi_path: str, interval_s: float) -> None:
        self.smi_path = smi_path
        self.interval_s = interval_s
        self.host_error = None  # type: Optional[str]
        self.driver_version = None  # type: Optional[str]
        self.cuda_driver_version = None  # type: Optional[str]
        self._proc = None  # type: Optional[subprocess.Popen]
        self._lock = threading.Lock()
        self._complete = {}  # type: Dict[int, Dict[str, Any]]
        self._partial = {}  # type: Dict[int, Dict[str, Any]]
        self._latest_time = 0.0
        self._pci_index = {}  # type: Dict[str, int]
        self._output_tail = []  # type: List[str]
        self._last_start = -1e18
        self._apps = {}  # type: Dict[str, List[Dict[str, Any]]]
        self._closed = False

    def start(self) -> None:
        self.driver_version = self._query_driver_version()
        self._ensure_running()

    def _run_once(self, argv: List[str]) -> Tuple[Optional[int], str]:
        try:
            done = subprocess.run(  # noqa: S603 - fixed argv list, no shell
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=SMI_DEADLINE_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, "nvidia-smi timed out"
        except OSError as exc:
            return None, "cannot run nvidia-smi: %s" % exc
        return done.returncode, _text(done.stdout)

    def _query_driver_version(self) -> Optional[str]:
        code, out = self._run_once([self.smi_path, "--query-gpu=driver_version", "--format=csv,noheader"])
        if code != 0:
            return None
        for line in out.splitlines():
            value = _smi_value(line)
            if value is not None and len(value) < 40:
                return value
        return None

    def _ensure_running(self) -> None:
        running = self._proc is not None and self._proc.poll() is None
        if running or time.monotonic() - self._last_start < NVML_INIT_RETRY_S or self._closed:
            return
        self._last_start = time.monotonic()
        period_ms = max(100, int(self.interval_s * 1000))
        argv = [
            self.smi_path,
            "--query-gpu=" + SMI_QUERY_GPU,
            "--format=csv,noheader,nounits",
            "-lms",
            str(period_ms),
        ]
        try:
            proc = subprocess.Popen(  # noqa: S603 - fixed argv list, no shell
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            self.host_error = "cannot run nvidia-smi: %s" % exc
            return
        self._proc = proc
        threading.Thread(target=self._read, args=(proc,), name="gputui-smi", daemon=True).start()
        # The first block follows right away: wait for it briefly so the first sample is not empty.
        deadline = time.monotonic() + SMI_DEADLINE_S
        while time.monotonic() < deadline:
            with self._lock:
                if self._complete or self._partial or self.host_error:
                    break
            time.sleep(0.02)
        # Let the rest of a block arrive (all GPUs print within a few milliseconds).
        time.sleep(0.05)

    def _read(self, proc: subprocess.Popen) -> None:
        if proc.stdout is None:
            return
        for raw in iter(proc.stdout.readline, b""):
            line = _text(raw)
            gpu = parse_smi_gpu_line(line)
            with self._lock:
                if gpu is None:
                    handle_error = parse_smi_handle_error(line)
                    index = None if handle_error is None else self._pci_index.get(handle_error[0])
                    if handle_error is not None and index is not None:
                        gpu = {"index": index, "pci_bus_id": handle_error[0], "error": handle_error[1]}
                    else:
                        if line.strip():
                            self._output_tail = (self._output_tail + [line.strip()])[-3:]
                        continue
                if gpu["index"] in self._partial:  # a repeated index: the previous block is complete
                    self._complete = self._partial
                    self._partial = {}
                self._partial[gpu["index"]] = gpu
                if gpu.get("pci_bus_id"):
                    self._pci_index[_pci_key(str(gpu["pci_bus_id"]))] = gpu["index"]
                self._latest_time = time.monotonic()
                self.host_error = None
        code = proc.wait()
        with self._lock:
            if not self._closed:
                self.host_error = smi_exit_error(code, "\n".join(self._output_tail))
                self._complete = {}
                self._partial = {}

    def _query_apps(self) -> None:
        argv = [self.smi_path, "--query-compute-apps=" + SMI_QUERY_APPS, "--format=csv,noheader,nounits"]
        code, out = self._run_once(argv)
        if code == 0:
            self._apps = parse_smi_apps_output(out)

    def poll(self, want_processes: bool) -> List[Dict[str, Any]]:
        self._ensure_running()
        if want_processes:
            self._query_apps()
        with self._lock:
            view = dict(self._complete)
            view.update(self._partial)
            gpus = [dict(view[i]) for i in sorted(view)]
            age_s = time.monotonic() - self._latest_time
            silent_s = time.monotonic() - self._last_start
            if not gpus and self.host_error is None and silent_s > SMI_DEADLINE_S:
                # Running but silent (a hung driver call inside nvidia-smi): say so rather than show nothing.
                self.host_error = "nvidia-smi has printed no GPU line for %.0f s" % silent_s
        stale = bool(gpus) and age_s > max(5.0, self.interval_s * 5)
        for gpu in gpus:
            if stale and not gpu.get("error"):
                gpu["error"] = "nvidia-smi stopped reporting (%.0f s ago)" % age_s
            if want_processes:
                gpu["processes"] = [dict(p) for p in self._apps.get(gpu.get("uuid") or "", [])]
        return gpus

    def close(self) -> None:
        with self._lock:
            self._closed = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass


class _NoBackend(object):
    mode = "none"
    driver_version = None
    cuda_driver_version = None

    def __init__(self, error: str) -> None:
        self.host_error = error

    def start(self) -> None:
        pass

    def poll(self, want_processes: bool) -> List[Dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------------------------------
# The agent


def _finite_positive(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not number > 0 or math.isinf(number) or math.isnan(number):
        return None
    return number


class Agent(object):
    """The collector for one host.

    Args:
        target: The name the client uses for this host (echoed in every snapshot).
        read_only: Refuse every kill.
        memory_interval_s: Seconds between memory samples (the cheap part).
        process_interval_s: Seconds between process samples (NVML process lists + the /proc walk).
        health_urls: Health endpoints to probe (reserved for the health probe).
        discover_health: Probe health URLs discovered from launchers (reserved for the health probe).
        use_psutil: Use psutil for process details when importable (False: read /proc only).
        use_pynvml: Use pynvml when importable (False: nvidia-smi, if present).
        nvml_deadline_s: Seconds each device's NVML calls may take per sample.
    """

    def __init__(
        self,
        target: str = "local",
        read_only: bool = False,
        memory_interval_s: float = 1.0,
        process_interval_s: float = 3.0,
        health_urls=(),  # type: Any
        discover_health: bool = True,
        use_psutil: bool = True,
        use_pynvml: bool = True,
        nvml_deadline_s: float = NVML_DEADLINE_S,
    ) -> None:
        self.target = target
        self.read_only = bool(read_only)
        self.memory_interval_s = float(memory_interval_s)
        self.process_interval_s = float(process_interval_s)
        self.health_urls = tuple(health_urls)
        self.discover_health = bool(discover_health)
        self.hostname = _clean(socket.gethostname())
        self.boot_id = read_boot_id()
        self.boot_time = read_boot_time()
        self.pid = os.getpid()
        self.child_pid_namespace = in_child_pid_namespace()
        self._details = _ProcDetails(use_psutil)
        self._lock = threading.RLock()
        self._states = {}  # type: Dict[Tuple[int, int], Tuple[str, float]]
        self._gpu_processes = {}  # type: Dict[int, List[Dict[str, Any]]]
        self._processes = []  # type: List[Dict[str, Any]]
        self._device_holders = None  # type: Optional[List[Dict[str, Any]]]
        self._processes_time = None  # type: Optional[float]
        self._processes_mono = -1e18
        self.last_sample_mono = None  # type: Optional[float]
        if use_pynvml and _pynvml is not None:
            self._backend = _NvmlBackend(nvml_deadline_s)  # type: Any
        else:
            smi = _which("nvidia-smi")
            if smi is not None:
                self._backend = _SmiBackend(smi, self.memory_interval_s)
            elif _pynvml is None or not use_pynvml:
                self._backend = _NoBackend("no NVML: pynvml is not installed and nvidia-smi is not on PATH")
            else:  # pragma: no cover - unreachable
                self._backend = _NoBackend("no NVML")
        self._backend.start()  # so that hello already says whether there is a driver

    @property
    def mode(self) -> str:
        return self._backend.mode

    @property
    def use_psutil(self) -> bool:
        return self._details.use_psutil

    def hello(self) -> Dict[str, Any]:
        return {
            "t": "hello",
            "protocol": PROTOCOL_VERSION,
            "agent_version": AGENT_VERSION,
            "mode": self.mode,
            "error": self._backend.host_error,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "psutil": self.use_psutil,
            "pid": self.pid,
            "boot_id": self.boot_id,
            "hostname": self.hostname,
            "pid_namespace": "child" if self.child_pid_namespace else "host",
        }

    # -- sampling ------------------------------------------------------------------------------------------

    def sample(self, force_processes: bool = False) -> Dict[str, Any]:
        """One host snapshot as a dict (``model.HostSnapshot.to_dict`` shape).

        Memory figures are read every time; the process part (NVML process lists and the /proc walk) only
        when ``process_interval_s`` has passed or ``force_processes`` is set, else the last one is reused.
        """
        with self._lock:
            now_mono = time.monotonic()
            want_processes = force_processes or now_mono - self._processes_mono >= self.process_interval_s
            gpus = self._backend.poll(want_processes)
            now = time.time()
            self.last_sample_mono = time.monotonic()
            if want_processes:
                self._processes_mono = now_mono
                self._sample_processes(gpus, now)
            for gpu in gpus:
                if "processes" not in gpu:
                    gpu["processes"] = [dict(p) for p in self._gpu_processes.get(gpu["index"], [])]
            return {
                "target": self.target,
                "hostname": self.hostname,
                "boot_id": self.boot_id,
                "time": now,
                "error": self._backend.host_error,
                "driver_version": self._backend.driver_version,
                "cuda_driver_version": self._backend.cuda_driver_version,
                "mode": self.mode,
                "agent_version": AGENT_VERSION,
                "agent_pid": self.pid,
                "processes_time": self._processes_time,
                "gpus": gpus,
                "processes": [dict(p) for p in self._processes],
                "device_holders": None if self._device_holders is None else list(self._device_holders),
                "findings": [],
                "health": [],
                "verdict": None,
            }

    def error_snapshot(self, error: str) -> Dict[str, Any]:
        """A snapshot that carries only this host's identity and an error."""
        return {
            "target": self.target,
            "hostname": self.hostname,
            "boot_id": self.boot_id,
            "time": time.time(),
            "error": error,
            "mode": self.mode,
            "agent_version": AGENT_VERSION,
            "agent_pid": self.pid,
            "gpus": [],
            "processes": [],
            "device_holders": None,
            "findings": [],
            "health": [],
            "verdict": None,
        }

    def _sample_processes(self, gpus: List[Dict[str, Any]], now: float) -> None:
        table = scan_proc()
        gpu_mib = {}  # type: Dict[int, Dict[int, int]]
        self._gpu_processes = {}
        for gpu in gpus:
            listed = gpu.get("processes") or []
            for proc in listed:
                proc["visible"] = self._is_local_gpu_pid(proc["pid"], table)
                if proc["visible"]:
                    per_gpu = gpu_mib.setdefault(proc["pid"], {})
                    # A process listed as both compute and graphics holds one allocation, not two.
                    per_gpu[gpu["index"]] = max(per_gpu.get(gpu["index"], 0), proc.get("used_mib") or 0)
            gpu["processes"] = listed
            self._gpu_processes[gpu["index"]] = [dict(p) for p in listed]

        interesting = set(gpu_mib)  # type: Set[int]
        children = children_map(table)
        for pid in list(gpu_mib):
            stack = list(children.get(pid, ()))
            while stack:
                child = stack.pop()
                if child not in interesting:
                    interesting.add(child)
                    stack.extend(children.get(child, ()))
        for stat in table.values():
            # Kernel threads (kthreadd's children) in D state are I/O weather, not stuck GPU work.
            if stat.state in ("Z", "D") and stat.pid != 2 and stat.ppid != 2:
                interesting.add(stat.pid)
        for pid in list(interesting):
            interesting.update(a for a in ancestors_of(pid, table) if a in table)

        processes = []  # type: List[Dict[str, Any]]
        live_keys = set()  # type: Set[Tuple[int, int]]
        for pid in sorted(interesting):
            stat = table[pid]
            key = (pid, stat.start_ticks)
            live_keys.add(key)
            seen = self._states.get(key)
            if seen is None or seen[0] != stat.state:
                seen = (stat.state, now)
                self._states[key] = seen
            details = self._details.details(stat, now)
            processes.append(
                {
                    "pid": pid,
                    "ppid": stat.ppid,
                    "user": details["user"],
                    "uid": details["uid"],
                    "state": stat.state,
                    "name": stat.name,
                    "cmdline": details["cmdline"],
                    "start_ticks": stat.start_ticks,
                    "create_time": (
                        None
                        if self.boot_time is None
                        else self.boot_time + stat.start_ticks / float(CLOCK_TICKS_PER_S)
                    ),
                    "state_since": seen[1],
                    "rss_kib": details["rss_kib"],
                    "gpu_memory_mib": {str(k): v for k, v in sorted(gpu_mib.get(pid, {}).items())},
                }
            )
        for key in [k for k in self._states if k not in live_keys]:
            del self._states[key]
        self._details.forget_except(live_keys)
        self._processes = processes
        self._processes_time = now
        self._device_holders = scan_device_holders(table) if self._ghost_suspected(gpus) else None

    def _is_local_gpu_pid(self, pid: int, table: Dict[int, ProcStat]) -> bool:
        """Whether the driver's ``pid`` is the local process with that number.

        On the host it is whenever it exists. In a child PID namespace the driver may report pids of another
        namespace, so a local process only counts as that GPU process if it has a /dev/nvidia* node open:
        an unrelated process that happens to have the same number is never shown (or offered) as a holder.
        """
        if pid <= 0 or pid not in table:
            return False
        return not self.child_pid_namespace or has_nvidia_device_open(pid)

    @staticmethod
    def _ghost_suspected(gpus: List[Dict[str, Any]]) -> bool:
        """Whether some GPU holds memory its listed processes do not account for."""
        for gpu in gpus:
            used = gpu.get("memory_used_mib")
            if used is None:
                continue
            listed = sum(p.get("used_mib") or 0 for p in gpu.get("processes") or ())
            # v1 memory info counts the driver's reservation in "used"; v2 reports it apart.
            reserved = gpu.get("memory_reserved_mib")
            slack = GHOST_SLACK_MIB + (0 if reserved is not None else _v1_reserved_allowance(gpu))
            if used - listed > slack:
                return True
        return False

    # -- commands ------------------------------------------------------------------------------------------

    def handle(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """Run one protocol command; returns the reply message (never raises)."""
        command_id = command.get("id") if isinstance(command, dict) else None
        try:
            if not isinstance(command, dict):
                raise _CommandError("a command must be a JSON object")
            name = command.get("cmd")
            if name == "configure":
                result = self._configure(command)
            elif name == "sample":
                result = {"snapshot": self.sample(force_processes=True)}
            elif name == "kill":
                result = self.kill(command)
            elif name == "calibrate":
                result = self._calibrate()
            elif name == "hello":
                result = self.hello()
            elif name == "quit":
                result = {}
            else:
                raise _CommandError("unknown command %r" % (name,))
        except _CommandError as exc:
            return {"t": "reply", "id": command_id, "ok": False, "error": str(exc)}
        except Exception as exc:  # a bug must not kill the agent: report it as one line
            return {
                "t": "reply",
                "id": command_id,
                "ok": False,
                "error": "%s: %s" % (type(exc).__name__, exc),
            }
        return {"t": "reply", "id": command_id, "ok": True, "result": result}

    def _configure(self, command: Dict[str, Any]) -> Dict[str, Any]:
        updates = {}  # type: Dict[str, float]
        for key in ("memory_interval_s", "process_interval_s"):
            if key in command and command[key] is not None:
                value = _finite_positive(command[key])
                if value is None:
                    raise _CommandError("%s must be a positive number of seconds" % key)
                updates[key] = value
        with self._lock:
            for key, value in updates.items():
                setattr(self, key, value)
            if "memory_interval_s" in updates and isinstance(self._backend, _SmiBackend):
                self._backend.interval_s = updates["memory_interval_s"]
        return {}

    def _calibrate(self) -> Dict[str, Any]:
        snapshot = self.sample(force_processes=False)
        used = {}  # type: Dict[str, int]
        for gpu in snapshot["gpus"]:
            if gpu.get("memory_used_mib") is None:
                continue
            used[gpu.get("uuid") or "index:%d" % gpu["index"]] = gpu["memory_used_mib"]
        return {"memory_used_mib": used}

    # -- kill ----------------------------------------------------------------------------------------------

    def kill(self, command: Dict[str, Any]) -> Dict[str, Any]:
        """The ``kill`` command: see the module docstring and DESIGN's safety rules."""
        signal_name = command.get("signal") or "TERM"
        if signal_name not in SIGNALS:
            raise _CommandError("signal must be one of TERM, INT, KILL")
        raw_targets = command.get("targets")
        if not isinstance(raw_targets, list) or not raw_targets:
            raise _CommandError("targets must be a non-empty list of {pid, start_ticks}")
        targets = []  # type: List[Tuple[int, Optional[int]]]
        for item in raw_targets:
            if not isinstance(item, dict):
                raise _CommandError("each target must be an object with pid and start_ticks")
            pid = item.get("pid")
            ticks = item.get("start_ticks")
            if isinstance(pid, bool) or not isinstance(pid, int):
                raise _CommandError("target pid must be an integer")
            if ticks is not None and (isinstance(ticks, bool) or not isinstance(ticks, int)):
                raise _CommandError("target start_ticks must be an integer")
            targets.append((pid, ticks))
        escalate_s = command.get("escalate_s")
        if escalate_s is not None:
            escalate_s = _finite_positive(escalate_s)
            if escalate_s is None:
                raise _CommandError("escalate_s must be a positive number of seconds or null")
        return {
            "outcomes": _Killer(
                self, SIGNALS[signal_name], signal_name, bool(command.get("tree")), escalate_s
            ).run(targets, command.get("boot_id"))
        }

    def gpu_mib_of(self, pid: int) -> Optional[int]:
        for proc in self._processes:
            if proc["pid"] == pid:
                return sum(proc["gpu_memory_mib"].values())
        return None

    def close(self) -> None:
        self._backend.close()


def _v1_reserved_allowance(gpu: Dict[str, Any]) -> int:
    """Without v2 memory info the driver's reservation hides in "used": allow ~1% of the total for it."""
    total = gpu.get("memory_total_mib") or 0
    return int(total) // 100


class _CommandError(Exception):
    """A command the agent refuses as malformed; its text is the reply's one-line error."""


class _Killer(object):
    """One kill command: identity checks, tree expansion, refusals, escalation."""

    def __init__(self, agent: Agent, signo: int, signal_name: str, tree: bool, escalate_s: Optional[float]):
        self.agent = agent
        self.signo = signo
        self.signal_name = signal_name
        self.tree = tree
        self.escalate_s = escalate_s
        self.outcomes = []  # type: List[Dict[str, Any]]
        # Its own detail reader: the sampling thread mutates the agent's caches concurrently.
        self._details = _ProcDetails(agent.use_psutil)
        # Who each target was, read before any signal: a dead process has no cmdline left to report.
        self._info = {}  # type: Dict[int, Dict[str, Any]]

    def _outcome(
        self,
        pid: int,
        ticks: Optional[int],
        stat: Optional[ProcStat],
        stage: str,
        signal_name: Optional[str],
        result: str,
        detail: str = "",
    ) -> Dict[str, Any]:
        details = self._info.get(pid) or {}
        if not details and stat is not None:
            details = self._details.details(stat, time.time())
            self._info[pid] = details
        outcome = {
            "pid": pid,
            "start_ticks": ticks,
            "name": None if stat is None else stat.name,
            "user": details.get("user"),
            "cmdline": details.get("cmdline") or [],
            "gpu_mib": self.agent.gpu_mib_of(pid),
            "stage": stage,
            "signal": signal_name,
            "result": result,
            "detail": detail,
        }
        self.outcomes.append(outcome)
        return outcome

    def run(self, targets: List[Tuple[int, Optional[int]]], boot_id: Optional[str]) -> List[Dict[str, Any]]:
        table = scan_proc()
        if self.agent.read_only:
            for pid, ticks in targets:
                self._outcome(
                    pid, ticks, table.get(pid), "check", None, "refused", "read-only: nothing is signalled"
                )
            return self.outcomes
        if boot_id is not None and self.agent.boot_id is not None and boot_id != self.agent.boot_id:
            for pid, ticks in targets:
                self._outcome(
                    pid,
                    ticks,
                    None,
                    "check",
                    None,
                    "changed",
                    "process changed: the host rebooted since it was listed (boot id differs)",
                )
            return self.outcomes

        me = os.getpid()
        protected = {1, me}
        protected.update(ancestors_of(me))
        try:
            my_session = os.getsid(0)
            my_group = os.getpgid(0)
        except OSError:
            my_session = my_group = -1

        ordered = []  # type: List[Tuple[int, int]]
        queued = set()  # type: Set[int]
        for pid, ticks in targets:
            stat = table.get(pid)
            if ticks is None:
                # Without its start time a pid may name any process by now: never signal a bare pid.
                self._outcome(
                    pid,
                    None,
                    stat,
                    "check",
                    None,
                    "refused",
                    "no start time given: the process's identity cannot be checked",
                )
                continue
            if stat is None:
                self._outcome(pid, ticks, None, "check", None, "gone", "no such process")
                continue
            if stat.start_ticks != ticks:
                self._outcome(
                    pid,
                    ticks,
                    stat,
                    "check",
                    None,
                    "changed",
                    "process changed: pid %d now belongs to another process" % pid,
                )
                continue
            refusal = self._refusal(stat, table, protected, my_session, my_group)
            if refusal is not None:
                # A refused root is never expanded: the tree of pid 1 or of the agent's own ancestors is the
                # whole host.
                if pid not in queued:
                    queued.add(pid)
                    self._outcome(pid, ticks, stat, "check", None, "refused", refusal)
                continue
            members = self._tree_members(pid, table, protected) if self.tree else []
            for member in members + [pid]:
                if member in queued:
                    continue
                queued.add(member)
                member_ticks = ticks if member == pid else table[member].start_ticks
                ordered.append((member, member_ticks))

        now = time.time()
        for pid, _ticks in ordered:
            self._info[pid] = self._details.details(table[pid], now)
        sent = []  # type: List[Tuple[int, int]]
        for pid, ticks in ordered:
            stat = table[pid]
            refusal = self._refusal(stat, table, protected, my_session, my_group)
            if refusal is not None:
                self._outcome(pid, ticks, stat, "check", None, "refused", refusal)
                continue
            result, detail = send_signal_checked(pid, ticks, self.signo)
            if result == "sent" and stat.state == "D":
                detail = "in uninterruptible sleep (D): it may not die until its I/O completes"
            self._outcome(pid, ticks, stat, "signal", self.signal_name, result, detail)
            if result == "sent":
                sent.append((pid, stat.start_ticks))
        if self.escalate_s is not None and sent:
            self._escalate(sent, table)
        return self.outcomes

    def _tree_members(self, root: int, table: Dict[int, ProcStat], protected: Set[int]) -> List[int]:
        """Descendants of ``root`` by ppid and members of groups led by any of them, deepest first.

        Never expands through pid 1, kernel threads or a protected process (the agent and its ancestors).
        """
        children = children_map(table)
        groups = {}  # type: Dict[int, List[int]]
        for stat in table.values():
            groups.setdefault(stat.pgrp, []).append(stat.pid)
        depth = {root: 0}
        frontier = [root]
        while frontier:
            nxt = []  # type: List[int]
            for pid in frontier:
                # Group members whose middle parent died were reparented away: the group still ties them.
                related = list(children.get(pid, ())) + [m for m in groups.get(pid, ()) if m != pid]
                for member in related:
                    if member in depth or member in (0, 1, 2):
                        continue
                    depth[member] = depth[pid] + 1
                    if member not in protected:
                        nxt.append(member)
            frontier = nxt
        members = [pid for pid in depth if pid != root]
        members.sort(key=lambda pid: (-depth[pid], pid))
        return members

    def _refusal(
        self, stat: ProcStat, table: Dict[int, ProcStat], protected: Set[int], my_session: int, my_group: int
    ) -> Optional[str]:
        pid = stat.pid
        if pid == 1:
            return "pid 1 (init) is never signalled"
        if pid == 2 or stat.ppid == 2:
            return "kernel thread: not signalled"
        if pid == self.agent.pid or pid == os.getpid():
            return "this is the gputui agent itself"
        if pid in protected:
            return "this is an ancestor of the gputui agent (its session or terminal)"
        if stat.session == my_session and my_session > 0:
            return "this process is in the gputui agent's own session"
        if stat.pgrp == my_group and my_group > 0:
            return "this process is in the gputui agent's own process group"
        if stat.state == "Z":
            parent = table.get(stat.ppid)
            parent_name = parent.name if parent is not None else "?"
            return "zombie: cannot be killed; signal its parent %d (%s)" % (stat.ppid, parent_name)
        return None

    def _escalate(self, sent: List[Tuple[int, int]], table: Dict[int, ProcStat]) -> None:
        if self.escalate_s is None:
            return
        alive = _wait_gone(sent, self.escalate_s)
        for pid, ticks in sent:
            if (pid, ticks) not in alive:
                self._outcome(
                    pid, ticks, table.get(pid), "wait", None, "exited", "gone after %s" % self.signal_name
                )
        if self.signo == signal.SIGKILL:  # nothing stronger to escalate to: say what is left
            self._confirm([p for p in sent if p in alive], alive, table)
            return
        survivors = []  # type: List[Tuple[int, int]]
        for pid, ticks in sent:
            if (pid, ticks) not in alive:
                continue
            result, detail = send_signal_checked(pid, ticks, signal.SIGKILL)
            if result == "sent":
                survivors.append((pid, ticks))
                detail = "still alive after %.1f s: escalated" % self.escalate_s
            self._outcome(pid, ticks, table.get(pid), "escalate", "KILL", result, detail)
        if survivors:
            self._confirm(survivors, _wait_gone(survivors, KILL_CONFIRM_S), table)

    def _confirm(
        self, survivors: List[Tuple[int, int]], left: Set[Tuple[int, int]], table: Dict[int, ProcStat]
    ) -> None:
        """Report each KILLed process: killed (gone), uninterruptible (D state) or still_alive."""
        for pid, ticks in survivors:
            stat = read_stat(pid)
            if (pid, ticks) not in left:
                self._outcome(pid, ticks, table.get(pid), "confirm", "KILL", "killed", "gone after KILL")
            elif stat is not None and stat.state == "D":
                self._outcome(
                    pid,
                    ticks,
                    stat,
                    "confirm",
                    "KILL",
                    "uninterruptible",
                    "in uninterruptible sleep (D): it may not die until its I/O completes",
                )
            else:
                self._outcome(
                    pid,
                    ticks,
                    stat or table.get(pid),
                    "confirm",
                    "KILL",
                    "still_alive",
                    "still alive after KILL",
                )


def _alive(pid: int, ticks: int) -> bool:
    """Whether the process (pid, start_ticks) still exists and has not exited (a zombie counts as gone)."""
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == ticks and stat.state not in ("Z", "X")


def _wait_gone(procs: List[Tuple[int, int]], timeout_s: float) -> Set[Tuple[int, int]]:
    """Poll until every process is gone or ``timeout_s`` passed; returns those still alive."""
    deadline = time.monotonic() + timeout_s
    alive = set(p for p in procs if _alive(*p))
    while alive and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        alive = set(p for p in alive if _alive(*p))
    return alive


def send_signal_checked(pid: int, start_ticks: int, signo: int) -> Tuple[str, str]:
    """Signal ``pid`` only if it is still the process that started at ``start_ticks``.

    With a pidfd the identity check happens after the pidfd is open, so the pid cannot be reused between the
    check and the signal; without one (old kernels, Python 3.8) a small window remains between them.

    Returns:
        (result, detail) with result one of sent, gone, changed, denied, error.
    """
    pidfd = None  # type: Optional[int]
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return "gone", "no such process"
        except OSError:
            pidfd = None  # no pidfd support in this kernel: plain kill below
    try:
        stat = read_stat(pid)
        if stat is None:
            return "gone", "no such process"
        if stat.start_ticks != start_ticks:
            return "changed", "process changed: pid %d now belongs to another process" % pid
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signo)
            else:
                os.kill(pid, signo)
        except ProcessLookupError:
            return "gone", "exited before the signal"
        except PermissionError:
            return "denied", "permission denied (process of another user)"
        except OSError as exc:
            return "error", "%s: %s" % (type(exc).__name__, exc.strerror or exc)
        return "sent", ""
    finally:
        if pidfd is not None:
            os.close(pidfd)


# ----------------------------------------------------------------------------------------------------
# Remote form


class _Writer(object):
    """Writes JSON lines from several threads, one whole line at a time."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.broken = False

    def write(self, message: Dict[str, Any]) -> bool:
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
            "utf-8", "backslashreplace"
        )
        with self.lock:
            if self.broken:
                return False
            try:
                self.stream.write(data)
                self.stream.flush()
            except (OSError, ValueError):
                self.broken = True
                return False
        return True


def serve(stdin_binary: Any, stdout_binary: Any, agent: Agent) -> int:
    """The remote loop: hello, then a snapshot every ``memory_interval_s``; commands handled meanwhile.

    A reader thread parses command lines from ``stdin_binary``; ``kill`` runs on its own thread (escalation
    takes seconds) while the others are answered in order. Returns 0 on EOF or ``quit``.
    """
    writer = _Writer(stdout_binary)
    stop = threading.Event()
    wake = threading.Event()

    def run_command(command: Dict[str, Any]) -> None:
        writer.write(agent.handle(command))

    def reader() -> None:
        try:
            for raw in iter(stdin_binary.readline, b""):
                line = raw.strip()
                if not line:
                    continue
                try:
                    command = json.loads(line.decode("utf-8", "replace"))
                except ValueError:
                    writer.write({"t": "reply", "id": None, "ok": False, "error": "not a JSON line"})
                    continue
                if isinstance(command, dict) and command.get("cmd") == "quit":
                    writer.write(agent.handle(command))
                    break
                if isinstance(command, dict) and command.get("cmd") == "kill":
                    threading.Thread(
                        target=run_command, args=(command,), name="gputui-kill", daemon=True
                    ).start()
                    continue
                run_command(command)
                if isinstance(command, dict) and command.get("cmd") == "configure":
                    wake.set()
        except (OSError, ValueError):
            pass
        finally:
            stop.set()
            wake.set()

    if not writer.write(agent.hello()):
        return 0
    thread = threading.Thread(target=reader, name="gputui-commands", daemon=True)
    thread.start()
    while not stop.is_set():
        started = time.monotonic()
        try:
            snapshot = agent.sample()
        except Exception as exc:  # a collector bug must not end the stream: report it as the host's error
            snapshot = agent.error_snapshot("collector error: %s: %s" % (type(exc).__name__, exc))
        if not writer.write({"t": "snapshot", "snapshot": snapshot}):
            break
        while not stop.is_set():
            left = started + agent.memory_interval_s - time.monotonic()
            if left <= 0:
                break
            wake.wait(left)
            wake.clear()
    return 0


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gputui-agent", description="gputui collector (JSON lines on stdio)"
    )
    parser.add_argument("--target", default="local")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--interval", type=float, default=1.0, help="memory sample interval, seconds")
    parser.add_argument(
        "--process-interval", type=float, default=3.0, help="process sample interval, seconds"
    )
    parser.add_argument("--health", action="append", default=[], metavar="URL")
    parser.add_argument("--no-discover", action="store_true")
    parser.add_argument(
        "--no-psutil", action="store_true", help="read /proc directly even if psutil is present"
    )
    parser.add_argument("--no-pynvml", action="store_true", help="use nvidia-smi even if pynvml is present")
    parser.add_argument("--once", action="store_true", help="print one full snapshot as JSON and exit")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the remote form; returns the exit status."""
    args = build_arg_parser().parse_args(argv)
    for name in ("interval", "process_interval"):
        if _finite_positive(getattr(args, name)) is None:
            sys.stderr.write("gputui-agent: --%s must be a positive number\n" % name.replace("_", "-"))
            return 2
    agent = Agent(
        target=args.target,
        read_only=args.read_only,
        memory_interval_s=args.interval,
        process_interval_s=args.process_interval,
        health_urls=args.health,
        discover_health=not args.no_discover,
        use_psutil=not args.no_psutil,
        use_pynvml=not args.no_pynvml,
    )
    stdout = getattr(sys.stdout, "buffer", sys.stdout)
    try:
        if args.once:
            _Writer(stdout).write(agent.sample(force_processes=True))
            return 0
        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        return serve(stdin, stdout, agent)
    except KeyboardInterrupt:
        return 130
    finally:
        agent.close()


if __name__ == "__main__":
    sys.exit(main())
