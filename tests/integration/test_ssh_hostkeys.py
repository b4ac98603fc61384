"""Host keys against a real sshd: unknown, accepted, changed, revoked, and known_hosts with every marker."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from gputui.core.link import LinkOptions
from gputui.transports.ssh import SshLink, accept_host_key
from gputui.transports.ssh.hostkeys.knownhosts import (
    ChangedHostKey,
    RevokedHostKey,
    UnknownHostKey,
    hash_name,
)
from tests.integration.sshd import ClientHome, SshdFactory, fingerprint_by_ssh_keygen, keygen

OPTIONS = LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=10.0)
ACCEPT_NEW = LinkOptions(
    memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=10.0, accept_new=True
)


def _opens(target: str, options: LinkOptions = OPTIONS, client: str = "paramiko") -> None:
    link = SshLink(target, options, client=client)
    try:
        link.open()
        assert link.next_snapshot(15.0) is not None
    finally:
        link.close()


def _other_key_line(tmp_path: Path, name: str, marker: str = "") -> str:
    key_type, blob = keygen(tmp_path / f"other-{abs(hash((name, marker)))}")
    prefix = f"{marker} " if marker else ""
    return f"{prefix}{name} {key_type} {base64.b64encode(blob).decode()}"


def test_unknown_key_is_refused_with_its_fingerprint_and_nothing_written(
    sshd_factory: SshdFactory, ssh_client: ClientHome
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.known_hosts.write_text("# nothing yet\n")
    before = ssh_client.known_hosts.read_bytes()
    with pytest.raises(UnknownHostKey) as caught:
        SshLink("host-a", OPTIONS).open()
    error = caught.value
    assert error.fingerprint == fingerprint_by_ssh_keygen(server.host_pub)
    assert error.fingerprint in str(error)
    assert f"[127.0.0.1]:{server.port}" in str(error)
    assert "\n" not in str(error)
    assert error.hop == "host-a"
    assert ssh_client.known_hosts.read_bytes() == before
    # No session was started on the server: refused before authentication.
    assert "Accepted publickey" not in server.log()


@pytest.mark.parametrize("client", ["paramiko", "openssh"])  # the system ssh records the key itself
def test_accept_new_records_the_key_hashed_when_config_says_so(
    sshd_factory: SshdFactory, ssh_client: ClientHome, client: str
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server, "HashKnownHosts yes")
    _opens("host-a", ACCEPT_NEW, client)
    text = ssh_client.known_hosts.read_text()
    assert text.startswith("|1|")
    assert str(server.port) not in text
    found = subprocess.run(
        ["ssh-keygen", "-F", f"[127.0.0.1]:{server.port}", "-f", str(ssh_client.known_hosts)],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0
    # Now known: a plain open works and nothing more is written.
    _opens("host-a", client=client)
    assert ssh_client.known_hosts.read_text() == text


def test_accept_new_writes_plain_names_when_not_hashing(
    sshd_factory: SshdFactory, ssh_client: ClientHome
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    _opens("host-a", ACCEPT_NEW)
    assert ssh_client.known_hosts.read_text() == server.known_hosts_line() + "\n"


def test_accept_host_key_after_an_explicit_confirm(sshd_factory: SshdFactory, ssh_client: ClientHome) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    with pytest.raises(UnknownHostKey) as caught:
        SshLink("host-a", OPTIONS).open()
    line = accept_host_key(caught.value.hop, caught.value.key)
    assert line == server.known_hosts_line()
    assert accept_host_key(caught.value.hop, caught.value.key) == ""
    _opens("host-a")


def test_changed_key_is_refused_every_time_even_with_accept_new(
    sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.known_hosts.write_text(
        "# first line\n" + _other_key_line(tmp_path, server.known_hosts_name) + "\n"
    )
    before = ssh_client.known_hosts.read_bytes()
    for options in (OPTIONS, ACCEPT_NEW):
        with pytest.raises(ChangedHostKey) as caught:
            SshLink("host-a", options).open()
        assert f"{ssh_client.known_hosts}:2" in str(caught.value)
        assert fingerprint_by_ssh_keygen(server.host_pub) in str(caught.value)
    assert ssh_client.known_hosts.read_bytes() == before
    # Seen through another alias name the key is unknown; accepting it for the changed name must fail.
    ssh_client.add_host("host-b", server, "HostKeyAlias host-b-alias")
    with pytest.raises(UnknownHostKey) as unknown:
        SshLink("host-b", OPTIONS).open()
    with pytest.raises(ChangedHostKey):
        accept_host_key("host-a", unknown.value.key)
    assert ssh_client.known_hosts.read_bytes() == before


def test_known_hosts_with_markers_hashes_ports_and_wildcards_loads_and_matches(
    sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    hashed = server.known_hosts_line(hash_name(server.known_hosts_name))
    ssh_client.known_hosts.write_text(
        "\n".join(
            [
                _other_key_line(tmp_path, "*.example.org", "@cert-authority"),
                _other_key_line(tmp_path, "*", "@revoked"),
                "@unknown-marker host ssh-ed25519 AAAA",
                "garbage line",
                _other_key_line(tmp_path, "unrelated-host,[10.0.0.1]:2222"),
                hashed,
            ]
        )
        + "\n"
    )
    _opens("host-a")
    # Wildcard with a port and a negated pattern that does not exclude us.
    ssh_client.known_hosts.write_text(server.known_hosts_line("[127.0.0.*]:*,!gpu-x") + "\n")
    _opens("host-a")
    # The same wildcard, now negating this very name: the key is unknown again.
    ssh_client.known_hosts.write_text(
        server.known_hosts_line(f"[127.0.0.*]:*,![127.0.0.1]:{server.port}") + "\n"
    )
    with pytest.raises(UnknownHostKey):
        SshLink("host-a", OPTIONS).open()


def test_revoked_key_is_refused_even_when_also_listed(
    sshd_factory: SshdFactory, ssh_client: ClientHome
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    revoked = "@revoked " + server.known_hosts_line("*")
    ssh_client.known_hosts.write_text(server.known_hosts_line() + "\n" + revoked + "\n")
    for options in (OPTIONS, ACCEPT_NEW):
        with pytest.raises(RevokedHostKey) as caught:
            SshLink("host-a", options).open()
        assert f"{ssh_client.known_hosts}:2" in str(caught.value)
    with pytest.raises(RevokedHostKey):
        accept_host_key("host-a", _server_key(server))


def _server_key(server: object) -> object:
    import paramiko

    return paramiko.PKey.from_path(str(server.host_key))  # type: ignore[attr-defined]


def test_strict_host_key_checking_accept_new_in_config_records_unknown_never_changed(
    sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server, "StrictHostKeyChecking accept-new")
    _opens("host-a")
    assert ssh_client.known_hosts.read_text() == server.known_hosts_line() + "\n"
    ssh_client.known_hosts.write_text(_other_key_line(tmp_path, server.known_hosts_name) + "\n")
    with pytest.raises(ChangedHostKey):
        SshLink("host-a", OPTIONS).open()
