"""Bounded device calls: every call that may hang (a driver call, a wedged GPU) runs on a worker thread of
its own and is waited for until a deadline, so one stuck device never stalls the snapshot stream."""

from __future__ import annotations

import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


class CallTimeout(Exception):
    """A call did not finish within its deadline (it may still be running on its worker)."""


class Done:
    """A one-shot "finished" flag a waiter can block on with a timeout: one raw lock, held until set.

    Cheaper than ``threading.Event`` (a Condition and a lock per waiter) on a path taken every sample.
    """

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        self._set = True
        self._lock.release()

    def wait(self, timeout_s: float) -> bool:
        if self._set:
            return True
        if self._lock.acquire(True, max(0.0, timeout_s)):
            self._lock.release()  # later waits return at once too
            return True
        return self._set


class Worker:
    """One daemon thread that runs calls for one device, so a hung call blocks only that device.

    One job at a time (``submit`` refuses while a call runs), handed over through one raw lock.
    """

    def __init__(self, name: str) -> None:
        self._wake = threading.Lock()
        self._wake.acquire()
        self._job: tuple[Callable[[], Any], list, Done] | None = None
        self._busy = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def stuck(self) -> bool:
        """Whether an earlier call is still running (it timed out and has not returned yet)."""
        return self._busy

    def _run(self) -> None:
        while True:
            self._wake.acquire()
            job, self._job = self._job, None
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: B036 - handed to the caller
                box.append((False, exc))
            finally:
                self._busy = False
                done.set()

    def submit(self, fn: Callable[[], Any]) -> tuple[Done, list]:
        """Start ``fn``; returns (done flag, result box).

        Raises:
            CallTimeout: the worker is still stuck in an earlier call.
        """
        if self._busy:
            raise CallTimeout()
        box: list = []
        done = Done()
        self._busy = True
        self._job = (fn, box, done)
        self._wake.release()
        return done, box

    @staticmethod
    def result(done: Done, box: list, deadline: float) -> Any:
        """Wait until ``deadline`` (monotonic) for a submitted call; re-raises its exception."""
        if not done.wait(deadline - time.monotonic()):
            raise CallTimeout()
        ok, value = box[0]
        if ok:
            return value
        raise value

    def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        done, box = self.submit(fn)
        return self.result(done, box, time.monotonic() + timeout_s)

    def stop(self) -> None:
        """Let the thread end: at once when idle, after its call when stuck in one."""
        self._job = None
        try:
            self._wake.release()
        except RuntimeError:  # already released: stop() twice
            pass
