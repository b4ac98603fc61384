"""``gputui -F FILE``: an explicit ssh config file, as ``ssh -F`` takes one, through a real sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakenvml.plugin import FakeNvml
from tests.integration.sshd import ClientHome, SshdFactory

REPO = Path(__file__).resolve().parents[2]


def test_snapshot_reads_hosts_from_the_file_given_with_F(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    server = sshd_factory()
    ssh_client.add_host("only-in-that-file", server)
    ssh_client.trust(server)
    elsewhere = tmp_path / "elsewhere.conf"
    elsewhere.write_text(ssh_client.config.read_text())
    ssh_client.config.write_text("")  # the default config no longer knows the alias
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("GPUTUI_SSH_CONFIG", None)

    def snapshot(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "gputui.cli",
                "snapshot",
                "--json",
                "--connect-timeout",
                "5",
                *extra,
                "only-in-that-file",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
        )

    without = snapshot()
    assert without.returncode == 2
    assert "only-in-that-file" in without.stderr
    assert "Traceback" not in without.stderr

    done = snapshot("-F", str(elsewhere))
    assert done.returncode == 0, done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    assert host["target"] == "only-in-that-file"
    assert [g["memory_used_mib"] for g in host["gpus"]] == [3] * 8
