"""The clean slate as three facts, one line each: every worker of the job gone, no residue, every GPU fit.

``with_facts`` sorts a judged snapshot's reasons into the three (each reason into exactly one) and words each
fact once, here; the receipt, ``check`` (text and JSON: ``verdict.facts.{workers,residue,gpus}``) and the
TUI's clean-slate line all show these lines. CLEAN only when all three hold.

* *workers*: no GPU process listed, no process of a job left running (a survivor), no server still failing;
* *residue*: no zombie or D-state process left of a GPU job, no port of a job gone still in LISTEN, no
  leftover in /dev/shm or MPS daemon;
* *GPUs*: every GPU's memory at its baseline, every GPU readable, fit (``readiness``) and still listed.

A reason that is neither a worker's nor a GPU's is residue. The receipt's times (``receipt_times``) are
worded here too, once, for the TUI and ``gputui kill`` alike. Nothing here does I/O.
"""

from __future__ import annotations

import time

from gputui.core.jobs import sample_index
from gputui.core.model import HostSnapshot, ProbeReport, Verdict, VerdictFact, VerdictFacts, replace
from gputui.core.text import duration
from gputui.core.verdict.probing import probe_line
from gputui.core.verdict.remains import nothing_recorded
from gputui.core.verdict.slate import gpu_holders

WORKER_KINDS = frozenset({"survivor"})
"""Finding kinds whose sentence is about a worker still there."""
RESIDUE_OK = "none left"


def _clock(epoch_s: float | None) -> str | None:
    if epoch_s is None:
        return None
    try:
        return time.strftime("%H:%M", time.localtime(epoch_s))
    except (OverflowError, OSError, ValueError):
        return None


def workers_line(snapshot: HostSnapshot) -> str:
    """ "13 of 13 processes of the job seen at 03:57 are gone", or, with no job remembered, "no GPU process
    left"."""
    remembered = snapshot.remembered
    job = remembered.jobs[0] if remembered is not None and remembered.jobs else None
    if job is None:
        return "no GPU process left"
    at = _clock(job.first_seen)
    seen = f" seen at {at}" if at else ""
    text = f"{job.gone} of {job.members_total} processes of the job{seen} are gone"
    if job.unseen:
        text += f"; {len(job.unseen)} cannot be seen (another user's?)"
    return text


def gpus_line(verdict: Verdict, probe: ProbeReport | None = None) -> str:
    """ "8/8 GPUs at baseline and fit", and what the readiness probe proved where one ran."""
    at = f"{verdict.gpus_at_baseline}/{len(verdict.gpus)} GPUs at baseline"
    line = f"{at} and fit" if not verdict.not_ready else at
    proved = probe_line(probe)
    return line if proved is None else f"{line}; {proved}"


def _sorted_reasons(snapshot: HostSnapshot, verdict: Verdict) -> tuple[list[str], list[str], list[str]]:
    """The verdict's reasons as (workers, residue, GPUs), each in the verdict's order."""
    table_gpus = {gpu.index: gpu for gpu in snapshot.gpus}
    index = sample_index(snapshot)
    gpu_reasons = set(verdict.not_ready)  # a GPU gone or lost is NOT READY too
    worker_reasons: set[str] = set()
    for gpu_verdict in verdict.gpus:
        gpu = table_gpus.get(gpu_verdict.index)
        held = gpu is not None and bool(gpu_holders(gpu, index))
        for position, reason in enumerate(gpu_verdict.reasons):
            last = position == len(gpu_verdict.reasons) - 1
            if held and last and reason not in verdict.not_ready:
                worker_reasons.add(reason)  # "GPU0 41003 MiB held by pid 4241 (…)"
            else:
                gpu_reasons.add(reason)
    worker_reasons.update(f.detail for f in snapshot.findings if f.kind in WORKER_KINDS)
    if snapshot.endpoints:
        from gputui.core.servers import failing_servers

        worker_reasons.update(failing_servers(snapshot.endpoints))
    workers, residue, gpus = [], [], []
    for reason in verdict.reasons:
        if reason in gpu_reasons:
            gpus.append(reason)
        elif reason in worker_reasons:
            workers.append(reason)
        else:
            residue.append(reason)
    return workers, residue, gpus


def with_facts(snapshot: HostSnapshot) -> HostSnapshot:
    """The snapshot with its verdict's three facts (a verdict that cannot tell gets none)."""
    verdict = snapshot.verdict
    if verdict is None or not verdict.known:
        return snapshot
    workers, residue, gpus = _sorted_reasons(snapshot, verdict)
    facts = VerdictFacts(
        workers=VerdictFact(
            ok=not workers,
            line=workers_line(snapshot) if not workers else workers[0],
            reasons=tuple(workers),
            note=nothing_recorded(snapshot),
        ),
        residue=VerdictFact(
            ok=not residue, line=RESIDUE_OK if not residue else residue[0], reasons=tuple(residue)
        ),
        gpus=VerdictFact(
            ok=not gpus, line=gpus_line(verdict, snapshot.probe) if not gpus else gpus[0], reasons=tuple(gpus)
        ),
        proof=probe_line(snapshot.probe),
    )
    return replace(snapshot, verdict=replace(verdict, facts=facts))


def receipt_times(
    signal_at: float | None,
    workers_gone_at: float | None,
    memory_back_at: float | None,
    ports: tuple[int, ...] = (),
    ports_free_at: float | None = None,
) -> str:
    """``workers gone 1.3 s after the signal · memory back 0.2 s later · port 30000 free 0.1 s later``: when
    each event of a kill's receipt happened, measured between the events themselves (the collector's
    clock: the kill's outcomes and the samples that first showed memory at baseline and the ports free),
    never between the moments gputui got to look. Each event follows the one before it; one that is not
    known is left out (a port with its own line when its time is not known). "" when there was no signal.
    """
    if signal_at is None:
        return ""
    events = [("workers gone", workers_gone_at), ("memory back", memory_back_at)]
    if ports:
        plural = "s" if len(ports) > 1 else ""
        events.append((f"port{plural} {', '.join(map(str, ports))} free", ports_free_at))
    parts: list[str] = []
    last_s = signal_at
    for what, at in sorted(
        ((what, at) for what, at in events if at is not None and at >= signal_at), key=lambda e: e[1]
    ):
        since = "after the signal" if not parts else "later"
        parts.append(f"{what} {duration(max(0.0, at - last_s))} {since}")
        last_s = at
    if ports and (ports_free_at is None or ports_free_at < signal_at):
        parts.append(f"port{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))} free")
    return " · ".join(parts)


FACT_LABELS = (("workers", "workers"), ("residue", "residue"), ("gpus", "GPUs"))
"""Each fact's field and the word every view labels it with, in the order they are said."""


def fact_rows(facts: VerdictFacts) -> list[tuple[str, bool, str]]:
    """(label, holds, line) of each fact, in ``FACT_LABELS`` order."""
    return [(label, getattr(facts, name).ok, getattr(facts, name).line) for name, label in FACT_LABELS]


def fact_label(facts: VerdictFacts, reason: str) -> str | None:
    """The label of the fact ``reason`` is about (None: none of them has it)."""
    for name, label in FACT_LABELS:
        if reason in getattr(facts, name).reasons:
            return label
    return None
