"""The time of a recording being replayed: where it stands, at what speed, and whether it runs."""

from __future__ import annotations

import threading
import time

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
"""The speeds a replay steps through (``+`` and ``-``): a quarter of real time to an hour in 14 s."""


class ReplayClock:
    """The recording's epoch seconds now, moving between ``start_s`` and ``end_s``.

    Thread-safe: the hosts' pollers wait on it (``wait``), the UI moves it. Every move (seek, step, play,
    pause, speed) bumps ``generation`` and wakes the waiters, so a poller delivers the sample of the new
    moment at once.

    Args:
        start_s: The recording's first moment.
        end_s: Its last one; the clock stops there.
        speed: Recording seconds per real second.
        monotonic: The real clock (tests drive it).
    """

    def __init__(
        self,
        start_s: float,
        end_s: float,
        speed: float = 1.0,
        monotonic: object = None,
    ) -> None:
        self.start_s = start_s
        self.end_s = max(start_s, end_s)
        self._real = monotonic if callable(monotonic) else time.monotonic
        self._speed = speed
        self._at_s = start_s
        self._since = self._real()
        self._playing = True
        self._changed = threading.Condition()
        self.generation = 0
        """Bumped by every move; a poller that saw another one delivers again."""

    def now(self) -> float:
        """Where the replay stands, in the recording's epoch seconds."""
        with self._changed:
            return self._now()

    def _now(self) -> float:
        if not self._playing:
            return self._at_s
        at_s = self._at_s + (self._real() - self._since) * self._speed
        if at_s >= self.end_s:
            self._at_s, self._playing = self.end_s, False
            return self.end_s
        return at_s

    @property
    def playing(self) -> bool:
        with self._changed:
            self._now()
            return self._playing

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def at_end(self) -> bool:
        return self.now() >= self.end_s

    def _moved(self, at_s: float, playing: bool) -> None:
        """Stand at ``at_s`` (kept within the recording), running or not; wake the pollers."""
        self._at_s = min(max(at_s, self.start_s), self.end_s)
        self._since = self._real()
        self._playing = playing and self._at_s < self.end_s
        self.generation += 1
        self._changed.notify_all()

    def seek(self, at_s: float) -> None:
        """Go to ``at_s`` (playing on if it was)."""
        with self._changed:
            self._now()
            self._moved(at_s, self._playing)

    def pause(self) -> None:
        with self._changed:
            self._moved(self._now(), False)

    def play(self) -> None:
        """Run on; from the end, from the start again."""
        with self._changed:
            at_s = self._now()
            self._moved(self.start_s if at_s >= self.end_s else at_s, True)

    def set_speed(self, speed: float) -> None:
        with self._changed:
            at_s = self._now()
            self._speed = speed
            self._moved(at_s, self._playing)

    def faster(self, steps: int = 1) -> float:
        """The next speed of ``SPEEDS`` up (``steps`` < 0: down); returns it."""
        index = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - self._speed))
        self.set_speed(SPEEDS[min(max(index + steps, 0), len(SPEEDS) - 1)])
        return self._speed

    def real_seconds_until(self, at_s: float) -> float | None:
        """Real seconds until the clock reaches ``at_s`` (None: it is paused; 0: it is there)."""
        with self._changed:
            now = self._now()
            if now >= at_s:
                return 0.0
            return (at_s - now) / self._speed if self._playing else None

    def wait(self, timeout_s: float, generation: int) -> None:
        """Block up to ``timeout_s`` or until the clock moves away from ``generation``."""
        with self._changed:
            if self.generation == generation:
                self._changed.wait(max(0.0, timeout_s))

    def wake(self) -> None:
        """Wake every waiter without moving (a link closing)."""
        with self._changed:
            self._changed.notify_all()
