"""The readiness probe: does each GPU take work? What a job's first second does, with nothing installed.

For each GPU a child process of the collector, through ``ctypes`` on ``libcuda.so.1`` (no toolkit, no
framework), initialises the driver, picks the device by its PCI bus id (the caller's ``CUDA_VISIBLE_DEVICES``
is removed from its environment), creates a context, allocates a buffer, writes a pattern, reads it back and
compares, frees it and destroys the context, printing one JSON line as it begins each step and one as it ends
it. A GPU in MIG mode is no CUDA device: CUDA sees its MIG devices (one per compute instance), one per
process, chosen by ``CUDA_VISIBLE_DEVICES=MIG-<uuid>``; so each MIG device gets a child of its own with that
variable set, which takes device 0 (``cuDeviceGet``), with the buffer capped to what the instance holds.
While the buffer lives the child waits (briefly) for the collector to look whether NVML lists it, so the
report says whether the driver's accounting sees work. The children run in parallel under one deadline; a
child past it is killed (SIGKILL to its process group), and one that does not die within a second (stuck in
the driver) is reported as such and never waited on: either is an answer ("the GPU did not take work").

The children are the collector's own: ``run_probes`` hands their pids to ``hide`` and the process sampler
never lists them, so they are never a job, a survivor, a leftover or a kill target; whoever judges memory
does it after ``run_probes`` returned (every child gone). Another gputui's collector knows them by their argv
(``proc.probechild``). Only one probe runs at a time per collector, and one probe of a GPU (of a MIG device:
its GPU's bus id and its instance ids) at a time per host (``probelock``): a GPU another gputui is probing is
waited for, then left out. The child program is a string (``CHILD_SOURCE``) run by ``sys.executable -I -S
-c``: a shipped collector has no files on its host to run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from gputui.agent.gpu.probelock import ProbeLocks
from gputui.agent.proc.probechild import CONTEXT_ALLOWANCE_MIB, child_argv
from gputui.agent.protocol import (
    PROBE_BUFFER_MIB,
    PROBE_BUFFER_MIN_MIB,
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
SELF_END_AFTER_S = 0.5
"""How long after the deadline a child ends itself (``SIGALRM``) if nobody killed it: its collector died."""

CHILD_SOURCE = r"""
import ctypes, json, os, select, signal, sys, time

# Past its deadline the child ends itself (SIGALRM's default action), whoever is left to kill it: a
# collector killed or an SSH session cut mid-probe leaves no child behind.
signal.setitimer(signal.ITIMER_REAL, float(sys.argv[5]))

