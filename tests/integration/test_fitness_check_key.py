"""``c`` reads the GPUs' fitness as it is pressed and with every memory sample while the check waits, over a
real sshd and a real collector on the fake NVML, the TUI driven by Pilot: a row remap that appears while a
killed job's memory still drains is NOT READY within one memory interval, before the memory is back. At
rest the fitness keeps its period: the memory samples between process lists read none of it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import pytest

from gputui.commands.grammar.parser import build_parser
from gputui.commands.tui import build_app
from gputui.core.model import HostSnapshot
from gputui.core.store import Config
from gputui.ui.session.cleancheck import FAST_MEMORY_INTERVAL_S
from gputui.ui.widgets.clean_slate import CleanSlateLine
from tests.fakenvml.plugin import FakeNvml
from tests.integration.procs import is_gone
from tests.integration.sshd import ClientHome, SshdFactory
from tests.pilot.conftest import wait_for

pytestmark = pytest.mark.timeout(240)

DEADLINE_S = 60.0
SLACK_S = 0.25
"""What a memory sample may take beyond its interval (reading eight GPUs, the stream, a busy machine): well
short of the half second a process list comes at while a check waits, which is where fitness was read."""
HELD_MIB = 4096
REMAP_GPU = 3


async def _until(pilot: Any, condition: Any, what: str, deadline_s: float = DEADLINE_S) -> float:
    return await wait_for(pilot, condition, what, deadline_s=deadline_s, step_s=0.02)


def _read_at(snapshot: HostSnapshot) -> float | None:
    """When the snapshot's GPU fitness was read (GPU0's, read with the others)."""
    fitness = snapshot.gpus[0].fitness
    return None if fitness is None else fitness.read_time


def test_c_sees_a_remap_within_one_memory_interval_while_memory_drains(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-c", server)
    ssh_client.trust(server)
    args = build_parser(None).parse_args(
        ["-F", str(ssh_client.config), "--interval", "0.2", "--process-interval", "5", "host-c"]
    )
    args.config = Config()
    app = build_app(args)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    fake_nvml.state.add_holder(0, job.pid, HELD_MIB)
    fake_nvml.write()
    arrived: list[HostSnapshot] = []

    def line() -> str:
        return str(app.screen.query_one(CleanSlateLine).render())

    def newest_processes() -> tuple[Any, ...]:
        return arrived[-1].processes if arrived else ()

    def since(count: int) -> list[HostSnapshot]:
        return arrived[count:]

    async def run() -> None:
        async with app.run_test(size=(160, 50)) as pilot:
            deliver = app.hosts.deliver

            def spy(target: str, snapshot: HostSnapshot, forced: bool = False) -> None:
                arrived.append(snapshot)  # every sample as the poller hands it over, none merged away
                deliver(target, snapshot, forced)

            app.hosts.deliver = spy  # type: ignore[method-assign]
            await _until(pilot, lambda: any(p.pid == job.pid for p in newest_processes()), "the job")
            # The operator kills the job; the driver still tears its memory down (held, no process listed).
            job.kill()
            job.wait()
            assert is_gone(job.pid)
            fake_nvml.state.holders.clear()
            fake_nvml.state.add_holder(0, job.pid, HELD_MIB, "ghost")
            fake_nvml.write()
            await _until(pilot, lambda: "ghost memory" in line(), "the memory the driver still holds")
            # At rest: memory samples every 0.2 s carry the fitness of the last read, read none of their own.
            count = len(arrived)
            await pilot.pause(1.5)
            rest = since(count)
            assert len(rest) >= 4, len(rest)
            assert len({_read_at(s) for s in rest}) == 1, [_read_at(s) for s in rest]
            # c: the fitness is read at once, then with every memory sample.
            count = len(arrived)
            pressed_at = time.time()
            await pilot.press("c")
            await _until(
                pilot, lambda: any((_read_at(s) or 0.0) >= pressed_at for s in since(count)), "a read"
            )
            first = next(s for s in since(count) if (_read_at(s) or 0.0) >= pressed_at)
            assert first.time is not None
            assert (
                first.time - pressed_at <= FAST_MEMORY_INTERVAL_S + SLACK_S + 0.5
            )  # the configure's round trip
            count = len(arrived)
            await pilot.pause(1.0)
            watched = since(count)
            assert len(watched) >= 5, len(watched)
            assert all(s.time is not None and abs(s.time - (_read_at(s) or 0.0)) < 0.2 for s in watched), [
                (s.time, _read_at(s)) for s in watched
            ]
            assert all(s.gpus[0].memory_used_mib == HELD_MIB + 3 for s in watched)  # still draining
            # A row remap appears on GPU3 while the memory drains.
            fake_nvml.state.gpus[REMAP_GPU].remap_pending = 1
            fake_nvml.write()
            appeared_at = time.time()
            count = len(arrived)

            def remapped() -> HostSnapshot | None:
                return next(
                    (
                        s
                        for s in since(count)
                        if (f := s.gpus[REMAP_GPU].fitness) is not None and f.remap_pending
                    ),
                    None,
                )

            await _until(pilot, lambda: remapped() is not None, "the remap read")
            seen = remapped()
            assert seen is not None
            assert seen.time is not None
            assert seen.time - appeared_at <= FAST_MEMORY_INTERVAL_S + SLACK_S, seen.time - appeared_at
            assert seen.gpus[0].memory_used_mib == HELD_MIB + 3  # before the memory drains
            await _until(pilot, lambda: line().startswith("NOT READY · checking…"), "NOT READY", 2.0)
            assert f"GPUs: GPU{REMAP_GPU} needs a reset (row remap pending)" in line(), line()
            # The memory comes back: the check ends NOT READY, naming the GPU and what it needs.
            fake_nvml.state.holders.clear()
            fake_nvml.write()
            await _until(pilot, lambda: line().startswith("NOT READY after "), "the check's end")
            assert f"GPU{REMAP_GPU} needs a reset (row remap pending)" in line(), line()
            # Back at rest: the fitness keeps its period again.
            await pilot.pause(1.0)
            count = len(arrived)
            await pilot.pause(1.5)
            rest = since(count)
            assert len(rest) >= 4, len(rest)
            assert len({_read_at(s) for s in rest}) == 1, [_read_at(s) for s in rest]
            await pilot.press("q")

    try:
        asyncio.run(asyncio.wait_for(run(), timeout=3 * DEADLINE_S))
    finally:
        if job.poll() is None:
            job.kill()
        job.wait()
