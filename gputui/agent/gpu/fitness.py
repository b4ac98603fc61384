"""Per-GPU fitness: row remapping, retired pages, uncorrected ECC, clock-event reasons, persistence, Xids.

The NVML queries run inside the backend's device jobs (``read_gpu_fitness``), so they are bounded by the same
per-device deadline and isolation as every other call; a query this GPU, driver or user cannot answer
(NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION) is a blank, never an error. RESET_REQUIRED from any of
them is itself a fact: the GPU needs a reset.

``FitnessMonitor`` decides when to read (every ``FITNESS_INTERVAL_S``, on every forced sample and after a
kill; the collector reads it with every memory sample while a clean-slate check waits), gathers Xids from
NVML events and the kernel log (``xid.KernelLog``), applies the rule that an event stops counting after a
later reset of its GPU (one the kernel log shows or one gputui performed and noted with ``note_resets``) or a
driver reload, and puts each GPU's ``health`` dict on the sample. What it means is the client's
(``gputui.core.verdict.fitness``).

A reset gputui performed outlives the collector that ran it: ``ResetRecord`` keeps it in the state folder
(``gpu-resets.json``, by GPU UUID, for this boot only, through the safe opener), and every collector on the
host reads it with its fitness, so a ``gputui check`` after a ``gputui reset`` (each a collector of its own)
does not hold the Xids the reset cleared against the GPU.
"""

from __future__ import annotations

import time

from gputui.agent.gpu.nvmlapi import nvml_function_missing, nvml_is_lost, pynvml
from gputui.agent.gpu.xid import KernelLog, newest_kept
from gputui.agent.pci import pci_key, pci_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

FITNESS_INTERVAL_S = 30.0
"""Seconds between fitness reads (besides forced samples and kills)."""
MAX_XIDS_PER_GPU = 32
MAX_UNMATCHED = 16
MAX_EVENTS_PER_WAIT = 256
NVML_ERROR_RESET_REQUIRED = 16
XID_EVENT_TYPE = 0x8
"""nvmlEventTypeXidCriticalError."""
RECOVERY_EVENT_TYPE = 0x8000
"""nvmlEventTypeGpuRecoveryAction (R565 and later): the driver's recovery action changed; its data is the new
action."""
FIELD_RECOVERY_ACTION = 230
"""NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, read through ``nvmlDeviceGetFieldValues`` (R565 and later)."""
FABRIC_STATE_NOT_SUPPORTED = 0
FABRIC_STATE_COMPLETED = 3
"""NVML_GPU_FABRIC_STATE_*: a GPU without an NVLink fabric says NOT_SUPPORTED; COMPLETED once registered."""
FABRIC_MANAGER_NAME = "nv-fabricmanager"
"""The fabric manager's process name, looked for when a registration is not complete."""
COMM_MAX_CHARS = 15
"""What the kernel keeps of a process name in ``/proc/PID/comm`` (TASK_COMM_LEN less its NUL):
``nv-fabricmanager`` is listed there as ``nv-fabricmanage``."""
RESET_RECORD_FILE = "gpu-resets.json"
RESET_RECORD_VERSION = 1
RESET_RECORD_MAX_BYTES = 64 << 10
MAX_RESET_RECORDS = 64
"""GPUs a reset record keeps (the most recently reset)."""
_FIELD_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
"""``nvmlValue_t``'s member for each ``NVML_VALUE_TYPE_*`` (0 to 6)."""
SAME_EVENT_S = 5.0
"""An NVML event and a kernel-log line with the same Xid this close in time are one event."""
SOURCE_NVML = "NVML event"
SOURCE_KERNEL = "kernel log"


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None) if pynvml is not None and isinstance(exc, pynvml.NVMLError) else None


