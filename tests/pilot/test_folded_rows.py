"""A job of hundreds of alike idle helpers reads as a few rows: one ``⋯ 292 ×`` row under their parent, with
their memory and CPU together, expanded and collapsed with ``e``. A key that signals one process asks on a
fold to expand it or tag it; tagging a fold tags every member, and the kill confirmation still lists every
pid it signals. A tree kill from the helpers' parent takes them all."""

from __future__ import annotations

from gputui.core.actions import KillPlan
from gputui.transports.sim import VLLM_PID
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.proc_columns import size_text
from gputui.ui.widgets.process_table import NOTHING_FOLDED, ProcessTable, fold_refusal

from .bigjob import (
    BUSY_HELPER,
    HELPER_CPU_PCT,
    HELPER_PIDS,
    HELPER_RSS_KIB,
    HELPERS,
    PARENT,
    TARGET,
    BigJobFactory,
)
from .conftest import wait_for

WIDE = (200, 50)
DEMO_ROWS = 9
"""The healthy demo host's rows: the vLLM server, its engine and four workers, the escaping test's three."""


def _row_text(procs: ProcessTable, key: str) -> list[str]:
    return [cell.plain for cell in procs.get_row(key)]


async def _folded(pilot, app) -> ProcessTable:  # type: ignore[no-untyped-def]
    procs = app.query_one(ProcessTable)
    await wait_for(pilot, lambda: procs.select_pid(HELPER_PIDS[0]), "the helpers' row")
    return procs


def _plan(app) -> KillPlan:  # type: ignore[no-untyped-def]
    screen = app.screen
    assert isinstance(screen, ConfirmKillScreen)
    return screen.plan


async def test_alike_idle_helpers_are_one_row_under_their_parent(make_app) -> None:
    app = make_app(targets=(TARGET,), factory_type=BigJobFactory)
    async with app.run_test(size=WIDE) as pilot:
        procs = await _folded(pilot, app)
        fold = procs.selected_fold
        assert fold is not None
        assert fold.count == HELPERS
        assert fold.pids == tuple(HELPER_PIDS)
        assert fold.parent == PARENT
        # The demo host's rows, the fold, and the helper that runs (not alike: a row of its own).
        assert procs.row_count == DEMO_ROWS + 2
        assert procs.select_pid(BUSY_HELPER)
        assert procs.selected_fold is None
        cells = _row_text(procs, fold.key)
        assert cells[0].strip() == ""  # no pid: a fold is no one process
        assert cells[1].strip() == "svc-llm"
        # In the tree, one level down.
        assert cells[-1] == "   └ ⋯ 292 × python3 dataloader.py --worker (idle)"
        columns = [str(key.value) for key in procs.columns]
        assert cells[columns.index("rss")].strip() == size_text(HELPERS * HELPER_RSS_KIB)
        assert cells[columns.index("cpu")].strip() == f"{HELPERS * HELPER_CPU_PCT:.0f}"
        # Under its parent: after the server's row, before the next root's.
        order = [str(procs.coordinate_to_cell_key((row, 0)).row_key.value) for row in range(procs.row_count)]
        assert order.index(str(PARENT)) < order.index(fold.key)


async def test_e_expands_the_fold_and_collapses_it_from_any_member(make_app) -> None:
    app = make_app(targets=(TARGET,), factory_type=BigJobFactory)
    async with app.run_test(size=WIDE) as pilot:
        procs = await _folded(pilot, app)
        fold = procs.selected_fold
        assert fold is not None
        await pilot.press("e")
        await wait_for(pilot, lambda: procs.row_count == DEMO_ROWS + 1 + HELPERS, "every helper's row")
        assert procs.selected_pid == HELPER_PIDS[0]  # the cursor on the first member
        # Samples keep coming: the fold stays open, and the cursor where it is.
        host = app.hosts[0]
        seen = host.snapshot
        await wait_for(pilot, lambda: host.snapshot is not seen, "the next sample")
        await pilot.pause()
        assert procs.row_count == DEMO_ROWS + 1 + HELPERS
        await pilot.press("end")
        assert procs.cursor_row == procs.row_count - 1
        assert procs.select_pid(HELPER_PIDS[100])
        await pilot.press("e")
        await wait_for(pilot, lambda: procs.row_count == DEMO_ROWS + 2, "the fold again")
        assert procs.selected_fold is not None
        assert procs.selected_fold.key == fold.key
        # On a row that is neither a fold nor a member of one, the key says so.
        assert procs.select_pid(VLLM_PID)
        await pilot.press("e")
        await wait_for(pilot, lambda: app.notices and app.notices[-1][2] == NOTHING_FOLDED, "the answer")
        assert procs.row_count == DEMO_ROWS + 2


