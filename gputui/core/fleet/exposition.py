"""One analysed host sample as Prometheus metric families (``gputui exporter``'s custom collector).

The families are prometheus_client's own (``GaugeMetricFamily`` and friends); its exposition writes the text,
nothing here formats a line. Names and labels are ``schema``'s. Everything is computed from the
snapshot's findings and verdict as ``verdict.analyze`` made them, so the exporter says what ``gputui
check`` says; only bounded fields travel (kind, GPU, memory, pid, short name, threads, since, where a stuck
thread waits, a pattern's window; a GPU's fitness figures and the action they ask for), never a sentence:
the fleet view words them again with the same functions.

No I/O and no clock here: the caller gives the time and the exporter's own figures.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric

from gputui.core.fleet import schema as s
from gputui.core.model import (
    EndpointSample,
    Finding,
    FindingFacts,
    Gpu,
    GpuVerdict,
    HostSnapshot,
    ProfilerMark,
    Record,
    ThreadWait,
)
from gputui.core.servers import SERVER_STATES
from gputui.core.text import fit
from gputui.core.verdict import ACTION_WORDS, Baselines, assessed, recovery_action


class ExportedSample(Record):
    """The newest sample the exporter holds.

    Attributes:
        snapshot: Analysed (findings, verdict) and with its servers judged.
        baselines: The baselines the verdict was judged against.
        finished_at: Epoch seconds when the sample was complete.
        took_s: How long taking and judging it took.
    """

    snapshot: HostSnapshot
    baselines: Baselines
    finished_at: float
    took_s: float


class ExporterFigures(Record):
    """The exporter's own cost and what it can check.

    Attributes:
        cpu_seconds: CPU time spent sampling so far: the process's CPU clock over each sample, so the
            collector's device worker threads count (a scrape that overlaps a sample counts too).
        last_scrape_s: How long the previous scrape took to build, None before the second scrape.
        scrapes: Scrapes answered before this one.
        can_read_other_users: Root (or CAP_SYS_PTRACE): other users' open files are readable.
        can_read_kernel_log: The kernel log can be read.
    """

    cpu_seconds: float = 0.0
    last_scrape_s: float | None = None
    scrapes: int = 0
    can_read_other_users: bool = False
    can_read_kernel_log: bool = False


def comm(name: str | None) -> str:
    """A process name as a label value: visible, at most ``COMM_MAX`` characters."""
    return fit(name or "", s.COMM_MAX)


def server_port(url: str) -> str:
    """The port of a server's URL (its only part that travels: a URL may carry credentials)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return ""
    if port is None:
        return {"http": "80", "https": "443"}.get(parts.scheme, "")
    return str(port)


def gpu_reason(gpu: Gpu, verdict: GpuVerdict | None, listed: bool, baselines: Baselines) -> str:
    """The bounded reason of one GPU's verdict (``schema.REASONS``): what its memory and processes
    say first; a GPU not clean for neither is not fit itself (``REASON_FITNESS``: its fitness says why)."""
    if gpu.error is not None or gpu.memory_used_mib is None:
        return s.REASON_UNREADABLE
    if verdict is None or verdict.clean:
        return s.REASON_CLEAN
    over = gpu.memory_used_mib > baselines.for_gpu(gpu) + baselines.tolerance_mib
    if listed:
        return s.REASON_HELD if over else s.REASON_LISTED
    return s.REASON_GHOST if over else s.REASON_FITNESS


def _holders(snapshot: HostSnapshot) -> dict[int, int]:
    """GPU index -> how many processes the driver lists on it, or the process list says hold memory there."""
    counts: dict[int, set[tuple[bool, int]]] = {}
    for gpu in snapshot.gpus:
        counts.setdefault(gpu.index, set()).update((p.visible, p.pid) for p in gpu.processes)
    for proc in snapshot.processes:
        for index in proc.gpu_memory_mib:
            counts.setdefault(index, set()).add((True, proc.pid))
    return {index: len(pids) for index, pids in counts.items()}


