"""Section 2 over real SSH: wire bytes per sample and the remote agent's CPU per sample.

The SSH link (``gputui.commands.inputs.targets.open_link``) connects to a loopback sshd (the test suite's fixture module)
through a byte-counting TCP relay on another loopback port, so the figures are what crosses the network:
SSH framing, encryption, MACs and window adjustments included. The agent's CPU is read from /proc of the
agent process that sshd started for the session.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


class CountingRelay:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:upstream that counts bytes in each direction."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.down_bytes = 0  # server -> client
        self.up_bytes = 0  # client -> server
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.down_bytes, self.up_bytes

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, "down"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    if direction == "down":
                        self.down_bytes += len(data)
                    else:
                        self.up_bytes += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass


def _find_agent_pid(server: Any) -> int | None:
    """The collector sshd started for the session: the process whose argv carries the bundle's loader."""
    for proc in server.session_processes():
        try:
            if any("gputui-boot" in arg for arg in proc.cmdline()):
                return proc.pid
        except Exception:
            continue
    return None


def measure_ssh_stream(args: argparse.Namespace, report: Any, sec: int, duration: float) -> None:
    from gputui.agent.gpu.xid import TEST_SOURCE_ENV as KERNEL_LOG
    from tests.bench.run_bench import fake_host, proc_cpu_s

    try:
        from tests.integration import sshd as fixture
    except Exception as exc:
        report.na(sec, "bytes per sample over SSH", f"fixture not importable: {type(exc).__name__}: {exc}")
        return
    interval, process_interval = 0.25, 0.75
    with (
        fake_host(args.processes, args.holders) as host,
        tempfile.TemporaryDirectory(prefix="gputui-bench-ssh-") as tmp,
    ):
        work = Path(tmp)
        env = host.env()
        key = work / "id_client"
        fixture.keygen(key)
        bin_dir = fixture._python_wrapper(work / "remote-bin", str(Path(sys.executable).parent / "python3"))
        (work / "remote-home").mkdir()
        server = fixture.SshdServer(
            root=work / "sshd",
            authorized_pub=Path(f"{key}.pub"),
            python_dir=bin_dir,
            env={
                "HOME": str(work / "remote-home"),
                "LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"],
                "FAKE_NVML_STATE": env["FAKE_NVML_STATE"],
                "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
                # Under the suite, its kernel log (``tests.kernellog``), never the machine's.
                **{k: env[k] for k in (KERNEL_LOG,) if k in env},
            },
        )
        server.start()
        relay = CountingRelay(server.port)
        client = fixture.ClientHome(home=work / "client-home", key=key)
        client.add_lines("Host gpu-bench-relay", "  HostName 127.0.0.1", f"  Port {relay.port}")
        client.trust(server, name=f"[127.0.0.1]:{relay.port}")
        saved = {k: os.environ.get(k) for k in ("HOME", "GPUTUI_SSH_CONFIG", "SSH_AUTH_SOCK")}
        os.environ["HOME"] = str(client.home)
        os.environ["GPUTUI_SSH_CONFIG"] = str(client.config)
        os.environ.pop("SSH_AUTH_SOCK", None)
        link = None
        try:
            from gputui.commands.inputs.targets import open_link
            from gputui.core.link import LinkOptions

            options = LinkOptions(
                memory_interval_s=interval,
                process_interval_s=process_interval,
                read_only=True,
                discover_health=False,
                connect_timeout_s=30.0,
            )
            link = open_link("gpu-bench-relay", options)
            t_open = time.monotonic()
            link.open()
            first = None
            while first is None and time.monotonic() - t_open < 30:
                first = link.next_snapshot(5.0)
            if first is None:
                report.na(sec, "bytes per sample over SSH", "no snapshot within 30 s")
                return
            setup_down, setup_up = relay.counts()
            agent_pid = _find_agent_pid(server)
            cpu0 = proc_cpu_s(agent_pid) if agent_pid else None
            down0, up0 = relay.counts()
            start = time.monotonic()
            snapshots = 0
            while time.monotonic() - start < duration:
                if link.next_snapshot(2.0) is not None:
                    snapshots += 1
            elapsed = time.monotonic() - start
            down1, up1 = relay.counts()
            cpu1 = proc_cpu_s(agent_pid) if agent_pid else None
        except Exception as exc:
            report.na(sec, "bytes per sample over SSH", f"{type(exc).__name__}: {exc}")
            return
        finally:
            if link is not None:
                link.close()
            relay.close()
            server.stop()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    if not snapshots:
        report.na(sec, "bytes per sample over SSH", "no snapshot in the window")
        return
    report.add(
        sec,
        "wire bytes per sample over SSH",
        (down1 - down0) / snapshots,
        "bytes/sample",
        compare=f"+{(up1 - up0) / snapshots:.0f} B/sample upstream, {snapshots} samples",
    )
    report.add(
        sec,
        "wire bytes per second over SSH",
        (down1 - down0 + up1 - up0) / elapsed,
        "B/s",
        compare=f"at {interval} s memory / {process_interval} s processes",
    )
    report.add(
        sec,
        "SSH setup until the first snapshot",
        float(setup_down + setup_up),
        "bytes",
        compare=f"{setup_up} up (incl. the collector payload) / {setup_down} down",
    )
    if cpu0 is not None and cpu1 is not None:
        report.add(
            sec,
            "agent CPU per sample (SSH, remote side)",
            (cpu1 - cpu0) * 1000 / snapshots,
            "CPU ms/sample",
            compare=f"{(cpu1 - cpu0) / elapsed * 100:.1f}% of a core at {interval} s",
        )
    else:
        report.na(sec, "agent CPU per sample (SSH, remote side)", "agent process not found under sshd")
    report.note(
        sec,
        "ssh: sshd from tests/integration/sshd.py, link via gputui.commands.inputs.targets.open_link through a "
        "byte-counting loopback relay (what crosses the network, SSH framing included)",
    )
