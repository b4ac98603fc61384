"""``gputui reset HOST GPU...|--all [--yes]``: can ``nvidia-smi -r`` work now, and with ``--yes`` do it.

The first word is the host (``local`` for this machine), then GPUs by index or UUID, or ``--all``. The
collector on that host reads who holds the device nodes and the GPUs' modes and builds the plan
(``gputui.agent.reset.plan``); this command prints it (``gputui.core.actions.reset_plan`` words it) and exits
0 when the reset can go ahead, 1 when something blocks it (or only a reboot can help), 2 when it cannot tell.

With ``--yes`` every step goes to the audit log before anything runs (a log that cannot be written refuses
the reset; ``--no-audit`` is the way out), the collector plans again and runs only if the plan is still the
one shown, steps aside (closes its own NVML handles), runs the steps with bounded time, restores
persistence mode (only where it was on) and the units it stopped in every outcome, comes back and verifies:
0 verified clean after, 1 a step failed or not clean after (or the plan blocks it), 2 cannot tell.
Nothing is ever signalled: a process that holds a GPU is for ``gputui kill``. ``--read-only`` refuses.
"""

from __future__ import annotations

import argparse
import re
import sys

from gputui.agent.protocol import (
    RESET_GO,
    RESET_PLAN_COMMAND,
    RESET_RUN_COMMAND,
    RESET_UNKNOWN,
    STAGE_INTENT,
    STAGE_REQUEST,
)
from gputui.commands.inputs.targets import open_link, options_from_args
from gputui.commands.kill import _Interrupts
from gputui.commands.output.streams import link_error_line, safe_streams
from gputui.core.actions import (
    EXIT_BLOCKED,
    EXIT_CANNOT_TELL,
    STAGE_RESET,
    AuditLog,
    PlanShapeError,
    ResetPlan,
    audit_lines,
    blocker_line,
    format_plan,
    outcome_line,
    run_exit,
    unknown_command_said,
)
from gputui.core.link import LinkError
from gputui.core.store import StoreError
from gputui.core.text import json_visible, visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

PLAN_TIMEOUT_S = 60.0
RUN_SLACK_S = 60.0
_GPU_WORD = re.compile(r"[0-9]{1,4}|(?:GPU|MIG)-[0-9A-Za-z-]{1,80}")


class _UsageError(Exception):
    pass


def parse_words(words: list[str], all_gpus: bool) -> tuple[str, list[str] | None]:
    """(host, GPU words or None for every GPU). Raises _UsageError with one line."""
    if not words:
        raise _UsageError("name the host (local for this machine), then GPUs by index or UUID, or --all")
    target, gpus = words[0], words[1:]
    if target.startswith("-"):
        raise _UsageError(f"not a host: {visible(target, 60)!r}")
    for word in gpus:
        if not _GPU_WORD.fullmatch(word):
            raise _UsageError(f"not a GPU index or UUID: {visible(word, 60)!r}")
    if all_gpus and gpus:
        raise _UsageError("name GPUs or use --all, not both")
    if not all_gpus and not gpus and _GPU_WORD.fullmatch(target) and target.isdigit():
        # "gputui reset 3": the one word is read as the host, as always; say so, not "name a GPU".
        raise _UsageError(
            f"gputui reset HOST GPU...: {visible(target, 60)!r} is taken as the host; name a GPU after it "
            f"(gputui reset local {visible(target, 60)} for this machine)"
        )
    if not all_gpus and not gpus:
        raise _UsageError("name at least one GPU (index or UUID) after the host, or use --all")
    return target, None if all_gpus else gpus


def _say(target: str, text: str, err: TextIO) -> None:
    print(f"gputui: {visible(target, 100)}: {text}", file=err)


