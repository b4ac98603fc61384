"""The TUI over a real sshd, watching a real wedged launcher: once ``X``, ``y`` took the job down, its
endpoint reads DOWN within two probe intervals, never a remembered STARTING.

The launcher (``tests.contract.wedged``: ``python -m sglang.launch_server --port P``) is young and answers
503 while its scheduler, a defunct leader with a worker thread in D, holds GPU memory; before the kill the
endpoint is UNHEALTHY (a young launcher whose job has defunct members is not starting). After the kill
nothing listens on P and the launcher is gone: its age must be gone with it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.protocol import ENDPOINT_STATE_DOWN, ENDPOINT_STATE_STARTING, ENDPOINT_STATE_UNHEALTHY
from gputui.agent.servers import ENDPOINT_DEFAULT_INTERVAL_S
from gputui.commands.grammar.parser import build_parser
from gputui.commands.tui import build_app
from gputui.core.store import Config
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.endpoint_panel import EndpointPanel
from tests.contract.wedged import free_port, install, wedged_launcher
from tests.integration.defunct import build_defunct_leader
from tests.integration.procs import is_gone, state_of, wait_for
from tests.integration.sshd import ClientHome, SshdFactory
from tests.pilot.conftest import wait_for as pilot_wait_for

pytestmark = pytest.mark.timeout(240)

DEADLINE_S = 90.0
"""Only a guard against hangs."""
HELD_MIB = 2048


async def _until(pilot: Any, condition: Any, what: str, deadline_s: float = DEADLINE_S) -> float:
    return await pilot_wait_for(pilot, condition, what, deadline_s=deadline_s, step_s=0.1)


def _state(app: Any, url: str) -> tuple[str | None, str | None]:
    snapshot = app.hosts[0].snapshot
    for sample in () if snapshot is None else snapshot.endpoints:
        if sample.url == url:
            return sample.state, sample.detail
    return None, None


def test_a_killed_wedged_launcher_reads_down_within_two_probe_intervals(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: Any, tmp_path: Path
) -> None:
    (tmp_path / "bin").mkdir()
    scheduler = build_defunct_leader(tmp_path / "bin")
    module_dir = install(tmp_path / "modules")
    port = free_port()
    url = f"http://127.0.0.1:{port}/health"
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    with wedged_launcher(module_dir, scheduler, port) as launcher:
        pids = launcher.pids
        wait_for(lambda: state_of(pids["leader"]) == "Z", "the scheduler's leader to be defunct")
        wait_for(lambda: state_of(pids["worker"]) == "D", "its worker thread in D")
        fake_nvml.state.add_holder(0, pids["leader"], HELD_MIB, "compute")
        fake_nvml.write()
        args = build_parser(None).parse_args(
            ["-F", str(ssh_client.config), "--interval", "0.3", "--process-interval", "0.3"]
            + ["--health", url, "host-a"]
        )
        args.config = Config()
        app = build_app(args)
        seen: list[str | None] = []

        async def run() -> None:
            async with app.run_test(size=(160, 50)) as pilot:
                await _until(pilot, lambda: _state(app, url)[0] is not None, "the first probe")
                state, detail = _state(app, url)
                assert state == ENDPOINT_STATE_UNHEALTHY, (
                    state,
                    detail,
                )  # never STARTING with defunct members
                assert detail is not None
                assert "defunct member" in detail
                await _until(
                    pilot,
                    lambda: any(pids["leader"] == p.pid for p in app.hosts[0].snapshot.processes),
                    "the scheduler listed",
                )
                await pilot.press("X")
                await _until(pilot, lambda: isinstance(app.screen, ConfirmKillScreen), "the confirmation")
                await pilot.press("y")
                await _until(
                    pilot,
                    lambda: is_gone(pids["launcher"]) and is_gone(pids["leader"]),
                    "the wedged job to be gone",
                )
                fake_nvml.state.holders.clear()  # the driver frees what the job held
                fake_nvml.write()
                took_s = await _until(
                    pilot,
                    lambda: seen.append(_state(app, url)[0]) or seen[-1] == ENDPOINT_STATE_DOWN,
                    "the endpoint to read DOWN",
                    deadline_s=2 * ENDPOINT_DEFAULT_INTERVAL_S + 2.0,
                )
                assert took_s <= 2 * ENDPOINT_DEFAULT_INTERVAL_S + 2.0
                await pilot.pause(3 * 0.3)
                state, detail = _state(app, url)
                assert state == ENDPOINT_STATE_DOWN, (state, detail)
                assert "launcher" not in (detail or "")  # a dead launcher has no age
                panel = str(app.screen.query_one(EndpointPanel).render())
                assert ENDPOINT_STATE_DOWN in panel
                assert ENDPOINT_STATE_STARTING not in panel
                await pilot.press("q")

        asyncio.run(asyncio.wait_for(run(), timeout=3 * DEADLINE_S))
        assert ENDPOINT_STATE_STARTING not in seen
