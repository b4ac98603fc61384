"""The readiness probe's report as the client keeps it: did each GPU take work (``agent.gpu.probe``).

Read from the collector's ``probe`` answer without trust: a result the protocol does not name, a step that is
not one, a negative time, text over its cap: each is dropped or cut, never a traceback.
"""

from __future__ import annotations

from gputui.agent.protocol import PROBE_RESULTS, PROBE_SKIPPED, PROBE_STEPS
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


class GpuProbe(Record):
    """One GPU's probe.

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
        )


class ProbeReport(Record):
    """What the readiness probe found on one host (``HostSnapshot.probe``).

    Attributes:
        gpus: Each GPU's probe, by index.
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
            gpus=tuple(sorted(gpus, key=lambda p: p.index)[:256]),
            buffer_mib=opt_int(data.get("buffer_mib")),
            deadline_s=_ms(data.get("deadline_s")),
            time=opt_float(data.get("time")),
            kill_pending=data.get("kill_pending") is True,
            lock_problem=_text(data.get("lock_problem"), 200),
        )

    def for_gpu(self, index: int) -> GpuProbe | None:
        for probe in self.gpus:
            if probe.index == index:
                return probe
        return None
