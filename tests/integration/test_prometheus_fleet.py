"""The fleet against the real engine: Prometheus 2.x (Debian's package) scraping loopback DCGM-format
exporters every second. gputui follows what the exporters serve, shows a killed exporter's host stale with
the age of its data, and says in one line when Prometheus is down, slow or answers with an error, while the
TUI stays live (RELIABILITY 38)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gputui.agent.protocol import SNAPSHOT_FIELDS
from gputui.core.fleet import FleetHost, FleetSample, analyze_fleet, ssh_target_for
from gputui.core.model import HostSnapshot
from gputui.core.verdict import Baselines
from gputui.transports.prometheus import FleetSettings, PrometheusError, PrometheusSource
from gputui.transports.prometheus.query import LOOKBACK_STEP
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.fleet import FleetScreen
from gputui.ui.widgets.fleet_summary import FleetSummary
from gputui.ui.widgets.fleet_table import FleetTable
from tests.integration.httpserver import HttpPeer
from tests.integration.prometheus import Fleet
from tests.pilot.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CONFIG_HOME": str(home / "config"), "XDG_STATE_HOME": str(home / "state")}


def _gputui(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        env=_env(home),
    )


def _sample_until(
    source: PrometheusSource,
    condition: Callable[[dict[str, FleetHost]], bool],
    what: str,
    timeout_s: float = DEADLINE_S,
) -> dict[str, FleetHost]:
    """Ask the source (as the TUI's poller does) until ``condition`` holds for its hosts."""
    deadline = time.monotonic() + timeout_s
    while True:
        hosts = {h.name: h for h in source.sample().hosts}
        if condition(hosts):
            return hosts
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {sorted(hosts)}")
        time.sleep(0.25)


def _gpu_used(hosts: dict[str, FleetHost], host: str, index: int) -> int | None:
    if host not in hosts:
        return None
    return next((g.memory_used_mib for g in hosts[host].snapshot.gpus if g.index == index), None)


def test_gputui_follows_what_the_exporters_serve(prometheus_fleet: Fleet, tmp_path: Path) -> None:
    exporters = prometheus_fleet.exporter(
        [
            {"name": "gpu-a", "gpus": 8},
            {"name": "gpu-b", "gpus": 2, "mig": {"1": ["3g.40gb", "3g.40gb"]}},
            {"name": "vllm-a", "kind": "vllm"},
        ]
    )
    server = prometheus_fleet.prometheus({"vllm-a": "gpu-a"})
    exporters.set("vllm-a", running=2, waiting=5)
    source = PrometheusSource(FleetSettings(url=server.url))
    hosts = _sample_until(
        source, lambda h: {"gpu-a", "gpu-b"} <= set(h) and bool(h["gpu-a"].snapshot.endpoints), "both hosts"
    )
    assert hosts["gpu-a"].snapshot.gpus[3].memory_used_mib == 3
    assert hosts["gpu-b"].mig
    assert [i.profile for i in hosts["gpu-b"].mig[1]] == ["3g.40gb", "3g.40gb"]
    assert hosts["gpu-a"].snapshot.endpoints[0].detail == "vllm: 2 running, 5 waiting"

    exporters.set("gpu-a", 3, used=40000, util=99, xid=48)
    hosts = _sample_until(source, lambda h: _gpu_used(h, "gpu-a", 3) == 40000, "the new figure")
    assert hosts["gpu-a"].xid == {3: 48}
    assert hosts["gpu-a"].snapshot.gpus[3].utilization_pct == 99

    # The script form, in the same JSON shape as a host read over SSH: one entry per host.
    done = _gputui("snapshot", "--prometheus", server.url, "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert set(document) == {"hosts", "source"}
    assert document["source"]["kind"] == "prometheus"
    assert "processes" in document["source"]["unknown"]
    by_name = {h["target"]: h for h in document["hosts"]}
    assert set(by_name) == {"gpu-a", "gpu-b"}
    assert set(by_name["gpu-a"]) == set(SNAPSHOT_FIELDS)  # every key of a snapshot, as scripts read them
    a = by_name["gpu-a"]
    assert a["mode"] == "prometheus"
    assert a["processes_time"] is None
    assert a["device_holders"] is None
    assert a["gpus"][3]["memory_used_mib"] == 40000
    assert a["verdict"]["known"]
    assert not a["verdict"]["clean"]
    # DCGM's last Xid is judged by the table: 48 asks for a reset, whatever the memory says.
    assert a["verdict"]["not_ready"] == ["GPU3 needs a reset (Xid 48: double-bit ECC error)"]
    assert a["gpus"][3]["health"]["action"] == "reset"
    assert a["gpus"][3]["health"]["remap_pending"] is False
    assert "(memory only)" in a["verdict"]["reasons"][1]
    assert [f["kind"] for f in a["findings"]] == ["xid"]
    assert HostSnapshot.from_dict(a).gpus[3].memory_used_mib == 40000  # the model reads it back

    # check --wait sees the fleet come clean once the exporter says so.
    waiting = subprocess.Popen(
        [sys.executable, "-m", "gputui.cli", "check", "--prometheus", server.url, "--wait", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env=_env(tmp_path),
    )
    try:
        time.sleep(2.0)
        assert waiting.poll() is None  # still waiting: GPU3 holds 40000 MiB
        exporters.set("gpu-a", 3, used=3)
        time.sleep(2.0)
        assert waiting.poll() is None  # still waiting: GPU3's last Xid asks for a reset
        exporters.set("gpu-a", 3, xid=0)
        out, err = waiting.communicate(timeout=90)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, err
    assert "✓ CLEAN: 2/2 hosts, 10/10 GPUs at baseline (memory only" in out
    assert "clean after" in out


def test_a_killed_exporter_goes_stale_with_the_age_of_its_data(
    prometheus_fleet: Fleet, tmp_path: Path
) -> None:
    prometheus_fleet.exporter([{"name": "gpu-a", "gpus": 2}])
    doomed = prometheus_fleet.exporter([{"name": "gpu-b", "gpus": 2}])
    server = prometheus_fleet.prometheus()
    source = PrometheusSource(FleetSettings(url=server.url))
    _sample_until(source, lambda h: {"gpu-a", "gpu-b"} <= set(h), "both hosts")
    # A few samples of gpu-b, as any exporter that ran for a while: at least one step of the subquery that
    # finds when a target was last up must fall while it is up, or a dead exporter's data has no age.
    time.sleep(float(LOOKBACK_STEP.rstrip("s")) + 1.5)
    doomed.kill()
    killed_at = time.time()
    hosts = _sample_until(source, lambda h: h["gpu-b"].stale, "gpu-b stale")
    b = hosts["gpu-b"]
    assert b.exporter_up is False
    assert not hosts["gpu-a"].stale
    assert all(g.memory_used_mib is None for g in b.snapshot.gpus)
    assert b.age_s is not None
    assert b.age_s >= time.time() - killed_at - 1.5
    assert b.snapshot.error is not None
    assert "up=0" in b.snapshot.error
    time.sleep(3.0)
    later = {h.name: h for h in source.sample().hosts}["gpu-b"]
    assert later.stale
    assert later.age_s is not None
    assert later.age_s >= b.age_s + 2.0
    done = _gputui("check", "--prometheus", server.url, home=tmp_path)
    assert done.returncode == 2  # cannot tell for gpu-b
    assert "✗ gpu-b  cannot tell: no current data: its exporter is down (up=0)" in done.stdout


def test_prometheus_down_slow_or_erroring_is_one_line(prometheus_fleet: Fleet, tmp_path: Path) -> None:
    prometheus_fleet.exporter([{"name": "gpu-a", "gpus": 1}])
    server = prometheus_fleet.prometheus()
    # An error Prometheus itself gives: a matcher whose regex it cannot compile.
    done = _gputui("snapshot", "--prometheus", server.url, "--match", 'instance=~"("', home=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"gputui: prometheus {server.url}: answered HTTP 400: bad_data: ")
    assert done.stderr.count("\n") == 1
    server.stop()
    for command in ("snapshot", "check"):
        done = _gputui(command, "--prometheus", server.url, home=tmp_path)
        assert done.returncode == 2
        assert done.stderr == f"gputui: prometheus {server.url}: cannot connect: Connection refused\n"
    done = _gputui("snapshot", "--prometheus", server.url, "--json", home=tmp_path)
    assert json.loads(done.stdout)["source"]["error"].endswith("cannot connect: Connection refused")


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("hang", "no answer within 1 s"),
        ("drip", "no answer within 1 s"),
        ("503", "answered HTTP 503: status 503 body"),
        ("escapes", "answered HTTP 503: boom \\x1b]0;pwned\\x07"),
        ("200", "not a Prometheus API answer (not JSON"),
        ("close", "RemoteDisconnected"),
        ("reset", "Connection reset by peer"),
    ],
)
def test_a_server_that_misbehaves_costs_one_line_within_the_deadline(behaviour: str, expected: str) -> None:
    peer = HttpPeer()
    try:
        peer.set_mode("/api/v1/query", behaviour)
        source = PrometheusSource(FleetSettings(url=peer.url(""), timeout_s=1.0))
        started = time.monotonic()
        with pytest.raises(PrometheusError) as caught:
            source.sample()
        assert time.monotonic() - started < 10.0  # the deadline holds, with a generous margin
        line = str(caught.value)
        assert line.startswith(f"prometheus {peer.url('')}: ")
        assert expected in line
        assert "\n" not in line
        assert "\x1b" not in line
    finally:
        peer.close()


async def test_the_tui_stays_live_when_prometheus_stops(
    prometheus_fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    prometheus_fleet.exporter([{"name": f"gpu-{c}", "gpus": 4} for c in "abc"])
    server = prometheus_fleet.prometheus()
    source = PrometheusSource(FleetSettings(url=server.url, timeout_s=2.0))

    def read() -> FleetSample:
        return analyze_fleet(source.sample(), Baselines())

    fleet = FleetScreen(
        read,
        source_name=f"prometheus {server.url}",
        ssh_target=lambda host: ssh_target_for("{host}", host),
        refresh_s=0.3,
        stale_after_s=90.0,
    )
    app = GpuTuiApp([], lambda target: None, fleet=fleet, audit_dir=tmp_path / "audit")  # type: ignore[arg-type, return-value]
    async with app.run_test(size=(120, 40)) as pilot:
        table = fleet.query_one(FleetTable)
        await wait_for(pilot, lambda: table.row_count == 3, "three hosts")
        server.stop()
        await wait_for(pilot, lambda: fleet.error is not None, "the error")
        assert fleet.error == f"prometheus {server.url}: cannot connect: Connection refused"
        summary = str(fleet.query_one(FleetSummary).render())
        assert "cannot connect: Connection refused" in summary
        assert "showing the answer of" in summary
        assert table.row_count == 3  # the last answer stays on screen
        answers = fleet.answers
        await pilot.press("s")
        assert fleet.sort_mode == "memory"
        await pilot.press("slash", "g", "p", "u", "-", "b", "enter")
        await wait_for(pilot, lambda: table.row_count == 1, "the filter")
        await wait_for(pilot, lambda: fleet.answers > answers + 1, "more (failed) answers")  # still asking


def test_dcgm_remap_and_ecc_series_make_a_host_not_ready(prometheus_fleet: Fleet, tmp_path: Path) -> None:
    exporters = prometheus_fleet.exporter([{"name": "gpu-a", "gpus": 2}, {"name": "gpu-b", "gpus": 2}])
    server = prometheus_fleet.prometheus()
    exporters.set("gpu-a", 1, remap_pending=1)
    exporters.set("gpu-b", 0, ecc_dbe_vol=3)
    source = PrometheusSource(FleetSettings(url=server.url))

    def judged(hosts: dict[str, FleetHost]) -> bool:
        a, b = hosts.get("gpu-a"), hosts.get("gpu-b")
        return (
            a is not None
            and b is not None
            and a.snapshot.gpus[1].fitness is not None
            and bool(a.snapshot.gpus[1].fitness.remap_pending)
            and b.snapshot.gpus[0].fitness is not None
            and b.snapshot.gpus[0].fitness.ecc_uncorrected_volatile == 3
        )

    _sample_until(source, judged, "the health series")
    done = _gputui("check", "--prometheus", server.url, home=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "gpu-a  NOT READY: GPU1 needs a reset (row remap pending)" in done.stdout
    assert (
        "gpu-b  NOT READY: GPU0 needs a reset (3 uncorrected ECC errors since the last reset)" in done.stdout
    )
