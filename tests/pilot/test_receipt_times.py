"""The receipt's times are the events' own: the kill's outcomes say when the signal went and when its last
process was gone, the samples when memory was back and the port free; how long gputui took to look at them
never counts. Over the simulated wedged host, whose clock the test moves: its detokenizer ignores TERM, so
the job is gone only once the escalation's KILL has ended it."""

from __future__ import annotations

from gputui.transports.sim import DRAIN_S, LAUNCHER_PID, ManualClock
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.clean_slate import CleanSlateLine

from .conftest import wait_for

WIDE = (200, 40)


async def test_the_receipt_says_when_each_event_happened(make_app, clock: ManualClock) -> None:
    app = make_app(escalate_s=3.0)  # the test moves the host clock well before the KILL is due
    async with app.run_test(size=WIDE) as pilot:
        host = app.hosts[0]
        await wait_for(pilot, lambda: host.snapshot is not None and host.snapshot.verdict is not None, "data")
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
        signal_s = clock()
        await pilot.press("y")
        await wait_for(
            pilot, lambda: host.check is not None and host.check.signal_at is not None, "the signal"
        )
        assert host.check.signal_at == signal_s
        # The host's clock moves 1.3 s before the escalation is due: the KILL ends the last process then.
        clock.advance(1.3)
        await wait_for(pilot, lambda: not host.kills, "the end of the kill")
        assert host.check.workers_gone_at == signal_s + 1.3
        for _ in range(int(DRAIN_S / 0.1)):
            clock.advance(0.1)
            # A sample at every step: the first one at baseline is then the moment memory came back.
            await wait_for(pilot, lambda: host.snapshot.time == clock(), "a sample at this moment")
        await wait_for(pilot, lambda: host.check.clean, "the receipt")
        assert host.snapshot.process(LAUNCHER_PID) is None
        # Memory was back 2.0 s after the signal (GPU7 drains in DRAIN_S from the schedulers' death at the
        # signal), 0.7 s after the last process went; the port was free with the first sample after it.
        times = "workers gone 1.3 s after the signal · port 30000 free 0.0 s later · memory back 0.7 s later"
        line = app.query_one(CleanSlateLine).shown.plain
        assert times in line, line
        assert "since the kill" not in line
        receipt = [n[2] for n in app.notices if "CLEAN ✓" in n[2]]
        assert receipt
        assert times in receipt[-1]


async def test_without_a_kill_the_receipt_counts_from_its_key(make_app, clock: ManualClock) -> None:
    app = make_app(targets=("gpu-node-08",))
    async with app.run_test(size=WIDE) as pilot:
        host = app.hosts[0]
        await wait_for(pilot, lambda: host.snapshot is not None, "data")
        with app.factory.links["gpu-node-08"].processes() as procs:
            for pid in [pid for pid, proc in procs.items() if proc.gpu_mib]:
                del procs[pid]
        await pilot.press("c")
        await wait_for(pilot, lambda: host.check is not None and host.check.clean, "the receipt")
        assert host.check.signal_at is None
        assert "0.0 s since c" in app.query_one(CleanSlateLine).shown.plain
