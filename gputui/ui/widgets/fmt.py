"""Small formatting helpers shared by the widgets: dashes for missing values, bars, sparklines, safe text.

Every string that came from a machine goes through ``safe_text``: control characters are made visible
(``gputui.core.text.safe.visible``) and the result is a ``Text``, which Textual never parses as markup.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.text import Text

from gputui.core.text import DASH as DASH
from gputui.core.text import ELLIPSIS, command_display, command_words, fit, program_name
from gputui.core.text import dash as dash
from gputui.core.text import duration as duration

_MEASURE = Console(file=io.StringIO(), width=1000, color_system=None)
"""Lays text out to count its rows (``screen_rows``); writes nowhere."""

SPARK_CHARS = "▁▂▃▄▅▆▇█"
BAR_FULL = "█"
BAR_EMPTY = "░"


def safe_text(value: str | None, max_len: int | None = None, style: str = "") -> Text:
    """The model's (visible) text as a ``Text``, never markup, cut to ``max_len`` (``display.fit``); None: the
    dash."""
    if value is None:
        return Text(DASH, style=style)
    return Text(value if max_len is None else fit(value, max_len), style=style)


command_text = command_display
"""The one command-display function (``core.text.cmdline.command_display``), as the widgets name it."""


def figure_text(value: float) -> str:
    """A whole figure (MiB, W, °C) as every table, dialog and receipt writes it: digits only, no thousands
    separator (``329880``), as nvidia-smi and the process table print MiB."""
    return str(round(value))


def mem_pct(used_mib: int | None, total_mib: int | None) -> int | None:
    """Memory use in whole percent, or None when either figure is missing."""
    if used_mib is None or not total_mib:
        return None
    return round(100 * used_mib / total_mib)


def bar(used_mib: int | None, total_mib: int | None, width_cells: int, style: str) -> Text:
    """A memory bar ``width_cells`` wide; a dash-filled bar when the figures are missing."""
    width_cells = max(1, width_cells)
    if used_mib is None or not total_mib:
        return Text(DASH * width_cells, style="dim")
    filled = round(width_cells * min(1.0, max(0.0, used_mib / total_mib)))
    return Text.assemble((BAR_FULL * filled, style), (BAR_EMPTY * (width_cells - filled), "dim"))


def sparkline(values: Sequence[int], top: int, width_cells: int) -> str:
    """The last ``width_cells`` values as block characters scaled to ``top``; padded on the left."""
    recent = list(values)[-width_cells:] if width_cells > 0 else []
    return _blocks(recent, top, width_cells)


def resample(values: Sequence[float], width_cells: int) -> list[float]:
    """At most ``width_cells`` values: as they are when they fit, else the largest of each stretch."""
    values = list(values)
    if width_cells <= 0:
        return []
    if len(values) <= width_cells:
        return values
    step = len(values) / width_cells
    return [max(values[int(i * step) : int((i + 1) * step) or 1]) for i in range(width_cells)]


def curve(values: Sequence[int], width_cells: int) -> str:
    """All of ``values`` in at most ``width_cells`` blocks (the largest of each stretch), scaled to the
    largest: the shape of a whole series, such as memory draining after a kill."""
    shown = [int(v) for v in resample(values, width_cells)]
    return _blocks(shown, max(shown), len(shown)) if shown else ""


def _blocks(recent: Sequence[int], top: int, width_cells: int) -> str:
    chars = []
    for value in recent:
        level = 0 if top <= 0 else min(len(SPARK_CHARS) - 1, int(len(SPARK_CHARS) * value / (top + 1)))
        chars.append(SPARK_CHARS[max(0, level)])
    return " " * (width_cells - len(chars)) + "".join(chars)


def screen_rows(text: Text, width: int, wrap: bool = True) -> int:
    """The screen rows ``text`` takes at ``width`` cells: one per line, more for lines that wrap at the
    spaces between words (a word wider than the row folds), as the widgets draw them."""
    width = max(1, width)
    if not wrap:
        return len(text.split("\n"))
    return sum(
        1 if line.cell_len <= width else len(line.wrap(_MEASURE, width, overflow="fold"))
        for line in text.split("\n")
    )


def pid_ranges(pids: Iterable[int], max_parts: int = 6) -> str:
    """``4240–4247`` for a run, ``4240, 4242, 4250–4252`` otherwise; more than ``max_parts`` end in "…"."""
    ordered = sorted(set(pids))
    parts: list[str] = []
    start = previous = None
    for pid in [*ordered, None]:
        if previous is not None and pid == previous + 1:
            previous = pid
            continue
        if start is not None and previous is not None:
            parts.append(str(start) if start == previous else f"{start}–{previous}")
        start = previous = pid
    if len(parts) > max_parts:
        parts = [*parts[:max_parts], "…"]
    return ", ".join(parts)


RANK_OPTIONS = frozenset(
    {
        "--tp-rank",
        "--tp_rank",
        "--dp-rank",
        "--dp_rank",
        "--pp-rank",
        "--pp_rank",
        "--ep-rank",
        "--ep_rank",
        "--node-rank",
        "--node_rank",
        "--local-rank",
        "--local_rank",
        "--rank",
    }
)
"""Arguments whose value tells one worker of a job from its siblings (tensor-, data-, pipeline-, expert-
parallel rank, the node's, the process's own)."""
RANK_VARIABLES = ("LOCAL_RANK=", "RANK=", "NODE_RANK=")
"""``NAME=value`` words (``env LOCAL_RANK=3 python …``) that do the same."""
_TITLE_PARTS = "::"
"""``sglang::scheduler_TP3``: a process title's owner, then what this process is."""


