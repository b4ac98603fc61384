"""The GPU panel: one row per GPU with a memory bar, figures and a memory history sparkline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from gputui.core.model import Gpu
from gputui.core.verdict import assessed
from gputui.ui import keymap
from gputui.ui.widgets.fmt import DASH, bar, dash, mem_pct, safe_text, sparkline

WIDE_MIN_CELLS = 44
"""Below this content width a GPU gets the compact line (tmux side pane): memory used only, no total."""
POWER_MIN_CELLS = 52
"""From this content width on, the power column is shown and the history is at least 8 samples wide."""
HISTORY_MAX_CELLS = 40
"""The history grows with the panel's width up to this many samples."""


class GpuPanel(Widget):
    """All GPUs of one host, one line each under a header line; eight fit in ten rows with the border.

    Call ``show()`` with each new snapshot's GPUs; the panel re-renders itself (a handful of lines, so there
    is nothing to gain from diffing). With ``selectable``, it takes the focus: ↑/↓ choose a GPU and Enter (or
    a click) posts ``Opened``.
    """

    DEFAULT_CSS = """
    GpuPanel { height: auto; }
    """

    BINDINGS = keymap.bindings(keymap.GPUS)

    cursor: reactive[int] = reactive(0)
    """The row of the GPU Enter opens (an index into the GPUs shown)."""

    @dataclass
    class Opened(Message):
        """The user asked for one GPU's detail."""

        index: int
        """The GPU's index (``Gpu.index``)."""

    class Left(Message):
        """The user left the panel (Esc)."""

    def __init__(
        self,
        *,
        id: str | None = None,
        classes: str | None = None,
        selectable: bool = False,  # noqa: A002
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.can_focus = selectable
        self._gpus: tuple[Gpu, ...] = ()
        self._history_mib: Mapping[int, Sequence[int]] = {}
        self._baseline_mib: Mapping[int, int] = {}
        self._message = "waiting for the first sample…"
        self._shown_key: tuple[object, ...] | None = None

    def show(
        self,
        gpus: Sequence[Gpu],
        history_mib: Mapping[int, Sequence[int]],
        baseline_mib: Mapping[int, int],
        message: str = "",
    ) -> None:
        """Show these GPUs.

        Args:
            gpus: The GPUs of the latest snapshot.
            history_mib: GPU index → recent memory.used samples in MiB, oldest first.
            baseline_mib: GPU index → idle baseline in MiB (memory at or under it is drawn as idle).
            message: A line shown instead of the rows when there are no GPUs (host error, no data yet).
        """
        gpus = tuple(gpus)
        message = message or "waiting for the first sample…"
        rows_changed = len(gpus) != len(self._gpus)
        # Kept whatever is drawn: a wider panel after a resize draws more of the history.
        self._gpus = gpus
        self._history_mib = history_mib
        self._baseline_mib = baseline_mib
        self._message = message
        # The sparkline draws the last few samples at this width: a sample leaving it, or a steady figure
        # repeated, changes nothing drawn.
        spark_cells = _columns(self._width())[3]
        drawn = tuple(
            (index, tuple(samples)[-spark_cells:]) for index, samples in sorted(history_mib.items())
        )
        key = (gpus, drawn, tuple(sorted(baseline_mib.items())), message)
        if key == self._shown_key:
            return  # the same figures again (an idle host): nothing to repaint
        self._shown_key = key
        self.refresh(layout=rows_changed)

    def _width(self) -> int:
        return max(24, self.size.width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1 + max(1, len(self._gpus))

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        """The GPUs shown."""
        return self._gpus

    def watch_cursor(self) -> None:
        self.refresh()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def action_cursor_up(self) -> None:
        self.cursor = max(0, self.cursor - 1)

    def action_cursor_down(self) -> None:
        self.cursor = max(0, min(len(self._gpus) - 1, self.cursor + 1))

    def action_open(self) -> None:
        if 0 <= self.cursor < len(self._gpus):
            self.post_message(self.Opened(self._gpus[self.cursor].index))

    def action_leave(self) -> None:
        self.post_message(self.Left())

    def on_click(self, event: events.Click) -> None:
        row = event.y - 1  # under the header line
        if self.can_focus and 0 <= row < len(self._gpus):
            self.cursor = row
            self.action_open()

    def _style_for(self, gpu: Gpu) -> str:
        used, baseline = gpu.memory_used_mib, self._baseline_mib.get(gpu.index)
        if used is None:
            return "dim"
        if baseline is not None and used <= baseline:
            return "green"
        pct = mem_pct(used, gpu.memory_total_mib) or 0
        return "red" if pct >= 90 else "yellow" if pct >= 50 else "cyan"

    def render(self) -> Text:
        width = self._width()
        wide, power, bar_cells, spark_cells = _columns(width)
        if wide:
            header = (
                f"{'#':>2} {'memory':<{bar_cells}} {'used/total':>11} {'mem':>4} {'util':>4} {'temp':>4}"
                + (f" {'power':>5} history" if power else " hist")
            )
        else:
            header = f"{'#':>1} {'memory':<{bar_cells}} {'MiB':>6} {'mem':>4} {'util':>4} {'°C':>4} hist"
        lines = [Text(header, style="dim")]
        if not self._gpus:
            lines.append(Text(self._message or DASH, style="dim italic"))
        for row, gpu in enumerate(self._gpus):
            line = self._line(gpu, wide, power, bar_cells, spark_cells, width)
            if self.has_focus and row == self.cursor:
                line.stylize("reverse", 0, 2 if not wide else 3)
            lines.append(line)
        text = Text("\n").join(lines)
        text.no_wrap = True
        text.overflow = "ellipsis"
        return text

    def _line(self, gpu: Gpu, wide: bool, power: bool, bar_cells: int, spark_cells: int, width: int) -> Text:
        style = self._style_for(gpu)
        # "!" beside the index: the GPU's own fitness asks for an action first (the GPU view says which).
        mark = "!" if gpu.fitness is not None and assessed(gpu).blocking else " "
        index = f"{gpu.index:>2}{mark}" if wide else f"{gpu.index}{mark}"
        line = Text(index, style="bold red" if mark == "!" else "bold")
        if gpu.error is not None:
            line.append("error: ", style="bold red")
            line.append_text(safe_text(gpu.error, max(8, width - 12), style="red"))
            return line
        pct = mem_pct(gpu.memory_used_mib, gpu.memory_total_mib)
        line.append_text(bar(gpu.memory_used_mib, gpu.memory_total_mib, bar_cells, style))
        if wide:
            used_total = f"{dash(gpu.memory_used_mib)}/{dash(gpu.memory_total_mib)}"
            line.append(f" {used_total:>11}", style=style)
        else:
            line.append(f" {dash(gpu.memory_used_mib):>6}", style=style)
        line.append(f" {dash(pct, '%'):>4}", style=style)
        line.append(f" {dash(gpu.utilization_pct, '%'):>4}")
        line.append(f" {dash(gpu.temperature_c, '°C' if wide else '°'):>4}")
        if power:
            watts = DASH if gpu.power_w is None else f"{gpu.power_w:.0f}W"
            line.append(f" {watts:>5}")
        line.append(" ")
        history = self._history_mib.get(gpu.index, ())
        line.append(sparkline(history, gpu.memory_total_mib or 0, spark_cells), style=style)
        return line


def _columns(width: int) -> tuple[bool, bool, int, int]:
    """For a panel ``width`` cells wide: whether it is wide (used/total), whether it shows power, the memory
    bar's cells and the sparkline's."""
    wide = width >= WIDE_MIN_CELLS
    power = width >= POWER_MIN_CELLS
    spark_cells = max(8, min(HISTORY_MAX_CELLS, (width - POWER_MIN_CELLS) // 2)) if power else 6
    if wide:
        # Fixed columns: "ii " + " used/total" + " mem%" + " util" + " temp" + " " = 31 cells, + " power".
        return wide, power, max(4, width - 31 - (6 if power else 0) - spark_cells), spark_cells
    # Fixed columns: "i " + " MiB" + " mem%" + " util" + " temp " = 25 cells.
    return wide, power, max(4, width - 25 - spark_cells), spark_cells
