"""The exporter's families and the fleet's reading of them: a host's findings survive the trip through
prometheus_client's exposition, a Prometheus-shaped answer and ``parse_answer`` with the monitor's own
sentences; labels stay bounded and safe; what cannot be read is absent, never a 0."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputui.core.fleet import (
    ExportedSample,
    ExporterFigures,
    analyze_fleet,
    families,
    server_port,
    sort_key,
    summarize,
)
from gputui.core.fleet import schema as s
from gputui.core.fleet.exported import KERNEL_LOG_CAUSE
from gputui.core.model import (
    EndpointSample,
    Gpu,
    GpuFitness,
    GpuProcess,
    HostSnapshot,
    LiveThreads,
    Proc,
    ThreadWait,
    XidEvent,
    replace,
)
from gputui.core.model.waits import NAME_CHARS, WAITS_MAX
from gputui.core.verdict import ACTION_WORDS, Baselines, analyze, headline
from gputui.transports.prometheus import parse_answer
from tests.data.prometheus.exported import HOSTILE, NOW_S, exposition_text, scraped_answer, wedged_host


def test_the_fleet_words_the_exported_findings_as_the_monitor_does() -> None:
    host = wedged_host()
    sample = analyze_fleet(parse_answer(scraped_answer(exposition_text(host))), Baselines())
    (fleet_host,) = sample.hosts
    assert fleet_host.name == "gpu-a"
    local = {(f.kind, f.pid, f.gpu_index): f.detail for f in host.findings}
    fleet = {(f.kind, f.pid, f.gpu_index): f.detail for f in fleet_host.snapshot.findings}
    assert set(local) == {
        ("defunct_leader", 40, 0),
        ("zombie", 41, None),
        ("orphan", 50, 1),
        ("ghost_memory", None, 2),
        ("invisible_pid", None, 3),
    }
    assert fleet == local
    verdict = fleet_host.snapshot.verdict
    assert verdict is not None
    assert verdict.known
    assert not verdict.clean
    assert [g.clean for g in verdict.gpus] == [False, False, False, False]
    assert any("pid 41 (child)" in r for r in verdict.reasons)  # a remnant that holds no memory
    # The servers travel by port only: the URL's credentials never leave the host.
    (server,) = [h for h in fleet_host.snapshot.endpoints if h.url == "port 30000"]
    assert server.state == "STALLED"
    row = summarize(fleet_host)
    assert row.findings == 5
    assert not row.memory_only
    assert row.dead_held_mib == 2048 + 1000  # the defunct leader's and the ghost memory


def test_labels_are_bounded_and_carry_no_command_line_or_url() -> None:
    host = wedged_host(name=HOSTILE)
    host = replace(
        host, processes=tuple(replace(p, cmdline=("python", "--token=s3cret")) for p in host.processes)
    )
    text = exposition_text(host)
    assert "secret" not in text
    assert "s3cret" not in text
    assert "user:" not in text
    assert "\x1b" not in text
    assert "\u202e" not in text
    subjects = [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == s.SUBJECT
    ]
    assert subjects
    assert all(len(sample.labels[s.COMM_LABEL]) <= s.COMM_MAX for sample in subjects)
    allowed = {s.HOST_LABEL, s.KIND_LABEL, s.PID_LABEL, s.COMM_LABEL, s.PPID_LABEL, s.PARENT_COMM_LABEL}
    assert all(set(sample.labels) <= allowed for sample in subjects)
    # Hostile names read back visible, as the monitor shows them.
    fleet = analyze_fleet(parse_answer(scraped_answer(text)), Baselines()).hosts[0]
    detail = next(f.detail for f in fleet.snapshot.findings if f.kind == "defunct_leader")
    assert "\x1b" not in detail
    assert "\\x1b]0;pwn" in detail


def test_subjects_are_capped_and_the_rest_counted() -> None:
    zombies = tuple(
        Proc(pid=1000 + i, ppid=999, state="Z", name="z", state_since=NOW_S - 60, live_threads=LiveThreads(0))
        for i in range(s.MAX_SUBJECTS + 8)
    )
    host = wedged_host()
    host = analyze(replace(host, processes=host.processes + zombies), Baselines(), NOW_S)
    text = exposition_text(host)
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    subject_count = sum(1 for name, _ in values if name == s.SUBJECT)
    assert subject_count == s.MAX_SUBJECTS
    omitted = next(v for (name, _), v in values.items() if name == s.SUBJECTS_OMITTED)
    assert omitted == len(host.findings) - s.MAX_SUBJECTS - 2 + 1  # ghost: no subject; invisible: one
    fleet = analyze_fleet(parse_answer(scraped_answer(text)), Baselines()).hosts[0]
    assert any(
        f.kind == "omitted" and f"{int(omitted)} more processes" in f.detail for f in fleet.snapshot.findings
    )


def test_what_cannot_be_read_is_absent_or_said_never_a_zero() -> None:
    host = wedged_host()
    lost = replace(host.gpus[0], memory_used_mib=None, utilization_pct=None, error="GPU is lost")
    host = analyze(replace(host, gpus=(lost, *host.gpus[1:])), Baselines(), NOW_S)
    text = exposition_text(host, ExporterFigures(can_read_other_users=False, can_read_kernel_log=False))
    assert 'gputui_gpu_memory_used_bytes{Hostname="gpu-a",UUID="GPU-0"' not in text
    assert 'gputui_gpu_readable{Hostname="gpu-a",UUID="GPU-0",gpu="0",modelName="H100"} 0.0' in text
    assert 'gputui_clean_slate_known{Hostname="gpu-a",gpu=""} 0.0' in text
    assert 'gputui_check_available{Hostname="gpu-a",check="other_users_processes"} 0.0' in text
    assert 'gputui_check_available{Hostname="gpu-a",check="kernel_log"} 0.0' in text
    fleet = analyze_fleet(parse_answer(scraped_answer(text)), Baselines()).hosts[0]
    assert fleet.snapshot.verdict is not None
    assert not fleet.snapshot.verdict.known
    assert fleet.exported is not None
    assert "kernel_log" in fleet.exported.cannot_check


def test_no_sample_yet_serves_the_exporter_alone() -> None:
    out = families(None, NOW_S, ExporterFigures(), "gpu-a", "9.9")
    names = {family.name for family in out}
    assert s.HOST_UP in names
    assert s.CLEAN_SLATE not in names
    assert s.FINDINGS not in names


def test_a_stuck_collector_makes_the_fleet_verdict_cannot_tell() -> None:
    host = wedged_host()
    sample = ExportedSample(host, Baselines(), NOW_S - 600, 0.05)
    registry = CollectorRegistry(auto_describe=False)

    class One:
        def collect(self) -> list[Any]:
            return families(sample, NOW_S, ExporterFigures(), "gpu-a", "9.9")

    registry.register(One())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    fleet = analyze_fleet(parse_answer(scraped_answer(text)), Baselines(), stale_after_s=90).hosts[0]
    verdict = fleet.snapshot.verdict
    assert verdict is not None
    assert not verdict.known
    assert "newest sample is 10 min old" in verdict.reasons[0]


def test_two_exporters_claiming_one_host_are_not_merged() -> None:
    text = exposition_text(wedged_host())
    one, two = scraped_answer(text, "a:10191"), scraped_answer(text, "b:10191")
    one["data"]["result"] += two["data"]["result"]
    fleet = analyze_fleet(parse_answer(one), Baselines()).hosts[0]
    verdict = fleet.snapshot.verdict
    assert verdict is not None
    assert not verdict.known
    assert "two gputui exporters claim this host" in verdict.reasons[0]


def test_sorting_by_memory_held_by_dead_processes() -> None:
    dead = analyze_fleet(parse_answer(scraped_answer(exposition_text(wedged_host()))), Baselines()).hosts[0]
    clean_host = analyze(
        replace(
            wedged_host(),
            hostname="gpu-b",
            processes=(),
            gpus=tuple(replace(g, memory_used_mib=3, processes=()) for g in wedged_host().gpus),
        ),
        Baselines(),
        NOW_S,
    )
    text = exposition_text(clean_host).replace('Hostname="gpu-a"', 'Hostname="gpu-b"')
    clean = analyze_fleet(parse_answer(scraped_answer(text, "gpu-b:10191")), Baselines()).hosts[0]
    rows = sorted([summarize(clean), summarize(dead)], key=sort_key("dead"))
    assert [r.name for r in rows] == ["gpu-a", "gpu-b"]
    assert rows[1].findings == 0
    assert rows[1].dead_held_mib == 0


def test_server_port_never_carries_credentials() -> None:
    assert server_port("http://u:p@10.0.0.1:8000/health") == "8000"
    assert server_port("https://host/health") == "443"
    assert server_port("http://[::1]:x/") == ""


def test_no_series_twice_even_for_one_server_by_two_addresses_or_a_pid_on_two_gpus() -> None:
    host = wedged_host()
    twice = GpuProcess(pid=777, used_mib=100, visible=False)
    gpus = (*host.gpus[:2], replace(host.gpus[2], processes=(twice,)), host.gpus[3])
    health = (
        EndpointSample(url="http://127.0.0.1:30000/health", state="UP"),
        EndpointSample(url="http://[::1]:30000/health", state="UP"),
    )
    host = analyze(replace(host, gpus=gpus, endpoints=health), Baselines(), NOW_S)
    keys = [
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(exposition_text(host))
        for sample in family.samples
    ]
    assert len(keys) == len(set(keys))
    assert sum(1 for name, labels in keys if name == s.SUBJECT and ("kind", "invisible_pid") in labels) == 1
    states = [labels for name, labels in keys if name == s.SERVER_STATE and ("state", "UP") in labels]
    assert len(states) == 1


def test_a_mixed_fleet_says_which_hosts_are_memory_only() -> None:
    from gputui.commands.fleet_report import EXIT_NOT_CLEAN, format_fleet_check, host_status, verdict_note
    from tests.data.prometheus import eval_time, load_answer

    document = load_answer()
    now = eval_time(document)
    ours = scraped_answer(
        exposition_text(wedged_host(now=now, hostname="gpu-x"), now=now, hostname="gpu-x"), "gpu-x:10191", now
    )
    document["data"]["result"] += ours["data"]["result"]
    sample = analyze_fleet(parse_answer(document), Baselines())
    note = verdict_note(sample)
    assert note.startswith("memory only on ")
    named = note.split(": no gputui exporter there")[0]
    assert "gpu-a" in named
    assert "gpu-x" not in named
    gpu_x = next(h for h in sample.hosts if h.name == "gpu-x")
    assert host_status(gpu_x.snapshot) == EXIT_NOT_CLEAN
    lines = format_fleet_check(sample, ("ok", "X"))
    # The monitor's level: its defunct leader has held GPU0 with threads in the driver for 12 minutes.
    assert any(line.startswith("X gpu-x  NOT READY: ") for line in lines)
    assert lines[-1].endswith(f"({note})")


def _unfit_host(xids: tuple[XidEvent, ...] = ()) -> HostSnapshot:
    """Four idle GPUs (memory at the baseline, nothing listed) whose own fitness is not: GPU0's driver asks
    for a reset, GPU1's NVLink fabric registration is in progress (no fabric manager), GPU2 has a row remap
    pending; GPU3 is fit."""
    fit_one = GpuFitness(remap_pending=False, remap_failure=False, retired_pages_pending=False)
    fitness = (
        replace(fit_one, recovery_action=1, xids=xids),
        replace(fit_one, fabric_state=2, fabric_status=0, fabric_manager="not running"),
        replace(fit_one, remap_pending=True, ecc_uncorrected_volatile=0, remapped_rows_uncorrectable=1),
        replace(fit_one, recovery_action=0, fabric_state=3, fabric_status=0),
    )
    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i}",
            name="H100",
            memory_used_mib=3,
            memory_total_mib=81559,
            fitness=fitness[i],
        )
        for i in range(4)
    )
    snapshot = HostSnapshot(target="local", hostname="gpu-a", time=NOW_S, mode="nvml", gpus=gpus)
    return analyze(snapshot, Baselines(), NOW_S)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (
            sample.name,
            tuple(sorted((k, v) for k, v in sample.labels.items() if k != s.HOST_LABEL)),
        ): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_gpu_s_fitness_is_exported_as_its_fields_and_its_action() -> None:
    text = exposition_text(_unfit_host())
    values = _samples(text)
    gpu0 = (("UUID", "GPU-0"), ("gpu", "0"))
    gpu1 = (("UUID", "GPU-1"), ("gpu", "1"))
    gpu2 = (("UUID", "GPU-2"), ("gpu", "2"))
    assert values[(s.CHECK_AVAILABLE, (("check", "gpu_health"),))] == 1.0
    assert values[(s.GPU_RECOVERY_ACTION, (*gpu0[:1], ("gpu", "0"), ("name", "GPU Reset")))] == 1.0
    assert values[(s.GPU_RECOVERY_ACTION, (("UUID", "GPU-3"), ("gpu", "3"), ("name", "None")))] == 0.0
    fabric = (("UUID", "GPU-1"), ("fabric_manager", "not running"), ("gpu", "1"), ("state", "in_progress"))
    assert values[(s.GPU_FABRIC_STATE, fabric)] == 2.0
    assert values[(s.GPU_FABRIC_STATUS, gpu1)] == 0.0
    assert values[(s.GPU_ROW_REMAP_PENDING, gpu2)] == 1.0
    assert values[(s.GPU_ROW_REMAP_PENDING, gpu0)] == 0.0
    assert values[(s.GPU_REMAPPED_ROWS, (("UUID", "GPU-2"), ("error", "uncorrectable"), ("gpu", "2")))] == 1.0
    # A figure the driver did not give is no series: GPU0 has no fabric, GPU1's driver no recovery action.
    assert not any(name == s.GPU_FABRIC_STATE and ("gpu", "0") in labels for name, labels in values)
    assert not any(name == s.GPU_RECOVERY_ACTION and ("gpu", "1") in labels for name, labels in values)
    actions = {
        (dict(labels)["gpu"], dict(labels)["action"])
        for (name, labels), value in values.items()
        if name == s.GPU_FITNESS_ACTION and value == 1.0
    }
    assert actions == {("0", "reset"), ("1", "restart_fabric_manager"), ("2", "reset"), ("3", "none")}
    assert sum(1 for name, _ in values if name == s.GPU_FITNESS_ACTION) == 4 * len(ACTION_WORDS)
    # A GPU whose only problem is its fitness is not ghost memory: its reason says the GPU is not fit.
    reasons = {
        dict(labels)["gpu"]: dict(labels)["reason"] for name, labels in values if name == s.CLEAN_SLATE
    }
    assert reasons == {"0": "gpu_health", "1": "gpu_health", "2": "gpu_health", "3": "clean", "": "gpu"}


def test_the_fleet_says_not_ready_in_the_monitor_s_own_words() -> None:
    host = _unfit_host()
    fleet = analyze_fleet(parse_answer(scraped_answer(exposition_text(host))), Baselines()).hosts[0]
    assert host.verdict is not None
    verdict = fleet.snapshot.verdict
    assert verdict is not None
    assert verdict.level == "NOT READY"
    assert verdict.not_ready == host.verdict.not_ready
    assert verdict.not_ready == (
        "GPU0 needs a reset (the driver asks for GPU Reset)",
        "GPU1 is not registered with the NVLink fabric (NVLink fabric registration in progress (fabric"
        " manager not running))",
        "GPU2 needs a reset (row remap pending)",
    )
    assert "ghost memory" not in " ".join(verdict.reasons)
    assert [g.clean for g in verdict.gpus] == [False, False, False, True]
    local = {(f.gpu_index, f.detail, f.action) for f in host.findings if f.kind == "gpu_health"}
    remote = {(f.gpu_index, f.detail, f.action) for f in fleet.snapshot.findings if f.kind == "gpu_health"}
    assert remote == local
    assert len(remote) == 3
    gpu0 = fleet.snapshot.gpus[0].fitness
    assert gpu0 is not None
    assert (gpu0.recovery_action, gpu0.action, gpu0.needs_reset) == (1, "reset", True)


def test_an_action_from_the_kernel_log_keeps_its_action_in_the_fleet() -> None:
    """The Xid history stays on the host: an action only an Xid asks for is kept, and said to come from it."""
    xid = XidEvent(xid=79, time=NOW_S - 60, source="kernel log", detail="GPU has fallen off the bus.")
    host = _unfit_host()
    gpu3 = host.gpus[3]
    assert gpu3.fitness is not None
    unfit = replace(gpu3, fitness=replace(gpu3.fitness, recovery_action=None, action=None, xids=(xid,)))
    host = analyze(replace(host, gpus=(*host.gpus[:3], unfit)), Baselines(), NOW_S)
    assert host.verdict is not None
    assert (
        host.verdict.not_ready[-1] == "GPU3 needs a reboot of the host (Xid 79: GPU has fallen off the bus)"
    )
    fleet = analyze_fleet(parse_answer(scraped_answer(exposition_text(host))), Baselines()).hosts[0]
    verdict = fleet.snapshot.verdict
    assert verdict is not None
    assert verdict.not_ready[:3] == host.verdict.not_ready[:3]
    assert verdict.not_ready[3] == f"GPU3 needs a reboot of the host ({KERNEL_LOG_CAUSE})"


def test_the_exporter_s_fitness_wins_over_dcgm_s_for_the_same_gpu() -> None:
    """DCGM's last-Xid gauge never clears; the exporter's read of the same GPU (its kernel log, its driver)
    is the one judged. A GPU it sent no fitness for keeps DCGM's."""
    from tests.data.prometheus import eval_time, load_answer

    document = load_answer()
    now = eval_time(document)
    dcgm = [item for item in document["data"]["result"] if item["metric"].get("Hostname") == "gpu-a"]
    uuids = {item["metric"]["gpu"]: item["metric"]["UUID"] for item in dcgm if "gpu" in item["metric"]}
    host = _unfit_host()
    idle = [replace(host.gpus[3], index=i, fitness=None) for i in range(3, 8)]
    gpus = tuple(replace(g, uuid=uuids[str(g.index)]) for g in (*host.gpus[:3], *idle))
    host = analyze(replace(host, gpus=gpus, time=now), Baselines(), now)
    ours = scraped_answer(exposition_text(host, now=now), "gpu-a:10191", now)
    document["data"]["result"] += ours["data"]["result"]
    fleet = next(h for h in analyze_fleet(parse_answer(document), Baselines()).hosts if h.name == "gpu-a")
    verdict = fleet.snapshot.verdict
    assert verdict is not None
    assert host.verdict is not None
    # GPU0-2: the exporter's; GPU3 (no fitness from the exporter): DCGM's last Xid, 79.
    assert verdict.not_ready[:3] == host.verdict.not_ready
    assert verdict.not_ready[3].startswith("GPU3 needs a reboot of the host (Xid 79: ")


