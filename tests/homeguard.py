"""Keep the suite off the user's own files: every user path points into a temporary directory, and the run
fails if the real home's gputui state, config or cache, or its ``.ssh``, changed while it ran.

At configure time ``HOME`` and the XDG base directories are pointed at a fresh temporary tree, so the
suite and every subprocess it starts with the inherited environment (the CLI, the agent, ssh) write there.
OpenSSH reads the home from the password database, not ``$HOME``, so a stray ``ssh`` would still touch the
real ``~/.ssh``: the listings taken before and after the run catch that too. The real home is both the
``$HOME`` the run started with and the password database's.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

USER_VARS = {
    "HOME": "home",
    "XDG_STATE_HOME": "state",
    "XDG_CONFIG_HOME": "config",
    "XDG_CACHE_HOME": "cache",
    "XDG_DATA_HOME": "data",
}
GUARDED_UNDER_HOME = (".local/state/gputui", ".config/gputui", ".cache/gputui", ".local/share/gputui", ".ssh")
GUARDED_UNDER_XDG = ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME")

Listing = dict[str, tuple[str, int, int, int]]


def guarded_paths(environ: dict[str, str]) -> list[Path]:
    """The user's gputui directories and ``.ssh`` under every real home and XDG directory of ``environ``."""
    homes = {Path(pwd.getpwuid(os.getuid()).pw_dir)}
    if environ.get("HOME"):
        homes.add(Path(environ["HOME"]))
    paths = {home / sub for home in homes for sub in GUARDED_UNDER_HOME}
    for var in GUARDED_UNDER_XDG:
        base = environ.get(var, "")
        if base and os.path.isabs(base):
            paths.add(Path(base) / "gputui")
    return sorted(paths)


def listing(paths: list[Path]) -> Listing:
    """Path -> (kind, size, mtime ns, mode) of everything under ``paths`` (links not followed)."""
    seen: Listing = {}
    for root in paths:
        stack = [root]
        while stack:
            path = stack.pop()
            try:
                info = path.lstat()
            except OSError:
                continue
            kind = "dir" if stat.S_ISDIR(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "file"
            seen[str(path)] = (kind, info.st_size if kind == "file" else 0, info.st_mtime_ns, info.st_mode)
            if kind == "dir":
                try:
                    stack.extend(path.iterdir())
                except OSError:
                    continue
    return seen


def changes(before: Listing, after: Listing) -> list[str]:
    """ "added /root/.ssh/known_hosts", "changed …", "removed …", sorted."""
    lines = [f"added {p}" for p in after if p not in before]
    lines += [f"removed {p}" for p in before if p not in after]
    lines += [f"changed {p}" for p in before if p in after and before[p] != after[p]]
    return sorted(lines)


_state: dict[str, object] = {}


def pytest_configure(config: pytest.Config) -> None:
    if "paths" in _state:
        return  # a nested run in the same process (pytester): the outer run isolates and guards
    paths = guarded_paths(dict(os.environ))
    _state["config"] = config
    _state["paths"] = paths
    _state["before"] = listing(paths)
    root = Path(tempfile.mkdtemp(prefix="gputui-tests-home-"))
    _state["root"] = root
    for var, name in USER_VARS.items():
        directory = root / name
        directory.mkdir(mode=0o700)
        os.environ[var] = str(directory)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    paths = _state.get("paths")
    if not isinstance(paths, list) or session.config is not _state.get("config"):
        return  # only the run that isolated the paths judges them
    before = _state["before"]
    assert isinstance(before, dict)
    found = changes(before, listing(paths))
    _state["after"] = found
    if found:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    root = _state.get("root")
    if isinstance(root, Path):
        shutil.rmtree(root, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    found = _state.get("after")
    if config is _state.get("config") and isinstance(found, list) and found:
        terminalreporter.write_line(
            "FAILED: the run changed the user's own files (tests must use temporary directories): "
            + "; ".join(found[:20])
            + (f"; and {len(found) - 20} more" if len(found) > 20 else ""),
            red=True,
        )
