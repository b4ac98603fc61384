"""Snapshots from many hosts reach the panels in one message per loop turn, and equal data repaints nothing.

The links here never deliver on their own: each test hands snapshots to ``Hosts.deliver`` (what a host's
poller does) or posts the ``Hosts.Sampled`` message itself, and lets the loop turn, so what is waiting at that
moment is known exactly.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from textual.content import Content
from textual.message import Message

from gputui.agent.protocol import MODE_LABELS, MODE_NVML, MODE_REDUCED, MODE_SMI
from gputui.core.link import HostLink
from gputui.core.model import HostSnapshot, replace
from gputui.core.verdict import Baselines, analyze
from gputui.transports.sim import SCHEDULER_PID_BASE, ManualClock, SimLink
from gputui.ui.app import GpuTuiApp
from gputui.ui.session.hosts import Hosts, HostState
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.endpoint_panel import EndpointPanel
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.host_bar import HostBar
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


def _count_sampled_messages(app: GpuTuiApp, monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    posted: list[Message] = []
    post = app.post_message

    def counting(message: Message) -> bool:
        if isinstance(message, Hosts.Sampled):
            posted.append(message)
        return post(message)

    monkeypatch.setattr(app, "post_message", counting)
    monkeypatch.setattr(app.hosts, "post", counting)  # what the pollers post through
    return posted


def _count_view_updates(app: GpuTuiApp, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every ``MonitorScreen.hosts_changed`` call the app makes, as the targets it names."""
    updates: list[list[str]] = []
    hosts_changed = app.monitor.hosts_changed

    def counting(changed: Any) -> None:
        updates.append([host.target for host, _ in changed])
        hosts_changed(changed)

    monkeypatch.setattr(app.monitor, "hosts_changed", counting)
    return updates


