"""The fleet as the fleet view sees it: each host's snapshot in the common shape, and what only DCGM tells."""

from __future__ import annotations

from gputui.core.fleet.exported import ExportedHost
from gputui.core.model import HostSnapshot, Owner, Record, field

DEFAULT_STALE_AFTER_S = 90.0
"""A sample older than this is stale even when Prometheus still serves it (no staleness marker was written:
federation, a restart, exporters with explicit timestamps). Longer than the one-minute scrape interval that
Prometheus uses by default."""


class MigInstance(Record):
    """One MIG GPU instance as DCGM reports it (``GPU_I_ID``, ``GPU_I_PROFILE``)."""

    instance_id: str
    profile: str | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    utilization_pct: int | None = None
    owner: Owner | None = None
    """The pod DCGM's labels say has this instance."""


class FleetHost(Record):
    """One host of the fleet: its snapshot in the common shape, plus what only the fleet view shows.

    Attributes:
        name: The host label's value (``Hostname`` by default), else the exporter's ``instance``.
        snapshot: ``mode`` "prometheus"; ``time`` the newest sample's own time; ``error`` says why there are
            no figures (stale, exporter down); ``findings`` the XID errors; ``health`` the servers.
        ssh_host: The name an SSH target is made from: the host label's value, else ``instance`` without
            its port.
        data_time: Epoch seconds (Prometheus's clock) of the newest sample of the host, None when unknown.
        age_s: How old that sample was when the query was evaluated.
        stale: No current data: the exporter died, its series went stale, or the data is too old.
        exporter_up: ``up`` of the host's exporter scrape target(s); None when Prometheus has no ``up`` for
            them (federated data, a matcher that leaves them out).
        instances: The exporter ``instance`` labels the host's series came from.
        xid: GPU index -> last XID error code, for GPUs whose last XID is not 0.
        mig: GPU index -> its MIG instances.
        owners: GPU index -> the pods DCGM's labels say have it, one per MIG instance (or per shared GPU's
            series) that has one, sorted (``gputui.core.fleet.owners``).
        gone: The host has no series in Prometheus any more; it is known from an earlier refresh.
        exported: What the host's gputui exporter said (findings, verdict, servers); None: it runs none, or
            its series are not current.
    """

    name: str
    snapshot: HostSnapshot
    ssh_host: str
    data_time: float | None = None
    age_s: float | None = None
    stale: bool = False
    exporter_up: bool | None = None
    instances: tuple[str, ...] = ()
    xid: dict[int, int] = field(default_factory=dict)
    mig: dict[int, tuple[MigInstance, ...]] = field(default_factory=dict)
    gone: bool = False
    exported: ExportedHost | None = None
    owners: dict[int, tuple[Owner, ...]] = field(default_factory=dict)


class FleetSample(Record):
    """One refresh: every host, in name order.

    Attributes:
        eval_time: Epoch seconds (Prometheus's clock) the query was evaluated at; None when the answer had no
            series at all.
        ignored_series: Series that named no host or no GPU (left out).
    """

    hosts: tuple[FleetHost, ...]
    eval_time: float | None = None
    ignored_series: int = 0