class _Families:
    """Families that all carry the host label, made on demand and listed in creation order."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self._families: dict[str, Metric] = {}

    def gauge(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
        family = self._families.get(name)
        if family is None:
            family = GaugeMetricFamily(name, documentation, labels=[s.HOST_LABEL, *labels])
            self._families[name] = family
        assert isinstance(family, GaugeMetricFamily)  # noqa: S101 - one kind per name, by construction
        return family

    def add(self, family: Metric) -> None:
        self._families[family.name] = family

    def set(self, name: str, documentation: str, value: float, /, **labels: str) -> None:
        family = self.gauge(name, documentation, tuple(labels))
        family.add_metric([self.hostname, *labels.values()], value)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


def families(
    sample: ExportedSample | None, now: float, figures: ExporterFigures, hostname: str, version: str
) -> list[Metric]:
    """Every family of one scrape. Without a sample yet, only the exporter's own figures and host_up 0."""
    out = _Families(hostname)
    snapshot = sample.snapshot if sample is not None else None
    info = InfoMetricFamily(s.INFO, "The gputui exporter and its collector", labels=[s.HOST_LABEL])
    info.add_metric(
        [hostname],
        {
            "version": fit(version, 32),
            "mode": fit((snapshot.mode if snapshot else None) or "", 16),
            "driver": fit((snapshot.driver_version if snapshot else None) or "", 32),
        },
    )
    out.add(info)
    cpu = CounterMetricFamily(
        s.COLLECTOR_CPU, "CPU seconds the collector's samples took", labels=[s.HOST_LABEL]
    )
    cpu.add_metric([hostname], figures.cpu_seconds)
    out.add(cpu)
    scrapes = CounterMetricFamily(s.SCRAPES, "Scrapes answered before this one", labels=[s.HOST_LABEL])
    scrapes.add_metric([hostname], figures.scrapes)
    out.add(scrapes)
    if figures.last_scrape_s is not None:
        out.set(s.SCRAPE_DURATION, "Seconds the previous scrape took to build", figures.last_scrape_s)
    checks = "1 when this exporter can do the check, 0 when it cannot (its own series then say nothing)"
    out.set(s.CHECK_AVAILABLE, checks, float(figures.can_read_other_users), check=s.CHECK_OTHER_USERS)
    out.set(s.CHECK_AVAILABLE, checks, float(figures.can_read_kernel_log), check=s.CHECK_KERNEL_LOG)
    fitness_read = snapshot is not None and any(g.fitness is not None for g in snapshot.gpus)
    out.set(s.CHECK_AVAILABLE, checks, float(fitness_read), check=s.CHECK_GPU_HEALTH)
    if sample is None or snapshot is None:
        out.set(s.HOST_UP, "1 when the collector read the host without a host-level error", 0.0)
        return list(out)
    out.set(s.SAMPLE_TIME, "When the newest sample was complete (epoch seconds)", sample.finished_at)
    out.set(s.SAMPLE_AGE, "Age of the newest sample at this scrape", max(0.0, now - sample.finished_at))
    out.set(s.SAMPLE_DURATION, "Seconds the newest sample took", sample.took_s)
    host_up = snapshot.error is None and bool(snapshot.gpus)
    out.set(s.HOST_UP, "1 when the collector read the host without a host-level error", float(host_up))
    _gpu_families(out, snapshot, sample.baselines)
    out.set(
        s.BASELINE_TOLERANCE,
        "How far over its baseline a GPU's memory may be and still be at baseline",
        sample.baselines.tolerance_mib * s.MIB,
    )
    _fitness_families(out, snapshot)
    _verdict_families(out, snapshot, sample.baselines)
    _finding_families(out, snapshot)
    _server_families(out, snapshot.endpoints)
    return list(out)


def _gpu_families(out: _Families, snapshot: HostSnapshot, baselines: Baselines) -> None:
    holders = _holders(snapshot)
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index)[: s.MAX_GPUS]:
        labels = {
            s.GPU_LABEL: str(gpu.index),
            s.UUID_LABEL: fit(gpu.uuid or "", 64),
            s.MODEL_LABEL: fit(gpu.name or "", 64),
        }
        readable = gpu.error is None and gpu.memory_used_mib is not None
        out.set(s.GPU_READABLE, "1 when the GPU's memory could be read", float(readable), **labels)
        figures = (
            (s.GPU_MEMORY_USED, "GPU memory used", gpu.memory_used_mib, s.MIB),
            (s.GPU_MEMORY_TOTAL, "GPU memory in all", gpu.memory_total_mib, s.MIB),
            (s.GPU_UTILIZATION, "GPU utilisation (0 to 1)", gpu.utilization_pct, 0.01),
            (s.GPU_TEMPERATURE, "GPU temperature", gpu.temperature_c, 1),
            (s.GPU_POWER, "GPU power draw", gpu.power_w, 1),
        )
        for name, documentation, value, scale in figures:
            if value is not None and gpu.error is None:  # a missing figure is no series, never a 0
                out.set(name, documentation, float(value) * scale, **labels)
        index = {s.GPU_LABEL: str(gpu.index), s.UUID_LABEL: labels[s.UUID_LABEL]}
        out.set(s.GPU_BASELINE, "The idle baseline the verdict used", baselines.for_gpu(gpu) * s.MIB, **index)
        out.set(s.GPU_PROCESSES, "Processes listed on the GPU", holders.get(gpu.index, 0), **index)
        if gpu.processes and all(p.used_mib is not None for p in gpu.processes):
            listed = sum(p.used_mib or 0 for p in gpu.processes)
            out.set(s.GPU_PROCESS_MEMORY, "What the listed processes hold", listed * s.MIB, **index)


