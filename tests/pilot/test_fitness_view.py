"""The GPU's own health in the TUI: the clean-slate line says NOT READY, the GPU view shows the figures and
the Xid history, and a kernel log that could not be read is said."""

from __future__ import annotations

import threading
from typing import Any

from textual.widgets import Static

from gputui.core.model import GpuFitness, HostSnapshot, KernelLogNote, XidEvent, replace
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.gpu_panel import GpuPanel
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
        # Every GPU's memory is at its baseline: the count says so, GPU2's fitness is its own reason.
        assert said.startswith("NOT READY: 8/8 GPUs at baseline (3 MiB + 2) · ")
        assert "· GPUs: GPU2 needs a reset (row remap pending)" in said  # the reason, labelled with its fact
        panel = str(app.query_one(GpuPanel).render()).splitlines()
        assert panel[1 + UNFIT_GPU].lstrip().startswith(f"{UNFIT_GPU}!")  # marked in the GPU list
        assert all("!" not in row.split()[0] for i, row in enumerate(panel[1:]) if i != UNFIT_GPU)
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


class StaleFitnessLink(CountingSimLink):
    """Every GPU idle; the stream's fitness was read 25 s before each sample (the 30 s period at rest) and
    says nothing is wrong; a forced sample reads it now, and GPU2's row remap is pending by then."""

    remap_after_all = True
    read_gate: threading.Event | None = None
    """When set, the forced sample waits for it: reading eight GPUs takes a moment, and a test holds that
    moment open until it has seen what the line says meanwhile."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_at: float | None = None
        """When the forced sample read the fitness; the stream carries that read after it, as a collector's
        stream carries its last read."""

    def _idle(self, snapshot: HostSnapshot, read_time: float, remap: bool) -> HostSnapshot:
        gpus = tuple(
            replace(
                g,
                memory_used_mib=3,
                processes=(),
                fitness=GpuFitness(remap_pending=remap and g.index == UNFIT_GPU, read_time=read_time),
            )
            for g in snapshot.gpus
        )
        return replace(snapshot, gpus=gpus, processes=())

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        snapshot = super().next_snapshot(timeout_s)
        if snapshot is None or snapshot.time is None:
            return snapshot
        if self.read_at is None:
            return self._idle(snapshot, snapshot.time - 25.0, remap=False)
        return self._idle(snapshot, self.read_at, remap=self.remap_after_all)

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        result = super().request(command, timeout_s)
        if command.get("cmd") == "sample":
            gate = type(self).read_gate
            if gate is not None:
                gate.wait(timeout=30.0)
            fresh = HostSnapshot.from_dict(result["snapshot"])
            self.read_at = fresh.time or 0.0
            result = {"snapshot": self._idle(fresh, self.read_at, remap=self.remap_after_all).to_dict()}
        return result


class StaleFitnessFactory(SimFactory):
    def __call__(self, target: str) -> CountingSimLink:
        link = StaleFitnessLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link


async def test_clean_is_never_shown_on_fitness_read_before_the_sample(make_app, clock) -> None:
    """Memory at baseline with the GPUs' fitness read 25 s before: the line says it reads the fitness (the
    app forces a read), and the read finds a pending row remap: NOT READY, never CLEAN in between."""
    gate = StaleFitnessLink.read_gate = threading.Event()
    try:
        app = make_app(targets=("gpu-node-08",), factory_type=StaleFitnessFactory)
        seen: list[str] = []
        async with app.run_test(size=WIDE) as pilot:
            line = app.query_one(CleanSlateLine)

            def said() -> str:
                text = str(line.render())
                seen.append(text)
                return text

            reading = "checking… 8/8 GPUs at baseline · reading the GPUs' fitness"
            await wait_for(pilot, lambda: said().startswith(reading), "the line saying it reads the fitness")
            gate.set()
            await wait_for(pilot, lambda: "NOT READY" in said(), "NOT READY from the forced read")
            assert said().startswith("NOT READY: ")
            assert "GPU2 needs a reset (row remap pending)" in said()
            link = app.factory.links["gpu-node-08"]
            assert [c["cmd"] for c in link.commands].count("sample") >= 1
        assert not any(text.startswith("CLEAN") for text in seen), seen
    finally:
        gate.set()
        StaleFitnessLink.read_gate = None


async def test_a_fresh_read_that_finds_nothing_turns_the_line_clean(make_app, clock) -> None:
    StaleFitnessLink.remap_after_all = False
    try:
        app = make_app(targets=("gpu-node-08",), factory_type=StaleFitnessFactory)
        async with app.run_test(size=WIDE) as pilot:
            line = app.query_one(CleanSlateLine)
            await wait_for(pilot, lambda: str(line.render()).startswith("CLEAN"), "CLEAN after the read")
            host = app.hosts.get("gpu-node-08")
            assert host is not None
            assert host.fitness_due_s is None
    finally:
        StaleFitnessLink.remap_after_all = True
