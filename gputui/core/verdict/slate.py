"""The clean-slate verdict: is every GPU of a host back at its idle baseline, nothing left of its GPU jobs?

Nothing here does I/O or reads a clock; a host error, a host without GPUs and a GPU that cannot be read give a
verdict that cannot tell (``known`` False), never a clean one. A GPU whose driver reports no memory of its own
(unified memory, ``Gpu.memory_unreported``) is judged by its processes alone, and its line says so.
"""

from __future__ import annotations

from gputui.core.jobs import SampleIndex, is_init_like, sample_index, shown
from gputui.core.model import (
    STATE_UNINTERRUPTIBLE,
    STATE_ZOMBIE,
    Gpu,
    GpuVerdict,
    HostSnapshot,
    Proc,
    Verdict,
)
from gputui.core.text import fit
from gputui.core.verdict.baselines import Baselines
from gputui.core.verdict.findings import ghost_suspects, suspect_text
from gputui.core.verdict.fitness import unreachable_reason
from gputui.core.verdict.probing import probe_unavailable
from gputui.core.verdict.readiness import unfit_reasons
from gputui.core.verdict.stuck import remnant_sentence

MAX_HOLDERS_IN_REASON = 3


def memory_at_baseline(snapshot: HostSnapshot, baselines: Baselines) -> bool:
    """Whether every GPU's memory alone is back at its baseline (+ tolerance).

    The cheap test for a fast memory-only sample while memory drains: such a sample carries the last process
    list, which may be a process interval old, so the full verdict on it would wait for the next process
    sample. A True here only says it is worth taking a full sample to confirm with ``clean_slate``.
    """
    if snapshot.error is not None or not snapshot.gpus:
        return False
    return all(
        gpu.error is None
        and (
            not gpu.processes  # memory not reported: its processes are all there is to go by
            if memory_unreported(gpu)
            else gpu.memory_used_mib is not None
            and gpu.memory_used_mib <= baselines.for_gpu(gpu) + baselines.tolerance_mib
        )
        for gpu in snapshot.gpus
    )


def memory_unreported(gpu: Gpu) -> bool:
    """Whether the driver reports no memory for this GPU (unified memory): judged by its processes alone."""
    return gpu.memory_unreported and gpu.memory_used_mib is None and gpu.error is None


def _unknown_verdict(snapshot: HostSnapshot, keyed: dict[str, int], baselines: Baselines) -> Verdict:
    """The verdict of a host that cannot be judged: a host error, or no GPU at all."""
    cause = snapshot.error or "no GPUs found"
    return Verdict(
        clean=False,
        known=False,
        reasons=(fit(cause, 200),),
        baseline_mib=keyed,
        tolerance_mib=baselines.tolerance_mib,
    )


def unreadable_reason(gpu: Gpu) -> str | None:
    """Why this GPU's memory cannot be judged (an error, no figure), or None when it can."""
    if gpu.error is not None:
        return f"GPU{gpu.index} error: {fit(gpu.error, 80)}"
    if gpu.memory_used_mib is None and not gpu.memory_unreported:
        return f"GPU{gpu.index} memory could not be read"
    return None


UNIFIED_MEMORY = "memory not reported (unified memory)"
"""What a GPU whose driver reports no memory of its own is, in every sentence about it."""


def unreported_memory_note(index: int) -> str:
    """ "GPU0 memory not reported (unified memory): judged by its processes" (the line of such a GPU)."""
    return f"GPU{index} {UNIFIED_MEMORY}: judged by its processes"


def unreported_held_reason(index: int, held_by: str) -> str:
    """ "GPU0 memory not reported (unified memory): held by pid 4241 (…)"."""
    return f"GPU{index} {UNIFIED_MEMORY}: held by {held_by}"


def unreported_reason(index: int) -> str:
    """ "GPU0 memory not reported (unified memory)": a source without processes cannot judge such a GPU."""
    return f"GPU{index} {UNIFIED_MEMORY}"


MEMORY_ONLY = "memory only"
"""How a memory-only verdict names itself in its reasons."""


