"""Real OpenSSH servers on loopback for the SSH transport's tests (a pytest plugin module).

Each ``SshdServer`` is ``/usr/sbin/sshd -D -e -f <tmp>/sshd_config`` on 127.0.0.1 and a free port, with its
own host key, one authorized client key, ``StrictModes no``, ``UsePAM no``, key-only login (root allowed with
a key) and ``PerSourcePenalties no`` where the server knows that option. Its sessions see the fake NVML
through ``SetEnv`` (``LD_LIBRARY_PATH``, ``FAKE_NVML_STATE``), a ``PATH`` whose ``python3`` is set per server:

- ``"venv"``: this test run's interpreter (has pynvml and psutil);
- ``"bare"``: a venv made with ``--without-pip`` from the base interpreter (neither pynvml nor psutil);
- ``"none"``: no python3 at all, but ``sh``, ``cat``, ``sleep``, ``ps`` and a fake ``nvidia-smi`` that prints
  the files ``gpus.csv`` / ``apps.csv`` from the server's ``smi_dir`` (exit 9 like a driverless host when
  ``gpus.csv`` is missing, else the status in ``gpus.rc`` if there is one);
- ``"empty"``: nothing on PATH at all (not even ``sh``).

``ClientHome`` is a temporary ``~/.ssh`` layout (config, known_hosts, keys); the fixtures point
``GPUTUI_SSH_CONFIG`` and ``HOME`` at it and drop ``SSH_AUTH_SOCK``, so the user's real ~/.ssh and agent are
never touched. Config entries use absolute paths because ``ssh -G`` expands ``~`` from the passwd entry, not
from ``$HOME``.

``STAND_IN_AGENT`` is a test double of the collector (``gputui.agent``) that speaks the protocol and
misbehaves on request (floods, hangs, wrong protocol): it exercises the channel handling, not the collector.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from gputui.agent.gpu.xid import TEST_SOURCE_ENV
from tests.fakenvml.plugin import FakeNvml
from tests.leakcheck import RUN_TOKEN_VAR, run_token

SSHD = "/usr/sbin/sshd"
START_DEADLINE_S = 15.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path, passphrase: str = "", key_type: str = "ed25519") -> tuple[str, bytes]:
    """Make a key pair at ``path``/``path``.pub; returns the public key type and blob."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", key_type, "-N", passphrase, "-C", "gputui-test", "-f", str(path)],
        check=True,
        timeout=60,
    )
    words = Path(f"{path}.pub").read_text().split()
    return words[0], base64.b64decode(words[1])


def fingerprint_by_ssh_keygen(pub_path: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub_path)], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[1]


_penalties_supported: bool | None = None