def _fitness_families(out: _Families, snapshot: HostSnapshot) -> None:
    """Each GPU's fitness as the fields its NOT READY sentence is built from (the driver's recovery action,
    the fabric, NVML's pending and failed states, ECC) and the action it asks for; nothing for a GPU whose
    fitness was not read, and a figure the driver would not give is no series."""
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index)[: s.MAX_GPUS]:
        fitness = gpu.fitness
        if fitness is None:
            continue
        index = {s.GPU_LABEL: str(gpu.index), s.UUID_LABEL: fit(gpu.uuid or "", 64)}
        action = assessed(gpu).action
        for known in ACTION_WORDS:
            out.set(
                s.GPU_FITNESS_ACTION,
                "1 for what the GPU's fitness asks for before the next launch, 0 for the other actions",
                float(known == action),
                **index,
                action=known,
            )
        if fitness.recovery_action is not None:
            out.set(
                s.GPU_RECOVERY_ACTION,
                "The driver's recovery action (nvmlDeviceGpuRecoveryAction_t, NVML field 230)",
                float(fitness.recovery_action),
                **index,
                name=fit(recovery_action(fitness.recovery_action)[0], 40),
            )
        if fitness.fabric_state is not None:
            state = fitness.fabric_state
            out.set(
                s.GPU_FABRIC_STATE,
                "NVLink fabric registration (NVML_GPU_FABRIC_STATE_*: 1 not started, 2 in progress, 3 done)",
                float(state),
                **index,
                state=s.FABRIC_STATES.get(state, str(state)),
                fabric_manager=fitness.fabric_manager or "",
            )
            if fitness.fabric_status is not None:
                out.set(
                    s.GPU_FABRIC_STATUS,
                    "The nvmlReturn_t the fabric registration ended with (0 success)",
                    float(fitness.fabric_status),
                    **index,
                )
        for name, field_name in s.GPU_FITNESS_FLAGS.items():
            flag = getattr(fitness, field_name)
            if flag is not None:
                out.set(name, _FLAG_HELP[name], float(flag), **index)
        for scope, field_name in s.ECC_SCOPES.items():
            count = getattr(fitness, field_name)
            if count is not None:
                out.set(s.GPU_ECC_UNCORRECTED, "Uncorrected ECC errors", float(count), **index, scope=scope)
        for error, field_name in s.REMAPPED_ROWS.items():
            count = getattr(fitness, field_name)
            if count is not None:
                out.set(s.GPU_REMAPPED_ROWS, "Rows remapped", float(count), **index, error=error)


_FLAG_HELP = {
    s.GPU_ROW_REMAP_PENDING: "1 when a row remap waits for a reset of the GPU",
    s.GPU_ROW_REMAP_FAILED: "1 when a row could not be remapped",
    s.GPU_RETIRED_PAGES_PENDING: "1 when a page retirement waits for a driver reload or a reboot",
    s.GPU_RESET_REQUIRED: "1 when NVML answered a fitness query with RESET_REQUIRED",
}


def _verdict_families(out: _Families, snapshot: HostSnapshot, baselines: Baselines) -> None:
    verdict = snapshot.verdict
    documentation = "1 when back at a clean slate (0: not clean, or cannot tell)"
    known_doc = "0 when the verdict cannot be told"
    holders = _holders(snapshot)
    by_index = {g.index: g for g in (verdict.gpus if verdict is not None else ())}
    gpu_reasons: list[str] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index)[: s.MAX_GPUS]:
        gv = by_index.get(gpu.index)
        reason = gpu_reason(gpu, gv, holders.get(gpu.index, 0) > 0, baselines)
        gpu_reasons.append(reason)
        clean = reason == s.REASON_CLEAN
        labels = {s.GPU_LABEL: str(gpu.index), s.REASON_LABEL: reason}
        out.set(s.CLEAN_SLATE, documentation, float(clean), **labels)
        out.set(s.CLEAN_SLATE_KNOWN, known_doc, float(reason != s.REASON_UNREADABLE), gpu=str(gpu.index))
    if snapshot.error is not None or not snapshot.gpus or verdict is None:
        host_reason = s.REASON_HOST_ERROR
    elif not verdict.known:
        host_reason = s.REASON_UNREADABLE
    elif verdict.clean:
        host_reason = s.REASON_CLEAN
    elif any(r != s.REASON_CLEAN for r in gpu_reasons):
        host_reason = s.REASON_GPU
    else:
        host_reason = s.REASON_REMNANT
    known = verdict is not None and verdict.known and host_reason != s.REASON_HOST_ERROR
    clean = known and verdict is not None and verdict.clean
    out.set(s.CLEAN_SLATE, documentation, float(clean), gpu="", reason=host_reason)
    out.set(s.CLEAN_SLATE_KNOWN, known_doc, float(known), gpu="")


