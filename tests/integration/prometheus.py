"""A real Prometheus server (Debian's ``prometheus`` package) on loopback, for the fleet tests and benchmark.

:class:`PrometheusServer` writes a config that scrapes the given targets every second, starts
``/usr/bin/prometheus`` on a free loopback port with its storage in a temporary directory, waits until it is
ready, and stops it (TERM, then KILL) when closed. The ``prometheus_fleet`` fixture gives a test a factory
for exporters plus a Prometheus scraping them, and ends every process it started.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.dcgm_exporter import Exporters

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
READY_DEADLINE_S = 60.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrometheusServer:
    """One Prometheus scraping ``jobs`` (job name -> list of ``(address, extra labels)``) every second."""

    def __init__(
        self, directory: Path, jobs: dict[str, list[tuple[str, dict[str, str]]]], scrape_interval: str = "1s"
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path = directory / "prometheus.yml"
        self.storage = directory / "data"
        self.log_path = directory / "prometheus.log"
        self.scrape_interval = scrape_interval
        self.jobs = jobs
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        # JSON is YAML: no YAML library needed.
        config = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": "1m",
            },
            "scrape_configs": [
                {
                    "job_name": job,
                    "static_configs": [{"targets": [a], "labels": labels} for a, labels in targets],
                }
                for job, targets in self.jobs.items()
            ],
        }
        self.config_path.write_text(json.dumps(config, indent=1))

    def start(self) -> PrometheusServer:
        self._write_config()
        log = self.log_path.open("wb")
        try:
            self.process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.storage}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        deadline = time.monotonic() + READY_DEADLINE_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:  # noqa: S310
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError("prometheus did not become ready")

    def query(self, expression: str) -> list[dict[str, Any]]:
        """An instant query's result list (for the test's own waits)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - http on loopback
            return json.loads(answer.read())["data"]["result"]

    def wait_until(self, condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.2)

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


class Fleet:
    """Exporters and the Prometheus that scrapes them, for one test."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.exporters: list[Exporters] = []
        self.servers: list[PrometheusServer] = []
        self.by_host: dict[str, Exporters] = {}
        self.target_labels: dict[str, dict[str, str]] = {}
        """Host -> the labels Prometheus gives its scrape target (a spec's ``target_labels``)."""

    def exporter(self, hosts: list[dict[str, Any]]) -> Exporters:
        """Start one exporter process serving ``hosts`` (see ``dcgm_exporter``)."""
        exporters = Exporters(hosts)
        self.exporters.append(exporters)
        for spec in hosts:
            self.by_host[spec["name"]] = exporters
            self.target_labels[spec["name"]] = dict(spec.get("target_labels", {}))
        return exporters

    def prometheus(self, host_labels: dict[str, str] | None = None) -> PrometheusServer:
        """Start Prometheus scraping every exporter started so far: DCGM hosts as job ``dcgm``, vLLM endpoints
        as job ``vllm`` with the static labels ``host_labels`` gives them (endpoint name -> Hostname)."""
        jobs: dict[str, list[tuple[str, dict[str, str]]]] = {"dcgm": [], "vllm": []}
        for name, exporters in self.by_host.items():
            address = exporters.address(name)
            if name in (host_labels or {}):
                jobs["vllm"].append((address, {"Hostname": (host_labels or {})[name]}))
            else:
                jobs["dcgm"].append((address, dict(self.target_labels.get(name, {}))))
        jobs = {job: targets for job, targets in jobs.items() if targets}
        server = PrometheusServer(self.directory / f"prometheus-{len(self.servers)}", jobs)
        self.servers.append(server)
        return server.start()

    def close(self) -> None:
        for server in self.servers:
            server.stop()
        for exporters in self.exporters:
            exporters.close()


@pytest.fixture
def prometheus_fleet(tmp_path: Path) -> Iterator[Fleet]:
    """A factory for exporters and a real Prometheus; every process it started ends with the test."""
    fleet = Fleet(tmp_path / "fleet")
    try:
        yield fleet
    finally:
        fleet.close()
