"""What a host's ``gputui exporter`` said, read back by the fleet view: findings, verdict and servers.

The exporter sends each finding's fields, never its sentence (``schema``): kind, GPU, memory, pid, short
name, parent, threads, since, a survivor's job, where each stuck thread waits, a pattern's window and what
did not move in it. They become the finding's facts (``FindingFacts``), worded here by the same function the
monitor's finding was worded by (``verdict.wording``): a fleet finding reads as the monitor's does, built
from what was exported and nothing invented. The verdict is the exporter's (it
saw the processes), its reasons worded from its bounded reason per GPU and from the findings; a GPU held by a
process stuck in the driver is NOT READY by the monitor's rule (``readiness.stuck_in_driver``) asked of the
findings' facts, in its words, and the headline says the tolerance the exporter judged with.

A GPU's fitness travels as its figures (the driver's recovery action, the NVLink fabric, NVML's pending and
failed states, ECC) and the action the exporter judged: the fleet judges the figures with the monitor's one
derivation (``verdict.assess``) and words NOT READY with the monitor's sentence. The Xid history stays on the
host: where the exporter's action asks for more than its figures do (an Xid in the kernel log), that action
is kept and the cause says where to look.

No I/O, no clock, no Textual or Rich.
"""

from __future__ import annotations

from gputui.core.fleet import schema as s
from gputui.core.jobs import shown
from gputui.core.model import (
    STATE_UNINTERRUPTIBLE,
    EndpointSample,
    Finding,
    FindingFacts,
    Gpu,
    GpuFitness,
    GpuVerdict,
    HostSnapshot,
    ProfilerMark,
    Record,
    ThreadWait,
    Verdict,
    field,
    replace,
)
from gputui.core.text import age_text, fit, visible
from gputui.core.verdict import (
    ACTION_NONE,
    ACTION_WORDS,
    DEFAULT_BASELINE_MIB,
    DEFAULT_TOLERANCE_MIB,
    DEFUNCT_RESET_AFTER_S,
    FINDING_SENTENCES,
    REASON_SENTENCES,
    assess,
    assessed,
    word_finding,
)

EXPORTER_NOTE = "from its gputui exporter"


class ExportedSubject(Record):
    """A process a finding names, as the exporter's per-process series describe it."""

    kind: str
    pid: int
    comm: str = ""
    ppid: int | None = None
    parent_comm: str = ""
    memory_mib: dict[int, int] = field(default_factory=dict)
    since: float | None = None
    threads: dict[str, int] = field(default_factory=dict)
    root_pid: int | None = None
    root_comm: str = ""
    why: str = ""
    owner: str = ""
    profiler: ProfilerMark | None = None
    waits: tuple[ThreadWait, ...] = ()
    window_s: float | None = None


class ExportedGpu(Record):
    """One GPU's verdict and process figures as exported.

    Attributes:
        fitness: Its fitness figures as exported (no Xid history, no derived fields); None: not read there.
        action: The action the exporter judged its fitness to ask for ("" when not exported).
    """

    index: int
    clean: bool | None = None
    reason: str = ""
    known: bool | None = None
    baseline_mib: int | None = None
    processes: int | None = None
    process_mib: int | None = None
    holders_known: bool = False
    suspects: tuple[tuple[int, str, str], ...] = ()
    fitness: GpuFitness | None = None
    action: str = ""


class ExportedServer(Record):
    port: str
    engine: str
    state: str
    since: float | None = None


class ExportedHost(Record):
    """Everything one host's gputui exporter said in one answer.

    Attributes:
        instances: The exporter scrape targets the series came from (more than one: a conflict).
        sample_time: When the exporter's newest sample was complete (its clock).
        sample_age_s: That sample's age at the scrape.
        host_up: Whether its collector read the host without a host-level error.
        clean: The host's verdict; None when not exported.
        known: Whether the verdict could be told.
        reason: The host's bounded reason.
        gpus: GPU index -> its exported verdict.
        findings: Kind -> count.
        subjects: The processes findings name (at most ``MAX_SUBJECTS``).
        subjects_omitted: Subjects the exporter left out.
        profiler_unknown: Processes of its GPU jobs whose profiler it could not know.
        servers: Server states.
        checks: Check -> whether the exporter can do it.
        tolerance_mib: The tolerance over each baseline its verdict was judged with; None: not exported.
    """

    instances: tuple[str, ...] = ()
    sample_time: float | None = None
    sample_age_s: float | None = None
    host_up: bool | None = None
    clean: bool | None = None
    known: bool = False
    reason: str = ""
    gpus: dict[int, ExportedGpu] = field(default_factory=dict)
    findings: dict[str, int] = field(default_factory=dict)
    finding_memory: dict[tuple[str, int], int] = field(default_factory=dict)
    subjects: tuple[ExportedSubject, ...] = ()
    subjects_omitted: int = 0
    profiler_unknown: int = 0
    servers: tuple[ExportedServer, ...] = ()
    checks: dict[str, bool] = field(default_factory=dict)
    tolerance_mib: int | None = None

    @property
    def conflict(self) -> bool:
        """Two exporters claim this host: their figures are not merged."""
        return len(self.instances) > 1

    @property
    def dead_held_mib(self) -> int:
        """Memory held by defunct processes and by nobody (ghost memory), over all GPUs."""
        return sum(mib for (kind, _), mib in self.finding_memory.items() if kind in DEAD_KINDS)

    @property
    def cannot_check(self) -> tuple[str, ...]:
        """The checks this exporter says it cannot do."""
        return tuple(sorted(name for name, able in self.checks.items() if not able))


