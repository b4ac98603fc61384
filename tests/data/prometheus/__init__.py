"""Recorded ``/api/v1/query`` answers of a real Prometheus (see ``record.py``) and what to make of them.

``fleet.json`` is the answer to gputui's own query over a small fleet, ``demo.json`` over sixteen hosts (the
README's screenshot); ``scaled_answer`` grows ``fleet.json`` to any number of hosts by repeating the
recorded ``gpu-a`` (8 GPUs, its timestamps and ``up``) under new names, the shape a 500-host Prometheus
gives. ``recorded_fleet_app`` is the app showing the fleet view over an answer, with a frozen clock.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.screens.fleet import FleetScreen

HERE = Path(__file__).parent
URL = "http://prometheus:9090"

Fetch = Callable[[str, str, float], Mapping[str, Any]]


def load_answer(name: str = "fleet.json") -> dict[str, Any]:
    """A recorded answer (a fresh copy: tests change it)."""
    return json.loads((HERE / name).read_text())


def recorded_fleet_app(
    fetch: Fetch, clock: Callable[[], float], audit_dir: Path, refresh_s: float = 3600.0
) -> tuple[GpuTuiApp, FleetScreen]:
    """The app on the fleet view, asking ``fetch`` instead of Prometheus; hosts open as simulated ones."""
    from gputui.core.fleet import analyze_fleet, ssh_target_for
    from gputui.core.link import LinkOptions
    from gputui.core.verdict import Baselines
    from gputui.transports.prometheus import FleetSettings, PrometheusSource
    from gputui.transports.sim import SimLink
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.screens.fleet import FleetScreen

    source = PrometheusSource(FleetSettings(url=URL), fetcher=fetch)
    fleet = FleetScreen(
        lambda: analyze_fleet(source.sample(), Baselines()),
        source_name=f"prometheus {URL}",
        ssh_target=lambda host: ssh_target_for("{host}", host),
        refresh_s=refresh_s,
        stale_after_s=90.0,
        clock=clock,
    )
    options = LinkOptions(memory_interval_s=0.05, process_interval_s=0.05)
    app = GpuTuiApp(
        [],
        lambda target: SimLink(target, options, clock=clock),
        clock=clock,
        memory_interval_s=0.05,
        process_interval_s=0.05,
        notify_timeout_s=600.0,
        audit_dir=audit_dir,
        fleet=fleet,
    )
    return app, fleet


def eval_time(document: Mapping[str, Any]) -> float:
    """The answer's evaluation time (Prometheus's clock)."""
    return max(float(item["value"][0]) for item in document["data"]["result"])


def _series_of(document: Mapping[str, Any], host: str) -> tuple[list[dict[str, Any]], str]:
    """The recorded series of ``host`` (its DCGM values, timestamps and ``up``) and its exporter address."""
    result = document["data"]["result"]
    mine = [item for item in result if item["metric"].get("Hostname") == host]
    instance = mine[0]["metric"]["instance"]
    ups = [
        item
        for item in result
        if item["metric"].get("__name__") == "up" and item["metric"].get("instance") == instance
    ]
    return mine + ups, instance


def scaled_answer(hosts: int, template: str = "gpu-a") -> dict[str, Any]:
    """An answer with ``hosts`` copies of the recorded ``template`` host: ``node-0000``, ``node-0001``, …,
    each with its own UUIDs and exporter address."""
    document = load_answer()
    series, instance = _series_of(document, template)
    result: list[dict[str, Any]] = []
    for n in range(hosts):
        name = f"node-{n:04d}"
        address = f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}:9400"
        for item in series:
            copied = copy.deepcopy(item)
            metric = copied["metric"]
            if "Hostname" in metric:
                metric["Hostname"] = name
            if metric.get("instance") == instance:
                metric["instance"] = address
            if "UUID" in metric:
                metric["UUID"] = f"{metric['UUID'][:-4]}{n:04x}"
            result.append(copied)
    document["data"]["result"] = result
    return document


def fetcher_of(document: Mapping[str, Any]) -> Fetch:
    """A ``PrometheusSource`` fetcher that answers every query with ``document``."""

    def fetch(url: str, query: str, timeout_s: float) -> Mapping[str, Any]:
        return document

    return fetch
