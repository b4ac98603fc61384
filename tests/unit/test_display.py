"""The one set of display formats the TUI and the commands share."""

from __future__ import annotations

import time

from gputui.core.text import DASH, clock_time, dash, duration, size_text


def test_missing_values_read_as_the_dash() -> None:
    assert dash(None) == DASH
    assert dash(3, " MiB") == "3 MiB"
    assert size_text(None) == DASH
    assert clock_time(None) == DASH


def test_a_time_the_platform_cannot_represent_is_the_dash() -> None:
    assert clock_time(1e300) == DASH
    assert clock_time(float("nan")) == DASH
    assert clock_time(-1e20) == DASH


def test_the_date_shows_only_a_day_or_more_away() -> None:
    now = 1_760_000_000.0
    assert clock_time(now - 60, now) == time.strftime("%H:%M:%S", time.localtime(now - 60))
    assert clock_time(now - 2 * 86400, now) == time.strftime(
        "%Y-%m-%d %H:%M:%S", time.localtime(now - 2 * 86400)
    )
    assert clock_time(now - 2 * 86400) == time.strftime("%H:%M:%S", time.localtime(now - 2 * 86400))


def test_durations_and_sizes() -> None:
    assert duration(0.44) == "0.4 s"
    assert duration(12.2) == "12 s"
    assert duration(185) == "3 min 05 s"
    assert duration(7380) == "2 h 03 min"
    assert size_text(24) == "24M"
    assert size_text(9728) == "9.5G"
    assert size_text(319488) == "312G"
