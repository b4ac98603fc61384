"""``ProcTexts``: a process's cgroup and environment read once for all its readers within one sample."""

from __future__ import annotations

import os
from pathlib import Path

from gputui.agent.proc.procfs import ProcTexts


def _plant(root: Path, pid: int, name: str, data: bytes) -> None:
    folder = root / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def test_within_a_round_a_file_is_read_once_and_outside_every_read_reads(tmp_path: Path) -> None:
    texts = ProcTexts(str(tmp_path))
    _plant(tmp_path, 7, "environ", b"A=1\0")
    assert texts.read(7, 100, "environ", 64) == b"A=1\0"  # outside a round: read, not kept
    _plant(tmp_path, 7, "environ", b"A=2\0")
    assert texts.read(7, 100, "environ", 64) == b"A=2\0"
    texts.begin()
    assert texts.read(7, 100, "environ", 64) == b"A=2\0"
    _plant(tmp_path, 7, "environ", b"A=3\0")
    assert texts.read(7, 100, "environ", 64) == b"A=2\0"  # the same process's second reader
    assert texts.read(7, 100, "environ", 2) == b"A="  # a smaller cap: what was read, cut
    assert texts.read(7, 101, "environ", 64) == b"A=3\0"  # another process under the same pid
    texts.end()
    _plant(tmp_path, 7, "environ", b"A=4\0")
    assert texts.read(7, 101, "environ", 64) == b"A=4\0"  # never from an earlier round


def test_only_the_last_process_is_kept_and_a_larger_cap_reads_again_where_the_first_was_cut(
    tmp_path: Path,
) -> None:
    texts = ProcTexts(str(tmp_path))
    _plant(tmp_path, 7, "environ", b"0123456789")
    _plant(tmp_path, 8, "cgroup", b"0::/x\n")
    texts.begin()
    assert texts.read(7, 1, "environ", 4) == b"0123"
    assert texts.read(7, 1, "environ", 8) == b"01234567"  # cut before: read again with the larger cap
    assert texts.read(8, 1, "cgroup", 4) == b"0::/"
    assert texts.read(8, 1, "cgroup", 64) == b"0::/x\n"
    _plant(tmp_path, 8, "cgroup", b"0::/y\n")
    assert texts.read(8, 1, "cgroup", 128) == b"0::/x\n"  # read whole before: any cap is answered
    _plant(tmp_path, 7, "environ", b"changed")
    assert texts.read(7, 1, "environ", 64) == b"changed"  # pid 8 came between: 7's files are gone
    texts.end()


def test_missing_and_planted_files_read_as_none_and_stay_none_within_the_round(tmp_path: Path) -> None:
    texts = ProcTexts(str(tmp_path))
    (tmp_path / "9").mkdir()
    os.mkfifo(tmp_path / "9" / "environ")  # never blocked on
    (tmp_path / "9" / "cgroup").symlink_to("/etc/hostname")  # never followed
    texts.begin()
    assert texts.read(9, 1, "environ", 64) is None
    assert texts.read(9, 1, "cgroup", 64) is None
    assert texts.read(9, 1, "status", 64) is None
    texts.end()
