"""An answer turned into the fleet: each host's GPUs, MIG instances, XID findings, servers and staleness."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gputui.agent.protocol import ENDPOINT_STATE_DOWN, ENDPOINT_STATE_UP, MODE_PROMETHEUS
from gputui.core.fleet import FleetHost, FleetSample, MigInstance
from gputui.core.model import (
    EndpointSample,
    Gpu,
    GpuFitness,
    HostSnapshot,
    Owner,
    XidEvent,
    impossible_error,
    opt_safe,
    replace,
    safe,
)
from gputui.core.text import age_text, fit, visible
from gputui.core.verdict import duplicate_host_finding, xid_finding
from gputui.transports.pacing import pace
from gputui.transports.prometheus.gputui_series import exported_host, merged_figures
from gputui.transports.prometheus.parts import GpuParts, HostParts, Series, host_part, whole
from gputui.transports.prometheus.query import (
    DEFAULT_HOST_LABEL,
    DEFAULT_STALE_AFTER_S,
    INSTANCE,
    LOOKBACK,
    SERVER_METRICS,
    PrometheusError,
)
from gputui.transports.prometheus.series import Parser

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _figure(figures: Mapping[str, Series], name: str) -> float | None:
    series = figures.get(name)
    return None if series is None else series.value


def _memory(figures: Mapping[str, Series]) -> tuple[int | None, int | None, int | None]:
    """(used, total, reserved) MiB: DCGM's used excludes the reserved part, as nvidia-smi's does."""
    used = _figure(figures, "used")
    free = _figure(figures, "free")
    reserved = _figure(figures, "reserved")
    total = None if used is None or free is None else used + free + (reserved or 0)
    return whole(used), whole(total), whole(reserved)


def _mig_instances(parts: GpuParts, owners: Mapping[str, Owner]) -> tuple[MigInstance, ...]:
    by_instance = {key.split("|", 1)[0]: owner for key, owner in owners.items()}
    out = []
    for mig_id in sorted(parts.mig, key=lambda i: (len(i), i)):
        figures = parts.mig[mig_id]
        used, total, _ = _memory(figures)
        out.append(
            MigInstance(
                instance_id=mig_id,
                profile=parts.mig_profiles.get(mig_id),
                memory_used_mib=used,
                memory_total_mib=total,
                utilization_pct=whole(_figure(figures, "util")),
                owner=by_instance.get(mig_id),
            )
        )
    return tuple(out)


def _sum(values: Iterable[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _mig_max(parts: GpuParts, figure: str) -> float | None:
    """The largest ``figure`` any MIG instance of the GPU reports (device-wide ones repeat per instance)."""
    values = [v for figures in parts.mig.values() if (v := _figure(figures, figure)) is not None]
    return max(values, default=None)


def _build_gpu(
    parts: GpuParts, index: int, stale: bool, stale_reason: str, owners: Mapping[str, Owner]
) -> tuple[Gpu, int | None, tuple[MigInstance, ...]]:
    """The model's GPU from its parts (no figures when stale), its last XID (None: no error) and its MIG
    instances."""
    labels = parts.labels
    name, uuid, pci_bus_id = labels.get("modelName"), labels.get("UUID"), labels.get("pci_bus_id")
    if stale:
        gpu = Gpu(
            index=index, name=opt_safe(name), uuid=uuid, pci_bus_id=pci_bus_id, error=safe(stale_reason)
        )
        return gpu, None, ()
    figures = merged_figures(parts)
    invalid = sorted(f"{s.labels.get('__name__')} {s.invalid}" for s in figures.values() if s.invalid)
    invalid += sorted(  # free memory has no figure of its own in the model: named here
        f"{s.labels.get('__name__')} {s.value:g}"
        for name, s in figures.items()
        if name == "free" and s.value is not None and s.value < 0
    )
    used, total, reserved = _memory(figures)
    instances = _mig_instances(parts, owners) if parts.mig else ()
    xid = _figure(figures, "xid")
    temp = _figure(figures, "temp")
    power = _figure(figures, "power")
    if instances:
        if used is None:
            # MIG without GPU-level memory series: the GPU holds what its instances hold.
            used = _sum(i.memory_used_mib for i in instances)
            total = _sum(i.memory_total_mib for i in instances)
        xid = _mig_max(parts, "xid") if xid is None else xid
        temp = _mig_max(parts, "temp") if temp is None else temp
        power = _mig_max(parts, "power") if power is None else power
    gpu = Gpu(
        index=index,
        name=opt_safe(name),
        uuid=uuid,
        pci_bus_id=pci_bus_id,
        fitness=dcgm_fitness(figures, whole(xid)),
        memory_used_mib=used,
        memory_total_mib=total,
        memory_reserved_mib=reserved,
        utilization_pct=whole(_figure(figures, "util")),
        temperature_c=whole(temp),
        power_w=None if power is None else round(power, 1),
        error=opt_safe(
            impossible_error(fit(text, 80) for text in invalid)
            if invalid
            else None
            if used is not None
            else "DCGM sent no memory figure for this GPU"
        ),
    )
    code = whole(xid)
    return gpu, (code if code else None), instances


def dcgm_fitness(figures: Mapping[str, Series], xid: int | None) -> GpuFitness | None:
    """A GPU's fitness from DCGM's remap, retirement, ECC, recovery-action and Xid series, by either DCGM name
    (``DCGM_RENAMED``; None when the exporter has none of them): judged by the same table as a collector's
    (``gputui.core.verdict.fitness``). DCGM's Xid gauge holds the last Xid only, without its time; its
    recovery action (field 1523) is NVML's own (``nvmlDeviceGpuRecoveryAction_t``)."""
    values = {name: _count(_figure(figures, name)) for name in DCGM_FITNESS_FIGURES}
    if xid is None and all(value is None for value in values.values()):
        return None

    def flag(name: str) -> bool | None:
        value = values[name]
        return None if value is None else value > 0

    return GpuFitness(
        remapped_rows_correctable=values["remap_corr"],
        remapped_rows_uncorrectable=values["remap_unc"],
        remap_pending=flag("remap_pending"),
        remap_failure=flag("remap_failure"),
        retired_pages_pending=flag("retired_pending"),
        ecc_uncorrected_volatile=values["ecc_unc_volatile"],
        ecc_uncorrected_aggregate=values["ecc_unc_aggregate"],
        recovery_action=values["recovery"],
        xids=(XidEvent(xid=xid, source="DCGM"),) if xid else (),
    )


