"""The fleet table updated in place: a refresh keeps the cursor on its host, a changed host's line reads as a
table made afresh would draw it, and what the table keeps of a row to build it again is left alone by the
cyclic collector."""

from __future__ import annotations

import gc

from textual.app import App, ComposeResult
from textual.geometry import Region

from gputui.core.fleet import FleetRow
from gputui.core.model import replace
from gputui.ui.widgets.fleet_table import FleetTable


def _row(name: str, used_mib: int, age_s: float) -> FleetRow:
    return FleetRow(
        name=name,
        state="live",
        gpus=8,
        at_baseline=8 if used_mib < 1000 else 7,
        used_mib=used_mib,
        total_mib=8 * 81559,
        util_pct=90 if used_mib >= 1000 else 0,
        hottest=(3, 71),
        hottest_power_w=412.0,
        xid=((3, 79),) if name == "gpu-b" else (),
        age_s=age_s,
        server="vllm: 3 running, 1 waiting" if name == "gpu-a" else None,
        server_state="UP" if name == "gpu-a" else None,
        error=None,
        findings=1 if name == "gpu-b" else None,
    )


class Tables(App[None]):
    def compose(self) -> ComposeResult:
        yield FleetTable(id="kept")
        yield FleetTable(id="fresh")


def _line(table: FleetTable, name: str) -> tuple[str, list[tuple[int, int, str]]]:
    cell = table.get_row(name)[0]
    return cell.plain, [(span.start, span.end, str(span.style)) for span in cell.spans]


async def test_a_refresh_updates_rows_in_place_as_a_fresh_table_would_draw_them() -> None:
    app = Tables()
    async with app.run_test(size=(160, 20)) as pilot:
        kept = app.query_one("#kept", FleetTable)
        fresh = app.query_one("#fresh", FleetTable)
        names = [f"gpu-{c}" for c in "abcdef"]
        kept.show([_row(name, 3 * 1024, 4.0) for name in names])
        assert kept.select_host("gpu-d")
        await pilot.pause()
        line_keys = {name: kept.get_row(name)[0] for name in names}

        # The next answer: every host's data a few seconds older, gpu-b's memory taken.
        rows = [_row(name, 3 * 1024 if name != "gpu-b" else 40_000 * 8, 9.0) for name in names]
        kept.show(rows)
        fresh.show(rows, width=kept.size.width)
        await pilot.pause()
        assert kept.selected_host == "gpu-d"
        for name in names:
            assert _line(kept, name) == _line(fresh, name)
        assert "312G/637G" in kept.get_row("gpu-b")[0].plain
        assert "9 s" in kept.get_row("gpu-a")[0].plain
        assert [cell.plain for cell in kept.cells("gpu-b")] == [cell.plain for cell in fresh.cells("gpu-b")]

        # A host whose figures did not change keeps the line it had; the others get theirs, in one repaint.
        before = {name: kept.get_row(name)[0] for name in names}
        again = [replace(rows[0], age_s=9.0), *(replace(row, age_s=12.0) for row in rows[1:])]
        kept.show(again)
        assert kept.get_row("gpu-a")[0] is before["gpu-a"]
        assert kept.get_row("gpu-c")[0] is not before["gpu-c"]
        assert "12 s" in kept.get_row("gpu-c")[0].plain
        assert kept.get_row("gpu-c")[0] is not line_keys["gpu-c"]
        assert kept.selected_host == "gpu-d"
        await pilot.pause()
        drawn = [strip.text for strip in kept.render_lines(Region(0, 0, kept.size.width, kept.size.height))]
        assert any("gpu-c" in line and "12 s" in line for line in drawn)  # on screen, not only in the table


async def test_what_the_table_keeps_to_build_a_row_again_is_not_tracked_by_the_collector() -> None:
    app = Tables()
    async with app.run_test(size=(160, 20)):
        table = app.query_one("#kept", FleetTable)
        table.show([_row(f"gpu-{i:03d}", 3 * 1024 + i, 4.0) for i in range(50)])
        gc.collect()  # a collection stops tracking tuples of plain values, one level of nesting at a time
        for _row_shown, _inputs, pieces, _line_shown in table._rows.values():
            assert not any(gc.is_tracked(piece) for piece in pieces)
        gc.collect()
        for _row_shown, _inputs, pieces, _line_shown in table._rows.values():
            assert not gc.is_tracked(pieces)
