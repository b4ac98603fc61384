"""The ``gputui_*`` series of one answer: GPU figures beside DCGM's, and each host's ``ExportedHost``.

A host that runs ``gputui exporter`` is joined to its DCGM series by the host label (both set
``Hostname``) and its GPUs by ``UUID``. DCGM's figures win where both exist; a host without DCGM has its
GPUs from gputui's. Every value and label is untrusted: numbers are parsed as the rest of the answer, text
is visible already (``series.Parser`` reads it so) and is cut to width here, and at most
``MAX_SERIES_PER_HOST`` series of a host are read.
"""

from __future__ import annotations

from collections.abc import Mapping

from gputui.core.fleet import ExportedGpu, ExportedHost, ExportedServer, ExportedSubject
from gputui.core.fleet import schema as s
from gputui.core.model import GpuFitness, ProfilerMark, ThreadWait
from gputui.core.text import fit
from gputui.transports.prometheus.parts import GpuParts, HostParts, Series, whole
from gputui.transports.prometheus.query import INSTANCE

MAX_SERIES_PER_HOST = 4000
"""More than 64 GPUs' and 32 subjects' series with room to spare: the rest of a flood is left out."""

GPU_FIGURES: dict[str, tuple[str, float]] = {
    s.GPU_MEMORY_USED: ("used", 1 / s.MIB),
    s.GPU_MEMORY_TOTAL: ("total", 1 / s.MIB),
    s.GPU_UTILIZATION: ("util", 100.0),
    s.GPU_TEMPERATURE: ("temp", 1.0),
    s.GPU_POWER: ("power", 1.0),
}
"""gputui's GPU families -> (the DCGM figure it stands for, the factor to DCGM's unit)."""


def gpu_figure(gpu: GpuParts, name: str, series: Series) -> None:
    """Keep one of gputui's GPU figures (in DCGM's units) beside the GPU's DCGM figures."""
    figure, factor = GPU_FIGURES[name]
    value = None if series.value is None else series.value * factor
    gpu.gputui_figures[figure] = Series(series.labels, value)
    if name == s.GPU_MEMORY_USED and value is not None:
        gpu.live = True


def merged_figures(gpu: GpuParts) -> Mapping[str, Series]:
    """The GPU's figures: DCGM's, else gputui's (memory free made from its used and total)."""
    if not gpu.gputui_figures:
        return gpu.figures
    ours = dict(gpu.gputui_figures)
    used, total = ours.pop("used", None), ours.pop("total", None)
    if "used" not in gpu.figures and used is not None:
        ours["used"] = used
        if total is not None and total.value is not None and used.value is not None:
            ours["free"] = Series(total.labels, max(0.0, total.value - used.value))
    return {**ours, **gpu.figures}


def take(host: HostParts, series: Series) -> bool:
    """Keep one non-GPU-figure gputui series of ``host``; False when its cap is reached (left out)."""
    if len(host.gputui) >= MAX_SERIES_PER_HOST:
        return False
    host.gputui.append(series)
    return True


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and len(text) < 10 else None


def _mib(value: float | None) -> int | None:
    """Bytes as MiB; None for a figure no process or GPU can have (negative)."""
    return None if value is None or value < 0 else whole(value / s.MIB)


