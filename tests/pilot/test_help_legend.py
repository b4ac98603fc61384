"""``?``: one row per key, then what every mark on the screen means, drawn as the screen draws it; and the
overview's server dot has one glyph per state."""

from __future__ import annotations

from typing import Any

import pytest
from rich.style import Style
from textual.pilot import Pilot
from textual.widget import Widget

from gputui.core.model import EndpointSample
from gputui.core.servers import SERVER_STATES
from gputui.ui import legend
from gputui.ui.screens.help import LEGEND_TITLE, HelpScreen
from gputui.ui.widgets.endpoint_panel import STATE_STYLES, health_dot
from gputui.ui.widgets.process_table import ProcessTable
from tests.pilot.conftest import wait_for


def _lines(widget: Widget) -> list[str]:
    """The widget's rendered lines, all of them (scrolled into view or not)."""
    return [widget.render_line(y).text.rstrip() for y in range(widget.size.height)]


def _styles_of(widget: Widget, glyph: str) -> list[Style]:
    """The styles of the cells the legend draws ``glyph`` in (its first cell on each line it starts)."""
    styles = []
    for y in range(widget.size.height):
        for segment in widget.render_line(y):
            if segment.text.strip() == glyph.strip() and segment.style is not None:
                styles.append(segment.style)
    return styles


async def _open_help(pilot: Pilot[Any]) -> HelpScreen:
    app = pilot.app
    await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
    await pilot.press("question_mark")
    await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
    screen = app.screen
    assert isinstance(screen, HelpScreen)
    return screen


@pytest.mark.parametrize("columns", [50, 120])
async def test_question_mark_shows_every_mark_with_its_meaning(make_app: Any, columns: int) -> None:
    app = make_app()
    async with app.run_test(size=(columns, 40)) as pilot:
        screen = await _open_help(pilot)
        title = "\n".join(_lines(screen.query_one("#help-legend-title")))
        assert LEGEND_TITLE in title
        table = screen.query_one("#help-legend")
        text = "\n".join(_lines(table))
        flat = " ".join(text.split())
        for mark in legend.MARKS:
            if mark.part == legend.CLI:
                continue
            assert mark.glyph.strip() in text, mark
            # The meaning wraps at 50 columns: compare with the line breaks taken out.
            assert " ".join(mark.meaning.split()) in flat, mark
        for part in legend.PARTS:
            assert part in text
        assert legend.CLI not in text  # the CLI's marks are the README's, not the screen's


async def test_the_legend_draws_each_server_glyph_in_its_state_colour(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open_help(pilot)
        table = screen.query_one("#help-legend")
        for mark in legend.SERVER_MARKS:
            wanted = Style.parse(mark.style)
            drawn = _styles_of(table, mark.glyph)
            # The screen adds its own background where the mark has none.
            assert any(
                (wanted.color is None or style.color == wanted.color)
                and bool(style.bold) == bool(wanted.bold)
                and bool(style.dim) == bool(wanted.dim)
                and (wanted.bgcolor is None or style.bgcolor == wanted.bgcolor)
                for style in drawn
            ), (mark.state, drawn)


async def test_one_row_per_key(make_app: Any) -> None:
    app = make_app()
    async with app.run_test(size=(120, 60)) as pilot:
        screen = await _open_help(pilot)
        keys = _lines(screen.query_one("#help-key-list"))
        # A key's first line starts one cell in (the table's padding); the lines under it start further in.
        firsts = [line.split()[0] for line in keys if line.strip() and not line.startswith("  ")]
        assert firsts.count("Esc") == 1
        assert firsts.count("Enter") == 1
        esc = next(i for i, line in enumerate(keys) if line.startswith(" Esc"))
        # Esc's places, each on a line of its own under the one key.
        assert "confirmation: cancel: nothing is signalled" in "\n".join(keys[esc : esc + 12])
        assert "gpus: back to the process list" in "\n".join(keys[esc : esc + 12])


async def test_read_only_help_leaves_the_kill_keys_out_but_keeps_the_legend(make_app: Any) -> None:
    app = make_app(read_only=True)
    async with app.run_test(size=(80, 40)) as pilot:
        screen = await _open_help(pilot)
        keys = _lines(screen.query_one("#help-key-list"))
        assert not [line for line in keys if line.startswith((" k ", " K ", " T ", " X "))]
        assert [line for line in keys if line.startswith(" c ")]
        assert "✖" in "\n".join(_lines(screen.query_one("#help-legend")))


def test_each_server_state_has_a_glyph_and_colour_of_its_own() -> None:
    """▲ was UNHEALTHY, TIMEOUT, ERROR, STARTING and BUSY at once: now one glyph a state, everywhere it is
    drawn from the same table."""
    states = [*SERVER_STATES, None]
    assert {mark.state for mark in legend.SERVER_MARKS} == set(states)
    glyphs = [legend.SERVER_GLYPHS[state] for state in states]
    assert len(set(glyphs)) == len(glyphs)
    for state in states:
        dot = health_dot([EndpointSample(url="http://127.0.0.1:30000/health", state=state)])
        assert dot.plain == legend.SERVER_GLYPHS[state]
        assert str(dot.style) == STATE_STYLES[state] == legend.SERVER_STYLES[state]


def test_the_worst_state_decides_the_dot() -> None:
    def dot(*states: str | None) -> str:
        return health_dot(EndpointSample(url=f"http://h/{i}", state=s) for i, s in enumerate(states)).plain

    assert dot("UP", "BUSY") == legend.SERVER_GLYPHS["BUSY"] != legend.SERVER_GLYPHS["UNHEALTHY"]
    assert dot("UP", "UNHEALTHY") == "▲"
    assert dot("TIMEOUT", "DOWN", "UP") == "✖"
    assert dot("UP", "STALLED") == legend.SERVER_GLYPHS["STALLED"] != "✖"


def test_within_a_part_of_the_screen_a_mark_means_one_thing() -> None:
    seen: dict[tuple[str, str, str], str] = {}
    for mark in legend.MARKS:
        key = (mark.part, mark.glyph, mark.style)
        assert key not in seen, (key, seen.get(key), mark.meaning)
        seen[key] = mark.meaning
        assert mark.part in legend.README_PARTS
        assert mark.meaning
        assert mark.glyph.strip()
