"""Authentication through a real ssh-agent: agent keys, IdentitiesOnly, IdentityAgent, and no prompts."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.core.link import LinkOptions
from gputui.transports.ssh import AuthFailed, SshLink
from tests.integration.sshd import ClientHome, SshdFactory, SshdServer, stand_in_agent

FAST = LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=5.0)


@pytest.fixture
def ssh_agent(tmp_path: Path, ssh_keys: dict[str, Path]) -> Iterator[Path]:
    """A real ssh-agent holding the authorized key; its socket path."""
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        end = time.monotonic() + 15
        while not sock.exists():
            assert time.monotonic() < end, "ssh-agent did not start"
            time.sleep(0.05)
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock))
        subprocess.run(["ssh-add", "-q", str(ssh_keys["good"])], env=env, check=True, timeout=30)
        yield sock
    finally:
        agent.kill()
        agent.wait(timeout=10)


@pytest.fixture
def keyless_host(sshd_factory: SshdFactory, ssh_client: ClientHome, ssh_keys: dict[str, Path]) -> SshdServer:
    """host-a whose only configured identity file is the unauthorized key."""
    server = sshd_factory()
    ssh_client.trust(server)
    ssh_client.use_key(ssh_keys["other"], identities_only=False)
    return server


def _works(target: str) -> None:
    link = SshLink(target, FAST, source=stand_in_agent())
    try:
        link.open()
        assert link.next_snapshot(15.0) is not None
    finally:
        link.close()


def test_agent_key_logs_in(
    keyless_host: SshdServer, ssh_client: ClientHome, ssh_agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh_client.add_host("host-a", keyless_host)
    monkeypatch.setenv("SSH_AUTH_SOCK", str(ssh_agent))
    _works("host-a")


def test_identity_agent_from_config_is_used(
    keyless_host: SshdServer, ssh_client: ClientHome, ssh_agent: Path
) -> None:
    ssh_client.add_host("host-a", keyless_host, f"IdentityAgent {ssh_agent}")
    _works("host-a")


def test_identities_only_keeps_unlisted_agent_keys_out(
    keyless_host: SshdServer, ssh_client: ClientHome, ssh_agent: Path, ssh_keys: dict[str, Path]
) -> None:
    ssh_client.add_host("host-a", keyless_host, "IdentitiesOnly yes", f"IdentityAgent {ssh_agent}")
    with pytest.raises(AuthFailed) as caught:
        SshLink("host-a", FAST, source=stand_in_agent()).open()
    assert f"{ssh_keys['other']} (rejected)" in str(caught.value)
    assert "agent key" not in str(caught.value)


def test_identity_agent_none_and_no_keys_says_so(
    keyless_host: SshdServer, ssh_client: ClientHome, ssh_agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSH_AUTH_SOCK", str(ssh_agent))
    ssh_client.use_key(Path("/nonexistent/key"))
    ssh_client.add_host("host-a", keyless_host, "IdentityAgent none")
    with pytest.raises(AuthFailed) as caught:
        SshLink("host-a", FAST, source=stand_in_agent()).open()
    assert str(caught.value).endswith(
        "; tried: no keys: ssh-agent empty or absent and no identity file found"
    )


def test_encrypted_key_is_skipped_without_a_prompt(
    sshd_factory: SshdFactory, ssh_client: ClientHome, ssh_keys: dict[str, Path]
) -> None:
    server = sshd_factory()
    ssh_client.trust(server)
    ssh_client.add_host("host-a", server)
    ssh_client.use_key(ssh_keys["encrypted"])
    with pytest.raises(AuthFailed) as caught:
        SshLink("host-a", FAST, source=stand_in_agent()).open()
    assert f"{ssh_keys['encrypted']} (encrypted, not in ssh-agent: skipped)" in str(caught.value)
