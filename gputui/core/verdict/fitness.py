"""Is the GPU itself fit for the next launch? One table of Xids and fitness states -> what to do.

The actions are NVIDIA's "resolution buckets" of the Xid catalogue, folded into four: nothing (an
application fault: the job that hit it died, the GPU is fine; shown because it says why the job died), reset
the GPU, reboot the host, drain the node (the GPU needs service). Source: NVIDIA, "Xid Errors" and "Analyzing
Xid Errors with the Xid Catalog" (https://docs.nvidia.com/deploy/xid-errors/), whose buckets RESTART_APP and
IGNORE are "nothing" here, RESET_GPU (and the XID 48 / NVLink workflows, which start with a reset) "reset",
RESTART_BM / RESTART_VM "reboot", CONTACT_SUPPORT on a hardware fault "drain"; and "Dynamic Page Retirement"
and "Row Remapping" (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/) for pending remaps and
retirements, which take effect only after a reset.

An Xid stops counting after a later reset of its GPU (one the kernel log shows, or one gputui performed and
recorded), a driver reload or a reboot (the collector marks it ``cleared``). Pure functions of the snapshot:
``assess`` is the one place that derives a GPU's action; the verdict, the findings, the JSON and every view
use its result.
"""

from __future__ import annotations

from gputui.core.model import Finding, Gpu, GpuFitness, HostSnapshot, Record, XidEvent, replace
from gputui.core.text import fit

ACTION_NONE = "none"
ACTION_RESET = "reset"
ACTION_REBOOT = "reboot"
ACTION_DRAIN = "drain"
ACTION_RANK = {ACTION_NONE: 0, ACTION_RESET: 1, ACTION_REBOOT: 2, ACTION_DRAIN: 3}
BLOCKING_ACTIONS = frozenset({ACTION_RESET, ACTION_REBOOT, ACTION_DRAIN})
ACTION_WORDS = {
    ACTION_NONE: "nothing to do",
    ACTION_RESET: "needs a reset",
    ACTION_REBOOT: "needs a reboot of the host",
    ACTION_DRAIN: "needs the node drained (service the GPU)",
}
"""How a verdict says each action: "GPU3 needs a reset (row remap pending)"."""
ACTION_HINTS = {
    ACTION_RESET: "reset the GPU (nvidia-smi -r -i N, nothing may hold it) before the next launch",
    ACTION_REBOOT: "reboot the host: a GPU reset does not recover from this",
    ACTION_DRAIN: "drain the node and have the GPU serviced (RMA): a reset does not fix it",
}

XID_TABLE: dict[int, tuple[str, str]] = {
    # Application faults (catalogue: RESTART_APP / IGNORE): shown, never blocking.
    8: ("GPU stopped processing (idle timeout)", ACTION_NONE),
    13: ("graphics engine exception", ACTION_NONE),
    31: ("GPU memory page fault", ACTION_NONE),
    32: ("invalid or corrupted push buffer stream", ACTION_NONE),
    43: ("GPU stopped processing", ACTION_NONE),
    45: ("preemptive cleanup, due to previous errors", ACTION_NONE),
    68: ("video processor exception", ACTION_NONE),
    69: ("graphics engine class error", ACTION_NONE),
    92: ("high single-bit ECC error rate", ACTION_NONE),
    109: ("context switch timeout", ACTION_NONE),
    # The GPU needs a reset (catalogue: RESET_GPU, and the XID 48 / NVLink workflows that start with one).
    48: ("double-bit ECC error", ACTION_RESET),
    61: ("internal micro-controller breakpoint/warning", ACTION_RESET),
    62: ("internal micro-controller halt", ACTION_RESET),
    63: ("row remap / page retirement recorded, a reset activates it", ACTION_RESET),
    74: ("NVLink error", ACTION_RESET),
    94: ("contained ECC error (a reset remaps the row)", ACTION_RESET),
    95: ("uncontained ECC error", ACTION_RESET),
    119: ("GSP RPC timeout", ACTION_RESET),
    120: ("GSP error", ACTION_RESET),
    140: ("unrecovered ECC error", ACTION_RESET),
    # The host needs a reboot (catalogue: RESTART_BM).
    79: ("GPU has fallen off the bus", ACTION_REBOOT),
    # The GPU needs service (catalogue: CONTACT_SUPPORT on a memory or hardware fault).
    64: ("row remap / page retirement failed", ACTION_DRAIN),
}
"""Xid -> (meaning, action). An Xid not in the table is shown and does not block (see the catalogue)."""

XID_RECOVERY_ACTION = 154
"""Xid 154 says the action in its text: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
Required)"; read from its ``to`` part."""
_RECOVERY_WORDS = (("drain", ACTION_DRAIN), ("reboot", ACTION_REBOOT), ("reset", ACTION_RESET))

