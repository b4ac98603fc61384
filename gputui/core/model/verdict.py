"""What the analysis says of a host: its findings and its clean-slate verdict, per GPU and as a whole, with
the verdict's four levels and their exit codes (``gputui.core.verdict.levels`` says each)."""

from __future__ import annotations

from gputui.core.model.profiler import ProfilerMark
from gputui.core.model.record import Record, field
from gputui.core.model.waits import ThreadWait, thread_waits
from gputui.core.model.wire import opt_float, opt_int, opt_safe, plain, safe, safe_list
from gputui.core.text import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


CLEAN = "CLEAN"
NOT_CLEAN = "NOT CLEAN"
NOT_READY = "NOT READY"
CANNOT_TELL = "CANNOT TELL"
LEVELS = (CLEAN, NOT_CLEAN, NOT_READY, CANNOT_TELL)
"""Least severe first: a headline names the most severe level that applies."""
EXIT_CODES = {CLEAN: 0, NOT_CLEAN: 1, NOT_READY: 1, CANNOT_TELL: 2}


def level_of(clean: bool, known: bool, not_ready: bool) -> str:
    """The level of a verdict from its three facts (the most severe that applies)."""
    if not known:
        return CANNOT_TELL
    if not_ready:
        return NOT_READY
    return CLEAN if clean else NOT_CLEAN


class FindingFacts(Record):
    """The fields a finding's sentence is built from: what ``gputui exporter`` publishes of it, and what the
    fleet words again with the same function the monitor uses (``gputui.core.verdict.wording``). A field a
    kind does not use is None (or empty). Names are made safe on the way in.

    Attributes:
        pid: The process the finding is about (for an invisible pid: the driver's number, never used here).
        name: Its name; ``ppid``, ``parent_name``: its parent's.
        memory_mib: (GPU index, MiB) the process holds, by GPU.
        state_since: Since when it is in its state (epoch seconds, the host's clock); ``age_s``: how long at
            the sample the sentence was built for; None: not known.
        threads: A defunct leader's live threads by state letter; ``threads_live``: how many live (None: not
            a defunct leader); ``threads_omitted``: threads not described.
        gpu: The GPU a GPU-level finding is about; ``used_mib``, ``baseline_mib``: its figures;
            ``listed_mib``: what its listed processes hold (None: none listed); ``excess_mib``: the rest.
        suspects: (pid, name, device node) of each process that may hold a ghost's memory (it has the node
            open); ``holders_known``: the device holders could be read (no suspect then means none).
        root_pid, root_name: A killed job's root (a survivor's job); ``why``: what ties the survivor to it
            (``cgroup``, ``session``, ``parent``, ``member``).
        owner: Whose the process is (``Owner.label``: a container, a pod), where an action stops it.
        waits: Its stuck threads and where each waits in the kernel (``gputui.core.verdict.stuck``).
        profiler: A profiled job's profiler as found on ``pid`` (``ProfilerMark``: the tool, how it was
            found, its options that matter); ``count``: how many processes a finding counts (the members
            of GPU jobs whose environment could not be read).
        window_s: How long a pattern had to last before it was said (a spinning collective's
            ``spin_after_s``), in seconds; None for a kind that has none.
    """

    pid: int | None = None
    name: str | None = None
    ppid: int | None = None
    parent_name: str | None = None
    memory_mib: tuple[tuple[int, int], ...] = ()
    state_since: float | None = None
    age_s: float | None = None
    threads: tuple[tuple[str, int], ...] = ()
    threads_live: int | None = None
    threads_omitted: int = 0
    gpu: int | None = None
    used_mib: int | None = None
    baseline_mib: int | None = None
    listed_mib: int | None = None
    excess_mib: int | None = None
    suspects: tuple[tuple[int, str, str], ...] = ()
    holders_known: bool = False
    root_pid: int | None = None
    root_name: str | None = None
    why: str | None = None
    owner: str | None = None
    waits: tuple[ThreadWait, ...] = ()
    profiler: ProfilerMark | None = None
    count: int | None = None
    window_s: float | None = None

    @property
    def held_mib(self) -> int:
        return sum(mib for _, mib in self.memory_mib)

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(index for index, _ in self.memory_mib)

    @classmethod
    def from_dict(cls, data: Any) -> FindingFacts | None:
        if not isinstance(data, dict):
            return None

        def pairs(value: Any, first: type, second: type) -> tuple[tuple[Any, Any], ...]:
            out = []
            for item in value if isinstance(value, list) else ():
                if isinstance(item, list) and len(item) == 2:
                    a = opt_int(item[0]) if first is int else opt_safe(item[0])
                    b = opt_int(item[1])
                    if a is not None and b is not None:
                        out.append((a, b))
            return tuple(out)

        return cls(
            pid=opt_int(data.get("pid")),
            name=opt_safe(data.get("name")),
            ppid=opt_int(data.get("ppid")),
            parent_name=opt_safe(data.get("parent_name")),
            memory_mib=pairs(data.get("memory_mib"), int, int),
            state_since=opt_float(data.get("state_since")),
            age_s=opt_float(data.get("age_s")),
            threads=pairs(data.get("threads"), str, int),
            threads_live=opt_int(data.get("threads_live")),
            threads_omitted=opt_int(data.get("threads_omitted")) or 0,
            gpu=opt_int(data.get("gpu")),
            used_mib=opt_int(data.get("used_mib")),
            baseline_mib=opt_int(data.get("baseline_mib")),
            listed_mib=opt_int(data.get("listed_mib")),
            excess_mib=opt_int(data.get("excess_mib")),
            suspects=_suspects(data.get("suspects")),
            holders_known=data.get("holders_known") is True,
            root_pid=opt_int(data.get("root_pid")),
            root_name=opt_safe(data.get("root_name")),
            why=opt_safe(data.get("why")),
            owner=opt_safe(data.get("owner")),
            waits=thread_waits(data.get("waits")),
            profiler=ProfilerMark.from_dict(data.get("profiler")),
            count=opt_int(data.get("count")),
            window_s=opt_float(data.get("window_s")),
        )