def _supports_per_source_penalties(config: Path) -> bool:
    global _penalties_supported
    if _penalties_supported is None:
        probe = subprocess.run(
            [SSHD, "-t", "-f", str(config), "-o", "PerSourcePenalties=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        _penalties_supported = probe.returncode == 0
    return _penalties_supported


@dataclass
class SshdServer:
    """One sshd on 127.0.0.1; ``start()``/``stop()`` may be repeated and keep the port."""

    root: Path
    authorized_pub: Path
    python_dir: Path
    env: dict[str, str]
    extra_config: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    smi_dir: Path | None = None

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.host_key = self.root / "ssh_host_ed25519_key"
        if not self.host_key.exists():
            self.host_key_type, self.host_key_blob = keygen(self.host_key)
        self.log_path = self.root / "sshd.log"
        self.config_path = self.root / "sshd_config"
        self._write_config()

    @property
    def host_pub(self) -> Path:
        return Path(f"{self.host_key}.pub")

    @property
    def known_hosts_name(self) -> str:
        return f"[127.0.0.1]:{self.port}"

    def known_hosts_line(self, name: str | None = None) -> str:
        blob = base64.b64encode(self.host_key_blob).decode()
        return f"{name or self.known_hosts_name} {self.host_key_type} {blob}"

    def _write_config(self) -> None:
        env_words = " ".join(f"{k}={v}" for k, v in self.env.items())
        lines = [
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"PidFile {self.root / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_pub}",
            "StrictModes no",
            "UsePAM no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "AllowTcpForwarding yes",
            "LogLevel VERBOSE",
            "MaxStartups 100:30:200",
            "MaxAuthTries 6",
            f"SetEnv {env_words}",
            *self.extra_config,
        ]
        self.config_path.write_text("\n".join(lines) + "\n")
        if _supports_per_source_penalties(self.config_path):
            with self.config_path.open("a") as fh:
                fh.write("PerSourcePenalties no\n")

    def authorize(self, *public_keys: Path) -> None:
        """Let ``public_keys`` log in too (besides the usual client key); restarts a running server."""
        combined = self.root / "authorized_keys"
        combined.write_text("".join(Path(p).read_text() for p in (self.authorized_pub, *public_keys)))
        self.authorized_pub = combined
        self._write_config()
        if self.proc is not None:
            self.stop()
            self.start()

    def start(self) -> None:
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited at once ({self.proc.returncode}):\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                    sock.settimeout(2.0)
                    if sock.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not answer on port {self.port}:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def session_processes(self) -> list[psutil.Process]:
        """Every process below the listener: per-connection sshd's, their shells and collectors."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def signal_sessions(self, signum: int) -> int:
        count = 0
        for proc in self.session_processes():
            try:
                proc.send_signal(signum)
                count += 1
            except psutil.NoSuchProcess:
                pass
        return count

    def stop(self, kill_sessions: bool = True) -> None:
        """Stop the listener (SIGKILL) and, by default, every session below it."""
        if self.proc is None:
            return
        sessions = self.session_processes() if kill_sessions else []
        for proc in sessions:
            try:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        psutil.wait_procs(sessions, timeout=5)
        self.proc = None


@dataclass
class ClientHome:
    """A throwaway client side: ~/.ssh/config, known_hosts and keys under a temporary HOME."""

    home: Path
    key: Path
    python_dirs: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ssh_dir = self.home / ".ssh"
        self.ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.config = self.ssh_dir / "config"
        self.known_hosts = self.ssh_dir / "known_hosts"
        self.identities_only = True
        self._entries: list[str] = []
        self._write()

    def _write(self) -> None:
        tail = [
            "Host *",
            f"  UserKnownHostsFile {self.known_hosts}",
            "  GlobalKnownHostsFile /dev/null",
            f"  IdentityFile {self.key}",
            f"  IdentitiesOnly {'yes' if self.identities_only else 'no'}",
            "  HashKnownHosts no",
            f"  User {_current_user()}",
        ]
        self.config.write_text("\n".join(self._entries + tail) + "\n")

    def use_key(self, key: Path, identities_only: bool = True) -> None:
        """Make ``key`` the identity file every host gets (and set IdentitiesOnly)."""
        self.key = key
        self.identities_only = identities_only
        self._write()

    def add_host(self, alias: str, server: SshdServer, *extra: str) -> None:
        """A ``Host alias`` block pointing at ``server`` (extra lines go inside the block)."""
        self._entries += [
            f"Host {alias}",
            "  HostName 127.0.0.1",
            f"  Port {server.port}",
            *(f"  {e}" for e in extra),
        ]
        self._write()

    def add_lines(self, *lines: str) -> None:
        self._entries += list(lines)
        self._write()

    def trust(self, server: SshdServer, name: str | None = None) -> None:
        with self.known_hosts.open("a") as fh:
            fh.write(server.known_hosts_line(name) + "\n")


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _python_wrapper(directory: Path, interpreter: str | None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if interpreter is not None:
        wrapper = directory / "python3"
        # A script, not a symlink: a venv's interpreter finds its pyvenv.cfg only through its own path.
        wrapper.write_text(f'#!/bin/sh\nexec "{interpreter}" "$@"\n')
        wrapper.chmod(0o755)
    return directory


FAKE_NVIDIA_SMI = """#!/bin/sh
# Test double of nvidia-smi for hosts without python3: prints what the test wrote (and exits with the status
# in gpus.rc, as nvidia-smi exits 15 after the GPUs it could read when one is lost).
case "$*" in
  *--query-gpu=*)
    if [ -f "{smi_dir}/gpus.csv" ]; then
      cat "{smi_dir}/gpus.csv"
      if [ -f "{smi_dir}/gpus.rc" ]; then exit "$(cat "{smi_dir}/gpus.rc")"; fi
      exit 0
    fi
    echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    exit 9 ;;
  *--query-compute-apps=*)
    if [ -f "{smi_dir}/apps.csv" ]; then cat "{smi_dir}/apps.csv"; fi
    exit 0 ;;
