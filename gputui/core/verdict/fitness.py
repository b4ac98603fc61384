"""Is the GPU itself fit for the next launch? The driver's own recovery action first, then one table of
Xids and fitness states -> what to do.

**The driver first.** From R565 the driver says what a GPU needs itself (NVML field 230, "recovery action";
its log form is Xid 154). Where it reports one, it decides: NONE clears what the Xid table would ask for (the
Xids are then shown as what happened, with their advice), any other action blocks, worded as NVIDIA words it,
with the Xid that explains it beside it ("Xid 48 at 03:57; the driver asks for a GPU reset"). A value this
table does not know blocks too, said as an action gputui does not know (its value, NVIDIA's documentation of
``nvmlDeviceGpuRecoveryAction_t``), until the driver's action returns to None. The Xid table is the fallback
for drivers before R565.

**The table** follows NVIDIA's Xid Catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, ``XID_CATALOGUE_AS_OF``): its
immediate-action buckets RESTART_APP and IGNORE are advisories (shown with their advice, never blocking),
RESET_GPU and the XID 48 / NVLink workflows a reset, RESTART_BM and RESTART_VM a reboot, CHECK_MECHANICALS
service, CONTACT_SUPPORT, CHECK_UVM and UPDATE_SWFW a look before the next launch. Xid 154 is read by its
``0xN`` code, Xids 144-150 (NVLink5) by the severity the driver prints in the line ("Fatal": a reset). Xid 45
never blocks: the driver logs it whenever an application using the GPU is stopped (a kill, Ctrl-C) as well as
after another Xid, which then decides; a GPU's NVLink fabric is judged from NVML's fabric state, never from
Xid 45 (NVIDIA's k8s-device-plugin counts it among the application errors that leave the GPU healthy). An
Xid the table does not know blocks ("unclassified Xid N since boot"), unless the driver's recovery action is
NONE or the site accepts it (``accepted_xids`` in the config; never Xid 154, the driver's own action). Row
remaps and retirements pending, uncorrected ECC and RESET_REQUIRED are NVML's own states ("Dynamic Page
Retirement", "Row Remapping": https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/).

**Resets clear what they clear.** An Xid stops counting after a later reset of its GPU (one the kernel log
shows: the recovery action back to None; or one gputui performed and verified), a driver reload or a boot (the
collector marks it ``cleared``); the same Xid after such a reset is said ("recurred after a reset").
Reboot-class Xids (79, 151) are cleared by a reload or a boot only. Pure functions of the snapshot: ``assess``
is the one place that derives a GPU's action; the verdict, the findings, the JSON and every view use its
result.
"""

from __future__ import annotations

import re

from gputui.agent.protocol import UNREACHABLE_LOST, UNREACHABLE_RESET_REQUIRED, UNREACHABLE_TIMED_OUT
from gputui.core.model import Finding, Gpu, GpuFitness, HostSnapshot, Record, XidEvent, replace
from gputui.core.text import clock_time, fit

XID_CATALOGUE = "NVIDIA's Xid Catalog (https://docs.nvidia.com/deploy/xid-errors/)"
XID_CATALOGUE_AS_OF = "2025-10-29"
"""The catalogue's state the table follows (its immediate-action column)."""

ACTION_NONE = "none"
ACTION_INVESTIGATE = "investigate"
ACTION_UNKNOWN_RECOVERY = "unknown_recovery"
ACTION_DRAIN_P2P = "drain_p2p"
ACTION_RESET = "reset"
ACTION_DRAIN_AND_RESET = "drain_and_reset"
ACTION_FABRIC = "restart_fabric_manager"
ACTION_RECOVER_IMEX = "recover_imex"
ACTION_BUS_RESET = "bus_reset"
ACTION_REBOOT = "reboot"
ACTION_SYSTEM_REBOOT = "system_reboot"
ACTION_DRAIN = "drain"

