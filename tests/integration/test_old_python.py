"""A remote python3 older than the collector supports (3.6, 3.7, 2.7 from pyenv) behind a real sshd: its
version is named with the one needed, and the host is monitored in the reduced mode (nvidia-smi + ps)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import HostSnapshot
from gputui.transports.ssh import SshLink
from tests.integration.sshd import ClientHome, SshdFactory
from tests.interpreters import _pyenv_roots

REPO = Path(__file__).resolve().parents[2]
FAST = LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=5.0)
GPU_CSV = "0, NVIDIA H200, GPU-aaaa-0000, 00000000:17:00.0, 20483, 143771, 97, 61, 512.30, 700.00\n"


def old_python(version: str) -> tuple[str, str]:
    """(path, full version) of a pyenv interpreter of ``version`` ("3.6"); the test fails without one."""
    for root in _pyenv_roots():
        for path in sorted(glob.glob(os.path.join(root, f"versions/{version}*/bin/python{version}"))):
            done = subprocess.run(
                [path, "-c", "import sys; print('%d.%d.%d' % tuple(sys.version_info[:3]))"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if done.returncode == 0 and done.stdout.startswith(version + "."):
                return path, done.stdout.strip()
    pytest.fail(f"no Python {version} under {' or '.join(_pyenv_roots())}/versions (pyenv install {version})")


def _next(link: SshLink) -> HostSnapshot:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        snapshot = link.next_snapshot(1.0)
        if snapshot is not None:
            return snapshot
    raise AssertionError("no snapshot")


@pytest.mark.parametrize(
    ("version", "transport"),
    [("3.6", "paramiko"), ("3.6", "openssh"), ("3.7", "paramiko"), ("2.7", "paramiko")],
)
def test_an_old_python_is_named_and_the_host_is_monitored_in_reduced_mode(
    sshd_factory: SshdFactory, ssh_client: ClientHome, version: str, transport: str
) -> None:
    path, full = old_python(version)
    server = sshd_factory(python="none", old_python=path)
    assert server.smi_dir is not None
    (server.smi_dir / "gpus.csv").write_text(GPU_CSV)
    ssh_client.add_host("old-py", server)
    ssh_client.trust(server)
    link = SshLink("old-py", FAST, client=transport)
    link.open()
    try:
        assert (link.reduced, link.mode) == (True, "ps")
        assert link.hello["python"] == full
        assert link.hello["reduced_reason"] == (
            f"python3 {full} is older than 3.8, the oldest the collector runs on"
        )
        snapshot = _next(link)
        assert snapshot.error is None
        assert [(g.index, g.memory_used_mib) for g in snapshot.gpus] == [(0, 20483)]
        with pytest.raises(LinkError) as refused:
            link.request({"cmd": "kill", "targets": [{"pid": os.getpid(), "start_ticks": 1}]}, 10.0)
        assert str(refused.value) == (
            f"old-py: kill needs python3 3.8 or newer on the host (it has {full}) "
            "(reduced mode: monitoring only)"
        )
    finally:
        link.close()


def test_the_cli_names_the_version_a_kill_needs(sshd_factory: SshdFactory, ssh_client: ClientHome) -> None:
    path, full = old_python("3.6")
    server = sshd_factory(python="none", old_python=path)
    assert server.smi_dir is not None
    (server.smi_dir / "gpus.csv").write_text(GPU_CSV)
    ssh_client.add_host("old-py", server)
    ssh_client.trust(server)
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def gputui(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gputui.cli", *words],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    shown = gputui("snapshot", "--json", "--no-discover", "old-py")
    assert shown.returncode == 0, shown.stderr
    (host,) = json.loads(shown.stdout)["hosts"]
    assert (host["mode"], [g["memory_used_mib"] for g in host["gpus"]]) == ("ps", [20483])
    assert "SyntaxError" not in shown.stderr
    holder = subprocess.Popen(["sleep", "120"])  # noqa: S607 - the GPU holder the kill is asked for
    try:
        (server.smi_dir / "apps.csv").write_text(f"GPU-aaaa-0000, {holder.pid}, 20480\n")
        killed = gputui("kill", "--yes", "--no-discover", "old-py", str(holder.pid))
        assert killed.returncode == 2
        assert "Traceback" not in killed.stderr
        assert f"kill needs python3 3.8 or newer on the host (it has {full})" in killed.stderr
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()
