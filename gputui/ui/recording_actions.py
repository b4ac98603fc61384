"""The app's keys that record and replay, and what it hands its recording: mixed into ``GpuTuiApp``.

Recording: ``--record FILE`` starts one with the app, ``w`` starts and stops one; the app hands every
sample it applies, every notification, kill and audit line to ``SessionRecorder``. Replaying
(``gputui replay``): the hosts are a recording's; the monitor's pause (``p``) pauses the replay's clock too,
``>``/``<`` step, ``]``/``[`` go to the next or previous moment, ``+``/``-`` change the speed, and the time
bar shows where the replay stands. Every key that would signal or ask a host is refused by the key table's
one rule (``keymap.why_off``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputui.core.recording import ProcessMemory, RecordingError
from gputui.transports.replay import ReplayControl
from gputui.ui import keymap
from gputui.ui.session.recorder import SessionRecorder
from gputui.ui.widgets.time_bar import TimeBar

if TYPE_CHECKING:
    from gputui.ui.screens.monitor import MonitorScreen
    from gputui.ui.session.context import Settings
    from gputui.ui.session.hosts import Hosts

_RECORD_KEY = next(key for key in keymap.KEYS if key.action == "record")
_REPLAY_KEYS = {key.action: key for key in keymap.keys_of(keymap.REPLAY) if key.action}
"""Each replay key by its whole action (``>`` is ``replay_step(1)``, ``<`` is ``replay_step(-1)``)."""


class RecordingActions:
    """Recording and replay for the App (it provides ``say``, ``hosts``, ``monitor`` and ``settings``)."""

    recorder: SessionRecorder
    replay: ReplayControl | None
    hosts: Hosts
    monitor: MonitorScreen
    settings: Settings
    say: Any
    watch: Any
    call_after_refresh: Any

    # -- set up ----------------------------------------------------------------------------------------

    def start_recording_or_replay(self, record_path: str | None) -> None:
        """On mount: start the recording asked for with ``--record``, or set the replay up."""
        replay = self.replay
        if replay is not None:
            for host in self.hosts:
                host.process_memory = replay.recording.memory.get(host.target) or ProcessMemory()
            self.watch(self.monitor, "paused", self._replay_paused, init=False)
            self.call_after_refresh(self._mount_time_bar)
            if replay.recording.damage:
                self.say(replay.recording.damage, severity="warning", title="replay")
        elif record_path is not None:
            self._start_recording(record_path)

    def _mount_time_bar(self) -> None:
        replay = self.replay
        if replay is not None:
            body = self.monitor.query_one("#body")
            body.mount(TimeBar(replay, id="timebar"), before=self.monitor.query_one("#clean"))

    def _replay_paused(self, paused: bool) -> None:
        if self.replay is not None:
            if paused:
                self.replay.clock.pause()
            else:
                self.replay.clock.play()

    # -- recording -------------------------------------------------------------------------------------

    def _start_recording(self, path: str | None) -> None:
        try:
            self.say(self.recorder.start(path), title="recording")
        except RecordingError as exc:
            self.say(str(exc), severity="error", title="recording")

    def action_record(self) -> None:
        """Start a recording to a new file in the recordings folder, or stop the one that runs."""
        why = keymap.why_off(
            _RECORD_KEY, read_only=False, hosts=len(self.hosts), fleet=False, replay=self.settings.replay
        )
        if why is not None:
            self.say(why, severity="warning")
            return
        if self.recorder.active:
            self.say(self.recorder.stop() or "", title="recording")
        else:
            self._start_recording(None)

    def recording_problem(self) -> None:
        """Say once that the recording stopped on its own (its size cap, a write that failed)."""
        problem = self.recorder.problem()
        if problem is not None:
            self.say(problem, severity="error", title="recording")

    # -- replay ----------------------------------------------------------------------------------------

    def _replaying(self, action: str, direction: int) -> ReplayControl | None:
        """The replay, or None after saying why the key does nothing."""
        key = _REPLAY_KEYS[f"{action}({1 if direction >= 0 else -1})"]
        why = keymap.why_off(
            key, read_only=False, hosts=len(self.hosts), fleet=False, replay=self.replay is not None
        )
        if why is not None:
            self.say(why, severity="warning")
        return self.replay

    def _moved(self, replay: ReplayControl) -> None:
        """After the clock moved: each host's GPU history as it was then, and its sample now (shown even
        while the display is paused)."""
        now = replay.clock.now()
        for host in self.hosts:
            host.history = replay.recording.history_at(host.target, now)
            self.hosts.sample_now(host)

    def action_replay_step(self, direction: int = 1) -> None:
        """Pause, then step to the next sample of any host (``direction`` -1: the one before)."""
        replay = self._replaying("replay_step", direction)
        if replay is None:
            return
        self.monitor.paused = True
        replay.step(direction)
        self._moved(replay)

    def action_replay_moment(self, direction: int = 1) -> None:
        """Go to the next moment of the timeline (``direction`` -1: the one before)."""
        replay = self._replaying("replay_moment", direction)
        if replay is None:
            return
        moment = replay.moment(direction)
        if moment is None:
            self.say(f"no moment {'after' if direction >= 0 else 'before'} this one", title="replay")
            return
        self._moved(replay)

    def action_replay_speed(self, direction: int = 1) -> None:
        """Replay faster (``direction`` -1: slower); the time bar shows the speed."""
        replay = self._replaying("replay_speed", direction)
        if replay is not None:
            replay.speed(direction)
