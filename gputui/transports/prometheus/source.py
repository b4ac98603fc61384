"""The fleet source: one query per refresh, and the hosts remembered between refreshes."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gputui.core.fleet import FleetHost, FleetSample
from gputui.core.model import Gpu, Record, replace
from gputui.core.text import visible
from gputui.transports.pacing import collector_paused
from gputui.transports.prometheus.parse import last_is, parse_answer
from gputui.transports.prometheus.query import (
    DEFAULT_HOST_LABEL,
    DEFAULT_STALE_AFTER_S,
    DEFAULT_TIMEOUT_S,
    PrometheusError,
    build_query,
    fetch,
    shown_url,
)


class FleetSettings(Record):
    """How to read the fleet.

    Attributes:
        url: Prometheus's base URL (checked by ``normalise_url``).
        matcher: Label matchers for the DCGM series (checked by ``parse_matcher``).
        host_label: The label tried first to name a host (then ``HOST_LABEL_FALLBACKS``, then ``instance``).
        stale_after_s: Samples older than this are not current data.
        timeout_s: Deadline of one query, connect to last byte.
    """

    url: str
    matcher: str = ""
    host_label: str = DEFAULT_HOST_LABEL
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    timeout_s: float = DEFAULT_TIMEOUT_S


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    Fetcher = Callable[[str, str, float], Mapping[str, Any]]


class PrometheusSource:
    """Reads the fleet, one query per ``sample()``, and remembers hosts and servers between samples.

    A host that had series in an earlier answer and has none now (its exporter died longer ago than the
    ``LOOKBACK``, or Prometheus lost it) stays listed as gone, with the age of its last data.
    """

    def __init__(self, settings: FleetSettings, fetcher: Fetcher | None = None) -> None:
        self.settings = settings
        self.query = build_query(settings.matcher)
        self._fetch: Fetcher = fetcher or fetch
        self._known: dict[str, FleetHost] = {}
        self._servers: dict[str, tuple[str, str]] = {}

    def sample(self) -> FleetSample:
        """Ask once and return every host, gone ones included.

        The answer is decoded and parsed with the cyclic collector paused (``pacing.collector_paused``): its
        decoded document and the series taken from it are containers by the hundred thousand for a large
        fleet, none in a cycle, and while they live they would set off full collections of the whole process.

        Raises:
            PrometheusError: one line naming the server and the cause.
        """
        with collector_paused():
            document = self._fetch(self.settings.url, self.query, self.settings.timeout_s)
            try:
                sample = parse_answer(
                    document,
                    self.settings.host_label,
                    self.settings.stale_after_s,
                    self._servers,
                    list_down_targets=not self.settings.matcher,
                    # A host named by its address stays that host when its exporter is down.
                    claimed_instances=[i for h in self._known.values() for i in h.instances if i != h.name],
                )
            except PrometheusError as exc:
                cause = str(exc).split(": ", 1)[-1]
                raise PrometheusError(f"prometheus {shown_url(self.settings.url)}: {cause}") from None
            del document
        return self._remember(sample)

    def _remember(self, sample: FleetSample) -> FleetSample:
        current = {host.name: host for host in sample.hosts}
        hosts = list(sample.hosts)
        for name, old in self._known.items():
            if name not in current:
                hosts.append(gone_host(old, sample.eval_time))
        hosts.sort(key=lambda h: h.name)
        self._known = {host.name: host for host in hosts}
        for host in sample.hosts:
            for health in host.snapshot.endpoints:
                kind = (health.detail or "").split(":", 1)[0]
                self._servers[health.url] = (host.name, kind)
        return replace(sample, hosts=tuple(hosts))


def gone_host(old: FleetHost, now: float | None) -> FleetHost:
    """``old`` as a host Prometheus no longer has any series of: GPUs by name only, the age of its data."""
    age = None if old.data_time is None or now is None else max(0.0, now - old.data_time)
    gpus = tuple(
        Gpu(index=g.index, name=g.name, uuid=g.uuid, pci_bus_id=g.pci_bus_id) for g in old.snapshot.gpus
    )
    snapshot = replace(
        old.snapshot,
        gpus=gpus,
        error=visible(f"no series in Prometheus any more{last_is(age)}"),
        findings=(),
        endpoints=(),
        verdict=None,
    )
    return replace(old, snapshot=snapshot, age_s=age, stale=True, xid={}, mig={}, gone=True, exported=None)
