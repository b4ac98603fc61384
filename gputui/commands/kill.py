"""``gputui kill [TARGET] PID...``: signal GPU processes or their trees, identity-checked and audited.

The first word is a host target unless it is all digits. A full snapshot is taken, the plan lists every
process that will be signalled (pid, user, GPU MiB, command), and on a terminal the user confirms; without a
terminal ``--yes`` is required. The intent goes to the audit log before anything is sent (a log that cannot
be written refuses the kill; ``--no-audit`` is the way out); the agent re-checks each process's identity
right before signalling it. TERM escalates to KILL after 5 s by default (``--escalate S``, ``--no-escalate``:
TERM only, and after 5 s a look whether it is still alive); the collector runs the escalation and finishes it
even if this command goes away. Ctrl-C while it runs says what is pending and keeps waiting for it; a second
Ctrl-C abandons it and says which processes were left.

Exit status: 0 every targeted process is gone; 1 some survived, were denied, changed, refused by the agent
or abandoned, or the user declined; 2 nothing could be done or it cannot tell (bad input, read-only, a plan
refused, an audit log that cannot be written, no confirmation possible, an unreachable host, no answer).
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gputui.agent.protocol import RESULTS_GONE, SIGNALLING_STAGES
from gputui.commands.inputs.targets import default_targets, open_link, options_from_args
from gputui.commands.leftovers import check_recorded, receipt_lines, scan_job
from gputui.commands.leftovers import record as record_leftovers
from gputui.commands.output.streams import link_error_line, safe_streams
from gputui.core.actions import (
    DEFAULT_ESCALATE_S,
    AuditLog,
    KillOutcome,
    KillPlan,
    KillRun,
    Pending,
    PlanError,
    ReadOnlyError,
    all_gone,
    final_outcomes,
    killed_jobs,
    plan_kill,
)
from gputui.core.link import HostLink, LinkError, full_sample
from gputui.core.model import Finding, HostSnapshot, parse_owner_option, plain
from gputui.core.store import StoreError, load_watched_ports, save_watched_ports, watched_ports
from gputui.core.text import DASH, command_display, fit, json_visible, visible
from gputui.core.verdict import find_survivors
from gputui.core.verdict.facts import receipt_times

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_ERROR = 2
POLL_S = 0.2
"""Longest wait for the operation before this command looks at Ctrl-C again."""
PID_MAX = 1 << 22
"""The kernel's largest possible pid (``/proc/sys/kernel/pid_max`` cannot exceed it)."""
_DIGITS = re.compile(r"[0-9]+")


class _UsageError(Exception):
    pass


def _number_like(word: str) -> bool:
    """Whether ``word`` reads as a number (``1e3``, ``0x10``, ``+5``, ``4.0``) rather than a host name.

    Such a word is never taken for a host: it is a process id written some other way than plain decimal
    digits, and refused. A host name may start with a digit (``10.0.0.7``, ``4gpu-node``) and still not
    read as a number.
    """
    text = word.lstrip("+-")
    if not text[:1].isdigit():
        return False
    for parse in (int, float, lambda value: int(value, 0)):
        try:
            parse(word)
        except ValueError:
            continue
        return True
    return False


def parse_words(words: list[str], demo: bool) -> tuple[str, list[int]]:
    """(target, pids) from ``[TARGET] PID...``. Raises _UsageError with one line for a bad pid word.

    Process ids are plain decimal numbers; the first word is a host target unless it is one, or reads as a
    number of another spelling (which is refused, not connected to).
    """
    words = list(words)
    if words and not _DIGITS.fullmatch(words[0]) and not _number_like(words[0]):
        target = words.pop(0)
    else:
        target = default_targets([], demo)[0]
    pids: list[int] = []
    for word in words:
        if not _DIGITS.fullmatch(word):
            raise _UsageError(f"not a process id: {visible(word, 40)!r} (process ids are decimal numbers)")
        if not 0 < int(word) <= PID_MAX:
            raise _UsageError(f"not a process id: {visible(word, 40)!r} (from 1 to {PID_MAX})")
        pids.append(int(word))
    return target, pids


def plan_line(plan: KillPlan) -> str:
    """``gpu-a: SIGTERM (tree), KILL after 5 s``: what the plan sends, and then what."""
    then = (
        f", KILL after {plan.escalate_s:g} s"
        if plan.escalate_s
        else f", then a look after {plan.wait_s:g} s"
        if plan.wait_s
        else ""
    )
    return f"{visible(plan.target, 60)}: SIG{plan.signal}" + (" (tree)" if plan.tree else "") + then


