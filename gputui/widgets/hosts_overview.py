"""The overview of every host's GPUs: one line per host, one block per GPU, the verdict."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from gputui.model import HostSnapshot
from gputui.widgets.fmt import SPARK_CHARS, duration, mem_pct, safe_text
from gputui.widgets.health_panel import health_dot
from gputui.widgets.host_bar import HostStatus, status_text


def _gpu_block(used_mib: int | None, total_mib: int | None, baseline_mib: int) -> Text:
    pct = mem_pct(used_mib, total_mib)
    if pct is None or used_mib is None:
        return Text("?", style="dim")
    if used_mib <= baseline_mib:
        return Text("·", style="green")
    level = min(len(SPARK_CHARS) - 1, pct * len(SPARK_CHARS) // 100)
    return Text(SPARK_CHARS[level], style="red" if pct >= 90 else "yellow")


class HostsOverview(Static):
    """``gpu-node-07  ▇▇▇▇▇▇▇▇  ▲  0/8 GPUs at baseline  ⚠ 8 findings`` for every host: one block per GPU,
    the worst health-endpoint state, the verdict (shown when several targets are open)."""

    _lines: dict[int, tuple[tuple[object, ...], HostSnapshot | None, Text]] = {}
    """Per host index: what its line was built from (the snapshot by identity) and the line."""
    _shown: Text | None = None
    """The text shown now (None before the first ``show``)."""

    def show(self, statuses: Sequence[HostStatus], active_index: int) -> None:
        """One line per host; the shown host is marked with ▶."""
        lines: list[Text] = []
        name_cells = min(20, max((len(s.target) for s in statuses), default=4))
        cache: dict[int, tuple[tuple[object, ...], HostSnapshot | None, Text]] = {}
        for index, status in enumerate(statuses):
            # A host's line is rebuilt only when its snapshot (by identity) or what its status shows changed.
            age = duration(status.age_s) if status.state != "live" and status.age_s is not None else None
            key = (
                status.target,
                index == active_index,
                name_cells,
                status.state,
                age,
                status.error,
                status.halted,
            )
            cached = self._lines.get(index)
            if cached is not None and cached[0] == key and cached[1] is status.snapshot:
                cache[index] = cached
                lines.append(cached[2])
                continue
            line = self._line(status, index == active_index, name_cells)
            cache[index] = (key, status.snapshot, line)
            lines.append(line)
        self._lines = cache
        text = Text("\n").join(lines)
        text.no_wrap = True
        text.overflow = "ellipsis"
        if text == self._shown:
            return  # unchanged: skip the relayout and repaint (the app redraws this a few times a second)
        self._shown = text
        self.update(text)

    @staticmethod
    def _line(status: HostStatus, active: bool, name_cells: int) -> Text:
        """One host's line: GPU blocks, the worst health state, the verdict, findings, a non-live status."""
        line = Text("▶ " if active else "  ", style="bold")
        line.append_text(safe_text(status.target, name_cells))
        line.pad_right(name_cells + 2 - len(line.plain) + 2)
        snapshot = status.snapshot
        if snapshot is None or not snapshot.gpus:
            line.append_text(status_text(status))
            return line
        baselines = snapshot.verdict.baseline_mib if snapshot.verdict else {}
        for gpu in snapshot.gpus:
            line.append_text(_gpu_block(gpu.memory_used_mib, gpu.memory_total_mib, baselines.get(gpu.key, 3)))
        line.append("  ")
        line.append_text(health_dot(snapshot.health))
        line.append("  ")
        verdict = snapshot.verdict
        if verdict is None:
            line.append("–", style="dim")
        elif verdict.clean:
            line.append(f"CLEAN ✓ {verdict.gpus_at_baseline}/{len(verdict.gpus)}", style="bold green")
        else:
            line.append(f"{verdict.gpus_at_baseline}/{len(verdict.gpus)} GPUs at baseline", style="yellow")
        if snapshot.findings:
            count = len(snapshot.findings)
            line.append(f"  ⚠ {count} finding{'s' if count != 1 else ''}", style="bold red")
        if status.state != "live":
            line.append("  ")
            line.append_text(status_text(status))
        return line
