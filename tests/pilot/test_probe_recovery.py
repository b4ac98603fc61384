"""A host keeps a failed probe until a probe proves otherwise. With ``probe_after_check`` on, a clean-slate
check that finds nothing but that failed probe probes again, so a GPU that takes work again clears it (a
check that only ended clean would never probe again, and the host would stay NOT READY until ``P``)."""

from __future__ import annotations

from typing import Any

from gputui.core.model import HostSnapshot
from gputui.ui.widgets.clean_slate import CleanSlateLine

from .conftest import SimFactory, wait_for
from .test_probe_key import WIDE, SlowProbeLink


class FailsOnceLink(SlowProbeLink):
    """The idle simulated host whose first probe finds GPU3 not initialised (802); later probes pass."""

    probes = 0

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        result = super().request(command, timeout_s)
        if command.get("cmd") == "probe":
            FailsOnceLink.probes += 1
            if FailsOnceLink.probes == 1:
                failed = dict(
                    result["probes"][3],
                    result="failed",
                    step="context",
                    error="CUDA_ERROR_SYSTEM_NOT_READY",
                    code=802,
                    steps=[{"step": "load", "ms": 0.1}, {"step": "init", "ms": 1.0}],
                )
                result = dict(result, probes=[*result["probes"][:3], failed, *result["probes"][4:]])
        return result


class FailsOnceFactory(SimFactory):
    def __call__(self, target: str) -> FailsOnceLink:
        link = FailsOnceLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link


async def test_a_check_with_probe_after_check_probes_again_and_clears_a_failed_probe(make_app, clock) -> None:
    FailsOnceLink.probes = 0
    app = make_app(targets=("gpu-node-08",), factory_type=FailsOnceFactory, probe_after_check=True)
    async with app.run_test(size=WIDE) as pilot:
        line = app.query_one(CleanSlateLine)
        await wait_for(pilot, lambda: str(line.render()).startswith("CLEAN"), "the healthy host clean")
        await pilot.press("P")
        await wait_for(pilot, lambda: str(line.render()).startswith("NOT READY"), "the failed probe kept")
        assert "GPU3 did not take work: CUDA_ERROR_SYSTEM_NOT_READY (802)" in str(line.render())
        # The check finds nothing but the failed probe: it probes again, and GPU3 now takes work.
        await pilot.press("c")
        await wait_for(pilot, lambda: FailsOnceLink.probes == 2, "a probe after the check")
        await wait_for(pilot, lambda: str(line.render()).startswith("CLEAN"), "the host clean again")
        assert " · probe: 8 of 8 took work" in str(line.render())
        host = app.hosts.get("gpu-node-08")
        snapshot = host.snapshot if host is not None else None
        assert isinstance(snapshot, HostSnapshot)
        assert snapshot.verdict is not None
        assert snapshot.verdict.clean
