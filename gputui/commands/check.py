"""``gputui check``: is every GPU back at its idle baseline? The scripted form of eight lines of "3 MiB".

Exit status: 0 clean, 1 not clean, 2 could not tell (no driver, unreachable host, bad state file for
``--calibrate``). With ``--wait`` it samples quickly until the host is clean or the deadline passes and says
how long that took; ``--calibrate`` records the current per-GPU figures of an idle host as its baselines.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TextIO

from gputui.agent.protocol import CMD_CONFIGURE
from gputui.commands.targets import default_targets, open_link, options_from_args
from gputui.core import cleanslate
from gputui.core.analysis import (
    DEFAULT_BASELINE_MIB,
    DEFAULT_TOLERANCE_MIB,
    Baselines,
    analyze,
    gpu_memory_by_pid,
)
from gputui.core.cleanslate import busy_port_reason, busy_ports
from gputui.core.model import HostSnapshot, Verdict, snapshots_document
from gputui.core.servers import failing_servers, judge_once
from gputui.core.state import (
    StateError,
    load_baselines,
    load_watched_ports,
    save_baselines,
    save_watched_ports,
)
from gputui.core.textsafe import json_visible, visible
from gputui.transports.base import HostLink, LinkError, full_sample, one_shot_sample

EXIT_CLEAN = 0
EXIT_NOT_CLEAN = 1
EXIT_ERROR = 2
SAMPLE_TIMEOUT_S = 30.0
WAIT_MEMORY_INTERVAL_S = cleanslate.WATCH_MEMORY_INTERVAL_S
WAIT_PROCESS_INTERVAL_S = cleanslate.WATCH_PROCESS_INTERVAL_S
DASH = "–"
MAX_FINDINGS_SHOWN = 20
CANNOT_TELL = "cannot tell"


def _marks(stream: TextIO) -> tuple[str, str]:
    """✓/✗ where the output encoding can carry them, else ASCII (a C locale, a log file in latin-1)."""
    try:
        "✓✗–".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "ok", "X"
    return "✓", "✗"


def safe_streams(*streams: TextIO) -> None:
    """Never die on a character the terminal's encoding lacks: escape it instead."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass


def link_error_line(target: str, exc: Exception) -> str:
    """ "gputui: <target>: <cause>" without repeating the target when the cause already names it."""
    cause = visible(str(exc) or type(exc).__name__, 300)
    if cause.startswith(f"{target}:"):
        return f"gputui: {cause}"
    return f"gputui: {visible(target, 100)}: {cause}"


def resolve_baselines(
    target: str, baseline_mib: int | None, tolerance_mib: int | None, demo: bool, err: TextIO
) -> Baselines:
    """The baselines for one target: ``--baseline-mib`` if given, else the calibrated values, else 3 MiB.

    A calibration file that cannot be used gives one warning line on ``err`` and the defaults.
    """
    tolerance = DEFAULT_TOLERANCE_MIB if tolerance_mib is None else tolerance_mib
    if baseline_mib is not None:
        return Baselines(default_mib=baseline_mib, tolerance_mib=tolerance)
    if demo:
        return Baselines(tolerance_mib=tolerance)  # simulated hosts have nothing recorded about them
    loaded = load_baselines(target)
    if loaded.warning:
        print(f"gputui: warning: {visible(loaded.warning, 400)}", file=err)
    return Baselines(
        default_mib=DEFAULT_BASELINE_MIB, tolerance_mib=tolerance, per_gpu_mib=loaded.per_gpu_mib
    )


def _status(verdict: Verdict | None) -> int:
    if verdict is None or not verdict.known:
        return EXIT_ERROR
    return EXIT_CLEAN if verdict.clean else EXIT_NOT_CLEAN


def _gpu_reason_text(index: int, used: int | None, reason: str) -> str:
    """A per-GPU reason without the "GPU3 41236 MiB " its line already shows."""
    prefix = f"GPU{index} "
    if reason.startswith(prefix):
        reason = reason[len(prefix) :]
    if used is not None and reason.startswith(f"{used} MiB "):
        reason = reason[len(f"{used} MiB ") :]
    return reason


