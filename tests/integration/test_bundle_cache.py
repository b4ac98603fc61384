"""The collector cache runs code on every host gputui reaches: it is used only from a folder and files that
pass ``safefile``'s checks; otherwise the bundle is built in memory and the user told once why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gputui.transports.ssh import bundle
from gputui.transports.ssh.bundle import Bundle, bundle_for, bundle_of_source, loader

NOBODY = 65534


def _plant(folder: Path, mark: Path) -> Path:
    """A cache file for the installed collector's key whose bundle runs one extra line (it leaves ``mark``)
    and is re-hashed, so that its header and checksum are right."""
    key = bundle.cache_key(bundle.collector_files(), bundle.ENTRY)
    evil = bundle_of_source(f"open({str(mark)!r}, 'w').close()\n".encode())
    path = folder / os.path.basename(bundle.cache_path(key))
    path.write_bytes(json.dumps(bundle.cache_header(key, evil)).encode() + b"\n" + evil.data)
    return path


def _ran(payload: Bundle) -> None:
    """Run ``payload`` as a remote python would (the loader on the command line, the bundle on stdin)."""
    subprocess.run(
        [sys.executable, "-u", "-c", loader(payload), "--interval", "1", "--process-interval", "3"],
        input=payload.data,
        capture_output=True,
        timeout=60,
        cwd="/",
        check=False,
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bundle, "_collector", None)
    folder = tmp_path / "gputui"
    folder.mkdir(mode=0o700)
    return folder


def test_a_planted_bundle_in_a_private_folder_would_run(cache: Path, tmp_path: Path) -> None:
    """The planted file is a real threat: from a folder that passes the checks the cache is believed."""
    mark = tmp_path / "ran"
    _plant(cache, mark)
    _ran(bundle_for())
    assert mark.exists()


def test_a_rehashed_bundle_in_an_open_foreign_folder_is_never_shipped(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mark = tmp_path / "ran"
    planted = _plant(cache, mark)
    cache.chmod(0o777)
    os.chown(cache, NOBODY, NOBODY)
    payload = bundle_for()
    _ran(payload)
    assert not mark.exists(), "the planted bundle ran"
    assert payload.sources != bundle_of_source(b"x").sources
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"gputui: collector cache not used: folder {cache}: owned by uid {NOBODY}, neither you "
        f"(uid {os.geteuid()}) nor root; built in memory for this run"
    ]
    assert sorted(p.name for p in cache.iterdir()) == [planted.name]  # nothing written there either
    bundle_for()
    assert capsys.readouterr().err == ""  # said once


def test_a_world_writable_cache_folder_of_ones_own_is_not_used(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mark = tmp_path / "ran"
    _plant(cache, mark)
    cache.chmod(0o777)
    _ran(bundle_for())
    assert not mark.exists()
    assert "writable by group or others (mode 0777); built in memory" in capsys.readouterr().err


def test_a_foreign_cache_file_is_not_used(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mark = tmp_path / "ran"
    os.chown(_plant(cache, mark), NOBODY, NOBODY)
    _ran(bundle_for())
    assert not mark.exists()
    assert f"owned by uid {NOBODY}" in capsys.readouterr().err


def test_a_fifo_for_the_bundle_never_blocks(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(bundle.cache_path(bundle.cache_key(bundle.collector_files(), bundle.ENTRY)))
    got: list[Bundle] = []
    thread = threading.Thread(target=lambda: got.append(bundle_for()), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "blocked on the FIFO"
    assert got
    assert got[0].sources
    assert "a FIFO, not a regular file; built in memory for this run" in capsys.readouterr().err


def test_a_cache_folder_that_is_a_link_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    mark = tmp_path / "ran"
    _plant(elsewhere, mark)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "gputui").symlink_to(elsewhere)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(bundle, "_collector", None)
    _ran(bundle_for())
    assert not mark.exists()
    assert "a symbolic link (not followed)" in capsys.readouterr().err
