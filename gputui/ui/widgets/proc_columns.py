"""The process table's optional columns: owner, per-process SM %, CPU %, RSS and elapsed time.

Each is shown while the table is wide enough to keep the command readable, and dropped in reverse priority
as it narrows (elapsed first, owner last). The owner column appears once some process has an owner that is
not just its user (a Slurm step, pod, container or unit); SM % once the collector reports a per-process
sample. A figure that is not known is the dash, never a zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text

from gputui.agent.proc.owners import OWNER_CONTAINER, OWNER_POD, OWNER_SLURM, OWNER_UNIT
from gputui.core.model import Proc
from gputui.core.text import fit
from gputui.ui.widgets.fmt import DASH

if TYPE_CHECKING:
    from gputui.core.jobs import ProcNode

OWNER_COLUMN_CHARS = 20
ELAPSED_CELLS = 13
"""``999-23:59:59`` and the gap before it: a process up for months never runs into the RSS beside it."""
OPTIONAL_COLUMNS = (
    ("owner", " owner", OWNER_COLUMN_CHARS),
    ("sm", "  SM%", 5),
    ("cpu", "  CPU%", 6),
    ("rss", "    RSS", 7),
    ("elapsed", "      elapsed", ELAPSED_CELLS),
)
"""(key, label, width), by priority: the first ones stay longest as the table narrows."""
COMMAND_MIN_CHARS = 80
"""Optional columns are added only while the command column keeps at least this many cells."""
_OWNER_STYLES = {OWNER_SLURM: "magenta", OWNER_POD: "cyan", OWNER_CONTAINER: "blue", OWNER_UNIT: "green"}


def choose_optional(width_cells: int, fixed_cells: int, nodes: Sequence[ProcNode]) -> tuple[str, ...]:
    """The optional columns a table ``width_cells`` wide shows, beside columns of ``fixed_cells``."""
    procs = [node.proc for node in nodes]
    wanted = {
        "owner": any(p.owner is not None and p.owner.kind != "user" for p in procs),
        "sm": any(p.gpu_sm_pct for p in procs),
        "cpu": True,
        "rss": True,
        "elapsed": True,
    }
    room = width_cells - fixed_cells - COMMAND_MIN_CHARS
    chosen: list[str] = []
    for key, _label, width in OPTIONAL_COLUMNS:
        if wanted[key] and width <= room:
            chosen.append(key)
            room -= width
    return tuple(chosen)


def size_text(kib: int | None) -> str:
    """``812M``, ``1.4G``: a resident size the way top prints it."""
    if kib is None or kib < 0:
        return DASH
    if kib < 1024:
        return f"{kib}K"
    if kib < 1024 * 1024:
        return f"{kib // 1024}M"
    return f"{kib / (1024 * 1024):.1f}G"


def elapsed_text(seconds: float | None) -> str:
    """Time since a process started, as ``ps -o etime`` prints it: ``mm:ss``, ``hh:mm:ss``, ``d-hh:mm:ss``."""
    if seconds is None or seconds < 0 or seconds != seconds:
        return DASH
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"


def cell_inputs(proc: Proc, keys: tuple[str, ...], now_s: float | None) -> tuple[object, ...]:
    """What the optional cells of a row are built from (a row is rebuilt only when these change)."""
    elapsed = None if now_s is None or proc.create_time is None else int(now_s - proc.create_time)
    return (
        keys,
        proc.owner,
        tuple(sorted(proc.gpu_sm_pct.items())),
        proc.cpu_pct,
        proc.rss_kib,
        elapsed if "elapsed" in keys else None,
    )


def optional_cells(proc: Proc, keys: tuple[str, ...], now_s: float | None) -> list[Text]:
    """The optional cells of one row, in the order of ``keys``."""
    cells: list[Text] = []
    for key in keys:
        if key == "owner":
            owner = proc.owner
            label = DASH if owner is None else fit(owner.label, OWNER_COLUMN_CHARS - 1)
            style = "dim" if owner is None else _OWNER_STYLES.get(owner.kind, "dim")
            cells.append(Text(" " + label, style=style))
        elif key == "sm":
            sm = max(proc.gpu_sm_pct.values()) if proc.gpu_sm_pct else None
            cells.append(Text((DASH if sm is None else str(sm)).rjust(5)))
        elif key == "cpu":
            cpu = DASH if proc.cpu_pct is None else f"{proc.cpu_pct:.0f}"
            cells.append(Text(cpu.rjust(6)))
        elif key == "rss":
            cells.append(Text(size_text(proc.rss_kib).rjust(7)))
        elif key == "elapsed":
            since = None if now_s is None or proc.create_time is None else now_s - proc.create_time
            cells.append(Text(elapsed_text(since).rjust(ELAPSED_CELLS), style="dim"))
    return cells