def format_check(snapshot: HostSnapshot, stream: TextIO, header: bool) -> list[str]:
    """The lines of one host's check: one per GPU, then the verdict, host-level reasons and findings."""
    good, bad = _marks(stream)
    lines: list[str] = []
    if header:
        lines.append(f"{visible(snapshot.target, 60)} ({visible(snapshot.hostname or DASH, 60)})")
    verdict = snapshot.verdict
    shown: set[str] = set()
    if verdict is not None:
        for gpu_verdict in verdict.gpus:
            used = DASH if gpu_verdict.used_mib is None else str(gpu_verdict.used_mib)
            if gpu_verdict.clean:
                lines.append(f"GPU{gpu_verdict.index}  {used} MiB  {good}")
                continue
            texts = [
                _gpu_reason_text(gpu_verdict.index, gpu_verdict.used_mib, r) for r in gpu_verdict.reasons
            ]
            lines.append(f"GPU{gpu_verdict.index}  {used} MiB  {bad} {visible('; '.join(texts), 400)}")
            shown.update(gpu_verdict.reasons)
    if verdict is None:
        lines.append("cannot tell: no verdict")
    elif not verdict.known:
        lines.append(f"{CANNOT_TELL}: {visible('; '.join(verdict.reasons) or 'no data', 400)}")
    else:
        total = len(verdict.gpus)
        baseline = sorted(set(verdict.baseline_mib.values()))
        baseline_text = "/".join(str(b) for b in baseline) if baseline else str(DEFAULT_BASELINE_MIB)
        at = (
            f"{verdict.gpus_at_baseline}/{total} GPUs at baseline "
            f"({baseline_text} MiB + {verdict.tolerance_mib})"
        )
        lines.append(f"clean: {at}" if verdict.clean else f"NOT clean: {at}")
        # Host-level reasons (a zombie or D-state process left in a GPU tree) that a finding below already
        # explains are not repeated: eight defunct workers would take sixteen lines to say eight things.
        explained = {f"pid {f.pid} " for f in snapshot.findings if f.pid is not None}
        for reason in verdict.reasons:
            if reason not in shown and not any(reason.startswith(prefix) for prefix in explained):
                lines.append(f"  - {visible(reason, 400)}")
    for finding in snapshot.findings[:MAX_FINDINGS_SHOWN]:
        lines.append(f"! {visible(finding.kind, 20)}: {visible(finding.detail, 400)}")
        if finding.action:
            lines.append(f"    -> {visible(finding.action, 300)}")
    if len(snapshot.findings) > MAX_FINDINGS_SHOWN:
        lines.append(f"! and {len(snapshot.findings) - MAX_FINDINGS_SHOWN} more findings")
    return lines


def _configure(link: HostLink, memory_interval_s: float, process_interval_s: float) -> None:
    link.request(
        {
            "cmd": CMD_CONFIGURE,
            "memory_interval_s": memory_interval_s,
            "process_interval_s": process_interval_s,
        },
        SAMPLE_TIMEOUT_S,
    )


def cannot_tell_at_all(snapshot: HostSnapshot) -> bool:
    """Whether the host reports no GPU at all (no driver, no NVML): nothing any wait could change."""
    return not snapshot.gpus and snapshot.verdict is not None and not snapshot.verdict.known


def wait_until_clean(
    link: HostLink,
    target: str,
    baselines: Baselines,
    wait_s: float,
    args: argparse.Namespace,
    clock: Callable[[], float] = time.monotonic,
    ports: tuple[cleanslate.WatchedPort, ...] = (),
) -> tuple[HostSnapshot, float | None, cleanslate.CleanCheck]:
    """Sample at 10+ per second until the host is clean or ``wait_s`` passed, by the rules of
    ``core.cleanslate`` (the same machine as the TUI's ``c``).

    The fast stream (memory every 0.09 s, processes every 0.5 s) spots the moment memory is back, judged on
    memory alone; the machine then asks for a full sample (a fresh process list) to confirm it, so a stale
    process list can neither declare it clean early nor hold it back. The agent's intervals are restored
    afterwards. A host that cannot tell at all (no driver, no NVML, no GPUs) ends the wait at once: waiting
    cannot help. ``ports`` (those of jobs ``gputui kill`` took down) must be free too.

    Returns:
        The last analysed snapshot, the seconds it took to become clean (None: not clean in time), and the
        check as it ended (its receipt).
    """
    check = cleanslate.start(clock(), wait_s, trigger="--wait", ports=ports)
    _configure(link, WAIT_MEMORY_INTERVAL_S, WAIT_PROCESS_INTERVAL_S)
    try:
        snapshot = analyze(full_sample(link, target), baselines)
        check, ask = cleanslate.memory_sample(check, snapshot, baselines, clock())
        while True:
            if ask:
                snapshot = analyze(full_sample(link, target), baselines)
                check = cleanslate.confirming_sample(check, snapshot)
            if check.clean and check.finished_s is not None:
                return snapshot, check.finished_s - check.started_s, check
            check = cleanslate.tick(check, clock())
            if not check.running or cannot_tell_at_all(snapshot):
                return snapshot, None, check
            streamed = link.next_snapshot(min(max(0.0, check.started_s + wait_s - clock()), 1.0))
            ask = False
            if streamed is not None:
                snapshot = analyze(streamed, baselines)
                check, ask = cleanslate.memory_sample(check, snapshot, baselines, clock())
    finally:
        try:
            _configure(link, args.interval, args.process_interval)
        except LinkError:
            pass  # the link is closed next anyway; the agent's intervals die with it