def exported_host(host: HostParts) -> ExportedHost | None:
    """What the host's gputui exporter said, None when the answer has no gputui series of it."""
    if not host.gputui:
        return None
    instances: set[str] = set()
    scalars: dict[str, float | None] = {}
    gpus: dict[int, dict[str, object]] = {}
    findings: dict[str, int] = {}
    finding_memory: dict[tuple[str, int], int] = {}
    subjects: dict[tuple[str, int], dict[str, object]] = {}
    servers: dict[tuple[str, str], dict[str, object]] = {}
    checks: dict[str, bool] = {}
    host_verdict: dict[str, object] = {}
    for series in host.gputui:
        labels = series.labels
        name = labels.get("__name__", "")
        value = series.value
        gpu_index = _int(labels.get(s.GPU_LABEL))
        if name == s.INFO_SERIES:
            instances.add(labels.get(INSTANCE) or "")
        elif name in (
            s.SAMPLE_TIME,
            s.SAMPLE_AGE,
            s.HOST_UP,
            s.SUBJECTS_OMITTED,
            s.PROFILER_UNKNOWN,
            s.BASELINE_TOLERANCE,
        ):
            scalars[name] = value
        elif name == s.CHECK_AVAILABLE and labels.get(s.CHECK_LABEL):
            checks[fit(labels[s.CHECK_LABEL], 40)] = value is not None and value >= 1
        elif name in (s.CLEAN_SLATE, s.CLEAN_SLATE_KNOWN):
            key = "clean" if name == s.CLEAN_SLATE else "known"
            slot = host_verdict if gpu_index is None else gpus.setdefault(gpu_index, {})
            slot[key] = None if value is None else value >= 1
            if name == s.CLEAN_SLATE:
                slot["reason"] = fit(labels.get(s.REASON_LABEL) or "", 20)
        elif gpu_index is not None and name in s.GPU_FITNESS_FAMILIES:
            _fitness(gpus.setdefault(gpu_index, {}), name, labels, value)
        elif gpu_index is not None and name in (s.GPU_BASELINE, s.GPU_PROCESSES, s.GPU_PROCESS_MEMORY):
            gpus.setdefault(gpu_index, {})[name] = value
        elif name == s.FINDINGS and labels.get(s.KIND_LABEL) and value is not None:
            findings[fit(labels[s.KIND_LABEL], 20)] = max(0, int(value))
        elif name == s.FINDING_MEMORY and gpu_index is not None and labels.get(s.KIND_LABEL):
            mib = _mib(value)
            if mib is not None:
                finding_memory[(fit(labels[s.KIND_LABEL], 20), gpu_index)] = mib
        elif name == s.GHOST_HOLDERS_KNOWN and gpu_index is not None:
            gpus.setdefault(gpu_index, {})["holders_known"] = value is not None and value >= 1
        elif name == s.GHOST_SUSPECT and gpu_index is not None:
            pid = _int(labels.get(s.PID_LABEL))
            suspects = gpus.setdefault(gpu_index, {}).setdefault("suspects", [])
            if pid is not None and isinstance(suspects, list) and len(suspects) < s.MAX_SUBJECTS:
                device = fit(labels.get("device") or "", 16)
                suspects.append((pid, fit(labels.get(s.COMM_LABEL) or "", s.COMM_MAX), device))
        elif name.startswith(s.SUBJECT):
            _subject(subjects, name, labels, value, gpu_index)
        elif name in (s.SERVER_STATE, s.SERVER_STATE_SINCE):
            server = (
                fit(labels.get(s.PORT_LABEL) or "", 8),
                fit(labels.get(s.ENGINE_LABEL) or "", 16),
            )
            slot = servers.setdefault(server, {})
            if name == s.SERVER_STATE_SINCE:
                slot["since"] = value
            elif value is not None and value >= 1:
                slot["state"] = fit(labels.get(s.STATE_LABEL) or "", 16)
    if not instances:
        instances = {i for i in host.instances if i}
    return ExportedHost(
        instances=tuple(sorted(instances)),
        sample_time=scalars.get(s.SAMPLE_TIME),
        sample_age_s=scalars.get(s.SAMPLE_AGE),
        host_up=None if scalars.get(s.HOST_UP) is None else bool(scalars[s.HOST_UP]),
        clean=host_verdict.get("clean"),  # type: ignore[arg-type]
        known=bool(host_verdict.get("known")),
        reason=str(host_verdict.get("reason") or ""),
        gpus={index: _gpu(index, facts) for index, facts in gpus.items()},
        findings=findings,
        finding_memory=finding_memory,
        subjects=tuple(
            _subject_of(kind, pid, facts)
            for (kind, pid), facts in sorted(subjects.items(), key=lambda item: (item[0][1], item[0][0]))
            if facts.get("seen")
        )[: s.MAX_SUBJECTS],
        subjects_omitted=max(0, whole(scalars.get(s.SUBJECTS_OMITTED)) or 0),
        profiler_unknown=max(0, min(whole(scalars.get(s.PROFILER_UNKNOWN)) or 0, 1 << 22)),
        servers=tuple(
            ExportedServer(port=port, engine=engine, state=str(facts.get("state") or ""), since=_float(facts))
            for (port, engine), facts in sorted(servers.items())
        )[: s.MAX_SERVERS],
        checks=checks,
        tolerance_mib=_code(_mib(scalars.get(s.BASELINE_TOLERANCE))),
    )


