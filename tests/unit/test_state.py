"""Calibrated baselines on disk: XDG location, per-host keys, atomic writes, corrupt files never clobbered."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gputui.core.store import StoreError, load_baselines, save_baselines, saved, state_dir, watched_ports


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "gputui"


def test_state_dir_follows_xdg_state_home(xdg: Path) -> None:
    assert state_dir() == str(xdg)


def test_state_dir_ignores_relative_xdg_value(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "relative/dir")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert state_dir() == str(tmp_path / ".local" / "state" / "gputui")


def test_nothing_recorded_gives_empty_baselines_without_warning(xdg: Path) -> None:
    loaded = load_baselines("local")
    assert loaded.per_gpu_mib == {}
    assert loaded.warning is None


def test_save_then_load_round_trip_keyed_by_target_and_uuid(xdg: Path) -> None:
    path = save_baselines("local", {"GPU-aaa": 3, "GPU-bbb": 5}, hostname="node7", now=1000.0)
    save_baselines("gpu-node-08", {"GPU-ccc": 1})
    assert path == str(xdg / "baselines.json")
    document = json.loads(Path(path).read_text())
    assert document["hosts"]["local"]["gpus"] == {"GPU-aaa": 3, "GPU-bbb": 5}
    assert document["hosts"]["local"]["hostname"] == "node7"
    loaded = load_baselines("local")
    assert loaded.per_gpu_mib == {"GPU-aaa": 3, "GPU-bbb": 5}
    assert loaded.calibrated_at == 1000.0
    assert load_baselines("gpu-node-08").per_gpu_mib == {"GPU-ccc": 1}
    assert load_baselines("elsewhere").per_gpu_mib == {}


def test_recalibrating_replaces_only_that_host(xdg: Path) -> None:
    save_baselines("a", {"GPU-1": 3})
    save_baselines("b", {"GPU-2": 4})
    save_baselines("a", {"GPU-1": 7})
    assert load_baselines("a").per_gpu_mib == {"GPU-1": 7}
    assert load_baselines("b").per_gpu_mib == {"GPU-2": 4}
    # No temporary files are left next to it.
    assert sorted(p.name for p in xdg.iterdir()) == ["baselines.json"]


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe garbage", b"[1, 2]", b'{"hosts": 3}', b'{"format": 99, "hosts": {}}', b""],
)
def test_corrupt_file_warns_once_uses_defaults_and_is_never_overwritten(xdg: Path, content: bytes) -> None:
    xdg.mkdir(parents=True)
    path = xdg / "baselines.json"
    path.write_bytes(content)
    loaded = load_baselines("local")
    assert loaded.per_gpu_mib == {}
    assert loaded.warning is not None
    assert "\n" not in loaded.warning
    assert str(path) in loaded.warning
    with pytest.raises(StoreError, match="not overwriting"):
        save_baselines("local", {"GPU-aaa": 3})
    assert path.read_bytes() == content


def test_bad_values_for_one_host_warn_but_other_hosts_load(xdg: Path) -> None:
    xdg.mkdir(parents=True)
    (xdg / "baselines.json").write_text(
        json.dumps({"format": 1, "hosts": {"bad": {"gpus": {"GPU-1": -4}}, "good": {"gpus": {"GPU-2": 3}}}})
    )
    bad = load_baselines("bad")
    assert bad.per_gpu_mib == {}
    assert bad.warning is not None
    assert "'bad'" in bad.warning
    assert load_baselines("good").per_gpu_mib == {"GPU-2": 3}


@pytest.mark.parametrize("value", [-1, 2.5, "3", True, None])
def test_save_refuses_bad_values(xdg: Path, value: object) -> None:
    with pytest.raises(StoreError):
        save_baselines("local", {"GPU-1": value})  # type: ignore[dict-item]
    assert not (xdg / "baselines.json").exists()


def test_unwritable_directory_is_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))  # a file where a directory should be
    with pytest.raises(StoreError) as info:
        save_baselines("local", {"GPU-1": 3})
    assert "\n" not in str(info.value)


def test_append_line_is_owner_only_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    saved.append_line(path, "one")
    saved.append_line(path, "two\n")
    assert path.read_text() == "one\ntwo\n"
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_watched_ports_are_kept_per_host_and_boot_and_forgotten(xdg: Path) -> None:
    now = time.time()
    saved.save_watched_ports("gpu-a", "boot-1", watched_ports([30000, 30001], now))
    saved.save_watched_ports("gpu-b", "boot-9", watched_ports([8000], now))
    assert [p.port for p in saved.load_watched_ports("gpu-a", "boot-1")] == [30000, 30001]
    assert saved.load_watched_ports("gpu-a", "boot-2") == ()  # rebooted: the job is long gone
    assert saved.load_watched_ports("gpu-a", None) == ()
    assert saved.load_watched_ports("gpu-c", "boot-1") == ()
    saved.save_watched_ports("gpu-a", "boot-1", ())  # seen free
    assert saved.load_watched_ports("gpu-a", "boot-1") == ()
    assert [p.port for p in saved.load_watched_ports("gpu-b", "boot-9")] == [8000]
    old = now - saved.WATCHED_PORTS_KEPT_S - 1
    saved.save_watched_ports("gpu-a", "boot-1", watched_ports([30000], old))
    assert saved.load_watched_ports("gpu-a", "boot-1") == ()  # a check that never came: not held forever


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"gpu-a": 7}',
        b'{"gpu-a": {"boot_id": "boot-1", "killed_time": "x"}}',
        b'{"gpu-a": {"boot_id": "boot-1", "killed_time": 1e300, "ports": [22]}}',
        b'{"gpu-a": {"boot_id": "boot-1", "killed_time": NaN, "ports": [22]}}',
        b'{"gpu-a": {"boot_id": "boot-1", "killed_time": true, "ports": [22]}}',
        b'{"gpu-a": {"boot_id": "boot-1", "killed_time": %d, "ports": [0, -1, 70000, true, "80", 22]}}'
        % int(time.time()),
    ],
)
def test_a_bad_watched_ports_file_is_no_port_and_is_replaced(xdg: Path, content: bytes) -> None:
    path = Path(state_dir()) / saved.WATCHED_PORTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    loaded = saved.load_watched_ports("gpu-a", "boot-1")
    assert [p.port for p in loaded] in ([], [22])
    saved.save_watched_ports("gpu-b", "boot-1", ())
    saved.save_watched_ports("gpu-a", "boot-1", loaded)
    assert saved.load_watched_ports("gpu-a", "boot-1") == loaded
