"""Errors retrying cannot fix stop the reconnect loop; an unknown host key asks before anything is written.

The app is built with reconnect delays of a few milliseconds, so a worker that did retry a permanent error
would open the link dozens of times in the pauses below (the transient-error test shows it does).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from gputui.core.link import HostLink, LinkError, LinkOptions
from gputui.transports.sim import ManualClock, SimLink
from gputui.transports.ssh import AuthFailed, SetupFailed
from gputui.transports.ssh.hostkeys.knownhosts import ChangedHostKey, UnknownHostKey, fingerprint_sha256
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.host_key import HostKeyScreen
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.host_bar import HostBar

from .conftest import BrokenLink, wait_for

WIDE = (120, 40)
QUIET_S = 1.5
"""How long a halted host is watched for reconnects; with 5 ms delays a retrying one would open ~100 times."""
KEY_BLOB = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes(range(32))


class FakeKey:
    """Stands in for the paramiko key an UnknownHostKey carries (the acceptor only passes it on)."""

    def asbytes(self) -> bytes:
        return KEY_BLOB

    def get_name(self) -> str:
        return "ssh-ed25519"


class FailingLink(BrokenLink):
    """open() raises the error its factory holds; counts every open."""

    def __init__(self, target: str, factory: Factory) -> None:
        super().__init__(target)
        self._factory = factory

    def open(self) -> None:
        with self._factory.lock:
            self._factory.opens += 1
        raise self._factory.error_for(self.target)


class Factory:
    """Links that fail with ``error`` until ``accepted`` holds the target's key, then simulated live hosts."""

    def __init__(self, clock: ManualClock, error: LinkError | None = None, hop: str | None = None) -> None:
        self.clock = clock
        self.error = error
        self.hop = hop
        self.key = FakeKey()
        self.opens = 0
        self.lock = threading.Lock()
        self.accepted: list[tuple[str, Any]] = []
        """What the app asked the acceptor to record, in order."""

    def error_for(self, target: str) -> LinkError:
        if self.error is not None:
            return self.error
        hop = self.hop or target
        return UnknownHostKey(target, hop, "[127.0.0.1]:2222", self.key, "ssh-ed25519", KEY_BLOB)

    def accept(self, hop: str, key: Any) -> str:
        self.accepted.append((hop, key))
        return "[127.0.0.1]:2222 ssh-ed25519 AAAA"

    def __call__(self, target: str) -> HostLink:
        if self.accepted:
            options = LinkOptions(memory_interval_s=0.05, process_interval_s=0.05)
            return SimLink(target, options, clock=self.clock)
        return FailingLink(target, self)


def _app(
    factory: Factory, tmp_path: Path, targets: tuple[str, ...] = ("gpu-node-08",), **kwargs: Any
) -> GpuTuiApp:
    kwargs.setdefault("accept_host_key", factory.accept)
    return GpuTuiApp(
        list(targets),
        factory,
        clock=factory.clock,
        memory_interval_s=0.05,
        process_interval_s=0.05,
        notify_timeout_s=60.0,
        audit_dir=tmp_path / "audit",
        retry_base_s=0.005,
        retry_cap_s=0.005,
        **kwargs,
    )


@pytest.mark.parametrize(
    "error",
    [
        AuthFailed("gpu-node-08: authentication failed: no key accepted (tried ~/.ssh/id_ed25519)"),
        SetupFailed("gpu-node-08: python3 not found on host"),
        ChangedHostKey("gpu-node-08: HOST KEY CHANGED for [127.0.0.1]:2222; refusing to connect"),
    ],
    ids=["auth", "setup", "changed-key"],
)
async def test_an_error_retrying_cannot_fix_stops_the_loop_and_r_tries_once(
    error: LinkError, clock: ManualClock, tmp_path: Path
) -> None:
    factory = Factory(clock, error)
    app = _app(factory, tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.hosts[0].halted, "the host to stop retrying")
        await pilot.pause(QUIET_S)
        assert factory.opens == 1
        panel = str(app.query_one(GpuPanel).render())
        assert "not retrying (r: try again)" in panel
        assert str(error)[:40] in panel
        assert app.session.host_status(app.hosts[0]).state == "error"
        assert [n for n in app.notices if n[1] == "host error"][-1][2].endswith("press r to try again")
        assert not isinstance(app.screen, HostKeyScreen)  # only an unknown key is offered for acceptance
        await pilot.press("r")
        await wait_for(pilot, lambda: factory.opens == 2, "one more try")
        await wait_for(pilot, lambda: app.hosts[0].halted, "halted again")
        await pilot.pause(QUIET_S)
        assert factory.opens == 2
        assert factory.accepted == []


