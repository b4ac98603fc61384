"""The process panel shows the job and whose it is: no rows above a job's root, the cursor on the first GPU
process (so a first ``k`` never offers a shell), the owner column and ``/`` filter words, and ``X`` asking
whose jobs on a host with several owners."""

from __future__ import annotations

from typing import Any

from gputui.core.model import HostSnapshot, Owner, Proc, replace
from gputui.transports.sim import SimLink
from gputui.transports.sim.scenario import HEALTHY_TARGET, NSYS_PID, SCHEDULER_PID_BASE, VLLM_PID
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.choose_owner import ChooseOwnerScreen
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.process_table import ProcessTable
from tests.pilot.conftest import SimFactory, wait_for

WIDE = (170, 40)
POD = Owner("pod", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "vllm-0", (("namespace", "prod"),))
HOSTILE_OWNER = Owner("user", "[@click=app.quit]x[/]", "[@click=app.quit]x[/]")
ANCESTORS = (
    Proc(pid=1, ppid=0, name="systemd", cmdline=("/sbin/init",), state="S", start_ticks=1),
    Proc(pid=3800, ppid=1, name="sshd", cmdline=("sshd: alice",), state="S", start_ticks=2),
    Proc(pid=3811, ppid=3800, name="bash", cmdline=("-bash",), state="S", start_ticks=3),
    Proc(pid=2901, ppid=1, name="bash", cmdline=("-bash",), state="S", start_ticks=4),
)


class OwnedSimLink(SimLink):
    """The demo's hosts with owners: vLLM's tree is a pod's, the rest its user's; and the ancestors a real
    collector sends along (init, sshd, the login shells) above the jobs."""

    def _snapshot(self) -> HostSnapshot:
        snapshot = super()._snapshot()
        vllm_tree = {VLLM_PID, 5110, 5120, 5121, 5122, 5123}
        procs = [
            replace(p, owner=POD if p.pid in vllm_tree else Owner("user", p.user, p.user))
            for p in snapshot.processes
        ]
        return replace(snapshot, processes=tuple(procs) + ANCESTORS)


class OwnedFactory(SimFactory):
    def __call__(self, target: str) -> OwnedSimLink:
        link = OwnedSimLink(target, self.options, clock=self.clock)
        self.links[target] = link  # type: ignore[assignment]
        return link


def _procs(app: GpuTuiApp) -> ProcessTable:
    return app.query_one(ProcessTable)


def _rows(app: GpuTuiApp) -> list[int]:
    return [int(key.value) for key in _procs(app).rows]  # type: ignore[arg-type]


async def _ready(pilot: Any, app: GpuTuiApp) -> None:
    await wait_for(pilot, lambda: all(h.snapshot is not None for h in app.hosts), "first snapshots")
    await wait_for(pilot, lambda: _procs(app).row_count > 0, "process rows")


async def test_first_k_targets_a_gpu_process_and_no_ancestor_is_listed(make_app: Any) -> None:
    app = make_app(factory_type=OwnedFactory)
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot, app)
        rows = _rows(app)
        assert not {1, 3800, 3811} & set(rows)  # init, sshd and the login shell above nsys
        assert rows[0] == NSYS_PID
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        assert isinstance(app.screen, ConfirmKillScreen)
        # TP0 is a true zombie holding nothing: the first process that holds GPU memory is TP1.
        assert [t.pid for t in app.screen.plan.targets] == [SCHEDULER_PID_BASE + 1]
        assert app.screen.plan.targets[0].gpu_mib
        await pilot.press("escape")


async def test_owner_column_and_owner_filter_words(make_app: Any) -> None:
    app = make_app(targets=(HEALTHY_TARGET,), factory_type=OwnedFactory)
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        table = _procs(app)
        assert "owner" in table.columns
        assert table.get_cell(str(VLLM_PID), "owner").plain.strip() == "pod:prod/vllm-0"
        # A hostile user name is shown literally, never run as markup.
        assert table.get_cell("5400", "owner").plain.startswith(" user:[@click=app.q")
        assert {"cpu", "rss", "elapsed"} <= set(table.columns)
        await pilot.press("slash", *"pod:vllm-0", "enter")
        await wait_for(
            pilot, lambda: set(_rows(app)) == {VLLM_PID, 5110, 5120, 5121, 5122, 5123}, "the pod's rows"
        )
        await pilot.press("slash", "ctrl+a", "ctrl+k", *"user:svc-llm", "enter")
        await wait_for(pilot, lambda: _rows(app) == [], "no user-owned vLLM process")
        assert app.is_running


async def test_narrow_tables_drop_the_optional_columns_first(make_app: Any) -> None:
    app = make_app(targets=(HEALTHY_TARGET,), factory_type=OwnedFactory)
    async with app.run_test(size=(140, 40)) as pilot:
        await _ready(pilot, app)
        columns = [key.value for key in _procs(app).columns]
        assert "owner" in columns
        assert "elapsed" not in columns
        assert columns[-1] == "command"


async def test_x_asks_whose_jobs_on_a_host_with_several_owners(make_app: Any) -> None:
    app = make_app(targets=(HEALTHY_TARGET,), factory_type=OwnedFactory)
    async with app.run_test(size=WIDE) as pilot:
        await _ready(pilot, app)
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ChooseOwnerScreen), "the owner choice")
        assert isinstance(app.screen, ChooseOwnerScreen)
        labels = [o.label for o in app.screen.owners]
        assert "pod:prod/vllm-0" in labels
        assert len(labels) >= 2
        number = labels.index("pod:prod/vllm-0") + 1
        await pilot.press(str(number))
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        assert isinstance(app.screen, ConfirmKillScreen)
        plan = app.screen.plan
        assert {t.owner for t in plan.targets} == {POD}
        assert 5400 not in {t.pid for t in plan.targets}
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmKillScreen), "the cancel")
        # All of them, said plainly.
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ChooseOwnerScreen), "the owner choice")
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        assert isinstance(app.screen, ConfirmKillScreen)
        assert {VLLM_PID, 5400} <= {t.pid for t in app.screen.plan.targets}
        await pilot.press("escape")
        # Esc in the choice signals nothing.
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ChooseOwnerScreen), "the owner choice")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ChooseOwnerScreen), "the cancel")
        assert not app.hosts[0].kills
