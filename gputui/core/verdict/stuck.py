"""Stuck in the driver: where a stuck thread waits in the kernel, how a finding says it, and when a reboot is
the likely end.

The collector names where each stuck thread of a process waits (``Proc.waits``: a thread in D, a defunct
leader's live thread, a thread that runs in the kernel and has not returned to its program): the kernel
function and, where it could read the thread's kernel stack (root), its module. A finding says it after its
own sentence: "thread 4243 (D) in uvm_spin_loop (nvidia_uvm)"; a place that could not be read is said as
unknown, never guessed (a wait channel names no module: only a stack puts a thread in an NVIDIA module).

* a process in D (``uninterruptible``) and a defunct leader (``defunct_leader``) keep their finding, worded
  with their stuck threads (``uninterruptible_words``, ``defunct_leader_words``: the wording table's);
* any other process with threads stuck that long is a ``stuck_thread`` finding: threads in R whose process's
  user time has stood still for ``STUCK_WINDOW_S`` (a worker spinning in ``uvm_spin_loop`` after
  ``kill -9``), threads in D for ``D_STATE_THRESHOLD_S``;
* a thread in a function of an NVIDIA module for ``STUCK_WINDOW_S``: the finding says a reboot is the likely
  end (such a thread rarely comes back, and a GPU reset cannot run while it holds the device); once it was
  killed (SIGKILL pending, or already exiting) and is still there, the GPU whose memory its process holds is
  NOT READY with the reboot action (``reboot_reason``, the readiness rule ``stuck_in_driver`` asks it first).

A watching collector tells R threads apart over samples; a one-shot (``check``, ``snapshot``) sees D once and
knows no age, so it never says a window has passed. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gputui.core.jobs import D_STATE_THRESHOLD_S, proc_label, sample_index, shown
from gputui.core.model import (
    STATE_UNINTERRUPTIBLE,
    STATE_ZOMBIE,
    Finding,
    FindingFacts,
    Gpu,
    HostSnapshot,
    Proc,
    ThreadWait,
    replace,
)
from gputui.core.text import age_text
from gputui.core.verdict import findings
from gputui.core.verdict.fitness import ACTION_HINTS, ACTION_REBOOT, ACTION_WORDS

KIND = "stuck_thread"
"""The finding of a process, neither in D nor a defunct leader, whose threads are stuck in the kernel."""
STUCK_WINDOW_S = 300.0
"""A thread in R whose process's user time stood still this long is stuck (not busy in a long call); a
thread in a function of an NVIDIA module this long rarely comes back: a reboot is the likely end."""
WAIT_KINDS = ("uninterruptible", "defunct_leader")
"""Finding kinds that say their process's stuck threads after their own sentence."""
GROUPS_SHOWN = 3
"""A sentence names at most this many places (threads in the same state and place are one)."""

Words = Callable[[str, FindingFacts], Finding]


def place_text(wait: ThreadWait) -> str:
    """ "in uvm_spin_loop (nvidia_uvm)", "in kernel_clone", or where unknown and why."""
    if wait.symbol is not None:
        return f"in {wait.symbol}" + (f" ({wait.module})" if wait.module else "")
    if wait.stack:
        return "where unknown (its kernel stack names no function)"
    if wait.state == "R":
        return "where unknown (no wait channel while it runs; its kernel stack needs root)"
    return "where unknown (wait channel unreadable)"


def threads_text(waits: Sequence[ThreadWait]) -> str:
    """ "thread 4243 (D) in uvm_spin_loop (nvidia_uvm)", "threads 4243, 4244 (D) in os_acquire_mutex
    (nvidia)": the threads of one state and place said together."""
    groups: dict[tuple[str, str], list[int]] = {}
    for wait in waits:
        groups.setdefault((wait.state, place_text(wait)), []).append(wait.tid)
    parts = []
    for (state, place), tids in list(groups.items())[:GROUPS_SHOWN]:
        noun = "thread" if len(tids) == 1 else "threads"
        parts.append(f"{noun} {', '.join(map(str, tids))} ({state}) {place}")
    if len(groups) > GROUPS_SHOWN:
        parts.append(f"{len(groups) - GROUPS_SHOWN} more places")
    return "; ".join(parts)


