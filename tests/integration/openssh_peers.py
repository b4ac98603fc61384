"""What the system-ssh transport's tests put around the real sshd's: certificate authorities, a ControlMaster
started by the test, ProxyCommand scripts, and a look at the ssh processes this test process runs.

Every process started here is ended here (``control_master`` stops its master; the scripts end with the ssh
that runs them, or are killed by the code under test, which is what the tests check).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from gputui.core.link import LinkOptions
from gputui.core.model import HostSnapshot
from gputui.transports.ssh import SshLink
from tests.integration.sshd import ClientHome, SshdFactory, SshdServer, keygen

DEADLINE_S = 30.0


def read_once(
    target: str, options: LinkOptions, *, client: str, source: bytes | None = None
) -> tuple[SshLink, HostSnapshot]:
    """Open ``target`` with ``client``, take the first snapshot, close; the link (closed) and the snapshot."""
    link = SshLink(target, options, client=client, source=source)
    try:
        link.open()
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            snapshot = link.next_snapshot(1.0)
            if snapshot is not None:
                return link, snapshot
        raise AssertionError(f"{target}: no snapshot within {DEADLINE_S} s")
    finally:
        link.close()


def make_ca(path: Path) -> Path:
    """A certificate authority key pair at ``path``; returns the public key's path."""
    keygen(path)
    return Path(f"{path}.pub")


def _sign(ca: Path, public: Path, identity: str, principal: str, *flags: str) -> Path:
    """Sign ``public`` with ``ca`` for ``principal``, valid for an hour; returns the certificate's path."""
    validity = ["-I", identity, "-n", principal, "-V", "-5m:+1h"]
    subprocess.run(
        ["ssh-keygen", "-q", "-s", str(ca), *flags, *validity, str(public)],
        check=True,
        timeout=60,
        capture_output=True,
    )
    return Path(str(public).removesuffix(".pub") + "-cert.pub")


def sign_user_key(ca: Path, public: Path, principal: str, dest: Path) -> Path:
    """A user certificate for ``public`` logging in as ``principal``, moved to ``dest``.

    Away from the key (where a CA-signing service would leave it): paramiko picks up a ``KEY-cert.pub``
    next to ``KEY`` by itself, but only ssh reads ``CertificateFile``.
    """
    return _sign(ca, public, "gputui-test-user", principal).rename(dest)


def sign_host_key(ca: Path, public: Path, principal: str) -> Path:
    """A host certificate for ``public`` naming ``principal``; returns its path."""
    return _sign(ca, public, "gputui-test-host", principal, "-h")


@contextmanager
def control_master(client: ClientHome, alias: str, socket_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The user's ControlMaster for ``alias``: ``ssh -M -N`` on ``socket_path``, stopped on exit."""
    options = ["-o", "BatchMode=yes", "-o", "ControlPersist=no", "-o", f"ControlPath={socket_path}"]
    master = subprocess.Popen(
        ["ssh", "-F", str(client.config), "-M", "-N", *options, "--", alias],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not socket_path.exists():
            if master.poll() is not None:
                assert master.stderr is not None
                raise RuntimeError(f"ControlMaster exited: {master.stderr.read().decode(errors='replace')}")
            if time.monotonic() > deadline:
                raise RuntimeError("ControlMaster socket never appeared")
            time.sleep(0.05)
        yield master
    finally:
        if master.poll() is None:
            master.terminate()
        try:
            master.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait(DEADLINE_S)
        if master.stderr is not None:
            master.stderr.close()


def behind_a_proxy_command(
    sshd_factory: SshdFactory, client: ClientHome, alias: str
) -> tuple[SshdServer, SshdServer]:
    """A trusted host ``alias`` reached only through a ProxyCommand (``ssh -W`` through a trusted bastion):
    its HostName does not resolve. Returns (bastion, host)."""
    bastion, host = sshd_factory(), sshd_factory()
    client.add_host("bastion", bastion)
    client.trust(bastion)
    client.add_lines(
        f"Host {alias}",
        "  HostName gpu-behind.invalid",
        f"  Port {host.port}",
        f"  ProxyCommand ssh -F {client.config} -W 127.0.0.1:%p bastion",
    )
    client.trust(host, name=f"[gpu-behind.invalid]:{host.port}")
    return bastion, host


def proxy_script(path: Path, body: str) -> Path:
    """An executable ``sh`` script at ``path`` (a ProxyCommand); its path names it in process lists."""
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def processes_running(marker: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose command line holds ``marker`` (a path made by the test)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if marker in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def ssh_children() -> list[psutil.Process]:
    """The ``ssh`` client processes below this test process that are still running."""
    found = []
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if proc.name() == "ssh" and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def wait_until_gone(procs: list[psutil.Process], deadline_s: float = DEADLINE_S) -> list[psutil.Process]:
    """Wait up to ``deadline_s`` for ``procs`` to end; returns those still running."""
    _, alive = psutil.wait_procs(procs, timeout=deadline_s)
    return [p for p in alive if _running(p)]


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_quietly(procs: list[psutil.Process]) -> None:
    """SIGKILL what a failed test left running (the test has already failed; nothing must stay behind)."""
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