HW_CLOCK_REASONS = {
    0x8: "HW slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
"""Clock-event reason bits that mean hardware trouble (cooling, power delivery): shown, never blocking."""

STATE_REMAP_PENDING = "row remap pending"
STATE_REMAP_FAILURE = "row remapping failed"
STATE_RETIRED_PENDING = "retired pages pending"
STATE_RESET_REQUIRED = "NVML says a reset is required"
XID_HISTORY_UNAVAILABLE = "Xid history unavailable"


class FitnessAssessment(Record):
    """What a GPU's fitness asks for.

    Attributes:
        action: The strongest action asked for (``ACTION_*``); ``ACTION_NONE`` when nothing is.
        causes: Why, for each blocking cause ("row remap pending", "Xid 79: GPU has fallen off the bus").
        notes: What is shown but does not block (application Xids, clock-event reasons, persistence off).
        needs_reset: Whether a GPU reset is the remedy (the reset issue's input): the action is a reset.
    """

    action: str = ACTION_NONE
    causes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def blocking(self) -> bool:
        return self.action in BLOCKING_ACTIONS

    @property
    def needs_reset(self) -> bool:
        return self.action == ACTION_RESET


def xid_action(event: XidEvent) -> tuple[str, str]:
    """(meaning, action) of one Xid, from the table (Xid 154 from its own text)."""
    if event.xid == XID_RECOVERY_ACTION:
        target = event.detail.lower().rsplit(" to ", 1)[-1]
        for word, action in _RECOVERY_WORDS:
            if word in target:
                return "GPU recovery action changed", action
        return "GPU recovery action changed", ACTION_NONE
    return XID_TABLE.get(event.xid, ("not in gputui's table: see NVIDIA's Xid catalogue", ACTION_NONE))


def xid_text(event: XidEvent) -> str:
    """ "Xid 79: GPU has fallen off the bus"."""
    return f"Xid {event.xid}: {xid_action(event)[0]}"


def assess(fitness: GpuFitness | None) -> FitnessAssessment:
    """What this GPU's fitness asks for (the one derivation every view shows)."""
    if fitness is None:
        return FitnessAssessment()
    found: list[tuple[str, str]] = []
    notes: list[str] = []
    if fitness.reset_required:
        found.append((ACTION_RESET, STATE_RESET_REQUIRED))
    if fitness.remap_failure:
        found.append((ACTION_DRAIN, STATE_REMAP_FAILURE))
    if fitness.remap_pending:
        found.append((ACTION_RESET, STATE_REMAP_PENDING))
    if fitness.retired_pages_pending:
        found.append((ACTION_RESET, STATE_RETIRED_PENDING))
    if fitness.ecc_uncorrected_volatile:
        count = fitness.ecc_uncorrected_volatile
        found.append((ACTION_RESET, f"{count} uncorrected ECC errors since the last reset"))
    for event in fitness.xids:
        meaning, action = xid_action(event)
        text = f"Xid {event.xid}: {meaning}"
        if event.cleared is not None:
            continue
        if action in BLOCKING_ACTIONS:
            if all(cause != text for _, cause in found):
                found.append((action, text))
        elif text not in notes:
            notes.append(text)
    reasons = fitness.clock_event_reasons or 0
    for bit, name in HW_CLOCK_REASONS.items():
        if reasons & bit:
            notes.append(f"clocks held down: {name}")
    if fitness.persistence_mode is False:
        notes.append("persistence mode off")
    if not found:
        return FitnessAssessment(notes=tuple(notes))
    found.sort(key=lambda item: -ACTION_RANK[item[0]])
    return FitnessAssessment(
        action=found[0][0], causes=tuple(cause for _, cause in found), notes=tuple(notes)
    )


def unfit_reason(gpu: Gpu, assessment: FitnessAssessment) -> str | None:
    """ "GPU3 needs a reset (row remap pending)", or None when the GPU's fitness asks for nothing."""
    if not assessment.blocking:
        return None
    return f"GPU{gpu.index} {ACTION_WORDS[assessment.action]} ({fit('; '.join(assessment.causes), 200)})"


def needs_reset(gpu: Gpu) -> bool:
    """Whether this GPU's fitness asks for a reset (the reset plan's input)."""
    return assess(gpu.fitness).needs_reset


def with_assessment(snapshot: HostSnapshot) -> HostSnapshot:
    """The snapshot with each GPU's ``fitness.action``, ``causes``, ``notes`` and ``needs_reset`` set."""
    gpus = []
    changed = False
    for gpu in snapshot.gpus:
        if gpu.fitness is None:
            gpus.append(gpu)
            continue
        judged = assess(gpu.fitness)
        fitness = replace(
            gpu.fitness,
            action=judged.action,
            causes=judged.causes,
            notes=judged.notes,
            needs_reset=judged.needs_reset,
        )
        gpus.append(replace(gpu, fitness=fitness))
        changed = True
    return replace(snapshot, gpus=tuple(gpus)) if changed else snapshot


def fitness_findings(snapshot: HostSnapshot) -> list[Finding]:
    """The host's kernel log that could not be read (once), each GPU's blocking fitness, its application
    Xids, and Xids for PCI addresses no GPU has."""
    target = snapshot.target
    findings: list[Finding] = []
    note = snapshot.kernel_log
    if note is not None and note.error is not None:
        findings.append(
            Finding(
                kind="xid_history",
                target=target,
                detail=f"{XID_HISTORY_UNAVAILABLE}: {fit(note.error, 300)}",
                action="run gputui as root, or allow reading the kernel log (sysctl kernel.dmesg_restrict=0)",
            )
        )
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        judged = assess(gpu.fitness)
        reason = unfit_reason(gpu, judged)
        if reason is not None:
            findings.append(
                Finding(
                    kind="gpu_health",
                    target=target,
                    gpu_index=gpu.index,
                    detail=reason,
                    action=ACTION_HINTS[judged.action].replace("-i N", f"-i {gpu.index}"),
                )
            )
        for text in judged.notes:
            if text.startswith("Xid "):
                findings.append(
                    Finding(
                        kind="xid",
                        target=target,
                        gpu_index=gpu.index,
                        detail=f"GPU{gpu.index} {text} (does not block the next launch)",
                        action="it says why the last job died; the GPU itself is fit",
                    )
                )
    if note is not None:
        for event in note.unmatched:
            if lost_gpu_event(event):
                findings.append(
                    Finding(
                        kind="xid",
                        target=target,
                        detail=lost_gpu_reason(event),
                        action=ACTION_HINTS[ACTION_REBOOT],
                    )
                )
                continue
            findings.append(
                Finding(
                    kind="xid",
                    target=target,
                    detail=f"{xid_text(event)} logged for PCI {fit(event.pci or '?', 40)},"
                    " which no GPU has (does not block)",
                    action="a GPU that is gone or was renumbered; look at the host's kernel log",
                )
            )
    return findings


def lost_gpu_event(event: XidEvent) -> bool:
    """Whether an Xid logged for a PCI address no GPU has now says that GPU is lost until a reboot (Xid 79,
    fallen off the bus): the host is short of a GPU, not merely renumbered."""
    return event.cleared is None and xid_action(event)[1] == ACTION_REBOOT


def lost_gpu_reason(event: XidEvent) -> str:
    """ "Xid 79: GPU has fallen off the bus logged for PCI 0000:99:00, which no GPU has now: needs a reboot of
    the host"."""
    return (
        f"{xid_text(event)} logged for PCI {fit(event.pci or '?', 40)}, which no GPU has now: "
        f"{ACTION_WORDS[ACTION_REBOOT]}"
    )


def lost_gpu_reasons(snapshot: HostSnapshot) -> list[str]:
    """One NOT READY reason per lost-GPU Xid (``lost_gpu_event``) for a PCI address no GPU has."""
    note = snapshot.kernel_log
    if note is None:
        return []
    return list(dict.fromkeys(lost_gpu_reason(e) for e in note.unmatched if lost_gpu_event(e)))


def _yes_no(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _on_off(value: bool | None) -> str:
    return "–" if value is None else ("on" if value else "off")


def fitness_figures(fitness: GpuFitness) -> list[tuple[str, str]]:
    """(label, value) of each raw fitness figure, "–" where the driver gave none: what views list."""

    def number(value: int | None) -> str:
        return "–" if value is None else str(value)

    reasons = fitness.clock_event_reasons
    hardware = [] if reasons is None else [name for bit, name in HW_CLOCK_REASONS.items() if reasons & bit]
    return [
        ("row remap pending", _yes_no(fitness.remap_pending)),
        ("row remap failure", _yes_no(fitness.remap_failure)),
        (
            "remapped rows (correctable/uncorrectable)",
            f"{number(fitness.remapped_rows_correctable)}/{number(fitness.remapped_rows_uncorrectable)}",
        ),
        ("retired pages pending", _yes_no(fitness.retired_pages_pending)),
        ("ECC", _on_off(fitness.ecc_enabled)),
        ("uncorrected ECC since reset", number(fitness.ecc_uncorrected_volatile)),
        ("uncorrected ECC, lifetime", number(fitness.ecc_uncorrected_aggregate)),
        ("clock events (hardware)", "–" if reasons is None else (", ".join(hardware) or "none")),
        ("persistence mode", _on_off(fitness.persistence_mode)),
        ("reset required (NVML)", "yes" if fitness.reset_required else "no"),
    ]


def fitness_summary(gpu: Gpu) -> str | None:
    """One line of a GPU's fitness for text views: its action and causes, else its notes, else "ok"."""
    if gpu.fitness is None:
        return None
    judged = assess(gpu.fitness)
    if judged.blocking:
        text = f"{ACTION_WORDS[judged.action]} ({'; '.join(judged.causes)})"
    else:
        text = "ok"
    if judged.notes:
        text += "; " + "; ".join(judged.notes)
    return fit(text, 300)