def _float(facts: Mapping[str, object], key: str = "since") -> float | None:
    value = facts.get(key)
    return value if isinstance(value, float) else None


def _code(value: float | int | None) -> int | None:
    """An enum or count the driver gave; None for one no driver gives (negative, absurd)."""
    return None if value is None or value < 0 or value >= 1 << 31 else int(round(value))


def _fitness(facts: dict[str, object], name: str, labels: Mapping[str, str], value: float | None) -> None:
    """One fitness series of a GPU into its ``GpuFitness`` fields (``fitness``) and its ``action``."""
    fitness = facts.setdefault("fitness", {})
    assert isinstance(fitness, dict)  # noqa: S101 - only this function fills it
    if name == s.GPU_FITNESS_ACTION:
        if value is not None and value >= 1:
            facts["action"] = fit(labels.get(s.ACTION_LABEL) or "", 24)
    elif name == s.GPU_RECOVERY_ACTION:
        fitness["recovery_action"] = _code(value)
    elif name == s.GPU_FABRIC_STATE:
        fitness["fabric_state"] = _code(value)
        fitness["fabric_manager"] = labels.get(s.FABRIC_MANAGER_LABEL) or None
    elif name == s.GPU_FABRIC_STATUS:
        fitness["fabric_status"] = _code(value)
    elif name in s.GPU_FITNESS_FLAGS:
        fitness[s.GPU_FITNESS_FLAGS[name]] = None if value is None else value >= 1
    elif name == s.GPU_ECC_UNCORRECTED:
        field_name = s.ECC_SCOPES.get(labels.get(s.SCOPE_LABEL) or "")
        if field_name is not None:
            fitness[field_name] = _code(value)
    elif name == s.GPU_REMAPPED_ROWS:
        field_name = s.REMAPPED_ROWS.get(labels.get(s.ERROR_LABEL) or "")
        if field_name is not None:
            fitness[field_name] = _code(value)


def _gpu(index: int, facts: Mapping[str, object]) -> ExportedGpu:
    def number(name: str) -> float | None:
        value = facts.get(name)
        return value if isinstance(value, float) else None

    clean = facts.get("clean")
    known = facts.get("known")
    suspects = facts.get("suspects")
    fitness = facts.get("fitness")
    return ExportedGpu(
        index=index,
        clean=clean if isinstance(clean, bool) else None,
        reason=str(facts.get("reason") or ""),
        known=known if isinstance(known, bool) else None,
        baseline_mib=_mib(number(s.GPU_BASELINE)),
        processes=whole(number(s.GPU_PROCESSES)),
        process_mib=_mib(number(s.GPU_PROCESS_MEMORY)),
        holders_known=facts.get("holders_known") is True,
        suspects=tuple(sorted(suspects)) if isinstance(suspects, list) else (),
        fitness=GpuFitness.from_dict(fitness) if isinstance(fitness, dict) else None,
        action=str(facts.get("action") or ""),
    )


