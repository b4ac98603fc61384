"""The command line over SSH: ``gputui snapshot --json host``, ``check``, ``kill`` and one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import run_main
from tests.integration.openssh_peers import behind_a_proxy_command, control_master
from tests.integration.procs import Worker, is_gone, launcher, read_until, state_of, wait_for
from tests.integration.sshd import (
    ClientHome,
    SshdFactory,
    SshdServer,
    fingerprint_by_ssh_keygen,
    host_without_python,
)

REPO = Path(__file__).resolve().parents[2]


def _gputui(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command line with these words; ``path``: the PATH it runs with (default: this one's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )


def test_snapshot_json_of_two_remote_hosts(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    first, second = sshd_factory(), sshd_factory()
    ssh_client.add_host("host-a", first)
    ssh_client.add_host("host-b", second)
    ssh_client.trust(first)
    ssh_client.trust(second)
    done = _gputui("snapshot", "--json", "host-a", "host-b")
    assert done.returncode == 0, done.stderr
    hosts = json.loads(done.stdout)["hosts"]
    assert [h["target"] for h in hosts] == ["host-a", "host-b"]
    for host in hosts:
        assert host["error"] is None
        assert host["mode"] == "nvml"
        assert [g["memory_used_mib"] for g in host["gpus"]] == [3] * 8


def test_check_of_an_idle_remote_host_is_clean(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    done = _gputui("check", "--wait", "30", "host-a")
    assert done.returncode == 0, done.stdout + done.stderr


def test_unknown_host_key_is_one_line_with_the_fingerprint(
    sshd_factory: SshdFactory, ssh_client: ClientHome
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    done = _gputui("snapshot", "host-a")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert fingerprint_by_ssh_keygen(server.host_pub) in lines[0]
    assert not ssh_client.known_hosts.exists()
    accepted = _gputui("snapshot", "--json", "--accept-new", "host-a")
    assert accepted.returncode == 0, accepted.stderr
    assert ssh_client.known_hosts.read_text() == server.known_hosts_line() + "\n"


def test_hostile_target_word_is_refused_before_anything_runs(ssh_client: ClientHome, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    for word in (f"-oProxyCommand=touch {canary}", f"host;touch {canary}", f"$(touch {canary})"):
        done = _gputui("snapshot", "--", word) if word.startswith("-") else _gputui("snapshot", word)
        assert done.returncode == 2, (word, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not canary.exists()


def test_kill_on_a_remote_host(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        fake_nvml.state.add_holder(3, victim.pid, 4096)
        fake_nvml.write()
        done = _gputui("kill", "--yes", "--json", "host-a", str(victim.pid))
        assert done.returncode == 0, done.stdout + done.stderr
        assert victim.wait(timeout=30) is not None
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(timeout=10)


STUBBORN_TREE = [Worker("scheduler_TP0", gpu=0), Worker("scheduler_TP1", gpu=1, mode="ignore_term")]
"""A launcher with one worker that dies of TERM and one that ignores it."""


def _remote_host(
    sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path
) -> tuple[SshdServer, dict[str, str]]:
    """A trusted ``host-a``, and the environment for a CLI whose audit log goes under ``tmp_path``."""
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    return server, dict(os.environ, PYTHONPATH=str(REPO), XDG_STATE_HOME=str(tmp_path / "state"))


def _kill_over_ssh(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gputui.cli", "kill", "--no-discover", *args],
        cwd=str(REPO),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_ctrl_c_during_a_remote_escalation_waits_for_the_collector_to_finish_it(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """29 over SSH: the escalation runs in the remote collector; Ctrl-C says what is pending, then its
    outcome comes back and is audited by the client."""
    server, env = _remote_host(sshd_factory, ssh_client, tmp_path)
    with launcher(STUBBORN_TREE, fake_nvml) as tree:
        stubborn = tree["scheduler_TP1"]
        cli = _kill_over_ssh(env, "--yes", "--tree", "host-a", str(tree.pid))
        try:
            assert cli.stdout is not None
            seen = read_until(cli.stdout.fileno(), f"{tree.pid}  signal   TERM  sent".encode(), timeout_s=60)
            cli.send_signal(signal.SIGINT)
            out, err = cli.communicate(timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
        assert cli.returncode == 0, (seen + out, err)
        assert b"Ctrl-C again to abandon" in err
        assert f"{stubborn}  confirm  KILL  killed".encode() in out
        assert is_gone(stubborn)
    audit = [json.loads(x) for x in (tmp_path / "state" / "gputui" / "audit.jsonl").read_text().splitlines()]
    assert [(a["stage"], a["result"]) for a in audit if a["pid"] == stubborn] == [
        ("intent", "requested"),
        ("signal", "sent"),
        ("escalate", "sent"),
        ("confirm", "killed"),
    ]
    assert {a["host"] for a in audit} == {"host-a"}


def test_a_client_killed_during_a_remote_escalation_leaves_it_to_the_collector(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """The client is SIGKILLed after the TERM: the collector still sends the KILL when it is due, then exits.
    The audit log has the intent and the TERM's outcome; the escalation's outcome never reached the client."""
    server, env = _remote_host(sshd_factory, ssh_client, tmp_path)
    with launcher(STUBBORN_TREE, fake_nvml) as tree:
        stubborn = tree["scheduler_TP1"]
        cli = _kill_over_ssh(env, "--yes", "--tree", "--escalate", "3", "host-a", str(tree.pid))
        try:
            assert cli.stdout is not None
            read_until(cli.stdout.fileno(), f"{tree.pid}  signal   TERM  sent".encode(), timeout_s=60)
        finally:
            cli.kill()
            cli.communicate()
        assert state_of(stubborn) not in (None, "Z")  # its KILL is not due yet
        wait_for(lambda: is_gone(stubborn), "the collector to KILL it on its own", timeout_s=60)
        wait_for(lambda: not server.session_processes(), "the collector to leave once done", timeout_s=60)
    audit = [json.loads(x) for x in (tmp_path / "state" / "gputui" / "audit.jsonl").read_text().splitlines()]
    assert [(a["stage"], a["result"]) for a in audit if a["pid"] == stubborn] == [
        ("intent", "requested"),
        ("signal", "sent"),
    ]


LOST_GPU_CSV = (
    "0, NVIDIA H200, GPU-aaaa-0000, 00000000:17:00.0, 3, 143771, 0, 35, 70.00, 700.00\n"
    "Unable to determine the device handle for GPU0000:2A:00.0: GPU is lost.  Reboot the system to recover\n"
    "2, NVIDIA H200, GPU-cccc-2222, 00000000:5D:00.0, 3, 143771, 0, 35, 70.00, 700.00\n"
)
"""Three GPUs, the middle one lost: nvidia-smi prints the two it can read and exits 15."""


def test_a_lost_gpu_on_a_host_without_python3_needs_a_reboot(
    sshd_factory: SshdFactory, ssh_client: ClientHome
) -> None:
    server = host_without_python(sshd_factory, ssh_client, "reduced", LOST_GPU_CSV)
    assert server.smi_dir is not None
    (server.smi_dir / "gpus.rc").write_text("15\n")
    done = _gputui("check", "reduced")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        "GPU0  3 MiB  ✓",
        "GPU1  – MiB  ✗ needs a reboot of the host (the driver says it is lost)",
        "GPU2  3 MiB  ✓",
    ]
    assert "NOT READY: 2/3 GPUs at baseline" in done.stdout
    assert "NVIDIA H200" not in done.stdout + done.stderr  # no CSV line quoted as the cause
    snapshot = json.loads(_gputui("snapshot", "--json", "reduced").stdout)["hosts"][0]
    assert snapshot["error"] is None
    assert [(g["index"], g["error"]) for g in snapshot["gpus"]] == [(0, None), (1, "GPU is lost"), (2, None)]


def test_a_lost_gpu_in_nvidia_smi_mode_needs_a_reboot(
    sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path
) -> None:
    """No NVML library for the collector: it reads a long-lived ``nvidia-smi -lms``, which names the lost GPU
    only in an error line. Dropped, the host looked like a clean three-GPU host (exit 0)."""
    server = sshd_factory(python="bare", nvml=False)
    data = tmp_path / "smi-loop"
    data.mkdir()
    (data / "gpus.csv").write_text(LOST_GPU_CSV)
    smi = server.python_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *driver_version*) echo 570.124.06 ;;\n"
        "  *--query-compute-apps=*) ;;\n"
        f'  *-lms*) while :; do cat "{data}/gpus.csv"; sleep 0.2; done ;;\n'
        "esac\n"
    )
    smi.chmod(0o755)
    ssh_client.add_host("smi-host", server)
    ssh_client.trust(server)
    done = _gputui("check", "smi-host")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GPU1  – MiB  ✗ needs a reboot of the host (the driver says it is lost)" in done.stdout
    assert "CLEAN: " not in done.stdout  # a lost GPU is a fact: NOT READY, never clean
    assert "cannot tell" not in done.stdout


def _logins(server: SshdServer) -> int:
    return server.log().count("Accepted publickey")


def _snapshot_of(target: str, *flags: str) -> dict[str, object]:
    done = _gputui("snapshot", "--json", "--no-discover", *flags, target)
    assert done.returncode == 0, done.stderr
    host: dict[str, object] = json.loads(done.stdout)["hosts"][0]
    assert host["error"] is None
    return host


def test_runs_share_the_user_s_running_control_master_and_leave_it_running(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    server = sshd_factory()
    socket_path = tmp_path / "cm.sock"
    ssh_client.add_host(
        "gpu-cm", server, f"ControlPath {socket_path}", "ControlMaster auto", "ControlPersist 60"
    )
    ssh_client.trust(server)
    # No master running: each run logs in by itself, and none starts a master (whatever the config says).
    for flags in (["--ssh-client", "openssh"], ["--ssh-client", "auto"]):
        _snapshot_of("gpu-cm", *flags)
        assert not socket_path.exists()
    assert _logins(server) == 2
    with control_master(ssh_client, "gpu-cm", socket_path) as master:
        assert _logins(server) == 3
        # Through the master: the system client as asked, and auto because a master runs.
        for flags in (["--ssh-client", "openssh"], ["--ssh-client", "openssh"], ["--ssh-client", "auto"]):
            assert len(_snapshot_of("gpu-cm", *flags)["gpus"]) == 8  # type: ignore[arg-type]
        assert _logins(server) == 3  # one sshd login for every run
        assert master.poll() is None
        assert socket_path.exists()


def test_a_one_shot_that_names_no_client_rides_the_user_s_running_master(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """Seen from the server: a one-shot through the user's running master adds no login (the system ssh,
    as ``auto`` chooses); one through paramiko does, as does one without an ``ssh`` on PATH."""
    server = sshd_factory()
    socket_path = tmp_path / "cm.sock"
    ssh_client.add_host(
        "gpu-cm", server, f"ControlPath {socket_path}", "ControlMaster auto", "ControlPersist 60"
    )
    ssh_client.trust(server)
    no_ssh = tmp_path / "bin-without-ssh"
    no_ssh.mkdir()
    with control_master(ssh_client, "gpu-cm", socket_path) as master:
        logins = _logins(server)
        _snapshot_of("gpu-cm")
        for command in (["check", "gpu-cm"], ["leftovers", "gpu-cm"]):
            done = _gputui(*command)
            assert done.returncode in (0, 1), done.stderr
        assert _logins(server) == logins
        _snapshot_of("gpu-cm", "--ssh-client", "paramiko")
        assert _logins(server) == logins + 1
        done = _gputui("snapshot", "--json", "--no-discover", "gpu-cm", path=str(no_ssh))
        assert done.returncode == 0, done.stderr
        assert _logins(server) == logins + 2
        assert master.poll() is None


def test_unknown_key_over_the_system_client_is_one_line_until_accepted(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    done = _gputui("snapshot", "--ssh-client", "openssh", "host-a")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert fingerprint_by_ssh_keygen(server.host_pub) in lines[0]
    assert "--accept-new" in lines[0]
    assert not ssh_client.known_hosts.exists()
    _snapshot_of("host-a", "--ssh-client", "openssh", "--accept-new")
    assert ssh_client.known_hosts.read_text() == server.known_hosts_line() + "\n"


def test_the_config_file_chooses_the_client_per_host_and_the_flag_overrides_it(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    behind_a_proxy_command(sshd_factory, ssh_client, "behind")  # the system client's job
    plain = sshd_factory()
    ssh_client.add_host("plain", plain)
    ssh_client.trust(plain)
    config = tmp_path / "config.toml"
    config.write_text('[hosts."behind"]\nssh_client = "openssh"\n')

    done = _gputui("snapshot", "--json", "--no-discover", "--config", str(config), "behind", "plain")
    assert done.returncode == 0, done.stderr
    assert [(h["target"], h["error"], len(h["gpus"])) for h in json.loads(done.stdout)["hosts"]] == [
        ("behind", None, 8),
        ("plain", None, 8),
    ]
    # The flag is this run's word for every host: paramiko cannot take the ProxyCommand, and says so.
    done = _gputui("snapshot", "--ssh-client", "paramiko", "--config", str(config), "behind")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gputui: behind: ")
    assert "ProxyCommand" in line
    assert line.endswith("use --ssh-client openssh")


SSH_ONE_SHOT_UNUSED = (
    "typing",  # below the UI, imported by type checkers only
    "pathlib",  # state, config and cache paths are text
    "shutil",  # and with it bz2 and lzma: argparse's help width and the ssh lookup are worked out without it
    "lzma",
    "paramiko",
    "cryptography",
    "hashlib",  # the collector cache is keyed by os.stat, checked by CRC-32
    "ssl",
    "textual",
    "rich",
    "dataclasses",
    "gputui.transports.ssh.hostkeys.knownhosts",  # ssh checks host keys itself
    "gputui.transports.ssh.openssh.failures",  # read only when ssh failed
    "gputui.core.servers",  # no health endpoint on this host
    "gputui.commands.check",
)
"""What ``gputui snapshot --json`` of a host reached through the user's ControlMaster must not load."""


