"""The TUI's probe over a real sshd and a real collector, its children loading the fake ``libcuda.so.1``:
``P`` says which GPU did not take work and why; with ``probe_after_check`` the clean slate that follows
``X`` is proven, and the probe's own memory never makes it NOT CLEAN."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from typing import Any

import pytest

from gputui.commands.grammar.parser import build_parser
from gputui.commands.tui import build_app
from gputui.core.store import Config
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.clean_slate import CleanSlateLine
from tests.fakecuda.plugin import FakeCuda
from tests.fakenvml.plugin import FakeNvml
from tests.integration.procs import is_gone
from tests.integration.sshd import ClientHome, SshdFactory
from tests.pilot.conftest import wait_for

pytestmark = pytest.mark.timeout(240)

DEADLINE_S = 90.0


async def _until(pilot: Any, condition: Any, what: str, deadline_s: float = DEADLINE_S) -> float:
    return await wait_for(pilot, condition, what, deadline_s=deadline_s, step_s=0.1)


def test_p_and_the_probe_after_x_over_ssh(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, fake_cuda: FakeCuda
) -> None:
    fake_cuda.state.show_in_nvml(fake_nvml.state_path)
    fake_cuda.state.gpus[3].ctx_error = "SYSTEM_NOT_READY"
    fake_cuda.write()
    server = sshd_factory(extra_env=fake_cuda.env({}))
    ssh_client.add_host("host-t", server)
    ssh_client.trust(server)
    args = build_parser(None).parse_args(
        ["-F", str(ssh_client.config), "--interval", "0.3", "--process-interval", "0.3", "host-t"]
    )
    args.config = Config(probe_after_check=True)
    app = build_app(args)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    threading.Thread(target=job.wait, daemon=True).start()  # its parent reaps it, as a launcher would

    def line() -> str:
        return str(app.screen.query_one(CleanSlateLine).render())

    def probe_said(words: str) -> bool:
        return any(n[1] == "probe" and words in n[2] for n in app.notices)

    async def run() -> None:
        async with app.run_test(size=(160, 50)) as pilot:
            await _until(pilot, lambda: line().startswith("CLEAN"), "the idle host clean")
            await pilot.press("P")
            await _until(pilot, lambda: any(n[1] == "probe" for n in app.notices), "the probe's answer", 60)
            assert probe_said("GPU3 did not take work: CUDA_ERROR_SYSTEM_NOT_READY (802)"), app.notices
            await _until(pilot, lambda: line().startswith("NOT READY"), "GPU3 not ready")
            assert "GPU3 did not take work: CUDA_ERROR_SYSTEM_NOT_READY (802) in context creation" in line()
            # GPU3 comes back; a job takes GPU0; X kills it, the check that follows is proven.
            fake_cuda.state.gpus[3].ctx_error = None
            fake_cuda.write()
            # A failed probe holds until a probe proves otherwise: P again.
            await pilot.press("P")
            await _until(pilot, lambda: probe_said("8 of 8 took work"), "the second probe")
            await _until(pilot, lambda: line().startswith("CLEAN"), "clean again")
            app.notices.clear()
            fake_nvml.state.add_holder(0, job.pid, 4096, "compute")
            fake_nvml.write()
            await _until(
                pilot, lambda: any(p.pid == job.pid for p in app.hosts[0].snapshot.processes), "the job"
            )
            await pilot.press("X")
            await _until(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
            await pilot.press("y")
            await _until(pilot, lambda: is_gone(job.pid), "the job gone")
            fake_nvml.state.holders.clear()
            fake_nvml.write()
            try:
                await _until(
                    pilot, lambda: probe_said("8 of 8 took work"), "the probe after the clean check", 40
                )
            except AssertionError:
                raise AssertionError(f"{list(app.notices)} {line()}") from None
            await pilot.pause(1.0)
            assert line().startswith("CLEAN"), line()  # its own memory is no job's
            snapshot = app.hosts[0].snapshot
            assert not [p for p in snapshot.processes if p.gpu_memory_mib]
            await pilot.press("q")

    try:
        asyncio.run(asyncio.wait_for(run(), timeout=3 * DEADLINE_S))
    finally:
        if job.poll() is None:
            job.kill()
        job.wait()