def _finding_memory(finding: Finding) -> dict[int, int]:
    """GPU index -> MiB the finding's subject holds (ghost memory: the excess it names), from its facts."""
    facts = finding.facts
    if facts is None:
        return {}
    if finding.kind == "ghost_memory":
        return {} if facts.gpu is None or facts.excess_mib is None else {facts.gpu: max(0, facts.excess_mib)}
    return dict(facts.memory_mib)


def _finding_families(out: _Families, snapshot: HostSnapshot) -> None:
    """Each finding as the fields its sentence is built from (``Finding.facts``): counts and memory by kind,
    and per subject process its name, parent, memory, state start, threads and, for a survivor, its job."""
    counts = dict.fromkeys(s.EXPORTED_KINDS, 0)
    memory: dict[tuple[str, int], int] = {}
    subjects: list[tuple[str, int, FindingFacts | None, dict[int, int]]] = []
    for finding in snapshot.findings:
        if finding.kind not in counts:
            continue
        counts[finding.kind] += 1
        held = _finding_memory(finding)
        for index, mib in held.items():
            memory[(finding.kind, index)] = memory.get((finding.kind, index), 0) + mib
        if finding.pid is not None and finding.kind in s.PROCESS_KINDS:
            if all((kind, pid) != (finding.kind, finding.pid) for kind, pid, _, _ in subjects):
                subjects.append((finding.kind, finding.pid, finding.facts, held))
    invisible: dict[int, dict[int, int]] = {}
    for gpu in snapshot.gpus:
        for listed in gpu.processes:
            if not listed.visible:
                held = invisible.setdefault(listed.pid, {})
                if listed.used_mib is not None:
                    held[gpu.index] = held.get(gpu.index, 0) + listed.used_mib
                    key = ("invisible_pid", gpu.index)
                    memory[key] = memory.get(key, 0) + listed.used_mib
    subjects.extend(("invisible_pid", pid, None, held) for pid, held in sorted(invisible.items()))
    for kind, count in counts.items():
        out.set(s.FINDINGS, "Findings of each kind on the host", float(count), kind=kind)
    for (kind, index), mib in sorted(memory.items()):
        out.set(
            s.FINDING_MEMORY, "GPU memory the findings of a kind hold", mib * s.MIB, kind=kind, gpu=str(index)
        )
    for kind, pid, facts, held in subjects[: s.MAX_SUBJECTS]:
        ids = {s.KIND_LABEL: kind, s.PID_LABEL: str(pid)}
        ppid = facts.ppid if facts is not None else None
        out.set(
            s.SUBJECT,
            "A process a finding names (bounded labels only)",
            1.0,
            **ids,
            comm=comm(facts.name if facts is not None else None),
            ppid="" if ppid is None else str(ppid),
            parent_comm=comm(facts.parent_name if facts is not None else None),
        )
        for index, mib in sorted(held.items()):
            out.set(s.SUBJECT_MEMORY, "GPU memory the subject holds", mib * s.MIB, **ids, gpu=str(index))
        if facts is None:
            continue
        if facts.state_since is not None:
            out.set(
                s.SUBJECT_SINCE,
                "Since when the subject is in its state (epoch seconds)",
                facts.state_since,
                **ids,
            )
        if facts.threads_live is not None:
            for state, count in sorted(facts.threads):
                out.set(s.SUBJECT_THREADS, "Live threads of the subject", count, **ids, state=fit(state, 2))
            if facts.threads_omitted:
                out.set(
                    s.SUBJECT_THREADS, "Live threads of the subject", facts.threads_omitted, **ids, state="?"
                )
        if facts.root_pid is not None:
            out.set(
                s.SUBJECT_JOB,
                "The job a process belonged to: its root, what ties the process to it, whose it is",
                1.0,
                **ids,
                root_pid=str(facts.root_pid),
                root_comm=comm(facts.root_name),
                why=fit(facts.why or "", s.WHY_MAX),
                owner=fit(facts.owner or "", s.OWNER_MAX),
            )
        if facts.window_s is not None:
            out.set(
                s.SUBJECT_WINDOW,
                "How long the finding's pattern had to last before it was said, and what did not move in it",
                facts.window_s,
                **ids,
                why=fit(facts.why or "", s.WHY_MAX),
            )
        for wait in facts.waits[: s.WAITS_MAX]:
            _wait_series(out, ids, wait)
        if facts.profiler is not None:
            _profiler_series(out, ids, facts.profiler)
    for finding in snapshot.findings:
        if finding.kind == "profiler_unknown" and finding.facts is not None:
            doc = "Processes of GPU jobs whose profiler cannot be known (their environment cannot be read)"
            out.set(s.PROFILER_UNKNOWN, doc, float(finding.facts.count or 0))
    suspects = 0
    for finding in snapshot.findings:
        facts = finding.facts
        if finding.kind != "ghost_memory" or facts is None or facts.gpu is None:
            continue
        ghost_gpu = str(facts.gpu)
        out.set(
            s.GHOST_HOLDERS_KNOWN,
            "Whether the holders of a GPU with ghost memory could be read",
            float(facts.holders_known),
            gpu=ghost_gpu,
        )
        for pid, name, device in facts.suspects[: max(0, s.MAX_SUBJECTS - suspects)]:
            suspects += 1
            out.set(
                s.GHOST_SUSPECT,
                "A process that may hold a GPU's ghost memory (it has the device node open)",
                1.0,
                gpu=ghost_gpu,
                pid=str(pid),
                comm=comm(name),
                device=fit(device, 16),
            )
    omitted = max(0, len(subjects) - s.MAX_SUBJECTS)
    out.set(s.SUBJECTS_OMITTED, "Finding subjects left out of the per-process series", float(omitted))


