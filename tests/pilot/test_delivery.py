"""Snapshots from many hosts reach the panels in one message per loop turn, and equal data repaints nothing.

The links here never deliver on their own: each test hands snapshots to ``GpuTuiApp._deliver`` (what a poll
worker does) and lets the loop turn, so what is waiting at that moment is known exactly.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest
from textual.content import Content
from textual.message import Message

from gputui.core.analysis import Baselines, analyze
from gputui.core.model import HostSnapshot
from gputui.transports.base import HostLink
from gputui.transports.sim import SCHEDULER_PID_BASE, ManualClock, SimLink
from gputui.ui.app import GpuTuiApp, HostState
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.health_panel import HealthPanel
from gputui.ui.widgets.process_table import ProcessTable

WIDE = (160, 50)
TARGETS = ("gpu-node-01", "gpu-node-02", "gpu-node-03")


class QuietLink(HostLink):
    """Connects and never delivers: the test hands the app its snapshots."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._closed = threading.Event()

    def open(self) -> None:
        return None

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        self._closed.wait(timeout_s)
        return None

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self._closed.set()


def _sample(target: str, clock: ManualClock) -> HostSnapshot:
    """An analysed snapshot of a simulated host, as a poll worker hands it over."""
    link = SimLink(target, clock=clock)
    link.open()
    snapshot = link.next_snapshot(1.0)
    assert snapshot is not None
    return analyze(snapshot, Baselines(), now=snapshot.time)


def _with_gpu_memory(snapshot: HostSnapshot, pid: int, gpu: int, used_mib: int) -> HostSnapshot:
    """``snapshot`` with process ``pid`` holding ``used_mib`` on ``gpu`` (the GPU's figures to match)."""
    proc = snapshot.process(pid)
    assert proc is not None
    delta_mib = used_mib - proc.gpu_memory_mib.get(gpu, 0)
    processes = tuple(
        replace(p, gpu_memory_mib={**p.gpu_memory_mib, gpu: used_mib}) if p.pid == pid else p
        for p in snapshot.processes
    )
    gpus = tuple(
        replace(
            g,
            memory_used_mib=(g.memory_used_mib or 0) + delta_mib,
            processes=tuple(replace(gp, used_mib=used_mib) if gp.pid == pid else gp for gp in g.processes),
        )
        if g.index == gpu
        else g
        for g in snapshot.gpus
    )
    return analyze(replace(snapshot, processes=processes, gpus=gpus), Baselines(), now=snapshot.time)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(clock: ManualClock) -> GpuTuiApp:
    return GpuTuiApp(list(TARGETS), QuietLink, clock=clock, read_only=True, notify_timeout_s=60.0)