def read_gpu_fitness(handle: Any) -> dict[str, Any]:
    """The NVML fitness figures of one GPU (runs on its worker thread; raises only for a lost GPU)."""
    nv = pynvml
    reset_required = False

    def query(fn: Callable[[], Any]) -> Any:
        nonlocal reset_required
        try:
            return fn()
        except Exception as exc:
            if nvml_is_lost(exc):
                raise
            if _code(exc) == NVML_ERROR_RESET_REQUIRED:
                reset_required = True
                return None
            if (nv is not None and isinstance(exc, nv.NVMLError)) or nvml_function_missing(exc):
                return None
            raise

    rows = query(lambda: nv.nvmlDeviceGetRemappedRows(handle))
    retired = query(lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    ecc_mode = query(lambda: nv.nvmlDeviceGetEccMode(handle))
    ecc_on = None if ecc_mode is None else bool(ecc_mode[0])
    uncorrected = query(lambda: nv.nvmlDeviceGetTotalEccErrors(handle, 1, 0)) if ecc_on is not False else None
    aggregate = query(lambda: nv.nvmlDeviceGetTotalEccErrors(handle, 1, 1)) if ecc_on is not False else None
    reasons = query(lambda: _clock_event_reasons(handle))
    persistence = query(lambda: nv.nvmlDeviceGetPersistenceMode(handle))
    recovery = query(lambda: _recovery_action(handle))
    fabric = query(lambda: _fabric_info(handle))
    out = {
        "remapped_rows_correctable": None if rows is None else int(rows[0]),
        "remapped_rows_uncorrectable": None if rows is None else int(rows[1]),
        "remap_pending": None if rows is None else bool(rows[2]),
        "remap_failure": None if rows is None else bool(rows[3]),
        "retired_pages_pending": None if retired is None else bool(retired),
        "ecc_enabled": ecc_on,
        "ecc_uncorrected_volatile": None if uncorrected is None else int(uncorrected),
        "ecc_uncorrected_aggregate": None if aggregate is None else int(aggregate),
        "clock_event_reasons": None if reasons is None else int(reasons),
        "persistence_mode": None if persistence is None else bool(persistence),
        "reset_required": reset_required,
        "recovery_action": recovery,
        "read_time": time.time(),
    }
    if fabric is not None:
        out.update(fabric)
    return out


def _recovery_action(handle: Any) -> int | None:
    """The driver's recovery action for this GPU (field 230); None where the driver has no such field."""
    (value,) = pynvml.nvmlDeviceGetFieldValues(handle, [FIELD_RECOVERY_ACTION])
    if int(value.nvmlReturn) != 0:
        return None
    kind = int(value.valueType)
    if not 0 < kind < len(_FIELD_VALUE_MEMBERS):
        return None
    number = getattr(value.value, _FIELD_VALUE_MEMBERS[kind])
    return int(number) if int(number) >= 0 else None


def _fabric_info(handle: Any) -> dict[str, Any] | None:
    """The GPU's NVLink fabric registration (state, status, health bits); None on a GPU without a fabric.

    The versioned call first (v3, then v2: a driver refuses a version it does not know), then the first form.
    """
    import ctypes

    nv = pynvml
    info: Any = None
    for name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
        struct = getattr(nv, name, None)
        if struct is None or not hasattr(nv, "nvmlDeviceGetGpuFabricInfoV"):
            continue
        try:
            candidate = struct()
            nv.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(candidate))  # the bindings pass it as given
        except Exception as exc:
            if nvml_function_missing(exc):
                break
            if _code(exc) == getattr(nv, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25):
                continue
            raise
        info = candidate
        break
    if info is None:
        info = nv.c_nvmlGpuFabricInfo_t()
        nv.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    state = int(info.state) & 0xFF  # an unsigned char in nvml.h; the bindings declare a wider field
    if state == FABRIC_STATE_NOT_SUPPORTED:
        return None
    out: dict[str, Any] = {
        "fabric_state": state,
        "fabric_status": int(info.status),
        "fabric_health_mask": int(info.healthMask) if hasattr(info, "healthMask") else None,
    }
    if state != FABRIC_STATE_COMPLETED or int(info.status) != 0:
        out["fabric_manager"] = "running" if _process_named(FABRIC_MANAGER_NAME) else "not running"
    return out


def _process_named(name: str) -> bool:
    """Whether a process of this name runs on the host (the name ``/proc/PID/stat`` gives, which the kernel
    cuts as it cuts ``comm``; never raises)."""
    from gputui.agent.proc.procfs import scan_proc

    wanted = name[:COMM_MAX_CHARS]
    return any(stat.name == wanted for stat in scan_proc().values())


def _clock_event_reasons(handle: Any) -> int:
    """The current clock-event reasons (the R535 name), else the older clocks-throttle reasons."""
    try:
        return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    except Exception as exc:
        if not nvml_function_missing(exc):
            raise
    return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


def _same_event(logged: dict[str, Any], live: dict[str, Any]) -> bool:
    """Whether a kernel-log Xid and an NVML event are one event (same Xid, moments apart)."""
    when = logged["time"]
    return logged["xid"] == live["xid"] and when is not None and abs(when - live["time"]) < SAME_EVENT_S


