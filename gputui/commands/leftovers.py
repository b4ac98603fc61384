"""Leftovers of killed jobs in the commands: recorded by ``kill``, named by ``kill``'s receipt and ``check``,
listed and removed by ``gputui leftovers HOST [--remove]`` (``gputui.core.store.leftovers`` has the rule and
the wording; the collector reads and removes, ``gputui.agent.proc.leftovers``).

``gputui leftovers HOST`` lists what the kills recorded for the host that still exists, and the reports the
profilers of its jobs left unfinished (exit 0 nothing left, 1 something left, 2 cannot tell). ``--remove``
removes the unfinished reports' raw streams (listed first) and the segments, after a confirmation (``--yes``
without a terminal): each goes to the audit log first, and the collector checks again right before
unlinking that it is the same file and that no process has it open or mapped. MPS daemons are never stopped
by gputui; nothing a profiler left is deleted unless asked here.
"""

from __future__ import annotations

import argparse
import sys

from gputui.agent.protocol import (
    LEFTOVERS_CHECK_COMMAND,
    LEFTOVERS_REMOVE_COMMAND,
    RESULT_REQUESTED,
    STAGE_INTENT,
)
from gputui.commands.inputs.targets import default_targets, open_link, options_from_args
from gputui.commands.output.streams import link_error_line, safe_streams
from gputui.core.actions import AuditLog
from gputui.core.link import HostLink, LinkError, full_sample
from gputui.core.model import Remembered, plain
from gputui.core.store import StoreError, leftovers
from gputui.core.text import fit, json_visible, visible
from gputui.core.verdict import nothing_recorded

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

TIMEOUT_S = 30.0
EXIT_NONE_LEFT = 0
EXIT_LEFT = 1
EXIT_ERROR = 2


def scan_job(link: HostLink, pids: list[int]) -> dict[str, Any] | None:
    return leftovers.scan_job(link, pids)


def record(target: str, boot_id: str | None, found: dict[str, Any] | None, err: TextIO) -> None:
    warning = leftovers.record(target, boot_id, found)
    if warning is not None:
        print(f"gputui: warning: {warning}", file=err)


def check_recorded(
    link: HostLink, target: str, boot_id: str | None, err: TextIO, remembered: Remembered | None = None
) -> dict[str, Any] | None:
    """Which recorded leftovers of ``target`` still exist; forgets the ones gone. With ``remembered`` (the
    collector's record of its jobs), the segments of its jobs that are gone are checked too, so that they can
    be listed and removed the same way. None: nothing recorded, or the collector cannot say."""
    try:
        known = leftovers.load(target, boot_id)
    except StoreError as exc:
        print(f"gputui: warning: leftovers not checked: {visible(str(exc), 300)}", file=err)
        return None
    asked = {"segments": list(known["segments"]), "mps": list(known["mps"]), "reports": []}
    identities = {(seg.get("dev"), seg.get("inode")) for seg in asked["segments"]}
    daemons = {(d.get("pid"), d.get("start_ticks")) for d in asked["mps"]}
    for job in remembered.jobs if remembered is not None else ():
        for segment in job.segments:
            if (segment.dev, segment.inode) not in identities:
                identities.add((segment.dev, segment.inode))
                asked["segments"].append(plain(segment))
        for daemon in job.mps:
            if (daemon.pid, daemon.start_ticks) not in daemons:
                daemons.add((daemon.pid, daemon.start_ticks))
                asked["mps"].append(plain(daemon))
        for report in () if job.profilers else job.reports:  # a profiler still running may yet finish it
            if (report.dev, report.inode) not in identities:
                identities.add((report.dev, report.inode))
                asked["reports"].append(plain(report))
    if not asked["segments"] and not asked["mps"] and not asked["reports"]:
        return None
    try:
        checked = link.request({"cmd": LEFTOVERS_CHECK_COMMAND, **asked}, TIMEOUT_S)
    except LinkError:
        return None
    ours = {(seg.get("dev"), seg.get("inode")) for seg in known["segments"]}
    our_daemons = {(d.get("pid"), d.get("start_ticks")) for d in known["mps"]}
    kept = {
        "segments": [
            seg for seg in checked.get("segments") or () if (seg.get("dev"), seg.get("inode")) in ours
        ],
        "mps": [d for d in checked.get("mps") or () if (d.get("pid"), d.get("start_ticks")) in our_daemons],
    }
    if len(kept["segments"]) != len(known["segments"]) or len(kept["mps"]) != len(known["mps"]):
        try:
            leftovers.save(target, boot_id, kept, replace_all=True)
        except StoreError as exc:
            print(f"gputui: warning: {visible(str(exc), 300)}", file=err)
    return checked


