"""The readiness probe: does each GPU take work? What a job's first second does, with nothing installed.

For each GPU a child process of the collector, through ``ctypes`` on ``libcuda.so.1`` (no toolkit, no
framework), initialises the driver, picks the device by its PCI bus id (the caller's ``CUDA_VISIBLE_DEVICES``
is removed from its environment), creates a context, allocates a buffer, writes a pattern, reads it back and
compares, frees it and destroys the context, printing one JSON line as it begins each step and one as it ends
it. While the buffer lives the child waits (briefly) for the collector to look whether NVML lists it, so the
report says whether the driver's accounting sees work. The children run in parallel under one deadline; a
child past it is killed (SIGKILL to its process group), and one that does not die within a second (stuck in
the driver) is reported as such and never waited on: either is an answer ("the GPU did not take work").

The children are the collector's own: ``run_probes`` hands their pids to ``hide`` and the process sampler
never lists them, so they are never a job, a survivor, a leftover or a kill target; whoever judges memory
does it after ``run_probes`` returned (every child gone). Only one probe runs at a time per collector. The
child program is a string (``CHILD_SOURCE``) run by ``sys.executable -I -S -c``: a shipped collector has no
files on its host to run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from gputui.agent.protocol import (
    PROBE_BUFFER_MIB,
    PROBE_DEADLINE_S,
    PROBE_FAILED,
    PROBE_HUNG,
    PROBE_OK,
    PROBE_SKIPPED,
    PROBE_STUCK,
    PROBE_UNAVAILABLE,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

KILL_GRACE_S = 1.0
"""How long a killed child may take to die before it counts as stuck in the driver (never waited on)."""
LINE_MAX_BYTES = 4096
VISIBLE_WAIT_S = 2.0
"""How long a child holds its buffer for the collector to look whether NVML lists it."""

CHILD_SOURCE = r"""
import ctypes, json, os, select, sys, time

def say(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()

pci, size = sys.argv[1], int(sys.argv[2]) << 20
say(begin="load")
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    say(step="load", error="unavailable", detail=str(exc)[:200])
    sys.exit(3)
need = ("cuInit", "cuDeviceGetByPCIBusId", "cuCtxCreate_v2", "cuMemAlloc_v2", "cuMemcpyHtoD_v2",
        "cuMemcpyDtoH_v2", "cuMemFree_v2", "cuCtxDestroy_v2", "cuGetErrorName")
missing = [name for name in need if not hasattr(lib, name)]
if missing:
    say(step="load", error="unavailable", detail="libcuda.so.1 has no " + ", ".join(missing))
    sys.exit(3)
lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
lib.cuDeviceGetByPCIBusId.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_char_p]
lib.cuCtxCreate_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint, ctypes.c_int]
lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t]
lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t]
lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_size_t]
lib.cuMemFree_v2.argtypes = [ctypes.c_ulonglong]
lib.cuCtxDestroy_v2.argtypes = [ctypes.c_void_p]
say(step="load", ms=0.0)

def name_of(code):
    text = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(text)) == 0 and text.value:
            return text.value.decode("ascii", "replace")[:60]
    except Exception:
        pass
    return "CUDA error %d" % code

def step(label, call):
    say(begin=label)
    start = time.monotonic()
    code = call()
    ms = round((time.monotonic() - start) * 1000.0, 3)
    if code != 0:
        say(step=label, ms=ms, code=code, error=name_of(code))
        sys.exit(1)
    say(step=label, ms=ms)

device = ctypes.c_int()
context = ctypes.c_void_p()
pointer = ctypes.c_ulonglong()
step("init", lambda: lib.cuInit(0))
step("device", lambda: lib.cuDeviceGetByPCIBusId(ctypes.byref(device), pci.encode("ascii")))
step("context", lambda: lib.cuCtxCreate_v2(ctypes.byref(context), 0, device.value))
step("alloc", lambda: lib.cuMemAlloc_v2(ctypes.byref(pointer), size))
say(holding=os.getpid())
ready, _, _ = select.select([sys.stdin], [], [], float(sys.argv[3]))
if ready:
    sys.stdin.readline()