class XidEvents:
    """An NVML event set for critical Xids, read without waiting.

    Made and read on the backend's system worker (bounded there; making it calls no device); each GPU is
    registered from its own device job (``register``), so a GPU whose calls hang holds up only itself. A
    driver without events leaves it empty.
    """

    def __init__(self) -> None:
        self._set: Any = None
        self._index_of: dict[Any, int] = {}
        self._tried: set[int] = set()
        try:
            self._set = pynvml.nvmlEventSetCreate()
        except Exception:
            self._set = None

    def register(self, index: int, handle: Any) -> None:
        """Ask for this GPU's critical Xids, once (runs on the GPU's worker; a GPU without events is left
        out: the kernel log still may tell)."""
        import ctypes

        if self._set is None or index in self._tried:
            return
        self._tried.add(index)
        for types in (XID_EVENT_TYPE | RECOVERY_EVENT_TYPE, XID_EVENT_TYPE):
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, types, self._set)
                break
            except Exception as exc:
                if nvml_is_lost(exc):
                    raise
        else:
            return
        self._index_of[ctypes.cast(handle, ctypes.c_void_p).value] = index

    @property
    def registered(self) -> int:
        """How many GPUs deliver Xid events to this set."""
        return len(self._index_of)

    def take(self) -> list[tuple[int, int, int]]:
        """(GPU index, event type, data) of every Xid (``XID_EVENT_TYPE``: data is the Xid) and
        recovery-action event (``RECOVERY_EVENT_TYPE``) since the last call; never waits."""
        import ctypes

        out: list[tuple[int, int, int]] = []
        if self._set is None or not self._index_of:
            return out
        for _ in range(MAX_EVENTS_PER_WAIT):
            try:
                data = pynvml.nvmlEventSetWait_v2(self._set, 0)
            except Exception:
                break  # TIMEOUT: nothing more now (any other failure: try again next round)
            index = self._index_of.get(ctypes.cast(data.device, ctypes.c_void_p).value)
            if index is None:
                continue
            kind = int(data.eventType)
            if kind & XID_EVENT_TYPE:
                out.append((index, XID_EVENT_TYPE, int(data.eventData)))
            elif kind & RECOVERY_EVENT_TYPE:
                out.append((index, RECOVERY_EVENT_TYPE, int(data.eventData)))
        return out

    def close(self) -> None:
        if self._set is not None:
            try:
                pynvml.nvmlEventSetFree(self._set)
            except Exception:  # noqa: S110 - shutting down
                pass
            self._set = None


class ResetRecord:
    """The GPU resets gputui performed and verified on this host in this boot, by GPU UUID, in a file of the
    state folder (``RESET_RECORD_FILE``): what a collector that starts later needs to know of them.

    Read and written through the safe opener (a planted link, FIFO or another user's file is never believed
    nor written over), bounded (``RESET_RECORD_MAX_BYTES``, ``MAX_RESET_RECORDS``), and forgotten at a new
    boot (a record of another boot id counts for nothing). Never raises: a record that cannot be used is
    ``warning``, and the resets live in the collector's memory only.

    Args:
        boot_id: The host's boot id (None: not known; then nothing is read or written).
        path: The record file (default ``RESET_RECORD_FILE`` in the state folder).
    """

    def __init__(self, boot_id: str | None, path: str | None = None) -> None:
        import os

        from gputui.agent import safefile

        self.boot_id = boot_id
        self.path = path or os.path.join(safefile.state_dir(), RESET_RECORD_FILE)
        self.warning: str | None = None

    def read(self) -> dict[str, float]:
        """UUID -> when it was reset (epoch seconds), for this boot; {} where there is no usable record."""
        return self._read()[0]

    def _read(self) -> tuple[dict[str, float], bool]:
        """(the resets recorded in this boot, whether the file may be written: not when it is unsafe)."""
        import json
        import math

        from gputui.agent import safefile

        if self.boot_id is None:
            return {}, False
        try:
            data = safefile.read_bytes(self.path, RESET_RECORD_MAX_BYTES)
        except safefile.UnsafeFile as exc:
            self.warning = f"GPU reset record not used: {exc}"
            return {}, False  # never written over: it is not ours to replace
        if data is None:
            return {}, True
        try:
            document = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            document = None
        if not isinstance(document, dict) or document.get("version") != RESET_RECORD_VERSION:
            self.warning = f"GPU reset record not used: {self.path}: not a gputui reset record"
            return {}, True
        resets = document.get("resets")
        if document.get("boot_id") != self.boot_id or not isinstance(resets, dict):
            return {}, True  # another boot: its resets say nothing of this one
        out: dict[str, float] = {}
        for uuid, when in resets.items():
            if not isinstance(uuid, str) or not 0 < len(uuid) <= 128:
                continue
            if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
                continue
            out[uuid] = float(when)
        return _newest(out), True

    def add(self, resets: dict[str, float]) -> None:
        """Record these resets (UUID -> when) beside those already recorded in this boot."""
        import json

        from gputui.agent import safefile

        merged, writable = self._read()
        if not writable or not resets:
            return
        for uuid, when in resets.items():
            merged[uuid] = max(when, merged.get(uuid, when))
        document = {"version": RESET_RECORD_VERSION, "boot_id": self.boot_id, "resets": _newest(merged)}
        try:
            safefile.write_atomic(self.path, json.dumps(document, separators=(",", ":")).encode("utf-8"))
        except safefile.UnsafeFile as exc:
            self.warning = f"GPU reset record not kept: {exc}"


