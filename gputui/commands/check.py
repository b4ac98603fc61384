"""``gputui check``: is every GPU back at its idle baseline? The scripted form of eight lines of "3 MiB".

Exit status (``core.verdict.levels``): 0 CLEAN, 1 NOT CLEAN or NOT READY, 2 CANNOT TELL (no driver,
unreachable host, a GPU that cannot be read, bad state file or refused GPUs for ``--calibrate``). With
``--wait`` it samples quickly until the host is clean or the deadline passes and says how long that took;
``--calibrate`` records the current per-GPU figures of an idle host as its baselines.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from gputui.commands.inputs.baselines import accepted_xids, resolve_baselines, server_watch
from gputui.commands.inputs.targets import default_targets, open_link, options_from_args
from gputui.commands.output.streams import link_error_line, safe_streams, same_terminal, wait_line
from gputui.commands.output.verdict_text import verdict_lines
from gputui.core.link import (
    HostLink,
    LinkError,
    configure_command,
    full_sample,
    one_shot_sample,
    probe_host,
)
from gputui.core.model import HostSnapshot, replace, snapshots_document
from gputui.core.store import (
    StoreError,
    WatchedPort,
    leftovers,
    load_watched_ports,
    save_baselines,
    save_watched_ports,
)
from gputui.core.text import DASH, fit, json_visible, visible
from gputui.core.verdict import (
    Baselines,
    cleanslate,
    exit_code,
    judge,
    no_data,
    refusals,
    with_facts,
    worst_exit_code,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

EXIT_CLEAN = 0
EXIT_NOT_CLEAN = 1
EXIT_ERROR = 2
SAMPLE_TIMEOUT_S = 30.0
WAIT_MEMORY_INTERVAL_S = cleanslate.WATCH_MEMORY_INTERVAL_S
WAIT_PROCESS_INTERVAL_S = cleanslate.WATCH_PROCESS_INTERVAL_S


def format_check(snapshot: HostSnapshot, stream: TextIO, header: bool) -> list[str]:
    """The lines of one host's check: one per GPU, then the verdict, its reasons and the findings."""
    lines: list[str] = []
    if header:
        lines.append(f"{fit(snapshot.target, 60)} ({fit(snapshot.hostname or DASH, 60)})")
    return lines + verdict_lines(snapshot, stream)


