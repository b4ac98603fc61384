"""A spinning collective: a GPU job whose GPUs all show ≥ 95 % utilisation at power near idle, and nothing
moving, for longer than a window: a collective (NCCL's all-reduce, all-gather, …) waiting for a rank that
never joins.

A collective's kernel polls for its peers: NVML counts the time a kernel runs, so the GPU reads 100 % busy,
while a polling kernel draws little more than an idle GPU. The figures below come from the public
``nvidia-smi`` samples kept in ``tests/data/spinning_nccl.txt``, with their sources (a test holds them to it):

* Busy: GPUs of a hung collective read 99-100 % (every "spin" sample): ``SPIN_UTIL_MIN_PCT`` is 95.
* Near idle: the driver gives each GPU's power limit (NVML's enforced limit); a GPU is near idle below its
  idle figure plus ``NEAR_IDLE_SHARE`` (20 %) of the range from idle to limit. Hung collectives sat at 0-13 %
  of that range above the lowest power the same model showed (an H100 SXM at 100-152 W against 69 W idle and
  a 700 W limit; V100s at 44-76 W; an H100 PCIe at 69-72 W of 350 W), real work at 29 % and up (the same
  H100s at 500-690 W, a V100 decoding at 180 W, an A100 training at 174 W of 400 W). An A800 at 68-72 % busy
  drew 125-139 W (14-18 %): the utilisation, not the power, tells that one apart.
* Idle: no driver says what a GPU draws idle, so its idle figure is the lowest power this watch has seen it
  draw, never above ``IDLE_CAP_SHARE`` (20 %) of its limit (idle GPUs in the samples drew 10-21 % of theirs,
  an H100 with a model loaded the most). A GPU seen only while spinning keeps its own spinning power as the
  idle figure, which the threshold then clears (NVIDIA/nccl#1550's 152 W against 140 + 112 W).
* Nothing moving: a job may also wait in a collective on purpose (GLM-130B's ranks spin at 100 % waiting for
  the next prompt), so the pattern is a finding only where nothing progresses. A job with a server whose
  metrics are read: the server has requests pending and no token generated (``ServerStateTracker``'s
  ``stalled_for_s``). Any other job: none of its processes used CPU (each under ``CPU_QUIET_PCT``). A job
  whose host thread polls its stream burns a core without progress (nccl-tests' ``sched_yield`` loop in
  NVIDIA/nccl#199, 804 % CPU in NVIDIA/nccl-tests#193), so such a job is never said this way.
* The window, ``DEFAULT_SPIN_AFTER_S`` (120 s, ``spin_after_s`` in the config): collectives complete within
  seconds (PyTorch chose 10 minutes as its NCCL timeout for "ample headroom", pytorch/pytorch#110947), so two
  minutes of spinning is no slow step; it is four times the stall window, and well inside the watchdogs that
  end such a job (sglang's ``--watchdog-timeout`` 300 s, PyTorch's NCCL timeout 600 s), so the job can still
  be looked at when it is said.

A GPU whose utilisation or power the driver does not give (NOT_SUPPORTED, MIG) cannot tell: its job is
never said to spin, and a stalled server says the spin is unknown, and why.

:class:`SpinTracker` keeps, per host, each GPU's lowest power and since when each job's GPUs spin; the server
watch (``watch.ServerWatch``) feeds it every sample, judges each server with its job's spin
(``jobs.JobFacts.spin``) and words the findings (``spinning_words``) from their facts.
"""

from __future__ import annotations

from gputui.core.jobs import sample_index, shown
from gputui.core.model import Finding, FindingFacts, Gpu, HostSnapshot, Proc, Record
from gputui.core.text import age_text

KIND = "spinning"
SPIN_UTIL_MIN_PCT = 95
"""Utilisation (percent) from which a GPU is busy: hung collectives read 99-100 %."""
NEAR_IDLE_SHARE = 0.20
"""Share of the range from idle to the power limit above idle that is still near idle (see the docstring)."""
IDLE_CAP_SHARE = 0.20
"""The idle figure never exceeds this share of the limit (idle GPUs drew 10-21 % of theirs)."""
DEFAULT_SPIN_AFTER_S = 120.0
"""Seconds a job's GPUs must spin, with nothing moving, before it is said (see the docstring)."""
CPU_QUIET_PCT = 5.0
"""A process under this CPU share (percent of a core) makes no progress on the host: a sleeping Python
process with its background threads uses a few tenths; a host thread polling its stream uses 100."""
WHY_TOKENS = "tokens"
WHY_CPU = "cpu"
_WHY_WORDS = {WHY_TOKENS: "no tokens", WHY_CPU: "no CPU used"}