esac
exit 2
"""


def _tools_without_python(bin_dir: Path, smi_dir: Path) -> None:
    """A PATH folder with the shell tools the reduced collector uses, a fake nvidia-smi, and no python3."""
    import shutil

    for tool in ("sh", "cat", "sleep", "ps"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found is not None:  # ps (procps) may be absent from slim images: the collector copes without it
            (bin_dir / tool).symlink_to(found)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI.replace("{smi_dir}", str(smi_dir)))
    smi.chmod(0o755)


@pytest.fixture(scope="session")
def ssh_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Client keys: ``good`` (authorized on every server), ``other`` (authorized nowhere), ``encrypted``."""
    root = tmp_path_factory.mktemp("ssh-keys")
    keys = {"good": root / "id_good", "other": root / "id_other", "encrypted": root / "id_encrypted"}
    keygen(keys["good"])
    keygen(keys["other"])
    keygen(keys["encrypted"], passphrase="correct horse battery staple")
    return keys


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A python3 with neither pynvml nor psutil: a fresh venv of the base interpreter."""
    root = tmp_path_factory.mktemp("bare-venv")
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = str(root / "venv" / "bin" / "python3")
    probe = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('pynvml'), u.find_spec('psutil'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["None", "None"], probe.stdout
    return python


@pytest.fixture
def ssh_client(tmp_path: Path, ssh_keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> ClientHome:
    """A temporary client side, made the one gputui uses (HOME, GPUTUI_SSH_CONFIG; no ssh-agent)."""
    client = ClientHome(home=tmp_path / "client-home", key=ssh_keys["good"])
    monkeypatch.setenv("HOME", str(client.home))
    monkeypatch.setenv("GPUTUI_SSH_CONFIG", str(client.config))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("GPUTUI_SSH_RESOLVER", raising=False)
    return client


SshdFactory = Callable[..., SshdServer]


def host_without_python(
    sshd_factory: SshdFactory, ssh_client: ClientHome, alias: str, gpus_csv: str | None = None
) -> SshdServer:
    """A trusted server named ``alias`` with no python3, whose fake nvidia-smi prints ``gpus_csv``."""
    server = sshd_factory(python="none")
    assert server.smi_dir is not None
    if gpus_csv is not None:
        (server.smi_dir / "gpus.csv").write_text(gpus_csv)
    ssh_client.add_host(alias, server)
    ssh_client.trust(server)
    return server


@pytest.fixture
def sshd_factory(
    tmp_path: Path, ssh_keys: dict[str, Path], fake_nvml: FakeNvml, bare_python: str
) -> Iterator[SshdFactory]:
    """Start sshd servers: ``sshd_factory(python="venv"|"bare"|"none", extra_config=(...), nvml=True)``.

    ``nvml=False``: the sessions cannot load the (fake) NVML library, as on a host whose driver has no
    libnvidia-ml.so.1 for them; the collector then reads ``nvidia-smi`` where there is one.
    """
    servers: list[SshdServer] = []
    lib_dir = Path(fake_nvml.lib_dir)
    state_path = Path(fake_nvml.state_path)
    interpreters = {"venv": sys.executable, "bare": bare_python, "none": None, "empty": None}

    def start(
        python: str = "venv",
        extra_config: tuple[str, ...] = (),
        nvml: bool = True,
        old_python: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> SshdServer:
        """``old_python``: with ``python="none"``, its python3 is this (too old) interpreter; ``extra_env``:
        more for the sessions' environment (a ``LD_LIBRARY_PATH`` in it comes first on the fake NVML's)."""
        index = len(servers)
        if python == "py38":  # the oldest python3 the collector supports, with nothing installed
            from tests.interpreters import python38

            interpreter: str | None = python38()
        else:
            interpreter = old_python if old_python is not None else interpreters[python]
        bin_dir = _python_wrapper(tmp_path / f"remote-bin-{index}", interpreter)
        remote_home = tmp_path / f"remote-home-{index}"
        remote_home.mkdir()
        smi_dir = tmp_path / f"fake-smi-{index}"
        smi_dir.mkdir()
        if python == "none":
            _tools_without_python(bin_dir, smi_dir)
        path = (
            f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
            if python in ("venv", "bare", "py38")
            else f"{bin_dir}:/nonexistent"
        )
        env = {
            # The login user's own rc files (say pyenv in ~/.bashrc, which bash reads under sshd) would
            # rewrite PATH: sessions get an empty HOME of their own.
            "HOME": str(remote_home),
            "LD_LIBRARY_PATH": str(lib_dir) if nvml else "/nonexistent",
            "FAKE_NVML_STATE": str(state_path),
            "PATH": path,
            # Sessions (collectors included) are this run's processes: the end-of-run check looks for it.
            RUN_TOKEN_VAR: run_token(),
            # The suite's kernel log, never the machine's (``tests.kernellog``).
            TEST_SOURCE_ENV: os.environ[TEST_SOURCE_ENV],
        }
        for key, value in (extra_env or {}).items():
            if key == "LD_LIBRARY_PATH":
                env[key] = ":".join(dict.fromkeys([*value.split(":"), env[key]]))
            elif key not in ("HOME", "PATH"):
                env[key] = value
        server = SshdServer(
            root=tmp_path / f"sshd-{index}",
            authorized_pub=Path(f"{ssh_keys['good']}.pub"),
            python_dir=bin_dir,
            env=env,
            extra_config=tuple(extra_config),
        )
        server.smi_dir = smi_dir
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        try:
            server.stop()
        except Exception:
            pass


STAND_IN_AGENT = r"""
# Test double of the collector: speaks the JSON-lines protocol, misbehaves on request.
import json, os, sys, threading, time
BEHAVIOUR = %(behaviour)r
BOOT_ID_FILE = %(boot_id_file)r
PROTOCOL = %(protocol)r
args = sys.argv[1:]
interval = float(args[args.index("--interval") + 1]) if "--interval" in args else 1.0
out = sys.stdout.buffer
lock = threading.Lock()
def emit(obj):
    data = (json.dumps(obj) + "\n").encode()
    with lock:
        out.write(data)
        out.flush()
