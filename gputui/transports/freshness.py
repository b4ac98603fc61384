"""Which data is current: the newest-per-host inbox between a producer thread and its reader, and the stale
rule.

Both sides of a host stream face the same two questions. A reader that falls behind must get the newest
data, never a queue of old samples: ``LatestInbox`` keeps one value per key, replaces a waiting value with a
newer one, and tells the producer when the reader needs waking (only when the inbox goes from empty to
non-empty, so a slow reader is woken once per batch however many producers deliver). And data that stops
coming must be called stale after a few missed intervals: ``stale_after_s`` is that rule, ``link_state``
what a host is called from the times of its last data and its last error. The SSH stream
(``ssh.stream``, limit from ``ssh.link``) and the TUI's hosts (``ui.session.hosts``) both use them.

Plain threading and arithmetic; no UI toolkit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

TYPE_CHECKING = False
if not TYPE_CHECKING:  # typing is a type checker's: at run time ``Generic[K, V]`` is a plain base

    class Generic:
        def __class_getitem__(cls, _parameters: object) -> type:
            return object

    K = V = None
else:
    from typing import Generic, TypeVar

    K = TypeVar("K")
    V = TypeVar("V")

STALE_FACTOR = 3.0
"""Missed intervals after which data is stale."""
MIN_STALE_S = 1.0
"""Shortest stale limit, whatever the interval (a fast interval is not a promise of fast data)."""

CONNECTING = "connecting"
LIVE = "live"
STALE = "stale"
ERROR = "error"


class LatestInbox(Generic[K, V]):
    """The newest undelivered value of each key, taken as one batch. Thread-safe.

    Args:
        merge: Combines the value waiting for a key with a newer one (default: the newer one replaces it).
            Use it to keep a property of the older value, such as "the user asked for this one".
    """

    def __init__(self, merge: Callable[[V, V], V] | None = None) -> None:
        self._merge = merge
        self._waiting: dict[K, V] = {}
        self._lock = threading.Lock()

    def put(self, key: K, value: V) -> bool:
        """Leave ``value`` for ``key``, replacing (or merging into) one not taken yet.

        Returns:
            True when the inbox was empty: the reader must be woken. While it is non-empty a wake-up is
            already on its way, and the batch it takes will include this value.
        """
        with self._lock:
            was_empty = not self._waiting
            older = self._waiting.get(key)
            if older is not None and self._merge is not None:
                value = self._merge(older, value)
            self._waiting[key] = value
        return was_empty

    def take(self) -> dict[K, V]:
        """Every waiting value, by key (insertion order); the inbox is empty afterwards."""
        with self._lock:
            batch, self._waiting = self._waiting, {}
        return batch

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)


def stale_after_s(interval_s: float, floor_s: float = MIN_STALE_S) -> float:
    """Seconds without data after which a stream sampled every ``interval_s`` is stale (RELIABILITY 8).

    Args:
        interval_s: The stream's sampling interval, seconds.
        floor_s: The shortest limit (a display that counts whole seconds needs a few).
    """
    return max(floor_s, STALE_FACTOR * interval_s)


def link_state(now_s: float, last_ok_s: float | None, error_s: float | None, stale_limit_s: float) -> str:
    """What a host is called: ``connecting``, ``live``, ``stale`` or ``error``.

    Args:
        now_s: The time now (the same clock as the other two times).
        last_ok_s: When its last data arrived; None: never.
        error_s: When its last error was reported; None: no error since its last data.
        stale_limit_s: ``stale_after_s`` of its stream.
    """
    if error_s is not None and (last_ok_s is None or error_s >= last_ok_s):
        return ERROR
    if last_ok_s is None:
        return CONNECTING
    return STALE if now_s - last_ok_s > stale_limit_s else LIVE