def _suspects(value: Any) -> tuple[tuple[int, str, str], ...]:
    out = []
    for item in value if isinstance(value, list) else ():
        if isinstance(item, list) and len(item) == 3:
            pid, name, device = opt_int(item[0]), opt_safe(item[1]), opt_safe(item[2])
            if pid is not None and name is not None and device is not None:
                out.append((pid, name, device))
    return tuple(out)


class Finding(Record):
    """Something stuck, dead or unaccounted for.

    Attributes:
        kind: One of ``gputui.core.verdict.FINDING_KINDS``: zombie, defunct_leader, orphan, uninterruptible,
            ghost_memory, invisible_pid, survivor (a process that escaped a killed job and still holds a GPU).
        target: The host target the finding belongs to.
        detail: One human line.
        action: The suggested action, one human line.
        action_pid: The pid the suggested action applies to (a zombie's parent), if any.
        since: Epoch seconds (the host's clock) at which the state the finding is about began, as far as the
            collector saw it; None: not known. The sentence carries no age: every view renders it from this
            (``display.age_since``), so a ticking age is one cell, not a new finding.
        facts: What the sentence was built from (``FindingFacts``); None for a kind not worded from facts.
    """

    kind: str
    target: str
    detail: str
    action: str = ""
    pid: int | None = None
    gpu_index: int | None = None
    action_pid: int | None = None
    since: float | None = None
    facts: FindingFacts | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            kind=safe(data["kind"]),
            target=safe(data.get("target")),
            detail=safe(data.get("detail")),
            action=safe(data.get("action")),
            pid=opt_int(data.get("pid")),
            gpu_index=opt_int(data.get("gpu_index")),
            action_pid=opt_int(data.get("action_pid")),
            since=opt_float(data.get("since")),
            facts=FindingFacts.from_dict(data.get("facts")),
        )


class GpuVerdict(Record):
    """One GPU's part of the clean-slate verdict.

    ``note``: how the GPU was judged where that is not by its memory (a unified-memory GPU that reports none
    is judged by its processes), said beside its line whether it is clean or not; None otherwise.
    """

    index: int
    used_mib: int | None
    baseline_mib: int
    clean: bool
    reasons: tuple[str, ...] = ()
    note: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuVerdict:
        return cls(
            index=int(data["index"]),
            used_mib=opt_int(data.get("used_mib")),
            baseline_mib=int(data.get("baseline_mib") or 0),
            clean=bool(data.get("clean")),
            reasons=safe_list(data.get("reasons")),
            note=opt_safe(data.get("note")),
        )