def near_idle_w(limit_w: float, lowest_w: float | None) -> float:
    """The power (W) at or below which a GPU with this limit, seen at ``lowest_w`` at the least, is near
    idle: its idle figure (``lowest_w``, at most ``IDLE_CAP_SHARE`` of the limit) plus ``NEAR_IDLE_SHARE``
    of the range from there to the limit."""
    cap = IDLE_CAP_SHARE * limit_w
    idle = cap if lowest_w is None else max(0.0, min(lowest_w, cap))
    return idle + NEAR_IDLE_SHARE * (limit_w - idle)


_UNREAD = "{gpus} unreadable"
_NO_UTIL = "no utilisation from {gpus} (MIG, or not supported)"
_NO_POWER = "no power or power limit from {gpus} (not supported)"


def gpu_spins(gpu: Gpu, lowest_w: float | None) -> tuple[bool | None, str]:
    """Whether ``gpu`` is busy at idle power: (True, ""), (False, "") when idle or computing, (None, why)
    when its figures cannot tell (``why``: a template naming ``{gpus}``)."""
    if gpu.error is not None or gpu.unreachable is not None:
        return None, _UNREAD
    util, power, limit = gpu.utilization_pct, gpu.power_w, gpu.power_limit_w
    if util is not None and util < SPIN_UTIL_MIN_PCT:
        return False, ""
    if power is not None and limit is not None and limit > 0:
        if power > near_idle_w(limit, lowest_w):
            return False, ""
        return (True, "") if util is not None else (None, _NO_UTIL)
    return None, _NO_UTIL if util is None else _NO_POWER


def unknown_text(whys: list[tuple[int, str]]) -> str:
    """(GPU index, why) of the GPUs that cannot tell, in one clause: "no utilisation from GPUs 0–7 (MIG, or
    not supported)"."""
    by_why: dict[str, list[int]] = {}
    for index, why in whys:
        by_why.setdefault(why, []).append(index)
    return "; ".join(why.format(gpus=gpus_text(tuple(indices))) for why, indices in by_why.items())


def gpus_text(indices: tuple[int, ...]) -> str:
    """ "GPUs 0–7", "GPUs 0–3, 6", "GPU 2": runs of consecutive indices as ranges."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    parts = [str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}" for run in runs]
    return f"GPU{'' if len(indices) == 1 else 's'} {', '.join(parts)}"


def spinning_text(gpus: tuple[int, ...], window_s: float | None, why: str | None) -> str:
    """The one sentence of a spinning collective: "GPUs 0–7 busy at idle power for 2 min, no tokens: a
    collective is likely hung" (``why``: ``WHY_TOKENS`` or ``WHY_CPU``)."""
    window = age_text(DEFAULT_SPIN_AFTER_S if window_s is None else window_s)
    moving = _WHY_WORDS.get(why or "", "nothing moving")
    return f"{gpus_text(gpus)} busy at idle power for {window}, {moving}: a collective is likely hung"


def spinning_words(target: str, f: FindingFacts) -> Finding:
    """A job (``pid``: its root) whose GPUs (``memory_mib``) have spun at idle power for ``window_s`` with
    nothing moving (``why``); ``state_since``: since when they spin."""
    sentence = spinning_text(f.gpus, f.window_s, f.why)
    return Finding(
        kind=KIND,
        target=target,
        pid=f.pid,
        gpu_index=min(f.gpus) if f.gpus else None,
        detail=f"{sentence} (the job of pid {f.pid} ({shown(f.name)}))",
        action=f"find the rank that never joined (py-spy dump --pid on each rank, or NCCL_DEBUG=INFO), then "
        f"kill the job of pid {f.pid} and start it again",
        action_pid=f.pid,
        since=f.state_since,
        facts=f,
    )


class JobSpin(Record):
    """One GPU job's GPUs as the spin tracker saw them in a sample.

    Attributes:
        root_pid, root_name: The job's root process (``jobs.build_forest``).
        memory_mib: (GPU index, MiB) the job holds there: its GPUs.
        spinning: Every one of its GPUs busy at idle power now; None when some cannot tell (``unknown``).
        since: Since when (epoch seconds, the watch's clock) they spin; None while they do not.
        for_s: How long they have spun; None while they do not.
        unknown: Why it cannot be told ("no utilisation from GPUs 0–7 (MIG, or not supported)"); "" else.
        cpu_quiet_for_s: How long none of its processes has used CPU (``CPU_QUIET_PCT``); None while one
            does, or its CPU is not known.
        after_s: The window: how long the GPUs must spin, with nothing moving, before it is said.
        members: Pids of its processes; ``ports``: the TCP ports they listen on.
    """

    root_pid: int
    root_name: str | None
    memory_mib: tuple[tuple[int, int], ...]
    spinning: bool | None
    after_s: float
    since: float | None = None
    for_s: float | None = None
    unknown: str = ""
    cpu_quiet_for_s: float | None = None
    members: frozenset[int] = frozenset()
    ports: frozenset[int] = frozenset()

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(index for index, _ in self.memory_mib)

    def spun_long_enough(self, quiet_for_s: float | None) -> bool:
        """Whether the GPUs spun, and nothing moved for ``quiet_for_s``, both for the whole window."""
        return (
            self.for_s is not None
            and quiet_for_s is not None
            and min(self.for_s, quiet_for_s) >= self.after_s
        )

    def facts(self, why: str) -> FindingFacts:
        """The finding's facts, nothing moving because of ``why`` (``WHY_TOKENS``, ``WHY_CPU``)."""
        return FindingFacts(
            pid=self.root_pid,
            name=self.root_name,
            memory_mib=self.memory_mib,
            state_since=self.since,
            age_s=self.for_s,
            why=why,
            window_s=self.after_s,
        )


