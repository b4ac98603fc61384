"""The clean-slate state machine's rules, one by one (the TUI's ``c`` and ``check --wait`` both run it)."""

from __future__ import annotations

from gputui.core.model import Gpu, GpuProcess, HostSnapshot, Proc, replace
from gputui.core.store import watched_ports
from gputui.core.verdict import Baselines, analyze, cleanslate

BASELINES = Baselines()
T0 = 1_800_000_000.0


def _snapshot(
    used_mib: tuple[int, ...],
    at_s: float,
    listed_s: float | None = None,
    holders: tuple[int, ...] = (),
    processes: tuple[Proc, ...] = (),
) -> HostSnapshot:
    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i}",
            memory_used_mib=used,
            memory_total_mib=49152,
            processes=tuple(GpuProcess(pid=pid, used_mib=0) for pid in holders) if i == 0 else (),
        )
        for i, used in enumerate(used_mib)
    )
    # A streamed sample reuses a process list read before it unless told otherwise (``listed_s``).
    listed = at_s - 0.5 if listed_s is None else listed_s
    snapshot = HostSnapshot(
        target="h", boot_id="b", time=at_s, processes_time=listed, gpus=gpus, processes=processes
    )
    return analyze(snapshot, BASELINES, now=at_s)


def _fresh(snapshot: HostSnapshot) -> HostSnapshot:
    """``snapshot`` as the confirming sample asked for: its processes listed when it was taken."""
    return replace(snapshot, processes_time=snapshot.time)


def _started() -> cleanslate.CleanCheck:
    return cleanslate.start(T0, timeout_s=60.0)


def test_memory_above_baseline_asks_nothing_and_is_recorded_for_the_drain_curve() -> None:
    check, ask = cleanslate.memory_sample(_started(), _snapshot((40_000, 3), T0 + 1), BASELINES, T0 + 1)
    assert not ask
    assert check.drain == (cleanslate.DrainPoint(T0 + 1, 40_000 - 5),)


def test_a_clean_memory_sample_asks_once_and_a_clean_fresh_sample_makes_the_receipt_at_its_time() -> None:
    check, ask = cleanslate.memory_sample(_started(), _snapshot((3, 3), T0 + 2), BASELINES, T0 + 2)
    assert ask
    assert check.confirming
    check, again = cleanslate.memory_sample(check, _snapshot((3, 3), T0 + 3), BASELINES, T0 + 3)
    assert not again  # one confirming sample at a time
    check = cleanslate.confirming_sample(check, _snapshot((3, 3), T0 + 4))
    assert check.clean is True
    assert check.finished_s == T0 + 2  # when the clean memory sample arrived, not when the answer did


def test_a_fresh_sample_listing_processes_older_than_the_memory_sample_does_not_confirm() -> None:
    check, _ = cleanslate.memory_sample(_started(), _snapshot((3, 3), T0 + 5), BASELINES, T0 + 5)
    check = cleanslate.confirming_sample(check, _snapshot((3, 3), T0 + 6, listed_s=T0 + 4))
    assert check.running
    assert check.note == cleanslate.STALE_LIST
    assert not check.confirming  # the next clean memory sample asks again
    _, ask = cleanslate.memory_sample(check, _snapshot((3, 3), T0 + 7), BASELINES, T0 + 7)
    assert ask


def test_a_fresh_sample_that_still_lists_a_holder_does_not_confirm() -> None:
    check, _ = cleanslate.memory_sample(_started(), _snapshot((3, 3), T0 + 2), BASELINES, T0 + 2)
    late = Proc(pid=77, ppid=1, state="S", name="late", start_ticks=1)
    check = cleanslate.confirming_sample(check, _snapshot((3, 3), T0 + 3, holders=(77,), processes=(late,)))
    assert check.running
    assert "77" in check.note


