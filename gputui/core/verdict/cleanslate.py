"""The clean-slate check as one pure state machine, shared by the TUI's ``c``/``X`` and ``check --wait``.

A check watches a host's memory samples until every GPU is back at its baseline, then confirms with a fresh
full sample before it says CLEAN. The rules, in the order they apply:

* Memory alone decides when to look (``memory_at_baseline``): a streamed sample's process list may be up to a
  process interval old, in either direction, so it can neither declare the slate clean nor hold it back.
* While a kill on the host is under way there is no receipt: its escalation may still be due.
* The confirming sample must list processes no older than the clean memory sample it confirms, its verdict
  must be clean, and no zombie of a job killed here may be listed. A clean memory sample whose process list
  was read with it confirms itself: while a check watches, the collector samples the moment a GPU holder
  exits, with a fresh whole-host process list, so the receipt needs no second round trip. Then the
  receipt's time is the time the clean memory sample arrived, not the time of the answer.
* A TCP port a killed job served on (its launcher's ``--port``, the ports its processes listened on) that is
  still in LISTEN on the host holds the receipt back, whatever the GPUs say: the restart needs the port. A
  listener started after the kill is that restart, not the job. A host that cannot list its listening ports
  does not hold it back (there is nothing to wait on that could be seen).
* Past the deadline the check ends, not clean.

Each function takes a ``CleanCheck`` and returns the next one; nothing here does IO or reads a clock, so the
callers feed it their own times (the TUI its display clock, the CLI ``time.monotonic``) and do the sampling.
The drain curve (memory above baseline, summed over the GPUs, at each memory sample) is kept for the
receipt, bounded, and so is the driver's teardown: memory still above baseline once no GPU process is listed
is the driver releasing what the last holder left (it frees a process's memory as its device files close,
which can take seconds on a large context), not a process to kill.
"""

from __future__ import annotations

from collections.abc import Collection

from gputui.core.model import HostSnapshot, Proc, Record, replace
from gputui.core.store import WatchedPort
from gputui.core.verdict.baselines import Baselines
from gputui.core.verdict.findings import job_remnants
from gputui.core.verdict.slate import memory_at_baseline

WATCH_MEMORY_INTERVAL_S = 0.09
"""Memory sample interval while a check watches memory drain (the TUI's ``c`` and ``check --wait``). Links
schedule the next sample an interval after the last one *finished*, so 0.1 s gives a little under 10 samples
per second; 0.09 s keeps it at 10 or more, and the clean slate is seen within ~0.1 s of the last GPU
draining."""
WATCH_PROCESS_INTERVAL_S = 0.5
"""Process-list interval while a check watches: who still holds memory matters then."""
DRAIN_POINTS_MAX = 256
"""Points kept for the drain curve; when full, every other one is dropped (the curve keeps its whole span at
half the resolution), so a check of any length costs at most this many."""
STALE_LIST = "the confirming sample's process list is older than the clean memory sample"


def _restarted(listener: Proc | None, watched: WatchedPort) -> bool:
    if listener is None or listener.create_time is None or watched.killed_time is None:
        return False
    return listener.create_time > watched.killed_time


def busy_ports(
    snapshot: HostSnapshot, watched: Collection[WatchedPort]
) -> list[tuple[WatchedPort, Proc | None]] | None:
    """The watched ports still in LISTEN on the host, each with its listener when a listed process holds it;
    None when the snapshot cannot tell (no listening ports from its collector)."""
    listening = snapshot.listening_ports
    if listening is None:
        return None
    busy = []
    for port in watched:
        if port.port in listening:
            listener = snapshot.listener(port.port)
            if not _restarted(listener, port):
                busy.append((port, listener))
    return busy


def busy_port_reason(port: WatchedPort, listener: Proc | None) -> str:
    """``port 30000 still listening (pid 4200 python3)`` (untrusted text: made visible where shown)."""
    if listener is None:
        return f"port {port.port} still listening (by a process not listed)"
    return f"port {port.port} still listening (pid {listener.pid} {listener.name or '?'})"