def _count(value: float | None) -> int | None:
    """A count or flag DCGM sent; None for one no card can have (negative, NaN, infinite)."""
    if value is None or value != value or value < 0 or value > 1e15:
        return None
    return int(round(value))


DCGM_FITNESS_FIGURES = (
    "remap_corr",
    "remap_unc",
    "remap_pending",
    "remap_failure",
    "retired_pending",
    "ecc_unc_volatile",
    "ecc_unc_aggregate",
    "recovery",
)


def _rival_host(parts: HostParts, rivals: tuple[str, ...], parser: Parser, now: float | None) -> FleetHost:
    """A host several exporters claim with different GPUs: no figures (which are its own cannot be told),
    one finding, and an error, so that its verdict cannot tell."""
    finding = duplicate_host_finding(parts.name, rivals)
    newest = max((t for g in parts.gpus.values() for t in g.times), default=None)
    snapshot = HostSnapshot(
        target=parts.name,
        hostname=safe(parts.ssh_host),
        time=newest,
        error=safe(finding.detail),
        mode=MODE_PROMETHEUS,
        findings=(finding,),
    )
    return FleetHost(
        name=parts.name,
        snapshot=snapshot,
        ssh_host=parts.ssh_host,
        data_time=newest,
        age_s=None if newest is None or now is None else max(0.0, now - newest),
        stale=False,
        exporter_up=any(ups) if (ups := [parser.up[i] for i in rivals if i in parser.up]) else None,
        instances=tuple(sorted(parts.instances)),
    )


def last_is(age_s: float | None) -> str:
    """ "; the last is 12 s old", or nothing when the age is not known."""
    return "" if age_s is None else f"; the last is {age_text(age_s)} old"


def rival_exporters(parts: HostParts) -> tuple[str, ...]:
    """The exporters that claim this host with different GPUs (two machines given one ``Hostname``), sorted;
    empty when every exporter of the host names the same GPUs (one exporter scraped at two addresses)."""
    claims: dict[str, set[str]] = {}
    for key, gpu in parts.gpus.items():
        for instance in gpu.instances:
            claims.setdefault(instance, set()).add(key)
    if len({frozenset(keys) for keys in claims.values()}) < 2:
        return ()
    return tuple(sorted(claims))