def test_no_receipt_while_a_kill_is_under_way_or_a_zombie_of_a_killed_job_is_listed() -> None:
    check = cleanslate.kill_sent(_started(), T0 + 1)
    check, ask = cleanslate.memory_sample(check, _snapshot((3, 3), T0 + 2), BASELINES, T0 + 2)
    assert not ask  # the kill's escalation may still be due
    check = cleanslate.kills_settled(check, still_under_way=False)
    check, ask = cleanslate.memory_sample(check, _snapshot((3, 3), T0 + 3), BASELINES, T0 + 3)
    assert ask
    zombie = Proc(pid=50, ppid=1, state="Z", name="worker", start_ticks=9)
    check = cleanslate.confirming_sample(
        check, _snapshot((3, 3), T0 + 4, processes=(zombie,)), killed_members=[(50, 9)]
    )
    assert check.running
    assert "zombie" in check.note


def test_a_missing_confirming_sample_keeps_the_check_running_with_its_reason() -> None:
    check, _ = cleanslate.memory_sample(_started(), _snapshot((3, 3), T0 + 2), BASELINES, T0 + 2)
    check = cleanslate.confirming_sample(check, None, error="h: no reply to sample within 30.0 s")
    assert check.running
    assert check.note == "h: no reply to sample within 30.0 s"


def test_the_deadline_ends_it_not_clean_and_a_finished_check_stays_finished() -> None:
    check = cleanslate.tick(_started(), T0 + 60.0)
    assert check.running
    check = cleanslate.tick(check, T0 + 60.5)
    assert (check.clean, check.finished_s) == (False, T0 + 60.5)
    after, ask = cleanslate.memory_sample(check, _snapshot((3, 3), T0 + 61), BASELINES, T0 + 61)
    assert after is check
    assert not ask


def test_the_drain_curve_is_bounded_and_starts_at_the_kill() -> None:
    check = _started()
    for step in range(3 * cleanslate.DRAIN_POINTS_MAX):
        check, _ = cleanslate.memory_sample(
            check, _snapshot((40_000 - step, 3), T0 + step), BASELINES, T0 + step
        )
        if step == 100:
            check = cleanslate.kill_sent(check, T0 + step)
    assert len(check.drain) <= cleanslate.DRAIN_POINTS_MAX
    assert check.drain[0].at_s == T0  # the whole span, at a lower resolution
    since_kill = check.drain_since_kill()
    assert T0 + 90 <= since_kill[0].at_s <= T0 + 100  # the last sample kept before the signals went out
    assert since_kill[1].at_s > T0 + 100
    assert since_kill[-1].at_s == T0 + 3 * cleanslate.DRAIN_POINTS_MAX - 1


def test_the_receipt_says_how_long_the_driver_tore_down_after_the_last_holder() -> None:
    cs = cleanslate

    def sample(used_mib: int, holder: bool) -> HostSnapshot:
        processes = (GpuProcess(pid=7, used_mib=used_mib - 3),) if holder else ()
        gpu = Gpu(index=0, memory_used_mib=used_mib, processes=processes)
        return HostSnapshot(target="h", time=1.0, gpus=(gpu,))

    check = cs.start(0.0, 60.0)
    for now_s, used, holder in ((1.0, 40_000, True), (2.0, 40_000, False), (3.5, 20_000, False)):
        check, _ = cs.memory_sample(check, sample(used, holder), Baselines(), now_s)
    assert check.holders_gone_s == 2.0
    assert check.tearing_down_for_s(4.0) == 2.0
    check, ask = cs.memory_sample(check, sample(3, False), Baselines(), 5.0)
    assert ask
    assert check.teardown_s == 3.0
    assert check.tearing_down_for_s(6.0) is None
    # A holder listed again (a restarted server) ends the teardown: its memory is held, not being released.
    check, _ = cs.memory_sample(check, sample(30_000, True), Baselines(), 6.0)
    assert (check.holders_gone_s, check.teardown_s) == (None, None)


def _listening(snapshot: HostSnapshot, ports: tuple[int, ...]) -> HostSnapshot:
    return replace(snapshot, listening_ports=ports)


