"""When to try a broken link again: jittered exponential backoff.

The TUI's host workers reopen a broken link through one ``Backoff`` per link, so a host that went away is
retried quickly at first and then at most every ``cap_s`` seconds, and many clients that lost the same host do
not come back in lock-step (sshd's ``PerSourcePenalties`` and ``MaxStartups`` punish tight, synchronised
reconnect loops).
"""

from __future__ import annotations

from collections.abc import Callable


def _uniform() -> float:
    import random  # by the first retry, not by every one-shot that imports the links

    return random.random()  # noqa: S311 - jitter, not security


class Backoff:
    """Delays between reconnect attempts: "full jitter" exponential backoff.

    The n-th delay (n from 0 after a reset) is uniform in ``[0, min(cap_s, base_s * 2**n)]``.
    Call ``reset()`` after a connection has delivered data again.

    Args:
        base_s: Upper bound of the first delay, seconds.
        cap_s: Largest upper bound any delay can have, seconds.
        rng: Source of uniform floats in [0, 1) (tests pass a fixed one); defaults to ``random.random``.
    """

    def __init__(
        self, base_s: float = 1.0, cap_s: float = 30.0, rng: Callable[[], float] | None = None
    ) -> None:
        if not base_s > 0 or not cap_s >= base_s:
            raise ValueError(f"backoff needs 0 < base_s <= cap_s, got base_s={base_s} cap_s={cap_s}")
        self.base_s = base_s
        self.cap_s = cap_s
        self._rng = rng if rng is not None else _uniform
        self.attempts = 0
        """Failed attempts since the last reset."""

    def ceiling_s(self) -> float:
        """Upper bound of the next delay in seconds (no jitter)."""
        # 2**attempts overflows floats only after ~1000 failures; clamp the exponent long before that.
        return min(self.cap_s, self.base_s * (2.0 ** min(self.attempts, 60)))

    def next_delay_s(self) -> float:
        """The delay before the next attempt, in seconds; counts one more failure."""
        delay_s = self._rng() * self.ceiling_s()
        self.attempts += 1
        return delay_s

    def reset(self) -> None:
        """Forget past failures (the link works again)."""
        self.attempts = 0


def worth_retrying(error: BaseException) -> bool:
    """Whether reopening a link after ``error`` can help.

    False for errors only the user can fix: a bad target, an unknown/changed/revoked host key, failed
    authentication, a collector that cannot run there (no python3, protocol mismatch). Retrying those would
    only hammer sshd (``PerSourcePenalties``, ``MaxStartups``) and hide the message: show it and stop.
    """
    return not getattr(error, "permanent", False)