def _now_of(facts: FindingFacts) -> float | None:
    """The time the facts were taken at (their state's start plus its age), when both are known."""
    if facts.state_since is None or facts.age_s is None:
        return None
    return facts.state_since + facts.age_s


def in_driver_too_long(waits: Sequence[ThreadWait], now_s: float | None) -> list[ThreadWait]:
    """The threads in a function of an NVIDIA module for ``STUCK_WINDOW_S`` at ``now_s``."""
    if now_s is None:
        return []
    return [w for w in waits if w.in_nvidia and w.since is not None and now_s - w.since >= STUCK_WINDOW_S]


def _reboot_clause() -> str:
    return (
        f"in an NVIDIA kernel function for over {STUCK_WINDOW_S / 60:.0f} minutes: a reboot is the likely end"
    )


def _reboot_action(pid: int | None, stuck: Sequence[ThreadWait]) -> str:
    """What to do about a process whose threads are stuck in the driver past the window."""
    if any(w.killed for w in stuck):
        return f"it was killed and is still there: {ACTION_HINTS[ACTION_REBOOT]}"
    return f"kill {pid}; if it is still there, {ACTION_HINTS[ACTION_REBOOT]}"


def said_with_waits(detail: str, action: str, facts: FindingFacts) -> tuple[str, str]:
    """A finding's sentence and action, then its process's stuck threads (``FindingFacts.waits``) and, for
    one stuck in the driver past the window, that a reboot is the likely end (and that action)."""
    if not facts.waits:
        return detail, action
    detail = f"{detail}; {threads_text(facts.waits)}"
    stuck = in_driver_too_long(facts.waits, _now_of(facts))
    if not stuck:
        return detail, action
    return f"{detail}; {_reboot_clause()}", _reboot_action(facts.pid, stuck)


def with_waits(words: Words) -> Words:
    """A finding kind's words (``wording.FINDING_WORDS``), said with its process's stuck threads."""

    def worded(target: str, facts: FindingFacts) -> Finding:
        finding = words(target, facts)
        detail, action = said_with_waits(finding.detail, finding.action, facts)
        return replace(finding, detail=detail, action=action) if facts.waits else finding

    worded.__doc__ = words.__doc__
    return worded


uninterruptible_words = with_waits(findings.uninterruptible_words)
defunct_leader_words = with_waits(findings.defunct_leader_words)
WAIT_WORDS: dict[str, Words] = {
    "uninterruptible": uninterruptible_words,
    "defunct_leader": defunct_leader_words,
}


def stuck_thread_words(target: str, f: FindingFacts) -> Finding:
    """A process whose threads are stuck in the kernel (neither in D itself nor a defunct leader)."""
    running = any(w.state == "R" for w in f.waits)
    detail = f"pid {f.pid} ({shown(f.name)}) " + (
        "runs in the kernel without returning to its program"
        if running
        else "has threads stuck in the kernel"
    )
    if f.waits:
        detail += f": {threads_text(f.waits)}"
    if f.held_mib:
        detail += f", holding {f.held_mib} MiB on {', '.join(f'GPU{i}' for i in f.gpus)}"
    stuck = in_driver_too_long(f.waits, _now_of(f))
    if stuck:
        detail += f"; {_reboot_clause()}"
        action = _reboot_action(f.pid, stuck)
    else:
        action = f"kill {f.pid} and check again: a thread that never leaves the kernel may not die on SIGKILL"
    return Finding(
        kind=KIND,
        target=target,
        pid=f.pid,
        gpu_index=min(f.gpus) if f.gpus else None,
        detail=detail,
        action=action,
        action_pid=f.pid,
        since=f.state_since,
        facts=f,
    )


def _stuck_since(proc: Proc, now_s: float) -> float | None:
    """Since when ``proc`` has had a thread stuck long enough to say (R: ``STUCK_WINDOW_S``, D:
    ``D_STATE_THRESHOLD_S``), the longest first; None when none has."""
    starts = [
        w.since
        for w in proc.waits
        if w.since is not None
        and now_s - w.since >= (STUCK_WINDOW_S if w.state == "R" else D_STATE_THRESHOLD_S)
    ]
    return min(starts) if starts else None


