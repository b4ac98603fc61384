"""Targets resolved like OpenSSH (``ssh -G`` and the paramiko fallback) and ProxyJump through real sshd's
(a chain of hops with either SSH client)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gputui.core.link import LinkError, LinkOptions
from gputui.transports.ssh import SetupFailed, SshLink
from gputui.transports.ssh.hostkeys.knownhosts import UnknownHostKey
from tests.integration.openssh_peers import ssh_children
from tests.integration.sshd import ClientHome, SshdFactory, stand_in_agent

FAST = LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=5.0)

RESOLVERS = ["ssh -G", "paramiko"]


@pytest.fixture(params=RESOLVERS)
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, ssh_client: ClientHome) -> str:
    if request.param == "paramiko":
        monkeypatch.setenv("GPUTUI_SSH_RESOLVER", "paramiko")
    return str(request.param)


def _snapshot(link: SshLink) -> object:
    end = time.monotonic() + 30.0
    while time.monotonic() < end:
        snapshot = link.next_snapshot(1.0)
        if snapshot is not None:
            return snapshot
    raise AssertionError("no snapshot")


def test_alias_from_an_included_file(
    sshd_factory: SshdFactory, ssh_client: ClientHome, resolver: str
) -> None:
    server = sshd_factory()
    included = ssh_client.ssh_dir / "config.d"
    included.mkdir()
    (included / "gpu.conf").write_text(f"Host gpu-included\n  HostName 127.0.0.1\n  Port {server.port}\n")
    ssh_client.add_lines(f"Include {included}/*.conf")
    ssh_client.trust(server)
    link = SshLink("gpu-included", FAST, source=stand_in_agent())
    link.open()
    try:
        assert link.settings is not None
        assert link.settings.resolver == resolver
        assert link.settings.port == server.port
        assert _snapshot(link) is not None
    finally:
        link.close()


def test_user_at_host_port_target_without_config_entry(
    sshd_factory: SshdFactory, ssh_client: ClientHome, resolver: str
) -> None:
    server = sshd_factory()
    ssh_client.trust(server)
    import os
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    link = SshLink(f"{user}@127.0.0.1:{server.port}", FAST, source=stand_in_agent())
    link.open()
    try:
        assert _snapshot(link) is not None
    finally:
        link.close()


def test_proxy_jump_goes_through_the_jump_host(
    sshd_factory: SshdFactory, ssh_client: ClientHome, resolver: str
) -> None:
    jump = sshd_factory()
    node = sshd_factory()
    ssh_client.add_host("jump", jump)
    ssh_client.add_host("node", node, "ProxyJump jump")
    ssh_client.trust(jump)
    ssh_client.trust(node)
    link = SshLink("node", FAST)
    link.open()
    try:
        assert link.mode == "nvml"
        assert _snapshot(link) is not None
        # The jump host carries the connection while it is open: its sshd has a session for it.
        assert jump.session_processes()
        assert "Accepted publickey" in jump.log()
        assert "Accepted publickey" in node.log()
    finally:
        link.close()


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_proxy_jump_chain_of_two_hops(
    sshd_factory: SshdFactory, ssh_client: ClientHome, resolver: str, client: str
) -> None:
    first, second, node = sshd_factory(), sshd_factory(), sshd_factory()
    ssh_client.add_host("hop-1", first)
    ssh_client.add_host("hop-2", second)
    ssh_client.add_host("deep-node", node, "ProxyJump hop-1,hop-2")
    for server in (first, second, node):
        ssh_client.trust(server)
    link = SshLink("deep-node", FAST, source=stand_in_agent(), client=client)
    link.open()
    try:
        assert link.client_used == client
        assert _snapshot(link) is not None
        assert first.session_processes()
        assert second.session_processes()
        assert [s.log().count("Accepted publickey") for s in (first, second, node)] == [1, 1, 1]
    finally:
        link.close()
    assert ssh_children() == []  # over the system client: the hops' ssh processes ended with the link


def test_every_hop_has_its_host_key_checked(
    sshd_factory: SshdFactory, ssh_client: ClientHome, resolver: str
) -> None:
    jump = sshd_factory()
    node = sshd_factory()
    ssh_client.add_host("jump", jump)
    ssh_client.add_host("node", node, "ProxyJump jump")
    ssh_client.trust(node)  # the jump host's key is unknown
    with pytest.raises(UnknownHostKey) as caught:
        SshLink("node", FAST, source=stand_in_agent()).open()
    assert caught.value.target == "node"
    assert caught.value.hop == "jump"
    assert "(jump host jump)" in str(caught.value)
    assert "Accepted publickey" not in jump.log()


def test_unreachable_target_behind_a_jump_host_is_one_line(
    sshd_factory: SshdFactory, ssh_client: ClientHome, resolver: str
) -> None:
    jump = sshd_factory()
    ssh_client.add_host("jump", jump)
    ssh_client.trust(jump)
    closed = sshd_factory()
    closed.stop()
    ssh_client.add_host("gone", closed, "ProxyJump jump")
    with pytest.raises(LinkError) as caught:
        SshLink("gone", FAST, source=stand_in_agent()).open()
    assert str(caught.value).startswith(f"gone: jump host jump cannot reach 127.0.0.1 port {closed.port}")
    assert "\n" not in str(caught.value)


def test_proxy_command_is_refused_naming_the_client_that_runs_it(
    ssh_client: ClientHome, resolver: str
) -> None:
    ssh_client.add_lines("Host via-command", "  HostName 127.0.0.1", "  ProxyCommand nc %h %p")
    with pytest.raises(SetupFailed) as caught:
        SshLink("via-command", FAST).open()
    assert str(caught.value) == (
        "via-command: via-command is reached through a ProxyCommand, which only the system ssh client runs: "
        "use --ssh-client openssh"
    )


def test_config_path_from_link_options(
    sshd_factory: SshdFactory, ssh_client: ClientHome, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = sshd_factory()
    ssh_client.add_host("only-in-options", server)
    ssh_client.trust(server)
    moved = tmp_path / "elsewhere.conf"
    moved.write_text(ssh_client.config.read_text())
    ssh_client.config.write_text("")
    monkeypatch.delenv("GPUTUI_SSH_CONFIG")
    options = LinkOptions(memory_interval_s=0.5, connect_timeout_s=5.0, extra={"ssh_config": str(moved)})
    link = SshLink("only-in-options", options, source=stand_in_agent())
    link.open()
    try:
        assert link.settings is not None
        assert link.settings.port == server.port
    finally:
        link.close()
