"""One rule picks the SSH client of every open (``client_choice``): the TUI's default reaches every host a
one-shot command reaches, with the system ssh only where the host's ssh config needs it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gputui.transports.ssh.client_choice import choose_client, needs_system_ssh
from gputui.transports.ssh.config import openssh_available, resolve

CONFIG = """\
Host plain
    HostName 127.0.0.1
    Port 2222
Host behind
    HostName 10.9.9.9
    ProxyCommand nc -X connect -x proxy:3128 %h %p
Host jumped
    HostName 10.9.9.8
    ProxyJump plain
Host certified
    HostName 10.9.9.7
    CertificateFile {cert}
Host mastered
    HostName 10.9.9.6
    ControlPath {socket}
"""


@pytest.fixture
def ssh_config(tmp_path: Path) -> str:
    cert = tmp_path / "id_ed25519-cert.pub"
    cert.write_text("ssh-ed25519-cert-v01@openssh.com AAAA user\n")
    master = tmp_path / "master.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(master))  # a running ControlMaster's socket, as ssh -M leaves it
    path = tmp_path / "config"
    path.write_text(CONFIG.format(cert=cert, socket=master))
    yield str(path)
    listener.close()


@pytest.mark.parametrize(
    ("target", "need"),
    [
        ("behind", "ProxyCommand"),
        ("jumped", "ProxyJump"),
        ("certified", "CertificateFile"),
        ("mastered", "a running ControlMaster"),
    ],
)
def test_a_host_whose_config_needs_the_system_ssh_gets_it(ssh_config: str, target: str, need: str) -> None:
    settings = resolve(target, ssh_config)
    assert need in needs_system_ssh(settings)
    assert choose_client("config", settings, installed=True) == "openssh"
    assert choose_client("auto", settings, installed=True) == "openssh"  # what a one-shot command uses
    # Without a system ssh, paramiko tries (and names what it cannot do when it fails).
    assert choose_client("config", settings, installed=False) == "paramiko"


def test_a_plain_host_keeps_paramiko_and_its_host_key_question(ssh_config: str) -> None:
    settings = resolve("plain", ssh_config)
    assert needs_system_ssh(settings) == ()
    assert choose_client("config", settings, installed=True) == "paramiko"
    assert choose_client("auto", settings, installed=True) == "openssh"


def test_a_client_the_user_named_is_the_one_used(ssh_config: str) -> None:
    behind = resolve("behind", ssh_config)
    assert choose_client("paramiko", behind, installed=True) == "paramiko"
    assert choose_client("openssh", resolve("plain", ssh_config), installed=False) == "openssh"


def test_the_installed_ssh_is_looked_up_when_not_said(ssh_config: str) -> None:
    expected = "openssh" if openssh_available() else "paramiko"
    assert choose_client("config", resolve("behind", ssh_config)) == expected