def format_plan(plan: KillPlan) -> list[str]:
    """The confirmation listing: what will be signalled, grouped by owner, children first, with the plan's
    notes."""
    lines = [plan_line(plan), f"{'PID':>8}  {'USER':<12} {'GPU MiB':>8}  COMMAND"]
    for owner in plan.owners:
        if owner is not None:
            lines.append(f"  owner {fit(owner.label, 80)}:")
        for target in plan.targets:
            if target.owner != owner:
                continue
            mib = DASH if target.gpu_mib is None else str(target.gpu_mib)
            command = command_display(target.cmdline, target.name, 80)
            under = f"  (in tree of {target.descendant_of})" if target.descendant_of is not None else ""
            state = "  [D: may not die]" if target.state == "D" else ""
            graphics = "  [graphics]" if target.graphics_only else ""
            user = fit(target.user or DASH, 12)
            lines.append(f"{target.pid:>8}  {user:<12} {mib:>8}  {command}{under}{state}{graphics}")
    for note in plan.notes:
        lines.append(f"  note: {fit(note, 300)}")
    return lines


def format_outcome(outcome: KillOutcome) -> str:
    signal_name = outcome.signal or "-"
    name = fit(outcome.name or DASH, 24)
    detail = f"  {fit(outcome.detail, 200)}" if outcome.detail else ""
    return f"{outcome.pid:>8}  {outcome.stage:<8} {signal_name:<4}  {outcome.result:<15} {name}{detail}"


def pending_line(pending: tuple[Pending, ...]) -> str:
    """``KILL in 3.2 s to 2 processes: 4242 (detokenizer), 4250 (worker)`` (or a look, without escalation)."""
    who = ", ".join(f"{p.pid} ({fit(p.name or '?', 24)})" for p in pending[:6])
    if len(pending) > 6:
        who += f" and {len(pending) - 6} more"
    due = max((p.due_in_s or 0.0 for p in pending), default=0.0)
    noun = "process" if len(pending) == 1 else "processes"
    what = "KILL" if any(p.signal == "KILL" for p in pending) else "a look whether they are gone"
    return f"{what} in {due:.1f} s to {len(pending)} {noun}: {who}"


def event_times(outcomes: list[KillOutcome]) -> tuple[float | None, float | None]:
    """(the first signal, the last process gone) on the collector's clock, from the outcomes' own times;
    the second None unless every process is gone and each says when."""
    sent = [o.time for o in outcomes if o.stage in SIGNALLING_STAGES and o.time is not None]
    if not sent:
        return None, None
    finals = list(final_outcomes(outcomes).values())
    times = [o.time for o in finals if o.time is not None]
    if not finals or len(times) != len(finals) or any(o.result not in RESULTS_GONE for o in finals):
        return min(sent), None
    return min(sent), max(times)


def receipt_line(outcomes: list[KillOutcome]) -> str:
    """``receipt: workers gone 1.3 s after the signal``: the kill's events as every receipt words them
    (``facts.receipt_times``); "" when the collector does not say when."""
    signal_at, gone_at = event_times(outcomes)
    said = receipt_times(signal_at, gone_at, None)
    return f"receipt: {said}" if said else ""


def _confirm(plan: KillPlan, stdin: TextIO, prompt_out: TextIO) -> bool:
    count = len(plan.targets)
    noun = "process" if count == 1 else "processes"
    prompt_out.write(f"Send SIG{plan.signal} to {count} {noun}? [y/N] ")
    prompt_out.flush()
    answer = stdin.readline()
    if not answer:
        prompt_out.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _plan_dict(plan: KillPlan) -> dict[str, Any]:
    data = plain(plan)
    data["targets"] = [
        dict(plain(t), cmdline=list(t.cmdline), owner=None if t.owner is None else t.owner.to_dict())
        for t in plan.targets
    ]
    data["notes"] = list(plan.notes)
    return data


