"""What the readiness probe says of each GPU (``model.ProbeReport``), worded once: the NOT READY reason of a
GPU that did not take work, the "cannot tell" of one the probe could not run on, and the GPUs fact's line
("8 of 8 took work (context + 64 MiB write/read, slowest 0.41 s)"). A GPU in MIG mode is probed one MIG
device at a time: each is named in a reason ("GPU2 MIG 1g.10gb (MIG-…) did not take work: …"), and the GPU
took work when each of its MIG devices did; one with no MIG device cannot take work, and cannot be proven.

The probe proves that a context can be created and memory written and read back; not compute throughput,
not NVLink. Pure functions of the snapshot.
"""

from __future__ import annotations

from gputui.agent.protocol import (
    PROBE_HUNG,
    PROBE_OK,
    PROBE_SKIPPED,
    PROBE_STUCK,
    PROBE_UNAVAILABLE,
)
from gputui.core.model import Gpu, GpuProbe, HostSnapshot, ProbeReport
from gputui.core.text import fit

STEP_WORDS = {
    "load": "loading libcuda.so.1",
    "init": "driver initialisation (cuInit)",
    "device": "finding the device by its PCI bus id",
    "context": "context creation",
    "alloc": "allocation",
    "write": "the write",
    "read": "the read-back",
    "compare": "the comparison",
    "free": "freeing the buffer",
    "destroy": "destroying the context",
}
"""How a reason names the step a probe failed or hung in."""
CUDA_ERROR_HINTS = {
    802: "the system is not initialised: on an NVSwitch system, the NVLink fabric (fabric manager up?)",
    2: "out of memory: something else holds it",
    46: "busy or unavailable: exclusive-process mode, or another context",
    999: "an unknown error: reset the GPU, and reboot if it comes back",
}
"""What a CUDA error number most often means for the next job, said beside its name."""
BUSY_WORDS = "another gputui is probing it"
"""Why a GPU was not probed when another gputui on the host held its probe lock past the deadline."""
KILL_PENDING_WORDS = "probed while a kill was still under way"
"""Said of a probe that waited its deadline for a kill on the host and ran before the kill ended."""
UNLOCKED_WORDS = "not kept apart from other gputui probes"
"""Said, with why, of a probe that ran without the host-wide lock (one probe of a GPU at a time)."""


MIG_DEVICE_WORDS = "finding the MIG device (CUDA_VISIBLE_DEVICES)"
"""How a reason names the device step of a MIG device's probe (device 0 of what CUDA_VISIBLE_DEVICES says)."""
MIG_NONE_WORDS = "MIG mode with no instances: nothing can take work"
"""Said of a GPU in MIG mode with no MIG device: no process can use it, and no probe can run on it."""


def _where(probe: GpuProbe) -> str:
    if probe.step == "device" and probe.mig is not None:
        return MIG_DEVICE_WORDS
    return STEP_WORDS.get(probe.step or "", "an unknown step")


def _seconds(ms: float | None) -> str:
    return "–" if ms is None else f"{ms / 1000.0:.2f} s"