def _index_gpus(parts: Iterable[GpuParts]) -> list[tuple[int, GpuParts]]:
    """GPUs in index order; a GPU without a ``gpu`` label gets the next free index (by its key)."""
    known = sorted((p for p in parts if p.index is not None), key=lambda p: (p.index, p.key))
    taken = {p.index for p in known}
    out: list[tuple[int, GpuParts]] = [(p.index, p) for p in known if p.index is not None]
    next_index = 0
    for p in sorted((p for p in parts if p.index is None), key=lambda p: p.key):
        while next_index in taken:
            next_index += 1
        taken.add(next_index)
        out.append((next_index, p))
    out.sort(key=lambda pair: pair[0])
    return out


def _servers_by_host(
    parser: Parser, aliases: Mapping[str, str | None]
) -> dict[str, dict[str, dict[str, Any]]]:
    """host name -> server instance -> {"kind", figure: value}: each server attached to the host it runs on.

    A series with a host label (``Parser.host_labels`` before ``instance``) names its host; else its
    ``instance`` without the port must name exactly one host (or that host's exporter address). Anything else
    is left out: several hosts behind one address (loopback, a NAT) cannot be told apart.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for series in parser.servers:
        kind, figure = SERVER_METRICS[series.labels.get("__name__", "")]
        host = next((series.labels[k] for k in parser.host_labels[:-1] if series.labels.get(k)), None)
        instance = series.labels.get(INSTANCE) or ""
        if not host or host not in parser.hosts:
            host = aliases.get(host_part(instance)) if instance else None
        if not host:
            continue
        entry = out.setdefault(host, {}).setdefault(instance or kind, {"kind": kind})
        if series.value is not None:
            entry[figure] = entry.get(figure, 0.0) + series.value
    return out


def _alias_map(parser: Parser) -> dict[str, str | None]:
    """Address or name -> the one host it stands for (None: it stands for several)."""
    aliases: dict[str, str | None] = {}
    for host in parser.hosts.values():
        names = {host.name, host.ssh_host} | {host_part(i) for i in host.instances}
        for alias in names:
            if not alias:
                continue
            aliases[alias] = host.name if aliases.get(alias, host.name) == host.name else None
    return aliases


def server_detail(kind: str, figures: Mapping[str, Any]) -> str:
    """ "vllm: 3 running, 1 waiting" (a figure the server did not send is left out)."""
    parts = [f"{int(figures[f])} {f}" for f in ("running", "waiting") if figures.get(f) is not None]
    return f"{kind}: " + (", ".join(parts) if parts else "no request figures")


def parse_answer(
    document: Mapping[str, Any],
    host_label: str = DEFAULT_HOST_LABEL,
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
    known_servers: Mapping[str, tuple[str, str]] | None = None,
    list_down_targets: bool = True,
    claimed_instances: Iterable[str] = (),
) -> FleetSample:
    """The fleet in one ``/api/v1/query`` answer of ``build_query``'s expression.

    Args:
        document: The decoded JSON answer.
        host_label: The label that names a host, tried first; then ``HOST_LABEL_FALLBACKS``, then
            ``instance``.
        stale_after_s: A GPU whose newest sample is older than this has no current data.
        known_servers: Server instance -> (host, kind) from earlier answers: a server whose gauges went away
            while its ``up`` is 0 is shown DOWN on its host.
        list_down_targets: List a target of a DCGM scrape job that is down and has left no series in the
            lookback as a host of its own (named by its ``instance``). Off when a label matcher narrows the
            fleet: whether it would select such a target cannot be told.
        claimed_instances: Exporter addresses of hosts known from earlier answers (not listed again).

    Raises:
        PrometheusError: the answer is not an instant vector.
    """
    data = document.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(result, list):
        raise PrometheusError("prometheus: the answer is not an instant vector")
    parser = Parser(host_label, stale_after_s)
    try:
        parser.feed(result)
        if list_down_targets:
            _add_down_targets(parser, set(claimed_instances))
        now = parser.eval_time
        servers = _servers_by_host(parser, _alias_map(parser))
        for instance, (host_name, kind) in (known_servers or {}).items():
            if host_name in parser.hosts and parser.up.get(instance) is False:
                servers.setdefault(host_name, {}).setdefault(instance, {"kind": kind})
        hosts = []
        for name in sorted(parser.hosts):
            hosts.append(_build_host(parser.hosts[name], parser, now, servers.get(name, {})))
            pace()
    except (TypeError, AttributeError, ValueError) as exc:
        cause = f"{type(exc).__name__}: {visible(str(exc), 80)}"
        raise PrometheusError(f"prometheus: malformed answer ({cause})") from None
    return FleetSample(hosts=tuple(hosts), eval_time=now, ignored_series=parser.ignored)


def _add_down_targets(parser: Parser, claimed: set[str]) -> None:
    """A host for each target of a DCGM job that is down and that no host's series name."""
    claimed |= {instance for host in parser.hosts.values() for instance in host.instances}
    for instance, job in parser.down_targets:
        if job in parser.dcgm_jobs and instance not in claimed and instance not in parser.hosts:
            parser.hosts[instance] = HostParts(instance, host_part(instance), instances={instance})


