"""Every finding kind the product has is shown somewhere in the demo: the demo's hosts, judged as the TUI
judges them (one server watch over their samples), over the first minutes of the story."""

from __future__ import annotations

from gputui.commands.inputs.targets import DEMO_TARGETS
from gputui.commands.tui import DEMO_WEDGE_AFTER_S
from gputui.core.link import LinkOptions
from gputui.core.servers import DEFAULT_SPIN_AFTER_S, ServerWatch
from gputui.core.verdict import FINDING_KINDS, Baselines, judge
from gputui.transports.sim import ManualClock, SimLink

FLEET_ONLY = {"duplicate_host"}
"""Kinds only a fleet source gives: two exporters claiming one host."""
STEP_S = 2.0


def _kinds(target: str, seconds: float) -> set[str]:
    clock = ManualClock()
    options = LinkOptions(memory_interval_s=0.01)
    link = SimLink(target, options, clock=clock, wedged_at_s=DEMO_WEDGE_AFTER_S, gpu_fault=True)
    link.open()
    watch = ServerWatch()
    kinds: set[str] = set()
    try:
        for _ in range(int(seconds / STEP_S)):
            snapshot = link.next_snapshot(1.0)
            assert snapshot is not None
            kinds |= {f.kind for f in judge(snapshot, Baselines(), servers=watch).findings}
            clock.advance(STEP_S)
    finally:
        link.close()
    return kinds


def test_every_finding_kind_is_in_the_demo() -> None:
    story_s = DEMO_WEDGE_AFTER_S + DEFAULT_SPIN_AFTER_S + 60.0
    found = {target: _kinds(target, story_s) for target in DEMO_TARGETS}
    shown = set().union(*found.values())
    assert shown == set(FINDING_KINDS) - FLEET_ONLY, found
    # Each host keeps its role: the wedge shows the story's findings, the healthy host none.
    assert {"defunct_leader", "zombie", "profiled", "spinning", "gpu_health"} <= found["gpu-node-07"]
    assert found["gpu-node-08"] == set()