def test_without_fitness_the_gpu_health_check_is_said_unavailable() -> None:
    text = exposition_text(wedged_host())
    assert 'gputui_check_available{Hostname="gpu-a",check="gpu_health"} 0.0' in text
    assert s.GPU_FITNESS_ACTION not in text
    out = families(None, NOW_S, ExporterFigures(), "gpu-a", "9.9")
    check = next(f for f in out if f.name == s.CHECK_AVAILABLE)
    assert [x.value for x in check.samples if x.labels["check"] == "gpu_health"] == [0.0]


def _stuck_host(tolerance_mib: int = 2) -> HostSnapshot:
    """The wedged host with an engine core on GPU1 that was killed and whose thread has spun in
    ``uvm_spin_loop`` (nvidia_uvm) for 6 minutes, another of its threads in D where nothing says."""
    host = wedged_host()
    core = Proc(
        pid=60,
        ppid=10,
        state="S",
        name="VLLM::EngineCore",
        start_ticks=8,
        gpu_memory_mib={1: 8192},
        waits=(
            ThreadWait(61, "D", since=NOW_S - 30),
            ThreadWait(62, "R", "uvm_spin_loop", "nvidia_uvm", stack=True, since=NOW_S - 360, killed=True),
        ),
    )
    gpus = tuple(
        replace(g, processes=(*g.processes, GpuProcess(pid=60, used_mib=8192))) if g.index == 1 else g
        for g in host.gpus
    )
    baselines = Baselines(tolerance_mib=tolerance_mib)
    return analyze(replace(host, processes=(*host.processes, core), gpus=gpus), baselines, NOW_S)