def _count_ready_messages(app: GpuTuiApp, monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    posted: list[Message] = []
    post = app.post_message

    def counting(message: Message) -> bool:
        if isinstance(message, GpuTuiApp.HostSnapshotReady):
            posted.append(message)
        return post(message)

    monkeypatch.setattr(app, "post_message", counting)
    return posted


def _count_redraws(app: GpuTuiApp, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every redraw of the shown host's panels, as its ``hosts_now`` argument."""
    redraws: list[bool] = []
    show_active = app._show_active

    def counting(hosts_now: bool = True) -> None:
        redraws.append(hosts_now)
        show_active(hosts_now)

    monkeypatch.setattr(app, "_show_active", counting)
    return redraws


def _count_applied(app: GpuTuiApp, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, HostSnapshot]]:
    applied: list[tuple[str, HostSnapshot]] = []
    apply = app._apply_snapshot

    def counting(host: HostState, snapshot: HostSnapshot) -> None:
        applied.append((host.target, snapshot))
        apply(host, snapshot)

    monkeypatch.setattr(app, "_apply_snapshot", counting)
    return applied


async def test_every_waiting_host_is_applied_by_one_message_and_one_redraw(app, clock, monkeypatch):
    snapshots = {target: _sample(target, clock) for target in TARGETS}
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        posted = _count_ready_messages(app, monkeypatch)
        applied = _count_applied(app, monkeypatch)
        redraws = _count_redraws(app, monkeypatch)
        for target in TARGETS:
            app._deliver(target, snapshots[target])
        assert len(posted) == 1  # posted when the inbox went from empty to non-empty, not once per host
        await pilot.pause()
        assert sorted(target for target, _ in applied) == sorted(TARGETS)
        assert all(app._host(t).snapshot is snapshots[t] for t in TARGETS)
        assert redraws == [False]  # the panels once for the whole batch (the shown host is among them)
        assert app._inbox == {}
        # The next delivery finds the inbox empty again and posts a new message.
        app._deliver(TARGETS[1], _sample(TARGETS[1], clock))
        assert len(posted) == 2
        await pilot.pause()
        assert len(applied) == len(TARGETS) + 1


async def test_a_batch_without_the_shown_host_leaves_the_panels_alone(app, clock, monkeypatch):
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        redraws = _count_redraws(app, monkeypatch)
        for target in TARGETS[1:]:
            app._deliver(target, _sample(target, clock))
        await pilot.pause()
        assert all(app._host(t).snapshot is not None for t in TARGETS[1:])
        assert app.active.snapshot is None
        assert redraws == []
        await pilot.pause(0.4)  # the host bar catches up within its redraw interval
        assert app._hosts_dirty is False


async def test_the_newest_snapshot_replaces_one_not_yet_shown(app, clock, monkeypatch):
    target = TARGETS[0]
    older = _sample(target, clock)
    clock.advance(1.0)
    newer = _sample(target, clock)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        posted = _count_ready_messages(app, monkeypatch)
        applied = _count_applied(app, monkeypatch)
        app._deliver(target, older)
        app._deliver(target, newer)
        assert len(posted) == 1
        await pilot.pause()
        assert applied == [(target, newer)]
        assert app.active.snapshot is newer


async def test_a_forced_snapshot_stays_forced_when_a_newer_one_replaces_it(app, clock, monkeypatch):
    first, second = TARGETS[0], TARGETS[1]
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app.action_pause()
        forced = _sample(first, clock)
        clock.advance(1.0)
        newer = _sample(first, clock)
        plain = _sample(second, clock)
        app._deliver(first, forced, forced=True)  # a refresh the user asked for
        app._deliver(first, newer)  # a regular sample lands before the UI took the forced one
        app._deliver(second, plain)
        await pilot.pause()
        host, other = app._host(first), app._host(second)
        assert host.snapshot is newer  # shown despite the pause
        assert host.pending is None
        assert other.snapshot is None  # kept for when the pause ends
        assert other.pending is plain
        app.action_pause()
        await pilot.pause()
        assert other.snapshot is plain
        assert other.pending is None


async def test_the_shown_host_panels_follow_its_snapshots(app, clock):
    target = TARGETS[0]
    snapshot = _sample(target, clock)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app._deliver(target, snapshot)
        await pilot.pause()
        procs = app.query_one(ProcessTable)
        assert procs.row_count > 0
        before = procs.get_cell(str(SCHEDULER_PID_BASE), "gpu").plain
        app._deliver(target, _with_gpu_memory(snapshot, SCHEDULER_PID_BASE, 0, 12_345))
        await pilot.pause()
        after = procs.get_cell(str(SCHEDULER_PID_BASE), "gpu").plain
        assert after != before
        assert "0:12345" in after
        assert "/49152" in str(app.query_one(GpuPanel).render())


async def test_an_unchanged_snapshot_repaints_nothing_and_a_change_shows_at_once(app, clock, monkeypatch):
    target = TARGETS[0]
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app._deliver(target, _sample(target, clock))
        await pilot.pause()
        procs = app.query_one(ProcessTable)
        assert procs.row_count > 0
        await pilot.pause(0.3)  # the host bar's deferred redraw has happened
        refreshed: dict[str, int] = {}
        widgets = {
            "procs": procs,
            "gpus": app.query_one(GpuPanel),
            "health": app.query_one(HealthPanel),
            "findings": app.query_one(FindingsList),
            "clean": app.query_one(CleanSlateLine),
        }
        for name, widget in widgets.items():
            refresh = widget.refresh

            def counting(*args: Any, _name: str = name, _refresh: Any = refresh, **kwargs: Any) -> Any:
                refreshed[_name] = refreshed.get(_name, 0) + 1
                return _refresh(*args, **kwargs)

            monkeypatch.setattr(widget, "refresh", counting)
        # The same host state again, in new objects (the frozen clock: the same sample time too).
        same = _sample(target, clock)
        assert same is not app.active.snapshot
        app._deliver(target, same)
        await pilot.pause()
        assert app.active.snapshot is same
        assert refreshed == {}
        # A real change shows at once, and only the table and the GPU panel it concerns repaint.
        app._deliver(target, _with_gpu_memory(same, SCHEDULER_PID_BASE, 0, 12_345))
        await pilot.pause()
        assert "0:12345" in procs.get_cell(str(SCHEDULER_PID_BASE), "gpu").plain
        assert refreshed.get("procs", 0) >= 1
        assert refreshed.get("gpus", 0) >= 1
        assert "health" not in refreshed


async def test_titles_are_plain_text_not_markup(clock):
    target = "[b]node[/b]"
    app = GpuTuiApp([target], QuietLink, clock=clock, read_only=True)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app._deliver(target, replace(_sample("gpu-node-01", clock), target=target))
        await pilot.pause()
        title = app.query_one(GpuPanel).border_title
        assert title is not None
        assert "[b]node[/b]" in Content.from_markup(title).plain


async def test_a_redraw_in_between_does_not_start_another_host_bar_timer(app, clock, monkeypatch):
    other = TARGETS[1]
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        timers: list[object] = []
        set_timer = app.set_timer

        def counting(delay: float, callback: Any = None, **kwargs: Any) -> Any:
            if callback == app._flush_hosts:
                timers.append(callback)
            return set_timer(delay, callback, **kwargs)

        monkeypatch.setattr(app, "set_timer", counting)
        app._deliver(other, _sample(other, clock))
        await pilot.pause()
        assert len(timers) == 1
        app._tick()  # the once-a-second redraw, while the deferred one is still pending
        assert app._hosts_dirty is False
        app._deliver(other, _sample(other, clock))
        await pilot.pause()
        assert len(timers) == 1  # the pending timer covers it: no second chain of redraws
        assert app._hosts_dirty is True
        await pilot.pause(0.4)
        assert app._hosts_dirty is False  # the pending timer drew it
        app._deliver(other, _sample(other, clock))
        await pilot.pause()
        assert len(timers) == 2  # and the next delivery schedules a new one