async def test_keys_that_signal_one_process_ask_to_expand_or_tag_a_fold(make_app) -> None:
    app = make_app(targets=(TARGET,), factory_type=BigJobFactory)
    async with app.run_test(size=WIDE) as pilot:
        procs = await _folded(pilot, app)
        fold = procs.selected_fold
        assert fold is not None
        said = fold_refusal(fold)
        assert "expand it (e)" in said
        assert "tag it (Space)" in said
        for key in ("k", "K", "T"):
            before = len(app.notices)
            await pilot.press(key)
            await wait_for(pilot, lambda before=before: len(app.notices) > before, f"the answer to {key}")
            assert app.notices[-1][2] == said
            assert not isinstance(app.screen, ConfirmKillScreen)
        assert not any(c["cmd"] == "kill" for c in app.factory.links[TARGET].commands)


async def test_a_tree_kill_from_the_parent_takes_every_folded_member(make_app) -> None:
    app = make_app(targets=(TARGET,), factory_type=BigJobFactory)
    async with app.run_test(size=WIDE) as pilot:
        procs = await _folded(pilot, app)
        assert procs.select_pid(PARENT)
        await pilot.press("T")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        signalled = {target.pid for target in _plan(app).targets}
        assert set(HELPER_PIDS) | {BUSY_HELPER, PARENT} <= signalled
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmKillScreen), "the monitor")
        assert not any(c["cmd"] == "kill" for c in app.factory.links[TARGET].commands)


async def test_tagging_a_fold_tags_every_member_and_k_signals_each_of_them(make_app) -> None:
    app = make_app(targets=(TARGET,), factory_type=BigJobFactory)
    async with app.run_test(size=WIDE) as pilot:
        procs = await _folded(pilot, app)
        fold = procs.selected_fold
        assert fold is not None
        host = app.hosts[0]
        await pilot.press("space")
        assert host.tagged == set(HELPER_PIDS)
        assert _row_text(procs, fold.key)[0].startswith("●")
        assert procs.border_title is not None
        assert f"{HELPERS} tagged" in str(procs.border_title)
        # Again on the fold: every member untagged.
        assert procs.select_pid(HELPER_PIDS[0])
        await pilot.press("space")
        assert host.tagged == set()
        # One member tagged while the fold is open: the fold says some of it is.
        assert procs.select_pid(HELPER_PIDS[0])
        await pilot.press("e")
        await wait_for(pilot, lambda: procs.selected_pid == HELPER_PIDS[0], "the first member")
        await pilot.press("space")
        assert host.tagged == {HELPER_PIDS[0]}
        assert procs.select_pid(HELPER_PIDS[1])
        await pilot.press("e")
        await wait_for(pilot, lambda: procs.selected_fold is not None, "the fold again")
        assert _row_text(procs, fold.key)[0].startswith("◐")
        # Tagging a fold that is partly tagged tags all of it; k lists every pid, each signalled.
        await pilot.press("space")  # the cursor goes on to the next row, as after any tag
        assert host.tagged == set(HELPER_PIDS)
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        assert sorted(target.pid for target in _plan(app).targets) == list(HELPER_PIDS)
        await pilot.press("enter")
        link = app.factory.links[TARGET]
        await wait_for(pilot, lambda: any(c["cmd"] == "kill" for c in link.commands), "the kill")
        (kill,) = [c for c in link.commands if c["cmd"] == "kill"]
        assert sorted(t["pid"] for t in kill["targets"]) == list(HELPER_PIDS)
        await wait_for(pilot, lambda: procs.row_count == DEMO_ROWS + 1, "the helpers gone")
        assert not procs.select_pid(HELPER_PIDS[0])


async def test_a_filter_keeps_a_fold_whole_or_the_members_it_names(make_app) -> None:
    app = make_app(targets=(TARGET,), factory_type=BigJobFactory)
    async with app.run_test(size=WIDE) as pilot:
        procs = await _folded(pilot, app)
        app.screen.filter_text = "dataloader"
        await wait_for(pilot, lambda: procs.row_count == 2, "the fold and the running helper")
        assert procs.select_pid(HELPER_PIDS[7])
        assert procs.selected_fold is not None
        app.screen.filter_text = str(HELPER_PIDS[7])
        await wait_for(pilot, lambda: procs.row_count == 1, "the one helper")
        assert procs.selected_pid == HELPER_PIDS[7]
