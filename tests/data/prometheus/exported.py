"""A wedged host as ``gputui exporter`` serves it, and as Prometheus would answer gputui's query after
scraping it: for the tests of the exporter's families and of the fleet's reading of them."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputui.core.fleet import ExportedSample, ExporterFigures, families
from gputui.core.fleet import schema as s
from gputui.core.model import EndpointSample, Gpu, GpuProcess, HostSnapshot, LiveThreads, Proc, replace
from gputui.core.verdict import Baselines, analyze
from gputui.transports.prometheus.query import PART_LABEL, TIME_PART

NOW_S = 1_800_000_000.0
HOSTILE = "\x1b]0;pwn\x07[bold]x\u202e" + "y" * 100


def wedged_host(name: str = "scheduler", now: float = NOW_S, hostname: str = "gpu-a") -> HostSnapshot:
    """A defunct leader holding GPU0, its true zombie child, an orphan on GPU1, ghost memory on GPU2 and an
    invisible pid on GPU3."""
    launcher = Proc(pid=10, ppid=9, state="S", name="launcher", start_ticks=4)
    leader = Proc(
        pid=40,
        ppid=10,
        state="Z",
        name=name,
        start_ticks=5,
        gpu_memory_mib={0: 2048},
        state_since=now - 720,
        live_threads=LiveThreads(2, {"D": 2}),
    )
    zombie = Proc(pid=41, ppid=40, state="Z", name="child", start_ticks=6, state_since=now - 60)
    zombie = replace(zombie, live_threads=LiveThreads(0))
    orphan = Proc(pid=50, ppid=1, state="S", name="worker", start_ticks=7, gpu_memory_mib={1: 4096})
    gpus = (
        Gpu(
            index=0,
            uuid="GPU-0",
            name="H100",
            memory_used_mib=2051,
            memory_total_mib=81559,
            processes=(GpuProcess(pid=40, used_mib=2048),),
        ),
        Gpu(
            index=1,
            uuid="GPU-1",
            name="H100",
            memory_used_mib=4099,
            memory_total_mib=81559,
            processes=(GpuProcess(pid=50, used_mib=4096),),
        ),
        Gpu(index=2, uuid="GPU-2", name="H100", memory_used_mib=1003, memory_total_mib=81559),
        Gpu(
            index=3,
            uuid="GPU-3",
            name="H100",
            memory_used_mib=515,
            memory_total_mib=81559,
            processes=(GpuProcess(pid=777, used_mib=512, visible=False),),
        ),
    )
    snapshot = HostSnapshot(
        target="local",
        hostname=hostname,
        time=now,
        mode="nvml",
        gpus=gpus,
        processes=(launcher, leader, zombie, orphan),
        device_holders=(),
        endpoints=(
            EndpointSample(url="http://user:secret@127.0.0.1:30000/health", state="STALLED", since=now - 90),
        ),
    )
    return analyze(snapshot, Baselines(), now)


def exposition_text(
    snapshot: HostSnapshot,
    figures: ExporterFigures | None = None,
    now: float = NOW_S,
    hostname: str = "gpu-a",
) -> str:
    """What the exporter serves for ``snapshot`` (sampled 2 s before ``now``)."""
    sample = ExportedSample(snapshot, Baselines(), now - 2, 0.05)
    registry = CollectorRegistry(auto_describe=False)

    class One:
        def collect(self) -> list[Any]:
            return families(sample, now, figures or ExporterFigures(), hostname, "9.9")

    registry.register(One())  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def scraped_answer(text: str, instance: str = "gpu-a:10191", now: float = NOW_S) -> dict[str, Any]:
    """What Prometheus's instant query would answer after scraping ``text`` (job "gputui")."""
    result: list[dict[str, Any]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if v != ""}  # Prometheus drops empty labels
            labels.update({"__name__": sample.name, "instance": instance, "job": "gputui"})
            result.append({"metric": labels, "value": [now, repr(sample.value)]})
            if sample.name == s.GPU_MEMORY_USED:
                part = {k: v for k, v in labels.items() if k != "__name__"}
                part[PART_LABEL] = TIME_PART
                result.append({"metric": part, "value": [now, str(now - 1)]})
    return {"status": "success", "data": {"resultType": "vector", "result": result}}
