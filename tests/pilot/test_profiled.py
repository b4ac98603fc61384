"""The demo's wedged host was launched under ``nsys profile``: the findings list says so, its row jumps to the
profiler, and the wedged server's reason names it."""

from __future__ import annotations

from gputui.transports.sim import NSYS_PID, ManualClock
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for

WIDE = (160, 48)


async def test_the_wedged_demo_shows_its_profiler(make_app, clock: ManualClock) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        findings = app.query_one(FindingsList)
        await wait_for(
            pilot, lambda: any(f.kind == "profiled" for f in findings.findings), "the profiled job"
        )
        (profiled,) = [f for f in findings.findings if f.kind == "profiled"]
        assert profiled.pid == NSYS_PID
        assert profiled.detail == (
            f"the job of pid {NSYS_PID} (nsys) runs under Nsight Systems (nsys profile): trace cuda,nvtx "
            "(NVTX on), cuda-graph-trace node, output /tmp/glm5_decode"
        )
        (index,) = [i for i, row in enumerate(findings.rows) if row.findings[0].kind == "profiled"]
        prompt = str(findings.get_option_at_index(index).prompt)
        assert prompt.startswith(" profiled  the job of pid 4100 (nsys) runs under Nsight Systems")
        assert "→ tracing every CUDA call and NVTX range can stall a latency-bound server" in prompt
        await pilot.press("f")
        await pilot.pause()
        findings.highlighted = index
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.focused is app.query_one(ProcessTable), "focus on the table")
        assert app.query_one(ProcessTable).selected_pid == NSYS_PID
        await wait_for(
            pilot,
            lambda: any(
                "is under Nsight Systems" in (e.detail or "") for e in app.hosts[0].snapshot.endpoints
            ),
            "the server's reason",
        )
        (endpoint,) = app.hosts[0].snapshot.endpoints
        assert endpoint.state in ("UNHEALTHY", "STALLED")
        assert endpoint.detail.endswith("its job is under Nsight Systems (nsys profile)")
