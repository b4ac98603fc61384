"""Older drivers: real pynvml against builds of the fake NVML that lack the symbols those drivers lack.

A driver before R510 has no ``nvmlDeviceGetComputeRunningProcesses_v3`` (pynvml's unversioned call then
raises its own ``NVMLLibraryMismatchError``, which is not an ``NVMLError``) and no v2 memory info; older ones
lack the ``_v2`` calls too. Every versioned call falls back to the version the driver has; a missing optional
query blanks only its own figure; a GPU name that is not valid UTF-8 is shown escaped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO, SLEEPER, agent_process, script


def older(fake_nvml: FakeNvml, fake_nvml_older: Callable[..., Path], *omit: str) -> FakeNvml:
    """The same state, served by a build without the symbol groups ``omit``."""
    return FakeNvml(lib_dir=fake_nvml_older(*omit), state_path=fake_nvml.state_path, state=fake_nvml.state)


def sample_with_holders(fake: FakeNvml) -> tuple[dict[str, Any], int]:
    with script(SLEEPER, ["sleeper"]) as holder:
        pid = holder.pids["sleeper"]
        for gpu in range(8):
            fake.state.add_holder(gpu, pid, 1000 + gpu)
        fake.state.add_holder(3, pid, 77, kind="graphics")
        fake.write()
        with agent_process("--interval", "0.2", "--no-discover", env=fake.env()) as agent:
            assert agent.hello["error"] is None, agent.hello
            return agent.sample(), pid


def assert_all_eight_with_memory_and_processes(snapshot: dict[str, Any], pid: int) -> None:
    assert snapshot["error"] is None
    gpus = snapshot["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    for gpu in gpus:
        assert gpu.get("error") is None, gpu
        assert gpu["memory_total_mib"] == 49152
        compute = [p for p in gpu["processes"] if p["type"] == "compute"]
        assert compute == [{"pid": pid, "used_mib": 1000 + gpu["index"], "type": "compute", "visible": True}]
    graphics = [p for p in gpus[3]["processes"] if p["type"] == "graphics"]
    assert [(p["pid"], p["used_mib"]) for p in graphics] == [(pid, 77)]
    listed = {p["pid"]: p for p in snapshot["processes"]}
    assert listed[pid]["gpu_memory_mib"]["5"] == 1005


def test_a_driver_before_r510_shows_all_gpus_with_memory_and_processes(
    fake_nvml: FakeNvml, fake_nvml_older: Callable[..., Path]
) -> None:
    fake = older(fake_nvml, fake_nvml_older, "v3")
    snapshot, pid = sample_with_holders(fake)
    assert_all_eight_with_memory_and_processes(snapshot, pid)
    gpu = snapshot["gpus"][0]
    # v1 memory info: the driver's reservation is part of "used" and not reported apart.
    assert gpu["memory_used_mib"] == 3 + 1000
    assert gpu["memory_reserved_mib"] is None
    assert gpu["pci_bus_id"] == "00000000:17:00.0"


def test_a_driver_without_the_v2_calls_falls_back_to_v1_everywhere(
    fake_nvml: FakeNvml, fake_nvml_older: Callable[..., Path]
) -> None:
    fake = older(fake_nvml, fake_nvml_older, "v3", "v2")
    snapshot, pid = sample_with_holders(fake)
    assert_all_eight_with_memory_and_processes(snapshot, pid)
    # The v1 PCI info carries the bus id with a 4-digit domain.
    assert snapshot["gpus"][1]["pci_bus_id"] == "0000:18:00.0"
    assert snapshot["gpus"][1]["uuid"] == "GPU-fa4e0000-0000-0000-0000-000000000001"


def test_a_missing_optional_query_blanks_only_its_figure(
    fake_nvml: FakeNvml, fake_nvml_older: Callable[..., Path]
) -> None:
    fake = older(fake_nvml, fake_nvml_older, "power")
    fake.state.gpus[2].temp_c = 66
    fake.write()
    with agent_process("--interval", "0.2", "--no-discover", env=fake.env()) as agent:
        gpus = agent.sample()["gpus"]
    assert len(gpus) == 8
    for gpu in gpus:
        assert gpu.get("error") is None
        assert gpu["power_w"] is None
        assert gpu["power_limit_w"] is None
        assert gpu["memory_used_mib"] == 3
    assert gpus[2]["temperature_c"] == 66


def test_a_gpu_name_in_invalid_utf8_is_shown_escaped(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[4].name = b"Tesla \xff\xfe\x1b[2J V100"
    fake_nvml.write()
    with agent_process("--interval", "0.2", "--no-discover", env=fake_nvml.env()) as agent:
        gpus = agent.sample()["gpus"]
    assert gpus[4].get("error") is None
    assert gpus[4]["memory_used_mib"] == 3
    assert gpus[4]["name"] == "Tesla \\xff\\xfe\x1b[2J V100"  # invalid bytes as text, JSON-safe
    assert all(g.get("error") is None for g in gpus)


@pytest.mark.parametrize("omit", [("v3",), ("v3", "v2")])
def test_snapshot_command_on_an_old_driver(
    fake_nvml: FakeNvml, fake_nvml_older: Callable[..., Path], omit: tuple[str, ...]
) -> None:
    fake = older(fake_nvml, fake_nvml_older, *omit)
    with script(SLEEPER, ["sleeper"]) as holder:
        fake.state.add_holder(6, holder.pids["sleeper"], 2048)
        fake.write()
        with tempfile.TemporaryDirectory() as state:
            done = subprocess.run(
                [sys.executable, "-m", "gputui.cli", "snapshot", "--json", "--no-discover"],
                cwd=REPO,
                env=dict(fake.env(), XDG_STATE_HOME=state),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
    assert done.returncode == 0, done.stderr
    host = json.loads(done.stdout)["hosts"][0]
    assert [g["memory_used_mib"] for g in host["gpus"]] == [3, 3, 3, 3, 3, 3, 3 + 2048, 3]
    assert [p["pid"] for p in host["gpus"][6]["processes"]] == [holder.pids["sleeper"]]