class _Interrupts:
    """Counts Ctrl-C while an operation runs instead of raising: the escalation must not be cut short."""

    def __init__(self) -> None:
        self.count = 0

    @contextmanager
    def counting(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals are delivered to the main thread only: nothing to count here
            return

        def pressed(_signo: int, _frame: object) -> None:
            self.count += 1

        previous = signal.signal(signal.SIGINT, pressed)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def run_kill(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run ``gputui kill``; returns the exit status (see the module docstring)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    stdin = sys.stdin if stdin is None else stdin
    safe_streams(out, err)
    demo = bool(getattr(args, "demo", False))
    try:
        target, pids = parse_words(list(args.words), demo)
    except _UsageError as exc:
        print(f"gputui: kill: {exc}", file=err)
        return EXIT_ERROR
    if not pids and not args.all_gpu:
        print("gputui: kill: name at least one process id, or use --all-gpu", file=err)
        return EXIT_ERROR
    owner = None
    if getattr(args, "owner", None) is not None:
        if not args.all_gpu:
            print("gputui: kill: --owner goes with --all-gpu", file=err)
            return EXIT_ERROR
        try:
            owner = parse_owner_option(args.owner)
        except ValueError as exc:
            print(f"gputui: kill: {visible(str(exc), 200)}", file=err)
            return EXIT_ERROR
    if args.read_only:
        print(
            f"gputui: {visible(target, 100)}: read-only mode: kill refused, nothing is signalled",
            file=err,
        )
        return EXIT_ERROR
    listing = err if args.json else out
    delay_s = DEFAULT_ESCALATE_S if args.escalate is None else args.escalate
    escalates = args.signal != "KILL" and not args.no_escalate
    # The demo's kills are simulated: they never go into the real audit log.
    audit = None if args.no_audit or demo else AuditLog()
    link = open_link(target, options_from_args(args, one_shot=True), demo=demo)
    try:
        try:
            link.open()
            snapshot = full_sample(link, target)
            if args.all_gpu and not snapshot.gpus:
                # Not "nothing to signal": without the driver's process list there is no telling what holds
                # a GPU.
                cause = fit(snapshot.error or "no GPUs found", 300)
                name = visible(target, 100)
                print(
                    f"gputui: {name}: --all-gpu: NVML is unavailable, so there is no GPU "
                    f"process list to kill from ({cause})",
                    file=err,
                )
                return EXIT_ERROR
            plan = plan_kill(
                snapshot,
                pids,
                signal=args.signal,
                tree=args.tree,
                all_gpu=args.all_gpu,
                escalate_s=delay_s if escalates else None,
                wait_s=None if escalates else delay_s,
                include_graphics=args.include_graphics,
                owner=owner,
            )
        except ReadOnlyError as exc:
            print(f"gputui: {visible(str(exc), 300)}", file=err)
            return EXIT_ERROR
        except PlanError as exc:
            print(f"gputui: {visible(target, 100)}: {visible(str(exc), 300)}", file=err)
            return EXIT_ERROR
        except (LinkError, ValueError) as exc:
            print(link_error_line(target, exc), file=err)
            return EXIT_ERROR
        for line in format_plan(plan):
            print(line, file=listing)
        if not args.yes:
            if not _is_terminal(stdin):
                print(
                    f"gputui: {visible(target, 100)}: not a terminal: nothing signalled (pass --yes to "
                    "signal without asking)",
                    file=err,
                )
                return EXIT_ERROR
            if not _confirm(plan, stdin, listing):
                print("nothing signalled", file=listing)
                return EXIT_PARTIAL
        # Before the signals: once the job is gone, what it had open in /dev/shm cannot be read.
        plan_leftovers = None if demo else scan_job(link, [t.pid for t in plan.targets])
        return _execute(args, target, link, plan, snapshot, audit, out, err, plan_leftovers)
    finally:
        link.close()


def _execute(
    args: argparse.Namespace,
    target: str,
    link: HostLink,
    plan: KillPlan,
    snapshot: HostSnapshot,
    audit: AuditLog | None,
    out: TextIO,
    err: TextIO,
    plan_leftovers: dict[str, Any] | None = None,
) -> int:
    """Send a confirmed plan and follow it to its end (or its abandon); returns the exit status."""
    run = KillRun(link, plan, audit)
    interrupts = _Interrupts()
    abandoned = False
    text = not args.json
    with interrupts.counting():
        try:
            first = run.start()
        except StoreError as exc:
            print(
                f"gputui: {visible(target, 100)}: kill refused, nothing signalled: audit log: "
                f"{visible(str(exc), 300)} (--no-audit to kill without it)",
                file=err,
            )
            return EXIT_ERROR
        except LinkError as exc:
            print(link_error_line(target, exc), file=err)
            return EXIT_ERROR
        shown = _show(first.outcomes, out if text else None)
        if any(o.stage in SIGNALLING_STAGES for o in first.outcomes):
            _watch_ports(args, target, plan, snapshot, err)
            record_leftovers(target, plan.boot_id, plan_leftovers, err)
        told = 0
        try:
            while not run.done:
                if interrupts.count >= 2:
                    run.abandon()
                    abandoned = True
                    break
                if interrupts.count > told and run.pending:
                    told = interrupts.count
                    print(
                        f"gputui: {visible(target, 100)}: {pending_line(run.pending)}; waiting for it "
                        "(Ctrl-C again to abandon)",
                        file=err,
                    )
                shown += _show(run.wait(POLL_S).outcomes, out if text else None)
        except LinkError as exc:
            print(link_error_line(target, exc), file=err)
            name = visible(target, 100)
            print(
                f"gputui: {name}: the collector finishes the kill on its own; its outcome is not known here",
                file=err,
            )
            return EXIT_ERROR
    if abandoned:
        _show(run.outcomes[shown:], out if text else None)
        left = ", ".join(
            f"{o.pid} ({fit(o.name or '?', 24)}): {fit(o.detail or o.result, 120)}" for o in run.left
        )
        print(f"gputui: {visible(target, 100)}: abandoned; left: {left or 'nothing'}", file=err)
    for problem in run.audit_errors:
        print(
            f"gputui: warning: audit log not written after the signals: {visible(problem, 300)}",
            file=err,
        )
    survivors = _survivors(link, target, plan, run, snapshot)
    job_left = check_recorded(link, target, plan.boot_id, err) if run.done and plan_leftovers else None
    gone = all_gone(run.outcomes) and not abandoned
    if args.json:
        document = {
            "target": target,
            "plan": _plan_dict(plan),
            "outcomes": [dict(plain(o), cmdline=list(o.cmdline)) for o in run.outcomes],
            "all_gone": gone,
            "abandoned": abandoned,
            "elapsed_s": run.elapsed_s,
            "workers_gone_after_s": _gone_after_s(list(run.outcomes)),
            "survivors": [plain(f) for f in survivors],
            "leftovers": job_left,
            "audit_log": None if audit is None else str(audit.path),
        }
        print(json_visible(document, indent=1), file=out)
    else:
        for finding in survivors:
            print(f"survivor: {fit(finding.detail, 300)}", file=out)
        for line in receipt_lines(target, job_left):
            print(line, file=out)
        said = receipt_line(list(run.outcomes))
        if said:
            print(said, file=out)
        print("every process is gone" if gone else "not every process is gone (see above)", file=out)
    return EXIT_OK if gone else EXIT_PARTIAL


def _gone_after_s(outcomes: list[KillOutcome]) -> float | None:
    """Seconds from the first signal to the last process gone, by the outcomes' times (None: not known)."""
    signal_at, gone_at = event_times(outcomes)
    if signal_at is None or gone_at is None or gone_at < signal_at:
        return None
    return round(gone_at - signal_at, 3)


def _watch_ports(
    args: argparse.Namespace, target: str, plan: KillPlan, snapshot: HostSnapshot, err: TextIO
) -> None:
    """Hand the killed job's ports to the next ``gputui check`` of the host: it is not clean until they are
    free. A file that cannot be written costs that, not the kill (one warning line)."""
    if not plan.ports or getattr(args, "demo", False):
        return
    ports = watched_ports(plan.ports, snapshot.time)
    try:
        known = load_watched_ports(target, plan.boot_id)
        save_watched_ports(target, plan.boot_id, (*known, *ports))
    except StoreError as exc:
        print(
            f"gputui: warning: the next check cannot wait for ports {', '.join(map(str, plan.ports))}: "
            f"{visible(str(exc), 300)}",
            file=err,
        )


def _show(outcomes: tuple[KillOutcome, ...] | list[KillOutcome], out: TextIO | None) -> int:
    """Print outcomes as they come (text mode); returns how many."""
    if out is not None:
        for outcome in outcomes:
            print(format_outcome(outcome), file=out)
        out.flush()
    return len(outcomes)


def _survivors(
    link: HostLink, target: str, plan: KillPlan, run: KillRun, before: HostSnapshot
) -> list[Finding]:
    """What escaped the killed jobs and still holds a GPU (``verdict.find_survivors``) in a fresh sample."""
    if not run.done:
        return []
    try:
        after = full_sample(link, target)
    except LinkError:
        return []
    return find_survivors(after, killed_jobs(plan, run.outcomes, before))
