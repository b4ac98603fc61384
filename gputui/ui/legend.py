"""What every glyph and colour on the screen means, in one table: the help screen (``?``) and the README's
legend are made from it, and the widgets that draw a server's state take its glyph and colour from here.

A ``Mark`` row is one glyph (or one colour of a glyph) as a part of the screen draws it. Within one part of
the screen a glyph means one thing (a test holds it); the same glyph may mean another thing elsewhere only
where the part says which (the bar and history cells are heights, wherever they are).

Plain data: no Textual or Rich import, so that the README check and the CLI can read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gputui.core.servers import BUSY, DOWN, ERROR, STALLED, STARTING, TIMEOUT, UNHEALTHY, UP

HOSTS = "hosts"
GPUS = "GPUs"
SERVERS = "servers"
PROCESSES = "processes"
FINDINGS = "findings"
VERDICT = "verdict"
FOOTER = "footer"
CLI = "check, snapshot"
PARTS = (HOSTS, GPUS, SERVERS, PROCESSES, FINDINGS, VERDICT, FOOTER)
"""The parts of the screen, in the order the legend lists them."""
README_PARTS = (*PARTS, CLI)
"""The README's legend adds what ``check`` and ``snapshot`` print."""


@dataclass(frozen=True)
class Mark:
    """One glyph or colour and what it means.

    Attributes:
        glyph: As drawn ("✖", "● live", "<defunct>").
        style: The Rich style it is drawn in ("" for the text's own colour).
        meaning: What it says, one phrase.
        part: Where it is drawn (``PARTS``).
    """

    glyph: str
    style: str
    meaning: str
    part: str


@dataclass(frozen=True)
class ServerMark:
    """How a server state is drawn: its glyph (the host overview's dot), its colour (the health panel's state
    word, the dot), and what it means."""

    state: str | None
    glyph: str
    style: str
    meaning: str


SERVER_MARKS: tuple[ServerMark, ...] = (
    ServerMark(UP, "●", "bold green", "UP: /health answers 200"),
    ServerMark(STARTING, "◌", "bold cyan", "STARTING: a young launcher loading, not served yet"),
    ServerMark(
        BUSY, "◆", "bold black on yellow", "BUSY: /health fails while tokens flow: working, do not kill"
    ),
    ServerMark(UNHEALTHY, "▲", "bold yellow", "UNHEALTHY: 5xx or 429, and not a young server still loading"),
    ServerMark(TIMEOUT, "◔", "bold dark_orange", "TIMEOUT: no answer within the probe's deadline"),
    ServerMark(
        ERROR, "◇", "bold magenta", "ERROR: the probe cannot tell (bad URL, name, TLS, a 4xx, a reset)"
    ),
    ServerMark(
        STALLED, "■", "bold white on red", "STALLED: requests pending, no token generated for the window"
    ),
    ServerMark(DOWN, "✖", "bold red", "DOWN: nothing listens (refused); expected once its server is killed"),
    ServerMark(None, "○", "dim", "not probed yet"),
)
"""Every server state, from best to worst; the overview's dot shows a host's worst."""

SERVER_GLYPHS: dict[str | None, str] = {mark.state: mark.glyph for mark in SERVER_MARKS}
SERVER_STYLES: dict[str | None, str] = {mark.state: mark.style for mark in SERVER_MARKS}