pattern = (ctypes.c_ubyte * size).from_buffer(bytearray((bytes(range(251)) * (size // 251 + 1))[:size]))
back = (ctypes.c_ubyte * size)()
step("write", lambda: lib.cuMemcpyHtoD_v2(pointer.value, pattern, size))
step("read", lambda: lib.cuMemcpyDtoH_v2(back, pointer.value, size))
say(begin="compare")
start = time.monotonic()
same = bytes(back) == bytes(pattern)
took = round((time.monotonic() - start) * 1000.0, 3)
if not same:
    say(step="compare", ms=took, error="read-back differs from what was written")
    sys.exit(1)
say(step="compare", ms=took)
step("free", lambda: lib.cuMemFree_v2(pointer.value))
step("destroy", lambda: lib.cuCtxDestroy_v2(context))
sys.exit(0)
"""
"""The child: argv is the PCI bus id, the buffer in MiB and the seconds it holds the buffer for a look."""

_one_at_a_time = threading.Lock()


def probe_targets(gpus: list[dict[str, Any]], words: list[str] | None, force: bool) -> list[dict[str, Any]]:
    """Each GPU to probe (all, or those named by index or UUID) with why it is skipped, if it is: a GPU that
    lists a process (unless ``force``), one that could not be read, one without a PCI bus id."""
    from gputui.agent.args import select_gpus

    targets = []
    chosen = select_gpus(gpus, words)
    for gpu in chosen:
        target = {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id")}
        if gpu.get("error"):
            target["skip"] = "the GPU could not be read: " + str(gpu["error"])[:120]
        elif not isinstance(gpu.get("pci_bus_id"), str):
            target["skip"] = "no PCI bus id to find it by"
        elif gpu.get("processes") and not force:
            target["skip"] = "it lists a process (--force probes it anyway)"
        targets.append(target)
    return targets


def _child_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CUDA_VISIBLE")}
    env.pop("CUDA_DEVICE_ORDER", None)
    return env


def _cuda_bus_id(pci: str) -> str:
    """NVML's ``00000000:17:00.0`` as CUDA takes it (``0000:17:00.0``)."""
    domain, _, rest = pci.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else pci


class _Child:
    def __init__(self, target: dict[str, Any], buffer_mib: int) -> None:
        self.target = target
        self.steps: list[dict[str, Any]] = []
        self.began: str | None = None
        self.ended: dict[str, Any] | None = None
        self.visible: bool | None = None
        self.partial = b""
        self.proc = subprocess.Popen(  # noqa: S603 - fixed argv; the bus id is a validated value
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                CHILD_SOURCE,
                _cuda_bus_id(target["pci_bus_id"]),
                str(buffer_mib),
                str(VISIBLE_WAIT_S),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_child_env(),
            start_new_session=True,
            close_fds=True,
        )

    def take(self, data: bytes, seen: Callable[[int, int], bool | None]) -> None:
        self.partial += data
        *lines, self.partial = self.partial.split(b"\n")
        self.partial = self.partial[-LINE_MAX_BYTES:]
        for raw in lines:
            try:
                line = json.loads(raw[:LINE_MAX_BYTES].decode("utf-8", "replace"))
            except ValueError:
                continue
            if not isinstance(line, dict):
                continue
            if isinstance(line.get("begin"), str):
                self.began = line["begin"][:20]
            elif isinstance(line.get("holding"), int):
                self.visible = seen(self.target["index"], self.proc.pid)
                self._go()
            elif isinstance(line.get("step"), str):
                step = {"step": line["step"][:20], "ms": line.get("ms")}
                if isinstance(line.get("error"), str):
                    step["error"] = line["error"][:80]
                    step["code"] = line.get("code") if isinstance(line.get("code"), int) else None
                    if isinstance(line.get("detail"), str):
                        step["detail"] = line["detail"][:200]
                    self.ended = step
                self.steps.append(step)
                self.began = None

    def _go(self) -> None:
        stdin = self.proc.stdin
        try:
            if stdin is not None:
                stdin.write(b"go\n")
                stdin.flush()
        except OSError:
            pass

    def kill(self) -> bool:
        """SIGKILL the child's group; whether it died within ``KILL_GRACE_S``."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            return False
        return True


def _report(child: _Child, result: str, total_ms: float) -> dict[str, Any]:
    out = dict(child.target, result=result, steps=child.steps, ms=round(total_ms, 1), visible=child.visible)
    if child.ended is not None:
        out["step"] = child.ended["step"]
        out["error"] = child.ended.get("error")
        out["code"] = child.ended.get("code")
        if child.ended.get("detail"):
            out["detail"] = child.ended["detail"]
    elif result in (PROBE_HUNG, PROBE_STUCK):
        out["step"] = child.began
    return out


def run_probes(
    targets: list[dict[str, Any]],
    deadline_s: float = PROBE_DEADLINE_S,
    buffer_mib: int = PROBE_BUFFER_MIB,
    seen: Callable[[int, int], bool | None] = lambda index, pid: None,
    hide: Callable[[frozenset[int]], None] = lambda pids: None,
) -> list[dict[str, Any]]:
    """Probe every target not skipped, in parallel, within ``deadline_s``; one report per target, in order.

    ``seen(index, pid)``: whether NVML lists ``pid`` on GPU ``index`` now (called while the buffer lives);
    ``hide(pids)``: the probe children alive now, for the process sampler to leave out (empty at the end).
    Raises RuntimeError when another probe is running on this collector.
    """
    import selectors

    if not _one_at_a_time.acquire(False):
        raise RuntimeError("another probe is running on this host")
    children: list[_Child] = []
    reports: dict[int, dict[str, Any]] = {}
    try:
        started = time.monotonic()
        for position, target in enumerate(targets):
            if target.get("skip"):
                reports[position] = dict(target, result=PROBE_SKIPPED, steps=[], ms=0.0, visible=None)
                continue
            try:
                children.append(_Child(target, buffer_mib))
            except OSError as exc:
                reports[position] = dict(
                    target, result=PROBE_UNAVAILABLE, steps=[], ms=0.0, visible=None, detail=str(exc)[:200]
                )
        hide(frozenset(c.proc.pid for c in children))
        selector = selectors.DefaultSelector()
        for child in children:
            stdout = child.proc.stdout
            if stdout is not None:
                os.set_blocking(stdout.fileno(), False)
                selector.register(stdout, selectors.EVENT_READ, child)
        open_streams = len(selector.get_map())
        deadline = started + deadline_s
        while open_streams and time.monotonic() < deadline:
            for key, _ in selector.select(max(0.0, min(0.2, deadline - time.monotonic()))):
                child = key.data
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    child.take(data, seen)
                else:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
        selector.close()
        for child in children:
            position = targets.index(child.target)
            elapsed_ms = (time.monotonic() - started) * 1000.0
            try:
                code = child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                died = child.kill()
                result = PROBE_HUNG if died else PROBE_STUCK
                if not died:  # stuck in the driver: reaped whenever it dies, never waited on here
                    threading.Thread(target=child.proc.wait, name="gputui-probe-reaper", daemon=True).start()
                reports[position] = _report(child, result, elapsed_ms)
                continue
            unavailable = child.ended is not None and child.ended.get("error") == PROBE_UNAVAILABLE
            if code == 0 and child.ended is None:
                result = PROBE_OK
            elif unavailable:
                result = PROBE_UNAVAILABLE
            else:
                result = PROBE_FAILED
                if child.ended is None:  # died without saying why (a signal, a crash in the library)
                    child.ended = {"step": child.began, "error": f"the probe exited with status {code}"}
            reports[position] = _report(child, result, sum(s.get("ms") or 0.0 for s in child.steps))
        return [reports[position] for position in range(len(targets))]
    finally:
        for child in children:
            for stream in (child.proc.stdin, child.proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        hide(frozenset())
        _one_at_a_time.release()
