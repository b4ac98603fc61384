"""Loopback stand-ins for NVIDIA's dcgm-exporter (and a vLLM metrics endpoint), for Prometheus to scrape.

Run as a module (``python -m tests.integration.dcgm_exporter HOSTS``) with a JSON list of hosts, it serves
each host on a loopback port of its own, in the text format dcgm-exporter writes (the metric names and labels
of its default counters: ``DCGM_FI_DEV_FB_USED/FREE/RESERVED``, ``GPU_UTIL``, ``GPU_TEMP``, ``POWER_USAGE``,
``XID_ERRORS``, labels ``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``, ``pci_bus_id``,
``DCGM_FI_DRIVER_VERSION``, and ``GPU_I_ID``/``GPU_I_PROFILE`` for MIG instances). It prints one JSON line
``{"ports": {name: port}}`` and then obeys JSON-line commands on stdin, answering each with one line:

* ``{"cmd": "set", "host": "gpu-a", "gpu": 3, "figures": {"used": 40000, "xid": 79}}``: that GPU's figures
  from now on (``free`` follows ``used`` so that the total stays; for a vLLM host, ``running``/``waiting``).
* ``{"cmd": "stop", "host": "gpu-a"}``: close that host's listener (connections are refused from now on).
* ``{"cmd": "quit"}``.

A host is ``{"name": ..., "gpus": 8}``, optionally ``"mig": {"0": ["1g.10gb", "1g.10gb"]}`` (GPU index ->
instance profiles), ``"hostname_label": false`` (no ``Hostname`` label: the series are keyed by instance) or
``"hostname_label": "hostname"`` (the spelling of dcgm-exporter's main branch), ``"hostname": "gpu-x"`` (the
label claims that host, not the name: two exporters, one identity), ``"names": "current"`` (DCGM 4.6's names
of the fields it renamed: ``DCGM_FI_DEV_XID_ERROR``, ``..._PAGE_RETIRED_PENDING``, ``..._ROW_REMAP_FAILED``),
``"no_memory": [1]`` (those GPUs send no ``FB_*`` series, as some releases do for a GPU in MIG mode),
``"target_labels": {...}`` (Prometheus's labels of the scrape target, a ServiceMonitor's ``pod`` and
``namespace``: read by ``prometheus.Fleet``), ``{"name": ..., "body": "mig_pods_main.prom"}`` for a recorded
exposition of ``tests/data/dcgm`` served as it is, or ``{"name": ..., "kind": "vllm"}`` for a vLLM metrics
endpoint. :class:`Exporters` drives it from a test.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.integration.jsonlines import JsonLinesChild, serve_commands

TOTAL_MIB = 81920
RESERVED_MIB = 512
IDLE_MIB = 3
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
DCGM_DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm"
CURRENT_NAMES = {
    "DCGM_FI_DEV_XID_ERRORS": "DCGM_FI_DEV_XID_ERROR",
    "DCGM_FI_DEV_RETIRED_PENDING": "DCGM_FI_DEV_PAGE_RETIRED_PENDING",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "DCGM_FI_DEV_ROW_REMAP_FAILED",
}
"""Names DCGM 4.6 gave these fields (``dcgm_fields.h``); the old ones stay as deprecated aliases."""

HELP = {
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_FB_RESERVED": ("gauge", "Framebuffer memory reserved (in MiB)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("gauge", "Whether remapping of rows is pending."),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed."),
    "DCGM_FI_DEV_RETIRED_PENDING": ("gauge", "Number of pages pending retirement."),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors."),
}
FIGURE_METRICS = {
    "used": "DCGM_FI_DEV_FB_USED",
    "free": "DCGM_FI_DEV_FB_FREE",
    "reserved": "DCGM_FI_DEV_FB_RESERVED",
    "util": "DCGM_FI_DEV_GPU_UTIL",
    "temp": "DCGM_FI_DEV_GPU_TEMP",
    "power": "DCGM_FI_DEV_POWER_USAGE",
    "xid": "DCGM_FI_DEV_XID_ERRORS",
    "remap_pending": "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "remap_failure": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "retired_pending": "DCGM_FI_DEV_RETIRED_PENDING",
    "ecc_dbe_vol": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
}


def gpu_uuid(host: str, index: int) -> str:
    """A stable UUID in NVIDIA's format, unique per host and GPU index."""
    d = hashlib.sha1(f"{host}/{index}".encode()).hexdigest()  # noqa: S324 - a label, not security
    return f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def idle_figures() -> dict[str, float]:
    return {
        "used": IDLE_MIB,
        "free": TOTAL_MIB - RESERVED_MIB - IDLE_MIB,
        "reserved": RESERVED_MIB,
        "util": 0,
        "temp": 31,
        "power": 71.5,
        "xid": 0,
        "remap_pending": 0,
        "remap_failure": 0,
        "retired_pending": 0,
        "ecc_dbe_vol": 0,
    }


