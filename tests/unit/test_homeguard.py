"""The suite's own guard: user paths isolated, and a run that writes the user's files fails."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from tests.homeguard import changes, guarded_paths, listing


def test_the_run_sees_only_temporary_user_paths() -> None:
    real = pwd.getpwuid(os.getuid()).pw_dir
    for var in ("HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        value = os.environ[var]
        assert "gputui-tests-home-" in value, (var, value)
        assert not value.startswith(real + os.sep) or real == "/", (var, value)
    assert str(Path.home()).startswith(os.environ["HOME"])


def test_the_guard_names_what_changed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    paths = [p for p in guarded_paths({"HOME": str(home)}) if str(p).startswith(str(home))]
    assert home / ".ssh" in paths
    assert home / ".local/state/gputui" in paths
    before = listing(paths)
    (home / ".ssh" / "known_hosts").write_text("planted\n")
    state = home / ".local" / "state" / "gputui"
    state.mkdir(parents=True)
    (state / "audit.jsonl").write_text("{}\n")
    found = changes(before, listing(paths))
    assert f"added {home / '.ssh' / 'known_hosts'}" in found
    assert f"added {state / 'audit.jsonl'}" in found
    assert changes(listing(paths), listing(paths)) == []


def test_a_run_that_writes_the_user_state_fails(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A nested run with a home of its own: its test appends to that home's audit log, the run fails."""
    home = tmp_path / "user"
    (home / ".local" / "state" / "gputui").mkdir(parents=True)
    pytester.makeconftest('pytest_plugins = ["tests.homeguard"]')
    pytester.makepyfile(
        f"""
        def test_leaks():
            with open({str(home / ".local" / "state" / "gputui" / "audit.jsonl")!r}, "a") as log:
                log.write("{{}}\\n")
        """
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAILED: the run changed the user's own files*audit.jsonl*"])
