"""The verdict engine's own rules: levels and exit codes, the NOT READY hook, server states that never
outlive their evidence, calibration only from idle evidence, one-shot D states, and 'no data'."""

from __future__ import annotations

import pytest

from gputui.agent.protocol import (
    ENDPOINT_STATE_BUSY,
    ENDPOINT_STATE_DOWN,
    ENDPOINT_STATE_STARTING,
    ENDPOINT_STATE_UNHEALTHY,
    ENDPOINT_STATE_UP,
)
from gputui.core.model import (
    CANNOT_TELL,
    CLEAN,
    EXIT_CODES,
    NOT_CLEAN,
    NOT_READY,
    EndpointSample,
    Gpu,
    GpuProcess,
    HostSnapshot,
    LiveThreads,
    Proc,
    Verdict,
    replace,
)
from gputui.core.servers import JobFacts, ServerStateTracker, job_facts, parse_server_metrics
from gputui.core.verdict import (
    DEFUNCT_RESET_AFTER_S,
    IDLE_FLOOR_MIB,
    Baselines,
    exit_code,
    headline,
    idle_limit_mib,
    judge,
    no_data,
    no_data_text,
    readiness,
    refusals,
    worst_exit_code,
)

NOW = 1_800_000_000.0
URL = "http://127.0.0.1:30000/health"


def gpus(count: int = 2, used: int = 3) -> tuple[Gpu, ...]:
    return tuple(
        Gpu(index=i, uuid=f"GPU-{i}", memory_used_mib=used, memory_total_mib=81920) for i in range(count)
    )


def proc(pid: int, ppid: int, name: str, state: str = "S", **kw: object) -> Proc:
    return Proc(pid=pid, ppid=ppid, name=name, state=state, start_ticks=pid, state_since=NOW - 60, **kw)  # type: ignore[arg-type]


def host(gpu_list: tuple[Gpu, ...] = gpus(), procs: tuple[Proc, ...] = (), **kw: object) -> HostSnapshot:
    return HostSnapshot(
        target="node", boot_id="b", time=NOW, processes_time=NOW, gpus=gpu_list, processes=procs, **kw
    )  # type: ignore[arg-type]


def defunct_leader(pid: int, ppid: int, mib: int, since: float, gpu: int = 0) -> Proc:
    return replace(
        proc(pid, ppid, "scheduler", state="Z", gpu_memory_mib={gpu: mib}),
        live_threads=LiveThreads(live=2, states={"D": 2}),
        state_since=since,
    )


# -- levels, exit codes, headline -------------------------------------------------------------------


def test_levels_rank_and_exit_codes() -> None:
    assert EXIT_CODES == {CLEAN: 0, NOT_CLEAN: 1, NOT_READY: 1, CANNOT_TELL: 2}
    assert exit_code(None) == 2
    assert exit_code(Verdict(clean=True)) == 0
    assert exit_code(Verdict(clean=False, reasons=("x",))) == 1
    # NOT READY outranks NOT CLEAN, CANNOT TELL outranks both.
    assert Verdict(clean=False, reasons=("a", "b"), not_ready=("a",)).level == NOT_READY
    assert Verdict(clean=False, known=False, reasons=("a",), not_ready=("a",)).level == CANNOT_TELL
    assert worst_exit_code([0, 1, 2, 0]) == 2
    assert worst_exit_code([0, 1]) == 1
    assert worst_exit_code([]) == 0


def test_the_headline_names_the_level_and_the_calibrated_baselines() -> None:
    verdict = judge(host(gpus(used=7)), Baselines(per_gpu_mib={"GPU-0": 7, "GPU-1": 4})).verdict
    assert verdict is not None
    assert verdict.level == NOT_CLEAN  # GPU1: 7 > 4 + 2
    assert headline(verdict) == "NOT CLEAN: 1/2 GPUs at baseline (4/7 MiB + 2)"
    assert headline(None) == "cannot tell: no data"
    lost = judge(host((Gpu(index=0, error="GPU is lost"),)), Baselines()).verdict
    assert headline(lost) == "cannot tell: GPU0 error: GPU is lost"
    assert lost is not None
    assert lost.to_dict()["level"] == CANNOT_TELL


# -- the NOT READY hook -------------------------------------------------------------------------------


