"""How a process's command line reads on a screen: the program's name and the arguments that say what it is.

``/root/.pyenv/versions/3.11.7/bin/python3 -u -m sglang.srt.managers.scheduler --tp-rank 3`` reads
``python3 -m sglang.srt.managers.scheduler --tp-rank 3``: the program's directory and the interpreter's own
options tell nothing about the process, and at a table's width they push out what does. A process that set
its title (``setproctitle``: one string, such as ``sglang::scheduler_TP3``) reads as that title. A process
without a command line (a zombie, a kernel thread) reads as its name in brackets, as ``ps`` shows it.

Pure string work on the model's (visible) text; ``command_display`` cuts the result to a width.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gputui.core.text.display import fit
from gputui.core.text.safe import ELLIPSIS, SafeText

_PYTHON = re.compile(r"python[0-9.]*[a-z]?")
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-X", "-W"})
"""Interpreter options whose value is the next word."""
_PYTHON_ENDS_OPTIONS = frozenset({"-m", "-c", "-"})


def program_name(word: str) -> str:
    """A path's last part (``/usr/bin/python3``, ``./bin/server`` → ``python3``, ``server``); anything else
    (a title with spaces, a bare name, a word that merely contains a slash) unchanged."""
    path = word.rstrip("/")
    if " " in word or not word.startswith(("/", "./", "../")) or "/" not in path:
        return word
    return path.rsplit("/", 1)[1]


def command_words(argv: Sequence[str], name: str | None = None) -> list[str]:
    """The words a person needs to tell this process from its siblings.

    Args:
        argv: The command line (untrusted text).
        name: The process name, used when there is no command line.

    Returns:
        ``[program, *arguments]`` with the program's directory and a Python interpreter's own options left
        out; the title alone for a process that set one; ``["[name]"]`` without a command line.
    """
    words = list(argv)
    while words and words[-1] == "":
        words.pop()  # a title written over the argument area leaves empty arguments behind
    if not words:
        return [f"[{name or '?'}]"]
    program = program_name(words[0])
    rest = words[1:]
    if _PYTHON.fullmatch(program):
        while rest and rest[0].startswith("-") and rest[0] not in _PYTHON_ENDS_OPTIONS:
            option = rest.pop(0)
            if option in _PYTHON_OPTIONS_WITH_VALUE and rest:
                rest.pop(0)
    return [program, *rest]


def command_display(argv: Sequence[str], name: str | None, max_len: int, truncated: bool = False) -> SafeText:
    """How a process's command reads everywhere it is shown (the TUI's tables and dialogs, ``snapshot`` and
    ``kill``): ``command_words`` at most ``max_len`` long (``display.fit``).

    ``truncated``: the collector cut the command line (``Proc.cmdline_truncated``); it then always ends with
    the ellipsis, even when what arrived fits in ``max_len``.
    """
    words = command_words(argv, name)
    shown = fit(" ".join(words), max_len)
    if argv and truncated and not shown.endswith(ELLIPSIS):
        # One more character makes a line that filled the width exactly one character too long.
        shown = SafeText(shown + ELLIPSIS) if len(shown) < max_len else fit(shown + " ", max_len)
    return shown
