"""The fleet's status line: where the data comes from, how much of the fleet is at baseline, what is wrong
with Prometheus (one line, the rest of the screen stays as it was)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from gputui.core.fleet import FleetRow
from gputui.ui.widgets.fmt import duration, safe_text
from gputui.ui.widgets.text_view import TextView


def summary_text(
    source: str,
    rows: Sequence[FleetRow],
    shown: int,
    sort_mode: str,
    filter_text: str,
    error: str | None,
    answer_age_s: float | None,
) -> Text:
    """Line one: hosts, GPUs at baseline, hosts without current data, sort, filter, then the source (cut
    first on a narrow screen). Line two, only when the last query failed or none answered yet: why, and how
    old the data on screen is."""
    line = Text()
    count = len(rows)
    line.append(f"{count} host{'s' if count != 1 else ''}", style="bold")
    if shown != count:
        line.append(f" ({shown} shown)", style="cyan")
    gpus = sum(r.gpus for r in rows if r.at_baseline is not None)
    at = sum(r.at_baseline or 0 for r in rows)
    if gpus:
        line.append(f" · {at}/{gpus} GPUs at baseline", style="green" if at == gpus else "yellow")
    stale = sum(1 for r in rows if r.state in ("stale", "gone"))
    if stale:
        line.append(f" · {stale} stale", style="bold yellow")
    line.append(f" · sort: {sort_mode}", style="dim")
    if filter_text:
        line.append(" · filter: ", style="dim")
        line.append_text(safe_text(filter_text, 30, style="cyan"))
    line.append(" · ", style="dim")
    line.append_text(safe_text(source, 80, style="dim"))
    line.no_wrap = True
    line.overflow = "ellipsis"
    if error is None and answer_age_s is not None:
        return line
    second = Text("⚠ ", style="bold red")
    why = error or "waiting for the first answer…"
    second.append_text(safe_text(why, 200, style="red" if error else "dim"))
    if answer_age_s is not None:
        second.append(f" · showing the answer of {duration(answer_age_s)} ago", style="yellow")
    text = Text("\n").join([line, second])
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class FleetSummary(TextView):
    """``500 hosts · 3990/4000 GPUs at baseline · 2 stale · sort: host · prometheus http://…``."""
