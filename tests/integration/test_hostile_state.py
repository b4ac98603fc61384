"""Planted state files under the real CLI: a symlink, a FIFO, a device, a foreign owner, an open folder.

Nothing is followed, nothing blocks, each is one line naming the file, and a kill without a safe audit log
signals nothing.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import Worker, gputui_env, launcher, run_gputui, start_ticks_of

pytestmark = pytest.mark.timeout(180)
NOBODY = 65534
TIMEOUT_S = 30.0
"""The CLI's own run: a blocked open would pass this (the subprocess is killed and the test fails)."""


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    return gputui_env(fake_nvml, tmp_path / "state")


@pytest.fixture
def state(env: dict[str, str]) -> Path:
    path = Path(env["XDG_STATE_HOME"]) / "gputui"
    path.mkdir(parents=True, mode=0o700)
    return path


def _plant_symlink(state: Path, tmp_path: Path) -> Path:
    target = tmp_path / "victim-file"
    target.write_text("not gputui's\n")
    (state / "audit.jsonl").symlink_to(target)
    return target


def _plant_fifo(state: Path, tmp_path: Path) -> Path:
    os.mkfifo(state / "audit.jsonl")
    return state / "audit.jsonl"


def _plant_foreign(state: Path, tmp_path: Path) -> Path:
    path = state / "audit.jsonl"
    path.write_text("")
    os.chown(path, NOBODY, NOBODY)
    return path


def _plant_open_folder(state: Path, tmp_path: Path) -> Path:
    state.chmod(0o777)
    return state


@pytest.mark.parametrize(
    ("plant", "problem"),
    [
        (_plant_symlink, "audit.jsonl: a symbolic link (not followed)"),
        (_plant_fifo, "audit.jsonl: a FIFO, not a regular file"),
        (_plant_foreign, f"audit.jsonl: owned by uid {NOBODY}"),
        (_plant_open_folder, "writable by group or others (mode 0777)"),
    ],
)
def test_kill_refuses_without_a_safe_audit_log(
    env: dict[str, str], fake_nvml: Any, state: Path, tmp_path: Path, plant: Any, problem: str
) -> None:
    planted = plant(state, tmp_path)
    with launcher([Worker("scheduler_TP0", gpu=0)], fake_nvml) as server:
        victim = server["scheduler_TP0"]
        started = time.monotonic()
        result = run_gputui(["kill", "--yes", "--no-discover", str(victim)], env, timeout_s=TIMEOUT_S)
        assert time.monotonic() - started < TIMEOUT_S
        assert result.returncode == 2, result.stdout + result.stderr
        (line,) = result.stderr.splitlines()
        assert "kill refused, nothing signalled: audit log: " in line
        assert problem in line
        assert start_ticks_of(victim) == server.ticks[victim]  # alive, the same process
    if planted.name == "victim-file":
        assert planted.read_text() == "not gputui's\n"


def test_check_goes_on_past_a_fifo_baselines_watched_ports_and_leftovers(
    env: dict[str, str], state: Path
) -> None:
    os.mkfifo(state / "baselines.json")
    os.mkfifo(state / "watched_ports.json")
    os.mkfifo(state / "leftovers.json")
    result = run_gputui(["check", "--no-discover"], env, timeout_s=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "CLEAN: 8/8 GPUs at baseline (3 MiB + 2)" in result.stdout
    warnings = result.stderr.splitlines()
    assert any("baselines.json: a FIFO, not a regular file; using default baselines" in w for w in warnings)
    assert any("watched_ports.json: a FIFO, not a regular file" in w for w in warnings)
    assert any(
        "leftovers not checked: " in w and "leftovers.json: a FIFO, not a regular file" in w for w in warnings
    )
    assert "Traceback" not in result.stderr
    assert stat.S_ISFIFO(os.lstat(state / "baselines.json").st_mode)  # reported, left as it is


def test_calibrate_never_writes_through_a_planted_link(
    env: dict[str, str], state: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    (state / "baselines.json").symlink_to(target)
    result = run_gputui(["check", "--calibrate", "--no-discover"], env, timeout_s=TIMEOUT_S)
    assert result.returncode == 2
    line = result.stderr.splitlines()[-1]
    assert "baselines.json: a symbolic link (not followed); not overwriting it" in line
    assert "Traceback" not in result.stderr
    assert target.read_text() == "{}"


def test_a_foreign_state_folder_is_not_used(env: dict[str, str], state: Path) -> None:
    (state / "baselines.json").write_text('{"format": 1, "hosts": {"local": {"gpus": {"index:0": 9000}}}}')
    os.chown(state, NOBODY, NOBODY)
    result = run_gputui(["check", "--no-discover"], env, timeout_s=TIMEOUT_S)
    assert result.returncode == 0, result.stderr  # the planted 9000 MiB baseline is not believed, nor needed
    assert f"owned by uid {NOBODY}" in result.stderr
    assert "using default baselines" in result.stderr