def boot_id():
    if BOOT_ID_FILE:
        with open(BOOT_ID_FILE) as fh:
            return fh.read().strip()
    with open("/proc/sys/kernel/random/boot_id") as fh:
        return fh.read().strip()
def snapshot(n):
    return {"target": "stand-in", "hostname": "stand-in", "boot_id": boot_id(), "time": time.time(),
            "mode": "stand-in", "gpus": [{"index": 0, "memory_used_mib": n}], "processes": []}
def commands():
    # Like the real collector: however the main thread misbehaves (hangs, floods), the process ends when the
    # client is gone (stdin closed) or says quit.
    for raw in iter(sys.stdin.buffer.readline, b""):
        cmd = json.loads(raw)
        if cmd.get("cmd") == "quit":
            break
        if BEHAVIOUR == "ignore_commands" or not hello_sent.is_set():
            continue
        if cmd.get("cmd") == "echo":
            emit({"t": "reply", "id": cmd["id"], "ok": True, "result": {"echo": cmd.get("payload")}})
        else:
            emit({"t": "reply", "id": cmd["id"], "ok": False, "error": "stand-in: unknown command"})
    os._exit(0)
hello_sent = threading.Event()
threading.Thread(target=commands, daemon=True).start()
if BEHAVIOUR == "hang_before_hello":
    time.sleep(3600)
if BEHAVIOUR == "banner_then_hello":
    out.write(b"Welcome to the cluster!\nlast login: yesterday\n")
# Set before the hello goes out: a client may send its first command the moment it reads the hello.
hello_sent.set()
emit({"t": "hello", "protocol": PROTOCOL, "mode": "stand-in", "boot_id": boot_id(), "pid": 1})
if BEHAVIOUR in ("hang_after_hello", "ignore_commands_hang"):
    time.sleep(3600)
if BEHAVIOUR == "flood_no_newline":
    chunk = b"x" * 65536
    while True:
        out.write(chunk)
if BEHAVIOUR == "not_json":
    out.write(b"\x1b[2Jthis is not json\n")
    out.flush()
    time.sleep(3600)
n = 0
while True:
    n += 1
    if BEHAVIOUR == "flood_stderr":
        sys.stderr.buffer.write(b"e" * 65536 + b"\n")
    if BEHAVIOUR == "flood_lines":
        emit({"t": "snapshot", "snapshot": dict(snapshot(n), pad="p" * 100000)})
        continue
    emit({"t": "snapshot", "snapshot": snapshot(n)})
    time.sleep(interval)
"""


def stand_in_agent(behaviour: str = "normal", boot_id_file: str = "", protocol: int = 1) -> bytes:
    """Source of the stand-in collector with one behaviour (see ``STAND_IN_AGENT``)."""
    return (
        STAND_IN_AGENT % {"behaviour": behaviour, "boot_id_file": boot_id_file, "protocol": protocol}
    ).encode()
