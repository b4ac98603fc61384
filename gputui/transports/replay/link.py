"""``ReplayLink``: one host of a recording behind the ``HostLink`` interface, on a ``ReplayClock``."""

from __future__ import annotations

import threading
import time

from gputui.agent import protocol
from gputui.core.link import HostLink, LinkError
from gputui.core.model import HostSnapshot
from gputui.core.recording import Recording
from gputui.transports.replay.clock import ReplayClock

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REPLAY_REFUSAL = "replay: nothing to signal"
"""What every command that would change a host answers in a replay, and every key that would send one."""
POLL_CAP_S = 0.5
"""Longest single wait on the clock (a paused clock that is moved wakes the wait itself)."""


class ReplayLink(HostLink):
    """Host ``target`` of ``recording``, at the time ``clock`` says.

    The samples are the recorded ones, already judged (findings, verdict, server states as they were); the
    app shows them as they are (``Hosts(judged=True)``).
    """

    def __init__(self, target: str, recording: Recording, clock: ReplayClock) -> None:
        self.target = target
        self._recording = recording
        self._clock = clock
        self._closed = threading.Event()
        self._opened = False
        self._delivered: tuple[int, int] | None = None
        """(sample index, clock generation) of the last sample handed out."""

    def open(self) -> None:
        if self._closed.is_set():
            raise LinkError(f"{self.target}: link closed")
        if not self._recording.count(self.target):
            raise LinkError(f"{self.target}: the recording holds no sample of this host")
        self._opened = True

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        if not self._opened:
            raise LinkError(f"{self.target}: link not open")
        deadline = time.monotonic() + timeout_s
        times = self._recording.times(self.target)
        while True:
            if self._closed.is_set():
                raise LinkError(f"{self.target}: link closed")
            clock = self._clock
            generation = clock.generation
            index = self._recording.index_at(self.target, clock.now())
            if index is not None and (index, generation) != self._delivered:
                self._delivered = (index, generation)  # a new sample, or the clock moved: shown again
                return self._recording.snapshot(self.target, index)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            following = (index + 1) if index is not None else 0
            until = clock.real_seconds_until(times[following]) if following < len(times) else None
            clock.wait(min(left, POLL_CAP_S, until if until is not None else POLL_CAP_S), generation)

    def current(self) -> HostSnapshot | None:
        """The sample the recording holds at the clock's time now."""
        return self._recording.snapshot_at(self.target, self._clock.now())

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._closed.is_set():
            raise LinkError(f"{self.target}: link closed")
        name = command.get("cmd")
        if name == protocol.CMD_SAMPLE:
            snapshot = self.current()
            if snapshot is None:
                raise LinkError(f"{self.target}: no sample recorded yet at this moment")
            return {"snapshot": snapshot.to_dict()}
        if name == protocol.CMD_CONFIGURE:
            return {}  # the recording's own pace is what it has
        if name == protocol.CMD_PROCESS:
            return self._process(command)
        if name == protocol.CMD_HEALTH:
            return {"config": {}, "samples": []}
        if name == protocol.CMD_QUIT:
            return {}
        raise LinkError(f"{self.target}: {REPLAY_REFUSAL}")

    def _process(self, command: dict[str, Any]) -> dict[str, Any]:
        """A process's command line as recorded (the collector cut it on the wire as it did then)."""
        snapshot = self.current()
        proc = None if snapshot is None else snapshot.process(int(command.get("pid") or 0))
        if proc is None or proc.start_ticks != command.get("start_ticks"):
            raise LinkError(f"{self.target}: pid {command.get('pid')} is not in the recording at this moment")
        return {"pid": proc.pid, "cmdline": list(proc.cmdline), "cmdline_truncated": proc.cmdline_truncated}

    def close(self) -> None:
        self._closed.set()
        self._clock.wake()