def _calibrate(snapshot: HostSnapshot, target: str, out: TextIO, err: TextIO, json_out: bool) -> int:
    if snapshot.error is not None or not snapshot.gpus:
        print(
            f"gputui: {visible(target, 100)}: cannot calibrate: "
            f"{visible(snapshot.error or 'no GPUs found', 300)}",
            file=err,
        )
        return EXIT_ERROR
    broken = [g for g in snapshot.gpus if g.error is not None or g.memory_used_mib is None]
    if broken:
        names = ", ".join(f"GPU{g.index}" for g in broken)
        print(f"gputui: {visible(target, 100)}: cannot calibrate: {names} cannot be read", file=err)
        return EXIT_ERROR
    listed = sorted({p.pid for g in snapshot.gpus for p in g.processes} | set(gpu_memory_by_pid(snapshot)))
    if listed:
        pids = ", ".join(str(p) for p in listed[:8]) + (", …" if len(listed) > 8 else "")
        print(
            f"gputui: {visible(target, 100)}: cannot calibrate: {len(listed)} GPU process"
            f"{'es are' if len(listed) != 1 else ' is'} listed (pid {pids}); calibrate only an idle host",
            file=err,
        )
        return EXIT_ERROR
    values = {g.key: int(g.memory_used_mib or 0) for g in snapshot.gpus}
    try:
        path = save_baselines(target, values, hostname=snapshot.hostname)
    except StateError as exc:
        print(f"gputui: {visible(str(exc), 400)}", file=err)
        return EXIT_ERROR
    if json_out:
        return EXIT_CLEAN
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        print(f"GPU{gpu.index}  {gpu.memory_used_mib} MiB  baseline recorded", file=out)
    print(f"calibrated {visible(target, 100)}: {len(values)} GPUs, saved to {path}", file=out)
    return EXIT_CLEAN


def _check_target(
    target: str, args: argparse.Namespace, out: TextIO, err: TextIO, header: bool
) -> tuple[int, HostSnapshot, float | None]:
    demo = bool(getattr(args, "demo", False))
    baselines = resolve_baselines(target, args.baseline_mib, args.tolerance_mib, demo, err)
    link = open_link(target, options_from_args(args), demo=demo)
    waited: float | None = None
    ports_free = ""
    try:
        link.open()
        snapshot = one_shot_sample(link, target)  # with the health the launchers and configured URLs report
        if args.calibrate:
            if demo:
                print("gputui: --calibrate records real hosts only, not --demo ones", file=err)
                return EXIT_ERROR, analyze(snapshot, baselines), None
            status = _calibrate(snapshot, target, out, err, bool(args.json))
            if status == EXIT_CLEAN:
                baselines = resolve_baselines(target, None, args.tolerance_mib, demo, err)
            return status, analyze(snapshot, baselines), None
        ports = () if demo else load_watched_ports(target, snapshot.boot_id)
        analysed = judge_ports(analyze(snapshot, baselines), ports)
        if (
            args.wait is not None
            and analysed.verdict is not None
            and not analysed.verdict.clean
            and not cannot_tell_at_all(analysed)
        ):
            if not args.json:
                print(f"waiting up to {args.wait:g} s for a clean slate on {visible(target, 60)}…", file=err)
            analysed, waited, check = wait_until_clean(link, target, baselines, args.wait, args, ports=ports)
            ports_free = ports_free_line(check)
            analysed = judge_ports(analysed, ports)
        elif args.wait is not None and analysed.verdict is not None and analysed.verdict.clean:
            waited = 0.0
        _forget_free_ports(target, analysed, ports, err)
    finally:
        link.close()
    analysed = judge_servers(analysed)
    status = _status(analysed.verdict)
    if not args.json:
        for line in format_check(analysed, out, header):
            print(line, file=out)
        if args.wait is not None:
            last = wait_line(waited, args.wait, analysed.verdict is not None and analysed.verdict.known)
            if last is not None:
                print(last if not ports_free or waited is None else f"{last}; {ports_free}", file=out)
    return status, analysed, waited


