"""Recorded hosts for ``gputui replay``: a recording's samples served on a replay clock.

``ReplayLink`` speaks the ``HostLink`` interface like any link, so the TUI runs unchanged on a recording: each
host's poller gets the sample the recording holds at the clock's time; asked for a sample now it answers the
same; every command that would change a host (kill, reset, probe, calibrate…) is refused with
``REPLAY_REFUSAL``. ``ReplayClock`` is the time of the recording being shown: playing at a speed, paused,
stepped or moved to a moment. This package must not import textual or rich.
"""

from gputui.transports.replay.clock import SPEEDS, ReplayClock
from gputui.transports.replay.control import ReplayControl
from gputui.transports.replay.link import REPLAY_REFUSAL, ReplayLink

__all__ = ["REPLAY_REFUSAL", "SPEEDS", "ReplayClock", "ReplayControl", "ReplayLink"]