def test_a_port_of_the_killed_job_still_listening_holds_the_receipt_and_says_by_whom() -> None:
    watched = watched_ports([30000, 30001], killed_time=T0)
    check = cleanslate.kills_settled(cleanslate.kill_sent(_started(), T0 + 1, watched), still_under_way=False)
    assert [p.port for p in check.ports] == [30000, 30001]
    launcher = Proc(
        pid=4200,
        ppid=1,
        state="S",
        name="python3",
        start_ticks=1,
        create_time=T0 - 600,
        listen_ports=(30000,),
    )
    held = _listening(_snapshot((3, 3), T0 + 2, processes=(launcher,)), (22, 30000))
    check, ask = cleanslate.memory_sample(check, held, BASELINES, T0 + 2)
    assert ask  # memory alone decides when to look
    check = cleanslate.confirming_sample(check, _fresh(held))
    assert check.running
    assert check.note == check.ports_note == "port 30000 still listening (pid 4200 python3)"
    assert check.ports_free_s is None
    # A listener no listed process accounts for is still a listener.
    unknown = _listening(_snapshot((3, 3), T0 + 3), (30001,))
    check, _ = cleanslate.memory_sample(check, unknown, BASELINES, T0 + 3)
    check = cleanslate.confirming_sample(check, _fresh(unknown))
    assert check.note == "port 30001 still listening (by a process not listed)"
    free = _listening(_snapshot((3, 3), T0 + 4), (22,))
    check, _ = cleanslate.memory_sample(check, free, BASELINES, T0 + 4)
    assert check.ports_free_s == T0 + 4
    check = cleanslate.confirming_sample(check, _fresh(free))
    assert check.clean is True
    assert check.ports_note == ""


def test_the_restarted_server_and_a_host_that_cannot_list_ports_do_not_hold_the_receipt() -> None:
    watched = watched_ports([30000], killed_time=T0)
    restarted = Proc(
        pid=5000, ppid=1, state="S", name="python3", start_ticks=9, create_time=T0 + 5, listen_ports=(30000,)
    )
    snapshot = _listening(_snapshot((3, 3), T0 + 6, processes=(restarted,)), (30000,))
    assert cleanslate.busy_ports(snapshot, watched) == []
    assert cleanslate.ports_left(snapshot, watched) == ()
    blind = _snapshot((3, 3), T0 + 6)  # a collector that did not read the tables
    assert cleanslate.busy_ports(blind, watched) is None
    assert cleanslate.ports_left(blind, watched) == watched  # not seen free: still watched
    check = cleanslate.start(T0, 60.0, ports=watched)
    check, _ = cleanslate.memory_sample(check, blind, BASELINES, T0 + 6)
    check = cleanslate.confirming_sample(check, _fresh(blind))
    assert check.clean is True
    assert check.ports_free_s is None  # not known when


def test_a_clean_memory_sample_listed_with_its_memory_is_its_own_confirmation() -> None:
    check, ask = cleanslate.memory_sample(
        _started(), _snapshot((3, 3), T0 + 2, listed_s=T0 + 2), BASELINES, T0 + 2
    )
    assert not ask
    assert check.clean is True
    assert check.finished_s == T0 + 2


def test_a_sample_listed_with_its_memory_does_not_confirm_what_its_own_list_refutes() -> None:
    late = Proc(pid=77, ppid=1, state="S", name="late", start_ticks=1)
    listed = _snapshot((3, 3), T0 + 2, listed_s=T0 + 2, holders=(77,), processes=(late,))
    check, ask = cleanslate.memory_sample(_started(), listed, BASELINES, T0 + 2)
    assert not ask
    assert check.running
    assert "77" in check.note
    zombie = Proc(pid=88, ppid=1, state="Z", name="worker", start_ticks=5)
    killed = cleanslate.kills_settled(cleanslate.kill_sent(_started(), T0 + 1), still_under_way=False)
    with_zombie = _snapshot((3, 3), T0 + 3, listed_s=T0 + 3, processes=(zombie,))
    check, ask = cleanslate.memory_sample(killed, with_zombie, BASELINES, T0 + 3, killed_members=[(88, 5)])
    assert not ask
    assert check.running
    assert check.note == "a zombie of a killed job is still listed"
