"""After ``--`` every word is a target or a pid, never an option: the real CLI, as a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _gputui(home: Path, *words: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *words],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=str(home),
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def evil(tmp_path: Path) -> tuple[Path, Path]:
    """An ssh config in the working folder whose ProxyCommand leaves a mark when anything runs it."""
    mark = tmp_path / "proxycommand-ran"
    config = tmp_path / "evil.cfg"
    config.write_text(f"Host *\n  ProxyCommand touch {mark}\n  BatchMode yes\n")
    return config, mark


@pytest.mark.parametrize("client", ["openssh", "paramiko"])
def test_an_ssh_config_option_after_double_dash_is_a_refused_target(
    tmp_path: Path, evil: tuple[Path, Path], client: str
) -> None:
    _, mark = evil
    done = _gputui(tmp_path, "--ssh-client", client, "snapshot", "--", "-F./evil.cfg", "heldout-gpu")
    assert not mark.exists(), "the ssh config named after -- was used"
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "invalid ssh target '-F./evil.cfg': must not start with '-'" in done.stderr


@pytest.mark.parametrize(
    "words",
    [
        ("snapshot", "--", "-Fx"),
        ("check", "--", "-Fx"),
        ("snapshot", "--json", "--", "-oProxyCommand=touch ./proxycommand-ran"),
    ],
)
def test_words_after_double_dash_are_never_options(
    tmp_path: Path, evil: tuple[Path, Path], words: tuple[str, ...]
) -> None:
    _, mark = evil
    done = _gputui(tmp_path, *words)
    assert not mark.exists()
    assert done.returncode == 2, done.stdout
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "must not start with '-'" in lines[0]
    assert '"local"' not in done.stdout  # not silently the local host instead


def test_a_kill_pid_after_double_dash_is_a_word_not_a_signal_option(tmp_path: Path) -> None:
    """``kill -- --signal KILL``: two (refused) words, never the option."""
    done = _gputui(tmp_path, "kill", "--yes", "--", "--signal", "KILL")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "not a process id: 'KILL'" in lines[0]  # a word, as the host word before it


def test_options_before_double_dash_still_count(tmp_path: Path) -> None:
    done = _gputui(tmp_path, "snapshot", "--json", "--demo", "--", "demo-a")
    assert done.returncode == 0, done.stderr
    assert '"target": "demo-a"' in done.stdout


def test_a_command_without_targets_refuses_words_after_double_dash(tmp_path: Path) -> None:
    """The exporter takes no targets: a word after ``--`` is one line, never a served host or an option."""
    done = _gputui(tmp_path, "exporter", "--", "-Fevil.cfg")
    assert done.returncode == 2
    assert "unexpected words after --" in done.stderr
    assert "Traceback" not in done.stderr
    assert "serving" not in done.stderr
