"""The findings list: findings of one kind whose action names the same pid read as one row."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from gputui.core.model import Finding, HostSnapshot, replace
from gputui.transports.sim import LAUNCHER_PID, SCHEDULER_PID_BASE, ManualClock
from gputui.ui.widgets.findings_list import FindingsList, finding_text, group_findings, group_text
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for

WIDE = (120, 40)


def _zombie(pid: int, parent: int) -> Finding:
    return Finding(
        kind="zombie",
        target="h",
        pid=pid,
        detail=f"pid {pid} (worker) is defunct; its parent {parent} (launcher) has not reaped it",
        action=f"signal or kill its parent {parent}: a zombie itself cannot be killed",
        action_pid=parent,
    )


def test_same_kind_and_action_pid_share_a_row_in_first_place() -> None:
    orphan = Finding(kind="orphan", target="h", pid=77, detail="pid 77 holds memory", action_pid=77)
    ghost = Finding(kind="ghost_memory", target="h", gpu_index=0, detail="GPU0 holds 10 MiB")
    findings = [_zombie(10, 5), orphan, _zombie(11, 5), _zombie(20, 6), ghost, _zombie(12, 5)]
    rows = group_findings(findings)
    assert [len(r.findings) for r in rows] == [3, 1, 1, 1]
    assert [f.pid for f in rows[0].findings] == [10, 11, 12]
    assert rows[0].jump_pid == 5  # the group jumps to the parent the action names
    assert rows[1].jump_pid == 77
    assert rows[2].findings[0].pid == 20
    assert rows[2].jump_pid == 20  # a single zombie jumps to itself
    assert rows[3].jump_pid is None
    for row in rows[1:]:  # single findings read exactly as before
        assert group_text(row).plain == finding_text(row.findings[0]).plain
    text = group_text(rows[0])
    assert text.plain == " zombie  3 zombies under pid 5\n  → signal or kill 5, not the zombies"
    assert text.no_wrap
    assert text.overflow == "ellipsis"


async def test_the_demo_zombie_jumps_to_its_parent_and_the_defunct_leaders_share_a_row(
    make_app, clock: ManualClock
) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        findings = app.query_one(FindingsList)

        def stuck() -> list[Finding]:
            return [f for f in findings.findings if f.kind in ("zombie", "defunct_leader")]

        await wait_for(pilot, lambda: len(stuck()) == 8, "the eight findings of the wedged schedulers")
        # By what they hold (``verdict.order``): the defunct leaders' 288 GiB, then the zombie's nothing.
        assert [row.findings[0].kind for row in findings.rows][:2] == ["defunct_leader", "zombie"]
        assert sorted(f.pid for f in findings.rows[0].findings) == list(
            range(SCHEDULER_PID_BASE + 1, SCHEDULER_PID_BASE + 8)
        )
        clock.advance(20.0)

        def line(index: int = 0) -> str:
            return str(findings.get_option_at_index(index).prompt)

        await wait_for(pilot, lambda: "for 20 s" in line(1), "the zombie's age")
        assert line(1).startswith(f" zombie  pid {SCHEDULER_PID_BASE} (sglang::scheduler_TP0) is defunct")
        assert f"signal or kill its parent {LAUNCHER_PID}" in line(1)
        assert line().startswith(
            " defunct_leader  7 defunct leaders (4241–4247) for 20 s, 14 threads alive "
            "(14 in D), holding 288644 MiB: threads stuck in the driver"
        )
        assert "→ kill them, not their parent; wait for the threads to leave the driver" in line()
        assert findings.border_title == f"Findings ({len(findings.findings)})"
        await pilot.press("f", "down")  # the first row is highlighted on focus: Enter acts on it
        await pilot.pause()
        assert findings.highlighted == 1
        assert f"pid {SCHEDULER_PID_BASE} (sglang::scheduler_TP0)" in str(findings.tooltip)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.focused is app.query_one(ProcessTable), "focus on the table")
        assert app.query_one(ProcessTable).selected_pid == SCHEDULER_PID_BASE  # a single finding: itself
        # Wide, a row wraps within the panel: nothing of it is cut at the edge.
        width = findings.scrollable_content_region.width
        shown = [findings.render_line(y).text for y in range(findings.lines)]
        assert all(findings.render_line(y).cell_length <= width for y in range(findings.lines))
        whole = "".join(text.strip() for text in shown).replace(" ", "")
        assert line().replace(" ", "").replace("\n", "") in whole
        # In a side pane too, rows wrap: every word of them is there, nothing cut with "…".
        await pilot.resize_terminal(50, 40)
        await pilot.pause(0.3)
        assert not findings.compact
        assert _all_words_shown(findings)


def _shown_text(findings: FindingsList) -> str:
    """Every screen line of the list, scrolled through from the top."""
    lines: list[str] = []
    height = findings.scrollable_content_region.height
    for top in range(0, max(1, findings.lines), max(1, height)):
        findings.scroll_to(y=top, animate=False, immediate=True)
        offset = round(findings.scroll_offset.y)  # the last page stops at the end of the list
        last = min(height, findings.lines - offset)
        lines.extend(findings.render_line(y).text for y in range(top - offset, last))
    findings.scroll_to(y=0, animate=False, immediate=True)
    return " ".join(lines)


def _all_words_shown(findings: FindingsList) -> bool:
    shown = "".join(_shown_text(findings).split())
    return all(
        "".join(str(findings.get_option_at_index(i).prompt).split()) in shown
        for i in range(findings.option_count)
    )


@pytest.mark.parametrize("size", [(50, 40), (80, 24), (100, 30), (120, 40), (200, 50)])
async def test_wrapped_findings_never_lose_a_word(make_app, clock, size: tuple[int, int]) -> None:
    """The list is laid out for the width it is drawn in, its scrollbar's column included: a scrollbar that
    appears never cuts the ends of the wrapped lines ("for 37 s, 14 threads" stays whole)."""
    app = make_app()
    async with app.run_test(size=size) as pilot:
        findings = app.query_one(FindingsList)
        await wait_for(
            pilot,
            lambda: sum(f.kind in ("zombie", "defunct_leader") for f in findings.findings) == 8,
            "the eight findings of the wedged schedulers",
        )
        clock.advance(37.0)
        await wait_for(pilot, lambda: "for 37 s" in str(findings.get_option_at_index(1).prompt), "the age")
        await pilot.pause(0.3)
        assert all(
            findings.render_line(y).cell_length <= findings.size.width for y in range(findings.size.height)
        )
        assert _all_words_shown(findings)


class OneList(App[None]):
    def compose(self) -> ComposeResult:
        yield FindingsList()


async def test_a_ticking_age_rewrites_its_row_without_a_new_layout(monkeypatch) -> None:
    """Ages tick every second: the row's text changes in place; the screen is not laid out again, and a
    highlighted row stays highlighted."""
    app = OneList()
    async with app.run_test(size=WIDE) as pilot:
        findings = app.query_one(FindingsList)

        def stuck(age_s: int) -> list[Finding]:
            return [
                Finding(kind="uninterruptible", target="h", pid=pid, detail=f"pid {pid} in D for {age} s")
                for pid, age in ((31, age_s), (32, age_s + 1), (33, age_s + 2))
            ]

        findings.show(stuck(11))
        await pilot.pause()
        findings.highlighted = 2
        await pilot.pause()
        layouts: list[str] = []
        refresh = FindingsList.refresh

        def counting_refresh(self: FindingsList, *args: object, **kwargs: object) -> FindingsList:
            if kwargs.get("layout"):
                layouts.append("layout")
            return refresh(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(FindingsList, "refresh", counting_refresh)
        findings.show(stuck(12))
        await pilot.pause()
        assert str(findings.get_option_at_index(2).prompt).endswith("pid 33 in D for 14 s")
        assert findings.option_count == 3
        assert findings.highlighted == 2
        assert layouts == []


class ShortList(App[None]):
    def compose(self) -> ComposeResult:
        findings = FindingsList(id="findings")
        findings.styles.height = 6
        yield findings


@pytest.mark.parametrize("width", [40, 47, 53, 61])
async def test_a_list_that_grows_past_its_height_keeps_every_word(width: int) -> None:
    """Rows that fitted, then more: the scrollbar that appears takes a column the rows were not laid out
    without (the app's CSS keeps its gutter), so no line end is cut ("for 37 s, 14 threads")."""
    app = ShortList(css_path=Path(__file__).resolve().parents[2] / "gputui" / "ui" / "app.tcss")
    detail = "7 defunct leaders (4241–4247) for 37 s, 14 threads alive (14 in D), holding 288644 MiB"
    leader = Finding(kind="defunct_leader", target="h", pid=4241, detail=detail, action="kill them")
    async with app.run_test(size=(width, 12)) as pilot:
        findings = app.query_one(FindingsList)
        findings.show([leader])
        await pilot.pause(0.2)
        more = [leader, *(Finding(kind="orphan", target="h", pid=p, detail=detail) for p in (77, 78, 79))]
        findings.show(more)
        await pilot.pause(0.3)
        assert findings.lines > findings.scrollable_content_region.height  # it scrolls now
        assert _all_words_shown(findings)


async def test_rows_are_counted_as_they_wrap_at_every_width() -> None:
    """The list's line count (which sizes the panel) follows word wrapping, not characters ÷ width: the last
    row's last line is never left below the panel, at any width."""
    app = ShortList(css_path=Path(__file__).resolve().parents[2] / "gputui" / "ui" / "app.tcss")
    detail = "7 defunct leaders (4241–4247) for 37 s, 14 threads alive (14 in D), holding 288644 MiB: stuck"
    rows = [
        Finding(kind="orphan", target="h", pid=n, detail=detail[:n], action="kill it, not its parent")
        for n in range(60, 100, 7)
    ]
    async with app.run_test(size=(40, 12)) as pilot:
        findings = app.query_one(FindingsList)
        findings.show(rows)
        wrong = []
        for width in range(30, 90):
            await pilot.resize_terminal(width, 12)
            await pilot.pause(0.05)
            if not _all_words_shown(findings):
                wrong.append(width)
        assert wrong == []


class _FindingsApp(App[None]):
    """A findings list alone, with a display clock of the app's kind (epoch seconds, frozen)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock

    def compose(self) -> ComposeResult:
        yield FindingsList()


async def test_a_findings_age_ticks_on_screen_without_the_finding_being_recomputed() -> None:
    clock = ManualClock(1_800_000_000.0)
    app = _FindingsApp(clock)
    zombie = replace(_zombie(10, 5), since=clock() - 30)
    async with app.run_test(size=WIDE) as pilot:
        findings = app.query_one(FindingsList)
        findings.show([zombie])
        await pilot.pause()

        def line() -> str:
            return str(findings.get_option_at_index(0).prompt)

        assert line().startswith(f" zombie  {zombie.detail} · for 30 s")
        clock.advance(150.0)  # no new sample, no new finding: only the clock moves
        await wait_for(pilot, lambda: "for 3 min" in line(), "the age drawn again at the clock's time")
        assert findings.findings == (zombie,)
        assert line().startswith(f" zombie  {zombie.detail} · for 3 min")
        # A host whose clock is 1000 s behind this one: its findings' ages are counted on its own clock.
        host_now_s = clock() - 1000.0
        remote = replace(_zombie(12, 5), since=host_now_s - 30)
        findings.show([remote], HostSnapshot(target="h", time=host_now_s))
        await pilot.pause()
        assert line().startswith(f" zombie  {remote.detail} · for 30 s")
        clock.advance(60.0)
        await wait_for(pilot, lambda: "for 90 s" in line(), "the remote finding's age ticking")
        # A finding without a start shows no age, and nothing ticks for it.
        findings.show([_zombie(11, 5)])
        await pilot.pause()
        assert "for " not in line()
