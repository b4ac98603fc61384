"""The app meets a real sshd whose key is unknown: it asks, records the key only on 'a', then goes live.

With either SSH client: paramiko's link records the key shown; the system ssh client's next connection
records it (StrictHostKeyChecking=accept-new for that connection) and checks it is the key shown.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gputui.commands.grammar.parser import build_parser
from gputui.commands.tui import build_app
from gputui.core.store import Config
from gputui.ui.screens.host_key import HostKeyScreen
from tests.integration.sshd import ClientHome, SshdFactory, fingerprint_by_ssh_keygen
from tests.pilot.conftest import wait_for

DEADLINE_S = 60.0
"""Only a guard against hangs: sshd, the handshake and the shipped collector take a few seconds."""


async def _until(pilot: Any, condition: Any, what: str) -> float:
    return await wait_for(pilot, condition, what, deadline_s=DEADLINE_S, step_s=0.1)


@pytest.fixture(params=["paramiko", "openssh"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _app(ssh_client: ClientHome, transport: str):  # type: ignore[no-untyped-def]
    args = build_parser(None).parse_args(
        ["-F", str(ssh_client.config), "--interval", "0.3", "--process-interval", "0.3", "host-a"]
        + ["--ssh-client", transport]
    )
    args.config = Config()
    return build_app(args)


def test_accepting_the_unknown_key_writes_known_hosts_and_the_host_goes_live(
    sshd_factory: SshdFactory, ssh_client: ClientHome, transport: str
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.known_hosts.write_text("# nothing yet\n")
    app = _app(ssh_client, transport)

    async def run() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, HostKeyScreen), "the host key question")
            screen = app.screen
            assert isinstance(screen, HostKeyScreen)
            assert screen.error.fingerprint == fingerprint_by_ssh_keygen(server.host_pub)
            await pilot.pause(1.0)
            assert screen.error.fingerprint in app.export_screenshot()
            assert ssh_client.known_hosts.read_text() == "# nothing yet\n"  # nothing before the answer
            await pilot.press("a")
            await _until(pilot, lambda: app.hosts[0].snapshot is not None, "the first snapshot")
            assert app.session.host_status(app.hosts[0]).state == "live"
            assert len(app.hosts[0].snapshot.gpus) == 8
            await pilot.press("q")

    asyncio.run(asyncio.wait_for(run(), timeout=3 * DEADLINE_S))
    assert ssh_client.known_hosts.read_text() == "# nothing yet\n" + server.known_hosts_line() + "\n"


def test_refusing_the_unknown_key_writes_nothing(
    sshd_factory: SshdFactory, ssh_client: ClientHome, transport: str
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.known_hosts.write_text("# nothing yet\n")
    app = _app(ssh_client, transport)

    async def run() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, HostKeyScreen), "the host key question")
            await pilot.press("escape")
            await pilot.pause(1.0)
            assert app.session.host_status(app.hosts[0]).state == "error"
            assert app.hosts[0].snapshot is None
            await pilot.press("q")

    asyncio.run(asyncio.wait_for(run(), timeout=3 * DEADLINE_S))
    assert ssh_client.known_hosts.read_text() == "# nothing yet\n"
    assert "Accepted publickey" not in server.log()
