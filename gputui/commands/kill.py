"""``gputui kill [TARGET] PID...``: signal GPU processes or their trees, identity-checked and audited.

The first word is a host target unless it is all digits. A full snapshot is taken, the plan lists every
process that will be signalled (pid, user, GPU MiB, command), and on a terminal the user confirms; without a
terminal ``--yes`` is required. The agent re-checks each process's identity right before signalling it.
Exit status: 0 every process handled, 1 some refused/denied/changed/still alive (or the user declined),
2 nothing could be done (bad input, read-only, unreachable host, no confirmation possible).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import asdict
from typing import Any, TextIO

from gputui.actions import (
    KillOutcome,
    KillPlan,
    PlanError,
    ReadOnlyError,
    all_handled,
    append_audit,
    kill_command,
    parse_outcomes,
    plan_kill,
)
from gputui.commands.check import link_error_line, safe_streams
from gputui.state import StateError
from gputui.targets import default_targets, open_link, options_from_args
from gputui.textsafe import json_visible, visible, visible_cmdline
from gputui.transports.base import LinkError, full_sample

EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_ERROR = 2
KILL_REPLY_MARGIN_S = 30.0
"""Seconds allowed for the agent's kill reply beyond the escalation delay (checks, KILL confirmation)."""
PID_MAX = 1 << 22
"""The kernel's largest possible pid (``/proc/sys/kernel/pid_max`` cannot exceed it)."""
DASH = "–"
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


def format_plan(plan: KillPlan) -> list[str]:
    """The confirmation listing: what will be signalled, children first, with the plan's notes."""
    lines = [f"{visible(plan.target, 60)}: SIG{plan.signal}"
             + (" (tree)" if plan.tree else "")
             + (f", KILL after {plan.escalate_s:g} s" if plan.escalate_s else "")]
    lines.append(f"{'PID':>8}  {'USER':<12} {'GPU MiB':>8}  COMMAND")
    for target in plan.targets:
        mib = DASH if target.gpu_mib is None else str(target.gpu_mib)
        command = visible_cmdline(target.cmdline, 80) or visible(target.name or DASH, 40)
        under = f"  (in tree of {target.descendant_of})" if target.descendant_of is not None else ""
        state = "  [D: may not die]" if target.state == "D" else ""
        user = visible(target.user or DASH, 12)
        lines.append(f"{target.pid:>8}  {user:<12} {mib:>8}  {command}{under}{state}")
    for note in plan.notes:
        lines.append(f"  note: {visible(note, 300)}")
    return lines


def format_outcome(outcome: KillOutcome) -> str:
    signal = outcome.signal or "-"
    name = visible(outcome.name or DASH, 24)
    detail = f"  {visible(outcome.detail, 200)}" if outcome.detail else ""
    return f"{outcome.pid:>8}  {outcome.stage:<8} {signal:<4}  {outcome.result:<15} {name}{detail}"


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
    data = asdict(plan)
    data["targets"] = [dict(asdict(t), cmdline=list(t.cmdline)) for t in plan.targets]
    data["notes"] = list(plan.notes)
    return data


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
    if args.read_only:
        print(f"gputui: {visible(target, 100)}: read-only mode: kill refused, nothing is signalled", file=err)
        return EXIT_ERROR
    listing = err if args.json else out
    link = open_link(target, options_from_args(args), demo=demo)
    plan: KillPlan | None = None
    try:
        link.open()
        snapshot = full_sample(link, target)
        if args.all_gpu and not snapshot.gpus:
            # Not "nothing to signal": without the driver's process list there is no telling what holds a GPU.
            cause = visible(snapshot.error or "no GPUs found", 300)
            print(f"gputui: {visible(target, 100)}: --all-gpu: NVML is unavailable, so there is no GPU "
                  f"process list to kill from ({cause})", file=err)
            return EXIT_ERROR
        plan = plan_kill(
            snapshot, pids, signal=args.signal, tree=args.tree, all_gpu=args.all_gpu, escalate_s=args.escalate
        )
        for line in format_plan(plan):
            print(line, file=listing)
        if not args.yes:
            if not _is_terminal(stdin):
                print(f"gputui: {visible(target, 100)}: not a terminal: nothing signalled (pass --yes to "
                      "signal without asking)", file=err)
                return EXIT_ERROR
            if not _confirm(plan, stdin, listing):
                print("nothing signalled", file=listing)
                return EXIT_PARTIAL
        timeout_s = KILL_REPLY_MARGIN_S + (plan.escalate_s or 0.0)
        result = link.request(kill_command(plan), timeout_s)
        outcomes = parse_outcomes(result)
    except ReadOnlyError as exc:
        print(f"gputui: {visible(str(exc), 300)}", file=err)
        return EXIT_ERROR
    except PlanError as exc:
        print(f"gputui: {visible(target, 100)}: {visible(str(exc), 300)}", file=err)
        return EXIT_ERROR
    except (LinkError, ValueError) as exc:
        print(link_error_line(target, exc), file=err)
        if plan is not None:
            _audit(plan, [], err)  # the request may have reached the agent: record that we do not know
        return EXIT_ERROR
    finally:
        link.close()
    audit_path = _audit(plan, outcomes, err)
    status = EXIT_OK if all_handled(outcomes) else EXIT_PARTIAL
    if args.json:
        document = {
            "target": target,
            "plan": _plan_dict(plan),
            "outcomes": [dict(asdict(o), cmdline=list(o.cmdline)) for o in outcomes],
            "all_handled": status == EXIT_OK,
            "audit_log": None if audit_path is None else str(audit_path),
        }
        print(json_visible(document, indent=1), file=out)
    else:
        for outcome in outcomes:
            print(format_outcome(outcome), file=out)
        if status != EXIT_OK:
            print("not every process was handled (see above)", file=out)
    return status


def _audit(plan: KillPlan, outcomes: list[KillOutcome], err: TextIO) -> Any:
    try:
        return append_audit(plan, outcomes)
    except StateError as exc:
        print(f"gputui: warning: audit log not written: {visible(str(exc), 300)}", file=err)
        return None
