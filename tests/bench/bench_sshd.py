"""A throwaway OpenSSH server on 127.0.0.1 for the fan-out and remote-cost benchmarks.

One sshd serves any number of ``Host`` aliases (all ``HostName 127.0.0.1``, one port), so 64 "hosts" cost one
listening daemon plus one forked session per connection. Sessions run the project's virtualenv ``python3``
(first on PATH, so the shipped agent finds pynvml and psutil, as on a GPU host) under the fake NVML
(``LD_LIBRARY_PATH``/``FAKE_NVML_STATE`` set by sshd's ``SetEnv``). Used only when the test suite's own
fixture (``tests/integration/sshd.py``) is absent or cannot be driven from a script.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class BenchSshd:
    """A running sshd plus the client files that reach it: an ssh config, a key and a known_hosts file."""

    process: subprocess.Popen
    port: int
    config_path: Path
    identity_path: Path
    known_hosts_path: Path
    aliases: list[str]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


def start(
    work_dir: Path, python_dir: Path, env: dict[str, str], alias_count: int, alias_prefix: str = "gpu-bench-"
) -> BenchSshd:
    """Start sshd on a free loopback port and write a client config with ``alias_count`` aliases to it.

    Args:
        work_dir: Empty directory for keys, configs and logs.
        python_dir: Directory whose ``python3`` the sessions should run (put first on PATH).
        env: Variables every session gets (the fake NVML's LD_LIBRARY_PATH and FAKE_NVML_STATE).
        alias_count: How many Host aliases to write.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    host_key = work_dir / "host_ed25519"
    user_key = work_dir / "id_ed25519"
    _keygen(host_key)
    _keygen(user_key)
    authorized = work_dir / "authorized_keys"
    authorized.write_text(user_key.with_suffix(".pub").read_text())
    authorized.chmod(0o600)
    bin_dir = work_dir / "bin"
    bin_dir.mkdir(exist_ok=True)
    # A wrapper, not a symlink: a symlinked venv python would not find its pyvenv.cfg (and its packages).
    wrapper = bin_dir / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec "{python_dir / "python3"}" "$@"\n')
    wrapper.chmod(0o755)
    port = free_port()
    set_env = " ".join(f'"{k}={v}"' for k, v in sorted(env.items()))
    path = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    sshd_config = work_dir / "sshd_config"
    sshd_config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized}",
                f"PidFile {work_dir / 'sshd.pid'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin yes",
                "StrictModes no",
                "UsePAM no",
                "UseDNS no",
                # 64 hosts connect at once: do not drop concurrent unauthenticated connections.
                "MaxStartups 200:100:300",
                "MaxSessions 100",
                "LogLevel ERROR",
                f"SetEnv {set_env}",
                # The login shell may prepend its own PATH (a .bashrc with pyenv): set ours after it.
                f'ForceCommand PATH={path} exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"',
                "",
            ]
        )
    )
    # sshd refuses to start without its privilege-separation directory (absent on a fresh container).
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = work_dir / "sshd.log"
    process = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(sshd_config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"bench sshd did not start: {log.read_text()[-500:]}")
        time.sleep(0.05)
    host_pub = host_key.with_suffix(".pub").read_text().split()
    known_hosts = work_dir / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    aliases = [f"{alias_prefix}{i:02d}" for i in range(alias_count)]
    config = work_dir / "ssh_config"
    config.write_text(
        "".join(
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {os.environ.get('USER') or 'root'}\n"
            f"  IdentityFile {user_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known_hosts}\n"
            f"  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n"
            for alias in aliases
        )
    )
    return BenchSshd(process, port, config, user_key, known_hosts, aliases)


@dataclass
class LoopbackHosts:
    """``alias_count`` SSH Host aliases on one loopback sshd, and the client environment that reaches them."""

    aliases: list[str]
    client_env: dict[str, str]
    source: str
    close: Any


def start_hosts(
    work_dir: Path, python_dir: Path, fake_env: dict[str, str], alias_count: int
) -> LoopbackHosts:
    """Start one sshd with the test suite's fixture module (``tests/integration/sshd.py``), else this module's.

    Args:
        work_dir: Empty directory for keys, configs, homes and logs.
        python_dir: Directory holding the ``python3`` the remote sessions run.
        fake_env: LD_LIBRARY_PATH and FAKE_NVML_STATE for the sessions.
        alias_count: How many Host aliases the client config gets.
    """
    aliases = [f"gpu-bench-{i:02d}" for i in range(alias_count)]
    try:
        from tests.integration import sshd as fixture
    except Exception as exc:  # absent or not importable outside pytest: use ours
        fixture_error = f"{type(exc).__name__}: {exc}"
    else:
        key = work_dir / "id_client"
        work_dir.mkdir(parents=True, exist_ok=True)
        fixture.keygen(key)
        bin_dir = fixture._python_wrapper(work_dir / "remote-bin", str(python_dir / "python3"))
        remote_home = work_dir / "remote-home"
        remote_home.mkdir()
        server = fixture.SshdServer(
            root=work_dir / "sshd",
            authorized_pub=Path(f"{key}.pub"),
            python_dir=bin_dir,
            env={"HOME": str(remote_home), **fake_env, "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"},
        )
        server.start()
        client = fixture.ClientHome(home=work_dir / "client-home", key=key)
        for alias in aliases:
            client.add_host(alias, server)
        client.trust(server)
        env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "GPUTUI_SSH_RESOLVER")}
        env.update(HOME=str(client.home), GPUTUI_SSH_CONFIG=str(client.config))
        return LoopbackHosts(aliases, env, "tests/integration/sshd.py (SshdServer + ClientHome)", server.stop)
    own = start(work_dir, python_dir, fake_env, alias_count)
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "GPUTUI_SSH_RESOLVER")}
    env["GPUTUI_SSH_CONFIG"] = str(own.config_path)
    return LoopbackHosts(
        own.aliases, env, f"tests/bench/bench_sshd.py (fixture unusable: {fixture_error})", own.close
    )