class VerdictFact(Record):
    """One of the clean slate's three facts (``gputui.core.verdict.facts``).

    Attributes:
        ok: Whether it holds.
        line: The fact in one line ("13 of 13 processes of the job seen at 03:57 are gone", "none left").
        reasons: The verdict's reasons that are about it (none when it holds).
        note: Something said beside it that is not a reason ("nothing recorded on HOST since boot …").
    """

    ok: bool
    line: str = ""
    reasons: tuple[str, ...] = ()
    note: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> VerdictFact | None:
        if not isinstance(data, dict):
            return None
        return cls(
            ok=data.get("ok") is True,
            line=safe(data.get("line")),
            reasons=safe_list(data.get("reasons")),
            note=opt_safe(data.get("note")),
        )


class VerdictFacts(Record):
    """The clean slate as three facts: every worker gone, no residue left, every GPU fit; and,
    where the probe ran, what it proved (``proof``: "8 of 8 took work (…)", also in the GPUs line)."""

    workers: VerdictFact
    residue: VerdictFact
    gpus: VerdictFact
    proof: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> VerdictFacts | None:
        if not isinstance(data, dict):
            return None
        workers, residue, gpus = (VerdictFact.from_dict(data.get(k)) for k in ("workers", "residue", "gpus"))
        if workers is None or residue is None or gpus is None:
            return None
        proof = data.get("proof")
        return cls(
            workers=workers,
            residue=residue,
            gpus=gpus,
            proof=visible(proof[:400]) if isinstance(proof, str) else None,
        )


class Verdict(Record):
    """Is every GPU back at its idle baseline?

    Attributes:
        clean: True only when every GPU is at or below its baseline (plus tolerance), no GPU process is listed
            and no zombie/D-state process remains from a GPU process tree.
        reasons: Human lines saying why not, most important first.
        baseline_mib: GPU key (UUID, else "index:N") -> the baseline used for it.
        gpus: Per-GPU detail.
        known: False when it could not be told (no driver, no data); then ``clean`` is False too.
        not_ready: The reasons (also in ``reasons``, first) that a GPU needs a reset, reboot or drain
            (``gputui.core.verdict.readiness``): the verdict is NOT READY; ``clean`` is False too.
        facts: The verdict as its three facts (``gputui.core.verdict.facts``); None where the engine did not
            judge a host sample (the fleet's memory-only verdict).
    """

    clean: bool
    reasons: tuple[str, ...] = ()
    baseline_mib: dict[str, int] = field(default_factory=dict)
    tolerance_mib: int = 0
    gpus: tuple[GpuVerdict, ...] = ()
    known: bool = True
    not_ready: tuple[str, ...] = ()
    facts: VerdictFacts | None = None

    @property
    def gpus_at_baseline(self) -> int:
        """GPUs whose memory is back at its baseline: a fact of memory, so a GPU whose only reasons are NOT
        READY ones (its fitness: a reset, a reboot, the fabric) counts when its memory is at its baseline
        (+ tolerance), or, reporting no memory (``note``), when nothing holds it. A GPU with any other reason
        (memory held, a process listed, an error) does not."""
        unfit = set(self.not_ready)

        def at_baseline(gpu: GpuVerdict) -> bool:
            if gpu.clean:
                return True
            if any(reason not in unfit for reason in gpu.reasons):
                return False
            if gpu.used_mib is None:
                return gpu.note is not None
            return 0 <= gpu.used_mib <= gpu.baseline_mib + self.tolerance_mib

        return sum(1 for g in self.gpus if at_baseline(g))

    @property
    def level(self) -> str:
        """CLEAN, NOT CLEAN, NOT READY or CANNOT TELL (``gputui.core.verdict.levels``)."""
        return level_of(self.clean, self.known, bool(self.not_ready))

    def to_dict(self) -> dict[str, Any]:
        return dict(plain(self), level=self.level)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        return cls(
            clean=bool(data.get("clean")),
            reasons=safe_list(data.get("reasons")),
            baseline_mib={visible(k): int(v) for k, v in (data.get("baseline_mib") or {}).items()},
            tolerance_mib=opt_int(data.get("tolerance_mib")) or 0,
            gpus=tuple(GpuVerdict.from_dict(g) for g in data.get("gpus") or ()),
            known=bool(data.get("known", True)),
            not_ready=safe_list(data.get("not_ready")),
            facts=VerdictFacts.from_dict(data.get("facts")),
        )