def probe_reason(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
    """ "GPU3 did not take work: CUDA_ERROR_SYSTEM_NOT_READY (802) in context creation — …" (of a GPU in MIG
    mode, one such sentence per MIG device that did not, "GPU3 MIG 1g.10gb (MIG-…) did not take work: …"), or
    None when it took work, was not probed, or the probe could not run (``probe_unavailable``)."""
    report = snapshot.probe
    if report is None:
        return None
    said = [_did_not(report, probe) for probe in report.of_gpu(gpu.index)]
    return "; ".join(s for s in said if s is not None) or None


def _did_not(report: ProbeReport, probe: GpuProbe) -> str | None:
    if probe.result in (PROBE_OK, PROBE_SKIPPED, PROBE_UNAVAILABLE):
        return None
    deadline = _seconds(None if report.deadline_s is None else report.deadline_s * 1000.0)
    if probe.result == PROBE_HUNG:
        return f"{probe.name} did not take work within {deadline} (hung in {_where(probe)}): reboot likely"
    if probe.result == PROBE_STUCK:
        return (
            f"{probe.name} did not take work within {deadline}, and its probe could not be killed (stuck in"
            f" the driver in {_where(probe)}): needs a reboot of the host"
        )
    said = str(fit(probe.error or "failed", 80))
    if probe.code is not None:
        said += f" ({probe.code})"
    said += f" in {_where(probe)}"
    hint = None if probe.code is None else CUDA_ERROR_HINTS.get(probe.code)
    return f"{probe.name} did not take work: {said}" + (f" — {hint}" if hint else "")


def probe_unavailable(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
    """ "GPU3 cannot be probed: libcuda.so.1: cannot open shared object file …", "…: another gputui is
    probing it" (past the deadline), "GPU3: MIG mode with no instances: nothing can take work": the GPU fact
    cannot be proven (the verdict cannot tell). One sentence per MIG device of a GPU in MIG mode."""
    report = snapshot.probe
    if report is None:
        return None
    said = [_cannot(probe) for probe in report.of_gpu(gpu.index)]
    return "; ".join(s for s in said if s is not None) or None


def _cannot(probe: GpuProbe) -> str | None:
    if probe.busy:
        return f"{probe.name} cannot be probed: {BUSY_WORDS}"
    if probe.result != PROBE_UNAVAILABLE:
        return None
    if probe.mig_none:
        return f"{probe.name}: {MIG_NONE_WORDS}"
    return f"{probe.name} cannot be probed: {fit(probe.detail or probe.error or 'unavailable', 160)}"


def probe_line(report: ProbeReport | None) -> str | None:
    """ "8 of 8 took work (context + 64 MiB write/read, slowest 0.41 s; 3 MIG instances on GPU0)", with
    what was not probed named; None without a probe. A GPU counts once: a GPU in MIG mode took work when
    every MIG device of it that was probed did."""
    if report is None or not report.gpus:
        return None
    probed = [p for p in report.gpus if p.result != PROBE_SKIPPED]
    by_gpu: dict[int, list[GpuProbe]] = {}
    for probe in probed:
        by_gpu.setdefault(probe.index, []).append(probe)
    took_gpus = [i for i, probes in by_gpu.items() if all(p.result == PROBE_OK for p in probes)]
    took = [p for p in probed if p.result == PROBE_OK]
    size = f"{report.buffer_mib} MiB " if report.buffer_mib else ""
    slowest = max((p.ms for p in took if p.ms is not None), default=None)
    line = f"{len(took_gpus)} of {len(by_gpu)} took work (context + {size}write/read"
    if slowest is not None:
        line += f", slowest {_seconds(slowest)}"
    smaller = sorted(
        {p.buffer_mib for p in took if p.buffer_mib is not None and p.buffer_mib != report.buffer_mib}
    )
    if smaller:
        line += f"; {', '.join(f'{mib} MiB' for mib in smaller)} on the smaller MIG instances"
    mig_counts = {i: sum(1 for p in by_gpu[i] if p.mig is not None) for i in took_gpus}
    for index, count in mig_counts.items():
        if count:
            line += f"; {count} MIG instance{'s' if count != 1 else ''} on GPU{index}"
    unseen = [p.name for p in took if p.visible is False]
    if unseen:
        line += "; NVML did not list the allocation on " + ", ".join(unseen)
    line += ")"
    why_skipped: dict[str, list[str]] = {}
    for probe in report.gpus:
        if probe.result == PROBE_SKIPPED:
            why = BUSY_WORDS if probe.busy else str(fit(probe.detail or "skipped", 80))
            why_skipped.setdefault(why, []).append(probe.name)
    for why, names in why_skipped.items():
        line += f"; {', '.join(names)} not probed: {why}"
    return "; ".join([line, *probe_notes(report)])


def probe_notes(report: ProbeReport) -> list[str]:
    """What the GPUs fact says of how the probe ran: while a kill was still under way; without the host-wide
    lock (and why)."""
    notes = [KILL_PENDING_WORDS] if report.kill_pending else []
    if report.lock_problem:
        notes.append(f"{UNLOCKED_WORDS} ({fit(report.lock_problem, 120)})")
    return notes


def only_the_probe(snapshot: HostSnapshot) -> bool:
    """Whether the last probe's findings (a GPU that did not take work, or could not be probed) are all that
    keeps ``snapshot``'s verdict from clean: a new probe is what can change it."""
    verdict = snapshot.verdict
    if verdict is None or verdict.clean:
        return False
    said = set(verdict.reasons) | set(verdict.not_ready)
    from_probe = {
        reason
        for gpu in snapshot.gpus
        for reason in (probe_reason(snapshot, gpu), probe_unavailable(snapshot, gpu))
        if reason is not None
    }
    return bool(said) and said <= from_probe