def test_a_gpu_stuck_in_the_driver_past_the_reset_time_is_not_ready() -> None:
    stuck = defunct_leader(4241, 4200, 41000, NOW - DEFUNCT_RESET_AFTER_S - 1)
    listed = (replace(gpus()[0], memory_used_mib=41003, processes=(GpuProcess(4241, 41000),)), gpus()[1])
    verdict = judge(host(listed, (proc(4200, 1, "launcher"), stuck)), Baselines()).verdict
    assert verdict is not None
    assert verdict.level == NOT_READY
    assert verdict.not_ready == (
        "GPU0 needs a reset: pid 4241 (scheduler) has held its memory with threads "
        "stuck in the driver for 10 min",
    )
    assert verdict.reasons[0] == verdict.not_ready[0]  # named first, and listed once
    assert verdict.reasons.count(verdict.not_ready[0]) == 1
    young = replace(stuck, state_since=NOW - 30)
    verdict = judge(host(listed, (proc(4200, 1, "launcher"), young)), Baselines()).verdict
    assert verdict is not None
    assert verdict.level == NOT_CLEAN


def test_a_health_rule_plugs_in_with_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    def retired_rows(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
        return f"GPU{gpu.index} needs a reboot: rows retired" if gpu.index == 1 else None

    monkeypatch.setattr(readiness, "UNFIT_RULES", [*readiness.UNFIT_RULES, retired_rows])
    snapshot = judge(host(), Baselines(), one_shot=True)
    assert snapshot.verdict is not None
    assert snapshot.verdict.level == NOT_READY
    assert snapshot.verdict.reasons == ("GPU1 needs a reboot: rows retired",)
    assert exit_code(snapshot.verdict) == 1
    # At baseline is said of memory: GPU1 needs a reboot, its memory is back all the same.
    assert headline(snapshot.verdict) == "NOT READY: 2/2 GPUs at baseline (3 MiB + 2)"


# -- server states ------------------------------------------------------------------------------------


def sample(state: str, code: int | None = None, **kw: object) -> EndpointSample:
    return EndpointSample(url=URL, state=state, code=code, checked_at=NOW, **kw)  # type: ignore[arg-type]


def test_a_launcher_that_is_gone_has_no_age_and_refused_reads_down() -> None:
    tracker = ServerStateTracker()
    assert tracker.update(sample(ENDPOINT_STATE_DOWN), None, 30.0, NOW).state == ENDPOINT_STATE_STARTING
    after = tracker.update(sample(ENDPOINT_STATE_DOWN), None, None, NOW + 60)
    assert after.state == ENDPOINT_STATE_DOWN
    assert "launcher" not in after.reason


def test_a_503_with_defunct_members_is_unhealthy_not_starting() -> None:
    facts = JobFacts(defunct=("4241 (scheduler)",))
    state = ServerStateTracker().update(sample(ENDPOINT_STATE_UNHEALTHY, 503), None, 30.0, NOW, job=facts)
    assert state.state == ENDPOINT_STATE_UNHEALTHY
    assert state.reason == "HTTP 503 with 1 defunct member in its job"
    assert state.from_job


def test_a_launcher_that_served_is_not_starting_again() -> None:
    # Without metrics: /health answered 200 since this launcher started.
    served = sample(ENDPOINT_STATE_UNHEALTHY, 503, last_ok=NOW - 10)
    assert ServerStateTracker().update(served, None, 60.0, NOW).state == ENDPOINT_STATE_UNHEALTHY
    before = sample(ENDPOINT_STATE_UNHEALTHY, 503, last_ok=NOW - 120)  # a 200 from the launcher before it
    assert ServerStateTracker().update(before, None, 60.0, NOW).state == ENDPOINT_STATE_STARTING
    # With metrics: tokens were generated.
    tokens = parse_server_metrics("sglang:generation_tokens_total 12\nsglang:num_running_reqs 0\n", NOW)
    state = ServerStateTracker().update(sample(ENDPOINT_STATE_UNHEALTHY, 503), tokens, 60.0, NOW)
    assert state.state == ENDPOINT_STATE_UNHEALTHY


def metrics(at: float, tokens: float) -> object:
    return parse_server_metrics(f"sglang:generation_tokens_total {tokens}\nsglang:num_running_reqs 1\n", at)


def test_busy_is_never_said_of_a_job_with_a_defunct_leader_holding_memory() -> None:
    facts = JobFacts(
        defunct=("4241 (scheduler)",), not_busy="pid 4241 (scheduler) is a defunct leader holding 41000 MiB"
    )
    plain, vetoed = ServerStateTracker(), ServerStateTracker()
    for tracker, job in ((plain, None), (vetoed, facts)):
        tracker.update(sample(ENDPOINT_STATE_UP), metrics(NOW, 0), 3600.0, NOW, job=job)  # type: ignore[arg-type]
        last = tracker.update(
            replace(sample(ENDPOINT_STATE_UNHEALTHY, 500), checked_at=NOW + 5),
            metrics(NOW + 5, 50),  # type: ignore[arg-type]
            3600.0,
            NOW + 5,
            job=job,
        )
        if job is None:
            assert last.state == ENDPOINT_STATE_BUSY
        else:
            assert last.state == ENDPOINT_STATE_UNHEALTHY
            assert "not dead, do not kill" not in last.reason
            assert "defunct leader holding 41000 MiB" in last.reason


def test_job_facts_follow_the_launchers_tree_and_the_zombie_threshold() -> None:
    launcher = proc(4200, 1, "python3")
    leader = defunct_leader(4241, 4200, 41000, NOW - 20)
    fresh_zombie = replace(proc(4250, 4200, "worker", state="Z"), state_since=NOW - 1)
    other = replace(proc(5000, 1, "other", state="Z"), state_since=NOW - 100)
    snapshot = host(procs=(launcher, leader, fresh_zombie, other))
    facts = job_facts(snapshot, 4200)
    assert facts.defunct == ("4241 (scheduler)", "4250 (worker)")  # not the other job's zombie
    assert "defunct leader holding 41000 MiB" in facts.not_busy
    only_fresh = job_facts(host(procs=(launcher, fresh_zombie)), 4200)
    assert only_fresh.defunct == ("4250 (worker)",)
    assert only_fresh.not_busy == ""  # a worker that exited a moment ago does not forbid BUSY
    settled = job_facts(host(procs=(launcher, replace(fresh_zombie, state_since=NOW - 30))), 4200)
    assert settled.not_busy == "pid 4250 (worker) of its job is defunct"


def test_the_engine_judges_servers_from_the_same_sample() -> None:
    listed = (replace(gpus()[0], memory_used_mib=41003, processes=(GpuProcess(4241, 41000),)), gpus()[1])
    raw = host(
        listed,
        (proc(4200, 1, "python3"), defunct_leader(4241, 4200, 41000, NOW - 20)),
        endpoints=(sample(ENDPOINT_STATE_UNHEALTHY, 503, launcher_age_s=40.0, launcher_pid=4200),),
    )
    judged = judge(raw, Baselines(), one_shot=True)
    (server,) = judged.endpoints
    assert server.state == ENDPOINT_STATE_UNHEALTHY
    assert server.detail == "HTTP 503 with 1 defunct member in its job"
    assert judged.verdict is not None
    assert judged.verdict.reasons[-1] == f"server {URL} is UNHEALTHY: {server.detail}"
    assert judged.verdict.level == NOT_CLEAN
    up = judge(replace(raw, gpus=gpus(), processes=(), endpoints=(sample(ENDPOINT_STATE_UP),)), Baselines())
    assert up.verdict is not None
    assert up.verdict.level == CLEAN


# -- findings in one-shot runs --------------------------------------------------------------------------


def test_a_one_shot_sample_says_a_gpu_process_seen_in_d_with_its_age_unknown() -> None:
    stuck = replace(proc(4300, 1, "worker", state="D", gpu_memory_mib={0: 1000}), state_since=NOW)
    listed = (replace(gpus()[0], memory_used_mib=1003, processes=(GpuProcess(4300, 1000),)), gpus()[1])
    one_shot = judge(host(listed, (stuck,)), Baselines(), one_shot=True)
    (finding,) = [f for f in one_shot.findings if f.kind == "uninterruptible"]
    assert "(for how long unknown)" in finding.detail
    assert one_shot.verdict is not None
    assert finding.detail in one_shot.verdict.reasons  # the verdict says it the finding's way
    watching = judge(host(listed, (stuck,)), Baselines())
    assert not [f for f in watching.findings if f.kind == "uninterruptible"]  # a watching view waits


# -- calibration ----------------------------------------------------------------------------------------


def test_calibration_takes_only_idle_evidence() -> None:
    assert idle_limit_mib(Gpu(index=0, memory_total_mib=81920)) == 819
    assert idle_limit_mib(Gpu(index=0, memory_total_mib=24576)) == IDLE_FLOOR_MIB
    assert idle_limit_mib(Gpu(index=0)) == IDLE_FLOOR_MIB
    gpu_list = (
        Gpu(index=0, uuid="a", memory_used_mib=7, memory_total_mib=81920),
        Gpu(index=1, uuid="b", memory_used_mib=40000, memory_total_mib=81920),
        Gpu(index=2, uuid="c", memory_used_mib=5, memory_total_mib=81920, processes=(GpuProcess(77, 2),)),
        Gpu(index=3, uuid="d", error="GPU is lost"),
    )
    found = {r.index: r for r in refusals(judge(host(gpu_list), Baselines(), one_shot=True))}
    assert set(found) == {1, 2, 3}
    assert found[1].reason == "holds 40000 MiB, more than an idle GPU of its size (819 MiB)"
    assert found[2].reason == "lists pid 77"
    assert not found[3].forcible


# -- no data ---------------------------------------------------------------------------------------------


def test_no_data_cannot_tell_and_says_since_when() -> None:
    text = no_data_text("connection refused", NOW)
    assert text.startswith("no data since ")
    assert text.endswith(": connection refused")
    assert no_data_text(None, None) == "no data"
    snapshot = no_data("node", "connection refused", None)
    assert snapshot.findings == ()
    assert snapshot.verdict is not None
    assert snapshot.verdict.level == CANNOT_TELL
    assert headline(snapshot.verdict) == "cannot tell: no data: connection refused"


# -- one wording table --------------------------------------------------------------------------------


def test_every_finding_kind_and_reason_has_one_sentence_builder() -> None:
    from gputui.core.verdict import FINDING_KINDS, FINDING_SENTENCES, REASON_SENTENCES

    assert set(FINDING_SENTENCES) == set(FINDING_KINDS)
    assert {"held", "ghost_memory", "port", "server", "remnant", "not_ready", "no_data"} <= set(
        REASON_SENTENCES
    )
    # The fleet builds its Xid finding from the same function as any other view would.
    xid = FINDING_SENTENCES["xid"]("gpu-a", 3, 79)
    assert xid.detail == "GPU3 reported XID 79 as DCGM's last Xid"


def test_finding_sentences_carry_no_age_the_start_time_does_and_every_view_renders_it() -> None:
    import io

    from gputui.commands.output.verdict_text import verdict_lines
    from gputui.core.text import age_since

    zombie = proc(30, 20, "worker", state="Z")  # in Z since NOW - 60
    parent = proc(20, 1, "launcher")
    stuck = replace(proc(40, 20, "io", state="D"), state_since=NOW - 7200)
    judged = judge(host(procs=(parent, zombie, stuck)), Baselines(), now=NOW)
    by_pid = {f.pid: f for f in judged.findings}
    assert by_pid[30].detail == "pid 30 (worker) is defunct; its parent 20 (launcher) has not reaped it"
    assert by_pid[30].since == NOW - 60
    assert by_pid[40].detail.startswith("pid 40 (io) is in uninterruptible sleep (D); ")
    assert by_pid[40].since == NOW - 7200
    for finding in judged.findings:
        assert " for " not in finding.detail  # an age would go stale the moment it is printed
    # JSON carries the start time (epoch seconds), and reads back the same.
    assert [f["since"] for f in judged.to_dict()["findings"]] == [f.since for f in judged.findings]
    assert HostSnapshot.from_dict(judged.to_dict()).findings == judged.findings
    # Text renders the age from it, with the one display function the TUI uses too.
    assert age_since(NOW - 60, NOW) == "for 60 s"
    assert age_since(NOW - 7200, NOW) == "for 2.0 h"
    assert age_since(NOW - 0.4, NOW) == ""  # under a second says nothing
    assert age_since(None, NOW) == ""
    lines = verdict_lines(judged, io.StringIO())
    assert f"! zombie: {by_pid[30].detail} (for 60 s)" in lines
    assert f"! uninterruptible: {by_pid[40].detail} (for 2.0 h)" in lines


# -- over time: the views that watch ------------------------------------------------------------------


def test_a_watching_view_says_unhealthy_from_the_first_wedged_sample_then_stalled() -> None:
    """The demo's wedged host, fed second by second to the engine with the TUI's watch: UNHEALTHY from the
    first sample with defunct schedulers (never BUSY, never STARTING), then STALLED past the window; the
    verdict names the server in the same sentence every time."""
    from gputui.core.link import LinkOptions
    from gputui.core.servers import ServerWatch
    from gputui.transports.sim import ManualClock, SimLink

    clock = ManualClock()
    link = SimLink("gpu-node-07", LinkOptions(memory_interval_s=0.01), clock=clock, wedged_at_s=3.0)
    link.open()
    watch = ServerWatch(stall_after_s=5.0)
    seen: list[str | None] = []
    for _ in range(30):
        raw = HostSnapshot.from_dict(link.request({"cmd": "sample"}, timeout_s=1)["snapshot"])
        judged = judge(raw, Baselines(), servers=watch)
        (server,) = judged.endpoints
        seen.append(server.state)
        if any(p.state == "Z" for p in raw.processes) and seen.count(server.state) == 1:
            assert server.state in (ENDPOINT_STATE_UNHEALTHY, "STALLED"), server
        if server.state in (ENDPOINT_STATE_UNHEALTHY, "STALLED"):
            assert judged.verdict is not None
            assert f"server {server.url} is {server.state}: {server.detail}" in judged.verdict.reasons
        clock.advance(1.0)
    link.close()
    assert ENDPOINT_STATE_BUSY not in seen
    assert ENDPOINT_STATE_STARTING not in seen
    assert seen[-1] == "STALLED"
    assert ENDPOINT_STATE_UP in seen[:3]