ACTIONS: dict[str, tuple[str, str]] = {
    ACTION_NONE: ("nothing to do", ""),
    ACTION_INVESTIGATE: (
        "needs a look before the next launch",
        "look it up in " + XID_CATALOGUE + "; an Xid the site accepts goes in accepted_xids in the config",
    ),
    ACTION_UNKNOWN_RECOVERY: (
        "needs a recovery action gputui does not know",
        "the driver asks for an action gputui does not know (value V): see NVIDIA's NVML documentation of"
        " nvmlDeviceGpuRecoveryAction_t; GPU N counts as not ready until the driver's recovery action returns"
        " to None",
    ),
    ACTION_DRAIN_P2P: (
        "needs its peer-to-peer work drained",
        "stop peer-to-peer traffic and UVM persistence on GPU N, then check again: the driver then names the"
        " next step",
    ),
    ACTION_RESET: (
        "needs a reset",
        "reset the GPU (nvidia-smi -r -i N, nothing may hold it) before the next launch",
    ),
    ACTION_DRAIN_AND_RESET: (
        "needs draining, then a reset",
        "start no new work on GPU N, let the running work end, then reset it (nvidia-smi -r -i N)",
    ),
    ACTION_FABRIC: (
        "is not registered with the NVLink fabric",
        "start or restart the fabric manager (systemctl restart nvidia-fabricmanager), then check again:"
        " every CUDA job fails on this GPU until then",
    ),
    ACTION_RECOVER_IMEX: (
        "needs its IMEX domain recovered",
        "recover the IMEX domain (restart nvidia-imex on the domain's nodes), then check again",
    ),
    ACTION_BUS_RESET: (
        "needs a reset of its PCIe bus",
        "reset the GPU's PCIe bus (a secondary bus reset), or reboot the host",
    ),
    ACTION_REBOOT: ("needs a reboot of the host", "reboot the host: a GPU reset does not recover from this"),
    ACTION_SYSTEM_REBOOT: (
        "needs a reboot of the whole system",
        "reboot the whole system, every node it spans: a host reboot alone does not recover from this",
    ),
    ACTION_DRAIN: (
        "needs the node drained and the GPU serviced",
        "drain the node and have the GPU serviced: a reset does not fix it",
    ),
}
"""Each action, weakest first: how a verdict says it ("GPU3 needs a reset (row remap pending)") and what to do
("-i N" becomes the GPU's index, "value V" the driver's recovery action)."""
ACTION_RANK = {action: rank for rank, action in enumerate(ACTIONS)}
ACTION_WORDS = {action: words for action, (words, _) in ACTIONS.items()}
ACTION_HINTS = {action: hint for action, (_, hint) in ACTIONS.items() if action != ACTION_NONE}
BLOCKING_ACTIONS = frozenset(ACTION_HINTS)

RECOVERY_ACTIONS: dict[int, tuple[str, str]] = {
    0: ("None", ACTION_NONE),
    1: ("GPU Reset", ACTION_RESET),
    2: ("Node Reboot", ACTION_REBOOT),
    3: ("Drain P2P", ACTION_DRAIN_P2P),
    4: ("Drain and Reset", ACTION_DRAIN_AND_RESET),
    5: ("Recover IMEX Domain", ACTION_RECOVER_IMEX),
    6: ("Bus Reset", ACTION_BUS_RESET),
    7: ("System Reboot", ACTION_SYSTEM_REBOOT),
}
"""``nvmlDeviceGpuRecoveryAction_t`` (NVML field 230, DCGM field 1523, Xid 154's ``0xN``): NVIDIA's name and
the action. A value not listed blocks (``ACTION_UNKNOWN_RECOVERY``)."""

