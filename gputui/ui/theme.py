"""The colour theme: Textual's themes, ``ansi`` for the terminal's own colours, and the choice kept.

``--theme NAME`` picks one of Textual's themes; ``--theme ansi`` uses the terminal's palette (its 16 ANSI
colours and default background), light or dark as the terminal says in ``COLORFGBG`` where it says it. The
theme last chosen (by ``--theme`` or the command palette's "Change theme") is kept in the state directory
and used when ``--theme`` is not given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from gputui.core.store import saved
from gputui.ui.session.tasks import spawn

ANSI = "ansi"
"""The name that means "the terminal's own colours"."""
SETTINGS_FILE = "ui.json"


def theme_names() -> list[str]:
    """Every name ``--theme`` takes: ``ansi`` and Textual's own themes."""
    from textual.theme import BUILTIN_THEMES

    return [ANSI, *sorted(BUILTIN_THEMES)]


def resolve(name: str, env: Mapping[str, str] | None = None) -> str:
    """The Textual theme ``name`` stands for: ``ansi`` → ``ansi-light`` on a light terminal, else
    ``ansi-dark``; any other name as it is."""
    if name != ANSI:
        return name
    env = os.environ if env is None else env
    # COLORFGBG is "foreground;background" (rxvt, Konsole, iTerm2 …): 7 and 15 are the light backgrounds.
    background = env.get("COLORFGBG", "").rsplit(";", 1)[-1]
    return "ansi-light" if background in ("7", "15") else "ansi-dark"


class ThemeStore:
    """The theme last chosen, in ``ui.json`` under the state directory.

    Args:
        directory: Where the file lives (None: the XDG state directory).
    """

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory
        self._saved: str | None = None
        self._unsafe = False
        self.warning: str | None = None
        """Why the kept theme could not be read (one line), None when it could."""

    @property
    def path(self) -> Path:
        return Path(saved.state_dir() if self._directory is None else self._directory) / SETTINGS_FILE

    def load(self) -> str | None:
        """The theme kept, None when none is (or the file cannot be read: the default theme is fine).

        A file refused as unsafe (``safefile``) leaves its one line in ``warning``, and is never replaced.
        """
        try:
            raw = saved.read_store_file(self.path)
            document = json.loads(raw.decode("utf-8")) if raw is not None else None
        except saved.StoreError as exc:
            self.warning = f"{exc}; using the default theme"
            self._unsafe = True
            return None
        except ValueError:
            return None
        theme = document.get("theme") if isinstance(document, dict) else None
        self._saved = theme if isinstance(theme, str) else None
        return self._saved

    def save(self, theme: str) -> None:
        """Keep ``theme`` (written on a thread of its own; a failure to write only loses the choice)."""
        if theme == self._saved or self._unsafe:
            return
        self._saved = theme
        path = self.path

        def write() -> None:
            try:
                saved.ensure_state_dir(path.parent)
                saved.atomic_write_text(path, json.dumps({"theme": theme}) + "\n")
            except saved.StoreError:
                pass

        spawn("theme", write)
