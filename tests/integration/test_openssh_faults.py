"""Faults over the system ssh client that only it meets: host keys through ssh, prompts, proxies, its end.

Real sshd's on 127.0.0.1 and the real ``ssh``. Deadlines, auth failures, stale and hung hosts, reconnects,
runaway collectors, no python3 and quitting while a host hangs are tested for both clients in
``test_ssh_faults.py``; here are the cases where only the system client's behaviour is at stake.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gputui.core.link import LinkError, LinkOptions
from gputui.transports.reconnect import worth_retrying
from gputui.transports.ssh import AuthFailed, SshLink, accept_host_key
from gputui.transports.ssh.hostkeys.knownhosts import (
    ChangedHostKey,
    HostKeyError,
    RevokedHostKey,
    UnknownHostKey,
)
from tests.fakenvml.plugin import FakeNvml
from tests.integration.openssh_peers import (
    kill_quietly,
    processes_running,
    proxy_script,
    read_once,
    ssh_children,
    wait_until_gone,
)
from tests.integration.procs import hangup_ends_it
from tests.integration.sshd import (
    ClientHome,
    SshdFactory,
    SshdServer,
    fingerprint_by_ssh_keygen,
    keygen,
    stand_in_agent,
)

REPO = Path(__file__).resolve().parents[2]
FAST = LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=3.0)
HANG_GUARD_S = 30.0


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
    read_once(target, options, client="openssh", source=stand_in_agent())


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


def test_unknown_key_of_a_jump_host_is_refused_and_left_to_ssh(
    sshd_factory: SshdFactory, ssh_client: ClientHome
) -> None:
    jump, target = sshd_factory(), sshd_factory()
    ssh_client.add_host("jump", jump)
    ssh_client.add_host("behind", target, "ProxyJump jump")
    ssh_client.trust(target)
    error, _ = _open_error(_link("behind"))
    assert type(error) is HostKeyError  # nothing the app could accept: the jump host's ssh checks that key
    assert not worth_retrying(error)
    assert str(error).startswith("behind: the host key of a jump host was refused")
    assert "Accepted publickey" not in jump.log()
    assert "Accepted publickey" not in target.log()


def test_revoked_key_is_refused(host_a: SshdServer, ssh_client: ClientHome) -> None:
    ssh_client.trust(host_a)
    with ssh_client.known_hosts.open("a") as fh:
        fh.write("@revoked * " + " ".join(host_a.known_hosts_line().split()[1:]) + "\n")
    error, _ = _open_error(_link("host-a"))
    assert isinstance(error, RevokedHostKey)
    assert str(error) == (
        f"host-a: the host key of {host_a.known_hosts_name} (ED25519) is marked @revoked; refusing to connect"
    )


# -- prompts, proxies, the end of ssh ---------------------------------------------------------------------


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


@pytest.mark.parametrize(
    ("ending", "status"),
    [("q", 0), (signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGHUP, 128 + signal.SIGHUP)],
    ids=["q", "sigterm", "sighup"],
)
def test_quitting_the_app_while_the_host_hangs_leaves_no_ssh_behind(
    host_a: SshdServer,
    ssh_client: ClientHome,
    fake_nvml: FakeNvml,
    tmp_path: Path,
    ending: str | signal.Signals,
    status: int,
) -> None:
    """Pressing q, a kill, or the terminal closing (SIGHUP): the app's ssh processes end with it."""
    ssh_client.trust(host_a)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "XDG_STATE_HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "gputui.cli", "--ssh-client", "openssh", "--interval", "0.5", "host-a"]
    master, slave = pty.openpty()
    app = subprocess.Popen(  # noqa: S603 - this interpreter and fixed words
        argv,
        cwd=REPO,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=hangup_ends_it,  # signal dispositions only, before exec
    )
    os.close(slave)
    drained = threading.Event()
    drain = threading.Thread(target=_drain, args=(master, drained), daemon=True)
    drain.start()
    ours = str(ssh_client.config)  # every ssh of the app is run with -F this file
    hung: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while "Starting session" not in host_a.log() or not processes_running(ours):
            assert app.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)  # the collector streams
        # The host hangs: its session, and its listener for any reconnect.
        assert host_a.signal_sessions(signal.SIGSTOP) > 0
        assert host_a.proc is not None
        hung.append(host_a.proc)
        host_a.proc.send_signal(signal.SIGSTOP)
        time.sleep(0.5)
        started = time.monotonic()
        if isinstance(ending, str):
            os.write(master, ending.encode())
        else:
            app.send_signal(ending)
        assert app.wait(HANG_GUARD_S) == status
        # The spec is 2 s; allow scheduling noise on a loaded machine.
        assert time.monotonic() - started < 2.5
        # Its ssh ended with it, though the host never answers again.
        assert wait_until_gone(processes_running(ours), 5.0) == []
    finally:
        for proc in hung:
            proc.send_signal(signal.SIGCONT)
        host_a.signal_sessions(signal.SIGCONT)
        if app.poll() is None:
            app.kill()
            app.wait()
        kill_quietly(processes_running(ours))
        drained.set()
        drain.join(5.0)
        os.close(master)


def _drain(master: int, stop: threading.Event) -> None:
    """Read the app's screen output so its writes never block on a full pty."""
    while not stop.is_set():
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                if not os.read(master, 65536):
                    return
            except OSError:
                return
