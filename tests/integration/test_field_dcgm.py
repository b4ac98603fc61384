"""dcgm-exporter as the field runs it, scraped by a real Prometheus (Debian's package): both spellings of the
host label, DCGM 4.6's names, a GPU that sends no memory series, and recorded expositions with pods
(``tests/data/dcgm``) scraped as a ServiceMonitor does (the target's own ``pod`` and ``namespace`` labels,
``honor_labels`` off, so the workload's labels come back as ``exported_pod`` ...)."""

from __future__ import annotations

import time

from gputui.core.fleet import FleetHost
from gputui.transports.prometheus import FleetSettings, PrometheusSource
from tests.integration.prometheus import Fleet

DEADLINE_S = 60.0
EXPORTER_POD = {"pod": "nvidia-dcgm-exporter-x7kq2", "namespace": "gpu-operator", "container": "exporter"}
MIG_HOST = "localhost"  # what dcgm-exporter's own test data names its host
MPS_HOST = "gke-gpu-share-test-a100-inference-mps-b3fc3d0e-3bpg"


def _hosts_when(source: PrometheusSource, ready: set[str]) -> dict[str, FleetHost]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        hosts = {h.name: h for h in source.sample().hosts}
        if ready <= set(hosts) and all(hosts[n].snapshot.gpus and not hosts[n].stale for n in ready):
            return hosts
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {sorted(hosts)}")
        time.sleep(0.25)


def test_the_field_s_label_spellings_names_and_pods(prometheus_fleet: Fleet) -> None:
    exporters = prometheus_fleet.exporter(
        [
            {"name": "gpu-a", "gpus": 2},
            {"name": "gpu-c", "gpus": 2, "hostname_label": "hostname", "names": "current", "no_memory": [1]},
            {"name": "mig", "body": "mig_pods_main.prom", "target_labels": EXPORTER_POD},
            {"name": "mps", "body": "mps_pods_pr432.prom", "target_labels": EXPORTER_POD},
        ]
    )
    exporters.set("gpu-c", 0, xid=79)
    server = prometheus_fleet.prometheus()
    source = PrometheusSource(FleetSettings(url=server.url))
    hosts = _hosts_when(source, {"gpu-a", "gpu-c", MIG_HOST, MPS_HOST})
    # Both spellings name the host; the exporter's address names none.
    assert set(hosts) == {"gpu-a", "gpu-c", MIG_HOST, MPS_HOST}
    c = hosts["gpu-c"]
    assert c.ssh_host == "gpu-c"
    # DCGM 4.6's name of the Xid field is read.
    assert c.xid == {0: 79}
    # A GPU without memory series is current data (its other series are), and says what it lacks.
    assert not c.stale
    assert c.snapshot.gpus[1].error == "DCGM sent no memory figure for this GPU"
    assert c.snapshot.gpus[1].temperature_c == 31
    # One owner per MIG instance; the GPU no pod has is nobody's, not the exporter pod's.
    mig = hosts[MIG_HOST]
    assert [o.label for o in mig.owners[0]] == [
        "pod:model-playground-stg/tts-predictor-00011-deployment-5554f75554-8j8pl",
        "pod:testing/ollama-76f687f4cd-xcvvp",
    ]
    assert 1 not in mig.owners
    assert [(i.instance_id, i.owner.name if i.owner else None) for i in mig.mig[0]] == [
        ("11", "ollama-76f687f4cd-xcvvp"),
        ("13", "tts-predictor-00011-deployment-5554f75554-8j8pl"),
    ]
    assert mig.snapshot.gpus[0].memory_used_mib == 28  # its instances' memory
    # Two pods sharing one GPU (MPS) are both its owners.
    assert [o.label for o in hosts[MPS_HOST].owners[0]] == [
        "pod:default/gpu-burn-deployment-1-85dc8ff699-clvh5",
        "pod:vllm-inference/vllm-medgemma-4b-it-d599b4c99-f95nk",
    ]
    assert all(o.detail("container_name") != "exporter" for os in hosts[MPS_HOST].owners.values() for o in os)


def test_a_configured_host_label_comes_first(prometheus_fleet: Fleet) -> None:
    prometheus_fleet.exporter([{"name": "gpu-a", "gpus": 1, "target_labels": {"node": "node-7"}}])
    server = prometheus_fleet.prometheus()
    source = PrometheusSource(FleetSettings(url=server.url, host_label="node"))
    hosts = _hosts_when(source, {"node-7"})
    assert set(hosts) == {"node-7"}
    assert hosts["node-7"].ssh_host == "node-7"