def _build_host(
    parts: HostParts, parser: Parser, now: float | None, servers: Mapping[str, Mapping[str, Any]]
) -> FleetHost:
    rivals = rival_exporters(parts)
    if rivals:
        return _rival_host(parts, rivals, parser, now)
    ups = [parser.up[i] for i in sorted(parts.instances) if i in parser.up]
    exporter_up = None if not ups else any(ups)  # one working scrape of a duplicated exporter is enough
    # A GPU's data is as old as its newest sample; without a current one, as old as the last time its
    # exporter was up.
    last_up = max((parser.up_time[i] for i in parts.instances if i in parser.up_time), default=None)
    newest = max((t for g in parts.gpus.values() for t in g.times), default=last_up)
    host_age = None if newest is None or now is None else max(0.0, now - newest)
    gpus: list[Gpu] = []
    xid: dict[int, int] = {}
    mig: dict[int, tuple[MigInstance, ...]] = {}
    owners: dict[int, tuple[Owner, ...]] = {}
    stale_count = 0
    for index, gpu_parts in _index_gpus(parts.gpus.values()):
        gpu_newest = max(gpu_parts.times, default=last_up)
        age = None if gpu_newest is None or now is None else max(0.0, now - gpu_newest)
        too_old = age is not None and age > parser.stale_after_s
        stale = not gpu_parts.live or too_old
        reason = f"no current data{last_is(age)}"
        gpu_owners = parser.owners(gpu_parts)
        gpu, code, instances = _build_gpu(gpu_parts, index, stale, reason, gpu_owners)
        stale_count += stale
        gpus.append(gpu)
        if code:
            xid[index] = code
        if instances:
            mig[index] = instances
        if gpu_owners:
            owners[index] = tuple(sorted(gpu_owners.values(), key=lambda o: o.label))
    host_stale = stale_count == len(gpus) if gpus else exporter_up is False
    error = None
    if host_stale:
        why = "its exporter is down (up=0)" if exporter_up is False else "its series went stale"
        error = f"no current data: {why}{last_is(host_age)}"
        if not gpus:
            error += f", and Prometheus has none of its GPU series in the last {LOOKBACK}"
        gpus = [replace(g, error=None) for g in gpus]  # one host-level reason, not eight copies
    elif exporter_up is False:
        error = "its exporter is down (up=0), but Prometheus still serves its last data"
    health = tuple(
        EndpointSample(
            url=safe(instance),
            state=None
            if parser.up.get(instance) is None
            else safe(ENDPOINT_STATE_UP if parser.up[instance] else ENDPOINT_STATE_DOWN),
            detail=safe(server_detail(str(figures["kind"]), figures)),
            checked_at=now,
        )
        for instance, figures in sorted(servers.items())
    )
    snapshot = HostSnapshot(
        target=parts.name,
        hostname=safe(parts.ssh_host),
        time=newest,
        error=opt_safe(error),
        mode=MODE_PROMETHEUS,
        gpus=tuple(gpus),
        findings=tuple(xid_finding(parts.name, i, c) for i, c in sorted(xid.items())),
        endpoints=health,
    )
    return FleetHost(
        name=parts.name,
        snapshot=snapshot,
        ssh_host=parts.ssh_host,
        data_time=newest,
        age_s=host_age,
        stale=host_stale,
        exporter_up=exporter_up,
        instances=tuple(sorted(parts.instances)),
        xid=xid,
        mig=mig,
        exported=None if host_stale else exported_host(parts),
        owners=owners,
    )