def _count_panel_redraws(app: GpuTuiApp, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every time the GPU panel is given a host's GPUs (once per redraw of the shown host's panels)."""
    redraws: list[int] = []
    panel = app.monitor.query_one(GpuPanel)
    show = panel.show

    def counting(*args: Any, **kwargs: Any) -> None:
        redraws.append(1)
        show(*args, **kwargs)

    monkeypatch.setattr(panel, "show", counting)
    return redraws


def _count_applied(app: GpuTuiApp, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, HostSnapshot]]:
    applied: list[tuple[str, HostSnapshot]] = []
    for host in app.hosts:
        apply = host.apply

        def counting(
            snapshot: HostSnapshot, now_s: float, _host: HostState = host, _apply: Any = apply
        ) -> Any:
            applied.append((_host.target, snapshot))
            return _apply(snapshot, now_s)

        monkeypatch.setattr(host, "apply", counting)
    return applied


async def test_every_waiting_host_is_applied_by_one_message_and_one_redraw(app, clock, monkeypatch):
    snapshots = {target: _sample(target, clock) for target in TARGETS}
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        posted = _count_sampled_messages(app, monkeypatch)
        applied = _count_applied(app, monkeypatch)
        updates = _count_view_updates(app, monkeypatch)
        redraws = _count_panel_redraws(app, monkeypatch)
        for target in TARGETS:
            app.hosts.deliver(target, snapshots[target])  # what each host's poller does
        assert len(posted) == 1  # posted when the inbox went from empty to non-empty, not once per host
        await pilot.pause()
        assert sorted(target for target, _ in applied) == sorted(TARGETS)
        assert all(app.hosts.get(t).snapshot is snapshots[t] for t in TARGETS)
        assert updates == [list(TARGETS)]  # one view update for the whole batch
        assert len(redraws) == 1  # the panels once (the shown host is among them)
        app.monitor.tick()  # the second's tick: the panels already say the host is live
        assert len(redraws) == 1
        assert len(app.hosts.inbox) == 0
        # The next delivery finds the inbox empty again and posts a new message.
        app.hosts.deliver(TARGETS[1], _sample(TARGETS[1], clock))
        assert len(posted) == 2
        await pilot.pause()
        assert len(applied) == len(TARGETS) + 1


async def test_a_batch_without_the_shown_host_leaves_the_panels_alone(app, clock, monkeypatch):
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        redraws = _count_panel_redraws(app, monkeypatch)
        for target in TARGETS[1:]:
            app.hosts.deliver(target, _sample(target, clock))
        await pilot.pause()
        assert all(app.hosts.get(t).snapshot is not None for t in TARGETS[1:])
        assert app.hosts[0].snapshot is None
        assert redraws == []
        await pilot.pause(0.4)  # the host bar catches up within its redraw interval
        bar = str(app.query_one(HostBar).render())
        assert "gpu-node-02 ● live" in bar
        assert "gpu-node-03 ● live" in bar


async def test_the_newest_snapshot_replaces_one_not_yet_shown(app, clock, monkeypatch):
    target = TARGETS[0]
    older = _sample(target, clock)
    clock.advance(1.0)
    newer = _sample(target, clock)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        posted = _count_sampled_messages(app, monkeypatch)
        applied = _count_applied(app, monkeypatch)
        app.hosts.deliver(target, older)
        app.hosts.deliver(target, newer)
        assert len(posted) == 1
        await pilot.pause()
        assert applied == [(target, newer)]
        assert app.hosts[0].snapshot is newer


async def test_a_forced_snapshot_stays_forced_when_a_newer_one_replaces_it(app, clock):
    first, second = TARGETS[0], TARGETS[1]
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        await pilot.press("p")
        forced = _sample(first, clock)
        clock.advance(1.0)
        newer = _sample(first, clock)
        plain = _sample(second, clock)
        app.hosts.deliver(first, forced, forced=True)  # a refresh the user asked for
        app.hosts.deliver(first, newer)  # a regular sample lands before the UI took the forced one
        app.hosts.deliver(second, plain)
        await pilot.pause()
        host, other = app.hosts.get(first), app.hosts.get(second)
        monitor = app.monitor
        assert host.snapshot is newer
        assert monitor.shown_snapshot(host) is newer  # shown despite the pause
        assert other.snapshot is plain
        assert monitor.shown_snapshot(other) is None  # the panels keep what they had when paused
        await pilot.press("p")
        await pilot.pause()
        assert monitor.shown_snapshot(other) is plain


async def test_the_shown_host_panels_follow_its_snapshots(app, clock):
    target = TARGETS[0]
    snapshot = _sample(target, clock)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app.post_message(Hosts.Sampled(target, snapshot))  # the message a poller posts
        await pilot.pause()
        procs = app.query_one(ProcessTable)
        assert procs.row_count > 0
        before = procs.get_cell(str(SCHEDULER_PID_BASE), "gpu").plain
        app.post_message(Hosts.Sampled(target, _with_gpu_memory(snapshot, SCHEDULER_PID_BASE, 0, 12_345)))
        await pilot.pause()
        after = procs.get_cell(str(SCHEDULER_PID_BASE), "gpu").plain
        assert after != before
        assert "0:12345" in after
        assert "/49152" in str(app.query_one(GpuPanel).render())


async def test_an_unchanged_snapshot_repaints_nothing_and_a_change_shows_at_once(app, clock, monkeypatch):
    target = TARGETS[0]
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app.post_message(Hosts.Sampled(target, _sample(target, clock)))
        await pilot.pause()
        procs = app.query_one(ProcessTable)
        assert procs.row_count > 0
        await pilot.pause(0.3)  # the host bar's deferred redraw has happened
        refreshed: dict[str, int] = {}
        widgets = {
            "procs": procs,
            "gpus": app.query_one(GpuPanel),
            "health": app.query_one(EndpointPanel),
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
        assert same is not app.hosts[0].snapshot
        app.post_message(Hosts.Sampled(target, same))
        await pilot.pause()
        assert app.hosts[0].snapshot is same
        assert refreshed == {}
        # A real change shows at once, and only the table and the GPU panel it concerns repaint.
        app.post_message(Hosts.Sampled(target, _with_gpu_memory(same, SCHEDULER_PID_BASE, 0, 12_345)))
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
        app.post_message(Hosts.Sampled(target, replace(_sample("gpu-node-01", clock), target=target)))
        await pilot.pause()
        title = app.query_one(GpuPanel).border_title
        assert title is not None
        assert "[b]node[/b]" in Content.from_markup(title).plain


async def test_the_gpu_title_says_how_the_host_is_read(clock):
    target = TARGETS[0]
    app = GpuTuiApp([target], QuietLink, clock=clock, read_only=True)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app.post_message(Hosts.Sampled(target, _sample(target, clock)))
        await pilot.pause()
        simulated = Content.from_markup(str(app.query_one(GpuPanel).border_title)).plain
        assert not any(label in simulated for label in MODE_LABELS.values())
        for mode, label in ((MODE_NVML, "NVML"), (MODE_SMI, "nvidia-smi"), (MODE_REDUCED, "reduced")):
            app.post_message(Hosts.Sampled(target, replace(_sample(target, clock), mode=mode)))
            await pilot.pause()
            title = Content.from_markup(str(app.query_one(GpuPanel).border_title)).plain
            assert f" · {label}" in title, title


async def test_many_deliveries_between_redraws_start_one_host_bar_timer(app, clock, monkeypatch):
    other = TARGETS[1]
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        timers: list[float] = []
        set_timer = app.monitor.set_timer

        def counting(delay: float, callback: Any = None, **kwargs: Any) -> Any:
            timers.append(delay)
            return set_timer(delay, callback, **kwargs)

        monkeypatch.setattr(app.monitor, "set_timer", counting)
        app.hosts.deliver(other, _sample(other, clock))
        await pilot.pause()
        assert len(timers) == 1
        app.monitor.tick()  # the once-a-second redraw, while the deferred one is still pending
        for _ in range(3):
            app.hosts.deliver(other, _sample(other, clock))
            await pilot.pause()
        assert len(timers) == 1  # the pending timer covers them: no second chain of redraws
        await pilot.pause(0.4)
        app.hosts.deliver(other, _sample(other, clock))
        await pilot.pause()
        assert len(timers) == 2  # and the next delivery after it schedules a new one


async def test_a_host_whose_data_went_stale_says_no_data_since_in_every_panel(app, clock):
    """Data once, then nothing: past the stale window the verdict, findings and health say "no data since
    HH:MM:SS", never the old verdict or "nothing stuck"; fresh data brings the panels back."""
    from gputui.ui.widgets.endpoint_panel import EndpointPanel
    from gputui.ui.widgets.findings_list import FindingsList

    target = TARGETS[0]
    snapshot = _sample(target, clock)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app.post_message(Hosts.Sampled(target, snapshot))
        await pilot.pause()
        line = app.query_one(CleanSlateLine)
        findings = app.query_one(FindingsList)
        assert str(line.render()).startswith("NOT CLEAN: ")
        assert findings.findings
        clock.advance(60.0)  # far past the stale window of a 1 s stream
        for _ in range(150):  # the app's once-a-second tick notices (a loaded machine: give it time)
            await pilot.pause(0.1)
            if "no data" in str(line.render()):
                break
        assert str(line.render()).startswith("cannot tell: no data since ")
        assert "stale" in str(line.render())
        assert str(findings.get_option_at_index(0).prompt).startswith("no data since ")
        assert findings.border_title == "Findings (–)"
        assert str(app.query_one(EndpointPanel).render()).startswith("no data since ")
        app.post_message(Hosts.Sampled(target, replace(snapshot, time=(snapshot.time or 0) + 60.0)))
        for _ in range(150):
            await pilot.pause(0.1)
            if "no data" not in str(line.render()):
                break
        assert str(line.render()).startswith("NOT CLEAN: ")
        assert findings.border_title == f"Findings ({len(findings.findings)})"