def _rank_words(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the rank arguments, with their values; every other word), each in argv order."""
    ranks: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        option = word.split("=", 1)[0]
        if option in RANK_OPTIONS and "=" in word:
            ranks.append(word)
        elif option in RANK_OPTIONS and index + 1 < len(words):
            ranks.extend(words[index : index + 2])
            index += 1
        elif word.startswith(RANK_VARIABLES):
            ranks.append(word)
        else:
            rest.append(word)
        index += 1
    return ranks, rest


def _title_in(title: str, room: int) -> str:
    """A process title (or ``[name]``) in ``room`` cells, its end kept: what tells ``…scheduler_TP3`` from
    ``…scheduler_TP4`` is at the end; the owner before ``::`` and a name's brackets go first."""
    if len(title) <= room:
        return title
    bracketed = title.startswith("[") and title.endswith("]")
    inner = title[1:-1] if bracketed else title
    if _TITLE_PARTS in inner:
        inner = inner.rsplit(_TITLE_PARTS, 1)[1]
    if len(inner) <= room or "\\" in inner:
        return inner  # escapes are cut by the table, never in half here
    return ELLIPSIS + inner[len(inner) - room + 1 :]


def telling_command(argv: Sequence[str], name: str | None, room: int, max_len: int, truncated: bool) -> str:
    """A command in a column ``room`` cells wide, with what tells it from its siblings in those cells.

    The whole command (``command_text``) when it fits. Else a process title keeps its end
    (``…scheduler_TP3``); a Python module or a program with rank arguments (``--tp-rank 3``, ``--dp-rank``,
    ``--node-rank``, ``LOCAL_RANK=3``) reads as the module, shortened from the left, then its ranks, then the
    other arguments (still there for ←/→). ``max_len`` bounds the whole text.
    """
    whole = command_text(argv, name, max_len, truncated)
    if room <= 0 or len(whole) <= room:
        return whole
    words = command_words(argv, name)
    if len(words) == 1:
        return _title_in(words[0], room)
    program, rest = words[0], words[1:]
    if program == "env":  # ``env LOCAL_RANK=3 torchrun …``: the program is the first word not a setting
        settings = [w for w in rest if "=" in w and not w.startswith("-")]
        others_after = [w for w in rest if w not in settings]
        if others_after:
            program, rest = program_name(others_after[0]), settings + others_after[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        program, rest = rest[1], rest[2:]
    ranks, others = _rank_words(rest)
    if not ranks:
        return whole
    tail = " ".join(ranks)
    head = f"{program} {tail}"
    parts = program.split(".")
    for start in range(1, len(parts)):
        if len(head) <= room:
            break
        head = f"{ELLIPSIS}{'.'.join(parts[start:])} {tail}"
    if len(head) > room:
        head = f"{tail} {program}"  # the rank first: the column shows it, whatever it cuts
    return fit(" ".join([head, *others]), max_len)