def judge_ports(snapshot: HostSnapshot, ports: tuple[cleanslate.WatchedPort, ...]) -> HostSnapshot:
    """The snapshot with a verdict that is not clean while a port of a killed job is still in LISTEN,
    saying which and by whom (``cleanslate.busy_ports``)."""
    verdict = snapshot.verdict
    busy = busy_ports(snapshot, ports) if ports else None
    if not busy or verdict is None or not verdict.known:
        return snapshot
    reasons = tuple(busy_port_reason(port, listener) for port, listener in busy)
    return replace(snapshot, verdict=replace(verdict, clean=False, reasons=verdict.reasons + reasons))


def ports_free_line(check: cleanslate.CleanCheck) -> str:
    """``port 30000 free after 1.20 s``: when the killed jobs' ports were first seen free during the wait."""
    if not check.ports or check.ports_free_s is None:
        return ""
    names = ", ".join(str(p.port) for p in check.ports)
    plural = "s" if len(check.ports) > 1 else ""
    return f"port{plural} {names} free after {max(0.0, check.ports_free_s - check.started_s):.2f} s"


def _forget_free_ports(
    target: str, snapshot: HostSnapshot, ports: tuple[cleanslate.WatchedPort, ...], err: TextIO
) -> None:
    """Stop watching the ports ``snapshot`` shows free: a later listener is the restarted server."""
    left = cleanslate.ports_left(snapshot, ports)
    if left == ports:
        return
    try:
        save_watched_ports(target, snapshot.boot_id, left)
    except StateError as exc:
        print(f"gputui: warning: {visible(str(exc), 300)}", file=err)


def judge_servers(snapshot: HostSnapshot) -> HostSnapshot:
    """The snapshot with its servers judged (``core.servers``) and, when one is UNHEALTHY or STALLED, a
    verdict that is not clean and says which: the GPUs may be free, but the server on them is not serving."""
    judged = judge_once(snapshot)
    failing = failing_servers(judged.health)
    verdict = judged.verdict
    if not failing or verdict is None or not verdict.known:
        return judged
    return replace(judged, verdict=replace(verdict, clean=False, reasons=verdict.reasons + tuple(failing)))


def wait_line(waited_s: float | None, wait_s: float, known: bool) -> str | None:
    """The last line of ``check --wait``: how long it took, or that it was not clean in time; None when the
    last verdict could not tell (the verdict lines already say so, once)."""
    if waited_s is not None:
        return f"clean after {waited_s:.2f} s"
    return f"still not clean after {wait_s:g} s" if known else None


def run_check(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``gputui check``; returns the exit status (0 clean, 1 not clean, 2 could not tell)."""
    if getattr(args, "fleet", None) is not None:
        from gputui.commands.fleet import run_fleet_check

        return run_fleet_check(args, out, err)
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    safe_streams(out, err)
    targets = default_targets(list(args.targets), bool(getattr(args, "demo", False)))
    statuses: list[int] = []
    snapshots: list[HostSnapshot] = []
    waits: dict[str, float | None] = {}
    for target in targets:
        try:
            status, snapshot, waited = _check_target(target, args, out, err, header=len(targets) > 1)
        except LinkError as exc:
            print(link_error_line(target, exc), file=err)
            status = EXIT_ERROR
            snapshot = HostSnapshot(target=target, error=str(exc))
            snapshot = analyze(snapshot, Baselines())
            waited = None
        statuses.append(status)
        snapshots.append(snapshot)
        waits[target] = waited
    if args.json:
        document: dict[str, Any] = snapshots_document(snapshots)
        if args.wait is not None:
            document["clean_after_s"] = waits
        print(json_visible(document, indent=1), file=out)
    if EXIT_ERROR in statuses:
        return EXIT_ERROR
    return EXIT_NOT_CLEAN if EXIT_NOT_CLEAN in statuses else EXIT_CLEAN
