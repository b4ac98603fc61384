"""Backoff: full-jitter exponential delays between reconnect attempts."""

from __future__ import annotations

import pytest

from gputui.transports.reconnect import Backoff, worth_retrying


def test_ceiling_doubles_from_base_up_to_cap() -> None:
    backoff = Backoff(base_s=1.0, cap_s=30.0, rng=lambda: 1.0)
    delays = [backoff.next_delay_s() for _ in range(8)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_full_jitter_scales_the_ceiling() -> None:
    values = iter([0.0, 0.5, 0.25])
    backoff = Backoff(base_s=1.0, cap_s=30.0, rng=lambda: next(values))
    assert [backoff.next_delay_s() for _ in range(3)] == [0.0, 1.0, 1.0]


def test_real_jitter_stays_within_bounds_and_varies() -> None:
    backoff = Backoff()
    delays = []
    for _ in range(200):
        backoff.reset()
        delays.append(backoff.next_delay_s())
    assert all(0.0 <= d <= 1.0 for d in delays)
    assert len(set(delays)) > 100


def test_reset_starts_over() -> None:
    backoff = Backoff(rng=lambda: 1.0)
    for _ in range(5):
        backoff.next_delay_s()
    assert backoff.attempts == 5
    backoff.reset()
    assert backoff.next_delay_s() == 1.0


def test_many_failures_do_not_overflow() -> None:
    backoff = Backoff(rng=lambda: 1.0)
    for _ in range(5000):
        delay = backoff.next_delay_s()
    assert delay == 30.0


@pytest.mark.parametrize(("base_s", "cap_s"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 5.0)])
def test_bad_parameters_are_refused(base_s: float, cap_s: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(base_s=base_s, cap_s=cap_s)


def test_only_errors_a_retry_can_fix_are_worth_retrying() -> None:
    from gputui.core.link import BadTarget, LinkError
    from gputui.transports.ssh import AuthFailed, SetupFailed
    from gputui.transports.ssh.hostkeys.knownhosts import ChangedHostKey, UnknownHostKey

    assert worth_retrying(LinkError("gpu1: no data for 3.2 s"))
    assert worth_retrying(TimeoutError())
    for permanent in (
        BadTarget("x"),
        ChangedHostKey("x"),
        UnknownHostKey("t", "t", "t", None, "ssh-ed25519", b"blob"),
        AuthFailed("x"),
        SetupFailed("x"),
    ):
        assert not worth_retrying(permanent), permanent
