"""Target words and ssh config resolution: ``ssh -G`` and the paramiko fallback must agree."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gputui.core.link import BadTarget, TargetSpec, parse_target
from gputui.core.model import replace
from gputui.transports.ssh.config import SshSettings, openssh_available, resolve, target_words


@pytest.mark.parametrize(
    ("word", "spec"),
    [
        ("gpu-node-07", TargetSpec("gpu-node-07")),
        ("root@gpu1", TargetSpec("gpu1", user="root")),
        ("ops.user@gpu1.example.com:2222", TargetSpec("gpu1.example.com", user="ops.user", port=2222)),
        ("[::1]:2222", TargetSpec("::1", port=2222)),
        ("alice@[fe80::1%eth0]:22", TargetSpec("fe80::1%eth0", user="alice", port=22)),
        ("::1", TargetSpec("::1")),
        ("127.0.0.1:65535", TargetSpec("127.0.0.1", port=65535)),
        ("ssh://bob@jump:2200", TargetSpec("jump", user="bob", port=2200)),
    ],
)
def test_good_targets(word: str, spec: TargetSpec) -> None:
    assert parse_target(word) == spec


@pytest.mark.parametrize(
    ("word", "why"),
    [
        ("", "empty"),
        ("-oProxyCommand=touch /tmp/x", "must not start with '-'"),
        ("-p", "must not start with '-'"),
        ("host name", "whitespace"),
        ("host\nname", "whitespace or control"),
        ("host\x1b[2J", "control"),
        ("host\x9b", "control"),
        ("host;rm -rf ~", "whitespace"),
        ("host;touch", "host names may hold only"),
        ("$(touch)", "host names may hold only"),
        ("`id`", "host names may hold only"),
        ("h'o\"st", "host names may hold only"),
        ("user$(x)@host", "user names"),
        ("-user@host", "must not start"),
        ("host:0", "port must be"),
        ("host:70000", "port must be"),
        ("host:22x", "port must be"),
        ("[::1", "missing ']'"),
        ("[::1]x", "expected ':port'"),
        ("[a;b]:22", "not an address"),
    ],
)
def test_bad_targets_are_refused_with_one_line(word: str, why: str) -> None:
    with pytest.raises(BadTarget) as caught:
        parse_target(word)
    message = str(caught.value)
    assert why in message
    assert "\n" not in message.replace(repr(word), "")


def _write_config(tmp_path: Path) -> Path:
    keys = tmp_path / "keys"
    keys.mkdir()
    confd = tmp_path / "conf.d"
    confd.mkdir()
    (confd / "10-jump.conf").write_text(
        f"Host jumpbox\n  HostName 127.0.0.5\n  Port 2201\n  User jumper\n  IdentityFile {keys}/jump_key\n"
    )
    (confd / "20-nodes.conf").write_text(
        "Host gpu-a\n"
        "  HostName 127.0.0.9\n"
        "  Port 2222\n"
        "  ProxyJump jumpbox\n"
        f"  IdentityFile {keys}/node_key\n"
        f"  IdentityFile {keys}/second_key\n"
        "  HostKeyAlias gpu-a-key\n"
        "  HashKnownHosts yes\n"
        "  ConnectTimeout 7\n"
        "  ServerAliveInterval 5\n"
        "  StrictHostKeyChecking accept-new\n"
    )
    (confd / "ignored.txt").write_text("Host gpu-a\n  Port 9999\n")
    config = tmp_path / "config"
    config.write_text(
        f"Include {confd}/*.conf\n"
        "Host chain\n"
        "  HostName 127.0.0.10\n"
        "  ProxyJump ops@jumpbox:2300,[::1]:2400\n"
        "Host *\n"
        "  User defaultuser\n"
        f"  UserKnownHostsFile {tmp_path}/known_hosts {tmp_path}/known_hosts_extra\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  IdentitiesOnly yes\n"
    )
    return config


def _both(target: str, config: Path) -> tuple[SshSettings, SshSettings]:
    via_ssh = resolve(target, str(config), use_openssh=True)
    via_paramiko = resolve(target, str(config), use_openssh=False)
    assert via_ssh.resolver == "ssh -G"
    assert via_paramiko.resolver == "paramiko"
    return via_ssh, via_paramiko


def _comparable(settings: SshSettings) -> SshSettings:
    return replace(settings, resolver="-")


def test_include_alias_proxyjump_identity_port_resolve_the_same_both_ways(tmp_path: Path) -> None:
    assert openssh_available(), "the OpenSSH client must be installed for this test (CI installs it)"
    config = _write_config(tmp_path)
    via_ssh, via_paramiko = _both("gpu-a", config)
    assert _comparable(via_ssh) == _comparable(via_paramiko)
    keys = tmp_path / "keys"
    assert via_ssh.hostname == "127.0.0.9"
    assert via_ssh.port == 2222
    assert via_ssh.user == "defaultuser"
    assert via_ssh.proxy_jump == ("jumpbox",)
    assert via_ssh.identity_files == (f"{keys}/node_key", f"{keys}/second_key")
    assert via_ssh.identities_only is True
    assert via_ssh.host_key_alias == "gpu-a-key"
    assert via_ssh.hash_known_hosts is True
    assert via_ssh.connect_timeout_s == 7
    assert via_ssh.server_alive_interval_s == 5
    assert via_ssh.user_known_hosts_files == (f"{tmp_path}/known_hosts", f"{tmp_path}/known_hosts_extra")
    assert via_ssh.global_known_hosts_files == ("/dev/null",)
    assert via_ssh.strict_host_key_checking == "accept-new"
    assert via_ssh.accepts_new_host_keys
    assert not resolve("jumpbox", str(config), use_openssh=True).accepts_new_host_keys


def test_jump_host_and_command_line_overrides_resolve_the_same_both_ways(tmp_path: Path) -> None:
    config = _write_config(tmp_path)
    for word in ("jumpbox", "ops@jumpbox:2300", "chain", "127.0.0.1:2299", "[::1]:2400"):
        via_ssh, via_paramiko = _both(word, config)
        assert _comparable(via_ssh) == _comparable(via_paramiko), word
    jump = resolve("ops@jumpbox:2300", str(config), use_openssh=True)
    assert (jump.hostname, jump.port, jump.user) == ("127.0.0.5", 2300, "ops")
    assert jump.identity_files == (f"{tmp_path}/keys/jump_key",)
    chain = resolve("chain", str(config), use_openssh=False)
    assert chain.proxy_jump == ("ops@jumpbox:2300", "[::1]:2400")


def test_defaults_when_config_says_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "empty_config"
    config.write_text("")
    via_paramiko = resolve("somehost", str(config), use_openssh=False)
    assert via_paramiko.port == 22
    assert via_paramiko.hostname == "somehost"
    assert via_paramiko.proxy_jump == ()
    assert via_paramiko.identity_files[0] == f"{tmp_path}/.ssh/id_rsa"
    assert f"{tmp_path}/.ssh/id_ed25519" in via_paramiko.identity_files
    via_ssh = resolve("somehost", str(config), use_openssh=True)
    assert via_ssh.port == 22
    assert via_ssh.identity_files == via_paramiko.identity_files


def test_environment_picks_config_and_resolver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _write_config(tmp_path)
    monkeypatch.setenv("GPUTUI_SSH_CONFIG", str(config))
    monkeypatch.setenv("GPUTUI_SSH_RESOLVER", "paramiko")
    settings = resolve("gpu-a")
    assert settings.resolver == "paramiko"
    assert settings.hostname == "127.0.0.9"
    monkeypatch.delenv("GPUTUI_SSH_RESOLVER")
    assert resolve("gpu-a").resolver == "ssh -G"


def test_bad_target_is_refused_before_any_resolver_runs(tmp_path: Path) -> None:
    with pytest.raises(BadTarget, match="must not start with '-'"):
        resolve("-oProxyCommand=touch x", str(tmp_path / "none"), use_openssh=True)


def test_broken_config_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host x\n  Port notanumber\n")
    from gputui.core.link import LinkError

    for use_openssh in (True, False):
        with pytest.raises(LinkError) as caught:
            resolve("x", str(config), use_openssh=use_openssh)
        assert "\n" not in str(caught.value)


def test_what_only_the_openssh_client_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KRB5CCNAME", "KRB5_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("gputui.transports.ssh.config.KERBEROS_CONFIG", str(tmp_path / "no-krb5.conf"))
    master = tmp_path / "master.sock"
    config = tmp_path / "config"
    config.write_text(
        "Host proxied\n  ProxyCommand nc %h %p\n"
        f"Host certified\n  CertificateFile {tmp_path}/id-cert.pub\n"
        "Host kerberos\n  GSSAPIAuthentication yes\n"
        f"Host shared\n  ControlPath {master}\n"
        f"Host tokens\n  ControlPath {tmp_path}/%h-%p.sock\n"
        "Host *\n  GSSAPIAuthentication no\n"
    )
    for use_openssh in (True, False):

        def needs(target: str, use_openssh: bool = use_openssh) -> tuple[str, ...]:
            return resolve(target, str(config), use_openssh=use_openssh).openssh_only()

        assert needs("proxied") == ("ProxyCommand",)
        assert needs("certified") == ("CertificateFile",)
        assert needs("plain") == ()
        # GSSAPI does nothing without Kerberos (Debian turns it on for every host).
        assert needs("kerberos") == ()
        assert needs("shared") == ()  # a ControlPath whose master is not running
    monkeypatch.setenv("KRB5CCNAME", "FILE:/tmp/krb5cc_test")
    assert resolve("kerberos", str(config), use_openssh=True).openssh_only() == ("GSSAPIAuthentication",)
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(master))
        assert resolve("shared", str(config), use_openssh=True).openssh_only() == ("a running ControlMaster",)
        (tmp_path / "tokens-22.sock").write_text("")  # not a socket
        assert resolve("tokens", str(config), use_openssh=True).openssh_only() == ()
    settings = resolve("tokens", str(config), use_openssh=True)
    assert settings.control_path == f"{tmp_path}/tokens-22.sock"  # ssh -G expands the tokens


def test_target_words_put_the_host_after_the_end_of_options() -> None:
    assert target_words(parse_target("ops@gpu-a:2222")) == ["-p", "2222", "-l", "ops", "--", "gpu-a"]
    assert target_words(parse_target("gpu-a")) == ["--", "gpu-a"]


def test_step_deadline_is_the_shorter_of_the_link_s_and_connect_timeout() -> None:
    settings = SshSettings(target="a", hostname="a", port=22, user="u", connect_timeout_s=4.0)
    assert settings.step_timeout_s(10.0) == 4.0
    assert settings.step_timeout_s(2.0) == 2.0
    assert SshSettings(target="a", hostname="a", port=22, user="u").step_timeout_s(10.0) == 10.0