async def test_a_transient_error_keeps_retrying(clock: ManualClock, tmp_path: Path) -> None:
    """The control for the test above: with the same delays a network error is retried on its own."""
    factory = Factory(clock, LinkError("gpu-node-08: cannot connect to 127.0.0.1:22: Connection refused"))
    app = _app(factory, tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: factory.opens >= 5, "several reconnects")
        assert not app.hosts[0].halted
        assert "not retrying" not in str(app.query_one(GpuPanel).render())


async def test_the_host_bar_says_a_halted_host_waits_for_r(clock: ManualClock, tmp_path: Path) -> None:
    factory = Factory(clock, AuthFailed("broken-node: authentication failed"))
    app = _app(factory, tmp_path, targets=("gpu-node-08", "broken-node"))
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: app.hosts[1].halted and app.hosts[0].snapshot is None, "both failing")
        bar = str(app.query_one(HostBar).render())
        assert "not retrying (r) broken-node: authentication failed" in bar


@pytest.mark.parametrize("read_only", [False, True])
async def test_an_unknown_key_is_recorded_only_after_a_and_the_host_goes_live(
    read_only: bool, clock: ManualClock, tmp_path: Path
) -> None:
    factory = Factory(clock)
    app = _app(factory, tmp_path, read_only=read_only)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyScreen), "the host key question")
        shown = app.export_screenshot().replace("&#160;", " ")
        assert fingerprint_sha256(KEY_BLOB) in shown
        assert "ssh-ed25519" in shown
        assert "gpu-node-08" in shown
        assert "a: accept and remember · Esc: refuse" in shown
        await pilot.press("k", "X", "r", "q")  # nothing else answers while the question is open
        await pilot.pause(QUIET_S)
        assert factory.accepted == []
        assert factory.opens == 1
        assert isinstance(app.screen, HostKeyScreen)
        await pilot.press("a")
        await wait_for(pilot, lambda: app.hosts[0].snapshot is not None, "the host to go live")
        assert factory.accepted == [("gpu-node-08", factory.key)]
        assert app.session.host_status(app.hosts[0]).state == "live"
        assert not app.hosts[0].halted
        assert any(n[1] == "host key" and "recorded" in n[2] for n in app.notices)


async def test_a_jump_hosts_key_is_recorded_for_the_hop(clock: ManualClock, tmp_path: Path) -> None:
    factory = Factory(clock, hop="bastion")
    app = _app(factory, tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyScreen), "the host key question")
        assert "jump host" in app.export_screenshot().replace("&#160;", " ")
        await pilot.press("a")
        await wait_for(pilot, lambda: app.hosts[0].snapshot is not None, "the host to go live")
        assert factory.accepted == [("bastion", factory.key)]


async def test_escape_refuses_and_the_host_stays_in_error(clock: ManualClock, tmp_path: Path) -> None:
    factory = Factory(clock)
    app = _app(factory, tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyScreen), "the host key question")
        await pilot.press("escape")
        await pilot.pause(QUIET_S)
        assert not isinstance(app.screen, HostKeyScreen)
        assert factory.accepted == []
        assert factory.opens == 1
        assert app.session.host_status(app.hosts[0]).state == "error"
        assert "unknown host key" in str(app.query_one(GpuPanel).render())
        assert any(n[1] == "host key" and "refused" in n[2] for n in app.notices)
        await pilot.press("a")  # no question open: nothing is accepted
        await pilot.pause(0.2)
        assert factory.accepted == []
        await pilot.press("r")  # asks again
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyScreen), "the question again")
        assert factory.opens == 2


async def test_a_key_that_cannot_be_recorded_leaves_the_host_in_error(
    clock: ManualClock, tmp_path: Path
) -> None:
    factory = Factory(clock)

    def refuse(hop: str, key: Any) -> str:
        raise ChangedHostKey(f"{hop}: [127.0.0.1]:2222 has another key recorded; not accepting a changed key")

    app = _app(factory, tmp_path, accept_host_key=refuse)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyScreen), "the host key question")
        await pilot.press("a")
        await wait_for(pilot, lambda: any("not recorded" in n[2] for n in app.notices), "the failure")
        await pilot.pause(QUIET_S)
        assert factory.opens == 1
        assert app.hosts[0].halted
        assert app.session.host_status(app.hosts[0]).state == "error"
