"""Values from a collector read as typed values: the wrong type is a missing value, never an exception."""

from __future__ import annotations

from gputui.core.model import opt_float, opt_int, opt_str, ports_of


def test_numbers_of_the_wrong_kind_are_missing() -> None:
    for bad in (True, False, None, "x", [1], {"a": 1}, float("inf"), float("-inf"), float("nan")):
        assert opt_int(bad) is None, bad
    assert opt_int("12") == 12
    assert opt_int(12.7) == 12
    assert opt_float(True) is None
    assert opt_float("1.5") == 1.5
    assert opt_float([1]) is None


def test_strings_and_ports() -> None:
    assert opt_str(None) is None
    assert opt_str(3) == "3"
    assert ports_of("30000") is None
    assert ports_of([30000, 30000, 0, 70000, True, "8000", 8000]) == (8000, 30000)