def memory_verdict(snapshot: HostSnapshot, baselines: Baselines) -> Verdict:
    """Is every GPU's memory back at its idle baseline? For sources that list no processes (the fleet view).

    The same per-GPU rule as ``clean_slate`` on memory alone: a process still listed, a zombie or a D-state
    process left from a GPU tree cannot be seen here, so a clean memory verdict is not a clean slate. A GPU
    with an error or without a figure, a host error and a host without GPUs give ``known=False``.
    """
    keyed = {gpu.key: baselines.for_gpu(gpu) for gpu in snapshot.gpus}
    if snapshot.error is not None or not snapshot.gpus:
        return _unknown_verdict(snapshot, keyed, baselines)
    gpu_verdicts: list[GpuVerdict] = []
    reasons: list[str] = []
    not_ready: list[str] = []
    unreadable = False
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        baseline = baselines.for_gpu(gpu)
        reason = unreported_reason(gpu.index) if memory_unreported(gpu) else unreadable_reason(gpu)
        unreadable = unreadable or reason is not None
        used = gpu.memory_used_mib
        unfit = unfit_reasons(snapshot, gpu) if reason is None else []
        not_ready.extend(unfit)
        if reason is None and used is not None and used > baseline + baselines.tolerance_mib:
            reason = memory_only_reason(gpu.index, used, baseline)
        gpu_reasons = (*unfit, *(() if reason is None else (reason,)))
        gpu_verdicts.append(
            GpuVerdict(
                index=gpu.index,
                used_mib=used,
                baseline_mib=baseline,
                clean=reason is None and not unfit,
                reasons=gpu_reasons,
            )
        )
        reasons.extend(r for r in gpu_reasons if r not in not_ready)
    return _known_verdict(reasons, keyed, baselines, gpu_verdicts, known=not unreadable, not_ready=not_ready)


def _known_verdict(
    reasons: list[str],
    keyed: dict[str, int],
    baselines: Baselines,
    gpu_verdicts: list[GpuVerdict],
    known: bool,
    not_ready: list[str] | None = None,
) -> Verdict:
    """The verdict of a host that could be sampled: clean when nothing gave a reason; ``known`` False when a
    GPU could not be read (cannot tell, never clean); NOT READY reasons come first."""
    unfit = tuple(not_ready or ())
    return Verdict(
        clean=not reasons and not unfit,
        reasons=unfit + tuple(reasons),
        baseline_mib=keyed,
        tolerance_mib=baselines.tolerance_mib,
        gpus=tuple(gpu_verdicts),
        known=known,
        not_ready=unfit,
    )


def clean_slate(snapshot: HostSnapshot, baselines: Baselines, one_shot: bool = False) -> Verdict:
    """Is every GPU of the host back at its idle baseline, with nothing left of the GPU process trees?

    Clean when every GPU's used memory is at most its baseline + tolerance, no GPU lists a process, and no
    zombie or D-state process remains in a GPU process tree. A host error, a host without GPUs, and a GPU
    whose memory cannot be read this time give ``known=False``: "cannot tell", never clean. A GPU the driver
    cannot reach as a known fact (lost, RESET_REQUIRED, every GPU timing out sample after sample:
    ``fitness.unreachable_reason``) is NOT READY with its action instead. The reasons say why without that
    prefix; whoever shows the verdict says "cannot tell" once.

    A GPU that a rule of ``readiness.UNFIT_RULES`` finds unfit makes the verdict NOT READY (its reason
    first). A zombie or D-state process is worded as its finding is (``stuck.remnant_sentence``);
    ``one_shot``: the sample of a one-shot run, where a D state's age is not known.
    """
    keyed = {gpu.key: baselines.for_gpu(gpu) for gpu in snapshot.gpus}
    if snapshot.error is not None or not snapshot.gpus:
        return _unknown_verdict(snapshot, keyed, baselines)
    index = sample_index(snapshot)
    table = index.table
    unreadable = False
    gpu_verdicts: list[GpuVerdict] = []
    reasons: list[str] = []
    not_ready: list[str] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        baseline = baselines.for_gpu(gpu)
        used = gpu.memory_used_mib
        gpu_reasons: list[str] = []
        known_unfit = unreachable_reason(snapshot, gpu)
        reason = unreadable_reason(gpu)
        note = unreported_memory_note(gpu.index) if memory_unreported(gpu) else None
        if known_unfit is not None:  # lost, reset required, a wedged driver: a fact, with its action
            not_ready.append(known_unfit)
            gpu_reasons.append(known_unfit)
        elif reason is not None:
            gpu_reasons.append(reason)
            unreadable = True
        elif note is not None:  # no figure to go by: a process still listed is all that holds it
            unfit = unfit_reasons(snapshot, gpu)
            not_ready.extend(unfit)
            gpu_reasons.extend(unfit)
            holders = gpu_holders(gpu, index)
            if holders:
                gpu_reasons.append(unreported_held_reason(gpu.index, _held_by(holders, table)))
        elif used is not None:  # always, once readable: said for the type checker
            unfit = unfit_reasons(snapshot, gpu)
            not_ready.extend(unfit)
            gpu_reasons.extend(unfit)
            holders = gpu_holders(gpu, index)
            over = used > baseline + baselines.tolerance_mib
            if holders:
                gpu_reasons.append(held_reason(gpu.index, used, _held_by(holders, table), over))
            elif over:
                suspects = [
                    suspect_text(*one) for one in ghost_suspects(snapshot, gpu)[:MAX_HOLDERS_IN_REASON]
                ]
                gpu_reasons.append(ghost_reason(gpu.index, used - baseline, suspects))
        unprovable = probe_unavailable(snapshot, gpu)
        if unprovable is not None:  # a probe was asked for and cannot run: the GPU fact cannot be proven
            gpu_reasons.append(unprovable)
            unreadable = True
        gpu_verdicts.append(
            GpuVerdict(
                index=gpu.index,
                used_mib=used,
                baseline_mib=baseline,
                clean=not gpu_reasons,
                reasons=tuple(gpu_reasons),
                note=note,
            )
        )
        reasons.extend(r for r in gpu_reasons if r not in not_ready)
    for nodes in index.jobs:
        for node in nodes:
            if node.proc.state in (STATE_ZOMBIE, STATE_UNINTERRUPTIBLE):
                reasons.append(remnant_sentence(snapshot.target, node.proc, table, snapshot.time, one_shot))
    return _known_verdict(reasons, keyed, baselines, gpu_verdicts, known=not unreadable, not_ready=not_ready)


