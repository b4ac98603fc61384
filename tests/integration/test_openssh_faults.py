"""Faults over the system ssh client that its own words decide: host keys, deadlines, auth, proxies, prompts.

Real sshd's on 127.0.0.1 and the real ``ssh``. What both clients share (stale, reconnect, hung hosts, runaway
collectors, no python3, quit while hanging) is tested for both in ``test_ssh_faults.py``; here are the cases
where ssh, not paramiko, meets the fault, and its one line must say so.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.transports.base import LinkError, LinkOptions
from gputui.transports.hostkeys import ChangedHostKey, RevokedHostKey, UnknownHostKey
from gputui.transports.reconnect import worth_retrying
from gputui.transports.ssh import AuthFailed, SshLink, accept_host_key
from tests.integration.openssh_peers import (
    kill_quietly,
    processes_running,
    proxy_script,
    ssh_children,
    wait_until_gone,
)
from tests.integration.sshd import (
    ClientHome,
    SshdFactory,
    SshdServer,
    fingerprint_by_ssh_keygen,
    keygen,
    stand_in_agent,
)

FAST = LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=3.0)
HANG_GUARD_S = 30.0
REPO = Path(__file__).resolve().parents[2]


def _link(target: str, options: LinkOptions = FAST, source: bytes | None = None) -> SshLink:
    return SshLink(target, options, client="openssh", source=source)


def _open_error(link: SshLink) -> tuple[LinkError, float]:
    started = time.monotonic()
    try:
        with pytest.raises(LinkError) as caught:
            link.open()
    finally:
        link.close()
    assert ssh_children() == []
    return caught.value, time.monotonic() - started


def _opens(target: str, options: LinkOptions = FAST) -> None:
    link = _link(target, options, source=stand_in_agent())
    try:
        link.open()
        assert link.next_snapshot(HANG_GUARD_S) is not None
    finally:
        link.close()


def _read_until_broken(link: SshLink) -> None:
    end = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < end:
        link.next_snapshot(1.0)


@pytest.fixture
def host_a(sshd_factory: SshdFactory, ssh_client: ClientHome) -> SshdServer:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    return server


# -- host keys ---------------------------------------------------------------------------------------------


def test_unknown_key_is_refused_with_its_fingerprint_then_recorded_by_ssh_once_accepted(
    host_a: SshdServer, ssh_client: ClientHome
) -> None:
    ssh_client.known_hosts.write_text("# nothing yet\n")
    error, _ = _open_error(_link("host-a"))
    assert isinstance(error, UnknownHostKey)
    assert error.fingerprint == fingerprint_by_ssh_keygen(host_a.host_pub)
    assert (error.hop, error.lookup_name) == ("host-a", host_a.known_hosts_name)
    assert error.key_type == "ssh-ed25519"
    assert str(error) == (
        f"host-a: unknown host key for {host_a.known_hosts_name}: ssh-ed25519 {error.fingerprint}; not "
        "connecting (accept it in the app or with --accept-new)"
    )
    assert not worth_retrying(error)
    assert ssh_client.known_hosts.read_text() == "# nothing yet\n"
    # Refused at the key, and the fingerprint read by a connection that stops there: nobody logged in.
    assert "Accepted publickey" not in host_a.log()

    # The app's accept: nothing written yet; the next connection records it through ssh's accept-new.
    assert accept_host_key(error.hop, error.key) == ""
    assert ssh_client.known_hosts.read_text() == "# nothing yet\n"
    _opens("host-a")
    assert ssh_client.known_hosts.read_text() == "# nothing yet\n" + host_a.known_hosts_line() + "\n"
    # Accepted for that one connection: the known key is simply known from now on.
    _opens("host-a")
    assert host_a.log().count("Accepted publickey") == 2


def test_an_accepted_key_that_is_not_the_one_presented_next_is_refused(
    host_a: SshdServer, ssh_client: ClientHome
) -> None:
    error, _ = _open_error(_link("host-a"))
    assert isinstance(error, UnknownHostKey)
    accept_host_key(error.hop, error.key)
    # Someone else answers the next connection: another key at the same address.
    host_a.stop()
    for path in (host_a.host_key, host_a.host_pub):
        path.unlink()
    host_a.host_key_type, host_a.host_key_blob = keygen(host_a.host_key)
    host_a.start()
    refused, _ = _open_error(_link("host-a", source=stand_in_agent()))
    assert isinstance(refused, ChangedHostKey)
    assert not worth_retrying(refused)
    assert str(refused).startswith(
        f"host-a: the host presented a key other than the ssh-ed25519 {error.fingerprint} accepted for "
    )
    assert "\n" not in str(refused)


def test_accept_new_records_the_key_as_ssh_config_says(host_a: SshdServer, ssh_client: ClientHome) -> None:
    ssh_client.add_host("hashed", host_a, "HashKnownHosts yes")
    accept_new = LinkOptions(memory_interval_s=0.5, connect_timeout_s=3.0, accept_new=True)
    _opens("hashed", accept_new)
    text = ssh_client.known_hosts.read_text()
    assert text.startswith("|1|")
    assert str(host_a.port) not in text
    found = subprocess.run(
        ["ssh-keygen", "-F", host_a.known_hosts_name, "-f", str(ssh_client.known_hosts)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 0
    _opens("hashed")
    assert ssh_client.known_hosts.read_text() == text


def test_changed_key_is_refused_every_time_even_with_accept_new(
    host_a: SshdServer, ssh_client: ClientHome, tmp_path: Path
) -> None:
    key_type, _ = keygen(tmp_path / "impostor")
    impostor = (tmp_path / "impostor.pub").read_text().split()
    ssh_client.known_hosts.write_text(f"{host_a.known_hosts_name} {impostor[0]} {impostor[1]}\n")
    before = ssh_client.known_hosts.read_text()
    accept_new = LinkOptions(memory_interval_s=0.5, connect_timeout_s=3.0, accept_new=True)
    for options in (FAST, accept_new, accept_new):
        error, _ = _open_error(_link("host-a", options))
        assert isinstance(error, ChangedHostKey)
        assert not worth_retrying(error)
        presented = fingerprint_by_ssh_keygen(host_a.host_pub)
        assert str(error) == (
            f"host-a: HOST KEY CHANGED for {host_a.known_hosts_name}: it presents ED25519 {presented} but "
            f"{ssh_client.known_hosts}:1 records another key; refusing to connect (remove that line if the "
            "change is expected)"
        )
    assert ssh_client.known_hosts.read_text() == before
    assert "Accepted publickey" not in host_a.log()


def test_revoked_key_is_refused(host_a: SshdServer, ssh_client: ClientHome) -> None:
    ssh_client.trust(host_a)
    with ssh_client.known_hosts.open("a") as fh:
        fh.write("@revoked * " + " ".join(host_a.known_hosts_line().split()[1:]) + "\n")
    error, _ = _open_error(_link("host-a"))
    assert isinstance(error, RevokedHostKey)
    assert str(error) == (
        f"host-a: the host key of {host_a.known_hosts_name} (ED25519) is marked @revoked; refusing to connect"
    )


# -- deadlines ---------------------------------------------------------------------------------------------


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


@pytest.fixture
def full_backlog_listener() -> Iterator[int]:
    """A port whose listener never accepts and whose backlog is full: new SYNs are dropped, connect hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    yield port
    for filler in fillers:
        filler.close()
    server.close()


