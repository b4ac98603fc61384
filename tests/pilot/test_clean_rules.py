"""``check --wait`` and the TUI's ``c`` apply the same clean-slate rules: both run one drain sequence here and
must turn down the same samples and give the same receipt.

The sequence, one step per streamed sample (2 GPUs, baseline 3 MiB; the stream's process list is always
old, as a memory-only sample's is):

0. 40 000 / 40 000 MiB: draining.
1. 20 000 / 3 MiB: draining.
2. 3 / 3 MiB, but a full sample taken now lists a late process on GPU 0: not clean.
3. 3 / 3 MiB, but the full sample's process list is older than this memory sample: not a confirmation.
4. 3 / 3 MiB, and the full sample agrees: clean, as of this step.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path
from typing import Any

from gputui.commands.check import wait_until_clean
from gputui.core.link import HostLink
from gputui.core.model import Gpu, GpuProcess, HostSnapshot
from gputui.core.verdict import Baselines
from gputui.ui.app import GpuTuiApp

from .conftest import wait_for

T0 = 1_800_000_000.0
LATE_PID = 6400
MEMORY = ((40_000, 40_000), (20_000, 3), (3, 3), (3, 3), (3, 3))
CLEAN_STEP = 4


class DrainLink(HostLink):
    """Streams the sequence one step at a time: on its own (``auto``, for a sequential reader), or when the
    test says (``advance``, for the TUI's poller thread). Answers ``sample`` for the step it is at."""

    def __init__(self, target: str, auto: bool) -> None:
        self.target = target
        self.auto = auto
        self.step = 0
        self.delivered = -1
        self.sampled_at: list[int] = []
        """The step at which each full sample was asked for."""
        self._changed = threading.Condition()
        self._closed = False

    def now(self) -> float:
        return T0 + self.step

    def _snapshot(self, *, fresh: bool) -> HostSnapshot:
        step = min(self.step, len(MEMORY) - 1)
        late = fresh and step == 2
        listed_s = self.now() - 0.5 if fresh and step == 3 else self.now() if fresh else T0 - 30.0
        gpus = tuple(
            Gpu(
                index=i,
                uuid=f"GPU-drain-{i}",
                memory_used_mib=used,
                memory_total_mib=49152,
                processes=(GpuProcess(pid=LATE_PID, used_mib=0),) if late and i == 0 else (),
            )
            for i, used in enumerate(MEMORY[step])
        )
        return HostSnapshot(
            target=self.target,
            hostname=self.target,
            boot_id="boot-drain",
            time=self.now(),
            processes_time=listed_s,
            gpus=gpus,
        )

    def advance(self) -> None:
        with self._changed:
            self.step += 1
            self._changed.notify_all()

    def open(self) -> None:
        return None

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        with self._changed:
            if self.auto and self.delivered == self.step:
                self.step += 1
            if self.delivered == self.step:
                self._changed.wait(min(timeout_s, 0.05))
            if self._closed or self.delivered == self.step:
                return None
            self.delivered = self.step
            return self._snapshot(fresh=False)

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if command.get("cmd") != "sample":
            return {}
        with self._changed:
            self.sampled_at.append(self.step)
            return {"snapshot": self._snapshot(fresh=True).to_dict()}

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()


def test_check_wait_turns_down_steps_2_and_3_and_is_clean_at_step_4() -> None:
    link = DrainLink("gpu-drain", auto=True)
    args = argparse.Namespace(interval=1.0, process_interval=3.0)
    snapshot, waited_s, _check = wait_until_clean(link, "gpu-drain", Baselines(), 30.0, args, clock=link.now)
    assert link.sampled_at == [0, 2, 3, 4]  # the first look, then one confirmation per clean memory sample
    assert waited_s == CLEAN_STEP
    assert snapshot.time == T0 + CLEAN_STEP
    assert snapshot.verdict is not None
    assert snapshot.verdict.clean


async def test_c_turns_down_the_same_steps_and_gives_the_same_receipt(tmp_path: Path) -> None:
    links: dict[str, DrainLink] = {}

    def factory(target: str) -> DrainLink:
        links[target] = DrainLink(target, auto=False)
        return links[target]

    app = GpuTuiApp(
        ["gpu-drain"],
        factory,
        clock=lambda: links["gpu-drain"].now(),
        memory_interval_s=0.05,
        notify_timeout_s=60.0,
        audit_dir=tmp_path / "audit",
    )
    async with app.run_test(size=(120, 40)) as pilot:
        host = app.hosts[0]
        await wait_for(pilot, lambda: host.snapshot is not None, "step 0")
        link = links["gpu-drain"]
        await pilot.press("c")
        assert host.check is not None
        for step in range(1, len(MEMORY)):
            link.advance()
            await wait_for(pilot, lambda s=step: host.snapshot.time == T0 + s, f"step {step}")
            await wait_for(pilot, lambda: host.check is not None and not host.check.confirming, "the answer")
            if step < CLEAN_STEP:
                assert host.check.running, f"clean at step {step}"
        assert link.sampled_at == [2, 3, 4]
        assert host.check.clean is True
        assert host.check.finished_s == T0 + CLEAN_STEP
        assert host.check.finished_s - host.check.started_s == CLEAN_STEP  # as check --wait says
