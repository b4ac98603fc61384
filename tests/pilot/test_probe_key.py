"""``P``: prove each GPU of the shown host takes work. The line says it is probing, then the GPUs fact says
what the probe proved; a GPU that lists a process is left out and named; the setting that probes after every
clean check does so once the receipt is said."""

from __future__ import annotations

import threading
from typing import Any

from gputui.core.model import HostSnapshot, replace
from gputui.transports.sim import SimLink
from gputui.ui.widgets.clean_slate import CleanSlateLine

from .conftest import CountingSimLink, SimFactory, wait_for

WIDE = (140, 48)


def _idle(snapshot: HostSnapshot) -> HostSnapshot:
    """The simulated host after its job: every GPU at its baseline, no process."""
    gpus = tuple(replace(g, memory_used_mib=3, processes=()) for g in snapshot.gpus)
    return replace(snapshot, gpus=gpus, processes=(), endpoints=())


class SlowProbeLink(CountingSimLink):
    """The simulated host idle, its probe taking a moment (as eight first contexts do); while ``gate`` is
    clear a probe waits for the test to let it end."""

    gate = threading.Event()

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        snapshot = super().next_snapshot(timeout_s)
        return None if snapshot is None else _idle(snapshot)

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if command.get("cmd") == "probe":
            SlowProbeLink.gate.wait(30.0)
            # The simulator answers from its own job, which this link hides: its GPUs are idle here.
            self.commands.append(dict(command))  # what the app sent
            return SimLink.request(self, dict(command, force=True), timeout_s)
        result = super().request(command, timeout_s)
        if command.get("cmd") == "sample":
            result = {"snapshot": _idle(HostSnapshot.from_dict(result["snapshot"])).to_dict()}
        return result


SlowProbeLink.gate.set()


class SlowProbeFactory(SimFactory):
    def __call__(self, target: str) -> CountingSimLink:
        link = SlowProbeLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link


async def test_p_probes_the_shown_host_and_the_gpus_fact_says_what_it_proved(make_app, clock) -> None:
    app = make_app(targets=("gpu-node-08",), factory_type=SlowProbeFactory)
    async with app.run_test(size=WIDE) as pilot:
        line = app.query_one(CleanSlateLine)
        await wait_for(pilot, lambda: str(line.render()).startswith("CLEAN"), "the healthy host clean")
        SlowProbeLink.gate.clear()
        try:
            await pilot.press("P")
            await wait_for(
                pilot, lambda: str(line.render()).startswith("probing… 8 GPUs"), "the probe under way"
            )
        finally:
            SlowProbeLink.gate.set()
        await wait_for(pilot, lambda: "took work" in str(line.render()), "what the probe proved")
        said = str(line.render())
        assert said.startswith("CLEAN: 8/8 GPUs at baseline (3 MiB + 2) ✓")
        assert " · probe: 8 of 8 took work (context + 64 MiB write/read, slowest 0.45 s)" in said
        assert any(n[1] == "probe" and "8 of 8 took work" in n[2] for n in app.notices)
        link = app.factory.links["gpu-node-08"]
        assert [c for c in link.commands if c["cmd"] == "probe"] == [  # as the app sent it
            {"cmd": "probe", "gpus": None, "deadline_s": 20.0, "buffer_mib": 64, "force": False}
        ]
        # Pressed again while one runs: said, not sent twice.
        SlowProbeLink.gate.clear()
        try:
            await pilot.press("P")
            await wait_for(pilot, lambda: app.hosts.get("gpu-node-08").probing, "the second probe under way")
            await pilot.press("P")
            await wait_for(
                pilot, lambda: any("already running" in n[2] for n in app.notices), "one at a time"
            )
        finally:
            SlowProbeLink.gate.set()
        await wait_for(pilot, lambda: not app.hosts.get("gpu-node-08").probing, "the second probe over")
        assert [c["cmd"] for c in link.commands].count("probe") == 2


async def test_gpus_that_list_a_process_are_not_probed(make_app, clock) -> None:
    """The wedged demo host: the GPUs its stuck schedulers hold are left out (their memory is someone's)."""
    app = make_app(targets=("gpu-node-07",))
    async with app.run_test(size=WIDE) as pilot:
        line = app.query_one(CleanSlateLine)
        await wait_for(pilot, lambda: "NOT" in str(line.render()), "the wedged host's verdict")
        await pilot.press("P")
        await wait_for(pilot, lambda: any(n[1] == "probe" for n in app.notices), "the probe's answer")
        host = app.hosts.get("gpu-node-07")
        assert host is not None
        assert host.probe is not None
        held = {g.index for g in host.snapshot.gpus if g.processes}  # type: ignore[union-attr]
        assert held
        assert {p.index for p in host.probe.gpus if p.result == "skipped"} == held
        assert all(p.result == "ok" for p in host.probe.gpus if p.index not in held)


async def test_probe_after_check_proves_the_receipt(make_app, clock) -> None:
    app = make_app(targets=("gpu-node-08",), factory_type=SlowProbeFactory, probe_after_check=True)
    async with app.run_test(size=WIDE) as pilot:
        line = app.query_one(CleanSlateLine)
        await wait_for(pilot, lambda: str(line.render()).startswith("CLEAN"), "the healthy host clean")
        await pilot.press("c")
        await wait_for(
            pilot, lambda: any(n[1] == "probe" for n in app.notices), "the probe after the receipt"
        )
        assert any(n[1] == "clean slate" and n[2].startswith("gpu-node-08: CLEAN ✓") for n in app.notices)
        assert [c["cmd"] for c in app.factory.links["gpu-node-08"].commands].count("probe") == 1
