"""``safefile``: the one opener of gputui's state, config and cache files, against real planted paths."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from gputui.agent import safefile
from gputui.agent.safefile import UnsafeFile

NOBODY = 65534


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "gputui"
    path.mkdir(mode=0o700)
    return path


def _within(seconds: float, call):  # type: ignore[no-untyped-def]
    """Run ``call`` on a thread; fail if it has not returned within ``seconds`` (a blocked open)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for over {seconds} s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def test_reads_a_regular_file_and_says_none_for_a_missing_one(folder: Path) -> None:
    (folder / "a.json").write_bytes(b"{}")
    assert safefile.read_bytes(folder / "a.json", 100) == b"{}"
    assert safefile.read_bytes(folder / "absent.json", 100) is None
    assert safefile.read_bytes(folder / "no-folder" / "x.json", 100) is None


def test_a_symlink_is_never_followed_for_reading_appending_or_writing(folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("precious\n")
    link = folder / "audit.jsonl"
    link.symlink_to(target)
    with pytest.raises(UnsafeFile, match=r"audit\.jsonl: a symbolic link \(not followed\)$"):
        safefile.read_bytes(link, 100)
    with pytest.raises(UnsafeFile, match="a symbolic link"):
        safefile.append(link, b"line\n")
    assert target.read_text() == "precious\n"
    safefile.write_atomic(link, b"new\n")  # the link itself is replaced, its target untouched
    assert not link.is_symlink()
    assert link.read_bytes() == b"new\n"
    assert target.read_text() == "precious\n"


def test_a_fifo_never_blocks_a_read_or_an_append(folder: Path) -> None:
    fifo = folder / "watched_ports.json"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFile, match=r"watched_ports\.json: a FIFO, not a regular file$"):
        _within(2.0, lambda: safefile.read_bytes(fifo, 100))
    with pytest.raises(UnsafeFile, match="a FIFO"):
        _within(2.0, lambda: safefile.append(fifo, b"x\n"))
    # A reader waiting on the FIFO must not get gputui's line either.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(UnsafeFile):
            _within(2.0, lambda: safefile.append(fifo, b"x\n"))
        assert os.read(reader, 10) == b""
    finally:
        os.close(reader)


def test_a_device_is_refused_without_being_opened(folder: Path) -> None:
    device = folder / "baselines.json"
    os.mknod(device, stat.S_IFCHR | 0o600, os.stat("/dev/zero").st_rdev)
    with pytest.raises(UnsafeFile, match="a character device, not a regular file"):
        _within(2.0, lambda: safefile.read_bytes(device, 100))


def test_a_directory_where_a_file_belongs_is_refused(folder: Path) -> None:
    (folder / "ui.json").mkdir()
    with pytest.raises(UnsafeFile, match="a directory, not a regular file"):
        safefile.read_bytes(folder / "ui.json", 100)


def test_a_file_of_another_user_or_writable_by_others_is_refused(folder: Path) -> None:
    foreign = folder / "baselines.json"
    foreign.write_text("{}")
    os.chown(foreign, NOBODY, NOBODY)
    with pytest.raises(
        UnsafeFile, match=rf"owned by uid {NOBODY}, neither you \(uid {os.geteuid()}\) nor root"
    ):
        safefile.read_bytes(foreign, 100)
    with pytest.raises(UnsafeFile, match="owned by uid"):
        safefile.append(foreign, b"x")
    shared = folder / "ui.json"
    shared.write_text("{}")
    shared.chmod(0o666)
    with pytest.raises(UnsafeFile, match=r"writable by group or others \(mode 0666\)"):
        safefile.read_bytes(shared, 100)


