"""The model of a GPU's own fitness: the collector's raw figures, its Xid history, the host's kernel-log note.

Records with their JSON form (``gpus[i].health`` and ``kernel_log`` of a snapshot; the
collector's side is ``gputui.agent.gpu.fitness``). A figure the driver would not give is None, never a fake
zero or False. ``action``, ``causes``, ``notes`` and ``needs_reset`` are derived by
``gputui.core.verdict.fitness`` (one function, every view renders its result); a collector's dict has
none of them.
"""

from __future__ import annotations

from gputui.core.model.record import Record
from gputui.core.text import SafeText, visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number >= 0 else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _time(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and 0 <= number < 1e12 else None


FABRIC_MANAGER_STATES = ("running", "not running")
"""What the collector says of the fabric manager's process (``GpuFitness.fabric_manager``)."""


def _choice(value: Any, allowed: tuple[str, ...]) -> str | None:
    return value if isinstance(value, str) and value in allowed else None


def _text(value: Any, limit: int = 200) -> SafeText:
    return visible(value[:limit] if isinstance(value, str) else "")


class XidEvent(Record):
    """One Xid of one GPU (or of a PCI address no GPU has).

    Attributes:
        xid: The Xid number.
        time: Epoch seconds it was logged (kernel log) or seen (NVML event); None when not known.
        source: "kernel log" or "NVML event".
        detail: The rest of the kernel-log line (untrusted text), "" for an NVML event.
        cleared: Why it no longer counts ("GPU reset since", "driver reloaded since"), None while it counts.
        pci: The PCI address of an Xid no GPU has ("0000:99:00"); None for a GPU's own.
    """

    xid: int
    time: float | None = None
    source: str = ""
    detail: SafeText = SafeText("")
    cleared: str | None = None
    pci: SafeText | None = None

    @classmethod
    def from_dict(cls, data: Any) -> XidEvent | None:
        if not isinstance(data, dict):
            return None
        xid = _int(data.get("xid"))
        if xid is None:
            return None
        cleared = data.get("cleared")
        pci = data.get("pci")
        return cls(
            xid=xid,
            time=_time(data.get("time")),
            source=_text(data.get("source"), 40),
            detail=_text(data.get("detail")),
            cleared=visible(cleared[:80]) if isinstance(cleared, str) else None,
            pci=visible(pci[:40]) if isinstance(pci, str) else None,
        )


def _events(value: Any) -> tuple[XidEvent, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(e for e in (XidEvent.from_dict(item) for item in value[:256]) if e is not None)


class GpuFitness(Record):
    """A GPU's fitness figures (NVML's, or DCGM's in the fleet view) and Xid history.

    Attributes:
        remapped_rows_correctable, remapped_rows_uncorrectable: Rows remapped for each kind of error.
        remap_pending: A row remap waits for a reset of the GPU to take effect.
        remap_failure: A row could not be remapped (the GPU needs service).
        retired_pages_pending: A page retirement waits for a reset.
        ecc_enabled: Whether ECC is on.
        ecc_uncorrected_volatile: Uncorrected ECC errors since the last reset or driver load.
        ecc_uncorrected_aggregate: Uncorrected ECC errors over the GPU's life.
        clock_event_reasons: NVML's clock-event reason bits (HW slowdown 0x8, HW thermal 0x40, power brake
            0x80 mean hardware trouble).
        persistence_mode: Whether persistence mode is on.
        reset_required: NVML answered a fitness query with RESET_REQUIRED.
        recovery_action: The driver's own recovery action (NVML field 230, R565 and later:
            ``NVML_GPU_RECOVERY_ACTION_*``, 0 none); None where the driver reports none.
        fabric_state, fabric_status: The GPU's registration with the NVLink fabric
            (``NVML_GPU_FABRIC_STATE_*`` and the ``nvmlReturn_t`` it ended with); None on a GPU without one.
        fabric_health_mask: The fabric's health bits (``NVML_GPU_FABRIC_HEALTH_MASK_*``); None where not read.
        fabric_manager: Whether the fabric manager's process runs on the host ("running", "not running"),
            looked for only when a GPU's fabric registration is not complete; None otherwise.
        read_time: Epoch seconds the figures were read; None where not known.
        xids: The Xid history of this boot, oldest first (cleared ones included, marked).
        action, causes, notes, needs_reset: Derived (``verdict.fitness.assess``), see the module docstring.
    """

    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_pending: bool | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    clock_event_reasons: int | None = None
    persistence_mode: bool | None = None
    reset_required: bool = False
    recovery_action: int | None = None
    fabric_state: int | None = None
    fabric_status: int | None = None
    fabric_health_mask: int | None = None
    fabric_manager: str | None = None
    read_time: float | None = None
    xids: tuple[XidEvent, ...] = ()
    action: str | None = None
    causes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    needs_reset: bool = False

    @classmethod
    def from_dict(cls, data: Any) -> GpuFitness | None:
        """The fitness in a collector's (or a snapshot's) dict; None when there is none."""
        if not isinstance(data, dict):
            return None
        return cls(
            remapped_rows_correctable=_int(data.get("remapped_rows_correctable")),
            remapped_rows_uncorrectable=_int(data.get("remapped_rows_uncorrectable")),
            remap_pending=_flag(data.get("remap_pending")),
            remap_failure=_flag(data.get("remap_failure")),
            retired_pages_pending=_flag(data.get("retired_pages_pending")),
            ecc_enabled=_flag(data.get("ecc_enabled")),
            ecc_uncorrected_volatile=_int(data.get("ecc_uncorrected_volatile")),
            ecc_uncorrected_aggregate=_int(data.get("ecc_uncorrected_aggregate")),
            clock_event_reasons=_int(data.get("clock_event_reasons")),
            persistence_mode=_flag(data.get("persistence_mode")),
            reset_required=data.get("reset_required") is True,
            recovery_action=_int(data.get("recovery_action")),
            fabric_state=_int(data.get("fabric_state")),
            fabric_status=_int(data.get("fabric_status")),
            fabric_health_mask=_int(data.get("fabric_health_mask")),
            fabric_manager=_choice(data.get("fabric_manager"), FABRIC_MANAGER_STATES),
            read_time=_time(data.get("read_time")),
            xids=_events(data.get("xids")),
            action=_text(data.get("action"), 20) or None,
            causes=tuple(_text(c) for c in data.get("causes") or () if isinstance(c, str))[:16],
            notes=tuple(_text(c) for c in data.get("notes") or () if isinstance(c, str))[:32],
            needs_reset=data.get("needs_reset") is True,
        )


class KernelLogNote(Record):
    """Where a host's Xid history comes from.

    Attributes:
        source: "/dev/kmsg", "dmesg" (or a test source); None when it could not be read.
        error: Why it could not be read (then there is no Xid history, which is not "no Xid").
        unmatched: Xids logged for PCI addresses no GPU of the host has.
    """

    source: SafeText | None = None
    error: SafeText | None = None
    unmatched: tuple[XidEvent, ...] = ()

    @classmethod
    def from_dict(cls, data: Any) -> KernelLogNote | None:
        if not isinstance(data, dict):
            return None
        source, error = data.get("source"), data.get("error")
        return cls(
            source=visible(source[:200]) if isinstance(source, str) else None,
            error=visible(error[:400]) if isinstance(error, str) else None,
            unmatched=_events(data.get("unmatched")),
        )
