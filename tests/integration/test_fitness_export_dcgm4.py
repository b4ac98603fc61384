"""The fleet reads DCGM 4.x's field names through a real Prometheus: a dcgm-exporter whose counters file has
the new names (``DCGM_FI_DEV_GPU_RECOVERY_ACTION``, ``…_ROW_REMAP_FAILED``, ``…_PAGE_RETIRED_PENDING``,
``…_XID_ERROR``; the body is built in ``tests/data/prometheus/dcgm4.py``, there being no real recording of
them) makes its host NOT READY in ``check --prometheus``, worded as the monitor words the same fitness."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gputui.core.model import Gpu
from gputui.core.verdict import REASON_SENTENCES, assess
from gputui.transports.prometheus import FleetSettings, PrometheusSource
from tests.data.prometheus.dcgm4 import renamed_body
from tests.integration.procs import REPO, wait_for
from tests.integration.prometheus import PrometheusServer

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def dcgm4() -> Iterator[str]:
    """A loopback ``/metrics`` serving the DCGM 4.x body: GPU1's driver asks for a node reboot (2), its row
    remap failed and a page retirement is pending, its last Xid is 79."""
    body = renamed_body(
        {
            "DCGM_FI_DEV_GPU_RECOVERY_ACTION": 2,
            "DCGM_FI_DEV_ROW_REMAP_FAILED": 1,
            "DCGM_FI_DEV_PAGE_RETIRED_PENDING": 1,
            "DCGM_FI_DEV_XID_ERROR": 79,
        }
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_dcgm_4_names_make_a_host_not_ready(dcgm4: str, tmp_path: Path) -> None:
    prometheus = PrometheusServer(tmp_path / "prometheus", {"dcgm": [(dcgm4, {})]})
    try:
        prometheus.start()
        source = PrometheusSource(FleetSettings(url=prometheus.url))

        def read() -> bool:
            hosts = {h.name: h for h in source.sample().hosts}
            host = hosts.get("gpu-n")
            fitness = (
                host.snapshot.gpus[1].fitness if host is not None and len(host.snapshot.gpus) == 2 else None
            )
            return fitness is not None and fitness.recovery_action == 2

        wait_for(read, "the new-name series through Prometheus", timeout_s=60)
        (host,) = source.sample().hosts
        assert host.xid == {1: 79}
        fitness = host.snapshot.gpus[1].fitness
        assert fitness is not None
        assert (fitness.remap_failure, fitness.retired_pages_pending) == (True, True)
        done = subprocess.run(
            [sys.executable, "-m", "gputui.cli", "check", "--prometheus", prometheus.url],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
            env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_STATE_HOME": str(tmp_path / "s")},
        )
        assert done.returncode == 1, done.stdout + done.stderr
        # The monitor's sentence for the same fitness: the failed remap (a drain) outranks the driver's node
        # reboot, which DCGM's last Xid explains.
        expected = REASON_SENTENCES["gpu_health"](Gpu(index=1, fitness=fitness), assess(fitness))
        assert expected.startswith("GPU1 needs the node drained and the GPU serviced (row remapping failed")
        assert f"gpu-n  NOT READY: {expected}" in done.stdout, done.stdout
        assert "the driver asks for Node Reboot" in expected
    finally:
        prometheus.stop()
