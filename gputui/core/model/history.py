"""The last minutes of every GPU of a host: memory, utilisation, power and temperature, one point a second.

Samples come as often as the stream is configured (every 0.05 s to every few seconds); the history keeps at
most one point per ``STEP_S`` (a newer sample in the same second replaces the point) and drops points older
than ``WINDOW_S``, so it holds at most ``WINDOW_S / STEP_S`` points per GPU whatever the interval. A missing
figure is None, never a fake zero.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from gputui.core.model.record import Record
from gputui.core.model.snapshot import HostSnapshot

WINDOW_S = 600.0
"""How far back the history goes: ten minutes."""
STEP_S = 1.0
"""One point per this many seconds."""
POINTS_MAX = int(WINDOW_S / STEP_S)


class GpuPoint(Record):
    """One GPU at one moment (host epoch seconds); None where the driver did not say."""

    at_s: float
    memory_used_mib: int | None
    utilization_pct: int | None
    power_w: float | None
    temperature_c: int | None


class GpuHistory:
    """Points per GPU index, oldest first, bounded by ``POINTS_MAX`` and ``WINDOW_S``."""

    def __init__(self) -> None:
        self._points: dict[int, deque[GpuPoint]] = {}

    def record(self, snapshot: HostSnapshot) -> None:
        """Add this snapshot's figures (a snapshot without a time is not placed on the time axis: skipped)."""
        at_s = snapshot.time
        if at_s is None:
            return
        for gpu in snapshot.gpus:
            if gpu.error is not None:
                continue
            point = GpuPoint(at_s, gpu.memory_used_mib, gpu.utilization_pct, gpu.power_w, gpu.temperature_c)
            points = self._points.setdefault(gpu.index, deque(maxlen=POINTS_MAX))
            if points and int(points[-1].at_s // STEP_S) == int(at_s // STEP_S):
                points[-1] = point
            else:
                points.append(point)
            while points and at_s - points[0].at_s > WINDOW_S:
                points.popleft()

    def points(self, index: int) -> tuple[GpuPoint, ...]:
        """GPU ``index``'s points, oldest first."""
        return tuple(self._points.get(index, ()))

    def memory_mib(self, index: int) -> list[int]:
        """GPU ``index``'s memory figures, oldest first (points without one left out)."""
        return [p.memory_used_mib for p in self._points.get(index, ()) if p.memory_used_mib is not None]

    def indexes(self) -> Sequence[int]:
        return sorted(self._points)
