"""What a job whose GPU memory is gone left on its host, judged from what the collector remembers of it.

Whoever killed the job (gputui, ``pkill``, ``docker stop``, Slurm, the OOM killer), the collector remembers
it (``HostSnapshot.remembered``): its members, the GPUs it held, the ports it listened on. Once it holds no
GPU memory, what is left of it is said here, once:

* a member still running (same pid and start time) is a ``survivor`` of it: NOT CLEAN, with the command
  that kills it;
* a member left defunct is a ``zombie`` of it, whoever its parent is (an init that does not reap: its
  container is stopped, pid 1 never signalled): NOT CLEAN; the host's own init (pid 1) is given the
  moments it takes to reap (``D_STATE_THRESHOLD_S`` since the job's memory went);
* a /dev/shm segment its members had open or mapped, still the same file, and its users' MPS control
  daemon still running while no process of that user holds GPU memory: a ``leftover`` (the same finding a
  kill's record gives), NOT CLEAN;
* its profiler: a member that is one (``nsys``, its agent or launcher, ``ncu``) still running is a
  ``leftover`` of it (not a survivor: it is the profiler's, named as such), and a report its profiler left
  unfinished (the output its argv named, with a raw ``.qdstrm`` and no ``.nsys-rep``) is a ``leftover``
  too, never deleted but by ``gputui leftovers --remove``: NOT CLEAN;
* a port it listened on still in LISTEN by a listed process that is not its member and started before it
  was released (one that inherited the socket): NOT CLEAN;
* a GPU listed before in this boot and not now: NOT READY (a GPU that fell off the bus comes back with a
  reboot).

Only what belonged to the job counts: a pid reused by another process (another start time) is not its, and
a member that exists but cannot be read is said as unseen, not as gone. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.core.jobs import D_STATE_THRESHOLD_S, is_init_like, proc_label, sample_index, shown
from gputui.core.model import STATE_ZOMBIE, Finding, HostSnapshot, Proc, RememberedJob, profiler_name, replace
from gputui.core.model.wire import plain
from gputui.core.store import leftovers, watched_ports
from gputui.core.text import DASH, clock_time, visible
from gputui.core.verdict.cleanslate import busy_port_reason, busy_ports
from gputui.core.verdict.findings import WHY_MEMBER, WHY_PARENT, process_facts, survivor_words, zombie_words

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.model import GoneGpu

NOTHING_RECORDED = "nothing recorded on {target} since boot (gputui has not seen a GPU job there)"


def profiler_left(target: str, proc: Proc, job: RememberedJob) -> Finding:
    """A member of a job whose GPU memory is gone that is its profiler (or the profiler's agent) and still
    runs: a leftover of the job, killed by pid."""
    mark = proc.profiler
    what = profiler_name(mark) if mark is not None and mark.known else "its profiler"
    return Finding(
        kind=leftovers.KIND,
        target=target,
        detail=f"profiler pid {proc_label(proc)}, {what}, still runs after the job of pid {job.root} "
        f"({shown(job.name)}) lost its GPU memory",
        action=f"gputui kill {target} {proc.pid} (its report may still be written: wait if it is busy)",
        pid=proc.pid,
        action_pid=proc.pid,
    )


def _member_finding(
    target: str, proc: Proc, job: RememberedJob, table: dict[int, Proc], now_s: float | None
) -> Finding | None:
    """A member still there, said as what it is now; None for a defunct leader (``find_problems`` says it)
    and for a zombie of the host's init that has not lingered yet."""
    if proc.is_defunct_leader:
        return None
    parent = table.get(proc.ppid) if proc.ppid is not None else None
    facts = replace(process_facts(proc, parent), root_pid=job.root, root_name=job.name)
    if proc.state == STATE_ZOMBIE:
        lingered_s = None if job.released is None or now_s is None else now_s - job.released
        if proc.ppid in (None, 0, 1) and (lingered_s is None or lingered_s < D_STATE_THRESHOLD_S):
            return None  # the host's init reaps within moments: only a zombie that lingers says something
        init_like = is_init_like(parent, proc.ppid)
        owner = proc.owner.label if proc.owner is not None and proc.owner.kind != "user" else None
        return zombie_words(target, replace(facts, why=WHY_PARENT if init_like else None, owner=owner))
    return survivor_words(target, replace(facts, why=WHY_MEMBER))


REPLACED_KINDS = frozenset({"zombie", "orphan", "survivor"})
"""A finding of these kinds about a member of a remembered job gives way to the one that names the job;
any other (a process stuck in D, a defunct leader) says more and stays."""


def job_remains(snapshot: HostSnapshot) -> tuple[tuple[Finding, ...], tuple[str, ...]]:
    """The snapshot's findings with what the remembered jobs left (members, ports), and the NOT CLEAN
    reasons those give (each a finding's sentence, or a port's)."""
    remembered = snapshot.remembered
    findings = tuple(snapshot.findings)
    if remembered is None or not remembered.jobs:
        return findings, ()
    table = sample_index(snapshot).table
    by_pid = {f.pid: f for f in findings if f.pid is not None}
    replaced: dict[int, Finding] = {}
    running: list[str] = []
    reasons: list[str] = []
    leftover_findings: list[Finding] = []
    seen_leftovers = {f.detail for f in findings if f.kind == leftovers.KIND}
    # An MPS daemon still serving a job of its user that holds GPU memory is that job's, not residue.
    serving = {p.uid for p in table.values() if p.gpu_memory_mib and p.uid is not None}
    for job in remembered.jobs:
        for pid, start in job.remaining:
            proc = table.get(pid)
            if proc is None or proc.start_ticks != start or proc.gpu_memory_mib:
                continue  # not listed now, another process by that number, or holding memory again
            existing = by_pid.get(pid)
            if existing is not None and existing.kind not in REPLACED_KINDS:
                reasons.append(existing.detail)
                continue
            finding: Finding | None = replaced.get(pid)
            if finding is None and (pid, start) in job.profilers and not proc.is_zombie:
                finding = profiler_left(snapshot.target, proc, job)
            elif finding is None:
                finding = _member_finding(snapshot.target, proc, job, table, snapshot.time)
            if finding is not None:
                replaced[pid] = finding
                if finding.kind == leftovers.KIND:  # a profiler left running: residue, said as a leftover
                    reasons.append(f"leftover: {finding.detail}")
                else:
                    (running if finding.kind == "survivor" else reasons).append(finding.detail)
        left = {
            "segments": [plain(segment) for segment in job.segments],
            "mps": [plain(daemon) for daemon in job.mps if daemon.uid not in serving],
            # A profiler still running may yet write its report: it is said (above), its report not yet.
            "reports": [] if job.profilers else [plain(report) for report in job.reports],
        }
        if left["segments"] or left["mps"] or left["reports"]:
            for finding in leftovers.findings(snapshot.target, left):
                if finding.detail not in seen_leftovers:
                    seen_leftovers.add(finding.detail)
                    leftover_findings.append(finding)
                    reasons.append(f"leftover: {finding.detail}")
        members = {pid for pid, _start in job.remaining}
        for port, listener in busy_ports(snapshot, watched_ports(job.ports, job.released)) or ():
            # A listener not listed cannot be told from the job restarted; a member is a survivor already.
            if listener is not None and listener.pid not in members:
                reasons.append(busy_port_reason(port, listener))
    kept = tuple(f for f in findings if f.pid not in replaced or f.kind not in REPLACED_KINDS)
    # What still runs first: it is what the next launch would collide with.
    return kept + tuple(replaced.values()) + tuple(leftover_findings), tuple(dict.fromkeys(running + reasons))


def gone_gpu_reason(gpu: GoneGpu) -> str:
    """``GPU-8c5… (PCI 0000:3b:00.0) was listed at 03:57:12 and is gone: fallen off the bus? reboot``."""
    where = f" (PCI {gpu.pci_bus_id})" if gpu.pci_bus_id else ""
    clock = clock_time(gpu.last_seen)
    at = "" if clock == DASH else f" at {clock}"
    return f"GPU {gpu.uuid}{where} was listed{at} and is gone: fallen off the bus? reboot the host"


def gone_gpu_reasons(snapshot: HostSnapshot, calibrated: Iterable[str] = ()) -> list[str]:
    """One NOT READY reason per GPU listed before in this boot and not now, and per GPU calibrated on the
    host (``calibrated``: the baselines' keys) that is not listed now."""
    remembered = snapshot.remembered
    reasons = [] if remembered is None else [gone_gpu_reason(gpu) for gpu in remembered.gpus_gone]
    if snapshot.error is not None or not snapshot.gpus:
        return reasons  # a host that lists no GPU cannot tell which are gone
    said = {gpu.uuid for gpu in remembered.gpus_gone} if remembered is not None else set()
    listed = {gpu.key for gpu in snapshot.gpus}
    for key in sorted(calibrated):
        if key.startswith("GPU-") and key not in listed and key not in said:
            reasons.append(
                f"GPU {visible(key, 80)} was calibrated on this host and is not listed now: fallen off the "
                "bus? reboot the host (a GPU replaced since: calibrate again)"
            )
    return reasons


def nothing_recorded(snapshot: HostSnapshot) -> str | None:
    """The note beside the verdict about the collector's record (never a reason): why it is not kept, or,
    for a host where it saw no GPU job since boot, that there is none (no record is no record, not "nothing
    left")."""
    remembered = snapshot.remembered
    if remembered is None:
        return None
    if remembered.warning:
        return remembered.warning
    return None if remembered.jobs_seen else NOTHING_RECORDED.format(target=snapshot.target)