def _configure(
    link: HostLink, memory_interval_s: float, process_interval_s: float, watch_exits: bool
) -> None:
    link.request(configure_command(memory_interval_s, process_interval_s, watch_exits), SAMPLE_TIMEOUT_S)


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
    ports: tuple[WatchedPort, ...] = (),
) -> tuple[HostSnapshot, float | None, cleanslate.CleanCheck]:
    """Sample at 10+ per second until the host is clean or ``wait_s`` passed, by the rules of
    ``core.verdict.cleanslate`` (the same machine as the TUI's ``c``).

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
    _configure(link, WAIT_MEMORY_INTERVAL_S, WAIT_PROCESS_INTERVAL_S, watch_exits=True)
    watch = server_watch(args)  # over the wait's samples: a server that stalls, a collective that spins

    def judged(sample: HostSnapshot) -> HostSnapshot:
        return judge(sample, baselines, servers=watch, watched_ports=ports, one_shot=True)

    try:
        snapshot = judged(full_sample(link, target))
        check, ask = cleanslate.memory_sample(check, snapshot, baselines, clock())
        while True:
            if ask:
                snapshot = judged(full_sample(link, target))
                check = cleanslate.confirming_sample(check, snapshot)
            if check.clean and check.finished_s is not None:
                return snapshot, check.finished_s - check.started_s, check
            check = cleanslate.tick(check, clock())
            if not check.running or cannot_tell_at_all(snapshot):
                return snapshot, None, check
            streamed = link.next_snapshot(min(max(0.0, check.started_s + wait_s - clock()), 1.0))
            ask = False
            if streamed is not None:
                snapshot = judged(streamed)
                check, ask = cleanslate.memory_sample(check, snapshot, baselines, clock())  # may confirm it
    finally:
        try:
            _configure(link, args.interval, args.process_interval, watch_exits=False)
        except LinkError:
            pass  # the link is closed next anyway; the agent's intervals die with it


def _calibrate(
    snapshot: HostSnapshot, target: str, out: TextIO, err: TextIO, json_out: bool, force: bool
) -> int:
    """Record the GPUs' figures of an analysed one-shot sample as their baselines, only from idle evidence
    (``core.verdict.calibration``): a refused GPU is named, and nothing is recorded unless ``force``."""
    name = visible(target, 100)
    if snapshot.error is not None or not snapshot.gpus:
        cause = fit(snapshot.error or "no GPUs found", 300)
        print(f"gputui: {name}: cannot calibrate: {cause}", file=err)
        return EXIT_ERROR
    refused = refusals(snapshot)
    unreadable = [r for r in refused if not r.forcible]
    if unreadable:
        names = ", ".join(f"GPU{r.index}" for r in unreadable)
        print(f"gputui: {name}: cannot calibrate: {names} cannot be read", file=err)
        return EXIT_ERROR
    if refused and not force:
        for refusal in refused:
            print(f"gputui: {name}: GPU{refusal.index} refused: {visible(refusal.reason, 300)}", file=err)
        gpus = f"{len(refused)} GPU{'s' if len(refused) > 1 else ''}"
        print(
            f"gputui: {name}: cannot calibrate: {gpus} not idle; "
            "nothing recorded (calibrate an idle host, or --force to record them anyway)",
            file=err,
        )
        return EXIT_ERROR
    values = {g.key: int(g.memory_used_mib or 0) for g in snapshot.gpus}
    try:
        path = save_baselines(target, values, hostname=snapshot.hostname)
    except StoreError as exc:
        print(f"gputui: {visible(str(exc), 400)}", file=err)
        return EXIT_ERROR
    forced = {r.index: r.reason for r in refused}
    for index, reason in sorted(forced.items()):
        why = visible(reason, 300)
        print(f"gputui: warning: {name}: GPU{index} recorded although it {why} (--force)", file=err)
    if json_out:
        return EXIT_CLEAN
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        note = " (forced)" if gpu.index in forced else ""
        print(f"GPU{gpu.index}  {gpu.memory_used_mib} MiB  baseline recorded{note}", file=out)
    print(f"calibrated {name}: {len(values)} GPUs, saved to {path}", file=out)
    return EXIT_CLEAN


def _check_target(
    target: str, args: argparse.Namespace, out: TextIO, err: TextIO, header: bool
) -> tuple[int, HostSnapshot, float | None]:
    demo = bool(getattr(args, "demo", False))
    baselines = resolve_baselines(
        target, args.baseline_mib, args.tolerance_mib, demo, err, accepted_xids(args)
    )
    link = open_link(target, options_from_args(args, one_shot=True), demo=demo)
    waited: float | None = None
    ports_free = ""
    try:
        link.open()
        snapshot = one_shot_sample(link, target)  # with the health the launchers and configured URLs report
        if args.calibrate:
            if demo:
                print("gputui: --calibrate records real hosts only, not --demo ones", file=err)
                return EXIT_ERROR, judge(snapshot, baselines, one_shot=True), None
            analysed = judge(snapshot, baselines, one_shot=True)
            force = bool(getattr(args, "force", False))
            status = _calibrate(analysed, target, out, err, bool(args.json), force)
            if status == EXIT_CLEAN:
                baselines = resolve_baselines(
                    target, None, args.tolerance_mib, demo, err, accepted_xids(args)
                )
            return status, judge(snapshot, baselines, one_shot=True), None
        warnings: list[str] = []
        ports = () if demo else load_watched_ports(target, snapshot.boot_id, warnings=warnings)
        for warning in warnings:
            print(f"gputui: warning: {visible(warning, 400)}", file=err)
        analysed = judge(snapshot, baselines, watched_ports=ports, one_shot=True)
        if (
            args.wait is not None
            and analysed.verdict is not None
            and not analysed.verdict.clean
            and not cannot_tell_at_all(analysed)
        ):
            if not args.json:
                print(
                    f"waiting up to {args.wait:g} s for a clean slate on {visible(target, 60)}…",
                    file=err,
                )
            analysed, waited, check = wait_until_clean(link, target, baselines, args.wait, args, ports=ports)
            ports_free = ports_free_line(check)
        elif args.wait is not None and analysed.verdict is not None and analysed.verdict.clean:
            waited = 0.0
        if args.probe and not cannot_tell_at_all(analysed):
            # After the wait (a Slurm prolog's "check --probe --wait 60"), and judged on a sample taken after
            # it: the probe's own memory is gone by then.
            probed = with_probe(link, target, args)
            analysed = judge(probed, baselines, watched_ports=ports, one_shot=True)
        _forget_free_ports(target, analysed, ports, err)
        if not demo:
            from gputui.commands.leftovers import check_recorded

            analysed = with_facts(
                leftovers.judge(analysed, check_recorded(link, target, analysed.boot_id, err))
            )
    finally:
        link.close()
    status = exit_code(analysed.verdict)
    if not args.json:
        for line in format_check(analysed, out, header):
            print(line, file=out)
        if args.wait is not None:
            last = wait_line(waited, args.wait, analysed.verdict is not None and analysed.verdict.known)
            if last is not None:
                print(last if not ports_free or waited is None else f"{last}; {ports_free}", file=out)
    return status, analysed, waited


def with_probe(link: HostLink, target: str, args: argparse.Namespace) -> HostSnapshot:
    """A sample taken after the readiness probe, with the probe's report (``--probe``)."""
    force = bool(getattr(args, "force", False))
    report = probe_host(link, target, args.probe_deadline, args.probe_mib, force)
    return replace(full_sample(link, target), probe=report)


