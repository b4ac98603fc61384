"""Screens of the demo host, compared against stored SVGs (pytest-textual-snapshot).

The simulated hosts and the app share one frozen clock (``ManualClock``), and every sample taken at the same
moment is identical, so a screen depends only on what the test did, never on when it ran. Regenerate with
``pytest tests/snapshot --snapshot-update`` and look at the SVGs before committing them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gputui.core.link import HostLink, LinkError, LinkOptions
from gputui.transports.sim import DRAIN_S, LAUNCHER_PID, ManualClock, SimLink
from gputui.transports.ssh.hostkeys.knownhosts import UnknownHostKey
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.screens.host_key import HostKeyScreen
from gputui.ui.widgets.clean_slate import CleanSlateLine
from gputui.ui.widgets.process_table import ProcessTable
from tests.pilot.conftest import wait_for

DEADLINE_S = 20.0


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Receipts print local time of day: pin the zone. Audit lines go to the test's directory."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _app(
    targets: tuple[str, ...], clock: ManualClock, tmp_path: Path, link_type: type[SimLink] = SimLink
) -> GpuTuiApp:
    """The app on simulated hosts (``link_type``: a simulator of the test's own) at the clock ``clock``."""
    options = LinkOptions(memory_interval_s=0.05, process_interval_s=0.05)
    return GpuTuiApp(
        list(targets),
        lambda target: link_type(target, options, clock=clock),
        clock=clock,
        memory_interval_s=0.05,
        process_interval_s=0.05,
        escalate_s=0.2,
        notify_timeout_s=600.0,
        audit_dir=tmp_path / "audit",
    )


async def _until(pilot: Any, condition: Any, what: str) -> float:
    return await wait_for(pilot, condition, what, deadline_s=DEADLINE_S, step_s=0.05, settle_s=0.2)


async def _ready(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    await _until(pilot, lambda: all(h.snapshot is not None for h in app.hosts), "first snapshots")
    await _until(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")


@pytest.mark.parametrize(("columns", "rows"), [(50, 40), (80, 40), (120, 40), (200, 50)])
def test_wedged_host(snap_compare, tmp_path: Path, columns: int, rows: int) -> None:
    """The monitor in each width class (a side pane, stacked, side by side): health keeps state, URL and
    reason, findings wrap whole, commands read from their program's name."""
    app = _app(("gpu-node-07",), ManualClock(), tmp_path)
    assert snap_compare(app, terminal_size=(columns, rows), run_before=_ready)


@pytest.mark.parametrize("columns", [50, 120, 200])
def test_gpu_view(snap_compare, tmp_path: Path, columns: int) -> None:
    """Enter on a GPU: its figures over the samples so far and the processes holding it (at 50 columns,
    one chart per row under its figures)."""
    clock = ManualClock()
    app = _app(("gpu-node-08",), clock, tmp_path)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _ready(pilot)
        host = pilot.app.hosts.get("gpu-node-08")
        for _ in range(12):
            clock.advance(1.0)
            now = clock()
            # One sample per second of the clock, each in the history before the next: the chart is the same
            # however loaded the machine.
            await _until(
                pilot,
                lambda now=now: host.snapshot is not None and (host.snapshot.time or 0) >= now,
                "the sample of that second",
            )
        await pilot.press("g", "enter")
        await _until(pilot, lambda: isinstance(pilot.app.screen, GpuDetailScreen), "the GPU view")

    assert snap_compare(app, terminal_size=(columns, 40), run_before=run_before)


def test_multi_host(snap_compare, tmp_path: Path) -> None:
    app = _app(("gpu-node-07", "gpu-node-08"), ManualClock(), tmp_path)
    assert snap_compare(app, terminal_size=(120, 40), run_before=_ready)


def test_hostile_names_keep_the_layout(snap_compare, tmp_path: Path) -> None:
    """RELIABILITY 22: markup, escapes, a bidi override and a 100 KB argument, shown literally in one row
    and in the confirmation that lists it."""
    app = _app(("gpu-node-08",), ManualClock(), tmp_path)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _ready(pilot)
        pilot.app.query_one(ProcessTable).select_pid(5400)
        await pilot.press("k")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


@pytest.mark.parametrize("columns", [50, 120, 200])
def test_confirmation_modal(snap_compare, tmp_path: Path, columns: int) -> None:
    """T on the launcher: its tree, each command whole (at 50 columns under its pid, wrapped between
    arguments)."""
    app = _app(("gpu-node-07",), ManualClock(), tmp_path)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _ready(pilot)
        pilot.app.query_one(ProcessTable).select_pid(LAUNCHER_PID)
        await pilot.press("T")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(columns, 40), run_before=run_before)


@pytest.mark.parametrize("columns", [50, 120, 200])
def test_refusals_are_one_notification_over_the_gpus(snap_compare, tmp_path: Path, columns: int) -> None:
    """--read-only, then X, k, K, T, R: one notification (the latest refusal), over the GPU panel, never over
    the health panel's state or the verdict line."""
    clock = ManualClock()
    options = LinkOptions(memory_interval_s=0.05, process_interval_s=0.05, read_only=True)
    app = GpuTuiApp(
        ["gpu-node-07"],
        lambda target: SimLink(target, options, clock=clock),
        read_only=True,
        clock=clock,
        memory_interval_s=0.05,
        process_interval_s=0.05,
        notify_timeout_s=600.0,
        audit_dir=tmp_path / "audit",
    )

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _ready(pilot)
        await pilot.press("X", "k", "K", "T", "R")
        await _until(pilot, lambda: len(pilot.app.notices) == 5, "five answers")

    assert snap_compare(app, terminal_size=(columns, 50 if columns == 200 else 40), run_before=run_before)


@pytest.mark.parametrize("columns", [50, 120, 200])
def test_help(snap_compare, tmp_path: Path, columns: int) -> None:
    """? : every key that works now, one row per key, and how to close the help on its border."""
    app = _app(("gpu-node-07",), ManualClock(), tmp_path)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(columns, 50 if columns == 200 else 40), run_before=run_before)


@pytest.mark.parametrize("columns", [50, 120, 200])
def test_help_legend(snap_compare, tmp_path: Path, columns: int) -> None:
    """? scrolled to the legend: every mark drawn in its own colours beside what it means."""
    app = _app(("gpu-node-07",), ManualClock(), tmp_path)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        pilot.app.screen.query_one("#help-legend-title").scroll_visible(top=True, animate=False)
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(columns, 50 if columns == 200 else 40), run_before=run_before)


