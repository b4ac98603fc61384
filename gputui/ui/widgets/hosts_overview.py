"""The overview of every host's GPUs: one line per host, one block per GPU, the verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

from gputui.core.model import NOT_READY, HostSnapshot
from gputui.core.servers import worst_state
from gputui.ui.widgets.endpoint_panel import health_dot
from gputui.ui.widgets.fmt import SPARK_CHARS, duration, mem_pct, safe_text
from gputui.ui.widgets.host_bar import HostStatus, status_text


def _gpu_level(used_mib: int | None, total_mib: int | None, baseline_mib: int) -> tuple[str, str]:
    """The block of one GPU as (glyph, style)."""
    pct = mem_pct(used_mib, total_mib)
    if pct is None or used_mib is None:
        return "?", "dim"
    if used_mib <= baseline_mib:
        return "·", "green"
    level = min(len(SPARK_CHARS) - 1, pct * len(SPARK_CHARS) // 100)
    return SPARK_CHARS[level], "red" if pct >= 90 else "yellow"


def _shown_key(snapshot: HostSnapshot | None) -> tuple[object, ...] | None:
    """Everything of ``snapshot`` a host's line shows: equal keys draw equal lines."""
    if snapshot is None:
        return None
    verdict = snapshot.verdict
    baselines = verdict.baseline_mib if verdict else {}
    blocks = tuple(
        _gpu_level(gpu.memory_used_mib, gpu.memory_total_mib, baselines.get(gpu.key, 3))
        for gpu in snapshot.gpus
    )
    health = (bool(snapshot.endpoints), worst_state(snapshot.endpoints) if snapshot.endpoints else None)
    summary = None if verdict is None else (verdict.clean, verdict.gpus_at_baseline, len(verdict.gpus))
    return blocks, health, summary, len(snapshot.findings)


class HostsOverview(Static):
    """``gpu-node-07  ▇▇▇▇▇▇▇▇  ▲  0/8 GPUs at baseline  ⚠ 8 findings`` for every host: one block per GPU,
    the worst health-endpoint state, the verdict (shown when several targets are open)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lines: dict[int, tuple[tuple[object, ...], Text]] = {}
        """Per host index: what its line shows (``_shown_key`` and the status) and the line."""
        self._keys: dict[int, tuple[HostSnapshot | None, tuple[object, ...] | None]] = {}
        """Per host index: its latest snapshot (by identity) and that snapshot's ``_shown_key``."""
        self._shown: Text | None = None
        """The text shown now (None before the first ``show``)."""

    def show(self, statuses: Sequence[HostStatus], active_index: int) -> None:
        """One line per host; the shown host is marked with ▶."""
        lines: list[Text] = []
        name_cells = min(20, max((len(s.target) for s in statuses), default=4))
        cache: dict[int, tuple[tuple[object, ...], Text]] = {}
        changed = len(statuses) != len(self._lines)
        for index, status in enumerate(statuses):
            # A host's line is rebuilt only when something it shows changed: a new snapshot every second
            # usually shows the same blocks, health and verdict.
            age = duration(status.age_s) if status.state != "live" and status.age_s is not None else None
            key = (
                status.target,
                index == active_index,
                name_cells,
                status.state,
                age,
                status.error,
                status.halted,
                self._snapshot_key(index, status.snapshot),
            )
            cached = self._lines.get(index)
            if cached is not None and cached[0] == key:
                cache[index] = cached
                lines.append(cached[1])
                continue
            changed = True
            line = self._line(status, index == active_index, name_cells)
            cache[index] = (key, line)
            lines.append(line)
        self._lines = cache
        self._keys = {i: k for i, k in self._keys.items() if i < len(statuses)}
        if not changed and self._shown is not None:
            return  # every line as shown: skip the join, the relayout and the repaint
        text = Text("\n").join(lines)
        text.no_wrap = True
        text.overflow = "ellipsis"
        if text == self._shown:
            return
        self._shown = text
        self.update(text)

    def _snapshot_key(self, index: int, snapshot: HostSnapshot | None) -> tuple[object, ...] | None:
        """``_shown_key`` of a host's snapshot, worked out once per snapshot (the overview redraws often)."""
        cached = self._keys.get(index)
        if cached is not None and cached[0] is snapshot:
            return cached[1]
        key = _shown_key(snapshot)
        self._keys[index] = (snapshot, key)
        return key

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
            glyph, style = _gpu_level(gpu.memory_used_mib, gpu.memory_total_mib, baselines.get(gpu.key, 3))
            line.append(glyph, style=style)
        line.append("  ")
        line.append_text(health_dot(snapshot.endpoints))
        line.append("  ")
        verdict = snapshot.verdict
        if verdict is None:
            line.append("–", style="dim")
        elif verdict.clean:
            line.append(f"CLEAN ✓ {verdict.gpus_at_baseline}/{len(verdict.gpus)}", style="bold green")
        elif verdict.not_ready:
            line.append(
                f"{NOT_READY}: {len(verdict.not_ready)} GPU{'s' if len(verdict.not_ready) != 1 else ''}",
                style="bold red",
            )
        else:
            line.append(f"{verdict.gpus_at_baseline}/{len(verdict.gpus)} GPUs at baseline", style="yellow")
        if snapshot.findings:
            count = len(snapshot.findings)
            line.append(f"  ⚠ {count} finding{'s' if count != 1 else ''}", style="bold red")
        if status.state != "live":
            line.append("  ")
            line.append_text(status_text(status))
        return line