DEAD_KINDS = ("defunct_leader", "zombie", "ghost_memory")
"""Finding kinds whose memory is held by a dead process or by nobody."""


def _subject_facts(subject: ExportedSubject, now: float | None) -> FindingFacts:
    """A process finding's facts from its exported series (a defunct leader's threads: by state, ``?`` the
    threads it did not describe; its stuck threads as the collector orders them: D before R, stuck longest
    first)."""
    threads = {k: v for k, v in subject.threads.items() if k != "?"}
    defunct = subject.kind == "defunct_leader"
    return FindingFacts(
        pid=subject.pid,
        name=visible(subject.comm) if subject.comm else None,
        ppid=subject.ppid,
        parent_name=visible(subject.parent_comm) if subject.parent_comm else None,
        memory_mib=tuple(sorted(subject.memory_mib.items())),
        state_since=subject.since,
        age_s=None if subject.since is None or now is None else max(0.0, now - subject.since),
        threads=tuple(threads.items()) if defunct else (),
        threads_live=sum(threads.values()) if defunct else None,
        threads_omitted=subject.threads.get("?", 0) if defunct else 0,
        root_pid=subject.root_pid,
        root_name=visible(subject.root_comm) if subject.root_comm else None,
        why=subject.why or None,
        owner=visible(subject.owner) if subject.owner else None,
        profiler=subject.profiler,
        waits=tuple(sorted(subject.waits, key=_collector_order)),
        window_s=subject.window_s,
    )


def _collector_order(wait: ThreadWait) -> tuple[bool, float, int]:
    """Where the collector lists a stuck thread among its process's (``agent.proc.waits``): the sentence
    names places in that order, and an answer's series come in none."""
    return wait.state != STATE_UNINTERRUPTIBLE, float("inf") if wait.since is None else wait.since, wait.tid


def _ghost_facts(exported: ExportedHost, gpu: Gpu, excess_mib: int) -> FindingFacts:
    facts = exported.gpus.get(gpu.index)
    baseline = facts.baseline_mib if facts is not None and facts.baseline_mib is not None else None
    suspects = () if facts is None else facts.suspects
    return FindingFacts(
        pid=suspects[0][0] if len(suspects) == 1 else None,
        gpu=gpu.index,
        used_mib=gpu.memory_used_mib,
        baseline_mib=DEFAULT_BASELINE_MIB if baseline is None else baseline,
        listed_mib=None if facts is None else facts.process_mib,
        excess_mib=excess_mib,
        suspects=suspects,
        holders_known=facts is not None and facts.holders_known,
    )


def exported_findings(exported: ExportedHost, snapshot: HostSnapshot, now: float | None) -> list[Finding]:
    """The exporter's findings, worded from their exported facts as the monitor words them (a GPU's fitness:
    from the snapshot's, ``exported_fitness``); one line for subjects left out."""
    kept: list[Finding] = []
    by_index = {gpu.index: gpu for gpu in snapshot.gpus}
    for subject in exported.subjects:
        if subject.kind == "invisible_pid":
            for index, mib in sorted(subject.memory_mib.items()):
                facts = FindingFacts(pid=subject.pid, gpu=index, used_mib=mib)
                kept += [f for f in [word_finding(subject.kind, snapshot.target, facts)] if f is not None]
            continue
        finding = word_finding(subject.kind, snapshot.target, _subject_facts(subject, now))
        if finding is not None:
            kept.append(finding)
    for (kind, index), mib in sorted(exported.finding_memory.items()):
        gpu = by_index.get(index)
        if kind == "ghost_memory" and gpu is not None:
            finding = word_finding(kind, snapshot.target, _ghost_facts(exported, gpu, mib))
            if finding is not None:
                kept.append(finding)
    if exported.profiler_unknown:
        facts = FindingFacts(count=exported.profiler_unknown)
        kept += [f for f in [word_finding("profiler_unknown", snapshot.target, facts)] if f is not None]
    kept += fitness_findings(snapshot)
    if exported.subjects_omitted:
        kept.append(
            Finding(
                kind="omitted",
                target=snapshot.target,
                detail=f"{exported.subjects_omitted} more processes named by findings on this host "
                f"({EXPORTER_NOTE} leaves them out of its series)",
                action="open the host over SSH for all of them",
            )
        )
    return kept


