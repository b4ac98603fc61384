"""A real ``gputui exporter`` process on loopback, for the exporter's integration tests and benchmark.

:class:`ExporterProcess` starts the CLI in a subprocess (the collector inside it reads real /proc and the
fake NVML), waits until ``/metrics`` answers, and stops it with SIGTERM (then SIGKILL) on the way out; its
stderr is kept in a file for the test to read.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.integration.procs import REPO

READY_DEADLINE_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ExporterProcess:
    """``gputui exporter --listen 127.0.0.1:PORT ARGS`` with ``env``; ``stop()`` returns its exit status."""

    def __init__(self, env: dict[str, str], log_path: Path, *args: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.args = [
            sys.executable,
            "-m",
            "gputui.cli",
            "exporter",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--interval",
            "0.5",
            "--process-interval",
            "0.5",
            "--no-discover",
            *args,
        ]
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def start(self) -> ExporterProcess:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.args, cwd=str(REPO), env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline = time.monotonic() + READY_DEADLINE_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"exporter exited: {self.log()}")
            try:
                if "gputui_sample_timestamp_seconds" in self.scrape():
                    return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"exporter did not serve a sample: {self.log()}")

    def scrape(self, timeout_s: float = 5.0) -> str:
        with urllib.request.urlopen(self.url, timeout=timeout_s) as answer:  # noqa: S310 - loopback
            return answer.read().decode()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int | None:
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)
        return process.returncode