def _value(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


class Host:
    """One exporter's state: GPUs (and MIG instances) with their figures, or a vLLM server's gauges."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name: str = spec["name"]
        self.kind: str = spec.get("kind", "dcgm")
        spelling = spec.get("hostname_label", True)
        self.hostname_label: str | None = "Hostname" if spelling is True else spelling or None
        self.current_names = spec.get("names") == "current"
        self.no_memory = {int(i) for i in spec.get("no_memory", ())}
        self.body = (DCGM_DATA / spec["body"]).read_bytes() if spec.get("body") else None
        self.hostname: str = spec.get("hostname", self.name)
        self.lock = threading.Lock()
        self.gpus: dict[int, dict[str, float]] = {i: idle_figures() for i in range(int(spec.get("gpus", 8)))}
        self.mig: dict[int, list[str]] = {int(k): list(v) for k, v in (spec.get("mig") or {}).items()}
        self.server: dict[str, float] = {"running": 0, "waiting": 0}
        self.uuids = {i: gpu_uuid(self.name, i) for i in self.gpus}

    def set(self, gpu: int | None, figures: dict[str, float]) -> None:
        with self.lock:
            if self.kind == "vllm":
                self.server.update(figures)
                return
            assert gpu is not None
            current = self.gpus[gpu]
            if "used" in figures and "free" not in figures:
                total = current["used"] + current["free"]
                current["free"] = max(0, total - figures["used"])
            current.update(figures)

    def _labels(self, index: int, extra: str = "") -> str:
        labels = [f'gpu="{index}"', f'UUID="{self.uuids[index]}"', f'device="nvidia{index}"']
        labels.append(f'modelName="{MODEL}"')
        if self.hostname_label:
            labels.append(f'{self.hostname_label}="{self.hostname}"')
        labels += [f'pci_bus_id="00000000:{0x18 + index:02X}:00.0"', f'DCGM_FI_DRIVER_VERSION="{DRIVER}"']
        return ",".join(labels) + extra

    def text(self) -> bytes:
        with self.lock:
            if self.body is not None:
                return self.body
            if self.kind == "vllm":
                return (
                    "# HELP vllm:num_requests_running Number of requests currently running on GPU.\n"
                    "# TYPE vllm:num_requests_running gauge\n"
                    f'vllm:num_requests_running{{model_name="llama"}} {_value(self.server["running"])}\n'
                    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
                    "# TYPE vllm:num_requests_waiting gauge\n"
                    f'vllm:num_requests_waiting{{model_name="llama"}} {_value(self.server["waiting"])}\n'
                ).encode()
            lines: list[str] = []
            for figure, old_name in FIGURE_METRICS.items():
                kind, help_text = HELP[old_name]
                metric = CURRENT_NAMES.get(old_name, old_name) if self.current_names else old_name
                lines.append(f"# HELP {metric} {help_text}")
                lines.append(f"# TYPE {metric} {kind}")
                for index, figures in self.gpus.items():
                    if index in self.no_memory and figure in ("used", "free", "reserved"):
                        continue
                    profiles = self.mig.get(index)
                    if profiles and figure in ("used", "free", "reserved", "util"):
                        # MIG mode: memory and activity per GPU instance, split evenly.
                        share = len(profiles)
                        for instance_id, profile in enumerate(profiles, 1):
                            extra = f',GPU_I_PROFILE="{profile}",GPU_I_ID="{instance_id}"'
                            value = figures[figure] / share if figure != "util" else figures[figure]
                            lines.append(f"{metric}{{{self._labels(index, extra)}}} {_value(round(value))}")
                        continue
                    lines.append(f"{metric}{{{self._labels(index)}}} {_value(figures[figure])}")
            return ("\n".join(lines) + "\n").encode()


def _handler_for(host: Host) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # One request per connection: a stopped host must refuse the next scrape, not answer it on a
        # kept-alive connection.
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            body = host.text()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def main() -> int:
    specs = json.loads(sys.argv[1])
    hosts = {spec["name"]: Host(spec) for spec in specs}
    servers: dict[str, _Server] = {}
    for name, host in hosts.items():
        server = _Server(("127.0.0.1", 0), _handler_for(host))
        servers[name] = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    sys.stdout.write(json.dumps({"ports": {n: s.server_address[1] for n, s in servers.items()}}) + "\n")
    sys.stdout.flush()

    def answer(command: dict[str, Any]) -> dict[str, Any]:
        name = command.get("cmd")
        if name == "set":
            hosts[command["host"]].set(command.get("gpu"), command["figures"])
        elif name == "stop":
            server = servers.pop(command["host"], None)
            if server is not None:
                server.shutdown()
                server.server_close()
        else:
            return {"error": "unknown command"}
        return {"ok": True}

    serve_commands(answer)
    for server in servers.values():
        server.shutdown()
    return 0


# ---------------------------------------------------------------------------------------------------------
# Test side


class Exporters(JsonLinesChild):
    """This script in a subprocess serving ``hosts``, driven by a test (one process may serve many hosts)."""

    def __init__(self, hosts: list[dict[str, Any]], timeout_s: float = 20.0) -> None:
        super().__init__(__name__, [json.dumps(hosts)], "fake DCGM exporter", timeout_s)
        self.ports: dict[str, int] = self.hello["ports"]

    def address(self, host: str) -> str:
        """``127.0.0.1:PORT``: what Prometheus scrapes, and the series' ``instance`` label."""
        return f"127.0.0.1:{self.ports[host]}"

    def set(self, host: str, gpu: int | None = None, **figures: float) -> None:
        self._command({"cmd": "set", "host": host, "gpu": gpu, "figures": figures})

    def stop(self, host: str) -> None:
        """Close one host's listener, as if that exporter had died (the others keep serving)."""
        self._command({"cmd": "stop", "host": host})

    def kill(self) -> None:
        """SIGKILL the whole process: every host it serves dies at once."""
        self.process.kill()
        self.process.wait(10)


if __name__ == "__main__":
    sys.exit(main())
