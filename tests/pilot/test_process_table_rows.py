"""The process table rewrites only what changed: a process list it shows already costs no cell, a new one
rewrites the rows in view (and a few either side) and leaves the rest until they scroll into view; a
process a finding names keeps a row of its own."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets.data_table import ColumnKey, RowKey

from gputui.core.jobs import ProcNode, build_forest, flatten
from gputui.core.model import HostSnapshot
from gputui.ui.widgets.proc_columns import elapsed_text
from gputui.ui.widgets.process_table import OFF_SCREEN_ROWS, ProcessTable

LAUNCHER = 1000
IDLE = 300
T0 = 1_800_000_000.0
SIZE = (200, 24)


def _proc(pid: int, ppid: int, cmdline: list[str], **extra: object) -> dict[str, object]:
    data: dict[str, object] = {
        "pid": pid,
        "ppid": ppid,
        "user": "alice",
        "uid": 1000,
        "state": "S",
        "name": cmdline[0],
        "cmdline": cmdline,
        "start_ticks": pid,
        "create_time": T0 - 3600 + pid % 7,
        "rss_kib": 2048,
        "sid": LAUNCHER,
        "pgid": LAUNCHER,
        "cgroup": "/user.slice",
    }
    data.update(extra)
    return data


def _nodes(listed_s: float) -> list[ProcNode]:
    """A trainer with two GPU workers and ``IDLE`` alike idle data loaders, its list taken at ``listed_s``."""
    processes = [_proc(LAUNCHER, 1, ["python3", "train.py"])]
    gpus = []
    for index in range(2):
        pid = 2000 + index
        processes.append(_proc(pid, LAUNCHER, ["python3", "train.py", "--rank", str(index)]))
        gpus.append(
            {
                "index": index,
                "memory_used_mib": 903,
                "memory_total_mib": 49152,
                "processes": [{"pid": pid, "used_mib": 900, "type": "compute", "visible": True}],
            }
        )
    processes += [_proc(3000 + n, LAUNCHER, ["python3", "dataloader.py"]) for n in range(IDLE)]
    sample = {"target": "t", "boot_id": "b", "processes_time": listed_s, "gpus": gpus, "processes": processes}
    return flatten(build_forest(HostSnapshot.from_dict(sample)))


class _CountingTable(ProcessTable):
    def __init__(self) -> None:
        super().__init__(id="procs")
        self.updated: list[tuple[str, str]] = []
        self.rebuilt = 0

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: Text, **kw: Any) -> None:
        self.updated.append((str(row_key), str(column_key)))
        super().update_cell(row_key, column_key, value, **kw)

    def clear(self, columns: bool = False) -> Any:
        self.rebuilt += 1
        return super().clear(columns)


class _Table(App[None]):
    def compose(self) -> ComposeResult:
        yield _CountingTable()


def _elapsed(table: ProcessTable, key: str) -> str:
    return table.get_cell(key, "elapsed").plain.strip()


async def test_a_list_shown_already_costs_nothing_and_a_new_one_only_the_rows_in_view() -> None:
    app = _Table()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(_CountingTable)
        nodes = _nodes(T0)
        table.show(nodes, now_s=T0)
        await pilot.pause()
        assert table.row_count == 1 + 2 + 1  # the launcher, its GPU workers, one row for the loaders
        assert table.select_pid(3000)
        assert table.selected_fold is not None
        # A memory sample: the same nodes (the forest is built once per process list).
        table.updated.clear()
        rebuilt = table.rebuilt
        table.show(nodes, now_s=T0)
        table.show(list(nodes), now_s=T0)
        assert table.updated == []
        assert table.rebuilt == rebuilt
        # Expanded: every loader a row, most of them out of view.
        table.action_toggle_fold()
        await pilot.pause()
        assert table.row_count == 1 + 2 + IDLE
        assert table.selected_pid == 3000
        # A new list a second later: every elapsed time moved; only rows near the view are rewritten.
        table.updated.clear()
        rebuilt = table.rebuilt
        later = _nodes(T0 + 1)
        table.show(later, now_s=T0 + 1)
        assert table.rebuilt == rebuilt
        rewritten = {row for row, _column in table.updated}
        assert {column for _row, column in table.updated} == {"elapsed"}
        assert 0 < len(rewritten) <= table.scrollable_content_region.height + 2 * OFF_SCREEN_ROWS
        last = str(3000 + IDLE - 1)
        assert last not in rewritten
        assert _elapsed(table, last) == elapsed_text(3600 - (3000 + IDLE - 1) % 7)
        # Scrolled to the end, the last rows show the new times.
        table.action_scroll_bottom()
        await pilot.pause()
        assert _elapsed(table, last) == elapsed_text(3600 + 1 - (3000 + IDLE - 1) % 7)
        assert table.selected_pid == 3000 + IDLE - 1
        # The same list again: nothing more to write.
        table.updated.clear()
        table.show(later, now_s=T0 + 1)
        assert table.updated == []


async def test_a_process_a_finding_names_keeps_its_row_and_a_collapse_keeps_the_cursor_near() -> None:
    app = _Table()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(_CountingTable)
        nodes = _nodes(T0)
        table.show(nodes, now_s=T0, keep={3005})
        await pilot.pause()
        assert table.row_count == 1 + 2 + 1 + 1
        assert table.select_pid(3005)
        assert table.selected_pid == 3005
        assert table.select_pid(3006)
        assert table.selected_fold is not None
        assert table.selected_fold.count == IDLE - 1
        table.action_toggle_fold()
        await pilot.pause()
        assert table.selected_pid == 3000
        # Collapsed from the member the cursor is on: the cursor goes to the fold.
        assert table.select_pid(3200)
        table.action_toggle_fold()
        await pilot.pause()
        assert table.selected_fold is not None
        # In a flat order the fold sorts as its first member would.
        table.show(nodes, now_s=T0, keep={3005}, sort_mode="pid")
        await pilot.pause()
        keys = [str(table.coordinate_to_cell_key((row, 0)).row_key.value) for row in range(table.row_count)]
        assert keys == ["1000", "2000", "2001", table.selected_fold.key, "3005"]
