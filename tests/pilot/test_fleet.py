"""Every key of the fleet view, over an answer recorded from a real Prometheus; Enter opens the host in the
host view (a simulated host here) and Esc comes back."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import pytest

from gputui.core.fleet import SORT_MODES
from gputui.transports.prometheus import PrometheusError
from gputui.transports.sim import ManualClock
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.fleet import FleetScreen
from gputui.ui.screens.help import HelpScreen
from gputui.ui.widgets.fleet_notes import FleetNotes
from gputui.ui.widgets.fleet_summary import FleetSummary
from gputui.ui.widgets.fleet_table import FleetTable
from tests.data.prometheus import load_answer, recorded_fleet_app
from tests.pilot.conftest import wait_for


class RecordedPrometheus:
    """Answers every query with a recorded answer (changeable by the test), and counts the queries."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.queries = 0
        self.failing = False
        self.lock = threading.Lock()

    def __call__(self, url: str, query: str, timeout_s: float) -> dict[str, Any]:
        with self.lock:
            self.queries += 1
            if self.failing:
                raise PrometheusError(f"prometheus {url}: cannot connect: Connection refused")
            return self.document


def fleet_app(
    clock: ManualClock, tmp_path: Path, document: dict[str, Any] | None = None
) -> tuple[GpuTuiApp, FleetScreen, RecordedPrometheus]:
    prometheus = RecordedPrometheus(document or load_answer())
    app, fleet = recorded_fleet_app(prometheus, clock, tmp_path / "audit", refresh_s=0.05)
    return app, fleet, prometheus


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path


async def _ready(pilot: Any, fleet: FleetScreen) -> FleetTable:
    table = fleet.query_one(FleetTable)
    await wait_for(pilot, lambda: table.row_count == 4, "the recorded hosts")
    return table


async def test_enter_opens_the_host_and_escape_comes_back(clock: ManualClock, state_dir: Path) -> None:
    app, fleet, prometheus = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _ready(pilot, fleet)
        assert app.screen is fleet
        table.select_host("gpu-a")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is not fleet, "the host view")
        assert [h.target for h in app.hosts] == ["gpu-a"]
        await wait_for(pilot, lambda: app.hosts[0].snapshot is not None, "the host's first snapshot")
        first = app.hosts[0]
        # While the host view is shown, the fleet view asks Prometheus nothing.
        await pilot.pause(0.3)
        asked = prometheus.queries
        await pilot.pause(0.5)
        assert prometheus.queries <= asked + 1
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is fleet, "the fleet again")
        await wait_for(pilot, lambda: prometheus.queries > asked + 1, "queries again")
        assert table.selected_host == "gpu-a"  # the cursor stayed
        # Back in the fleet view, the host opened from it is closed: out of the host bar, its poller stopped.
        assert [h.target for h in app.hosts] == []
        assert first.poller is not None
        assert first.poller.stopped
        # Opening it again connects afresh, once.
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is not fleet, "the host view")
        assert [h.target for h in app.hosts] == ["gpu-a"]
        assert app.hosts[0] is not first
        await pilot.press("escape")
        table.select_host("gpu-b")
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: len(app.hosts) == 1 and app.hosts[0].target == "gpu-b", "the other host"
        )
        assert app.monitor.active is not None
        assert app.monitor.active.target == "gpu-b"
        assert not app.query_one("#body").has_class("-multi")  # gpu-a left the host bar


async def test_slash_filters_and_escape_clears(clock: ManualClock, state_dir: Path) -> None:
    app, fleet, _ = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _ready(pilot, fleet)
        await pilot.press("slash", "v", "l", "l", "m")
        await wait_for(pilot, lambda: table.row_count == 1, "the filter")
        assert table.selected_host == "gpu-a"
        assert fleet.filter_text == "vllm"
        assert "(1 shown)" in str(fleet.query_one(FleetSummary).render())
        await pilot.press("enter")  # keeps the filter, back to the table
        assert fleet.query_one(FleetTable).has_focus
        assert table.row_count == 1
        await pilot.press("escape")
        await wait_for(pilot, lambda: table.row_count == 4, "every host again")
        assert fleet.filter_text == ""
        assert app.screen is fleet