def test_port_without_banner_fails_at_the_banner_deadline(
    ssh_client: ClientHome, silent_listener: int
) -> None:
    error, elapsed = _open_error(_link(f"127.0.0.1:{silent_listener}", LinkOptions(connect_timeout_s=1.0)))
    assert str(error) == (
        f"127.0.0.1:{silent_listener}: Connection timed out during banner exchange (Connection to 127.0.0.1 "
        f"port {silent_listener} timed out)"
    )
    assert worth_retrying(error)
    assert elapsed < HANG_GUARD_S


def test_unresolvable_name_is_one_line(ssh_client: ClientHome) -> None:
    error, elapsed = _open_error(_link("gpu-node.invalid", LinkOptions(connect_timeout_s=2.0)))
    assert str(error).startswith("gpu-node.invalid: ssh: Could not resolve hostname gpu-node.invalid")
    assert worth_retrying(error)
    assert elapsed < HANG_GUARD_S


def test_listener_that_never_accepts_fails_at_the_connect_deadline(
    ssh_client: ClientHome, full_backlog_listener: int
) -> None:
    target = f"127.0.0.1:{full_backlog_listener}"
    error, elapsed = _open_error(_link(target, LinkOptions(connect_timeout_s=1.0)))
    assert str(error).startswith(f"{target}: ")
    assert "timed out" in str(error)
    assert worth_retrying(error)
    assert elapsed < HANG_GUARD_S


# -- auth, prompts, proxies --------------------------------------------------------------------------------


