"""The GPU's own health in the TUI: the clean-slate line says NOT READY, the GPU view shows the figures and
the Xid history, and a kernel log that could not be read is said."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from gputui.core.model import GpuFitness, HostSnapshot, KernelLogNote, XidEvent, replace
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import CountingSimLink, SimFactory, wait_for

WIDE = (140, 48)
UNFIT_GPU = 2
NOW = 1796100000.0


def _unfit(snapshot: HostSnapshot) -> HostSnapshot:
    """The demo host with every GPU idle, GPU 2 with a pending row remap and an Xid 79 history, and a
    kernel log that could be read only in part (an Xid of a hostile-looking line)."""
    health = GpuFitness(
        remap_pending=True,
        remapped_rows_correctable=1,
        remapped_rows_uncorrectable=0,
        ecc_enabled=True,
        ecc_uncorrected_volatile=0,
        persistence_mode=True,
        xids=(
            XidEvent(13, NOW - 600, "kernel log", "Graphics Exception [bold]x[/bold]"),
            XidEvent(
                79, NOW - 60, "kernel log", "GPU has fallen off the bus.", cleared="driver reloaded since"
            ),
        ),
    )
    gpus = tuple(
        replace(g, memory_used_mib=3, processes=(), fitness=health if g.index == UNFIT_GPU else GpuFitness())
        for g in snapshot.gpus
    )
    return replace(snapshot, gpus=gpus, processes=(), kernel_log=KernelLogNote(source="/dev/kmsg"))


class UnfitLink(CountingSimLink):
    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        snapshot = super().next_snapshot(timeout_s)
        return None if snapshot is None else _unfit(snapshot)

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        result = super().request(command, timeout_s)
        if command.get("cmd") == "sample":
            result = {"snapshot": _unfit(HostSnapshot.from_dict(result["snapshot"])).to_dict()}
        return result


class UnfitFactory(SimFactory):
    def __call__(self, target: str) -> CountingSimLink:
        link = UnfitLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link


def _health(app) -> str:  # type: ignore[no-untyped-def]
    return str(app.screen.query_one("#gpu-fitness", Static).render())


async def test_not_ready_in_the_clean_slate_line_and_health_in_the_gpu_view(make_app, clock) -> None:
    app = make_app(targets=("gpu-node-08",), factory_type=UnfitFactory)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable) is not None, "the monitor")
        line = app.query_one(CleanSlateLine)
        await wait_for(pilot, lambda: "NOT READY" in str(line.render()), "NOT READY")
        said = str(line.render())
        assert said.startswith("NOT READY: ")
        assert "· GPUs: GPU2 needs a reset (row remap pending)" in said  # the reason, labelled with its fact
        await pilot.press("g", *["down"] * UNFIT_GPU, "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        shown = _health(app)
        assert "needs a reset" in shown
        assert "row remap pending yes" in shown
        assert "remapped rows (correctable/uncorrectable) 1/0" in shown
        assert "Xid 13: graphics engine exception" in shown
        assert "Xid 79: GPU has fallen off the bus" in shown
        assert "no longer counts: driver reloaded since" in shown
        assert "[bold]x[/bold]" in shown  # the host's text shown literally, never as markup
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.monitor, "the monitor")
        # GPU 0: fit, its figures blank where the driver gave none.
        await pilot.press("g", *["up"] * UNFIT_GPU, "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen), "the GPU view")
        shown = _health(app)
        assert "fit for the next launch" in shown
        assert "row remap pending –" in shown
        assert "none this boot" in shown