def _flag(value: bool | None) -> str:
    return "" if value is None else str(int(value))


def _wait_series(out: _Families, ids: dict[str, str], wait: ThreadWait) -> None:
    """One stuck thread of a subject: where it waits (kernel names, already checked on the way in, cut to
    ``KERNEL_NAME_MAX``), whether a SIGKILL waits for it, and since when."""
    thread = {**ids, s.TID_LABEL: str(wait.tid)}
    out.set(
        s.SUBJECT_WAIT,
        "A stuck thread of the subject and where it waits in the kernel",
        1.0,
        **thread,
        state=fit(wait.state, 2),
        symbol=fit(wait.symbol or "", s.KERNEL_NAME_MAX),
        module=fit(wait.module or "", s.KERNEL_NAME_MAX),
        stack=_flag(wait.stack),
        killed=_flag(wait.killed),
    )
    if wait.since is not None:
        out.set(s.SUBJECT_WAIT_SINCE, "Since when the thread is stuck (epoch seconds)", wait.since, **thread)


def _profiler_series(out: _Families, ids: dict[str, str], mark: ProfilerMark) -> None:
    """The profiler a ``profiled`` finding names, as labels (bounded, made safe: text the fleet words the
    finding from again)."""
    values = {name: getattr(mark, name) for name in s.PROFILER_LABELS}
    labels = {name: fit(str(value or ""), s.PROFILER_TEXT_MAX) for name, value in values.items()}
    out.set(
        s.SUBJECT_PROFILER,
        "The profiler a profiled job runs under, found on this process",
        1.0,
        **ids,
        **labels,
        keys=",".join(mark.keys),
    )


def _server_families(out: _Families, health: tuple[EndpointSample, ...]) -> None:
    documentation = "1 for the server's current state, 0 for the others"
    seen: set[tuple[str, str]] = set()
    for sample in health:
        port = server_port(sample.url)
        engine = fit(str((sample.metrics or {}).get("engine") or ""), 16)
        if (port, engine) in seen or len(seen) >= s.MAX_SERVERS:
            continue  # the same server by another address (127.0.0.1 and ::1): one series set
        seen.add((port, engine))
        states = list(SERVER_STATES)
        current = fit(sample.state or "", 16)
        if current and current not in states:
            states.append(current)
        for state in states:
            out.set(
                s.SERVER_STATE, documentation, float(state == current), port=port, engine=engine, state=state
            )
        if sample.since is not None:
            out.set(
                s.SERVER_STATE_SINCE,
                "Since when the server is in its state",
                sample.since,
                port=port,
                engine=engine,
            )