def name_waits(snapshot: HostSnapshot, found: list[Finding], now_s: float | None) -> list[Finding]:
    """The findings with their processes' stuck threads: a D-state or defunct-leader finding worded with
    them, and a ``stuck_thread`` finding for any other process with threads stuck long enough."""
    if not snapshot.processes:
        return found
    index = sample_index(snapshot)
    stuck = {proc.pid: proc for proc in index.stuck}
    if not stuck:
        return found
    out: list[Finding] = []
    named: set[int] = set()
    for finding in found:
        proc = stuck.get(finding.pid) if finding.pid is not None else None
        if proc is not None and finding.kind in WAIT_KINDS and finding.facts is not None:
            finding = WAIT_WORDS[finding.kind](finding.target, replace(finding.facts, waits=proc.waits))
            named.add(proc.pid)
        out.append(finding)
    if now_s is None:
        return out
    table = index.table
    for pid, proc in sorted(stuck.items()):
        if pid in named or proc.state in (STATE_UNINTERRUPTIBLE, STATE_ZOMBIE):
            continue
        since = _stuck_since(proc, now_s)
        if since is None:
            continue
        parent = table.get(proc.ppid) if proc.ppid is not None else None
        facts = replace(
            findings.process_facts(proc, parent, max(0.0, now_s - since)), state_since=since, waits=proc.waits
        )
        out.append(stuck_thread_words(snapshot.target, facts))
    return out


def remnant_sentence(
    target: str, proc: Proc, table: dict[int, Proc], now_s: float | None, one_shot: bool = False
) -> str:
    """``findings.remnant_sentence`` with the process's stuck threads, as its finding says them (one fact,
    one sentence)."""
    sentence = findings.remnant_sentence(target, proc, table, now_s, one_shot)
    if not proc.waits or (proc.state == STATE_ZOMBIE and not proc.is_defunct_leader):
        return sentence
    age = None if now_s is None or proc.state_since is None else max(0.0, now_s - proc.state_since)
    if proc.state == STATE_UNINTERRUPTIBLE and age is not None and one_shot and age < D_STATE_THRESHOLD_S:
        age = None  # as its finding: a D state seen once has no known age
    facts = replace(findings.process_facts(proc, None, age), waits=proc.waits)
    return said_with_waits(sentence, "", facts)[0]


def reboot_reason(snapshot: HostSnapshot, gpu: Gpu) -> str | None:
    """ "GPU3 needs a reboot of the host: pid 77637 (VLLM::EngineCore) was killed and its thread 77637 is
    still in uvm_spin_loop (nvidia_uvm) after 6 min": a process holding memory on this GPU whose thread was
    killed and has been in a function of an NVIDIA module for ``STUCK_WINDOW_S``; None otherwise. The
    processes holding memory on the GPU are looked up (``jobs.sample_index``), not every process of the
    sample."""
    now_s = snapshot.time
    if now_s is None or not snapshot.processes:
        return None
    for proc in sample_index(snapshot).held_on.get(gpu.index, ()):
        reason = killed_in_driver_reason(gpu.index, proc_label(proc), proc.waits, now_s)
        if reason is not None:
            return reason
    return None


def killed_in_driver_reason(index: int, label: str, waits: Sequence[ThreadWait], now_s: float) -> str | None:
    """``reboot_reason``'s sentence for GPU ``index`` and the process ``label`` ("77637 (VLLM::EngineCore)")
    that holds memory on it, from its stuck threads: None unless one of them was killed and has been in a
    function of an NVIDIA module for ``STUCK_WINDOW_S`` at ``now_s``. The fleet asks it of a finding's
    exported facts."""
    for wait in in_driver_too_long(waits, now_s):
        if wait.killed and wait.since is not None:
            age = age_text(now_s - wait.since)
            return (
                f"GPU{index} {ACTION_WORDS[ACTION_REBOOT]}: pid {label} was killed and "
                f"its thread {wait.tid} is still {place_text(wait)} after {age}"
            )
    return None
