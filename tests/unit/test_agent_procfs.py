"""Pure parts of the collector: /proc/<pid>/stat parsing and the bounded-call worker."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.agent.calls import CallTimeout, Worker
from gputui.agent.proc.procfs import ProcStat, parse_stat, read_stat, scan_proc
from gputui.agent.proc.proctree import ancestors_of, tree_members, tree_root

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
    worker = Worker("test")
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


def table_of(*rows: tuple[int, int, int, str]) -> dict[int, ProcStat]:
    """(pid, ppid, pgid, name) rows as a /proc table; session = pgid, state S."""
    return {
        pid: ProcStat(
            pid=pid, name=name, state="S", ppid=ppid, pgrp=pgid, session=pgid, start_ticks=pid, rss_pages=0
        )
        for pid, ppid, pgid, name in rows
    }


# Pids far above any real one: a shell among them has no readable cmdline, so it counts as a boundary.
BASE = 2**30
HOST = table_of(
    (1, 0, 1, "init"),
    (2, 0, 0, "kthreadd"),
    (BASE + 1, 1, BASE + 1, "sshd"),
    (BASE + 2, BASE + 1, BASE + 2, "bash"),  # the user's interactive shell
    (BASE + 3, BASE + 2, BASE + 3, "python3"),  # launcher
    (BASE + 4, BASE + 3, BASE + 3, "scheduler_TP0"),  # GPU worker
    (BASE + 5, BASE + 3, BASE + 3, "detokenizer"),  # no GPU memory
    (BASE + 6, 1, BASE + 3, "scheduler_TP1"),  # double-forked: reparented to init, still in the group
    (BASE + 7, BASE + 6, BASE + 6, "helper"),  # its child, in a group of its own
    (BASE + 8, BASE + 2, BASE + 8, "vim"),  # another job of the same shell
    (BASE + 9, 2, 0, "kworker/0:1"),
)


def test_tree_root_stops_below_the_session_boundary() -> None:
    assert tree_root(BASE + 4, HOST) == BASE + 3
    assert tree_root(BASE + 3, HOST) == BASE + 3
    assert tree_root(BASE + 6, HOST) == BASE + 6  # its parent is init
    assert tree_root(1, HOST) == 1


def test_tree_root_survives_a_ppid_cycle() -> None:
    looped = table_of((BASE + 1, BASE + 2, 0, "a"), (BASE + 2, BASE + 1, 0, "b"))
    assert tree_root(BASE + 1, looped) in (BASE + 1, BASE + 2)


def test_tree_members_follow_children_and_led_groups_only() -> None:
    members = tree_members([BASE + 3], HOST)
    assert members == {BASE + 3, BASE + 4, BASE + 5, BASE + 6, BASE + 7}
    # Never through init, the kernel's threads, or the shell's other jobs.
    assert not members & {1, 2, BASE + 1, BASE + 2, BASE + 8, BASE + 9}
    assert tree_members([BASE + 99], HOST) == set()  # gone meanwhile


def test_mapped_paths_names_the_files_a_process_maps_under_a_folder(tmp_path: Path) -> None:
    import mmap

    from gputui.agent.proc.procfs import mapped_paths

    segment = tmp_path / "seg one"
    segment.write_bytes(b"\0" * 4096)
    with segment.open("r+b") as handle, mmap.mmap(handle.fileno(), 4096):
        assert mapped_paths(os.getpid(), f"{tmp_path}/") == {str(segment)}
        segment.unlink()  # the kernel says " (deleted)": the name is what it was
        assert mapped_paths(os.getpid(), f"{tmp_path}/") == {str(segment)}
        assert mapped_paths(os.getpid(), "/nowhere/") == set()
    assert mapped_paths(2**22 + 1, "/") == set()  # no such process