def _gpu_reason(gpu: Gpu, facts: ExportedGpu) -> str | None:
    used = gpu.memory_used_mib
    held = "" if used is None else f" {used} MiB"
    count = facts.processes or 0
    processes = f"{count} process{'' if count == 1 else 'es'}"
    if facts.reason == s.REASON_HELD:
        return f"GPU{gpu.index}{held} held by {processes} ({EXPORTER_NOTE})"
    if facts.reason == s.REASON_LISTED:
        return f"GPU{gpu.index}{held} but {processes} still listed ({EXPORTER_NOTE})"
    if facts.reason == s.REASON_GHOST:
        return f"GPU{gpu.index}{held} over baseline with no process listed (ghost memory)"
    if facts.reason == s.REASON_UNREADABLE:
        return f"GPU{gpu.index} memory could not be read ({EXPORTER_NOTE})"
    if facts.clean is False:
        return f"GPU{gpu.index} not clean ({EXPORTER_NOTE})"
    return None


REMNANT_KINDS = ("zombie", "defunct_leader", "uninterruptible")
KERNEL_LOG_CAUSE = "an Xid in the host's kernel log, as its gputui exporter says"
"""The cause of an exported action its exported figures do not explain: the Xid history stays on the host."""


def exported_fitness(exported: ExportedHost, snapshot: HostSnapshot) -> HostSnapshot:
    """The snapshot with each GPU's fitness as its exporter read it, judged by the monitor's one derivation
    (``verdict.assess``); a GPU the exporter sent no fitness for keeps its own (DCGM's, or none).

    Where the exporter judged a stronger action than its figures ask for (an Xid in the host's kernel log,
    which is not exported), its action is kept, ``KERNEL_LOG_CAUSE`` among the causes.
    """
    gpus: list[Gpu] = []
    for gpu in snapshot.gpus:
        facts = exported.gpus.get(gpu.index)
        if facts is None or facts.fitness is None:
            gpus.append(gpu)
            continue
        judged = assess(facts.fitness)
        action, causes = judged.action, judged.causes
        if facts.action in ACTION_WORDS and facts.action not in (action, ACTION_NONE):
            action, causes = facts.action, (*causes, KERNEL_LOG_CAUSE)
        fitness = replace(facts.fitness, action=action, causes=causes, notes=judged.notes)
        judged_gpu = replace(gpu, fitness=fitness)
        fitness = replace(fitness, needs_reset=assessed(judged_gpu).needs_reset)
        gpus.append(replace(gpu, fitness=fitness))
    return replace(snapshot, gpus=tuple(gpus))


def unfit_reason(gpu: Gpu) -> str | None:
    """ "GPU3 needs a reset (row remap pending)": the monitor's NOT READY sentence for this GPU's fitness;
    None when it asks for nothing (or was not read)."""
    if gpu.fitness is None:
        return None
    reason = REASON_SENTENCES["gpu_health"](gpu, assessed(gpu))
    return reason if isinstance(reason, str) else None


def fitness_findings(snapshot: HostSnapshot) -> list[Finding]:
    """The monitor's ``gpu_health`` finding of each GPU whose fitness blocks (its sentence and action)."""
    return [f for f in FINDING_SENTENCES["gpu_health"](snapshot) if f.kind == "gpu_health"]


def _taken_at(facts: FindingFacts) -> float | None:
    """The time a finding's facts were taken at (their state's start plus its age), when both are known."""
    if facts.state_since is None or facts.age_s is None:
        return None
    return facts.state_since + facts.age_s


