"""The findings panel lists a host's findings by what they hold (``verdict.order``): in the demo's wedge the
seven defunct schedulers holding 288 GiB come before the zombie whose memory is long gone, and at 50 columns
(a side pane) the panel's first line is that biggest finding."""

from __future__ import annotations

from gputui.core.model import Gpu, GpuProcess, HostSnapshot, LiveThreads, Proc, ThreadWait
from gputui.core.verdict import Baselines, judge
from gputui.transports.sim import ManualClock
from gputui.ui.widgets.findings_list import FindingsList, group_findings, group_text
from gputui.ui.widgets.process_table import ProcessTable

from .conftest import wait_for

NARROW = (50, 40)


async def test_at_50_columns_the_first_finding_is_the_biggest(make_app, clock: ManualClock) -> None:
    app = make_app()
    async with app.run_test(size=NARROW) as pilot:
        await wait_for(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")
        findings = app.query_one(FindingsList)
        await wait_for(
            pilot, lambda: any(f.kind == "zombie" for f in findings.findings), "the zombie among the findings"
        )
        held = [sum(mib for _, mib in (f.facts.memory_mib if f.facts else ())) for f in findings.findings]
        assert held[0] == max(held) > 0
        assert held == sorted(held, reverse=True)  # memory first, then the rest
        first, *_ = findings.rows
        assert first.findings[0].kind == "defunct_leader"
        kinds = [row.findings[0].kind for row in findings.rows]
        assert kinds.index("defunct_leader") < kinds.index("zombie")
        # On screen: the panel is there at this width, and its first line is the defunct leaders' row.
        assert findings.region.width > 0
        assert findings.region.height > 0
        top = findings.render_line(0).text
        assert top.lstrip().startswith("defunct_leader"), top
        assert "7 defunct" in top


def test_the_defunct_leaders_row_names_where_their_threads_wait() -> None:
    now_s = 1_800_000_000.0
    leaders = tuple(
        Proc(
            pid=pid,
            ppid=10,
            state="Z",
            name=f"scheduler_TP{pid - 40}",
            start_ticks=pid,
            gpu_memory_mib={pid - 40: 41236},
            state_since=now_s - 30,
            live_threads=LiveThreads(1, {"D": 1}),
            waits=(ThreadWait(pid + 100, "D", "uvm_va_space_destroy", "nvidia_uvm", True, now_s - 30),),
        )
        for pid in (41, 42)
    )
    gpus = tuple(
        Gpu(index=i, memory_used_mib=41239, processes=(GpuProcess(pid=40 + i, used_mib=41236),))
        for i in (1, 2)
    )
    launcher = Proc(pid=10, ppid=1, state="S", name="launcher", start_ticks=4)
    judged = judge(
        HostSnapshot(target="h", time=now_s, gpus=gpus, processes=(launcher, *leaders)), Baselines()
    )
    (row,) = group_findings(judged.findings)
    assert "; 2 threads in uvm_va_space_destroy (nvidia_uvm)" in group_text(row, judged).plain
    assert "thread 141 (D) in uvm_va_space_destroy (nvidia_uvm)" in row.findings[0].detail