def ports_left(snapshot: HostSnapshot, watched: Collection[WatchedPort]) -> tuple[WatchedPort, ...]:
    """The watched ports a snapshot does not show free (all of them when it cannot tell)."""
    busy = busy_ports(snapshot, watched)
    if busy is None:
        return tuple(watched)
    still = {port for port, _listener in busy}
    return tuple(port for port in watched if port in still)


class DrainPoint(Record):
    """One memory sample during a check.

    Attributes:
        at_s: When it arrived (the caller's clock).
        above_mib: Memory above the baselines (tolerance included), summed over the GPUs, MiB.
    """

    at_s: float
    above_mib: int


class CleanCheck(Record):
    """One clean-slate check.

    Attributes:
        started_s: When it started (the caller's clock, as every time here).
        timeout_s: It ends, not clean, this long after ``started_s``.
        trigger: The key that started it: "c", "X" (a kill of every GPU job, then the check), or "--wait".
        finished_s: When the clean memory sample that a fresh full sample confirmed arrived, or when the
            deadline passed; None while it runs.
        clean: True clean, False the deadline passed first; None while it runs.
        kill_s: When the last kill during the check sent its signals; None: no kill.
        kill_pending: A kill on the host is under way: no receipt until it is done.
        asked_s: A confirming sample was asked for the clean memory sample that arrived at this time; None:
            none asked (the next clean memory sample asks).
        asked_memory_time: That memory sample's own time (the host's clock): the confirming sample must list
            processes no older than it.
        note: Why the last confirming sample did not confirm ("" when none came back yet).
        drain: The drain curve, oldest first (at most ``DRAIN_POINTS_MAX`` points).
        holders_gone_s: When memory above baseline was first seen with no GPU process listed: the driver
            tearing down what the last holder left. None while a holder is listed or nothing is above.
        teardown_s: How long that teardown took, once memory was back at baseline; None until then.
        ports: The TCP ports of the jobs killed on the host, watched until they are free.
        ports_free_s: When a sample first showed every watched port free; None until then (or none watched).
        ports_note: Why the last confirming sample was held back by a port ("" when it was not).
        pressed_s: When the key that started it was pressed, when that was before ``started_s`` (``X``
            waits for a confirmation): the receipt's "since X" counts from it. None: ``started_s``.
        signal_at, workers_gone_at, memory_back_at, ports_free_at: The receipt's events on the host's clock
            (``facts.receipt_times``): the kill's first signal and its last process gone (its outcomes'
            times), the first sample with memory at baseline after the signal, the first that showed the
            watched ports free; None where not known.
    """

    started_s: float
    timeout_s: float
    trigger: str = "c"
    finished_s: float | None = None
    clean: bool | None = None
    kill_s: float | None = None
    kill_pending: bool = False
    asked_s: float | None = None
    asked_memory_time: float | None = None
    note: str = ""
    drain: tuple[DrainPoint, ...] = ()
    holders_gone_s: float | None = None
    teardown_s: float | None = None
    ports: tuple[WatchedPort, ...] = ()
    ports_free_s: float | None = None
    ports_note: str = ""
    pressed_s: float | None = None
    signal_at: float | None = None
    workers_gone_at: float | None = None
    memory_back_at: float | None = None
    ports_free_at: float | None = None

    @property
    def key_s(self) -> float:
        """When the key that started the check was pressed (the receipt's "since X")."""
        return self.started_s if self.pressed_s is None else min(self.pressed_s, self.started_s)

    @property
    def running(self) -> bool:
        """Neither clean nor timed out yet."""
        return self.finished_s is None

    @property
    def confirming(self) -> bool:
        """A confirming sample is on its way."""
        return self.asked_s is not None

    def tearing_down_for_s(self, now_s: float) -> float | None:
        """Seconds the driver has been releasing memory with no holder listed; None when it is not."""
        if self.holders_gone_s is None or self.teardown_s is not None:
            return None
        return max(0.0, now_s - self.holders_gone_s)

    def drain_since_kill(self) -> tuple[DrainPoint, ...]:
        """The drain curve from the kill (or the start, without one) to the end of the check, starting with
        the last sample taken before it (what the GPUs held when the signals went out)."""
        since = self.kill_s if self.kill_s is not None else self.started_s
        before = [i for i, p in enumerate(self.drain) if p.at_s <= since]
        return self.drain[before[-1] if before else 0 :]


