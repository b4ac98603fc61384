"""The fleet view's data side: verdicts over a fleet sample, one summary row per host, sorting and filtering,
and the SSH target of a host (the poller that asks Prometheus is the UI session's, ``fleet_poller``).

Shared by the fleet screen and by ``gputui snapshot/check --prometheus``; no Textual or Rich here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gputui.core.fleet.exported import (
    exported_endpoints,
    exported_findings,
    exported_fitness,
    exported_verdict,
)
from gputui.core.fleet.owners import owner_labels, owners_match
from gputui.core.fleet.sample import DEFAULT_STALE_AFTER_S, FleetHost, FleetSample
from gputui.core.link import BadTarget, parse_target
from gputui.core.model import Record, replace
from gputui.core.servers import worst_state
from gputui.core.store import load_calibrated_uuids
from gputui.core.text import DASH, age_text
from gputui.core.text import size_text as size_text
from gputui.core.verdict import (
    DEFAULT_BASELINE_MIB,
    DEFAULT_TOLERANCE_MIB,
    Baselines,
    memory_verdict,
    with_assessment,
)

DEFAULT_SSH_TARGET = "{host}"
HOST_PLACEHOLDER = "{host}"
DEFAULT_REFRESH_S = 5.0
SORT_MODES = ("host", "memory", "util", "temp", "age", "dead")
"""host: by name; memory, util, temp: highest first; age: oldest data first (stale hosts on top); dead:
most memory held by dead processes or by nobody first (``FleetRow.dead_held_mib``), then most findings."""


def analyze_fleet(
    sample: FleetSample,
    baselines: Baselines,
    stale_after_s: float | None = DEFAULT_STALE_AFTER_S,
    between_hosts: Callable[[], None] | None = None,
) -> FleetSample:
    """Every host's snapshot with its verdict and findings.

    A host whose gputui exporter is current gets that exporter's verdict (processes included) and its
    findings worded as the monitor words them, each GPU's fitness as the exporter read it (DCGM's where it
    sent none), its servers beside the others; every other host the memory-only verdict
    (``verdict.memory_verdict``). XID findings are kept either way.

    ``between_hosts`` is called before each host: a caller on a background thread pauses there while its UI
    needs the interpreter, as a large fleet's analysis would otherwise keep it for a stretch a key notices.
    """
    hosts = []
    for host in sample.hosts:
        if between_hosts is not None:
            between_hosts()
        snapshot = with_assessment(host.snapshot, baselines.accepted_xids)  # each GPU's action, from DCGM
        exported = host.exported
        if exported is None or host.stale:
            verdict = memory_verdict(snapshot, baselines)
            hosts.append(replace(host, snapshot=snapshot.with_analysis(snapshot.findings, verdict)))
            continue
        snapshot = exported_fitness(exported, snapshot)  # the exporter's own read of each GPU's fitness
        findings = exported_findings(exported, snapshot, sample.eval_time)
        verdict = exported_verdict(exported, snapshot, findings, stale_after_s)
        endpoints = snapshot.endpoints + exported_endpoints(exported, sample.eval_time)
        judged = replace(snapshot, endpoints=endpoints)
        judged = judged.with_analysis((*snapshot.findings, *findings), verdict)
        hosts.append(replace(host, snapshot=judged))
    return replace(sample, hosts=tuple(hosts))


def memory_only(host: FleetHost) -> bool:
    """Whether the host's verdict is on memory alone (no current gputui exporter on it)."""
    return host.exported is None or host.stale


def ssh_target_for(template: str, host: FleetHost) -> str:
    """The SSH target of a fleet host: ``template`` with ``{host}`` replaced by the host's name.

    The name comes from Prometheus labels (any exporter can set them): it must be a plain host name or
    address, and the target must pass the same check as a target typed on the command line.

    Raises:
        BadTarget: one line naming the problem.
    """
    name = host.ssh_host
    try:
        spec = parse_target(name)
    except BadTarget as exc:
        raise BadTarget(f"{host.name}: cannot make an SSH target from it: {exc}") from None
    if spec.user is not None or spec.port is not None:
        raise BadTarget(f"{host.name}: cannot make an SSH target from {name!r}: not a bare host name")
    target = template.replace(HOST_PLACEHOLDER, name)
    parse_target(target)
    return target


