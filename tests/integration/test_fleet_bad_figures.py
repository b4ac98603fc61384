"""Figures no card can have, and two exporters claiming one host, through a real Prometheus scraping
DCGM-format exporters: "cannot tell" with the figure named, a finding instead of a merge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gputui.core.fleet import FleetHost
from gputui.transports.prometheus import FleetSettings, PrometheusSource
from tests.integration.prometheus import Fleet

REPO = Path(__file__).resolve().parents[2]


def _gputui(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(home / "config"), "XDG_STATE_HOME": str(home / "state")}
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        env=env,
    )


def _until(
    source: PrometheusSource, condition: Callable[[dict[str, FleetHost]], bool]
) -> dict[str, FleetHost]:
    deadline = time.monotonic() + 60
    while True:
        hosts = {h.name: h for h in source.sample().hosts}
        if condition(hosts):
            return hosts
        assert time.monotonic() < deadline, f"timed out: {sorted(hosts)}"
        time.sleep(0.25)


def test_negative_memory_and_a_claimed_twice_host_are_cannot_tell(
    prometheus_fleet: Fleet, tmp_path: Path
) -> None:
    exporters = prometheus_fleet.exporter(
        [
            {"name": "gpu-neg", "gpus": 2},
            {"name": "gpu-ok", "gpus": 2},
            {"name": "twin-a", "gpus": 2, "hostname": "gpu-twin"},
            {"name": "twin-b", "gpus": 2, "hostname": "gpu-twin"},
        ]
    )
    exporters.set("gpu-neg", 0, used=-5)
    exporters.set("gpu-neg", 1, free=-100)
    server = prometheus_fleet.prometheus()
    source = PrometheusSource(FleetSettings(url=server.url))
    hosts = _until(
        source,
        lambda h: (
            {"gpu-neg", "gpu-ok", "gpu-twin"} <= set(h)
            and len(h["gpu-twin"].instances) == 2
            and bool(h["gpu-neg"].snapshot.gpus)
        ),
    )
    neg = hosts["gpu-neg"].snapshot
    assert [g.memory_used_mib for g in neg.gpus] == [None, None]  # never shown as -5
    assert neg.gpus[0].error == "impossible figures: memory used -5 MiB"
    assert neg.gpus[1].error == "impossible figures: DCGM_FI_DEV_FB_FREE -100"
    twin = hosts["gpu-twin"]
    assert twin.snapshot.gpus == ()  # not merged into GPU indices 0, 0, 1, 1
    (finding,) = twin.snapshot.findings
    assert finding.kind == "duplicate_host"
    assert finding.detail.startswith("two exporters claim gpu-twin (")
    assert sorted(twin.instances) == sorted(exporters.address(n) for n in ("twin-a", "twin-b"))

    checked = _gputui(tmp_path, "check", "--prometheus", server.url)
    assert checked.returncode == 2, checked.stdout + checked.stderr  # cannot tell, never "clean"
    lines = checked.stdout.splitlines()
    assert any(
        line.startswith("✗ gpu-neg  cannot tell: ") and "memory used -5 MiB" in line for line in lines
    ), lines
    assert any(line.startswith("✗ gpu-twin  cannot tell: two exporters claim gpu-twin") for line in lines)
    assert not any("gpu-ok" in line for line in lines[:-1])  # the sound host is clean
    assert "-5M" not in checked.stdout

    shown = _gputui(tmp_path, "snapshot", "--prometheus", server.url, "--json")
    by_name = {h["target"]: h for h in json.loads(shown.stdout)["hosts"]}
    assert by_name["gpu-neg"]["verdict"]["known"] is False
    assert by_name["gpu-twin"]["verdict"]["known"] is False
    assert by_name["gpu-ok"]["verdict"]["clean"] is True
    text = _gputui(tmp_path, "snapshot", "--prometheus", server.url)
    assert "-5 /" not in text.stdout
    assert "-10M" not in text.stdout