_APP = "the application that hit it must be restarted, the GPU is fit"
_INFO = "informational, the GPU is fit"
_ENGINES = {
    **{xid: f"copy engine CE{n}" for n, xid in ((0, 39), (1, 40), (2, 41), (3, 70), (4, 71), (5, 72))},
    **{xid: f"copy engine CE{n}" for n, xid in ((6, 75), (7, 76), (8, 77), (9, 85))},
    **{126 + n: f"copy engine CE{10 + n}" for n in range(10)},
    **{xid: f"video decoder NVDEC{n}" for n, xid in ((1, 83), (2, 84), (3, 88), (4, 89), (5, 96), (6, 97))},
    98: "video decoder NVDEC7",
    82: "JPEG engine NVJPG0",
    **{98 + n: f"JPEG engine NVJPG{n}" for n in range(1, 8)},
    86: "optical flow engine OFA0",
    139: "optical flow engine OFA1",
}
"""The catalogue's per-engine RESTART_APP rows ("CE3: Unknown Error", "NVDEC1 Error", ...)."""
XID_TABLE: dict[int, tuple[str, str, str]] = {
    # RESTART_APP and IGNORE: advisories, shown with their advice, never blocking.
    8: ("GPU stopped processing (idle timeout)", ACTION_NONE, _APP),
    11: ("invalid or corrupted push buffer stream", ACTION_NONE, _APP),
    13: ("graphics engine exception", ACTION_NONE, _APP),
    25: ("invalid or illegal push buffer stream", ACTION_NONE, _APP),
    31: ("GPU memory page fault", ACTION_NONE, _APP),
    32: ("invalid or corrupted push buffer stream", ACTION_NONE, _APP),
    37: ("driver firmware error", ACTION_NONE, _INFO),
    38: ("driver firmware error (watchdog timeout)", ACTION_NONE, _INFO),
    43: ("GPU stopped processing", ACTION_NONE, _INFO),
    44: ("graphics engine fault during context switch", ACTION_NONE, _INFO),
    60: ("video processor exception", ACTION_NONE, _APP),
    66: ("illegal access by driver", ACTION_NONE, _INFO),
    67: ("illegal access by driver", ACTION_NONE, _INFO),
    80: ("corrupted data sent to the GPU", ACTION_NONE, _APP),
    93: ("InfoROM wear limit exceeded (non-fatal)", ACTION_NONE, _INFO),
    106: ("SMBPBI test message", ACTION_NONE, _INFO),
    107: ("SMBPBI test message (silent)", ACTION_NONE, _INFO),
    121: ("C2C error", ACTION_NONE, _INFO),
    137: ("NVLink privilege error", ACTION_NONE, _INFO),
    141: ("CUDA fast path error", ACTION_NONE, _INFO),
    152: ("DLA SMMU error", ACTION_NONE, _INFO),
    153: ("DLA timeout error", ACTION_NONE, _INFO),
    157: ("resource retirement failure", ACTION_NONE, _INFO),
    160: ("channel retirement event", ACTION_NONE, _INFO),
    161: ("channel retirement failure", ACTION_NONE, _INFO),
    **{xid: (f"{engine} error", ACTION_NONE, _APP) for xid, engine in _ENGINES.items()},
    63: (
        "GPU memory remapping event",
        ACTION_NONE,
        'recorded, the remap takes effect at the next reset ("row remap pending" until then)',
    ),
    68: ("video decoder (NVDEC0) exception", ACTION_NONE, _APP),
    69: ("graphics engine class error", ACTION_NONE, _APP),
    92: ("high single-bit ECC error rate", ACTION_NONE, _INFO),
    94: (
        "contained memory error",
        ACTION_NONE,
        "reset when convenient, the application that hit it must be restarted, the others can continue",
    ),
    # RESET_GPU, and the XID 48 and NVLink workflows, which start with a reset.
    46: ("GPU stopped processing (GPU timeout)", ACTION_RESET, ""),
    48: ("double-bit ECC error", ACTION_RESET, ""),
    62: ("internal micro-controller halt", ACTION_RESET, ""),
    64: ("GPU memory remapping failure", ACTION_RESET, "NVIDIA: contact support if it comes back"),
    74: ("NVLink error", ACTION_RESET, ""),
    95: ("uncontained memory error", ACTION_RESET, ""),
    109: ("context switch timeout", ACTION_RESET, ""),
    110: ("security fault", ACTION_RESET, ""),
    119: ("GSP RPC timeout", ACTION_RESET, ""),
    120: ("GSP error", ACTION_RESET, ""),
    136: ("NVLink training failed", ACTION_RESET, ""),
    140: ("unrecovered ECC error", ACTION_RESET, ""),
    143: ("GPU initialization error", ACTION_RESET, ""),
    155: ("NVLink software-defined error", ACTION_RESET, ""),
    156: ("resource retirement event", ACTION_RESET, ""),
    158: ("GPU fatal timeout", ACTION_RESET, ""),
    # RESTART_BM / RESTART_VM.
    79: ("GPU has fallen off the bus", ACTION_REBOOT, ""),
    151: ("key rotation error", ACTION_REBOOT, "NVIDIA: restart the VM"),
    # CHECK_MECHANICALS.
    54: ("auxiliary power is not connected to the board", ACTION_DRAIN, "check the board's auxiliary power"),
    # CONTACT_SUPPORT (61: a code NVIDIA no longer uses), CHECK_UVM and UPDATE_SWFW.
    61: (
        "internal micro-controller breakpoint (an unused code)",
        ACTION_INVESTIGATE,
        "NVIDIA: contact support",
    ),
    142: ("video encoder NVENC3 error", ACTION_INVESTIGATE, "NVIDIA: contact support"),
    159: ("CHI non-data error", ACTION_INVESTIGATE, "NVIDIA: check UVM (nvidia-uvm and its persistence)"),
    78: ("vGPU start error", ACTION_INVESTIGATE, "NVIDIA: update the driver and firmware"),
}
"""Xid -> (meaning, action, advice): the catalogue's immediate action, for every Xid it lists as in use and
gives one. Xids 45, 144-150 and 154 are read from their own line (``xid_action``); an Xid in neither (a code
the catalogue marks unused, one it gives no action yet, one newer than it) is unclassified and blocks."""

