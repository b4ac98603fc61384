"""The theme: ``--theme ansi`` follows the terminal's colours; the theme chosen is kept for the next run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gputui.ui.theme import ThemeStore, resolve, theme_names
from tests.integration._procs import REPO

from .conftest import wait_for


def test_ansi_follows_the_terminal_background_where_it_says() -> None:
    assert resolve("ansi", {"COLORFGBG": "0;15"}) == "ansi-light"
    assert resolve("ansi", {"COLORFGBG": "15;0"}) == "ansi-dark"
    assert resolve("ansi", {}) == "ansi-dark"
    assert resolve("nord", {"COLORFGBG": "0;15"}) == "nord"
    assert {"ansi", "textual-dark", "nord"} <= set(theme_names())


def _kept(store: ThemeStore, theme: str) -> bool:
    try:
        return json.loads(store.path.read_text()) == {"theme": theme}
    except (OSError, ValueError):
        return False


async def test_the_chosen_theme_is_kept_and_used_next_time(make_app, tmp_path: Path) -> None:
    store = ThemeStore(tmp_path / "ui-state")
    assert store.load() is None
    app = make_app(theme="ansi-dark", theme_store=store)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.theme == "ansi-dark"
        await wait_for(pilot, lambda: _kept(store, "ansi-dark"), "the theme written")
        app.theme = "nord"  # what the command palette's "Change theme" does
        await wait_for(pilot, lambda: _kept(store, "nord"), "the new theme written")
    again = make_app(theme_store=ThemeStore(tmp_path / "ui-state"))
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert again.theme == "nord"


async def test_a_kept_theme_that_no_longer_exists_is_ignored(make_app, tmp_path: Path) -> None:
    store = ThemeStore(tmp_path)
    store.path.write_text('{"theme": "gone-theme"}\n')
    app = make_app(theme_store=store)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.theme == "textual-dark"


def test_an_unknown_theme_is_one_line_and_exit_status_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gputui.cli", "--demo", "--theme", "[b]nope"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gputui: unknown theme '[b]nope' (one of: ansi, ")


async def test_a_fifo_for_ui_json_neither_blocks_nor_is_replaced(make_app, tmp_path: Path) -> None:
    """A planted FIFO left the TUI blank and deaf to q: now the default theme, one notice, q works."""
    import os
    import stat

    folder = tmp_path / "ui-state"
    folder.mkdir(mode=0o700)
    os.mkfifo(folder / "ui.json")
    store = ThemeStore(folder)
    app = make_app(theme_store=store)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: bool(app.notices), "the notice")
        assert app.theme == "textual-dark"
        assert any(
            "ui.json: a FIFO, not a regular file; using the default theme" in n[2] for n in app.notices
        )
        app.theme = "nord"
        await pilot.pause(0.3)
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, "the app to end on q")
    assert stat.S_ISFIFO(os.lstat(folder / "ui.json").st_mode)  # refused, never replaced
