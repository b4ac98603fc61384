"""A replay: the recording, its clock, and what the replay keys do to them.

The hosts are ``ReplayLink``s on the clock, so the monitor, the GPU view and the findings show the recording
through the same code as a live host. Moving the clock (a step, a moment, a speed) wakes the links; after a
move the app asks every host for the sample at the new moment (a forced sample is shown even while the
display is paused) and gives each host the GPU history it had then.
"""

from __future__ import annotations

import bisect

from gputui.core.recording import Moment, Recording
from gputui.transports.replay.clock import ReplayClock

STEP_SLACK_S = 1e-6
"""A step or a moment lands just after its time: the sample recorded then is the one shown."""


class ReplayControl:
    """The recording being replayed and its clock.

    Args:
        recording: What is replayed.
        clock: Its time (default: from its first sample, at real speed).
    """

    def __init__(self, recording: Recording, clock: ReplayClock | None = None) -> None:
        self.recording = recording
        self.clock = clock or ReplayClock(recording.start_s, recording.end_s)
        self._times = sorted({t for target in recording.targets for t in recording.times(target)})
        """Every moment some host was sampled, once each."""
        self._moment_times = [m.t for m in recording.moments]

    def step(self, direction: int) -> float:
        """Pause and go to the next sample of any host (``direction`` < 0: the one before); returns when."""
        now = self.clock.now()
        times = self._times
        if direction >= 0:
            index = bisect.bisect_right(times, now + STEP_SLACK_S)
            at_s = times[min(index, len(times) - 1)]
        else:
            index = bisect.bisect_left(times, now - STEP_SLACK_S) - 1
            at_s = times[max(index, 0)]
        self.clock.pause()
        self.clock.seek(at_s)
        return at_s

    def moment(self, direction: int) -> Moment | None:
        """Go to the next moment of the timeline (``direction`` < 0: the one before); None: there is none."""
        now = self.clock.now()
        times = self._moment_times
        if direction >= 0:
            index = bisect.bisect_right(times, now + STEP_SLACK_S)
            if index >= len(times):
                return None
        else:
            index = bisect.bisect_left(times, now - STEP_SLACK_S) - 1
            if index < 0:
                return None
        moment = self.recording.moments[index]
        self.clock.seek(moment.t + STEP_SLACK_S)
        return moment

    def seek(self, at_s: float) -> None:
        self.clock.seek(at_s)

    def speed(self, direction: int) -> float:
        """The next speed up (``direction`` < 0: down); returns it."""
        return self.clock.faster(1 if direction >= 0 else -1)