def run_reset(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``gputui reset``; returns the exit status (see the module docstring)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    safe_streams(out, err)
    try:
        target, gpus = parse_words(list(args.words), args.all)
    except _UsageError as exc:
        print(f"gputui: reset: {exc}", file=err)
        return EXIT_CANNOT_TELL
    if args.read_only and args.yes:
        _say(target, "read-only mode: reset refused, nothing is run", err)
        return EXIT_CANNOT_TELL
    listing = err if args.json else out
    link = open_link(target, options_from_args(args, one_shot=True), demo=bool(getattr(args, "demo", False)))
    try:
        try:
            link.open()
            answer = link.request({"cmd": RESET_PLAN_COMMAND, "gpus": gpus}, PLAN_TIMEOUT_S)
            plan = ResetPlan.from_dict(target, answer.get("plan"), gpus)
        except (LinkError, PlanShapeError) as exc:
            print(link_error_line(target, unknown_command_said(exc)), file=err)
            return EXIT_CANNOT_TELL
        if not args.yes:
            if args.json:
                print(
                    json_visible({"target": target, "plan": plan.raw, "exit": plan.exit_status}, indent=1),
                    file=out,
                )
            else:
                for line in format_plan(plan):
                    print(line, file=out)
            return plan.exit_status
        for line in format_plan(plan):
            print(line, file=listing)
        if plan.verdict != RESET_GO:
            _say(target, "nothing was run", err)
            return EXIT_CANNOT_TELL if plan.verdict == RESET_UNKNOWN else EXIT_BLOCKED
        return _execute(args, target, gpus, link, plan, out, err)
    finally:
        link.close()


def _execute(
    args: argparse.Namespace,
    target: str,
    gpus: list[str] | None,
    link: Any,
    plan: ResetPlan,
    out: TextIO,
    err: TextIO,
) -> int:
    audit = None if args.no_audit or getattr(args, "demo", False) else AuditLog()
    boot_id = plan.raw.get("boot_id")
    if audit is not None:
        try:
            audit.record(target, boot_id, audit_lines(plan, STAGE_INTENT, None, "reset plan confirmed"))
        except StoreError as exc:
            _say(
                target,
                f"reset refused, nothing was run: audit log: {visible(str(exc), 300)} "
                "(--no-audit to reset without it)",
                err,
            )
            return EXIT_CANNOT_TELL
    print(
        f"{visible(target, 100)}: gputui's collector steps aside (closes its NVML handles) for the reset",
        file=err,
    )
    deadline_s = sum(float(s.get("timeout_s") or 0.0) for s in plan.steps) + RUN_SLACK_S
    interrupts = _Interrupts()
    with interrupts.counting():  # a reset half done must finish: persistence mode is restored at its end
        try:
            result = link.request(
                {"cmd": RESET_RUN_COMMAND, "gpus": gpus, "steps": plan.step_argvs}, deadline_s
            )
        except LinkError as exc:
            print(link_error_line(target, exc), file=err)
            if audit is not None:
                _audit_quietly(audit, target, boot_id, audit_lines(plan, STAGE_REQUEST, None, str(exc)), err)
            _say(target, "the collector finishes the reset on its own; its outcome is not known here", err)
            return EXIT_CANNOT_TELL
    steps = result.get("steps") if isinstance(result.get("steps"), list) else None
    if audit is not None and steps is not None:
        _audit_quietly(audit, target, boot_id, audit_lines(plan, STAGE_RESET, steps, ""), err)
    status, line = run_exit(result)
    if args.json:
        print(
            json_visible({"target": target, "result": result, "exit": status, "summary": line}, indent=1),
            file=out,
        )
        return status
    if result.get("stepped_aside"):
        print(f"{visible(target, 100)}: collector {visible(result['stepped_aside'], 200)}", file=out)
        if result.get("released") is False:
            print(
                f"{visible(target, 100)}: warning: its device files were still open when the steps ran",
                file=out,
            )
    for outcome in steps or ():
        if isinstance(outcome, dict):
            print(outcome_line(outcome), file=out)
    after = result.get("after")
    if isinstance(after, dict):
        try:
            left = ResetPlan.from_dict(target, after, gpus)
        except PlanShapeError:
            left = None
        for blocker in left.blockers if left is not None else ():
            if blocker.get("effect") == "step":  # this collector, a unit started again, persistence on
                continue
            print(f"after: {blocker_line(target, blocker)}", file=out)
    print(f"{visible(target, 100)}: {line}", file=out)
    return status


def _audit_quietly(audit: AuditLog, target: str, boot_id: Any, lines: list[dict], err: TextIO) -> None:
    try:
        audit.record(target, boot_id, lines)
    except StoreError as exc:
        print(f"gputui: warning: audit log not written after the reset: {visible(str(exc), 300)}", file=err)
