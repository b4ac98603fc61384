"""Pure parts of the collector: /proc/<pid>/stat parsing and the bounded-call worker."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.agent import CallTimeout, _Worker, ancestors_of, parse_stat, read_stat, scan_proc

STAT_TAIL = (
    "S 4200 4242 4100 34816 4242 4194560 1042 0 0 0 7 3 0 0 20 0 1 0 123456 99999 321 18446744073709551615"
)


def stat_line(pid: int, comm: bytes) -> bytes:
    return b"%d (" % pid + comm + b") " + STAT_TAIL.encode()


def test_parse_stat_fields() -> None:
    stat = parse_stat(4242, stat_line(4242, b"python3"))
    assert stat is not None
    assert (stat.name, stat.state, stat.ppid, stat.pgrp, stat.session) == ("python3", "S", 4200, 4242, 4100)
    assert stat.start_ticks == 123456
    assert stat.rss_pages == 321


@pytest.mark.parametrize("comm", [b") (", b"a) S 1 2 3 (b", b"x y z", b"((", b"))", b"\xff\xfe bad", b""])
def test_parse_stat_splits_after_the_last_paren(comm: bytes) -> None:
    stat = parse_stat(7, stat_line(7, comm))
    assert stat is not None
    assert stat.name == comm.decode("utf-8", "backslashreplace")
    assert stat.ppid == 4200
    assert stat.start_ticks == 123456


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=16).filter(lambda b: b"\n" not in b and b"\0" not in b))
def test_parse_stat_any_comm(comm: bytes) -> None:
    stat = parse_stat(9, stat_line(9, comm))
    assert stat is not None
    assert stat.start_ticks == 123456
    assert stat.state == "S"


@pytest.mark.parametrize("junk", [b"", b"123", b"1 (x)", b"1 (x) S 1 2", b"1 (x) S a b c " + b"0 " * 30])
def test_malformed_stat_is_none(junk: bytes) -> None:
    assert parse_stat(1, junk) is None


def test_own_process_is_read_live() -> None:
    stat = read_stat(os.getpid())
    assert stat is not None
    assert stat.ppid == os.getppid()
    assert stat.pgrp == os.getpgid(0)
    assert stat.session == os.getsid(0)
    assert os.getpid() in scan_proc()
    assert os.getppid() in ancestors_of(os.getpid())
    assert read_stat(2**30) is None


def test_worker_bounds_a_hung_call_and_refuses_while_stuck() -> None:
    worker = _Worker("test")
    release = threading.Event()
    assert worker.call(lambda: 41 + 1, 5.0) == 42
    with pytest.raises(ValueError, match="boom"):
        worker.call(lambda: (_ for _ in ()).throw(ValueError("boom")), 5.0)
    with pytest.raises(CallTimeout):
        worker.call(lambda: release.wait(30), 0.05)
    assert worker.stuck
    with pytest.raises(CallTimeout):  # refused at once: the earlier call is still running
        worker.submit(lambda: 1)
    release.set()
    deadline = threading.Event()
    for _ in range(500):
        if not worker.stuck:
            break
        deadline.wait(0.01)
    assert not worker.stuck
    assert worker.call(lambda: "again", 5.0) == "again"
    worker.stop()