def _exposed(host: HostSnapshot, tolerance_mib: int = 2) -> str:
    sample = ExportedSample(host, Baselines(tolerance_mib=tolerance_mib), NOW_S - 2, 0.05)
    registry = CollectorRegistry(auto_describe=False)

    class One:
        def collect(self) -> list[Any]:
            return families(sample, NOW_S, ExporterFigures(), "gpu-a", "9.9")

    registry.register(One())  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_a_stuck_thread_s_places_and_the_reboot_they_call_for_read_as_the_monitor_says_them() -> None:
    host = _stuck_host()
    text = _exposed(host)
    values = _samples(text)
    waits = {dict(labels)[s.TID_LABEL]: dict(labels) for name, labels in values if name == s.SUBJECT_WAIT}
    assert waits["62"] == {
        s.KIND_LABEL: "stuck_thread",
        s.PID_LABEL: "60",
        s.TID_LABEL: "62",
        s.STATE_LABEL: "R",
        s.SYMBOL_LABEL: "uvm_spin_loop",
        s.MODULE_LABEL: "nvidia_uvm",
        s.STACK_LABEL: "1",
        s.KILLED_LABEL: "1",
    }
    assert (waits["61"][s.SYMBOL_LABEL], waits["61"][s.KILLED_LABEL]) == ("", "")  # unknown: no value
    since = {
        dict(labels)[s.TID_LABEL]: v for (name, labels), v in values.items() if name == s.SUBJECT_WAIT_SINCE
    }
    assert since == {"61": NOW_S - 30, "62": NOW_S - 360}
    tolerance = [v for (name, _), v in values.items() if name == s.BASELINE_TOLERANCE]
    assert tolerance == [2 * s.MIB]

    fleet = analyze_fleet(parse_answer(scraped_answer(text)), Baselines()).hosts[0].snapshot
    (local,) = [(f.detail, f.action) for f in host.findings if f.kind == "stuck_thread"]
    (remote,) = [(f.detail, f.action) for f in fleet.findings if f.kind == "stuck_thread"]
    assert remote == local
    assert local[1].startswith("it was killed and is still there: reboot the host")
    assert host.verdict is not None
    verdict = fleet.verdict
    assert verdict is not None
    assert verdict.level == host.verdict.level == "NOT READY"
    assert verdict.not_ready == host.verdict.not_ready
    assert verdict.not_ready[1] == (
        "GPU1 needs a reboot of the host: pid 60 (VLLM::EngineCore) was killed and its thread 62 is still in "
        "uvm_spin_loop (nvidia_uvm) after 6 min"
    )
    assert headline(verdict) == headline(host.verdict)