def test_a_folder_others_may_write_or_own_is_refused(tmp_path: Path) -> None:
    open_to_all = tmp_path / "state"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    (open_to_all / "baselines.json").write_text("{}")
    with pytest.raises(
        UnsafeFile, match=rf"^folder {open_to_all}: writable by group or others \(mode 0777\)$"
    ):
        safefile.read_bytes(open_to_all / "baselines.json", 100)
    with pytest.raises(UnsafeFile, match="writable by group or others"):
        safefile.write_atomic(open_to_all / "baselines.json", b"{}")
    with pytest.raises(UnsafeFile, match="writable by group or others"):
        safefile.append(open_to_all / "audit.jsonl", b"x")
    assert not (open_to_all / "audit.jsonl").exists()
    foreign = tmp_path / "cache"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, NOBODY, NOBODY)
    with pytest.raises(UnsafeFile, match=rf"^folder {foreign}: owned by uid {NOBODY}"):
        safefile.read_bytes(foreign / "bundle.bin", 100)


def test_a_folder_above_others_may_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    above = tmp_path / "shared"
    (above / "gputui").mkdir(parents=True, mode=0o700)
    (above / "gputui" / "a.json").write_text("{}")
    above.chmod(0o777)  # anyone may move gputui/ away and put their own in its place
    with pytest.raises(UnsafeFile, match=rf"^folder {above} \(above {above / 'gputui'}\): writable by group"):
        safefile.read_bytes(above / "gputui" / "a.json", 100)
    above.chmod(0o1777)  # sticky, as /tmp: only the owner may move its entry
    assert safefile.read_bytes(above / "gputui" / "a.json", 100) == b"{}"


def test_the_folder_itself_may_not_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (real / "a.json").write_text("{}")
    (tmp_path / "gputui").symlink_to(real)
    with pytest.raises(UnsafeFile, match=r"folder .*gputui: a symbolic link \(not followed\)"):
        safefile.read_bytes(tmp_path / "gputui" / "a.json", 100)
    with pytest.raises(UnsafeFile, match="a symbolic link"):
        safefile.append(tmp_path / "gputui" / "audit.jsonl", b"x")
    assert not (real / "audit.jsonl").exists()


def test_size_cap(folder: Path) -> None:
    (folder / "big.json").write_bytes(b"x" * 5000)
    with pytest.raises(UnsafeFile, match=r"big\.json: larger than 4 KiB"):
        safefile.read_bytes(folder / "big.json", 4096)


def test_atomic_write_makes_the_folder_private_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gputui" / "baselines.json"
    safefile.write_atomic(path, b"one", mode=0o644)
    safefile.write_atomic(path, b"two", mode=0o644)
    assert path.read_bytes() == b"two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in path.parent.iterdir()) == ["baselines.json"]


def test_appends_are_whole_lines_in_a_private_file(folder: Path) -> None:
    path = folder / "audit.jsonl"
    threads = [threading.Thread(target=safefile.append, args=(path, b"%d\n" % i * 50)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_bytes().splitlines()
    assert len(lines) == 8 * 50
    runs = [lines[i : i + 50] for i in range(0, len(lines), 50)]
    assert all(len(set(run)) == 1 for run in runs)  # each append landed whole, never interleaved
    assert sorted(run[0] for run in runs) == [b"%d" % i for i in range(8)]


def test_an_appended_line_is_whole_or_absent_and_never_glued_to_a_torn_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os as real_os

    log = tmp_path / "state" / "audit.jsonl"
    safefile.append(log, b'{"a": 1}\n')
    real_write = real_os.write

    def short_write(fd: int, data: bytes) -> int:  # a disk that fills after 5 bytes
        return real_write(fd, data[:5])

    monkeypatch.setattr(safefile.os, "write", short_write)
    with pytest.raises(safefile.UnsafeFile, match="cannot append"):
        safefile.append(log, b'{"b": 2}\n')
    monkeypatch.setattr(safefile.os, "write", real_write)
    assert log.read_bytes() == b'{"a": 1}\n'  # the torn part was cut off again
    with log.open("ab") as torn:  # a line torn by a crash, before this process
        torn.write(b'{"c": ')
    safefile.append(log, b'{"d": 4}\n')
    assert log.read_bytes().splitlines() == [b'{"a": 1}', b'{"c": ', b'{"d": 4}']
