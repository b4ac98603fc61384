"""The system ssh client reaches what paramiko cannot: ProxyCommand, certificates, known_hosts as ssh has it.

Real sshd's on 127.0.0.1 and the real ``ssh``: the collector (the real one, on the fake NVML) streams over
``ssh -T`` exactly as over a paramiko channel. The paramiko link meets the same configuration with an error
that names ``--ssh-client openssh``, and ``ssh_client = "auto"`` switches by itself. A running ControlMaster
shared by several gputui runs is in ``test_ssh_cli.py``.
"""

from __future__ import annotations

import base64
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from gputui.core.link import LinkError, LinkOptions
from gputui.transports.reconnect import worth_retrying
from gputui.transports.ssh import AuthFailed, SetupFailed, SshLink
from gputui.transports.ssh.hostkeys.knownhosts import UnknownHostKey
from tests.fakenvml.plugin import FakeNvml
from tests.integration.openssh_peers import (
    behind_a_proxy_command,
    make_ca,
    processes_running,
    read_once,
    sign_host_key,
    sign_user_key,
    ssh_children,
    wait_until_gone,
)
from tests.integration.sshd import ClientHome, SshdFactory, SshdServer, keygen

OPTIONS = LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=10.0)
DEADLINE_S = 30.0


def _streams(target: str, client: str = "openssh") -> SshLink:
    """Open ``target`` with ``client``, read one snapshot of the 8 fake GPUs, close; returns the link."""
    link, snapshot = read_once(target, OPTIONS, client=client)
    assert len(snapshot.gpus) == 8
    return link


def _no_ssh_left(*keep: int) -> None:
    left = [p for p in ssh_children() if p.pid not in keep]
    assert wait_until_gone(left, 5.0) == [], [p.cmdline() for p in left]


def _accepted_logins(server: SshdServer) -> int:
    return server.log().count("Accepted publickey")


def test_collector_streams_over_the_system_ssh_client(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    link = SshLink("host-a", OPTIONS, client="openssh")
    try:
        link.open()
        assert (link.client_used, link.mode, link.reduced) == ("openssh", "nvml", False)
        assert link.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        snapshot = link.next_snapshot(DEADLINE_S)
        assert snapshot is not None
        assert snapshot.target == "host-a"
        sample = link.request({"cmd": "sample"}, DEADLINE_S)
        assert [g["memory_used_mib"] for g in sample["snapshot"]["gpus"]] == [3] * 8
        sessions = server.session_processes()
        assert sessions
    finally:
        link.close()
    _no_ssh_left()
    # The collector ends with its ssh: nothing of this login is left on the server.
    assert wait_until_gone(sessions) == []


def test_host_reached_only_through_a_proxy_command(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    bastion, target = behind_a_proxy_command(sshd_factory, ssh_client, "behind")

    with pytest.raises(SetupFailed) as refused:
        SshLink("behind", OPTIONS, client="paramiko").open()
    assert "--ssh-client openssh" in str(refused.value)
    assert not worth_retrying(refused.value)

    assert _streams("behind").client_used == "openssh"
    assert _accepted_logins(bastion) == 1  # the ProxyCommand's own login
    assert _accepted_logins(target) == 1
    assert _streams("behind", client="auto").client_used == "openssh"
    assert _accepted_logins(target) == 2
    _no_ssh_left()  # the ProxyCommand's ssh -W ended with its ssh


def _certified(sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path) -> SshdServer:
    """A server that trusts a user CA, and the host "certified" whose only way in is a certificate of it:
    the client's key is one sshd does not authorize, its certificate lies away from it (``CertificateFile``).
    """
    user_ca = make_ca(tmp_path / "user_ca")
    server = sshd_factory(extra_config=(f"TrustedUserCAKeys {user_ca}",))
    key = tmp_path / "id_certified"
    keygen(key)
    login = pwd.getpwuid(os.geteuid()).pw_name
    certificate = sign_user_key(tmp_path / "user_ca", Path(f"{key}.pub"), login, tmp_path / "signed-cert.pub")
    ssh_client.use_key(key)
    ssh_client.add_host("certified", server, f"CertificateFile {certificate}")
    return server


def test_user_certificate_and_host_certificate(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    server = _certified(sshd_factory, ssh_client, tmp_path)
    host_ca = make_ca(tmp_path / "host_ca")
    host_cert = sign_host_key(tmp_path / "host_ca", server.host_pub, "127.0.0.1")
    with server.config_path.open("a") as config:
        config.write(f"HostCertificate {host_cert}\n")
    server.stop()
    server.start()
    # The host is known only through its CA: no plain line for it.
    ca_type, ca_blob = Path(host_ca).read_text().split()[:2]
    ssh_client.known_hosts.write_text(f"@cert-authority [127.0.0.1]:* {ca_type} {ca_blob}\n")
    before = ssh_client.known_hosts.read_text()

    # paramiko checks plain keys only and offers no certificate: the error names the flag.
    with pytest.raises(UnknownHostKey) as unknown:
        SshLink("certified", OPTIONS, client="paramiko").open()
    assert "CertificateFile" in str(unknown.value)
    assert "--ssh-client openssh" in str(unknown.value)

    assert _streams("certified").client_used == "openssh"
    assert _streams("certified", client="auto").client_used == "openssh"
    assert "Accepted publickey for" in server.log()
    assert "ED25519-CERT" in server.log()
    assert ssh_client.known_hosts.read_text() == before  # nothing added: the CA vouched for the host


def test_auth_failure_without_the_certificate_names_the_flag(
    sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path
) -> None:
    ssh_client.trust(_certified(sshd_factory, ssh_client, tmp_path))
    with pytest.raises(AuthFailed) as caught:
        SshLink("certified", OPTIONS, client="paramiko").open()
    assert str(caught.value).endswith(
        "(its ssh config asks for CertificateFile, which only the system ssh client does: use "
        "--ssh-client openssh)"
    )


def test_include_and_alias_resolve_as_ssh_does(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    server = sshd_factory()
    included = tmp_path / "gpus.conf"
    included.write_text(f"Host gpu-included\n  HostName 127.0.0.1\n  Port {server.port}\n")
    ssh_client.add_lines(f"Include {included}")
    ssh_client.trust(server)
    assert _streams("gpu-included").client_used == "openssh"


def test_target_that_looks_like_an_option_never_reaches_ssh(ssh_client: ClientHome, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for word in ("-oProxyCommand=touch " + str(marker), "-F/dev/null"):
        with pytest.raises(LinkError, match="invalid ssh target"):
            SshLink(word, OPTIONS, client="openssh").open()
    assert not marker.exists()
    assert processes_running(str(marker)) == []


def test_hashed_and_wildcard_known_hosts_lines_are_ssh_s_to_read(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    hashed, wildcard = sshd_factory(), sshd_factory()
    ssh_client.add_host("hashed", hashed)
    ssh_client.add_host("wildcard", wildcard)
    blob = base64.b64encode(wildcard.host_key_blob).decode()
    with ssh_client.known_hosts.open("a") as fh:
        fh.write(f"[127.0.0.*]:{wildcard.port} {wildcard.host_key_type} {blob}\n")
    ssh_client.trust(hashed)
    subprocess.run(["ssh-keygen", "-H", "-f", str(ssh_client.known_hosts)], check=True, capture_output=True)
    assert str(hashed.port) not in ssh_client.known_hosts.read_text()
    _streams("hashed")
    _streams("wildcard")
