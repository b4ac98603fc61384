"""The tables keep renders of what is on screen now, not of every earlier sample; labels show as written."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gputui.ui.widgets.lean_table import GENERATION_CACHES, LeanTable

ROWS, COLUMNS, SAMPLES = 6, 4, 40


class _Tables(App[None]):
    def compose(self) -> ComposeResult:
        yield LeanTable(id="lean")
        yield DataTable(id="plain")


def _cached(table: DataTable[Text]) -> dict[str, int]:
    return {name: len(getattr(table, name)) for name in GENERATION_CACHES}


async def test_renders_of_earlier_samples_are_not_kept() -> None:
    app = _Tables()
    async with app.run_test(size=(80, 30)) as pilot:
        lean_table, plain_table = app.query_one("#lean", LeanTable), app.query_one("#plain", DataTable)
        tables: list[DataTable[Text]] = [lean_table, plain_table]
        for table in tables:
            for c in range(COLUMNS):
                table.add_column(f"c{c}", key=f"c{c}", width=8)
            for r in range(ROWS):
                table.add_row(*(Text(f"{r}.{c}") for c in range(COLUMNS)), key=f"r{r}")
        for sample in range(SAMPLES):  # every sample changes every row's last cell, as ages do
            for table in tables:
                for r in range(ROWS):
                    table.update_cell(f"r{r}", f"c{COLUMNS - 1}", Text(f"{sample}s"))
            await pilot.pause()
        lean, plain = (_cached(table) for table in tables)
        assert all(hasattr(lean_table, name) for name in GENERATION_CACHES)  # Textual still has them
        # One generation: at most a render per row (and header), a cell render per cell.
        assert lean["_cell_render_cache"] <= (ROWS + 1) * COLUMNS
        assert lean["_row_render_cache"] <= ROWS + 1
        assert lean["_line_cache"] <= ROWS + 1
        # The stock table holds the dead renders of every sample that reached the screen.
        assert plain["_cell_render_cache"] > 3 * (ROWS + 1) * COLUMNS
        assert lean_table.get_cell("r0", f"c{COLUMNS - 1}").plain == f"{SAMPLES - 1}s"


async def test_a_column_label_is_text_not_markup() -> None:
    app = _Tables()
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one("#lean", LeanTable)
        key = table.add_column("[b]pid[/b] :gpu:", key="pid", width=20)
        table.add_row(Text("1"))
        await pilot.pause()
        assert table.columns[key].label.plain == "[b]pid[/b] :gpu:"


class _Pair(App[None]):
    def compose(self) -> ComposeResult:
        yield LeanTable(id="live")
        yield LeanTable(id="fresh")


def _fill(table: LeanTable, last: str, width: int | None = 8) -> None:
    for c in range(COLUMNS):
        table.add_column(f"c{c}", key=f"c{c}", width=width)
    for r in range(ROWS):
        table.add_row(*(Text(f"{r}.{c}") for c in range(COLUMNS - 1)), Text(last), key=f"r{r}")


def _screen(table: LeanTable) -> list[str]:
    return [strip.text for strip in table.render_lines(table.region.reset_offset)]


async def test_a_changed_cell_is_drawn_again_and_the_others_are_carried_over() -> None:
    app = _Pair()
    async with app.run_test(size=(80, 20)) as pilot:
        live, fresh = app.query_one("#live", LeanTable), app.query_one("#fresh", LeanTable)
        _fill(live, "0s")
        await pilot.pause()
        renders: list[object] = []
        real = app.console.render_lines

        def counted(*args: object, **kwargs: object) -> object:
            renders.append(args[0])
            return real(*args, **kwargs)  # type: ignore[arg-type]

        app.console.render_lines = counted  # type: ignore[method-assign]
        for sample in range(1, 5):  # the last column ticks, as elapsed times do
            renders.clear()
            for r in range(ROWS):
                live.update_cell(f"r{r}", f"c{COLUMNS - 1}", Text(f"{sample}s"))
            await pilot.pause()
            # From the second on (the first render's layout moved the table once more): the changed cells
            # (each in its own states), not every cell on screen.
            if sample > 1:
                assert 0 < len(renders) <= 2 * ROWS < (ROWS + 1) * COLUMNS
        renders.clear()
        live.update_cell("r2", "c0", Text("moved"))
        await pilot.pause()
        assert 0 < len(renders) <= 2
        app.console.render_lines = real  # type: ignore[method-assign]
        # What the live table shows is what a table built with the same cells shows.
        _fill(fresh, "4s")
        fresh.update_cell("r2", "c0", Text("moved"))
        await pilot.pause()
        assert _screen(live) == _screen(fresh)
        assert "moved" in "".join(_screen(live))


async def test_a_row_added_or_a_width_changed_draws_every_cell_again() -> None:
    app = _Pair()
    async with app.run_test(size=(80, 20)) as pilot:
        live = app.query_one("#live", LeanTable)
        _fill(live, "0s", width=None)
        await pilot.pause()
        live.update_cell("r0", "c0", Text("a much wider cell"), update_width=True)
        live.add_row(*(Text("new") for _ in range(COLUMNS)), key="r9")
        await pilot.pause()
        lines = "\n".join(_screen(live))
        assert "a much wider cell" in lines
        assert "new" in lines
        fresh = app.query_one("#fresh", LeanTable)
        _fill(fresh, "0s", width=None)
        fresh.update_cell("r0", "c0", Text("a much wider cell"), update_width=True)
        fresh.add_row(*(Text("new") for _ in range(COLUMNS)), key="r9")
        await pilot.pause()
        assert _screen(live) == _screen(fresh)
