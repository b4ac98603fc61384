"""Record a session in the app (``w``), kill from it, then replay the file in the app: the same samples, a
time bar, seek and step keys, and every key that would signal or ask a host refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from gputui.core.link import LinkError
from gputui.core.recording import EVENT_AUDIT, EVENT_KILL, Recording
from gputui.core.recording.reader import MOMENT_KILL
from gputui.transports.replay import REPLAY_REFUSAL, ReplayLink
from gputui.transports.sim import ManualClock
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.widgets.process_table import ProcessTable
from gputui.ui.widgets.time_bar import TimeBar

from .conftest import wait_for

WIDE = (160, 50)
TARGET = "gpu-node-07"


def _recordings(state: Path) -> list[Path]:
    folder = state / "gputui" / "recordings"
    return sorted(folder.glob("*.gtrec")) if folder.exists() else []


async def _record_a_kill(pilot: Any, app: GpuTuiApp, clock: ManualClock) -> list[Any]:
    """Start recording with ``w``, kill every GPU job with ``X`` and let the host drain a while, stop with
    ``w``; returns every sample handed to the writer, in order."""
    await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
    handed: list[Any] = []
    recorder = app.recorder
    original = recorder.sample

    def keep(target: str, snapshot: Any) -> None:
        if recorder.active:
            handed.append((target, snapshot))
        original(target, snapshot)

    recorder.sample = keep  # type: ignore[method-assign]
    await pilot.press("w")
    await wait_for(pilot, lambda: app.recorder.active, "the recording")
    writer = app.recorder.writer
    assert writer is not None
    for _ in range(6):
        clock.advance(1.0)
        await pilot.pause(0.1)
    await pilot.press("X", "y")
    await wait_for(pilot, lambda: not app.hosts[0].kills and app.hosts[0].killed_jobs, "the kill to end")
    for _ in range(8):
        clock.advance(1.0)
        await pilot.pause(0.1)
    await wait_for(pilot, lambda: len(handed) > 10, "samples")
    await pilot.press("w")
    await wait_for(pilot, lambda: not app.recorder.active, "the recording to stop")
    await wait_for(pilot, lambda: any("recording stopped" in n[2] for n in app.notices), "the stop line")
    writer._thread is None or writer._thread.join(10)  # noqa: B015 - the file is finished on its thread
    return handed


async def test_a_recorded_session_replays_sample_for_sample(
    make_app, clock: ManualClock, tmp_path: Path
) -> None:
    app = make_app(targets=(TARGET,))
    async with app.run_test(size=WIDE) as pilot:
        handed = await _record_a_kill(pilot, app, clock)
    (path,) = _recordings(tmp_path / "state")
    assert os.stat(path).st_mode & 0o077 == 0  # command lines: the owner's alone
    recording = Recording.load(path)
    assert recording.closed
    assert recording.damage is None
    # Every sample round-trips exactly, as the app had it (findings, verdict and server states included).
    assert recording.samples(TARGET) == [snapshot for _target, snapshot in handed]
    kinds = {event.kind for event in recording.events}
    assert EVENT_KILL in kinds
    assert EVENT_AUDIT in kinds  # the kill's audit lines, as written to the log
    assert any(m.kind == MOMENT_KILL for m in recording.moments)


async def test_replay_seeks_steps_and_refuses_what_would_signal(make_app, clock: ManualClock, tmp_path: Path):
    recorder = make_app(targets=(TARGET,))
    async with recorder.run_test(size=WIDE) as pilot:
        await _record_a_kill(pilot, recorder, clock)
    (path,) = _recordings(tmp_path / "state")
    recording = Recording.load(path)

    from gputui.commands.replay import build_replay_app

    app = build_replay_app(recording, speed=1.0, notify_timeout_s=60.0)
    async with app.run_test(size=WIDE) as pilot:
        host = app.hosts[0]
        await wait_for(pilot, lambda: host.snapshot is not None, "the first recorded sample")
        await wait_for(pilot, lambda: bool(app.query(TimeBar)), "the time bar")
        assert app.replay is not None
        clock_ = app.replay.clock
        assert "REPLAY" in str(app.query_one("#gpus").border_title)

        # p pauses the replay with the display; ] goes to the next moment: the kill, in the end; the sample
        # shown is the one recorded then.
        await pilot.press("p")
        assert not clock_.playing
        for _ in range(len(recording.moments)):
            await pilot.press("right_square_bracket")
            await pilot.pause(0.05)
            now = clock_.now()
            if any(m.kind == MOMENT_KILL and m.t <= now <= m.t + 1e-3 for m in recording.moments):
                break
        else:
            raise AssertionError("no kill moment reached with ]")
        expected = recording.snapshot_at(TARGET, clock_.now())
        await wait_for(pilot, lambda: host.snapshot == expected, "the sample at the kill")
        assert "kill" in str(app.query_one(TimeBar).render())

        # > pauses and steps one sample on; < steps back: each shows exactly the recorded sample.
        at = clock_.now()
        await pilot.press("greater_than_sign")
        await wait_for(pilot, lambda: clock_.now() > at, "a step")
        assert not clock_.playing
        assert app.monitor.paused
        stepped = recording.snapshot_at(TARGET, clock_.now())
        await wait_for(pilot, lambda: host.snapshot == stepped, "the stepped sample")
        await pilot.press("less_than_sign")
        await wait_for(pilot, lambda: clock_.now() <= at + 1e-3, "a step back")
        await wait_for(pilot, lambda: host.snapshot == recording.snapshot_at(TARGET, clock_.now()), "back")

        # + and - change the speed.
        await pilot.press("plus", "plus")
        assert clock_.speed == 4.0
        await pilot.press("minus")
        assert clock_.speed == 2.0

        # Every key that would signal a host answers in one line; nothing is asked of the link.
        app.query_one(ProcessTable).focus()
        said = len(app.notices)
        for key in ("k", "K", "T", "X", "R"):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmKillScreen)
        refusals = [n for n in list(app.notices)[said:] if n[2] == REPLAY_REFUSAL]
        assert len(refusals) == 5
        for key in ("P", "c", "w"):
            said = len(app.notices)
            await pilot.press(key)
            await pilot.pause()
            assert list(app.notices)[said:][-1][2] == (
                f"replay: {key} asks the live host; a recording cannot be asked"
            )
        assert host.check is None
        assert not host.probing
        assert not app.recorder.active
        link = host.link
        assert isinstance(link, ReplayLink)
        for command in ({"cmd": "kill", "pids": [1]}, {"cmd": "reset"}, {"cmd": "probe"}):
            with pytest.raises(LinkError, match=REPLAY_REFUSAL):
                link.request(command, 1.0)

        # The GPU view shows each process's memory over the whole recording (GPU 1: TP0, on GPU 0, is a
        # true zombie whose memory went back before the recording began).
        await pilot.press("g", "down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        memory = str(app.screen.query_one("#gpu-process-memory", Static).render())
        assert "Memory by process over the recording" in memory
        assert "MiB over" in memory
        assert "sglang::schedul" in memory


async def test_the_replay_keys_say_why_they_do_nothing_live(make_app) -> None:
    app = make_app(targets=(TARGET,))
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.hosts[0].snapshot is not None, "a sample")
        said = len(app.notices)
        await pilot.press("greater_than_sign")
        await pilot.pause()
        assert list(app.notices)[said:][-1][2] == ">: only while replaying a recording (gputui replay FILE)"
        assert not app.query(TimeBar)


async def test_record_from_the_start_and_a_file_that_exists(
    make_app, clock: ManualClock, tmp_path: Path
) -> None:
    """``--record FILE``: recording from the first sample, finished when the app quits; a FILE that exists
    is refused in one line and the app runs on."""
    path = tmp_path / "session.gtrec"
    app = make_app(targets=(TARGET,), record=str(path))
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.recorder.active, "the recording")
        writer = app.recorder.writer
        for _ in range(5):
            clock.advance(1.0)
            await pilot.pause(0.1)
        await wait_for(pilot, lambda: writer is not None and writer.samples >= 3, "samples written")
        await pilot.press("q")
    recording = Recording.load(path)
    assert recording.closed
    assert recording.count(TARGET) >= 3

    again = make_app(targets=(TARGET,), record=str(path))
    async with again.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: any(n[1] == "recording" for n in again.notices), "the refusal")
        assert again.notices[-1][2] == f"{path}: exists already (name a new file)"
        assert not again.recorder.active