def test_the_fleet_s_headline_says_the_tolerance_the_exporter_judged_with() -> None:
    host = _stuck_host(tolerance_mib=5)
    assert host.verdict is not None
    fleet = analyze_fleet(parse_answer(scraped_answer(_exposed(host, 5))), Baselines()).hosts[0]
    verdict = fleet.snapshot.verdict
    assert verdict is not None
    assert headline(verdict) == headline(host.verdict) == "NOT READY: 0/4 GPUs at baseline (3 MiB + 5)"


def test_hostile_wait_series_are_read_as_the_collector_s_answer_is() -> None:
    """A stuck thread's labels come from any exporter: a kernel name that is none is unknown, a tid that
    is none is dropped, a subject's threads stop at ``WAITS_MAX``, a window that is no number is none."""
    answer = scraped_answer(_exposed(_stuck_host()))
    result = answer["data"]["result"]
    for item in result:
        labels = item["metric"]
        if labels.get("__name__") == s.SUBJECT_WAIT and labels[s.TID_LABEL] == "62":
            labels[s.SYMBOL_LABEL] = "\x1b]0;pwn\x07uvm"
            labels[s.MODULE_LABEL] = "nvidia uvm"
    wait = next(i for i in result if i["metric"].get("__name__") == s.SUBJECT_WAIT)
    flood = [
        {"metric": {**wait["metric"], s.TID_LABEL: str(tid)}, "value": wait["value"]}
        for tid in range(100, 140)
    ]
    junk = {**wait["metric"], s.TID_LABEL: "x1", s.STATE_LABEL: "Z"}
    window = {**wait["metric"], "__name__": s.SUBJECT_WINDOW, s.WHY_LABEL: "cpu"}
    result += [*flood, {"metric": junk, "value": wait["value"]}, {"metric": window, "value": [NOW_S, "NaN"]}]
    exported = analyze_fleet(parse_answer(answer), Baselines()).hosts[0]
    assert exported.exported is not None
    (subject,) = [x for x in exported.exported.subjects if x.kind == "stuck_thread"]
    assert len(subject.waits) == s.WAITS_MAX
    assert subject.window_s is None
    (spun,) = [w for w in subject.waits if w.tid == 62]
    assert (spun.symbol, spun.module) == (None, None)
    (finding,) = [f for f in exported.snapshot.findings if f.kind == "stuck_thread"]
    assert "pwn" not in finding.detail
    assert "thread 62 (R) where unknown (its kernel stack names no function)" in finding.detail


def test_the_exported_waits_are_as_many_as_a_collector_s_answer_keeps() -> None:
    assert s.WAITS_MAX == WAITS_MAX
    assert s.KERNEL_NAME_MAX == NAME_CHARS