def _quiet(procs: list[Proc]) -> bool:
    """No live process of ``procs`` used CPU since the collector's last process sample (all known)."""
    live = [proc for proc in procs if not proc.is_zombie]
    return bool(live) and all(proc.cpu_pct is not None and proc.cpu_pct < CPU_QUIET_PCT for proc in live)


class SpinTracker:
    """Since when each GPU job of one host spins, and each GPU's lowest power. Pure: fed samples and a clock.

    Args:
        spin_after_s: The window, in seconds (``DEFAULT_SPIN_AFTER_S``).

    Raises:
        ValueError: A window that is not a positive finite number.
    """

    def __init__(self, spin_after_s: float = DEFAULT_SPIN_AFTER_S) -> None:
        if not 0 < spin_after_s < float("inf"):
            raise ValueError(f"spin window must be a positive number of seconds, not {spin_after_s!r}")
        self.spin_after_s = float(spin_after_s)
        self._lowest_w: dict[str, float] = {}
        self._spinning_since: dict[tuple[int, int | None], float] = {}
        self._quiet_since: dict[tuple[int, int | None], float] = {}

    def lowest_w(self, gpu: Gpu) -> float | None:
        """The lowest power (W) this tracker has seen ``gpu`` draw, None before any reading."""
        return self._lowest_w.get(gpu.key)

    def update(self, snapshot: HostSnapshot, now: float) -> dict[int, JobSpin]:
        """Take one sample of the host; returns each GPU job's spin by its root pid. Jobs no longer listed
        are forgotten."""
        for gpu in snapshot.gpus:
            power = gpu.power_w
            if power is not None and power >= 0 and gpu.error is None:
                known = self._lowest_w.get(gpu.key)
                self._lowest_w[gpu.key] = power if known is None else min(known, power)
        gpus = {gpu.index: gpu for gpu in snapshot.gpus}
        spins: dict[int, JobSpin] = {}
        seen: set[tuple[int, int | None]] = set()
        index = sample_index(snapshot)
        for root, nodes in zip(index.forest, index.jobs, strict=True):
            if all(node.graphics_only for node in nodes if node.proc.gpu_memory_mib):
                continue  # a display server's, not a GPU job
            held = tuple((i, mib) for i, mib in root.subtree_gpu_mib.items() if i in gpus)
            if not held:
                continue
            key = (root.proc.pid, root.proc.start_ticks)
            seen.add(key)
            verdicts = [(index, *gpu_spins(gpus[index], self.lowest_w(gpus[index]))) for index, _ in held]
            spinning: bool | None = True
            unknown = ""
            if any(verdict is False for _, verdict, _ in verdicts):
                spinning = False
            elif any(verdict is None for _, verdict, _ in verdicts):
                whys = [(index, why) for index, verdict, why in verdicts if verdict is None]
                spinning, unknown = None, unknown_text(whys)
            since = self._mark(self._spinning_since, key, spinning is True, now)
            members = [node.proc for node in nodes]
            quiet = self._mark(self._quiet_since, key, _quiet(members), now)
            spins[root.proc.pid] = JobSpin(
                root_pid=root.proc.pid,
                root_name=root.proc.name,
                memory_mib=held,
                spinning=spinning,
                after_s=self.spin_after_s,
                since=since,
                for_s=None if since is None else max(0.0, now - since),
                unknown=unknown,
                cpu_quiet_for_s=None if quiet is None else max(0.0, now - quiet),
                members=frozenset(proc.pid for proc in members),
                ports=frozenset(port for proc in members for port in proc.listen_ports),
            )
        for marks in (self._spinning_since, self._quiet_since):
            for gone in [key for key in marks if key not in seen]:
                del marks[gone]
        return spins

    @staticmethod
    def _mark(
        marks: dict[tuple[int, int | None], float], key: tuple[int, int | None], on: bool, now: float
    ) -> float | None:
        """Since when the condition has held for ``key`` (``now`` when it starts), None while it does not."""
        if not on:
            marks.pop(key, None)
            return None
        return marks.setdefault(key, now)
