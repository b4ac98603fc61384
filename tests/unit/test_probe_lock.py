"""The host-wide probe lock (``agent.gpu.probelock``): one probe of a GPU at a time, a second caller waits up
to its deadline and is told; the shared folder and its lock files are checked like any file gputui keeps
(a link, a FIFO, a folder others may rename things in: refused, never followed or blocked on, said)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from gputui.agent.gpu.probelock import ProbeLocks, lock_name

BUS = "00000000:17:00.0"


def test_the_first_caller_makes_the_folder_sticky_and_shared_and_holds_the_lock(tmp_path: Path) -> None:
    folder = tmp_path / "locks"
    old = os.umask(0o077)  # a strict umask changes neither mode
    try:
        first = ProbeLocks(str(folder))
        assert first.acquire([BUS], time.monotonic()) == set()
    finally:
        os.umask(old)
    assert first.problem is None
    assert stat.S_IMODE(folder.stat().st_mode) == 0o1777
    name = lock_name(BUS)
    assert name == lock_name("0000:17:00.0") == "gpu-00000000-17-00.0.lock"
    assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644  # another user's gputui may lock it too
    second = ProbeLocks(str(folder))
    started = time.monotonic()
    assert second.acquire([BUS, "00000000:18:00.0"], started + 0.3) == {BUS}
    assert time.monotonic() - started >= 0.3  # waited for it, no longer than its deadline
    second.release()
    first.release()
    third = ProbeLocks(str(folder))
    assert third.acquire([BUS], time.monotonic()) == set()
    third.release()


def test_a_lock_inherited_by_a_child_lasts_as_long_as_the_child(tmp_path: Path) -> None:
    import subprocess
    import sys

    first = ProbeLocks(str(tmp_path / "locks"))
    first.acquire([BUS], time.monotonic())
    fd = first.fd(BUS)
    assert fd is not None
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, pass_fds=(fd,)
    )
    try:
        first.release()  # the collector lets go; its child still holds the GPU
        assert ProbeLocks(str(tmp_path / "locks")).acquire([BUS], time.monotonic() + 0.2) == {BUS}
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    again = ProbeLocks(str(tmp_path / "locks"))
    assert again.acquire([BUS], time.monotonic() + 2.0) == set()
    again.release()


def test_a_planted_folder_or_lock_file_is_refused_and_said_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    locks = ProbeLocks(str(link))
    assert locks.acquire([BUS], time.monotonic()) == set()  # probed without it, and said
    assert locks.problem is not None
    assert "symbolic link" in locks.problem
    assert list(elsewhere.iterdir()) == []

    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)  # not sticky: anyone could swap a lock file under a holder
    locks = ProbeLocks(str(open_to_all))
    assert locks.acquire([BUS], time.monotonic()) == set()
    assert locks.problem is not None
    assert "not sticky" in locks.problem

    folder = tmp_path / "locks"
    ProbeLocks(str(folder)).acquire([], time.monotonic())
    name = lock_name(BUS)
    assert name is not None
    os.mkfifo(folder / name)  # a FIFO would block an open
    (folder / "gpu-00000000-18-00.0.lock").symlink_to(tmp_path / "target")
    locks = ProbeLocks(str(folder))
    started = time.monotonic()
    assert locks.acquire([BUS, "00000000:18:00.0"], time.monotonic()) == set()
    assert time.monotonic() - started < 1.0
    assert locks.problem is not None
    assert not (tmp_path / "target").exists()


def test_text_that_is_no_pci_bus_id_names_no_lock_file() -> None:
    assert lock_name("../../etc/passwd") is None
    assert lock_name("00000000:17:00.0/x") is None
    assert lock_name("0000:1E:00.7") == "gpu-00000000-1e-00.7.lock"
