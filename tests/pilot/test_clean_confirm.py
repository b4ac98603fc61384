"""The clean-slate receipt needs a fresh full sample that agrees with the clean memory sample.

The streamed memory samples carry a process list up to a process interval old. Here the stream says every GPU
is back at baseline while the host's fresh full sample (``{"cmd": "sample"}``) still lists a process on a GPU:
the app must keep checking and never print CLEAN. Once the fresh sample agrees, the receipt shows, with the
time of the clean memory sample (not of the confirmation).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from gputui.core.link import HostLink
from gputui.core.model import Gpu, GpuProcess, HostSnapshot, replace
from gputui.transports.sim import ManualClock
from gputui.ui.app import GpuTuiApp
from gputui.ui.widgets.clean_slate import CleanSlateLine

from .conftest import wait_for

BASELINE_MIB = 3
LATE_PID = 6400
"""A process that started holding GPU0 after the streamed process list was taken."""


class StaleListLink(HostLink):
    """Streams clean memory samples with an old process list; answers ``sample`` with a fresh one."""

    def __init__(self, target: str, clock: ManualClock) -> None:
        self.target = target
        self.clock = clock
        self.listed_at_s = clock() - 30.0
        self.fresh_is_clean = False
        self.commands: list[dict[str, Any]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = threading.Event()
        """Set while a ``sample`` request waits at the closed gate."""
        self._closed = threading.Event()

    def _snapshot(self, *, fresh: bool) -> HostSnapshot:
        now_s = self.clock()
        late_holder = fresh and not self.fresh_is_clean
        gpus = tuple(
            Gpu(
                index=index,
                name="NVIDIA RTX PRO 6000 Blackwell",
                uuid=f"GPU-stale-{index}",
                memory_used_mib=BASELINE_MIB,
                memory_total_mib=49152,
                processes=(GpuProcess(pid=LATE_PID, used_mib=0),) if late_holder and index == 0 else (),
            )
            for index in range(2)
        )
        return HostSnapshot(
            target=self.target,
            hostname=self.target,
            boot_id="boot-stale",
            time=now_s,
            mode="sim",
            processes_time=now_s if fresh else self.listed_at_s,
            gpus=gpus,
            processes=(),
        )

    def open(self) -> None:
        return None

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        if self._closed.wait(min(timeout_s, 0.05)):
            return None
        return self._snapshot(fresh=False)

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.commands.append(dict(command))
        if command.get("cmd") != "sample":
            return {}
        if not self.gate.is_set():
            self.blocked.set()
            self.gate.wait(timeout_s)
        return {"snapshot": self._snapshot(fresh=True).to_dict()}

    def close(self) -> None:
        self._closed.set()
        self.gate.set()


def _line(app: GpuTuiApp) -> str:
    return str(app.query_one(CleanSlateLine).render())


def _samples(link: StaleListLink) -> int:
    return sum(1 for c in link.commands if c.get("cmd") == "sample")


async def test_a_stale_process_list_cannot_produce_the_receipt(tmp_path: Path) -> None:
    clock = ManualClock()
    links: dict[str, StaleListLink] = {}

    def factory(target: str) -> HostLink:
        links[target] = StaleListLink(target, clock)
        return links[target]

    app = GpuTuiApp(
        ["gpu-node-09"],
        factory,
        clock=clock,
        memory_interval_s=0.05,
        process_interval_s=0.05,
        notify_timeout_s=60.0,
        audit_dir=tmp_path / "audit",
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.hosts[0].snapshot is not None, "first snapshot")
        link = links["gpu-node-09"]
        started_s = clock()
        await pilot.press("c")
        # Every streamed sample is clean; each confirmation sees the late holder and says no.
        await wait_for(pilot, lambda: _samples(link) >= 3, "several confirming samples")
        host = app.hosts[0]
        assert host.check is not None
        assert host.check.finished_s is None
        assert "CLEAN" not in _line(app)
        assert "confirming with a full sample" in _line(app)
        assert not any("CLEAN" in notice[2] for notice in app.notices)

        # The next confirmation agrees, but only answers 5 s after the clean memory sample that asked.
        clock.advance(2.0)
        link.gate.clear()
        await wait_for(pilot, link.blocked.is_set, "a confirming sample in flight")
        asked_by_s = clock()
        link.fresh_is_clean = True
        clock.advance(5.0)
        link.gate.set()
        await wait_for(pilot, lambda: "verified by a full sample" in _line(app), "receipt")
        check = host.check
        assert check is not None
        assert check.clean is True
        assert check.finished_s is not None
        assert started_s <= check.finished_s <= asked_by_s  # the memory sample's time, not the answer's
        assert any("CLEAN ✓ 2/2" in notice[2] and "memory sample" in notice[2] for notice in app.notices)


class ListedWithMemoryLink(StaleListLink):
    """Streams samples whose process list was read with them (the collector's sample after a watched GPU
    holder exited): clean ones from ``clean_after`` on."""

    def __init__(self, target: str, clock: ManualClock) -> None:
        super().__init__(target, clock)
        self.holding = True

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        if self._closed.wait(min(timeout_s, 0.05)):
            return None
        snapshot = self._snapshot(fresh=True)
        if not self.holding:
            return snapshot
        gpu0 = snapshot.gpus[0]
        held = (replace(gpu0, memory_used_mib=20_000), *snapshot.gpus[1:])
        return replace(snapshot, gpus=held)


async def test_a_sample_listed_with_its_memory_makes_the_receipt_once_without_a_second_sample(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    links: dict[str, ListedWithMemoryLink] = {}

    def factory(target: str) -> HostLink:
        links[target] = ListedWithMemoryLink(target, clock)
        links[target].fresh_is_clean = True
        return links[target]

    app = GpuTuiApp(
        ["gpu-node-09"],
        factory,
        clock=clock,
        memory_interval_s=0.05,
        process_interval_s=0.05,
        notify_timeout_s=60.0,
        audit_dir=tmp_path / "audit",
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.hosts[0].snapshot is not None, "first snapshot")
        link = links["gpu-node-09"]
        await pilot.press("c")
        await wait_for(pilot, lambda: any(c.get("watch_exits") for c in link.commands), "watching asked")
        link.holding = False  # the holder exited: the next sample shows memory back, listed with it
        await wait_for(pilot, lambda: "verified by a full sample" in _line(app), "receipt")
        before = len(link.commands)
        for _ in range(10):  # more clean samples after the receipt
            await pilot.pause(0.05)
        receipts = [n for n in app.notices if "CLEAN ✓ 2/2" in n[2]]
        assert len(receipts) == 1
        assert _samples(link) == 0  # no confirming sample was asked for
        configures = [c for c in link.commands if c.get("cmd") == "configure"]
        assert [c["watch_exits"] for c in configures] == [True, False]  # watching, then the normal intervals
        assert len(link.commands) == before