MARKS: tuple[Mark, ...] = (
    Mark("● live", "green", "connected, data current", HOSTS),
    Mark("● stale", "yellow", "no fresh data: the age of the last sample follows", HOSTS),
    Mark("● error", "red", "cannot reach the host; 'not retrying (r)': press r", HOSTS),
    Mark("○", "dim", "connecting, no sample yet", HOSTS),
    Mark("▶", "bold", "host overview: the host shown below", HOSTS),
    Mark(
        "⏸ PAUSED",
        "bold yellow",
        "the panels are frozen (p); the host bar and clean-slate line stay live",
        HOSTS,
    ),
    Mark(
        "!", "bold red", "beside a GPU's index: the GPU itself needs an action first (Enter says which)", GPUS
    ),
    Mark("█", "green", "memory bar: at its idle baseline", GPUS),
    Mark("█", "cyan", "memory bar: memory held, under half the card", GPUS),
    Mark("█", "yellow", "memory bar: half the card or more", GPUS),
    Mark("█", "red", "memory bar: 90 % of the card or more", GPUS),
    Mark("░", "dim", "memory bar: free memory", GPUS),
    Mark("▁▃▅█", "", "history: memory over the last minutes, the taller the fuller", GPUS),
    Mark("·", "green", "host overview: a GPU at its baseline (else a block as tall as its memory)", GPUS),
    Mark("?", "dim", "host overview: a GPU whose memory was not read", GPUS),
    Mark("–", "dim", "no value: not reported or not supported (never a zero)", GPUS),
    Mark(
        "▁▂▃▅▆▇█", "", "probe history: one cell a probe, the taller the worse, coloured as its state", SERVERS
    ),
    Mark("●", "bold magenta", "before a pid: tagged (Space); k, K act on the tagged", PROCESSES),
    Mark("└", "", "tree view: a child of the process above", PROCESSES),
    Mark(
        " Z ",
        "bold white on red",
        "S column: defunct (a zombie, or a leader whose threads live on)",
        PROCESSES,
    ),
    Mark(
        " D ",
        "bold black on yellow",
        "S column: uninterruptible, waiting in the kernel (or the driver)",
        PROCESSES,
    ),
    Mark(
        " S ", "", "S column: the kernel's other states as it says them (S sleeping, R running, …)", PROCESSES
    ),
    Mark("<defunct>", "bold red", "a zombie, or a defunct leader whose threads live on", PROCESSES),
    Mark(
        "[graphics]",
        "cyan",
        "holds graphics memory only (the display stack): left out of kill-all",
        PROCESSES,
    ),
    Mark(
        "0:41984", "yellow", "GPU memory the process holds, GPU:MiB (its tree's total beside it)", PROCESSES
    ),
    Mark(
        " zombie ",
        "bold white on red",
        "a finding's kind, each its own colour (zombie, survivor, …)",
        FINDINGS,
    ),
    Mark("→", "dim", "under a finding: what to do about it", FINDINGS),
    Mark("· for 3 min", "dim", "how long the state it is about has lasted", FINDINGS),
    Mark("CLEAN ✓", "bold green", "the clean slate: workers gone, no residue, every GPU fit", VERDICT),
    Mark("checking…", "bold yellow", "a clean-slate check sampling (c, X): not yet confirmed", VERDICT),
    Mark("NOT CLEAN", "bold red", "something is left: memory held, a process, a port, a segment", VERDICT),
    Mark("NOT READY", "bold red", "a GPU needs an action first: reset, reboot, the fabric", VERDICT),
    Mark(
        "CANNOT TELL", "bold yellow", "the host or a GPU could not be judged: no data is not clean", VERDICT
    ),
    Mark("██▇▅▂▁", "bold green", "the receipt's drain curve: memory from the kill back to baseline", VERDICT),
    Mark("⚠", "bold red", "host overview: how many findings that host has follows", FINDINGS),
    Mark("✓", "", "a GPU or a fact that holds (ok where the output cannot carry ✓)", CLI),
    Mark("✗", "", "a GPU or a fact that does not hold, its reasons after it (X in ASCII)", CLI),
    Mark("!", "", "a finding: its kind, then its sentence", CLI),
    Mark("->", "", "under a finding: what to do about it, often the command", CLI),
    *(Mark(mark.glyph, mark.style, mark.meaning, SERVERS) for mark in SERVER_MARKS),
    Mark("? Help", "", "the keys that work now, in the order they matter; ? lists them all", FOOTER),
    Mark("▏^p palette", "", "the command palette (Ctrl+P): every action by name", FOOTER),
)
"""Every mark the TUI draws, by part, in the order the legend lists them."""


def marks_of(part: str) -> tuple[Mark, ...]:
    """The marks of one part, in table order (the server states last among the servers' marks)."""
    return tuple(mark for mark in MARKS if mark.part == part)


def rows(parts: Iterable[str] = PARTS) -> list[tuple[str, Mark]]:
    """(part, mark) for the parts given, part by part, each in table order."""
    return [(part, mark) for part in parts for mark in marks_of(part)]


def markdown_table(parts: Iterable[str] = README_PARTS) -> str:
    """The README's legend: one row per mark, with the colour named."""
    lines = ["| where | mark | colour | means |", "| --- | --- | --- | --- |"]
    for part, mark in rows(parts):
        glyph = mark.glyph.strip() or mark.glyph
        shown = f"`{glyph}`".replace("|", "\\|")
        colour = mark.style.replace("bold", "").strip() or "text"
        lines.append(f"| {part} | {shown} | {colour} | {mark.meaning} |")
    return "\n".join(lines)