def stuck_in_driver(index: int, findings: list[Finding]) -> str | None:
    """The monitor's ``readiness.stuck_in_driver`` for GPU ``index``, asked of the findings' facts (the
    processes the exporter named, never others): a process holding memory there whose killed thread has
    been in an NVIDIA module past the window (a reboot), else a defunct leader holding it with threads in D
    for ``DEFUNCT_RESET_AFTER_S`` (a reset); each in the monitor's words. None when neither."""
    held = [
        (f.kind, f.facts)
        for f in sorted(findings, key=lambda f: (f.pid or 0, f.kind))
        if f.facts is not None and f.facts.pid is not None and dict(f.facts.memory_mib).get(index)
    ]
    for _, facts in held:
        now = _taken_at(facts)
        label = f"{facts.pid} ({shown(facts.name)})"
        reason = None if now is None else REASON_SENTENCES["killed_in_driver"](index, label, facts.waits, now)
        if reason is not None:
            return str(reason)
    for kind, facts in held:
        age = facts.age_s
        if kind == "defunct_leader" and dict(facts.threads).get(STATE_UNINTERRUPTIBLE) and age is not None:
            if age >= DEFUNCT_RESET_AFTER_S:
                label = f"{facts.pid} ({shown(facts.name)})"
                return str(REASON_SENTENCES["defunct_in_driver"](index, label, age))
    return None


def exported_verdict(
    exported: ExportedHost, snapshot: HostSnapshot, findings: list[Finding], stale_after_s: float | None
) -> Verdict:
    """The host's clean-slate verdict as its exporter judged it (processes included, not memory only).

    Cannot tell (``known`` False) when two exporters claim the host, when the exporter's own sample is
    older than ``stale_after_s`` (its collector is stuck: a device may hang), or when it says it cannot.
    """
    keyed = {gpu.key: g.baseline_mib for gpu in snapshot.gpus if (g := exported.gpus.get(gpu.index))}
    baselines = {k: v for k, v in keyed.items() if v is not None}

    tolerance = DEFAULT_TOLERANCE_MIB if exported.tolerance_mib is None else exported.tolerance_mib

    def unknown(reason: str) -> Verdict:
        return Verdict(
            clean=False, known=False, reasons=(reason,), baseline_mib=baselines, tolerance_mib=tolerance
        )

    if exported.conflict:
        names = ", ".join(fit(i, 60) for i in exported.instances[:4])
        return unknown(f"two gputui exporters claim this host ({names}): their figures are not merged")
    age = exported.sample_age_s
    if age is not None and stale_after_s is not None and age > stale_after_s:
        return unknown(f"the gputui exporter's newest sample is {age_text(age)} old (its collector is stuck)")
    if exported.clean is None:
        return unknown(f"no verdict {EXPORTER_NOTE}")
    gpu_verdicts: list[GpuVerdict] = []
    reasons: list[str] = []
    not_ready: list[str] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        facts = exported.gpus.get(gpu.index) or ExportedGpu(index=gpu.index)
        readable = facts.reason != s.REASON_UNREADABLE
        unfit = [
            r for r in (unfit_reason(gpu), stuck_in_driver(gpu.index, findings) if readable else None) if r
        ]
        reason = None if facts.clean else _gpu_reason(gpu, facts)
        if facts.reason == s.REASON_FITNESS and unfit:
            reason = None  # the GPU itself is not fit: its NOT READY sentence says it
        gpu_reasons = (*unfit, *(() if reason is None else (reason,)))
        gpu_verdicts.append(
            GpuVerdict(
                index=gpu.index,
                used_mib=gpu.memory_used_mib,
                baseline_mib=facts.baseline_mib if facts.baseline_mib is not None else DEFAULT_BASELINE_MIB,
                clean=bool(facts.clean) and not unfit,
                reasons=gpu_reasons,
            )
        )
        not_ready.extend(unfit)
        if reason is not None:
            reasons.append(reason)
    reasons.extend(f.detail for f in findings if f.kind in REMNANT_KINDS and f.gpu_index is None)
    if not exported.known:
        reasons = reasons or [f"cannot tell ({EXPORTER_NOTE}: {fit(exported.reason, 20)})"]
    elif not exported.clean and not reasons and not not_ready:
        reasons = [f"not clean ({EXPORTER_NOTE}: {fit(exported.reason, 20)})"]
    return Verdict(
        clean=bool(exported.clean) and exported.known and not not_ready,
        known=exported.known,
        reasons=(*not_ready, *reasons),
        baseline_mib=baselines,
        tolerance_mib=tolerance,
        gpus=tuple(gpu_verdicts),
        not_ready=tuple(not_ready),
    )


def exported_endpoints(exported: ExportedHost, now: float | None) -> tuple[EndpointSample, ...]:
    """The exporter's servers as health samples, named by port (their URLs never travel)."""
    return tuple(
        EndpointSample(
            url=visible(f"port {server.port}" if server.port else "server"),
            state=visible(server.state) if server.state else None,
            since=server.since,
            detail=visible(f"{server.engine}: {EXPORTER_NOTE}" if server.engine else EXPORTER_NOTE),
            checked_at=now,
        )
        for server in exported.servers
    )
