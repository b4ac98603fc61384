"""What each process held on each GPU over a whole recording, or over everything a session has seen.

The per-GPU history (``model.history``) keeps ten minutes; a slow leak takes hours. Here every process that
held memory on a GPU has a series of (epoch seconds, MiB) over the whole span, kept bounded by coarsening:
when a series passes ``2 × POINTS_MAX`` points, neighbours are merged (each keeps the larger figure, so a
peak is never lost) and its step doubles. A process is named by its pid and start time; at most
``SERIES_MAX`` per GPU are kept (the one seen longest ago goes first).

Points come in time order: one older than a series' newest is ignored, so filling the series from a
recording and then replaying its samples over them adds nothing twice.
"""

from __future__ import annotations

from gputui.core.model import HostSnapshot

POINTS_MAX = 240
"""Points a series keeps at least (and at most twice this)."""
SERIES_MAX = 24
"""Processes kept per GPU."""


class MemorySeries:
    """One process's memory on one GPU over time.

    Attributes:
        pid: Its pid.
        name: What it is called (its process name; "" when it was not listed).
        points: (epoch seconds, MiB), oldest first.
        step_s: The shortest time between two points (doubles as the series coarsens).
    """

    __slots__ = ("name", "pid", "points", "step_s")

    def __init__(self, pid: int, name: str) -> None:
        self.pid = pid
        self.name = name
        self.points: list[tuple[float, int]] = []
        self.step_s = 0.0

    def add(self, at_s: float, mib: int) -> None:
        points = self.points
        if points and at_s < points[-1][0]:
            return
        if points and at_s - points[-1][0] < self.step_s:
            last_s, last_mib = points[-1]
            points[-1] = (last_s, max(last_mib, mib))
            return
        points.append((at_s, mib))
        if len(points) > 2 * POINTS_MAX:
            self.points = [
                (points[i][0], max(p[1] for p in points[i : i + 2])) for i in range(0, len(points), 2)
            ]
            self.step_s = max(self.step_s * 2, (self.points[-1][0] - self.points[0][0]) / POINTS_MAX)

    @property
    def peak_mib(self) -> int:
        return max((mib for _t, mib in self.points), default=0)

    @property
    def last_s(self) -> float:
        return self.points[-1][0] if self.points else 0.0


class ProcessMemory:
    """Every GPU's per-process memory series of one host."""

    def __init__(self) -> None:
        self._gpus: dict[int, dict[tuple[int, int | None], MemorySeries]] = {}

    def record(self, snapshot: HostSnapshot) -> None:
        """Add what each GPU's processes hold in ``snapshot`` (a sample without a time is skipped)."""
        at_s = snapshot.time
        if at_s is None:
            return
        procs = None
        for gpu in snapshot.gpus:
            for holder in gpu.processes:
                if holder.used_mib is None:
                    continue
                if procs is None:
                    procs = {p.pid: p for p in snapshot.processes}
                proc = procs.get(holder.pid)
                start = None if proc is None else proc.start_ticks
                name = "" if proc is None or proc.name is None else proc.name
                self.add(gpu.index, holder.pid, start, name, at_s, holder.used_mib)

    def add(self, gpu: int, pid: int, start_ticks: int | None, name: str, at_s: float, mib: int) -> None:
        """Process ``pid`` (started at ``start_ticks``) held ``mib`` on GPU ``gpu`` at ``at_s``."""
        series = self._gpus.setdefault(gpu, {})
        key = (pid, start_ticks)
        one = series.get(key)
        if one is None:
            if len(series) >= SERIES_MAX:
                del series[min(series, key=lambda k: series[k].last_s)]
            one = series[key] = MemorySeries(pid, name)
        one.add(at_s, mib)

    def series(self, gpu: int) -> list[MemorySeries]:
        """GPU ``gpu``'s processes, the largest peak first."""
        return sorted(self._gpus.get(gpu, {}).values(), key=lambda s: (-s.peak_mib, s.pid))
