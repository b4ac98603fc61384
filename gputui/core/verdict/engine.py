"""THE verdict engine: one function from a host sample to everything a view says about it.

``judge`` takes one snapshot as a collector sent it and returns it with its server states, findings and
clean-slate verdict, the verdict's reasons including the ports a killed job served on that are still in
LISTEN, the servers that are UNHEALTHY or STALLED, what jobs whose GPU memory is gone left (``remains``)
and the GPUs that are gone; then the verdict as its three facts (``facts``). The TUI, ``snapshot``,
``check``, the fleet view and the receipt all render this result; none of them adds a step or rewords a
reason, and each lists the findings in the order given here (``order``: by the GPU memory they hold).
``no_data`` is the one result for a host without data (before the first sample, unreachable, stale): it
cannot tell, and says since when.

Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable

from gputui.core.model import HostSnapshot, Verdict, replace
from gputui.core.store import WatchedPort
from gputui.core.text import visible
from gputui.core.verdict.analysis import analyze
from gputui.core.verdict.baselines import Baselines
from gputui.core.verdict.cleanslate import busy_port_reason, busy_ports
from gputui.core.verdict.facts import with_facts
from gputui.core.verdict.findings import KilledJob
from gputui.core.verdict.fitness import lost_gpu_reasons
from gputui.core.verdict.levels import NO_DATA
from gputui.core.verdict.order import ordered_findings
from gputui.core.verdict.remains import gone_gpu_reasons, job_remains

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.servers import ServerWatch


def judge(
    snapshot: HostSnapshot,
    baselines: Baselines,
    *,
    servers: ServerWatch | None = None,
    now: float | None = None,
    killed_jobs: Iterable[KilledJob] = (),
    watched_ports: Collection[WatchedPort] = (),
    one_shot: bool = False,
) -> HostSnapshot:
    """Server states, findings and the verdict of one host sample.

    Args:
        snapshot: The sample as the collector sent it.
        baselines: The host's idle baselines.
        servers: The watch that keeps each endpoint's state and each GPU job's spin over time (the TUI's);
            None: a fresh one (one reading: no rate, no stall, no spinning collective).
        now: Epoch seconds on the host's clock to measure ages against (default the snapshot's time).
        killed_jobs: Jobs killed on this host: what escaped them is a survivor.
        watched_ports: Ports of jobs killed on this host not yet seen free: one in LISTEN is a reason.
        one_shot: A one-shot run's sample (``snapshot``, ``check``): a D state seen once is said, its age
            unknown.
    """
    judged = snapshot
    watch = servers
    if servers is not None or snapshot.endpoints:  # the server modules load with the first endpoint
        from gputui.core.servers import ServerWatch

        watch = ServerWatch() if servers is None else servers
        judged = watch.apply(snapshot, now)
    analysed = analyze(judged, baselines, now=now, killed_jobs=killed_jobs, one_shot=one_shot)
    findings, remains = job_remains(analysed)
    if watch is not None:  # what only a watch over samples sees: a collective spinning for its window
        findings += watch.findings(snapshot.target)
    analysed = replace(analysed, findings=ordered_findings(findings))
    verdict = analysed.verdict
    if verdict is None or not verdict.known:
        return analysed
    extra = port_reasons(analysed, watched_ports) + server_reasons(analysed) + remains
    gone = tuple(
        dict.fromkeys(gone_gpu_reasons(analysed, baselines.per_gpu_mib) + lost_gpu_reasons(analysed))
    )
    if extra or gone:
        verdict = replace(
            verdict,
            clean=False,
            reasons=gone + verdict.reasons + extra,
            not_ready=gone + verdict.not_ready,
        )
    return with_facts(replace(analysed, verdict=verdict))


def server_reasons(snapshot: HostSnapshot) -> tuple[str, ...]:
    """One reason per endpoint whose judged state makes the host not clean (``servers.failing_servers``)."""
    if not snapshot.endpoints:
        return ()
    from gputui.core.servers import failing_servers

    return tuple(failing_servers(snapshot.endpoints))


def port_reasons(snapshot: HostSnapshot, ports: Collection[WatchedPort]) -> tuple[str, ...]:
    """One reason per watched port still in LISTEN (``cleanslate.busy_ports``), saying by whom."""
    busy = busy_ports(snapshot, ports) if ports else None
    return tuple(busy_port_reason(port, listener) for port, listener in busy or ())


def no_data_text(reason: str | None, since_s: float | None) -> str:
    """ "no data since 03:12:07: connection refused" (local time of day), "no data: connecting" (never had
    any)."""
    cause = f": {reason}" if reason else ""
    if since_s is None:
        return f"{NO_DATA}{cause}"
    try:
        at = time.strftime("%H:%M:%S", time.localtime(since_s))
    except (OverflowError, OSError, ValueError):
        return f"{NO_DATA}{cause}"
    return f"{NO_DATA} since {at}{cause}"


def no_data(target: str, reason: str | None, since_s: float | None) -> HostSnapshot:
    """The result for a host without (fresh) data: no GPU, no finding, a verdict that cannot tell.

    Args:
        target: The host.
        reason: Why there is no data (the link's error, "connecting", "stale"); None: not known.
        since_s: Epoch seconds of the last data (None: never had any).
    """
    text = visible(no_data_text(reason, since_s))
    return HostSnapshot(target=target, error=text, verdict=Verdict(clean=False, known=False, reasons=(text,)))
