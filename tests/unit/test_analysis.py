"""Process trees, findings and the clean-slate verdict on hand-built snapshots."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.core.jobs import build_forest, flatten, is_session_boundary
from gputui.core.model import DeviceHolder, Gpu, GpuProcess, HostSnapshot, Proc
from gputui.core.text import age_since
from gputui.core.verdict import Baselines, analyze, clean_slate, find_problems, memory_at_baseline

NOW = 1_000_000.0
WORKER_MIB = 40960


def gpus(count: int = 8, used: int = 3) -> list[Gpu]:
    return [
        Gpu(index=i, uuid=f"GPU-{i:04d}", memory_used_mib=used, memory_total_mib=49152) for i in range(count)
    ]


def proc(
    pid: int,
    ppid: int,
    name: str,
    cmdline: tuple[str, ...] = (),
    state: str = "S",
    gpu: dict[int, int] | None = None,
    since: float | None = NOW - 100,
) -> Proc:
    return Proc(
        pid=pid,
        ppid=ppid,
        user="alice",
        uid=1000,
        state=state,
        name=name,
        cmdline=cmdline or (name,),
        start_ticks=pid * 10,
        state_since=since,
        gpu_memory_mib=dict(gpu or {}),
    )


def snap(gpu_list: list[Gpu], procs: list[Proc], **kw: object) -> HostSnapshot:
    return HostSnapshot(
        target="node7",
        hostname="node7",
        boot_id="b",
        time=NOW,
        processes_time=NOW,
        gpus=tuple(gpu_list),
        processes=tuple(procs),
        **kw,
    )  # type: ignore[arg-type]


def with_holders(gpu_list: list[Gpu], holders: dict[int, list[GpuProcess]], baseline: int = 3) -> list[Gpu]:
    out = []
    for g in gpu_list:
        listed = holders.get(g.index, [])
        used = baseline + sum(p.used_mib or 0 for p in listed)
        out.append(
            Gpu(
                index=g.index,
                uuid=g.uuid,
                memory_used_mib=used,
                memory_total_mib=49152,
                processes=tuple(listed),
            )
        )
    return out


def sglang_host(zombie_worker: int | None = None) -> HostSnapshot:
    """sshd -> login bash -> launcher 100 -> 8 workers (101..108, one per GPU) + detokenizer 109."""
    procs = [
        proc(1, 0, "systemd", ("/sbin/init",)),
        proc(40, 1, "sshd", ("sshd: alice",)),
        proc(50, 40, "bash", ("-bash",)),
        proc(100, 50, "python3", ("python3", "-m", "sglang.launch_server", "--tp", "8")),
    ]
    holders: dict[int, list[GpuProcess]] = {}
    for i in range(8):
        pid = 101 + i
        if pid == zombie_worker:
            procs.append(proc(pid, 100, f"scheduler_TP{i}", (), state="Z", since=NOW - 30))
            continue
        procs.append(proc(pid, 100, f"scheduler_TP{i}", gpu={i: WORKER_MIB}))
        holders[i] = [GpuProcess(pid=pid, used_mib=WORKER_MIB)]
    procs.append(proc(109, 100, "detokenizer"))
    return snap(with_holders(gpus(), holders), procs)


# -- trees ------------------------------------------------------------------------------------------------


def test_launcher_with_eight_workers_is_one_tree_below_the_login_shell() -> None:
    forest = build_forest(sglang_host())
    assert len(forest) == 1
    root = forest[0]
    assert root.proc.pid == 100
    assert root.depth == 0
    assert [c.proc.pid for c in root.children] == list(range(101, 110))
    assert all(c.depth == 1 for c in root.children)
    assert root.subtree_total_mib == 8 * WORKER_MIB
    assert root.subtree_gpu_mib == {i: WORKER_MIB for i in range(8)}
    assert root.children[0].subtree_gpu_mib == {0: WORKER_MIB}
    assert root.children[-1].subtree_total_mib == 0  # the detokenizer holds nothing
    assert [n.proc.pid for n in flatten(forest)] == [100, *range(101, 110)]


def test_zombie_worker_stays_in_its_tree() -> None:
    forest = build_forest(sglang_host(zombie_worker=104))
    pids = [n.proc.pid for n in flatten(forest)]
    assert 104 in pids
    assert forest[0].subtree_total_mib == 7 * WORKER_MIB


def test_memory_from_gpu_process_lists_when_the_process_carries_none() -> None:
    gpu_list = with_holders(gpus(2), {1: [GpuProcess(pid=300, used_mib=500)]})
    forest = build_forest(snap(gpu_list, [proc(300, 1, "python3")]))
    assert forest[0].proc.gpu_memory_mib == {1: 500}
    assert forest[0].subtree_total_mib == 500


def test_gpu_pid_missing_from_process_list_still_gets_a_node() -> None:
    gpu_list = with_holders(gpus(1), {0: [GpuProcess(pid=777, used_mib=100)]})
    forest = build_forest(snap(gpu_list, []))
    assert [n.proc.pid for n in forest] == [777]


def test_invisible_pid_never_becomes_a_local_node() -> None:
    # A local process 555 exists, but NVML's 555 lives in another PID namespace.
    gpu_list = with_holders(gpus(1), {0: [GpuProcess(pid=555, used_mib=1000, visible=False)]})
    assert build_forest(snap(gpu_list, [proc(555, 1, "bash", ("bash", "x.sh"))])) == []


def test_trees_are_ordered_by_memory_and_stop_at_each_boundary_kind() -> None:
    procs = [
        proc(10, 1, "tmux: server", ("tmux",)),
        proc(11, 10, "zsh", ("/usr/bin/zsh",)),  # interactive shell under tmux: boundary
        proc(12, 11, "bash", ("bash", "run.sh")),  # a script: the launcher, part of the tree
        proc(13, 12, "python3", gpu={0: 100}),
        proc(20, 1, "containerd-shim", ("containerd-shim-runc-v2",)),
        proc(21, 20, "vllm", gpu={1: 9000}),
        proc(30, 1, "systemd", ("/lib/systemd/systemd", "--user")),
        proc(31, 30, "sh", ("sh", "-c", "python3 train.py")),
        proc(32, 31, "python3", gpu={2: 500}),
    ]
    gpu_list = with_holders(
        gpus(3), {0: [GpuProcess(13, 100)], 1: [GpuProcess(21, 9000)], 2: [GpuProcess(32, 500)]}
    )
    forest = build_forest(snap(gpu_list, procs))
    assert [n.proc.pid for n in forest] == [21, 31, 12]
    assert [n.proc.pid for n in flatten(forest)] == [21, 31, 32, 12, 13]


def test_session_boundaries_by_name_and_shell_kind() -> None:
    assert is_session_boundary(proc(1, 0, "anything"))
    assert is_session_boundary(proc(5, 1, "sshd-session", ("sshd: bob@pts/0",)))
    assert is_session_boundary(proc(5, 1, "bash", ("-bash",)))
    assert is_session_boundary(proc(5, 1, "bash", ("bash", "-l")))
    assert is_session_boundary(Proc(pid=5, ppid=1, name="bash"))  # unreadable cmdline: stay out
    assert not is_session_boundary(proc(5, 1, "bash", ("bash", "launch.sh")))
    assert not is_session_boundary(proc(5, 1, "sh", ("sh", "-c", "exec python3 x.py")))
    assert not is_session_boundary(proc(5, 1, "nsys", ("nsys", "profile", "python3")))


def test_ppid_cycle_does_not_hang() -> None:
    procs = [proc(60, 61, "a", gpu={0: 10}), proc(61, 60, "b")]
    gpu_list = with_holders(gpus(1), {0: [GpuProcess(60, 10)]})
    pids = sorted(n.proc.pid for n in flatten(build_forest(snap(gpu_list, procs))))
    assert pids == [60, 61]


# -- findings ---------------------------------------------------------------------------------------------


def kinds(findings: list) -> list[str]:
    return [f.kind for f in findings]


def test_zombie_finding_names_the_parent_and_its_age_and_targets_the_parent() -> None:
    findings = find_problems(sglang_host(zombie_worker=104), Baselines())
    (zombie,) = [f for f in findings if f.kind == "zombie"]
    assert zombie.pid == 104
    assert zombie.action_pid == 100
    assert "100 (python3) has not reaped it" in zombie.detail
    assert zombie.since == NOW - 30  # the age is rendered from it, not worded into the sentence
    assert "30 s" not in zombie.detail
    assert age_since(zombie.since, NOW) == "for 30 s"
    assert "parent 100" in zombie.action


def test_zombie_of_init_offers_nothing_to_kill_and_only_once_it_lingers() -> None:
    assert find_problems(snap(gpus(1), [proc(70, 1, "x", state="Z", since=NOW - 2)]), Baselines()) == []
    findings = find_problems(snap(gpus(1), [proc(70, 1, "x", state="Z", since=NOW - 60)]), Baselines())
    (zombie,) = findings
    assert zombie.action_pid is None
    assert "init" in zombie.detail


def test_uninterruptible_reported_only_after_threshold() -> None:
    procs = [proc(80, 1, "stuck", state="D", since=NOW - 6), proc(81, 1, "io", state="D", since=NOW - 1)]
    findings = find_problems(snap(gpus(1), procs), Baselines())
    assert [(f.kind, f.pid) for f in findings] == [("uninterruptible", 80)]
    assert "may not die" in findings[0].detail
    assert findings[0].since == NOW - 6
    assert age_since(findings[0].since, NOW) == "for 6 s"


def test_uninterruptible_with_unknown_age_reported_only_inside_a_gpu_tree() -> None:
    procs = [
        proc(100, 1, "python3", ("python3", "serve.py")),
        proc(101, 100, "worker", gpu={0: 1000}, state="D", since=None),
        proc(90, 1, "rsync", state="D", since=None),
    ]
    gpu_list = with_holders(gpus(1), {0: [GpuProcess(101, 1000)]})
    findings = find_problems(snap(gpu_list, procs), Baselines())
    assert [(f.kind, f.pid) for f in findings if f.kind == "uninterruptible"] == [("uninterruptible", 101)]


def test_orphan_is_a_gpu_process_under_init_not_its_launcher() -> None:
    procs = [
        proc(100, 50, "python3", ("python3", "serve.py")),
        proc(50, 1, "bash", ("-bash",)),
        proc(101, 100, "worker", gpu={0: 1000}),
        proc(102, 1, "worker", gpu={1: 2000}),  # its middle parent died: reparented to init
    ]
    gpu_list = with_holders(gpus(2), {0: [GpuProcess(101, 1000)], 1: [GpuProcess(102, 2000)]})
    findings = find_problems(snap(gpu_list, procs), Baselines())
    orphans = [f for f in findings if f.kind == "orphan"]
    assert [(f.pid, f.gpu_index, f.action_pid) for f in orphans] == [(102, 1, 102)]
    assert "2000 MiB on GPU1" in orphans[0].detail
    assert "launcher is gone" in orphans[0].detail


def test_orphan_under_a_user_systemd_subreaper() -> None:
    procs = [proc(30, 1, "systemd", ("/lib/systemd/systemd", "--user")), proc(31, 30, "python3", gpu={0: 10})]
    gpu_list = with_holders(gpus(1), {0: [GpuProcess(31, 10)]})
    assert kinds(find_problems(snap(gpu_list, procs), Baselines())) == ["orphan"]


def test_ghost_memory_with_no_process_listed_names_device_holders() -> None:
    gpu_list = gpus(2)
    gpu_list[1] = Gpu(index=1, uuid="GPU-0001", memory_used_mib=1030)
    holders = (
        DeviceHolder(pid=4000, name="gputui", device="/dev/nvidia1"),  # the collector itself
        DeviceHolder(pid=77, name="nvidia-persiste", device="/dev/nvidia1"),
        DeviceHolder(pid=88, name="python3", device="/dev/nvidiactl"),
        DeviceHolder(pid=99, name="stale\x1b[2J", device="/dev/nvidia1"),
    )
    findings = find_problems(snap(gpu_list, [], device_holders=holders, agent_pid=4000), Baselines())
    (ghost,) = findings
    assert ghost.kind == "ghost_memory"
    assert ghost.gpu_index == 1
    assert "1027 MiB over its 3 MiB baseline with no process listed" in ghost.detail
    # The holder of this GPU's own node is preferred over generic nodes; the name is made safe.
    assert "pid 99 (stale\\x1b[2J) has /dev/nvidia1 open" in ghost.detail
    assert "4000" not in ghost.detail
    assert "\x1b" not in ghost.detail
    assert ghost.action_pid == 99


def test_ghost_memory_without_holders_says_what_to_do() -> None:
    gpu_list = [Gpu(index=0, memory_used_mib=2051)]
    (ghost,) = find_problems(snap(gpu_list, [], device_holders=()), Baselines())
    assert ghost.action_pid is None
    assert "reset" in ghost.action


def test_ghost_memory_beyond_listed_processes_uses_its_own_tolerance() -> None:
    listed = (GpuProcess(pid=300, used_mib=1000),)
    ok = [Gpu(index=0, memory_used_mib=3 + 1000 + 64, processes=listed)]
    bad = [Gpu(index=0, memory_used_mib=3 + 1000 + 65, processes=listed)]
    procs = [proc(300, 1, "python3", gpu={0: 1000})]
    assert "ghost_memory" not in kinds(find_problems(snap(ok, procs), Baselines()))
    (ghost,) = [f for f in find_problems(snap(bad, procs), Baselines()) if f.kind == "ghost_memory"]
    assert "65 MiB more than" in ghost.detail


def test_no_ghost_when_the_driver_does_not_say_per_process_memory() -> None:
    gpu_list = [Gpu(index=0, memory_used_mib=9000, processes=(GpuProcess(pid=300, used_mib=None),))]
    assert "ghost_memory" not in kinds(find_problems(snap(gpu_list, [proc(300, 50, "x")]), Baselines()))


def test_invisible_pid_finding_never_carries_a_local_pid() -> None:
    gpu_list = with_holders(gpus(4), {3: [GpuProcess(pid=4242, used_mib=1024, visible=False)]})
    findings = find_problems(snap(gpu_list, [proc(4242, 1, "unrelated")]), Baselines())
    (invisible,) = [f for f in findings if f.kind == "invisible_pid"]
    assert invisible.pid is None
    assert invisible.action_pid is None
    assert invisible.gpu_index == 3
    assert "pid 4242 holds 1024 MiB but is not visible here" in invisible.detail


def test_clean_host_has_no_findings() -> None:
    assert find_problems(snap(gpus(), []), Baselines()) == []


# -- verdict ----------------------------------------------------------------------------------------------


def test_eight_times_three_mib_is_clean() -> None:
    verdict = clean_slate(snap(gpus(), []), Baselines())
    assert verdict.clean
    assert verdict.known
    assert verdict.reasons == ()
    assert verdict.gpus_at_baseline == 8
    assert verdict.baseline_mib == {f"GPU-{i:04d}": 3 for i in range(8)}
    assert verdict.tolerance_mib == 2


def test_tolerance_boundary() -> None:
    assert clean_slate(snap(gpus(1, used=5), []), Baselines()).clean
    verdict = clean_slate(snap(gpus(1, used=6), []), Baselines())
    assert not verdict.clean
    assert verdict.reasons == ("GPU0 3 MiB over baseline with no process listed (ghost memory)",)
    assert clean_slate(snap(gpus(1, used=6), []), Baselines(tolerance_mib=3)).clean
    assert clean_slate(snap(gpus(1, used=6), []), Baselines(default_mib=4)).clean


def test_calibrated_baseline_per_gpu_uuid() -> None:
    gpu_list = gpus(2)
    gpu_list[1] = Gpu(index=1, uuid="GPU-0001", memory_used_mib=500)
    baselines = Baselines(per_gpu_mib={"GPU-0001": 499})
    verdict = clean_slate(snap(gpu_list, []), baselines)
    assert verdict.clean
    assert verdict.baseline_mib == {"GPU-0000": 3, "GPU-0001": 499}
    # Keyed by UUID: the same value on another GPU does not apply.
    assert not clean_slate(snap([Gpu(index=1, uuid="GPU-ffff", memory_used_mib=500)], []), baselines).clean


def test_memory_held_by_a_process_with_a_defunct_parent() -> None:
    procs = [proc(4200, 1, "python3", state="Z"), proc(4242, 4200, "scheduler", gpu={3: 41233})]
    gpu_list = with_holders(gpus(8), {3: [GpuProcess(4242, 41233)]})
    verdict = clean_slate(snap(gpu_list, procs), Baselines())
    assert not verdict.clean
    assert verdict.reasons[0] == "GPU3 41236 MiB held by pid 4242 (scheduler, defunct parent 4200)"
    assert verdict.gpus[3].reasons == (verdict.reasons[0],)
    assert [g.clean for g in verdict.gpus] == [True, True, True, False, True, True, True, True]


def test_zombie_left_in_a_gpu_tree_is_not_clean_even_at_baseline() -> None:
    host = sglang_host(zombie_worker=101)
    procs = [p for p in host.processes if p.pid in (1, 40, 50, 100, 101, 102)]
    gpu_list = with_holders(gpus(), {1: [GpuProcess(102, 10)]})
    verdict = clean_slate(snap(gpu_list, procs), Baselines(tolerance_mib=20))
    assert not verdict.clean
    assert "GPU1 13 MiB but pid 102 (scheduler_TP1) still listed" in verdict.reasons
    # The same sentence as the zombie finding: one fact, one sentence.
    zombie = "pid 101 (scheduler_TP0) is defunct; its parent 100 (python3) has not reaped it"
    assert zombie in verdict.reasons


def test_zombie_outside_gpu_trees_does_not_block_the_clean_slate() -> None:
    verdict = clean_slate(snap(gpus(), [proc(70, 60, "make", state="Z"), proc(60, 1, "make")]), Baselines())
    assert verdict.clean


def test_sglang_tree_verdict_names_every_gpu() -> None:
    verdict = clean_slate(sglang_host(), Baselines())
    assert not verdict.clean
    assert verdict.reasons[0] == f"GPU0 {WORKER_MIB + 3} MiB held by pid 101 (scheduler_TP0)"
    assert len(verdict.reasons) == 8


def test_invisible_holder_in_verdict() -> None:
    gpu_list = with_holders(gpus(2), {1: [GpuProcess(pid=9, used_mib=1024, visible=False)]})
    verdict = clean_slate(snap(gpu_list, []), Baselines())
    assert verdict.reasons == ("GPU1 1027 MiB held by pid 9 (not visible here: another PID namespace)",)


def test_several_holders_on_one_gpu_show_each_share() -> None:
    listed = [GpuProcess(pid=10 + i, used_mib=100 * (i + 1)) for i in range(5)]
    procs = [proc(10 + i, 1, f"w{i}") for i in range(5)]
    verdict = clean_slate(snap(with_holders(gpus(1), {0: listed}), procs), Baselines())
    assert verdict.reasons[0].startswith("GPU0 1503 MiB held by pid 14 (w4, orphan, 500 MiB), pid 13")
    assert verdict.reasons[0].endswith("and 2 more")


def test_a_gpu_that_cannot_be_read_means_cannot_tell() -> None:
    gpu_list = gpus(2)
    gpu_list[1] = Gpu(index=1, error="GPU_IS_LOST")
    verdict = clean_slate(snap(gpu_list, []), Baselines())
    assert (verdict.clean, verdict.known) == (False, False)
    assert verdict.reasons == ("GPU1 error: GPU_IS_LOST",)
    assert [g.clean for g in verdict.gpus] == [True, False]
    unreadable = clean_slate(snap([Gpu(index=0)], []), Baselines())
    assert (unreadable.clean, unreadable.known) == (False, False)
    assert unreadable.reasons == ("GPU0 memory could not be read",)


def test_host_error_or_no_gpus_cannot_tell() -> None:
    no_driver = clean_slate(snap([], [], error="NVML: Driver Not Loaded"), Baselines())
    assert (no_driver.clean, no_driver.known) == (False, False)
    assert no_driver.reasons == ("NVML: Driver Not Loaded",)  # whoever shows it says "cannot tell"
    no_gpus = clean_slate(snap([], []), Baselines())
    assert (no_gpus.clean, no_gpus.known) == (False, False)


def test_hostile_names_are_made_visible_in_reasons() -> None:
    procs = [proc(5, 1, "\x1b]0;pwned\x07\u202e")]
    gpu_list = with_holders(gpus(1), {0: [GpuProcess(5, 100)]})
    reason = clean_slate(snap(gpu_list, procs), Baselines()).reasons[0]
    assert "\x1b" not in reason
    assert "\u202e" not in reason
    assert "\\x1b]0;pwned\\x07\\u202e" in reason


def test_analyze_fills_findings_and_verdict_and_round_trips() -> None:
    analysed = analyze(sglang_host(zombie_worker=104), Baselines())
    assert analysed.verdict is not None
    assert not analysed.verdict.clean
    assert "zombie" in kinds(list(analysed.findings))
    again = HostSnapshot.from_json(analysed.to_json())
    assert again.verdict == analysed.verdict
    assert again.findings == analysed.findings


# -- any snapshot at all ------------------------------------------------------------------------------------

_pids = st.integers(min_value=0, max_value=40)
_procs = st.lists(
    st.builds(
        Proc,
        pid=_pids,
        ppid=st.none() | _pids,
        state=st.sampled_from(["S", "R", "Z", "D", None]),
        name=st.none() | st.sampled_from(["bash", "sshd", "python3", "tmux: server", "systemd", "\x1b[2J"]),
        cmdline=st.lists(st.sampled_from(["-bash", "bash", "x.sh", "-c", "python3"]), max_size=3).map(tuple),
        state_since=st.none() | st.floats(min_value=NOW - 100, max_value=NOW + 100),
        gpu_memory_mib=st.dictionaries(st.integers(0, 3), st.integers(0, 50_000), max_size=2),
    ),
    max_size=25,
    unique_by=lambda p: p.pid,
)
_gpus = st.lists(
    st.builds(
        Gpu,
        index=st.integers(0, 3),
        uuid=st.none() | st.sampled_from(["GPU-a", "GPU-b"]),
        memory_used_mib=st.none() | st.integers(0, 50_000),
        error=st.none() | st.just("GPU_IS_LOST"),
        processes=st.lists(
            st.builds(
                GpuProcess, pid=_pids, used_mib=st.none() | st.integers(0, 50_000), visible=st.booleans()
            ),
            max_size=4,
        ).map(tuple),
    ),
    max_size=4,
    unique_by=lambda g: g.index,
)


@settings(max_examples=150, deadline=None)
@given(_gpus, _procs, st.none() | st.just("NVML: Driver Not Loaded"))
def test_any_snapshot_analyses_without_error_and_consistently(gpu_list, procs, error) -> None:
    snapshot = snap(gpu_list, procs, error=error)
    analysed = analyze(snapshot, Baselines())
    verdict = analysed.verdict
    assert verdict is not None
    readable = all(g.error is None and g.memory_used_mib is not None for g in gpu_list)
    assert verdict.known == (error is None and bool(gpu_list) and readable)
    if verdict.clean:
        assert verdict.reasons == ()
        assert all(g.clean for g in verdict.gpus)
    else:
        assert verdict.reasons
    nodes = flatten(build_forest(snapshot))
    pids = [n.proc.pid for n in nodes]
    assert len(pids) == len(set(pids))  # every process at most once, whatever the ppid data
    assert all(n.subtree_total_mib >= n.proc.gpu_total_mib for n in nodes)
    for finding in analysed.findings:
        assert finding.kind in ("zombie", "orphan", "uninterruptible", "ghost_memory", "invisible_pid")
        assert "\x1b" not in finding.detail
        if finding.kind == "invisible_pid":
            assert finding.pid is None
            assert finding.action_pid is None
    assert all("\x1b" not in r for r in verdict.reasons)


def test_memory_at_baseline_judges_memory_alone() -> None:
    # A fast memory-only sample still carries the last (stale) process list: memory decides, the full
    # verdict on a fresh sample confirms.
    stale = sglang_host()
    drained = snap(
        [
            Gpu(index=g.index, uuid=g.uuid, memory_used_mib=3, memory_total_mib=49152, processes=g.processes)
            for g in stale.gpus
        ],
        list(stale.processes),
    )
    assert not memory_at_baseline(stale, Baselines())
    assert memory_at_baseline(drained, Baselines())
    assert not clean_slate(drained, Baselines()).clean  # the stale list still names the workers


def test_memory_at_baseline_uses_tolerance_and_calibration() -> None:
    host = snap(gpus(used=5), [])
    assert memory_at_baseline(host, Baselines(tolerance_mib=2))
    assert not memory_at_baseline(host, Baselines(tolerance_mib=1))
    calibrated = Baselines(tolerance_mib=0, per_gpu_mib={f"GPU-{i:04d}": 5 for i in range(8)})
    assert memory_at_baseline(host, calibrated)


def test_memory_at_baseline_cannot_tell_is_not_clean() -> None:
    lost = gpus()
    lost[3] = Gpu(index=3, uuid="GPU-0003", error="GPU is lost")
    assert not memory_at_baseline(snap(lost, []), Baselines())
    assert not memory_at_baseline(snap([], []), Baselines())
    assert not memory_at_baseline(snap(gpus(), [], error="NVIDIA driver not loaded"), Baselines())


# -- after a kill: survivors and remnants ------------------------------------------------------------------


def survivor_host(extra: list[Proc], holders: dict[int, list[GpuProcess]], **kw: object) -> HostSnapshot:
    procs = [proc(1, 0, "systemd", ("/sbin/init",)), *extra]
    return snap(with_holders(gpus(), holders), procs, **kw)


def killed(**kw: object):  # type: ignore[no-untyped-def]
    from gputui.core.verdict import KilledJob

    job = {
        "root_pid": 100,
        "root_name": "python3",
        "start_ticks": 1000,
        "uid": 1000,
        "cgroup": None,
        "gpus": frozenset({0, 1}),
        "members": frozenset({(100, 1000), (101, 1010)}),
        "boot_id": "b",
    }
    job.update(kw)
    return KilledJob(**job)  # type: ignore[arg-type]


def p(
    pid: int,
    ppid: int,
    name: str,
    ticks: int,
    *,
    sid: int | None = None,
    uid: int = 1000,
    gpu: dict[int, int] | None = None,
    cgroup: str | None = None,
    state: str = "S",
) -> Proc:
    return Proc(
        pid=pid,
        ppid=ppid,
        user="alice",
        uid=uid,
        state=state,
        name=name,
        cmdline=(name,),
        start_ticks=ticks,
        sid=sid,
        pgid=sid,
        cgroup=cgroup,
        gpu_memory_mib=dict(gpu or {}),
    )


def test_a_setsid_daemon_the_job_left_behind_is_a_survivor() -> None:
    from gputui.core.verdict import find_survivors

    host = survivor_host(
        [p(500, 1, "cache_daemon", 1020, sid=500, gpu={0: 2048})],
        {0: [GpuProcess(500, 2048)]},
    )
    (finding,) = find_survivors(host, [killed()])
    assert (finding.kind, finding.pid, finding.action_pid, finding.gpu_index) == ("survivor", 500, 500, 0)
    assert finding.detail == (
        "pid 500 (cache_daemon) holds 2048 MiB on GPU0: a survivor of the job of pid 100 (python3), outside "
        "its tree (it leads a session of its own)"
    )
    # And it is a finding like any other once the app hands the killed jobs to the analysis.
    assert "survivor" in kinds(find_problems(host, Baselines(), killed_jobs=[killed()]))
    assert "survivor" not in kinds(find_problems(host, Baselines()))


def test_what_is_not_a_survivor() -> None:
    from gputui.core.verdict import find_survivors

    others = [
        p(600, 1, "other_user", 1020, sid=600, uid=1001, gpu={0: 10}),  # another user's
        p(700, 1, "older", 900, sid=700, gpu={0: 10}),  # started before the job
        p(800, 1, "elsewhere", 1020, sid=800, gpu={5: 10}),  # on none of the job's GPUs
        p(910, 900, "from_a_shell", 1020, sid=900, gpu={1: 10}),  # a job of its own, started from a shell
        p(101, 100, "member", 1010, sid=100, gpu={0: 10}),  # the job's own member, still listed
        p(950, 1, "Xorg", 1020, sid=950, gpu={1: 10}),  # graphics only
        p(960, 1, "zombie", 1020, sid=960, state="Z"),
        p(900, 1, "bash", 1015, sid=900),
    ]
    holders = {
        0: [GpuProcess(600, 10), GpuProcess(700, 10), GpuProcess(101, 10)],
        1: [GpuProcess(910, 10), GpuProcess(950, 10, type="graphics")],
        5: [GpuProcess(800, 10)],
    }
    assert find_survivors(survivor_host(others, holders), [killed()]) == []
    # A job from another boot says nothing about this one.
    escapee = [p(500, 1, "d", 1020, sid=500, gpu={0: 10})]
    assert find_survivors(survivor_host(escapee, {0: [GpuProcess(500, 10)]}), [killed(boot_id="x")]) == []


def test_where_cgroups_tell_jobs_apart_the_job_cgroup_decides() -> None:
    from gputui.core.verdict import find_survivors

    unit = "/system.slice/train.service"
    procs = [
        p(500, 450, "helper", 1020, sid=450, gpu={3: 10}, cgroup=unit),  # not orphaned, not on its GPUs
        p(600, 1, "stranger", 1020, sid=600, gpu={0: 10}, cgroup="/user.slice"),
    ]
    host = survivor_host(procs, {3: [GpuProcess(500, 10)], 0: [GpuProcess(600, 10)]})
    found = find_survivors(host, [killed(cgroup=unit)])
    assert [(f.pid, f.detail.endswith("(in the job's cgroup)")) for f in found] == [(500, True)]


def test_a_device_holder_without_listed_memory_is_a_survivor_too() -> None:
    from gputui.core.verdict import find_survivors

    host = survivor_host(
        [p(500, 1, "d", 1020, sid=500)], {}, device_holders=(DeviceHolder(500, "d", "/dev/nvidia1"),)
    )
    (finding,) = find_survivors(host, [killed()])
    assert "has a /dev/nvidia* node open" in finding.detail


def test_job_remnants_are_the_killed_processes_still_defunct_or_stuck() -> None:
    from gputui.core.verdict import job_remnants

    host = survivor_host(
        [
            p(101, 1, "w", 1010, state="Z"),
            p(102, 1, "x", 1011, state="S"),
            p(103, 1, "y", 1012, state="D"),
            p(104, 1, "z", 9999, state="Z"),
        ],
        {},
    )
    members = {(101, 1010), (102, 1011), (103, 1012), (104, 1013)}
    assert [r.pid for r in job_remnants(host, members)] == [101, 103]
