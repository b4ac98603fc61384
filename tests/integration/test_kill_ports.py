"""A killed server is not clean until its ports are free: the real CLI against a real process tree whose
launcher listens on its ``--port`` (a real TCP listener on loopback), a worker that holds GPU memory (fake
NVML) and listens on a port of its own, and a process that escaped the job (``setsid``, double-forked)
holding the launcher's inherited listening socket after the kill.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import (
    DEADLINE_S,
    REPO,
    WORKER_MIB,
    gputui_env,
    is_gone,
    kill_json,
    run_gputui,
    start_ticks_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

# The launcher: daemonises, listens on its --port, forks a worker that listens on a port of its own, and a
# setsid'd double-forked process that keeps the launcher's listening socket open until the --release file
# exists. Reports {"launcher", "worker", "worker_port", "lingering"} on stdout, then sleeps.
LAUNCHER = r"""
import ctypes, json, os, socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
release = sys.argv[sys.argv.index("--release") + 1]
if os.fork():
    os._exit(0)
os.setsid()

def name(text):
    ctypes.CDLL(None).prctl(15, text.encode(), 0, 0, 0)

server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen()
read_end, write_end = os.pipe()
worker = os.fork()
if worker == 0:
    server.close()
    own = socket.socket()
    own.bind(("127.0.0.1", 0))
    own.listen()
    name("scheduler_TP0")
    os.write(write_end, str(own.getsockname()[1]).encode())
    while True:
        time.sleep(3600)
worker_port = int(os.read(read_end, 64))
linger_read, linger_write = os.pipe()
middle = os.fork()
if middle == 0:
    os.setsid()
    lingering = os.fork()
    if lingering:
        os.write(linger_write, str(lingering).encode())
        os._exit(0)
    name("lingering")
    while not os.path.exists(release):
        time.sleep(0.05)
    os._exit(0)
os.waitpid(middle, 0)
lingering = int(os.read(linger_read, 64))
name("launcher")
report = {"launcher": os.getpid(), "worker": worker, "worker_port": worker_port, "lingering": lingering}
os.write(1, (json.dumps(report) + "\n").encode())
os.dup2(os.open(os.devnull, os.O_RDWR), 1)
while True:
    time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _report(starter: subprocess.Popen[bytes]) -> dict[str, int]:
    assert starter.stdout is not None
    ready, _, _ = select.select([starter.stdout], [], [], DEADLINE_S)
    assert ready, "the launcher did not report"
    line = starter.stdout.readline()
    assert line, "the launcher exited before reporting"
    return {str(k): int(v) for k, v in json.loads(line).items()}


@contextmanager
def server_tree(port: int, release: Path) -> Iterator[dict[str, int]]:
    """The launcher, its worker and the lingering process; every one of them gone afterwards."""
    starter = subprocess.Popen(
        [sys.executable, "-S", "-c", LAUNCHER, "--port", str(port), "--release", str(release)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
        cwd="/",
    )
    try:
        pids = _report(starter)
    finally:
        starter.wait(timeout=DEADLINE_S)
        if starter.stdout is not None:
            starter.stdout.close()
    ticks = {pid: start_ticks_of(pid) for key, pid in pids.items() if key != "worker_port"}
    try:
        yield pids
    finally:
        release.touch()
        for pid, tick in ticks.items():
            if not is_gone(pid, tick):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for pid, tick in ticks.items():
            wait_for(lambda p=pid, t=tick: is_gone(p, t), f"pid {pid} to end in cleanup")


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    return gputui_env(fake_nvml, tmp_path / "state")


def test_check_waits_for_the_killed_servers_ports(
    env: dict[str, str], fake_nvml: Any, tmp_path: Path
) -> None:
    port = free_port()
    release = tmp_path / "release"
    with server_tree(port, release) as pids:
        fake_nvml.state.add_holder(0, pids["worker"], WORKER_MIB)
        fake_nvml.write()
        worker_port = pids["worker_port"]
        assert listening(port)
        assert listening(worker_port)

        status, payload, stderr = kill_json(env, "--yes", "--tree", "--escalate", "1", str(pids["launcher"]))
        assert status == 0, (payload, stderr)
        # The plan names the launcher's --port and the port its worker was seen listening on.
        assert payload["plan"]["ports"] == sorted([port, worker_port])
        assert is_gone(pids["launcher"])
        assert is_gone(pids["worker"])
        assert not is_gone(pids["lingering"])
        assert listening(port)  # the escaped process keeps the launcher's socket
        assert not listening(worker_port)

        # The GPUs are back at baseline, but the launcher's port is still taken: not clean, and it says which.
        held = run_gputui(["check", "--wait", "2", "--no-discover"], env)
        assert held.returncode == 1, (held.stdout, held.stderr)
        assert f"  - port {port} still listening (by a process not listed)" in held.stdout.splitlines()
        assert "NOT CLEAN: 8/8 GPUs at baseline" in held.stdout
        assert held.stdout.splitlines()[-1] == "still not clean after 2 s"

        # It turns clean once the last holder of the port lets it go, and says when the ports came free.
        waiter = subprocess.Popen(
            [sys.executable, "-m", "gputui.cli", "check", "--wait", "30", "--no-discover"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(1.0)
            assert waiter.poll() is None  # still waiting on the port
            release.touch()
            out, err = waiter.communicate(timeout=60)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
        assert waiter.returncode == 0, (out, err)
        last = out.splitlines()[-1]
        assert last.startswith("clean after ")
        # The worker's port was seen free by the first check: only the launcher's was still watched.
        assert f"; port {port} free after " in last
        wait_for(lambda: is_gone(pids["lingering"]), "the lingering process to exit")

        # Seen free once, the ports are no longer the killed job's: the server restarted on its port is not
        # held against the slate.
        with socket.socket() as restarted:
            restarted.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            restarted.bind(("127.0.0.1", port))
            restarted.listen()
            again = run_gputui(["check", "--no-discover"], env)
        assert again.returncode == 0, (again.stdout, again.stderr)
