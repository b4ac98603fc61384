"""Whether a GPU is fit for the next job: the reasons that make a verdict NOT READY.

A clean slate says nothing is left of the last job; NOT READY says the GPU itself needs a reset, a reboot or a
drain first, whatever its memory says. The verdict engine (``verdict.clean_slate``) asks every rule of
``UNFIT_RULES`` about every GPU it can read and puts each answer, as said, among the verdict's reasons (first)
and in ``Verdict.not_ready``; views say NOT READY from that alone.

The hook: a rule is a function ``(snapshot, gpu) -> str | None``: None when it finds the GPU fit, else one
sentence that names the GPU and what it needs ("GPU3 needs a reset: …"). Adding a check of the GPU's own
fitness (remapped rows, ECC, Xid) is one more entry in ``UNFIT_RULES``. Rules are pure: no I/O, no clock
(the snapshot's ``time`` is the only now).
"""

from __future__ import annotations

from collections.abc import Callable

from gputui.core.jobs import proc_label, sample_index
from gputui.core.model import STATE_UNINTERRUPTIBLE, Gpu, HostSnapshot
from gputui.core.text import age_text
from gputui.core.verdict.findings import DEFUNCT_RESET_AFTER_S
from gputui.core.verdict.fitness import assessed, unfit_reason
from gputui.core.verdict.probing import probe_reason
from gputui.core.verdict.stuck import reboot_reason

UnfitRule = Callable[[HostSnapshot, Gpu], "str | None"]
"""Why a GPU is not fit for the next job (one sentence naming it), None when this rule finds it fit."""


def stuck_in_driver(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
    """A process holding memory on this GPU whose killed thread has been in a function of an NVIDIA kernel
    module for ``stuck.STUCK_WINDOW_S`` (its kernel stack says so): a reboot of the host
    (``stuck.reboot_reason``). Else a defunct leader whose threads have been in the driver (D) for
    ``DEFUNCT_RESET_AFTER_S`` while it holds memory on this GPU: that memory comes back only with a reset of
    the GPU or of its driver. The sample's defunct leaders are looked up (``jobs.sample_index``), not every
    process of it for every GPU."""
    if snapshot.time is None or not snapshot.processes:
        return None
    reboot = reboot_reason(snapshot, gpu)
    if reboot is not None:
        return reboot
    for proc in sample_index(snapshot).defunct_leaders:
        threads = proc.live_threads
        if threads is None or not threads.states.get(STATE_UNINTERRUPTIBLE):
            continue
        if not proc.gpu_memory_mib.get(gpu.index) or proc.state_since is None:
            continue
        age_s = snapshot.time - proc.state_since
        if age_s >= DEFUNCT_RESET_AFTER_S:
            return defunct_reset_reason(gpu.index, proc_label(proc), age_s)
    return None


def defunct_reset_reason(index: int, label: str, age_s: float) -> str:
    """``stuck_in_driver``'s sentence for a defunct leader (``label``: "4241 (python)") whose threads have
    been in the driver for ``age_s`` while it holds memory on GPU ``index`` (the fleet words an exported
    finding's facts with it too)."""
    return (
        f"GPU{index} needs a reset: pid {label} has held its memory with threads "
        f"stuck in the driver for {age_text(age_s)}"
    )


def fitness_asks(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
    """The GPU's own fitness asks for an action before the next job (the driver's recovery action, an Xid, a
    pending row remap, uncorrected ECC, the NVLink fabric: ``verdict.fitness``'s one derivation)."""
    return unfit_reason(gpu, assessed(gpu))


UNFIT_RULES: list[UnfitRule] = [fitness_asks, stuck_in_driver, probe_reason]
"""Every rule the verdict asks about every readable GPU, in order (see the module docstring)."""


def unfit_reasons(snapshot: HostSnapshot, gpu: Gpu) -> list[str]:
    """Every rule's answer for this GPU (none when it is fit)."""
    return [reason for rule in UNFIT_RULES if (reason := rule(snapshot, gpu)) is not None]