def start(
    now_s: float,
    timeout_s: float,
    trigger: str = "c",
    kill_pending: bool = False,
    ports: Collection[WatchedPort] = (),
    pressed_s: float | None = None,
) -> CleanCheck:
    """A new check, started at ``now_s``, watching ``ports`` (those of jobs killed before it) until free;
    ``pressed_s``: when its key was pressed, if before ``now_s`` (a confirmation in between)."""
    return CleanCheck(
        started_s=now_s,
        timeout_s=timeout_s,
        trigger=trigger,
        kill_pending=kill_pending,
        ports=tuple(ports),
        pressed_s=pressed_s,
    )


def above_baseline_mib(snapshot: HostSnapshot, baselines: Baselines) -> int:
    """Memory above the baselines (tolerance included), summed over the GPUs that report it, MiB."""
    total = 0
    for gpu in snapshot.gpus:
        if gpu.memory_used_mib is not None:
            total += max(0, gpu.memory_used_mib - baselines.for_gpu(gpu) - baselines.tolerance_mib)
    return total


def _with_point(drain: tuple[DrainPoint, ...], point: DrainPoint) -> tuple[DrainPoint, ...]:
    if drain and drain[-1].at_s == point.at_s:
        return (*drain[:-1], point)  # the same moment again (a frozen clock): replaced, not appended
    if len(drain) >= DRAIN_POINTS_MAX:
        drain = drain[::2]
    return (*drain, point)


def listed_with_memory(snapshot: HostSnapshot) -> bool:
    """Whether the sample's process list was read with its memory figures, not reused from an earlier one
    (the collector's sample after a watched GPU holder exited, or a list that came due)."""
    listed, sampled = snapshot.processes_time, snapshot.time
    return listed is not None and sampled is not None and listed >= sampled


def memory_sample(
    check: CleanCheck,
    snapshot: HostSnapshot,
    baselines: Baselines,
    now_s: float,
    killed_members: Collection[tuple[int, int | None]] = (),
) -> tuple[CleanCheck, bool]:
    """A streamed sample (analysed) arrived at ``now_s``.

    A clean memory sample whose process list was read with it (``listed_with_memory``) is its own
    confirming sample: no second sample is asked for. ``killed_members`` as in ``confirming_sample``.

    Returns:
        The next check, and whether to take a fresh full sample now and hand it to ``confirming_sample``.
    """
    if not check.running:
        return check, False
    above = above_baseline_mib(snapshot, baselines)
    check = replace(check, drain=_with_point(check.drain, DrainPoint(now_s, above)))
    check = _teardown(check, snapshot, above, now_s)
    check = _ports_seen(check, snapshot, now_s)
    if check.confirming or check.kill_pending or not memory_at_baseline(snapshot, baselines):
        return check, False
    asked = replace(check, asked_s=now_s, asked_memory_time=snapshot.time)
    if listed_with_memory(snapshot):
        return confirming_sample(asked, snapshot, killed_members), False
    return asked, True


def _teardown(check: CleanCheck, snapshot: HostSnapshot, above_mib: int, now_s: float) -> CleanCheck:
    """Start, go on with or end the driver's teardown: memory above baseline and no GPU process listed."""
    if any(gpu.processes for gpu in snapshot.gpus):
        return replace(check, holders_gone_s=None, teardown_s=None)
    if above_mib > 0:
        return check if check.holders_gone_s is not None else replace(check, holders_gone_s=now_s)
    if check.holders_gone_s is not None and check.teardown_s is None:
        return replace(check, teardown_s=max(0.0, now_s - check.holders_gone_s))
    return check