def memory_only_reason(index: int, used_mib: int, baseline_mib: int) -> str:
    """ "GPU3 41236 MiB, 41233 MiB over its 3 MiB baseline (memory only)" (a source without processes)."""
    over = used_mib - baseline_mib
    return f"GPU{index} {used_mib} MiB, {over} MiB over its {baseline_mib} MiB baseline ({MEMORY_ONLY})"


def held_reason(index: int, used_mib: int, held_by: str, over: bool) -> str:
    """ "GPU0 41003 MiB held by pid 4241 (…)", or, at baseline, "GPU0 3 MiB but pid 4241 (…) still listed"."""
    if over:
        return f"GPU{index} {used_mib} MiB held by {held_by}"
    return f"GPU{index} {used_mib} MiB but {held_by} still listed"


def ghost_reason(index: int, excess_mib: int, suspects: list[str]) -> str:
    """ "GPU2 40000 MiB over baseline with no process listed (ghost memory); pid 77 (x) has /dev/nvidia2
    open"."""
    text = f"GPU{index} {excess_mib} MiB over baseline with no process listed (ghost memory)"
    return text + ("; " + "; ".join(suspects) if suspects else "")


def gpu_holders(gpu: Gpu, index: SampleIndex) -> list[tuple[int, Proc | None, int | None, bool]]:
    """(pid, Proc or None, MiB or None, visible) for every process listed on this GPU, most memory first;
    ``index``: the sample's (``jobs.sample_index``), whose processes with a figure for this GPU are the only
    ones read."""
    table = index.table
    holders: dict[int, tuple[int, Proc | None, int | None, bool]] = {}
    for listed in gpu.processes:
        proc = table.get(listed.pid) if listed.visible else None
        mib = listed.used_mib
        if listed.pid in holders and holders[listed.pid][3] == listed.visible:
            previous = holders[listed.pid][2]
            mib = None if mib is None or previous is None else max(mib, previous)
        holders[listed.pid] = (listed.pid, proc, mib, listed.visible)
    for proc in index.on_gpu.get(gpu.index, ()):
        mib = proc.gpu_memory_mib[gpu.index]
        if proc.pid not in holders:
            holders[proc.pid] = (proc.pid, proc, mib, True)
    return sorted(holders.values(), key=lambda h: (-(h[2] or 0), h[0]))


def _held_by(holders: list[tuple[int, Proc | None, int | None, bool]], table: dict[int, Proc]) -> str:
    """The holders of a GPU in one phrase, the first ``MAX_HOLDERS_IN_REASON`` of them by name."""
    texts = []
    for pid, proc, mib, is_visible in holders[:MAX_HOLDERS_IN_REASON]:
        if is_visible:
            texts.append(_holder_text(pid, proc, table, mib, len(holders) > 1))
        else:
            texts.append(f"pid {pid} (not visible here: another PID namespace)")
    if len(holders) > MAX_HOLDERS_IN_REASON:
        texts.append(f"and {len(holders) - MAX_HOLDERS_IN_REASON} more")
    return ", ".join(texts)


def _holder_text(pid: int, proc: Proc | None, table: dict[int, Proc], mib: int | None, show_mib: bool) -> str:
    notes: list[str] = []
    if proc is not None:
        notes.append(shown(proc.name))
        if proc.state == STATE_ZOMBIE:
            notes.append("defunct")
        elif proc.state == STATE_UNINTERRUPTIBLE:
            notes.append("uninterruptible")
        parent = table.get(proc.ppid) if proc.ppid is not None else None
        if parent is not None and parent.state == STATE_ZOMBIE:
            notes.append(f"defunct parent {parent.pid}")
        elif is_init_like(parent, proc.ppid):
            notes.append("orphan")
    if show_mib and mib is not None:
        notes.append(f"{mib} MiB")
    return f"pid {pid} ({', '.join(notes)})" if notes else f"pid {pid}"
