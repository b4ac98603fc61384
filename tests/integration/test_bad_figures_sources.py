"""Figures no card can have from NVML (real pynvml over the fake library) and from nvidia-smi (a host read in
the reduced mode over a real sshd): that GPU cannot tell, the figure named, the others judged as usual."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakenvml.plugin import FakeNvml
from tests.integration.sshd import ClientHome, SshdFactory, host_without_python

REPO = Path(__file__).resolve().parents[2]


def _gputui(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        env=env,
        check=False,
    )


def test_nvml_memory_beyond_the_total_is_cannot_tell(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    fake_nvml.state.gpus[2].baseline_mib = 60000  # the card has 49152 MiB
    fake_nvml.write()
    env = dict(fake_nvml.env(), XDG_STATE_HOME=str(tmp_path / "state"), PYTHONPATH=str(REPO))
    checked = _gputui(env, "check", "--no-discover")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "✓ clean" not in checked.stdout
    assert "impossible figures: memory used 60000 MiB > total 49152 MiB" in checked.stdout
    shown = json.loads(_gputui(env, "snapshot", "--json", "--no-discover").stdout)
    (host,) = shown["hosts"]
    gpu2 = host["gpus"][2]
    assert (gpu2["memory_used_mib"], gpu2["memory_total_mib"]) == (None, None)
    assert host["verdict"]["known"] is False
    assert [g["memory_used_mib"] for g in host["gpus"] if g["index"] != 2] == [3] * 7


SMI_CSV = (
    "0, NVIDIA H200, GPU-aaaa-0000, 00000000:17:00.0, -5, 143771, 0, 35, 70.10, 700.00\n"
    "1, NVIDIA H200, GPU-bbbb-1111, 00000000:2A:00.0, 3, 143771, 0, 35, 70.10, 700.00\n"
)


def test_nvidia_smi_negative_memory_is_cannot_tell(sshd_factory: SshdFactory, ssh_client: ClientHome) -> None:
    host_without_python(sshd_factory, ssh_client, "smi-neg", SMI_CSV)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    checked = _gputui(env, "check", "--no-discover", "smi-neg")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "impossible figures: memory used -5 MiB" in checked.stdout
    text = _gputui(env, "snapshot", "--no-discover", "smi-neg").stdout
    assert "-5 /" not in text  # named in the error, never shown as the figure
    assert "impossible figures: memory used -5 MiB" in text