@pytest.mark.parametrize("columns", [50, 120, 200])
def test_clean_receipt(snap_compare, tmp_path: Path, columns: int) -> None:
    """After X, y: the receipt whole, up to the port it freed (at 50 columns over several rows, the footer
    giving up its row), and the operation's one notification."""
    clock = ManualClock()
    app = _app(("gpu-node-07",), clock, tmp_path)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _ready(pilot)
        await pilot.press("X", "enter")
        host = pilot.app.hosts[0]
        await _until(pilot, lambda: host.snapshot.process(LAUNCHER_PID) is None, "launcher gone")
        await _until(pilot, lambda: any(n[1].startswith("TERM") for n in pilot.app.notices), "kill outcome")
        await _until(pilot, lambda: not host.kills, "the kill to end")
        clock.advance(DRAIN_S + 1.0)
        line = pilot.app.query_one(CleanSlateLine)
        await _until(pilot, lambda: "verified" in str(line.render()), "receipt")
        await _until(pilot, lambda: pilot.app.notices[-1][1] == "clean slate", "the operation's last word")

    assert snap_compare(app, terminal_size=(columns, 40), run_before=run_before)


class _UnknownKeyLink(HostLink):
    """A host whose SSH key is not in known_hosts (a fixed key, so the fingerprint is the same every run)."""

    BLOB = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes(range(32))

    def __init__(self, target: str) -> None:
        self.target = target

    def open(self) -> None:
        raise UnknownHostKey(self.target, self.target, "[10.0.0.7]:22", object(), "ssh-ed25519", self.BLOB)

    def next_snapshot(self, timeout_s: float) -> None:
        raise LinkError(f"{self.target}: not open")

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        raise LinkError(f"{self.target}: not open")

    def close(self) -> None:
        pass


def test_unknown_host_key_question(snap_compare, tmp_path: Path) -> None:
    app = GpuTuiApp(
        ["gpu-node-09"],
        _UnknownKeyLink,
        clock=ManualClock(),
        notify_timeout_s=600.0,
        audit_dir=tmp_path / "audit",
        accept_host_key=lambda hop, key: "",
    )

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _until(pilot, lambda: isinstance(pilot.app.screen, HostKeyScreen), "the host key question")

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def _fleet_app(tmp_path: Path) -> GpuTuiApp:
    """The fleet view over the answer recorded from a real Prometheus (``tests/data/prometheus``)."""
    from tests.data.prometheus import fetcher_of, load_answer, recorded_fleet_app

    app, _ = recorded_fleet_app(fetcher_of(load_answer()), ManualClock(), tmp_path / "audit")
    return app


async def _fleet_ready(pilot) -> None:  # type: ignore[no-untyped-def]
    from gputui.ui.widgets.fleet_table import FleetTable

    table = pilot.app.screen.query_one(FleetTable)
    await _until(pilot, lambda: table.row_count == 4, "the fleet's rows")
    table.select_host("gpu-a")  # the host with a hot GPU, an XID and a vLLM server


@pytest.mark.parametrize("columns", [50, 120, 200])
def test_fleet_view(snap_compare, tmp_path: Path, columns: int) -> None:
    assert snap_compare(_fleet_app(tmp_path), terminal_size=(columns, 40), run_before=_fleet_ready)


@pytest.mark.parametrize("columns", [50, 120])
def test_host_opened_from_the_fleet(snap_compare, tmp_path: Path, columns: int) -> None:
    """Enter on a fleet host: the monitor, with Esc (back) and q in a footer that is whole at 120."""

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _fleet_ready(pilot)
        await pilot.press("enter")
        app = pilot.app
        await _until(
            pilot, lambda: app.screen is app.monitor and app.hosts[0].snapshot is not None, "the host"
        )
        await _until(pilot, lambda: app.query_one(ProcessTable).row_count > 0, "process rows")

    assert snap_compare(_fleet_app(tmp_path), terminal_size=(columns, 40), run_before=run_before)