def test_a_one_shot_through_a_running_master_loads_only_what_it_uses(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    server = sshd_factory()
    socket_path = tmp_path / "cm.sock"
    ssh_client.add_host("gpu-cm", server, f"ControlPath {socket_path}", "ControlMaster auto")
    ssh_client.trust(server)
    with control_master(ssh_client, "gpu-cm", socket_path):
        logins = _logins(server)
        for _ in range(2):  # the second run finds the collector's bundle in the cache
            run = run_main(["snapshot", "--json", "--no-discover", "gpu-cm"], dict(os.environ))
        assert _logins(server) == logins  # through the master
    assert run.status == 0, run.stderr
    assert len(json.loads(run.stdout)["hosts"][0]["gpus"]) == 8
    loaded = run.modules
    assert "gputui.transports.ssh.openssh.link" in loaded
    assert sorted(loaded & set(SSH_ONE_SHOT_UNUSED)) == []


@pytest.mark.parametrize("transport", ["paramiko", "openssh"])
@pytest.mark.parametrize("planted", ["known_hosts", "key.pub", "config"])
def test_a_fifo_among_the_ssh_files_is_one_line_not_a_hang(
    sshd_factory: SshdFactory, ssh_client: ClientHome, transport: str, planted: str
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    if planted == "known_hosts":
        fifo = ssh_client.known_hosts
        fifo.unlink()
    elif planted == "key.pub":
        key = ssh_client.ssh_dir / "id_planted"  # a copy: the key itself is shared by the session's tests
        key.write_bytes(ssh_client.key.read_bytes())
        key.chmod(0o600)
        ssh_client.use_key(key)
        fifo = Path(f"{key}.pub")
    else:
        fifo = ssh_client.ssh_dir / "included"
        ssh_client.add_lines(f"Include {fifo}")
    os.mkfifo(fifo)
    started = time.monotonic()
    done = _gputui("--ssh-client", transport, "snapshot", "--json", "host-a")
    assert time.monotonic() - started < 30
    assert "Traceback" not in done.stderr
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    if planted == "known_hosts":
        assert line == f"gputui: host-a: known hosts: {fifo}: a FIFO, not a regular file"
    elif planted == "key.pub":
        assert line == f"gputui: host-a: identity file: {fifo}: a FIFO, not a regular file"
    else:
        assert line.startswith("gputui: host-a: "), line  # the system ssh reads the config: bounded
