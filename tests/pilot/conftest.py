"""Pilot fixtures: the app over simulated hosts with a frozen clock, and a helper to wait on conditions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from gputui.core.link import HostLink, LinkError, LinkOptions
from gputui.transports.sim import ManualClock, SimLink
from gputui.ui.app import GpuTuiApp

WAIT_DEADLINE_S = 20.0
"""Only a guard against hangs: conditions normally hold within a few polls."""


async def wait_for(
    pilot: Pilot,
    condition: Callable[[], Any],
    what: str = "condition",
    *,
    deadline_s: float = WAIT_DEADLINE_S,
    step_s: float = 0.05,
    settle_s: float | None = None,
) -> float:
    """Let the app run until ``condition()`` is true, polling every ``step_s``; fail after ``deadline_s``
    (only a guard against hangs). Then let it handle what is pending (``settle_s``: run that much longer).
    Returns the seconds it waited."""
    waited_s = 0.0
    while not condition():
        if waited_s > deadline_s:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(step_s)
        waited_s += step_s
    await pilot.pause(settle_s)
    return waited_s


class CountingSimLink(SimLink):
    """A SimLink that counts the commands it was sent, by name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: list[dict[str, Any]] = []

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.commands.append(dict(command))
        return super().request(command, timeout_s)


class HungLink(HostLink):
    """A host that accepts the connection and then never answers (open blocks until the test ends)."""

    release = threading.Event()

    def __init__(self, target: str) -> None:
        self.target = target

    def open(self) -> None:
        HungLink.release.wait()

    def next_snapshot(self, timeout_s: float):  # type: ignore[no-untyped-def]
        HungLink.release.wait()

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        HungLink.release.wait()
        return {}

    def close(self) -> None:
        HungLink.release.wait()  # a close that hangs too: the app must not wait on it


class BrokenLink(HostLink):
    """A host that cannot be reached."""

    def __init__(self, target: str) -> None:
        self.target = target

    def open(self) -> None:
        raise LinkError(f"{self.target}: connection refused")

    def next_snapshot(self, timeout_s: float):  # type: ignore[no-untyped-def]
        raise LinkError(f"{self.target}: not open")

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        raise LinkError(f"{self.target}: not open")

    def close(self) -> None:
        pass


class SimFactory:
    """Makes the links of one test and remembers them."""

    def __init__(self, clock: ManualClock, read_only: bool = False) -> None:
        self.clock = clock
        self.options = LinkOptions(memory_interval_s=0.05, process_interval_s=0.05, read_only=read_only)
        self.links: dict[str, CountingSimLink] = {}

    def __call__(self, target: str) -> HostLink:
        if target.startswith("broken"):
            return BrokenLink(target)
        if target.startswith("hung"):
            return HungLink(target)
        link = CountingSimLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_app(clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Build the app over simulated hosts; the audit log goes to the test's directory."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    def make(
        targets=("gpu-node-07",),
        read_only: bool = False,
        factory_type: type[SimFactory] = SimFactory,  # type: ignore[no-untyped-def]
        **kwargs: Any,
    ) -> GpuTuiApp:
        factory = factory_type(clock, read_only=read_only)
        options: dict[str, Any] = {
            "clock": clock,
            "memory_interval_s": 0.05,
            "process_interval_s": 0.05,
            "escalate_s": 0.2,
            "notify_timeout_s": 60.0,
            "audit_dir": tmp_path / "audit",
        }
        options.update(kwargs)
        app = GpuTuiApp(list(targets), factory, read_only=read_only, **options)
        app.factory = factory  # type: ignore[attr-defined]
        return app

    yield make
    HungLink.release.set()
    HungLink.release = threading.Event()