def receipt_lines(target: str, checked: dict[str, Any] | None) -> list[str]:
    """The kill receipt's lines for what the killed job left behind."""
    if checked is None:
        return []
    return [f"leftover: {fit(f.detail, 400)}" for f in leftovers.findings(target, checked)]


def _confirm(count: int, stdin: TextIO, out: TextIO) -> bool:
    out.write(f"Remove {count} file{'s' if count != 1 else ''}? [y/N] ")
    out.flush()
    return stdin.readline().strip().lower() in ("y", "yes")


def run_leftovers(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run ``gputui leftovers``; returns the exit status (see the module docstring)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    stdin = sys.stdin if stdin is None else stdin
    safe_streams(out, err)
    targets = default_targets(list(args.targets), bool(getattr(args, "demo", False)))
    if len(targets) != 1:
        print("gputui: leftovers: name one host", file=err)
        return EXIT_ERROR
    target = targets[0]
    if args.remove and args.read_only:
        print(f"gputui: {visible(target, 100)}: read-only mode: nothing is removed", file=err)
        return EXIT_ERROR
    link = open_link(target, options_from_args(args, one_shot=True), demo=bool(getattr(args, "demo", False)))
    try:
        try:
            link.open()
            sample = full_sample(link, target)
            boot_id = sample.boot_id
            checked = check_recorded(link, target, boot_id, err, sample.remembered) or {
                "segments": [],
                "mps": [],
                "shm": None,
            }
            checked.setdefault("reports", [])
        except LinkError as exc:
            print(link_error_line(target, exc), file=err)
            return EXIT_ERROR
        # A host whose collector saw no GPU job since boot has no record to say "none" from.
        none_line = nothing_recorded(sample) or f"{visible(target, 100)}: no leftovers of killed jobs"
        lines = receipt_lines(target, checked) or [none_line]
        if not args.remove or not (checked["segments"] or checked["reports"]):
            if args.json:
                print(json_visible({"target": target, "leftovers": checked}, indent=1), file=out)
            else:
                print("\n".join(lines), file=out)
            left = checked["segments"] or checked["mps"] or checked["reports"]
            return EXIT_LEFT if left else EXIT_NONE_LEFT
        print("\n".join(lines), file=err if args.json else out)
        return _remove(args, link, target, boot_id, checked, stdin, out, err)
    finally:
        link.close()


def _remove(
    args: argparse.Namespace,
    link: HostLink,
    target: str,
    boot_id: str | None,
    checked: dict[str, Any],
    stdin: TextIO,
    out: TextIO,
    err: TextIO,
) -> int:
    segments = [s for s in checked["segments"] if not s.get("open_by")]
    reports = [r for r in checked.get("reports") or () if not r.get("open_by")]
    if not segments and not reports:
        print(
            f"gputui: {visible(target, 100)}: every file left is still open or mapped: none removed",
            file=err,
        )
        return EXIT_LEFT
    if not args.yes:
        if not stdin.isatty():
            print(
                f"gputui: {visible(target, 100)}: not a terminal: nothing removed (--yes to remove)",
                file=err,
            )
            return EXIT_ERROR
        if not _confirm(len(segments) + len(reports), stdin, out):
            print("nothing removed", file=out)
            return EXIT_LEFT
    audit = None if args.no_audit else AuditLog()
    entries = [
        {"stage": STAGE_INTENT, "action": "remove_leftover", "path": s.get("path"), "inode": s.get("inode")}
        for s in reports + segments
    ]
    if audit is not None:
        try:
            audit.record(target, boot_id, [dict(e, result=RESULT_REQUESTED) for e in entries])
        except StoreError as exc:
            print(
                f"gputui: {visible(target, 100)}: nothing removed: audit log: {visible(str(exc), 300)}",
                file=err,
            )
            return EXIT_ERROR
    try:
        command = {"cmd": LEFTOVERS_REMOVE_COMMAND, "segments": segments, "reports": reports}
        results = link.request(command, TIMEOUT_S).get("results")
    except LinkError as exc:
        print(link_error_line(target, exc), file=err)
        return EXIT_ERROR
    results = [r for r in results or () if isinstance(r, dict)]
    if audit is not None:
        try:
            audit.record(
                target, boot_id, [dict(r, stage="remove", action="remove_leftover") for r in results]
            )
        except StoreError as exc:
            print(
                f"gputui: warning: audit log not written after removing: {visible(str(exc), 300)}",
                file=err,
            )
    for result in results:
        # The collector's answer to the removal is not read into the model: made visible here.
        detail = f"  {visible(result.get('detail'), 200)}" if result.get("detail") else ""
        path = visible(result.get("path"), 200)
        print(
            f"{visible(result.get('result'), 12):<8} {path}{detail}",
            file=out,
        )
    check_recorded(link, target, boot_id, err)
    return EXIT_NONE_LEFT if all(r.get("result") in ("removed", "gone") for r in results) else EXIT_LEFT
