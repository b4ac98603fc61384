"""The readiness probe's report as the client keeps it: did each GPU take work (``agent.gpu.probe``).

Read from the collector's ``probe`` answer without trust: a result the protocol does not name, a step that is
not one, a negative time, text over its cap: each is dropped or cut, never a traceback.
"""

from __future__ import annotations

from gputui.agent.protocol import PROBE_RESULTS, PROBE_SKIPPED, PROBE_STEPS, PROBE_UNAVAILABLE
from gputui.core.model.record import Record
from gputui.core.model.wire import opt_float, opt_int
from gputui.core.text import SafeText, visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _text(value: Any, limit: int) -> SafeText | None:
    return visible(value[:limit]) if isinstance(value, str) and value else None


def _ms(value: Any) -> float | None:
    number = opt_float(value)
    return number if number is not None and 0.0 <= number < 1e9 else None


class ProbeStep(Record):
    """One step of a GPU's probe and how long it took (``protocol.PROBE_STEPS``)."""

    step: str
    ms: float | None = None
    error: SafeText | None = None


class MigProbe(Record):
    """The MIG device a probe ran on (a GPU in MIG mode is probed one MIG device at a time).

    Attributes:
        uuid: Its UUID (``MIG-…``), what ``CUDA_VISIBLE_DEVICES`` takes.
        profile: Its profile (``1g.10gb``), from its name.
        gi, ci: Its GPU instance and compute instance ids.
        memory_mib: Its memory.
        slot: Its MIG device index on the GPU.
    """

    uuid: SafeText | None = None
    profile: SafeText | None = None
    gi: int | None = None
    ci: int | None = None
    memory_mib: int | None = None
    slot: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> MigProbe | None:
        if not isinstance(data, dict):
            return None

        def small(value: Any) -> int | None:
            number = opt_int(value)
            return number if number is not None and 0 <= number < 1 << 40 else None

        return cls(
            uuid=_text(data.get("uuid"), 80),
            profile=_text(data.get("profile"), 40),
            gi=small(data.get("gi")),
            ci=small(data.get("ci")),
            memory_mib=small(data.get("memory_mib")),
            slot=small(data.get("slot")),
        )