XID_PREEMPTIVE_CLEANUP = 45
PREEMPTIVE_CLEANUP = (
    "preemptive cleanup: the driver cleaned up a stopped or failed application's work (a kill, Ctrl-C, or the"
    " Xid before it)"
)
PREEMPTIVE_CLEANUP_FABRIC = (
    _INFO + "; its NVLink fabric state (read from NVML) says whether the fabric manager needs a restart"
)
"""Xid 45's meaning, and its advice on a GPU with an NVLink fabric (elsewhere ``_INFO``)."""
XID_RECOVERY_ACTION = 154
"""Xid 154 names the driver's recovery action by code: "GPU recovery action changed from 0x0 (None) to 0x1
(GPU Reset Required)"; the ``to`` code is read, never its words (drivers word a code differently)."""
XID_NVLINK5 = range(144, 151)
"""NVLink5 Xids ("NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x…)"): the unit, then the driver's severity."""
_RECOVERY_CODE = re.compile(r"\bto\s+0x([0-9A-Fa-f]{1,8})\b")
_NVLINK5_LINE = re.compile(r"(?:^|,\s*)([A-Z][A-Z0-9_]*(?:/[A-Z0-9_]+)?)\s+(Fatal|Nonfatal)\b")

HW_CLOCK_REASONS = {
    0x8: "HW slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}
"""Clock-event reason bits that mean hardware trouble (cooling, power delivery): shown, never blocking."""

FABRIC_STATES = {1: "not started", 2: "in progress", 3: "completed"}
"""``NVML_GPU_FABRIC_STATE_*`` as said in a reason (0, NOT_SUPPORTED, is never reported)."""
FABRIC_COMPLETED = 3
NVML_RETURN_NAMES = {
    0: "success",
    3: "not supported",
    15: "GPU is lost",
    16: "reset required",
    23: "insufficient resources",
    27: "not ready",
    999: "unknown error",
}
"""The ``nvmlReturn_t`` values a fabric registration ends with that a reason names in words."""

STATE_REMAP_PENDING = "row remap pending"
STATE_REMAP_FAILURE = "row remapping failed: NVIDIA's RMA policy counts it"
STATE_RETIRED_PENDING = "retired pages pending: a driver reload or a reboot retires them"
STATE_RESET_REQUIRED = "NVML says a reset is required"
XID_HISTORY_UNAVAILABLE = "Xid history unavailable"
WEDGED_AFTER_SAMPLES = 2
"""Samples in a row in which every GPU's NVML calls timed out before the host's driver counts as wedged."""


class FitnessAssessment(Record):
    """What a GPU's fitness asks for.

    Attributes:
        action: The strongest action asked for (``ACTION_*``); ``ACTION_NONE`` when nothing is.
        causes: Why, for each blocking cause ("row remap pending", "Xid 79: GPU has fallen off the bus").
        notes: What is shown but does not block (advisory Xids with their advice, clock-event reasons,
            persistence off, Xids the driver or the site accepts).
        needs_reset: Whether a GPU reset is the remedy (the reset plan's input).
    """

    action: str = ACTION_NONE
    causes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def blocking(self) -> bool:
        return self.action in BLOCKING_ACTIONS

    @property
    def needs_reset(self) -> bool:
        return self.action in (ACTION_RESET, ACTION_DRAIN_AND_RESET)


def recovery_action(code: int) -> tuple[str, str]:
    """(NVIDIA's name, action) of a recovery-action code; an unknown code is named by number and blocks."""
    return RECOVERY_ACTIONS.get(code, (f"unknown recovery action {code}", ACTION_UNKNOWN_RECOVERY))


def xid_action(event: XidEvent, fabric: bool = False) -> tuple[str, str, str]:
    """(meaning, action, advice) of one Xid: the table's row, else what its own line says (154 by its code,
    144-150 by their severity), else "unclassified" (blocks). Xid 45 never blocks; ``fabric``: the GPU has an
    NVLink fabric, which its advice then names."""
    if event.xid == XID_RECOVERY_ACTION:
        code = _RECOVERY_CODE.search(event.detail)
        if code is None:
            return "GPU recovery action changed (no code in the line)", ACTION_INVESTIGATE, ""
        name, action = recovery_action(int(code.group(1), 16))
        return f"GPU recovery action changed to {name}", action, ""
    if event.xid in XID_NVLINK5:
        line = _NVLINK5_LINE.search(event.detail)
        if line is None:
            return "NVLink5 error", ACTION_INVESTIGATE, "the line names no unit: see " + XID_CATALOGUE
        unit, severity = line.groups()
        if severity == "Fatal":
            return f"NVLink5 {unit} fatal error", ACTION_RESET, ""
        return f"NVLink5 {unit} non-fatal error", ACTION_NONE, _INFO
    if event.xid == XID_PREEMPTIVE_CLEANUP:
        return PREEMPTIVE_CLEANUP, ACTION_NONE, PREEMPTIVE_CLEANUP_FABRIC if fabric else _INFO
    row = XID_TABLE.get(event.xid)
    if row is not None:
        return row
    return f"unclassified Xid {event.xid} since boot", ACTION_INVESTIGATE, "see " + XID_CATALOGUE


def xid_text(event: XidEvent) -> str:
    """ "Xid 79: GPU has fallen off the bus"."""
    meaning = xid_action(event)[0]
    return meaning if meaning.startswith("unclassified") else f"Xid {event.xid}: {meaning}"


def _when(event: XidEvent) -> str:
    return "" if event.time is None else f" at {clock_time(event.time)}"


def assess(fitness: GpuFitness | None, accepted_xids: frozenset[int] = frozenset()) -> FitnessAssessment:
    """What this GPU's fitness asks for (the one derivation every view shows); ``accepted_xids``: Xids the
    site accepts (shown, never blocking), Xid 154 excepted: it is the driver's recovery action in its log
    form, which blocks until the driver says None, whatever the site lists."""
    if fitness is None:
        return FitnessAssessment()
    found: list[tuple[str, str]] = []
    notes: list[str] = []

    def note(text: str) -> None:
        if text not in notes:
            notes.append(text)

    if fitness.reset_required:
        found.append((ACTION_RESET, STATE_RESET_REQUIRED))
    if fitness.remap_failure:
        found.append((ACTION_DRAIN, STATE_REMAP_FAILURE))
    if fitness.remap_pending:
        found.append((ACTION_RESET, STATE_REMAP_PENDING))
    if fitness.retired_pages_pending:
        found.append((ACTION_REBOOT, STATE_RETIRED_PENDING))
    if fitness.ecc_uncorrected_volatile:
        count = fitness.ecc_uncorrected_volatile
        errors = "error" if count == 1 else "errors"
        found.append((ACTION_RESET, f"{count} uncorrected ECC {errors} since the last reset"))
    fabric_reason = _fabric_reason(fitness)
    if fabric_reason is not None:
        found.append((ACTION_FABRIC, fabric_reason))
    driver = fitness.recovery_action
    live = [e for e in fitness.xids if counts(e)]
    changes = [e for e in live if e.xid == XID_RECOVERY_ACTION]  # oldest first, as the collector lists them
    newest_154 = changes[-1] if changes else None
    explained: list[str] = []
    for event in live:
        if event.xid == XID_RECOVERY_ACTION and event is not newest_154:
            continue  # a later change of the action supersedes it
        meaning, action, advice = xid_action(event, fabric=fitness.fabric_state is not None)
        text = meaning if meaning.startswith("unclassified") else f"Xid {event.xid}: {meaning}"
        if action in BLOCKING_ACTIONS and _recurred(fitness, event):
            text += "; recurred after a reset: investigate"
        if action not in BLOCKING_ACTIONS:
            note(f"{text}; {advice}" if advice else text)
        elif event.xid in accepted_xids and event.xid != XID_RECOVERY_ACTION:
            note(f"{text}; accepted by the site's config")
        elif driver is not None:
            explained.append(f"{text}{_when(event)}")
        else:
            cause = f"{text}; {advice}" if advice else text
            if all(c != cause for _, c in found):
                found.append((action, cause))
    if driver is not None:
        name, action = recovery_action(driver)
        if action == ACTION_NONE:
            for text in explained:
                note(f"{text}; the driver asks for nothing")
        else:
            said = (
                f"the driver asks for {name}"
                if action != ACTION_UNKNOWN_RECOVERY
                else f"the driver reports {name}"
            )
            found.append((action, "; ".join([*explained[-1:], said])))
    reasons = fitness.clock_event_reasons or 0
    for bit, name in HW_CLOCK_REASONS.items():
        if reasons & bit:
            note(f"clocks held down: {name}")
    if fitness.persistence_mode is False:
        note("persistence mode off")
    if not found:
        return FitnessAssessment(notes=tuple(notes))
    found.sort(key=lambda item: -ACTION_RANK[item[0]])
    return FitnessAssessment(
        action=found[0][0], causes=tuple(cause for _, cause in found), notes=tuple(notes)
    )


def counts(event: XidEvent) -> bool:
    """Whether an Xid still counts: not cleared, or cleared by a GPU reset while only a reboot recovers from
    it (a reset does not bring a GPU back onto the bus)."""
    if event.cleared is None:
        return True
    return "reset" in event.cleared and xid_action(event)[1] in (ACTION_REBOOT, ACTION_SYSTEM_REBOOT)


def _order(event: XidEvent) -> float:
    return event.time if event.time is not None else float("-inf")


def _recurred(fitness: GpuFitness, event: XidEvent) -> bool:
    """Whether the same Xid was logged before a reset that cleared it: the reset did not fix the cause."""
    return any(
        e.xid == event.xid and e.cleared is not None and "reset" in e.cleared and _order(e) <= _order(event)
        for e in fitness.xids
    )


def _fabric_reason(fitness: GpuFitness) -> str | None:
    """ "NVLink fabric registration in progress (fabric manager not running)", or None when registered (or the
    GPU has no fabric)."""
    state = fitness.fabric_state
    if state is None:
        return None
    status = fitness.fabric_status
    if state == FABRIC_COMPLETED and not status:
        return None
    if state == FABRIC_COMPLETED:
        said = (
            f"NVLink fabric registration failed: {NVML_RETURN_NAMES.get(status or 0, f'NVML error {status}')}"
        )
    else:
        said = f"NVLink fabric registration {FABRIC_STATES.get(state, f'in state {state}')}"
    if fitness.fabric_manager is not None:
        said += f" (fabric manager {fitness.fabric_manager})"
    return said


def assessed(gpu: Gpu) -> FitnessAssessment:
    """The assessment the verdict engine stored on this GPU (``with_assessment``), else one made now."""
    fitness = gpu.fitness
    if fitness is not None and fitness.action is not None:
        return FitnessAssessment(action=fitness.action, causes=fitness.causes, notes=fitness.notes)
    return assess(fitness)


def unreachable_action(gpu: Gpu, wedged: bool) -> tuple[str, str] | None:
    """(action, cause) for a GPU the driver cannot reach as a known fact: lost (a reboot), RESET_REQUIRED (a
    reset), or timing out while every GPU of the host does (``wedged``: a reboot); None otherwise (a GPU that
    merely could not be read this time cannot tell)."""
    if gpu.unreachable == UNREACHABLE_LOST:
        return ACTION_REBOOT, "the driver says it is lost"
    if gpu.unreachable == UNREACHABLE_RESET_REQUIRED:
        return ACTION_RESET, STATE_RESET_REQUIRED
    if gpu.unreachable == UNREACHABLE_TIMED_OUT and wedged:
        return (
            ACTION_REBOOT,
            f"no NVML call on any GPU of the host returned, {gpu.timeouts_in_row} samples in a row: the"
            " driver is wedged",
        )
    return None


def driver_wedged(snapshot: HostSnapshot) -> bool:
    """Whether every GPU of the host has timed out ``WEDGED_AFTER_SAMPLES`` samples in a row."""
    return bool(snapshot.gpus) and all(
        g.unreachable == UNREACHABLE_TIMED_OUT and g.timeouts_in_row >= WEDGED_AFTER_SAMPLES
        for g in snapshot.gpus
    )


def unreachable_reason(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
    """ "GPU2 needs a reboot of the host (the driver says it is lost)"; None: see ``unreachable_action``."""
    found = unreachable_action(gpu, driver_wedged(snapshot))
    if found is None:
        return None
    action, cause = found
    return f"GPU{gpu.index} {ACTION_WORDS[action]} ({cause})"


def unfit_reason(gpu: Gpu, assessment: FitnessAssessment) -> str | None:
    """ "GPU3 needs a reset (row remap pending)", or None when the GPU's fitness asks for nothing."""
    if not assessment.blocking:
        return None
    return f"GPU{gpu.index} {ACTION_WORDS[assessment.action]} ({fit('; '.join(assessment.causes), 200)})"


def needs_reset(gpu: Gpu) -> bool:
    """Whether this GPU's fitness asks for a reset (the reset plan's input)."""
    return assessed(gpu).needs_reset


def with_assessment(snapshot: HostSnapshot, accepted_xids: frozenset[int] = frozenset()) -> HostSnapshot:
    """The snapshot with each GPU's ``fitness.action``, ``causes``, ``notes`` and ``needs_reset`` set (what a
    collector's dict said of them is replaced)."""
    gpus = []
    changed = False
    for gpu in snapshot.gpus:
        if gpu.fitness is None:
            gpus.append(gpu)
            continue
        judged = assess(gpu.fitness, accepted_xids)
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
    """The host's kernel log that could not be read (once), each GPU's blocking fitness (or, for a GPU the
    driver cannot reach, what that needs), its advisory Xids, and Xids for PCI addresses no GPU has."""
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
    wedged = driver_wedged(snapshot)
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        unreachable = unreachable_action(gpu, wedged)
        if unreachable is not None:
            findings.append(
                Finding(
                    kind="gpu_health",
                    target=target,
                    gpu_index=gpu.index,
                    detail=f"GPU{gpu.index} {ACTION_WORDS[unreachable[0]]} ({unreachable[1]})",
                    action=_for_gpu(ACTION_HINTS[unreachable[0]], gpu.index),
                )
            )
            continue
        judged = assessed(gpu)
        reason = unfit_reason(gpu, judged)
        if reason is not None:
            findings.append(
                Finding(
                    kind="gpu_health",
                    target=target,
                    gpu_index=gpu.index,
                    detail=reason,
                    action=_for_gpu(
                        ACTION_HINTS[judged.action], gpu.index, unknown_recovery_code(gpu.fitness)
                    ),
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
                        # Said of this Xid alone: the GPU may still be unfit for another cause (its own
                        # finding above), never called fit here.
                        action=(
                            "it says what happened to the last job"
                            if reason is not None
                            else "it says what happened to the last job; the GPU itself is fit"
                        ),
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


def _for_gpu(hint: str, index: int, value: int | None = None) -> str:
    """An action's hint for one GPU: its ``N`` (``-i N``, ``GPU N``) becomes the index, its ``V``
    (``value V``) the driver's recovery action (``unknown_recovery_code``)."""
    hint = re.sub(r"\bN\b", str(index), hint)
    return re.sub(r"\bV\b", "?" if value is None else str(value), hint)


def unknown_recovery_code(fitness: GpuFitness | None) -> int | None:
    """The recovery action the driver asks for that ``RECOVERY_ACTIONS`` does not know: NVML's field where it
    reports one, else the newest counting Xid 154's code; None when the action is a known one (or none)."""
    if fitness is None:
        return None
    code: int | None = fitness.recovery_action
    if code is None:
        changes = [e for e in fitness.xids if e.xid == XID_RECOVERY_ACTION and counts(e)]
        found = _RECOVERY_CODE.search(changes[-1].detail) if changes else None
        code = None if found is None else int(found.group(1), 16)
    return None if code is None or code in RECOVERY_ACTIONS else code


def lost_gpu_event(event: XidEvent) -> bool:
    """Whether an Xid logged for a PCI address no GPU has now says that GPU is lost until a reboot (Xid 79,
    fallen off the bus): the host is short of a GPU, not merely renumbered."""
    return counts(event) and xid_action(event)[1] == ACTION_REBOOT


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
        ("recovery action (driver)", _recovery_figure(fitness.recovery_action)),
        ("NVLink fabric", _fabric_figure(fitness)),
    ]


def _recovery_figure(code: int | None) -> str:
    if code is None:
        return "– (a driver before R565 reports none)"
    return recovery_action(code)[0]


def _fabric_figure(fitness: GpuFitness) -> str:
    if fitness.fabric_state is None:
        return "– (none on this GPU)"
    reason = _fabric_reason(fitness)
    return "registered" if reason is None else reason.removeprefix("NVLink fabric ")


def fitness_summary(gpu: Gpu) -> str | None:
    """One line of a GPU's fitness for text views: its action and causes, else its notes, else "ok"."""
    if gpu.fitness is None:
        return None
    judged = assessed(gpu)
    if judged.blocking:
        text = f"{ACTION_WORDS[judged.action]} ({'; '.join(judged.causes)})"
    else:
        text = "ok"
    if judged.notes:
        text += "; " + "; ".join(judged.notes)
    return fit(text, 300)