def check_template(template: str) -> str:
    """The ``ssh_target`` template, checked: it names ``{host}`` once and gives a valid target.

    Raises:
        ValueError: one line.
    """
    if template.count(HOST_PLACEHOLDER) != 1:
        raise ValueError(f"ssh_target must contain {HOST_PLACEHOLDER} once: {template!r}")
    try:
        parse_target(template.replace(HOST_PLACEHOLDER, "gpu-a"))
    except BadTarget as exc:
        raise ValueError(f"ssh_target {template!r} does not give a valid target: {exc}") from None
    return template


class FleetRow(Record):
    """What one line of the fleet overview says about a host.

    Attributes:
        name: The host.
        state: "live", "stale" (no current data), "gone" (no series any more) or "empty" (no GPU).
        gpus: How many GPUs the host has.
        at_baseline: GPUs whose memory is at their baseline; None when it cannot be told.
        used_mib: Memory used over all GPUs; None when a GPU's figure is missing or the host is not live.
        total_mib: Memory of all GPUs.
        util_pct: Mean utilisation over the GPUs that report one.
        hottest: (GPU index, °C) of the hottest GPU.
        hottest_power_w: That GPU's power draw.
        xid: (GPU index, XID) of every GPU whose last XID is not 0.
        age_s: Age of the host's newest sample, seconds.
        server: "vllm: 3 running, 1 waiting" for the first server, "+N" more; None when none is known.
        server_state: The worst state of the host's servers (UP, DOWN, None: unknown).
        error: The host's error line, if any.
        findings: How many findings the host has (its exporter's and the XIDs); None for a host that runs
            no gputui exporter and shows no XID.
        dead_held_mib: Memory held by defunct processes and ghost memory (its gputui exporter's); None
            without one.
        memory_only: The verdict is on memory alone (no current gputui exporter).
        owners: The pods DCGM's labels say have the host's GPUs (``pod:namespace/name``), sorted.
    """

    name: str
    state: str
    gpus: int
    at_baseline: int | None
    used_mib: int | None
    total_mib: int | None
    util_pct: int | None
    hottest: tuple[int, int] | None
    hottest_power_w: float | None
    xid: tuple[tuple[int, int], ...]
    age_s: float | None
    server: str | None
    server_state: str | None
    error: str | None
    findings: int | None = None
    dead_held_mib: int | None = None
    memory_only: bool = True
    owners: tuple[str, ...] = ()


def _sum_or_none(values: Sequence[int | None]) -> int | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def summarize(host: FleetHost, since_s: float = 0.0, stale_after_s: float | None = None) -> FleetRow:
    """The overview line of ``host``.

    Args:
        host: One host of an analysed sample.
        since_s: Seconds since that sample's answer arrived: its data is that much older now.
        stale_after_s: Data older than this is no longer shown as current (None: only the source decides).
    """
    snapshot = host.snapshot
    # Whole seconds: rows are compared to decide what to redraw, and ages are shown in whole seconds.
    age = None if host.age_s is None else float(round(host.age_s + max(0.0, since_s)))
    state = "gone" if host.gone else "stale" if host.stale else "live"
    if state == "live" and age is not None and stale_after_s is not None and age > stale_after_s:
        state = "stale"
    if state == "live" and not snapshot.gpus:
        state = "empty"
    live = state == "live"
    gpus = snapshot.gpus
    verdict = snapshot.verdict
    at_baseline = verdict.gpus_at_baseline if live and verdict is not None and verdict.known else None
    utils = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
    temps = [(g.temperature_c, g.index) for g in gpus if g.temperature_c is not None]
    hottest = None
    hottest_power = None
    if live and temps:
        temp, index = max(temps)
        hottest = (index, temp)
        hottest_power = next((g.power_w for g in gpus if g.index == index), None)
    health = snapshot.endpoints
    server: str | None = None
    if health:
        server = health[0].detail or health[0].url
        if len(health) > 1:
            server += f" +{len(health) - 1}"
    return FleetRow(
        name=host.name,
        state=state,
        gpus=len(gpus),
        at_baseline=at_baseline,
        used_mib=_sum_or_none([g.memory_used_mib for g in gpus]) if live else None,
        total_mib=_sum_or_none([g.memory_total_mib for g in gpus]) if live else None,
        util_pct=round(sum(utils) / len(utils)) if live and utils else None,
        hottest=hottest,
        hottest_power_w=hottest_power,
        xid=tuple(sorted(host.xid.items())) if live else (),
        age_s=age,
        server=server,
        server_state=worst_state(health) if health else None,
        error=snapshot.error,
        findings=len(snapshot.findings) if live and (snapshot.findings or not memory_only(host)) else None,
        dead_held_mib=None
        if memory_only(host) or not live or host.exported is None
        else host.exported.dead_held_mib,
        memory_only=memory_only(host),
        owners=owner_labels(o for gpu_owners in host.owners.values() for o in gpu_owners) if live else (),
    )