def _subject(
    subjects: dict[tuple[str, int], dict[str, object]],
    name: str,
    labels: Mapping[str, str],
    value: float | None,
    gpu_index: int | None,
) -> None:
    kind = fit(labels.get(s.KIND_LABEL) or "", 20)
    pid = _int(labels.get(s.PID_LABEL))
    if not kind or pid is None:
        return
    facts = subjects.setdefault((kind, pid), {})
    if name == s.SUBJECT:
        facts["seen"] = True
        facts["comm"] = fit(labels.get(s.COMM_LABEL) or "", s.COMM_MAX)
        facts["ppid"] = _int(labels.get(s.PPID_LABEL))
        facts["parent_comm"] = fit(labels.get(s.PARENT_COMM_LABEL) or "", s.COMM_MAX)
    elif name == s.SUBJECT_MEMORY and gpu_index is not None:
        mib = _mib(value)
        if mib is not None:
            memory = facts.setdefault("memory", {})
            assert isinstance(memory, dict)  # noqa: S101 - only this function fills it
            memory[gpu_index] = mib
    elif name == s.SUBJECT_SINCE:
        facts["since"] = value
    elif name == s.SUBJECT_JOB:
        facts["root_pid"] = _int(labels.get("root_pid"))
        facts["root_comm"] = fit(labels.get("root_comm") or "", s.COMM_MAX)
        facts["why"] = fit(labels.get(s.WHY_LABEL) or "", s.WHY_MAX)
        facts["owner"] = fit(labels.get("owner") or "", s.OWNER_MAX)
    elif name == s.SUBJECT_WINDOW and value is not None and 0 <= value < 1 << 31:
        facts["window_s"] = value
        facts.setdefault("why", fit(labels.get(s.WHY_LABEL) or "", s.WHY_MAX))
    elif name in (s.SUBJECT_WAIT, s.SUBJECT_WAIT_SINCE):
        _wait(facts, name, labels, value)
    elif name == s.SUBJECT_PROFILER:
        profiler: dict[str, object] = {
            label: fit(labels.get(label) or "", s.PROFILER_TEXT_MAX) or None for label in s.PROFILER_LABELS
        }
        profiler["keys"] = [fit(k, 32) for k in (labels.get("keys") or "").split(",") if k][:3]
        facts["profiler"] = profiler
    elif name == s.SUBJECT_THREADS and value is not None:
        threads = facts.setdefault("threads", {})
        assert isinstance(threads, dict)  # noqa: S101
        threads[fit(labels.get(s.STATE_LABEL) or "?", 2)] = max(0, min(int(value), 1 << 22))


def _wait(facts: dict[str, object], name: str, labels: Mapping[str, str], value: float | None) -> None:
    """One series of a subject's stuck thread into its fields (read as the collector's answer is: a kernel
    name that is none is unknown), at most ``WAITS_MAX`` threads a subject."""
    tid = _int(labels.get(s.TID_LABEL))
    waits = facts.setdefault("waits", {})
    assert isinstance(waits, dict)  # noqa: S101 - only this function fills it
    if tid is None or (tid not in waits and len(waits) >= s.WAITS_MAX):
        return
    wait = waits.setdefault(tid, {"tid": tid})
    if name == s.SUBJECT_WAIT_SINCE:
        wait["since"] = value
        return
    flags = {"1": True, "0": False}
    wait["state"] = labels.get(s.STATE_LABEL)
    wait["symbol"] = labels.get(s.SYMBOL_LABEL) or None
    wait["module"] = labels.get(s.MODULE_LABEL) or None
    wait["stack"] = flags.get(labels.get(s.STACK_LABEL) or "")
    wait["killed"] = flags.get(labels.get(s.KILLED_LABEL) or "")
    wait["seen"] = True


def _waits(facts: Mapping[str, object]) -> tuple[ThreadWait, ...]:
    """A subject's stuck threads, each checked as the collector's answer is (``ThreadWait.from_dict``)."""
    waits = facts.get("waits")
    if not isinstance(waits, dict):
        return ()
    read = (ThreadWait.from_dict(wait) for wait in waits.values() if wait.get("seen"))
    return tuple(wait for wait in read if wait is not None)


def _subject_of(kind: str, pid: int, facts: Mapping[str, object]) -> ExportedSubject:
    memory = facts.get("memory")
    threads = facts.get("threads")
    ppid = facts.get("ppid")
    since = facts.get("since")
    root_pid = facts.get("root_pid")
    return ExportedSubject(
        kind=kind,
        pid=pid,
        comm=str(facts.get("comm") or ""),
        ppid=ppid if isinstance(ppid, int) else None,
        parent_comm=str(facts.get("parent_comm") or ""),
        memory_mib=dict(memory) if isinstance(memory, dict) else {},
        since=since if isinstance(since, float) else None,
        threads=dict(threads) if isinstance(threads, dict) else {},
        root_pid=root_pid if isinstance(root_pid, int) else None,
        root_comm=str(facts.get("root_comm") or ""),
        why=str(facts.get("why") or ""),
        owner=str(facts.get("owner") or ""),
        profiler=ProfilerMark.from_dict(facts.get("profiler")),
        waits=_waits(facts),
        window_s=_float(facts, "window_s"),
    )
