"""The command line over SSH: ``gputui snapshot --json host``, ``check``, ``kill`` and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakenvml.plugin import FakeNvml
from tests.integration.sshd import ClientHome, SshdFactory, fingerprint_by_ssh_keygen

REPO = Path(__file__).resolve().parents[2]


def _gputui(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )


def test_snapshot_json_of_two_remote_hosts(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    first, second = sshd_factory(), sshd_factory()
    ssh_client.add_host("host-a", first)
    ssh_client.add_host("host-b", second)
    ssh_client.trust(first)
    ssh_client.trust(second)
    done = _gputui("snapshot", "--json", "host-a", "host-b")
    assert done.returncode == 0, done.stderr
    hosts = json.loads(done.stdout)["hosts"]
    assert [h["target"] for h in hosts] == ["host-a", "host-b"]
    for host in hosts:
        assert host["error"] is None
        assert host["mode"] == "nvml"
        assert [g["memory_used_mib"] for g in host["gpus"]] == [3] * 8


def test_check_of_an_idle_remote_host_is_clean(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    done = _gputui("check", "--wait", "30", "host-a")
    assert done.returncode == 0, done.stdout + done.stderr


def test_unknown_host_key_is_one_line_with_the_fingerprint(
    sshd_factory: SshdFactory, ssh_client: ClientHome
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    done = _gputui("snapshot", "host-a")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert fingerprint_by_ssh_keygen(server.host_pub) in lines[0]
    assert not ssh_client.known_hosts.exists()
    accepted = _gputui("snapshot", "--json", "--accept-new", "host-a")
    assert accepted.returncode == 0, accepted.stderr
    assert ssh_client.known_hosts.read_text() == server.known_hosts_line() + "\n"


def test_hostile_target_word_is_refused_before_anything_runs(ssh_client: ClientHome, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    for word in (f"-oProxyCommand=touch {canary}", f"host;touch {canary}", f"$(touch {canary})"):
        done = _gputui("snapshot", "--", word) if word.startswith("-") else _gputui("snapshot", word)
        assert done.returncode == 2, (word, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not canary.exists()


def test_kill_on_a_remote_host(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        fake_nvml.state.add_holder(3, victim.pid, 4096)
        fake_nvml.write()
        done = _gputui("kill", "--yes", "--json", "host-a", str(victim.pid))
        assert done.returncode == 0, done.stdout + done.stderr
        assert victim.wait(timeout=30) is not None
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(timeout=10)