def test_auth_failure_is_one_line_after_one_connection(
    host_a: SshdServer, ssh_client: ClientHome, ssh_keys: dict[str, Path]
) -> None:
    ssh_client.trust(host_a)
    ssh_client.use_key(ssh_keys["other"])
    error, _ = _open_error(_link("host-a"))
    assert isinstance(error, AuthFailed)
    assert not worth_retrying(error)
    assert str(error).startswith("host-a: authentication failed: ")
    assert "Permission denied (publickey)" in str(error)
    assert "\n" not in str(error)
    assert host_a.log().count("Connection from 127.0.0.1") == 2  # the fixture's readiness probe + this one


def test_ssh_that_would_prompt_never_does(
    sshd_factory: SshdFactory,
    ssh_client: ClientHome,
    ssh_keys: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bastion, target = sshd_factory(), sshd_factory()
    bastion.authorize(Path(f"{ssh_keys['encrypted']}.pub"))
    target.authorize(Path(f"{ssh_keys['encrypted']}.pub"))
    ssh_client.add_host("bastion", bastion)
    ssh_client.add_host("behind", target, "ProxyJump bastion")
    ssh_client.trust(bastion)
    ssh_client.trust(target)
    # Only a passphrase-protected key: the jump host's own ssh (which gets no BatchMode) would ask for it,
    # through an askpass program forced on it by the environment.
    ssh_client.use_key(ssh_keys["encrypted"])
    asked = tmp_path / "asked"
    askpass = proxy_script(tmp_path / "askpass", f"touch {asked}\necho 'correct horse battery staple'")
    monkeypatch.setenv("SSH_ASKPASS", str(askpass))
    monkeypatch.setenv("SSH_ASKPASS_REQUIRE", "force")
    monkeypatch.setenv("DISPLAY", ":0")
    error, elapsed = _open_error(_link("behind", LinkOptions(connect_timeout_s=3.0)))
    assert isinstance(error, AuthFailed)
    assert "\n" not in str(error)
    assert elapsed < HANG_GUARD_S
    assert not asked.exists()
    assert "Accepted publickey" not in bastion.log()


def test_proxy_command_that_hangs_is_bounded_and_ended(ssh_client: ClientHome, tmp_path: Path) -> None:
    # A proxy that never connects anything and ignores the hangup ssh sends it when it gives up.
    proxy = proxy_script(tmp_path / "stuck-proxy", "trap '' HUP TERM INT\nwhile :; do sleep 1; done")
    ssh_client.add_lines("Host stuck", "  HostName gpu-stuck.invalid", f"  ProxyCommand {proxy}")
    try:
        error, elapsed = _open_error(_link("stuck", LinkOptions(connect_timeout_s=2.0)))
        assert str(error).startswith("stuck: Connection timed out during banner exchange")
        assert worth_retrying(error)
        assert elapsed < HANG_GUARD_S
        assert wait_until_gone(processes_running(str(proxy)), 5.0) == []
    finally:
        kill_quietly(processes_running(str(proxy)))


def test_collector_ends_when_its_ssh_ends(host_a: SshdServer, ssh_client: ClientHome) -> None:
    ssh_client.trust(host_a)
    link = _link("host-a", source=stand_in_agent())
    link.open()
    try:
        assert link.next_snapshot(HANG_GUARD_S) is not None
        sessions = host_a.session_processes()
        (ssh,) = ssh_children()
        ssh.send_signal(signal.SIGKILL)
        with pytest.raises(LinkError) as caught:
            _read_until_broken(link)
        assert worth_retrying(caught.value)
        assert str(caught.value).startswith("host-a: ")
    finally:
        link.close()
    assert ssh_children() == []
    assert wait_until_gone(sessions) == []


# -- the command line --------------------------------------------------------------------------------------


def _gputui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_command_line_refuses_an_unknown_key_in_one_line_and_accepts_it_when_asked(
    host_a: SshdServer, ssh_client: ClientHome, fake_nvml: object
) -> None:
    done = _gputui("snapshot", "--ssh-client", "openssh", "--no-discover", "host-a")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert fingerprint_by_ssh_keygen(host_a.host_pub) in lines[0]
    assert "--accept-new" in lines[0]
    assert not ssh_client.known_hosts.exists()
    done = _gputui("snapshot", "--ssh-client", "openssh", "--no-discover", "--accept-new", "host-a")
    assert done.returncode == 0, done.stderr
    assert ssh_client.known_hosts.read_text() == host_a.known_hosts_line() + "\n"