def _ports_seen(check: CleanCheck, snapshot: HostSnapshot, now_s: float) -> CleanCheck:
    """Note when the watched ports were first all seen free."""
    if not check.ports or check.ports_free_s is not None:
        return check
    busy = busy_ports(snapshot, check.ports)
    return check if busy is None or busy else replace(check, ports_free_s=now_s)


def confirming_sample(
    check: CleanCheck,
    fresh: HostSnapshot | None,
    killed_members: Collection[tuple[int, int | None]] = (),
    error: str = "",
) -> CleanCheck:
    """The fresh full sample asked for by ``memory_sample`` came back (``fresh``, analysed) or could not be
    taken (None; ``error`` says why).

    Args:
        check: The check that asked.
        fresh: The analysed full sample.
        killed_members: (pid, start ticks) of the processes of jobs killed on the host: a zombie of them
            still listed holds the receipt back.
        error: Why there is no sample.

    Returns:
        The finished check (clean, at the time of the memory sample that asked), or the running one, ready
        to ask again on the next clean memory sample.
    """
    if not check.running or check.asked_s is None:
        return check
    asked_s, memory_time = check.asked_s, check.asked_memory_time
    waiting = replace(check, asked_s=None, asked_memory_time=None)
    if fresh is None:
        return replace(waiting, note=error or "no confirming sample")
    listed_s = fresh.processes_time
    if listed_s is None or (memory_time is not None and listed_s < memory_time):
        return replace(waiting, note=STALE_LIST)
    verdict = fresh.verdict
    if verdict is not None and verdict.not_ready and not check.kill_pending:
        # Memory is back, but the GPU itself needs a reset, reboot or drain: waiting will not make it fit.
        return replace(waiting, finished_s=asked_s, clean=False, note=verdict.not_ready[0])
    if verdict is None or not verdict.clean:
        reason = "no verdict" if verdict is None else (verdict.reasons[0] if verdict.reasons else "not clean")
        return replace(waiting, note=reason)
    if check.kill_pending:
        return replace(waiting, note="a kill is under way")
    if job_remnants(fresh, list(killed_members)):
        return replace(waiting, note="a zombie of a killed job is still listed")
    busy = busy_ports(fresh, check.ports) or []
    if busy:
        reason = busy_port_reason(*busy[0])
        return replace(waiting, note=reason, ports_note=reason)
    free_s = waiting.ports_free_s
    if free_s is None and check.ports and fresh.listening_ports is not None:
        free_s = asked_s
    return replace(waiting, finished_s=asked_s, clean=True, note="", ports_note="", ports_free_s=free_s)


def kill_sent(check: CleanCheck, now_s: float, ports: Collection[WatchedPort] = ()) -> CleanCheck:
    """A kill on the host sent its first signals at ``now_s``: the receipt waits for it and counts "since the
    kill" from it, and for ``ports`` (the killed job's) to be free."""
    if not check.running:
        return check
    known = {p.port for p in check.ports}
    added = tuple(p for p in ports if p.port not in known)
    free_s = check.ports_free_s if not added else None
    return replace(check, kill_s=now_s, kill_pending=True, ports=check.ports + added, ports_free_s=free_s)


def kills_settled(check: CleanCheck, still_under_way: bool) -> CleanCheck:
    """A kill on the host ended; ``still_under_way``: another one is not done yet."""
    if not check.running:
        return check
    return replace(check, kill_pending=still_under_way)


def tick(check: CleanCheck, now_s: float) -> CleanCheck:
    """Time passed: past its deadline a running check ends, not clean."""
    if check.running and now_s - check.started_s > check.timeout_s:
        return replace(check, finished_s=now_s, clean=False, asked_s=None, asked_memory_time=None)
    return check