def say(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()

pci, size = sys.argv[2], int(sys.argv[3]) << 20
# A MIG device is named by its UUID, made CUDA's only device by CUDA_VISIBLE_DEVICES: device 0.
mig = pci.startswith("MIG-")
say(begin="load")
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    say(step="load", error="unavailable", detail=str(exc)[:200])
    sys.exit(3)
need = ("cuInit", "cuDeviceGet" if mig else "cuDeviceGetByPCIBusId", "cuCtxCreate_v2", "cuMemAlloc_v2",
        "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemFree_v2", "cuCtxDestroy_v2", "cuGetErrorName")
missing = [name for name in need if not hasattr(lib, name)]
if missing:
    say(step="load", error="unavailable", detail="libcuda.so.1 has no " + ", ".join(missing))
    sys.exit(3)
lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
if mig:
    lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
else:
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
if mig:
    step("device", lambda: lib.cuDeviceGet(ctypes.byref(device), 0))
else:
    step("device", lambda: lib.cuDeviceGetByPCIBusId(ctypes.byref(device), pci.encode("ascii")))
mode = ctypes.c_int(-1)
if hasattr(lib, "cuDeviceGetAttribute"):  # CU_DEVICE_ATTRIBUTE_COMPUTE_MODE
    lib.cuDeviceGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
    if lib.cuDeviceGetAttribute(ctypes.byref(mode), 20, device.value) != 0:
        mode.value = -1
say(begin="context")
start = time.monotonic()
code = lib.cuCtxCreate_v2(ctypes.byref(context), 0, device.value)
ms = round((time.monotonic() - start) * 1000.0, 3)
if code == 46 and mode.value == 3:  # CUDA_ERROR_DEVICE_UNAVAILABLE in CU_COMPUTEMODE_EXCLUSIVE_PROCESS
    say(step="context", ms=ms, skip="exclusive-process mode, and another process holds its one context")
    sys.exit(4)
if code != 0:
    say(step="context", ms=ms, code=code, error=name_of(code))
    sys.exit(1)
say(step="context", ms=ms)
step("alloc", lambda: lib.cuMemAlloc_v2(ctypes.byref(pointer), size))
say(holding=os.getpid())
ready, _, _ = select.select([sys.stdin], [], [], float(sys.argv[4]))
if ready:
    sys.stdin.readline()
# Two buffers of the host's memory, no more (eight GPUs probe at once): the pattern doubled in place.
written = bytearray(size)
written[: min(size, 251)] = bytes(range(251))[:size]
filled = min(size, 251)
while filled < size:
    more = min(filled, size - filled)
    written[filled : filled + more] = memoryview(written)[:more]
    filled += more
back = bytearray(size)
step("write", lambda: lib.cuMemcpyHtoD_v2(pointer.value, (ctypes.c_char * size).from_buffer(written), size))
step("read", lambda: lib.cuMemcpyDtoH_v2((ctypes.c_char * size).from_buffer(back), pointer.value, size))
say(begin="compare")
start = time.monotonic()
same = back == written
took = round((time.monotonic() - start) * 1000.0, 3)
if not same:
    say(step="compare", ms=took, error="read-back differs from what was written")
    sys.exit(1)
say(step="compare", ms=took)
step("free", lambda: lib.cuMemFree_v2(pointer.value))
step("destroy", lambda: lib.cuCtxDestroy_v2(context))
sys.exit(0)
"""
"""The child: argv is ``proc.probechild.MARKER``, the PCI bus id (a MIG device's UUID), the buffer in MiB, the
seconds it holds the buffer for a look and the seconds until its deadline (``probechild.child_argv``)."""
BUSY = "another gputui is probing it"
"""The skip of a GPU whose host-wide lock another gputui held past the deadline (``probelock``)."""

MIG_NONE = "mig_none"
"""A target's flag: its GPU is in MIG mode with no MIG device, so nothing on it can take work."""
LISTS_A_PROCESS = "it lists a process (--force probes it anyway)"
_MIG_UUID_RE = re.compile(r"MIG-[0-9A-Za-z][0-9A-Za-z/.-]{0,76}")
"""What ``CUDA_VISIBLE_DEVICES`` may be given of a MIG device's UUID (``MIG-<uuid>``, or the older
``MIG-GPU-<uuid>/<gi>/<ci>``): nothing else of NVML's text reaches a child's environment."""

_one_at_a_time = threading.Lock()


def probe_targets(
    gpus: list[dict[str, Any]],
    words: list[str] | None,
    force: bool,
    mig: dict[int, list[dict[str, Any]] | str] | None = None,
) -> list[dict[str, Any]]:
    """Each GPU to probe (all, or those named by index or UUID) with why it is skipped, if it is: a GPU that
    lists a process (unless ``force``), one that could not be read, one without a PCI bus id.

    ``mig``: the MIG devices of the GPUs in MIG mode (``NvmlBackend.mig_devices``): such a GPU is one target
    per MIG device (``"mig"``: its uuid, profile, instance ids, memory), each skipped when it lists a process
    (unless ``force``); one with none is ``MIG_NONE``; one whose MIG devices cannot be read is
    ``"unavailable"`` (why), as is every GPU where which are in MIG mode is unknown (``mig[-1]``).
    """
    from gputui.agent.args import select_gpus

    mig = mig or {}
    unknown = mig.get(-1)
    targets: list[dict[str, Any]] = []
    chosen = select_gpus(gpus, words)
    for gpu in chosen:
        target = {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id")}
        devices = mig.get(gpu["index"]) if isinstance(gpu.get("index"), int) else None
        if gpu.get("error"):
            target["skip"] = "the GPU could not be read: " + str(gpu["error"])[:120]
        elif not isinstance(gpu.get("pci_bus_id"), str):
            target["skip"] = "no PCI bus id to find it by"
        elif isinstance(devices, str) or (devices is None and isinstance(unknown, str)):
            target["unavailable"] = "its MIG devices could not be read: " + str(devices or unknown)[:120]
        elif devices == []:
            target[MIG_NONE] = True
        elif devices:
            targets.extend(_mig_targets(target, devices, force))
            continue
        elif gpu.get("processes") and not force:
            target["skip"] = LISTS_A_PROCESS
        targets.append(target)
    return targets


def _mig_targets(gpu: dict[str, Any], devices: list[dict[str, Any]], force: bool) -> list[dict[str, Any]]:
    """One target per MIG device of a GPU (``gpu``: its target's index, uuid and bus id)."""
    targets = []
    for device in devices:
        uuid = device.get("uuid")
        about = {key: device.get(key) for key in ("slot", "profile", "gi", "ci")}
        about["uuid"] = uuid
        about["memory_mib"] = device.get("memory_total_mib")
        target = dict(gpu, mig=about)
        if not isinstance(uuid, str) or not _MIG_UUID_RE.fullmatch(uuid):
            target["unavailable"] = "its MIG device has no UUID that CUDA takes"
        elif device.get("pids") and not force:
            target["skip"] = LISTS_A_PROCESS
        targets.append(target)
    return targets


def _not_probed(target: dict[str, Any]) -> bool:
    return bool(target.get("skip") or target.get("unavailable") or target.get(MIG_NONE))


def lock_key(target: dict[str, Any]) -> str:
    """What a target's host-wide lock is named by (``probelock.lock_name``): its GPU's PCI bus id, and for a
    MIG device its GPU and compute instance ids (its MIG device index where NVML gave none)."""
    pci = str(target["pci_bus_id"])
    about = target.get("mig")
    if not isinstance(about, dict):
        return pci
    gi, ci = about.get("gi"), about.get("ci")
    if isinstance(gi, int) and isinstance(ci, int) and 0 <= gi < 10000 and 0 <= ci < 10000:
        return f"{pci}/gi{gi}ci{ci}"
    return f"{pci}/mig{about.get('slot')}"


def buffer_for(target: dict[str, Any], buffer_mib: int) -> int:
    """The buffer a target's child allocates: ``buffer_mib``, capped for a MIG device to what it holds beside
    a context (``probechild.CONTEXT_ALLOWANCE_MIB``)."""
    about = target.get("mig")
    memory = about.get("memory_mib") if isinstance(about, dict) else None
    if not isinstance(memory, int) or memory <= 0:
        return buffer_mib
    return max(PROBE_BUFFER_MIN_MIB, min(buffer_mib, memory - CONTEXT_ALLOWANCE_MIB))


def _child_env(target: dict[str, Any]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CUDA_VISIBLE")}
    env.pop("CUDA_DEVICE_ORDER", None)
    about = target.get("mig")
    if isinstance(about, dict):
        env["CUDA_VISIBLE_DEVICES"] = about["uuid"]  # checked by _mig_targets
    return env


def _cuda_bus_id(pci: str) -> str:
    """NVML's ``00000000:17:00.0`` as CUDA takes it (``0000:17:00.0``)."""
    domain, _, rest = pci.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else pci


class _Child:
    def __init__(self, target: dict[str, Any], buffer_mib: int, left_s: float, lock_fd: int | None) -> None:
        self.target = target
        self.steps: list[dict[str, Any]] = []
        self.began: str | None = None
        self.ended: dict[str, Any] | None = None
        self.skip: str | None = None
        self.visible: bool | None = None
        self.abandoned = False
        self.partial = b""
        about = target.get("mig")
        argv = child_argv(
            sys.executable,
            CHILD_SOURCE,
            about["uuid"] if isinstance(about, dict) else _cuda_bus_id(target["pci_bus_id"]),
            buffer_mib,
            VISIBLE_WAIT_S,
            left_s + SELF_END_AFTER_S,
        )
        # The host-wide lock of its GPU goes with the child: held as long as the child lives.
        self.proc = subprocess.Popen(  # noqa: S603 - fixed argv; the bus id is the collector's own NVML's
            argv,
            pass_fds=() if lock_fd is None else (lock_fd,),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_child_env(target),
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
                if isinstance(line.get("skip"), str):
                    self.skip = line["skip"][:120]
                elif isinstance(line.get("error"), str):
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

    def signal_kill(self) -> None:
        """SIGKILL the child's group (it and anything the driver forked)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass


_stuck_lock = threading.Lock()
_stuck_pids: set[int] = set()
"""Children that did not die when killed (stuck in the driver), until they do: hidden from every sample."""


def _hidden(running: list[_Child]) -> frozenset[int]:
    with _stuck_lock:
        return frozenset(c.proc.pid for c in running if c.proc.returncode is None) | frozenset(_stuck_pids)


def _abandon(child: _Child, hide: Callable[[frozenset[int]], None]) -> None:
    """Leave a child that cannot be killed to a thread that reaps it whenever it dies; hidden until then."""
    child.abandoned = True
    with _stuck_lock:
        _stuck_pids.add(child.proc.pid)

    def reap() -> None:
        child.proc.wait()
        with _stuck_lock:
            _stuck_pids.discard(child.proc.pid)
        if not _one_at_a_time.locked():  # a probe under way publishes its own set when it ends
            hide(_hidden([]))

    threading.Thread(target=reap, name="gputui-probe-reaper", daemon=True).start()


def _report(child: _Child, result: str, total_ms: float) -> dict[str, Any]:
    out = dict(child.target, result=result, steps=child.steps, ms=round(total_ms, 1), visible=child.visible)
    if result == PROBE_SKIPPED:
        out["skip"] = child.skip
    elif child.ended is not None:
        out["step"] = child.ended["step"]
        out["error"] = child.ended.get("error")
        out["code"] = child.ended.get("code")
        if child.ended.get("detail"):
            out["detail"] = child.ended["detail"]
    elif result in (PROBE_HUNG, PROBE_STUCK):
        out["step"] = child.began
    return out


def _read_until(
    children: list[_Child],
    deadline: float,
    seen: Callable[[int, int], bool | None],
    locks: ProbeLocks,
    hide: Callable[[frozenset[int]], None],
) -> None:
    """Read every child's lines until each closed its output or ``deadline`` (monotonic) passed. A child
    that closed its output has ended (or is ending): its GPU's lock is left to it, and is free with it, and
    it is reaped as soon as it exited, so that no other gputui on the host sees it as a zombie while the
    other GPUs' children run (its pid then leaves ``hide``: it may be another process's now)."""
    import selectors

    selector = selectors.DefaultSelector()
    ending: list[_Child] = []
    try:
        for child in children:
            stdout = child.proc.stdout
            if stdout is not None:
                os.set_blocking(stdout.fileno(), False)
                selector.register(stdout, selectors.EVENT_READ, child)
        open_streams = len(selector.get_map())
        while open_streams and time.monotonic() < deadline:
            reaped = [child for child in ending if child.proc.poll() is not None]
            if reaped:
                ending = [child for child in ending if child not in reaped]
                hide(_hidden(children))
            for key, _ in selector.select(
                max(0.0, min(0.05 if ending else 0.2, deadline - time.monotonic()))
            ):
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
                    locks.release_one(lock_key(child.target))
                    ending.append(child)
    finally:
        selector.close()


def _ended(child: _Child, code: int) -> str:
    """What a child that exited by itself with ``code`` found."""
    if code == -signal.SIGALRM:  # it ended itself at its own deadline, a moment before it was killed
        return PROBE_HUNG
    if child.skip is not None:
        return PROBE_SKIPPED
    if code == 0 and child.ended is None:
        return PROBE_OK
    if child.ended is not None and child.ended.get("error") == PROBE_UNAVAILABLE:
        return PROBE_UNAVAILABLE
    if child.ended is None:  # died without saying why (a signal, a crash in the library)
        child.ended = {"step": child.began, "error": f"the probe exited with status {code}"}
    return PROBE_FAILED


def run_probes(
    targets: list[dict[str, Any]],
    deadline_s: float = PROBE_DEADLINE_S,
    buffer_mib: int = PROBE_BUFFER_MIB,
    seen: Callable[[int, int], bool | None] = lambda index, pid: None,
    hide: Callable[[frozenset[int]], None] = lambda pids: None,
    locks: ProbeLocks | None = None,
    wait_until: float | None = None,
) -> list[dict[str, Any]]:
    """Probe every target not skipped, in parallel, within ``deadline_s``; one report per target, in order.

    First each target's host-wide lock (``locks``, by ``lock_key``; made here when None): one another gputui
    holds is waited for until ``wait_until`` (monotonic; None: ``deadline_s`` from now), then that GPU is
    skipped (``BUSY``, ``"busy": true``). A target that cannot be probed (``"unavailable"``, ``MIG_NONE``) is
    reported unavailable; a MIG device's buffer is ``buffer_for`` it (``"buffer_mib"`` where less). Every
    child is gone within ``deadline_s`` plus ``KILL_GRACE_S`` of its start, or reported stuck and left to a
    reaper. ``seen(index, pid)``: whether NVML lists ``pid`` on GPU ``index`` now (called while the buffer
    lives); ``hide(pids)``: the probe children alive now, for the process sampler to leave out (at the end:
    those stuck, until they die). Raises RuntimeError when another probe is running on this collector.
    """
    if not _one_at_a_time.acquire(False):
        raise RuntimeError("another probe is running on this host")
    children: list[_Child] = []
    reports: dict[int, dict[str, Any]] = {}
    targets = list(targets)
    locks = ProbeLocks() if locks is None else locks
    try:
        wanted = [lock_key(t) for t in targets if not _not_probed(t)]
        busy = locks.acquire(wanted, time.monotonic() + deadline_s if wait_until is None else wait_until)
        started = time.monotonic()
        deadline = started + deadline_s
        for position, target in enumerate(targets):
            if target.get("skip"):
                reports[position] = dict(target, result=PROBE_SKIPPED, steps=[], ms=0.0, visible=None)
                continue
            if _not_probed(target):
                said = {key: value for key, value in target.items() if key != "unavailable"}
                reports[position] = dict(
                    said,
                    result=PROBE_UNAVAILABLE,
                    steps=[],
                    ms=0.0,
                    visible=None,
                    detail=target.get("unavailable"),
                )
                continue
            if lock_key(target) in busy:
                reports[position] = dict(
                    target, result=PROBE_SKIPPED, steps=[], ms=0.0, visible=None, skip=BUSY, busy=True
                )
                continue
            try:
                lock_fd = locks.fd(lock_key(target))
                size = buffer_for(target, buffer_mib)
                if size != buffer_mib:
                    target = targets[position] = dict(target, buffer_mib=size)
                children.append(_Child(target, size, max(0.0, deadline - time.monotonic()), lock_fd))
            except OSError as exc:
                reports[position] = dict(
                    target, result=PROBE_UNAVAILABLE, steps=[], ms=0.0, visible=None, detail=str(exc)[:200]
                )
            hide(_hidden(children))  # before the next child starts: none is ever sampled unhidden
        _read_until(children, deadline, seen, locks, hide)
        for child in children:  # those that end in time
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        overdue = [child for child in children if child.proc.poll() is None]
        elapsed_ms = (time.monotonic() - started) * 1000.0
        for child in overdue:  # all at once: none lives past the deadline by more than the grace
            child.signal_kill()
        grace_end = time.monotonic() + KILL_GRACE_S
        for child in children:
            position = targets.index(child.target)
            if child in overdue:
                try:
                    code = child.proc.wait(max(0.0, grace_end - time.monotonic()))
                except subprocess.TimeoutExpired:  # stuck in the driver: never waited on here
                    _abandon(child, hide)
                    reports[position] = _report(child, PROBE_STUCK, elapsed_ms)
                    continue
                reports[position] = _report(child, PROBE_HUNG, elapsed_ms)
                continue
            code = child.proc.returncode
            result = _ended(child, code)
            if result == PROBE_HUNG:
                reports[position] = _report(child, result, elapsed_ms)
            else:
                reports[position] = _report(child, result, sum(s.get("ms") or 0.0 for s in child.steps))
        return [reports[position] for position in range(len(targets))]
    finally:
        for child in children:
            if not child.abandoned and child.proc.poll() is None:  # left running by an exception
                child.signal_kill()
            for stream in (child.proc.stdin, child.proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        locks.release()
        hide(_hidden([]))
        _one_at_a_time.release()
