"""A simulated host with a data-loader-heavy job: the healthy demo host (``gpu-node-08``), and under its vLLM
server 292 alike idle helpers plus one more of them that is running. The demo hosts themselves stay as they
are (the snapshot and contract tests compare them)."""

from __future__ import annotations

from typing import Any

from gputui.core.model import HostSnapshot, replace
from gputui.transports.sim import HEALTHY_TARGET, VLLM_PID
from gputui.transports.sim.scenario import SimProc

from .conftest import CountingSimLink, SimFactory

TARGET = HEALTHY_TARGET
PARENT = VLLM_PID
HELPERS = 292
HELPER_BASE = 6000
HELPER_PIDS = range(HELPER_BASE, HELPER_BASE + HELPERS)
HELPER_ARGV = ("python3", "dataloader.py", "--worker")
HELPER_RSS_KIB = 180_000
HELPER_CPU_PCT = 0.5
BUSY_HELPER = HELPER_BASE + 400
"""A helper like the others but running (state R): not alike, so a row of its own."""


class BigJobLink(CountingSimLink):
    """The healthy demo host with the helpers in its process list; a kill ends them as it ends any process
    of the simulated host."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        helpers = [
            SimProc(
                pid,
                PARENT,
                "python3",
                HELPER_ARGV,
                user="svc-llm",
                uid=1001,
                start_offset_s=40_010.0 + (pid - HELPER_BASE) / 100,
                rss_kib=HELPER_RSS_KIB,
            )
            for pid in HELPER_PIDS
        ]
        helpers.append(
            SimProc(BUSY_HELPER, PARENT, "python3", HELPER_ARGV, user="svc-llm", uid=1001, state="R")
        )
        # The simulated host's processes are the link's own table: what it lists, and what a kill ends.
        self._procs.update((proc.pid, proc) for proc in helpers)

    def _snapshot(self) -> HostSnapshot:
        snapshot = super()._snapshot()
        # The simulator reports no CPU figures; the helpers' are what a fold sums.
        processes = tuple(
            replace(proc, cpu_pct=HELPER_CPU_PCT) if proc.pid in HELPER_PIDS else proc
            for proc in snapshot.processes
        )
        return replace(snapshot, processes=processes)


class BigJobFactory(SimFactory):
    """Makes ``BigJobLink``s (``make_app(factory_type=BigJobFactory)``)."""

    def __call__(self, target: str) -> CountingSimLink:
        link = BigJobLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link