async def test_s_cycles_the_sort(clock: ManualClock, state_dir: Path) -> None:
    app, fleet, _ = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _ready(pilot, fleet)

        def order() -> list[str]:
            return [str(table.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(table.row_count)]

        assert order() == sorted(order())
        assert fleet.sort_mode == "host"
        seen = {}
        for mode in SORT_MODES[1:] + SORT_MODES[:1]:
            await pilot.press("s")
            assert fleet.sort_mode == mode
            seen[mode] = order()
        assert seen["memory"][0] == "gpu-a"
        assert seen["memory"][-1] == "gpu-c"
        assert seen["age"][0] == "gpu-c"
        assert seen["host"] == sorted(seen["host"])
        assert "sort: host" in str(fleet.query_one(FleetSummary).render())


async def test_a_key_reorders_the_rows_it_has_and_answers_are_summarised_off_the_ui_thread(
    clock: ManualClock, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gputui.ui.screens import fleet as fleet_module

    made_on: list[str] = []
    real = fleet_module.summarize

    def counted(*args: Any, **kwargs: Any) -> Any:
        made_on.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(fleet_module, "summarize", counted)
    app, fleet, prometheus = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, fleet)
        await wait_for(pilot, lambda: fleet.answers >= 2, "two answers")
        # Every answer's rows were made on the poller's thread, none on the UI's.
        assert made_on
        assert set(made_on) == {"gputui-fleet"}
        fleet.poller.interval_s = 3600.0
        await pilot.pause(0.2)
        before = len(made_on)
        keys_at = app.last_input_s
        for _ in SORT_MODES:
            await pilot.press("s")
        await pilot.press("slash", "g", "p", "u", "escape")
        assert len(made_on) == before  # a new order or filter summarised nothing again
        assert app.last_input_s > keys_at  # the keys were seen: a refresh in flight pauses for them


async def test_r_asks_now_and_rows_follow_new_answers(clock: ManualClock, state_dir: Path) -> None:
    app, fleet, prometheus = fleet_app(clock, state_dir)
    fleet.poller.interval_s = 3600.0  # only r asks again
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _ready(pilot, fleet)
        await wait_for(pilot, lambda: fleet.answers >= 1, "the first answer")
        await pilot.pause(0.3)
        answered = fleet.answers
        changed = copy.deepcopy(prometheus.document)
        changed["data"]["result"] = [
            i for i in changed["data"]["result"] if i["metric"].get("Hostname") != "gpu-b"
        ]
        prometheus.document = changed
        await pilot.pause(0.3)
        assert fleet.answers == answered
        await pilot.press("r")
        await wait_for(pilot, lambda: fleet.answers == answered + 1, "the answer r asked for")
        row = table.cells("gpu-b")
        assert any("gone" in cell.plain for cell in row)
        assert table.row_count == 4  # a host that left Prometheus stays, marked gone


async def test_question_mark_opens_the_fleet_keys(clock: ManualClock, state_dir: Path) -> None:
    app, fleet, _ = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, fleet)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is fleet, "the fleet again")


async def test_q_quits_from_the_fleet(clock: ManualClock, state_dir: Path) -> None:
    app, fleet, _ = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, fleet)
        await pilot.press("q")
        await pilot.pause(0.2)
    assert app.return_value == 0


async def test_a_host_whose_name_cannot_be_a_target_is_refused(clock: ManualClock, state_dir: Path) -> None:
    document = load_answer()
    for item in document["data"]["result"]:
        if item["metric"].get("Hostname") == "gpu-b":
            item["metric"]["Hostname"] = "-oProxyCommand=touch x"
    app, fleet, _ = fleet_app(clock, state_dir, document)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        table = await _ready(pilot, fleet)
        assert table.select_host("-oProxyCommand=touch x")
        await pilot.pause()
        assert "Enter: ssh not possible" in str(fleet.query_one(FleetNotes).render())
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert app.screen is fleet
        assert len(app.hosts) == 0
        toasts = [str(toast.render()) for toast in app.screen.query("Toast")]
        assert any("must not start with '-'" in toast for toast in toasts)


async def test_prometheus_failing_keeps_the_view_and_its_keys(clock: ManualClock, state_dir: Path) -> None:
    app, fleet, prometheus = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _ready(pilot, fleet)
        prometheus.failing = True
        await wait_for(pilot, lambda: fleet.error is not None, "the failure")
        clock.advance(120.0)  # the last answer is now two minutes old
        age = table.column_keys.index("age")
        await wait_for(pilot, lambda: "stale" in table.cells("gpu-a")[age].plain, "gpu-a aged to stale")
        summary = str(fleet.query_one(FleetSummary).render())
        assert "cannot connect: Connection refused" in summary
        assert "2 min 00 s ago" in summary
        assert "0/0 GPUs at baseline" not in summary
        await pilot.press("s")
        assert fleet.sort_mode == "memory"
        prometheus.failing = False
        await wait_for(pilot, lambda: fleet.error is None, "the recovery")


async def test_the_palette_offers_no_host_command_on_the_fleet(clock: ManualClock, state_dir: Path) -> None:
    app, fleet, _ = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        table = await _ready(pilot, fleet)
        titles = [command.title for command in app.get_system_commands(fleet)]
        assert "Quit" in titles  # Textual's own commands stay
        assert not any(title.startswith(("Kill", "Clean-slate", "Tag")) for title in titles)
        table.select_host("gpu-a")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is not fleet, "the host view")
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Clean-slate check" in titles


async def test_the_first_answer_drawn_freezes_what_the_process_holds_once(
    clock: ManualClock, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gputui.ui.screens import fleet as fleet_module

    frozen: list[int] = []
    monkeypatch.setattr(fleet_module, "freeze_settled", lambda: frozen.append(fleet.answers))
    app, fleet, _ = fleet_app(clock, state_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, fleet)
        await wait_for(pilot, lambda: fleet.answers >= 3, "three answers")
    assert frozen == [1]