class GpuProbe(Record):
    """One GPU's probe (of a GPU in MIG mode: one per MIG device, ``mig``).

    Attributes:
        index, uuid, pci_bus_id: The GPU.
        result: ``PROBE_RESULTS``: ok, failed, hung (killed at the deadline), stuck (not killable),
            unavailable (the probe cannot run on this host), skipped (``detail`` says why).
        steps: The steps that ended, in order, with their times.
        ms: The time of the whole probe (ok, failed) or until the deadline (hung, stuck).
        step: The step it failed or hung in.
        error: The CUDA error's name (``CUDA_ERROR_SYSTEM_NOT_READY``), or what went wrong otherwise.
        code: The CUDA error number.
        visible: Whether NVML listed the probe's allocation while it lived (None: not looked at).
        detail: Why it is unavailable or skipped, in words.
        busy: Skipped because another gputui was probing it past the deadline (the host-wide lock).
        mig: The MIG device probed (None: the GPU as a whole).
        mig_none: The GPU is in MIG mode with no MIG device: nothing on it can take work (unavailable).
        buffer_mib: The buffer of this probe where less than the report's (capped to a MIG device's memory).
    """

    index: int
    uuid: SafeText | None = None
    pci_bus_id: SafeText | None = None
    result: str = ""
    steps: tuple[ProbeStep, ...] = ()
    ms: float | None = None
    step: str | None = None
    error: SafeText | None = None
    code: int | None = None
    visible: bool | None = None
    detail: SafeText | None = None
    busy: bool = False
    mig: MigProbe | None = None
    mig_none: bool = False
    buffer_mib: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> GpuProbe | None:
        if not isinstance(data, dict):
            return None
        index = opt_int(data.get("index"))
        result = data.get("result")
        if index is None or index < 0 or result not in PROBE_RESULTS:
            return None
        steps = []
        raw_steps = data.get("steps")
        for item in raw_steps if isinstance(raw_steps, list) else ():
            if isinstance(item, dict) and item.get("step") in PROBE_STEPS:
                steps.append(ProbeStep(item["step"], _ms(item.get("ms")), _text(item.get("error"), 80)))
        step = data.get("step")
        visible_flag = data.get("visible")
        return cls(
            index=index,
            uuid=_text(data.get("uuid"), 80),
            pci_bus_id=_text(data.get("pci_bus_id"), 40),
            result=result,
            steps=tuple(steps[: len(PROBE_STEPS)]),
            ms=_ms(data.get("ms")),
            step=step if step in PROBE_STEPS else None,
            error=_text(data.get("error"), 80),
            code=opt_int(data.get("code")),
            visible=visible_flag if isinstance(visible_flag, bool) else None,
            detail=_text(data.get("skip") or data.get("detail"), 200),
            busy=result == PROBE_SKIPPED and data.get("busy") is True,
            mig=MigProbe.from_dict(data.get("mig")),
            mig_none=result == PROBE_UNAVAILABLE and data.get("mig_none") is True,
            buffer_mib=opt_int(data.get("buffer_mib")),
        )

    @property
    def name(self) -> str:
        """ "GPU3", or for a MIG device "GPU3 MIG 1g.10gb (MIG-…)": what a sentence calls what was probed."""
        if self.mig is None:
            return f"GPU{self.index}"
        profile = f" {self.mig.profile}" if self.mig.profile else ""
        uuid = f" ({self.mig.uuid})" if self.mig.uuid else ""
        return f"GPU{self.index} MIG{profile}{uuid}"


class ProbeReport(Record):
    """What the readiness probe found on one host (``HostSnapshot.probe``).

    Attributes:
        gpus: Each GPU's probe, by index (a GPU in MIG mode: one per MIG device, in their order).
        buffer_mib: The buffer each GPU was asked to allocate, write and read back.
        deadline_s: The deadline every GPU's probe had.
        time: Epoch seconds the probe ended (the sample judged with it is taken after it).
        kill_pending: A kill on the host was still under way when the probe ran (its wait for the kill is
            bounded by the deadline).
        lock_problem: Why the probe ran without the host-wide lock that keeps two gputui from probing one
            GPU at once (None: it ran with it).
    """

    gpus: tuple[GpuProbe, ...] = ()
    buffer_mib: int | None = None
    deadline_s: float | None = None
    time: float | None = None
    kill_pending: bool = False
    lock_problem: SafeText | None = None

    @classmethod
    def from_dict(cls, data: Any) -> ProbeReport | None:
        if not isinstance(data, dict):
            return None
        raw = data.get("probes") if isinstance(data.get("probes"), list) else data.get("gpus")
        gpus = [p for p in map(GpuProbe.from_dict, raw if isinstance(raw, list) else ()) if p is not None]
        return cls(
            gpus=tuple(sorted(gpus, key=lambda p: p.index)[:512]),
            buffer_mib=opt_int(data.get("buffer_mib")),
            deadline_s=_ms(data.get("deadline_s")),
            time=opt_float(data.get("time")),
            kill_pending=data.get("kill_pending") is True,
            lock_problem=_text(data.get("lock_problem"), 200),
        )

    def for_gpu(self, index: int) -> GpuProbe | None:
        """The first probe of GPU ``index`` (of a GPU in MIG mode, its first MIG device's)."""
        for probe in self.gpus:
            if probe.index == index:
                return probe
        return None

    def of_gpu(self, index: int) -> tuple[GpuProbe, ...]:
        """Every probe of GPU ``index``: one, or one per MIG device of a GPU in MIG mode."""
        return tuple(probe for probe in self.gpus if probe.index == index)
