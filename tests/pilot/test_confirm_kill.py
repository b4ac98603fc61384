"""The confirmation says what a kill frees: zombie children's memory counts for their parent."""

from __future__ import annotations

from gputui.core.actions import KillPlan, ZombieNote
from gputui.transports.sim import LAUNCHER_PID, NSYS_PID, SCHEDULER_PID_BASE
from gputui.ui.screens.confirm_kill import ConfirmKillScreen, note_lines, pid_ranges, plan_table
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for

WIDE = (120, 40)
DEFUNCT_LEADERS = range(SCHEDULER_PID_BASE + 1, SCHEDULER_PID_BASE + 8)
"""The demo's schedulers TP1-TP7: defunct leaders whose threads hold their memory (TP0 is a true zombie)."""
HELD_MIB = 288_644


def test_pid_ranges() -> None:
    assert pid_ranges([4243, 4240, 4241, 4242]) == "4240–4243"
    assert pid_ranges([7, 1, 3, 4, 5]) == "1, 3–5, 7"
    assert pid_ranges([9]) == "9"
    assert pid_ranges(range(0, 40, 2), max_parts=3) == "0, 2, 4, …"


def test_notes_of_one_parents_zombies_collapse_and_others_stay() -> None:
    zombies = (
        ZombieNote(11, 10, asked=False),
        ZombieNote(21, 20, asked=False),
        ZombieNote(12, 10, asked=False),
        ZombieNote(30, 3, asked=True),
        ZombieNote(31, 3, asked=True),
    )
    # A note that reads like a zombie's but is not one of the plan's zombies stays as it is.
    lookalike = "pid 13 is a zombie: it goes when its parent 10 is signalled"
    notes = (*(z.text for z in zombies), lookalike, "the agent re-reads each tree")
    plan = KillPlan("h", "boot", "TERM", True, 5.0, (), notes=notes, zombies=zombies)
    assert note_lines(plan) == [
        "2 zombies (11–12) go when their parent 10 is signalled",
        "pid 21 is a zombie: it goes when its parent 20 is signalled",
        "2 zombies (30–31) cannot be signalled: their parent 3 is, instead",
        lookalike,
        "the agent re-reads each tree",
    ]


async def test_kill_all_lists_the_defunct_leaders_with_their_memory_and_one_zombie_line(make_app) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        snapshot = app.hosts[0].snapshot
        assert sum(snapshot.process(pid).gpu_total_mib for pid in DEFUNCT_LEADERS) == HELD_MIB
        await pilot.press("X")
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        await pilot.pause()
        rows = {
            line.split()[0]: line.split() for line in _table_lines(plan_table(screen.plan, screen.snapshot))
        }
        # The defunct leaders are signalled themselves, each with what it holds; the launcher frees nothing.
        assert rows[str(SCHEDULER_PID_BASE + 1)][2] == "41228"  # grouped as the process table groups it
        assert rows[str(LAUNCHER_PID)][2] == "0"
        assert rows[str(NSYS_PID)][2] == "0"
        assert str(screen.query_one("#confirm-total").render()) == "frees ≈ 288644 MiB on 7 GPUs"
        notes = str(screen.query_one("#confirm-notes").render())
        assert "• pid 4240 is a zombie: it goes when its parent 4200 is signalled" in notes
        assert "pid 4241 is a zombie" not in notes
        await pilot.press("escape")


async def test_tagged_zombies_collapse_into_their_parents_line(make_app) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        table = app.query_one(ProcessTable)
        assert table.select_pid(SCHEDULER_PID_BASE)
        await pilot.press("space", "space", "space")
        await pilot.press("K")
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        # The true zombie (TP0) is routed to its parent; the defunct leaders TP1 and TP2 are signalled.
        assert [t.pid for t in screen.plan.targets] == [
            LAUNCHER_PID,
            SCHEDULER_PID_BASE + 1,
            SCHEDULER_PID_BASE + 2,
        ]
        await pilot.pause()
        notes = str(screen.query_one("#confirm-notes").render())
        assert notes == "• pid 4240 is a zombie: its parent 4200 will be signalled instead"
        assert str(screen.query_one("#confirm-total").render()) == "frees ≈ 82464 MiB on 2 GPUs"


async def test_a_process_without_gpu_memory_frees_nothing(make_app) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        assert app.query_one(ProcessTable).select_pid(NSYS_PID)
        await pilot.press("k")
        screen = app.screen
        assert isinstance(screen, ConfirmKillScreen)
        await pilot.pause()
        assert str(screen.query_one("#confirm-total").render()) == "frees: no GPU memory"


def _table_lines(renderable) -> list[str]:  # type: ignore[no-untyped-def]
    import io

    from rich.console import Console

    console = Console(width=110, record=True, color_system=None, file=io.StringIO())
    console.print(renderable)
    return [line for line in console.export_text().splitlines() if line.strip() and line.split()[0].isdigit()]
