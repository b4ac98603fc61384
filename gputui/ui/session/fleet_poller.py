"""The fleet view's poller: Prometheus asked on a thread of its own, each answer handed over as it comes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gputui.core.fleet import DEFAULT_REFRESH_S, FleetSample
from gputui.core.link import LinkError
from gputui.transports.pacing import paced_by

QUIET_S = 0.3
"""A refresh pauses while a key was pressed within this long: a key's answer has the interpreter to itself."""
MAX_PAUSED_S = 2.0
"""Longest one refresh pauses for keys in all, so that keys held down cannot keep the fleet's data away."""


@dataclass(frozen=True)
class FleetUpdate:
    """One answer of the poller.

    Attributes:
        sample: The analysed fleet, None when the query failed.
        error: One line saying why it failed.
        received_s: Local clock when the answer arrived (ages grow from here while no newer one comes).
        took_s: How long the query took, seconds.
    """

    sample: FleetSample | None
    error: str | None
    received_s: float
    took_s: float


class FleetPoller:
    """Asks Prometheus on a daemon thread of its own, ``interval_s`` after the last answer (no overlap, no
    pile-up), and hands each answer to ``deliver`` (called on that thread).

    ``read`` is bounded by the source's own deadline, so ``stop`` takes effect within it; quitting never
    waits for it (daemon thread). It is paced (``transports.pacing``): while ``input_at`` (monotonic time of
    the user's last key, set by the view) is recent, the read pauses between slices of its work.
    """

    def __init__(
        self,
        read: Callable[[], FleetSample],
        deliver: Callable[[FleetUpdate], None],
        interval_s: float = DEFAULT_REFRESH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._read = read
        self._deliver = deliver
        self.interval_s = interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._thread: threading.Thread | None = None
        self.input_at: Callable[[], float] | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gputui-fleet", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()
        self._wake.set()

    def refresh_now(self) -> None:
        """Ask again at once (after the query in flight, if any)."""
        self._running.set()
        self._wake.set()

    def pause(self) -> None:
        """Ask nothing until ``resume`` (the view is hidden)."""
        self._running.clear()

    def resume(self) -> None:
        """Ask again at once if paused (the view is shown again); nothing otherwise."""
        if not self._running.is_set():
            self.refresh_now()

    def poll_once(self) -> FleetUpdate:
        """One query, its failure turned into an update with one error line."""
        started = time.monotonic()
        sample: FleetSample | None = None
        error: str | None = None
        paced_by(None if self.input_at is None else _MakeWay(self.input_at))
        try:
            sample = self._read()
        except LinkError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a bad answer must not end the polling
            error = f"prometheus: {type(exc).__name__}: {exc}"
        finally:
            paced_by(None)
        return FleetUpdate(sample, error, self._clock(), time.monotonic() - started)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._running.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            update = self.poll_once()
            if self._stop.is_set():
                return
            self._deliver(update)
            self._wake.wait(self.interval_s)


class _MakeWay:
    """The pause of one read: wait while the user is pressing keys, up to ``MAX_PAUSED_S`` in all."""

    def __init__(self, input_at: Callable[[], float]) -> None:
        self._input_at = input_at
        self._paused_s = 0.0

    def __call__(self) -> None:
        while self._paused_s < MAX_PAUSED_S:
            quiet_s = time.monotonic() - self._input_at()
            if quiet_s >= QUIET_S:
                return
            nap_s = min(QUIET_S - quiet_s, MAX_PAUSED_S - self._paused_s)
            time.sleep(nap_s)
            self._paused_s += nap_s