def _newest(resets: dict[str, float]) -> dict[str, float]:
    """The ``MAX_RESET_RECORDS`` most recent of these resets."""
    if len(resets) <= MAX_RESET_RECORDS:
        return resets
    return dict(sorted(resets.items(), key=lambda item: item[1])[-MAX_RESET_RECORDS:])


class FitnessMonitor:
    """When to read GPU fitness, and the Xid history that goes with it.

    Args:
        interval_s: Seconds between fitness reads.
        kernel_log: The kernel-log reader (default: the test source when set, else /dev/kmsg / dmesg).
        reset_record: Where resets gputui performed are kept for later collectors (default: the state
            folder's ``RESET_RECORD_FILE`` for this boot).
    """

    def __init__(
        self,
        interval_s: float = FITNESS_INTERVAL_S,
        kernel_log: KernelLog | None = None,
        reset_record: ResetRecord | None = None,
    ) -> None:
        self.interval_s = float(interval_s)
        self.kernel_log = kernel_log if kernel_log is not None else KernelLog()
        if reset_record is None:
            from gputui.agent.proc.procfs import read_boot_id

            reset_record = ResetRecord(read_boot_id())
        self.reset_record = reset_record
        self._reset_by_uuid: dict[str, float] = {}
        """Resets this collector performed (by GPU UUID), beside those the record holds."""
        self._last_mono = -1e18
        self._requested = True
        self._live: list[dict[str, Any]] = []
        """Xids from NVML events: {"pci", "index", "xid", "time"}."""
        self._resets: dict[tuple[int, int, int], float] = {}
        self._pci_of: dict[Any, tuple[int, int, int] | None] = {}
        self._pci_by_uuid: dict[str, tuple[int, int, int] | None] = {}
        self._figures: dict[int, dict[str, Any]] = {}
        self._xids: dict[int, list[dict[str, Any]]] = {}
        self._unmatched: list[dict[str, Any]] = []

    def request(self) -> None:
        """Read fitness with the next sample (after a kill)."""
        self._requested = True

    def note_resets(self, uuids: list[str], when: float | None = None) -> None:
        """Resets gputui performed and verified on these GPUs (by UUID, as the reset plan names them): their
        earlier Xids stop counting, for this collector and, through the reset record, for every collector
        started later in this boot; their fitness is read again with the next sample."""
        at = time.time() if when is None else when
        done = {uuid: at for uuid in uuids if isinstance(uuid, str) and uuid}
        if not done:
            return
        self._reset_by_uuid.update(done)
        self.reset_record.add(done)
        self._requested = True

    def note_reset(self, uuid: str, when: float | None = None) -> bool:
        """``note_resets`` for one GPU; whether this monitor has read that GPU already (one it has not is
        matched by its UUID once it does)."""
        self.note_resets([uuid], when)
        return self._pci_by_uuid.get(uuid) is not None

    def due(self, forced: bool) -> bool:
        """Whether this sample reads fitness (a forced sample always does)."""
        return forced or self._requested or time.monotonic() - self._last_mono >= self.interval_s

    def add_events(self, events: list[tuple[int, int, int]]) -> None:
        """The driver's events since the last call (``XidEvents.take``): each Xid joins the history, and any
        event (an Xid, a changed recovery action) has the fitness read with this sample."""
        if not events:
            return
        now = time.time()
        for index, kind, data in events:
            if kind == XID_EVENT_TYPE:
                self._live.append({"pci": self._pci_of.get(index), "index": index, "xid": data, "time": now})
        self._live = newest_kept(self._live, MAX_XIDS_PER_GPU * 8)
        self._requested = True

    def update(self, gpus: list[dict[str, Any]]) -> None:
        """Take this sample's fitness figures (``gpu["health"]`` from the backend, popped)."""
        self._last_mono = time.monotonic()
        self._requested = False
        self._pci_of = {gpu.get("index"): pci_key(gpu.get("pci_bus_id")) for gpu in gpus}
        self._pci_by_uuid.update(
            (gpu["uuid"], self._pci_of[gpu.get("index")]) for gpu in gpus if gpu.get("uuid")
        )
        self._take_resets()
        for gpu in gpus:
            figures = gpu.pop("health", None)
            if isinstance(figures, dict):
                self._figures[gpu["index"]] = figures
        self.kernel_log.read()
        self._match(gpus)

    def _take_resets(self) -> None:
        """The resets recorded in this boot (by any collector) and this collector's own, by PCI address."""
        resets = self.reset_record.read()
        for uuid, when in self._reset_by_uuid.items():
            resets[uuid] = max(when, resets.get(uuid, when))
        for uuid, when in resets.items():
            key = self._pci_by_uuid.get(uuid)
            if key is not None and when > self._resets.get(key, float("-inf")):
                self._resets[key] = when

    def _cleared(self, key: tuple[int, int, int] | None, when: float | None) -> str | None:
        """Why an event at ``when`` no longer counts (a later reset or driver load), else None."""
        if when is None:
            return None
        log = self.kernel_log
        if log.driver_load_time is not None and log.driver_load_time > when:
            return "driver reloaded since"
        if key is not None:
            for resets in (self._resets, log.recovered):
                reset = resets.get(key)
                if reset is not None and reset > when:
                    return "GPU reset since"
        return None

    def _match(self, gpus: list[dict[str, Any]]) -> None:
        by_key = {}
        for gpu in gpus:
            key = pci_key(gpu.get("pci_bus_id"))
            if key is not None:
                by_key[key] = gpu["index"]
        xids: dict[int, list[dict[str, Any]]] = {}
        unmatched: list[dict[str, Any]] = []
        for event in self.kernel_log.events:
            entry = {
                "xid": event["xid"],
                "time": event["time"],
                "source": SOURCE_KERNEL,
                "detail": event["detail"],
                "cleared": self._cleared(event["pci"], event["time"]),
            }
            index = by_key.get(event["pci"])
            if index is None:
                unmatched.append(dict(entry, pci=pci_text(event["pci"])))
            else:
                xids.setdefault(index, []).append(entry)
        for event in self._live:
            listed = xids.setdefault(event["index"], [])
            if any(_same_event(e, event) for e in listed):
                continue  # the kernel log has it, with its detail
            listed.append(
                {
                    "xid": event["xid"],
                    "time": event["time"],
                    "source": SOURCE_NVML,
                    "detail": "",
                    "cleared": self._cleared(event["pci"], event["time"]),
                }
            )
        for index, listed in xids.items():
            listed.sort(key=lambda e: e["time"] or 0.0)
            xids[index] = newest_kept(listed, MAX_XIDS_PER_GPU)
        self._xids = xids
        self._unmatched = newest_kept(unmatched, MAX_UNMATCHED)

    def apply(self, gpus: list[dict[str, Any]]) -> None:
        """Put each GPU's last fitness (figures and Xids) on this sample's GPU dicts."""
        for gpu in gpus:
            gpu.pop("health", None)
            index = gpu.get("index")
            figures = self._figures.get(index) if isinstance(index, int) else None
            xids = self._xids.get(index, []) if isinstance(index, int) else []
            if figures is None and not xids and self.kernel_log.source is None and not self.kernel_log.error:
                continue
            fitness = dict(figures or {})
            fitness["xids"] = [dict(e) for e in xids]
            gpu["health"] = fitness

    def kernel_log_note(self) -> dict[str, Any] | None:
        """The host's kernel-log part: where Xids were read, why they could not be, Xids no GPU has."""
        log = self.kernel_log
        if log.source is None and log.error is None:
            return None
        return {
            "source": log.source if log.error is None else None,
            "error": log.error,
            "unmatched": [dict(e) for e in self._unmatched],
        }

    def close(self) -> None:
        self.kernel_log.close()