def ports_free_line(check: cleanslate.CleanCheck) -> str:
    """``port 30000 free after 1.20 s``: when the killed jobs' ports were first seen free during the wait."""
    if not check.ports or check.ports_free_s is None:
        return ""
    names = ", ".join(str(p.port) for p in check.ports)
    plural = "s" if len(check.ports) > 1 else ""
    return f"port{plural} {names} free after {max(0.0, check.ports_free_s - check.started_s):.2f} s"


def _forget_free_ports(
    target: str, snapshot: HostSnapshot, ports: tuple[WatchedPort, ...], err: TextIO
) -> None:
    """Stop watching the ports ``snapshot`` shows free: a later listener is the restarted server."""
    left = cleanslate.ports_left(snapshot, ports)
    if left == ports:
        return
    try:
        save_watched_ports(target, snapshot.boot_id, left)
    except StoreError as exc:
        print(f"gputui: warning: {visible(str(exc), 300)}", file=err)


def run_check(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``gputui check``; returns the exit status (0 CLEAN, 1 NOT CLEAN / NOT READY, 2 CANNOT TELL)."""
    if getattr(args, "fleet", None) is not None:
        from gputui.commands.fleet_report import run_fleet_check

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
            status = EXIT_ERROR
            snapshot = no_data(target, visible(str(exc) or type(exc).__name__, 300), None)
            waited = None
            # The verdict is one sentence in every view ("cannot tell: no data: CAUSE"); the error line goes
            # to stderr for whoever reads that stream, unless both are the one terminal, which would show the
            # cause twice.
            if args.json or not same_terminal(out, err):
                print(link_error_line(target, exc), file=err)
            if not args.json:
                for line in format_check(snapshot, out, header=len(targets) > 1):
                    print(line, file=out)
        statuses.append(status)
        snapshots.append(snapshot)
        waits[target] = waited
    if args.json:
        document: dict[str, Any] = snapshots_document(snapshots)
        if args.wait is not None:
            document["clean_after_s"] = waits
        print(json_visible(document, indent=1), file=out)
    return worst_exit_code(statuses)