def memory_text(row: FleetRow) -> str:
    """ "312G/640G", or the dash."""
    if row.used_mib is None:
        return DASH
    return f"{size_text(row.used_mib)}/{size_text(row.total_mib)}"


def baseline_text(row: FleetRow) -> str:
    """ "8/8" GPUs at baseline, or the dash when it cannot be told."""
    return DASH if row.at_baseline is None else f"{row.at_baseline}/{row.gpus}"


def hottest_text(row: FleetRow, power: bool = True) -> str:
    """ "GPU3 84°C 412W" (the power only with ``power``), or the dash."""
    if row.hottest is None:
        return DASH
    text = f"GPU{row.hottest[0]} {row.hottest[1]}°C"
    if power and row.hottest_power_w is not None:
        text += f" {row.hottest_power_w:.0f}W"
    return text


def xid_text(row: FleetRow) -> str:
    """ "79@GPU3", "+N" more GPUs with an XID, or the dash."""
    if not row.xid:
        return DASH
    index, code = row.xid[0]
    more = f" +{len(row.xid) - 1}" if len(row.xid) > 1 else ""
    return f"{code}@GPU{index}{more}"


def findings_text(row: FleetRow) -> str:
    """ "3, 40G dead" (findings, memory held by dead processes or nobody), "0", or the dash."""
    if row.findings is None:
        return DASH
    if row.dead_held_mib:
        return f"{row.findings}, {size_text(row.dead_held_mib)} dead"
    return str(row.findings)


def state_text(row: FleetRow) -> str:
    """The age of the host's data, prefixed with what is wrong when it is not live."""
    age = DASH if row.age_s is None else age_text(row.age_s)
    if row.state == "live":
        return age
    return f"{row.state} {age}"


_MISSING_LAST = float("inf")


def sort_key(mode: str) -> Callable[[FleetRow], tuple[object, ...]]:
    """The sort key of a ``SORT_MODES`` mode; the host name breaks ties, missing figures go last."""
    if mode == "memory":
        return lambda r: (-(r.used_mib if r.used_mib is not None else -1), r.name)
    if mode == "util":
        return lambda r: (-(r.util_pct if r.util_pct is not None else -1), r.name)
    if mode == "temp":
        return lambda r: (-(r.hottest[1] if r.hottest is not None else -1000), r.name)
    if mode == "age":
        return lambda r: (-(r.age_s if r.age_s is not None else _MISSING_LAST), r.name)
    if mode == "dead":
        return lambda r: (
            -(r.dead_held_mib if r.dead_held_mib is not None else -1),
            -(r.findings if r.findings is not None else -1),
            r.name,
        )
    return lambda r: (r.name,)


def matches(row: FleetRow, host: FleetHost, needle: str) -> bool:
    """Whether a host passes the filter: ``needle`` (lower case) in its name, a GPU model, its server or
    state."""
    if not needle:
        return True
    if needle in row.name.lower() or needle in row.state:
        return True
    if row.server is not None and needle in row.server.lower():
        return True
    if owners_match((o for gpu_owners in host.owners.values() for o in gpu_owners), needle):
        return True
    return any(needle in (g.name or "").lower() for g in host.snapshot.gpus)


def fleet_baselines(baseline_mib: int | None, tolerance_mib: int | None) -> tuple[Baselines, str | None]:
    """The baselines of every fleet host, and a warning line when the calibration file cannot be used.

    ``--baseline-mib`` when given, else each GPU's calibrated value (by UUID, whichever host it was calibrated
    under), else the default; ``--tolerance-mib`` when given.
    """
    tolerance = DEFAULT_TOLERANCE_MIB if tolerance_mib is None else tolerance_mib
    if baseline_mib is not None:
        return Baselines(default_mib=baseline_mib, tolerance_mib=tolerance), None
    loaded = load_calibrated_uuids()
    return (
        Baselines(default_mib=DEFAULT_BASELINE_MIB, tolerance_mib=tolerance, per_gpu_mib=loaded.per_gpu_mib),
        loaded.warning,
    )
