"""``gputui snapshot --prometheus`` and ``gputui check --prometheus``: the fleet from the DCGM exporter.

The check is a memory-only verdict: DCGM reports memory per GPU, not the processes holding it, so a process
still listed, a zombie or a D-state process left from a GPU tree cannot be seen from here. Processes,
zombies and kills need the SSH view of the host (``gputui HOST``, or Enter in the fleet view).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial

from gputui.agent.protocol import ENDPOINT_STATE_UP
from gputui.commands.grammar.fleet import FleetChoice
from gputui.commands.output.streams import marks, safe_streams, wait_line
from gputui.core.fleet import (
    FleetSample,
    analyze_fleet,
    baseline_text,
    fleet_baselines,
    hottest_text,
    memory_only,
    memory_text,
    ssh_target_for,
    state_text,
    summarize,
    xid_text,
)
from gputui.core.model import CLEAN, NOT_CLEAN, HostSnapshot, snapshots_document
from gputui.core.text import fit, json_visible, visible
from gputui.core.verdict import CANNOT_TELL_WORDS, Baselines, exit_code
from gputui.transports.pacing import pace
from gputui.transports.prometheus import PrometheusError, PrometheusSource, shown_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from gputui.ui.screens.fleet import FleetScreen

EXIT_CLEAN = 0
EXIT_NOT_CLEAN = 1
EXIT_ERROR = 2
CHECK_POLL_S = 1.0
"""How often ``check --wait`` asks again (Prometheus's data changes once per scrape anyway)."""
MEMORY_ONLY_NOTE = "memory only: processes, zombies and kills need the SSH view"
UNKNOWN_FIELDS = (
    "processes",
    "processes_time",
    "device_holders",
    "boot_id",
    "driver_version",
    "agent_version",
)
"""Snapshot fields DCGM metrics cannot fill: null or empty in every fleet host, said in ``source``."""
EXPORTER_NOTE = "processes included: every host runs the gputui exporter"
MAX_NAMES_IN_NOTE = 10
MAX_FINDINGS_LISTED = 10
"""The fleet table lists at most this many findings under a host."""
MAX_HOSTS_LISTED = 50
"""``check`` lists at most this many hosts that are not clean; the summary line counts them all."""


def _baselines(args: argparse.Namespace, err: TextIO) -> Baselines:
    baselines, warning = fleet_baselines(args.baseline_mib, args.tolerance_mib)
    if warning:
        print(f"gputui: warning: {visible(warning, 400)}", file=err)
    return baselines


def _document(
    choice: FleetChoice, source: PrometheusSource, sample: FleetSample | None, error: str | None
) -> dict[str, Any]:
    """The JSON document: ``gputui snapshot --json``'s shape, one entry per host, and a ``source`` object
    saying where the data came from and what it cannot know."""
    document = snapshots_document([] if sample is None else [h.snapshot for h in sample.hosts])
    document["source"] = {
        "kind": "prometheus",
        "url": shown_url(choice.settings.url),
        "query": source.query,
        "host_label": choice.settings.host_label,
        "evaluated_at": None if sample is None else sample.eval_time,
        "ignored_series": None if sample is None else sample.ignored_series,
        "error": error,
        "verdict": verdict_note(sample),
        "unknown": list(UNKNOWN_FIELDS),
        "memory_only_hosts": [] if sample is None else [h.name for h in sample.hosts if memory_only(h)],
        "exporter_hosts": [] if sample is None else [h.name for h in sample.hosts if not memory_only(h)],
    }
    return document


def verdict_note(sample: FleetSample | None) -> str:
    """What the fleet's verdicts are made of: memory only, except on hosts that run the gputui exporter."""
    if sample is None or not sample.hosts:
        return MEMORY_ONLY_NOTE
    plain = [h.name for h in sample.hosts if memory_only(h)]
    if len(plain) == len(sample.hosts):
        return MEMORY_ONLY_NOTE
    if not plain:
        return EXPORTER_NOTE
    names = ", ".join(fit(n, 40) for n in plain[:MAX_NAMES_IN_NOTE])
    more = f" and {len(plain) - MAX_NAMES_IN_NOTE} more" if len(plain) > MAX_NAMES_IN_NOTE else ""
    return f"memory only on {names}{more}: no gputui exporter there; processes included on the others"


def _read(source: PrometheusSource, baselines: Baselines) -> tuple[FleetSample | None, str | None]:
    try:
        return analyze_fleet(source.sample(), baselines, source.settings.stale_after_s), None
    except PrometheusError as exc:
        return None, str(exc)


def _no_hosts_line(choice: FleetChoice) -> str:
    matcher = f" matching {{{choice.settings.matcher}}}" if choice.settings.matcher else ""
    return f"gputui: prometheus {shown_url(choice.settings.url)}: no DCGM series{matcher} (no GPU host found)"


def format_fleet_table(sample: FleetSample) -> list[str]:
    """One line per host (GPUs at baseline, memory, utilisation, hottest GPU, XID, data age, server), with
    each MIG GPU's instances and each host's error below it."""
    lines = [
        f"{'HOST':<24} {'GPUS':>4} {'BASE':>5} {'MEMORY':>11} {'UTIL':>4} {'HOTTEST':<16} {'XID':<9} "
        f"{'AGE':<12} SERVER"
    ]
    for host in sample.hosts:
        row = summarize(host)
        util = "–" if row.util_pct is None else f"{row.util_pct}%"
        server = "–" if row.server is None else fit(row.server, 60)
        if row.server_state not in (None, ENDPOINT_STATE_UP):
            server = f"{fit(row.server_state or '', 12)} {server}"
        lines.append(
            f"{fit(row.name, 24):<24} {row.gpus:>4} {baseline_text(row):>5} {memory_text(row):>11} "
            f"{util:>4} {hottest_text(row):<16} {xid_text(row):<9} {state_text(row):<12} {server}"
        )
        if row.error:
            lines.append(f"  ! {fit(row.error, 200)}")
        for finding in host.snapshot.findings[:MAX_FINDINGS_LISTED]:
            if finding.kind != "xid":
                lines.append(f"  ! {fit(finding.kind, 20)}: {fit(finding.detail, 300)}")
        for index, instances in sorted(host.mig.items()):
            for instance in instances:
                used = "–" if instance.memory_used_mib is None else str(instance.memory_used_mib)
                total = "–" if instance.memory_total_mib is None else str(instance.memory_total_mib)
                profile = fit(instance.profile or "?", 20)
                lines.append(
                    f"  GPU{index} MIG {fit(instance.instance_id, 8)} ({profile}) {used} / {total} MiB"
                )
    return lines


def build_fleet_screen(args: argparse.Namespace, clock: Callable[[], float] | None = None) -> FleetScreen:
    """The fleet view for these arguments (``args.fleet`` set by ``fleet_options.resolve``)."""
    from gputui.ui.screens.fleet import FleetScreen

    choice: FleetChoice = args.fleet
    source = PrometheusSource(choice.settings)
    baselines = _baselines(args, sys.stderr)
    return FleetScreen(
        lambda: analyze_fleet(source.sample(), baselines, choice.settings.stale_after_s, pace),
        source_name=f"prometheus {shown_url(choice.settings.url)}",
        ssh_target=partial(ssh_target_for, choice.ssh_target),
        refresh_s=choice.refresh_s,
        stale_after_s=choice.settings.stale_after_s,
        clock=clock or time.time,
    )


def run_fleet_snapshot(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """One query; every host printed as a table, or as the JSON document of ``gputui snapshot --json``.

    Exit 2 with one line on stderr when Prometheus cannot be asked or no host matched; with ``--json`` the
    document is printed even then (its ``source.error`` says why).
    """
    out = out or sys.stdout
    err = err or sys.stderr
    safe_streams(out, err)
    choice: FleetChoice = args.fleet
    source = PrometheusSource(choice.settings)
    sample, error = _read(source, _baselines(args, err))
    status = EXIT_CLEAN
    if error is not None:
        print(f"gputui: {visible(error, 400)}", file=err)
        status = EXIT_ERROR
    elif sample is not None and not sample.hosts:
        print(_no_hosts_line(choice), file=err)
        status = EXIT_ERROR
    if getattr(args, "json", False):
        document = _document(choice, source, sample, error)
        out.write(json_visible(document, indent=1) + "\n")
    elif sample is not None and sample.hosts:
        out.write("\n".join(format_fleet_table(sample)) + "\n")
        where = shown_url(choice.settings.url)
        out.write(f"{len(sample.hosts)} hosts from prometheus {where}; {verdict_note(sample)}\n")
    out.flush()
    return status


def host_status(snapshot: HostSnapshot) -> int:
    """The exit status of the host's verdict (``core.verdict.levels``): 0 clean, 1 not clean or not ready,
    2 cannot tell (no current data, a GPU without figure)."""
    return exit_code(snapshot.verdict)


def fleet_status(sample: FleetSample | None) -> int:
    """The fleet's exit status: cannot tell anywhere wins, then not clean anywhere (as ``gputui check``)."""
    if sample is None or not sample.hosts:
        return EXIT_ERROR
    statuses = {host_status(h.snapshot) for h in sample.hosts}
    if EXIT_ERROR in statuses:
        return EXIT_ERROR
    return EXIT_NOT_CLEAN if EXIT_NOT_CLEAN in statuses else EXIT_CLEAN


def format_fleet_check(sample: FleetSample, marks: tuple[str, str]) -> list[str]:
    """A line for each host that is not clean (at most ``MAX_HOSTS_LISTED``), then the fleet's summary."""
    good, bad = marks
    lines: list[str] = []
    listed = 0
    gpus_at = gpus_total = hosts_clean = 0
    for host in sample.hosts:
        verdict = host.snapshot.verdict
        status = host_status(host.snapshot)
        gpus_total += len(host.snapshot.gpus)
        if verdict is not None and verdict.known:
            gpus_at += verdict.gpus_at_baseline
        if status == EXIT_CLEAN:
            hosts_clean += 1
            continue
        listed += 1
        if listed > MAX_HOSTS_LISTED:
            continue
        word = CANNOT_TELL_WORDS if verdict is None or status == EXIT_ERROR else verdict.level
        reasons = "; ".join(verdict.reasons) if verdict is not None else "no verdict"
        lines.append(f"{bad} {fit(host.name, 40)}  {word}: {fit(reasons, 400)}")
    if listed > MAX_HOSTS_LISTED:
        lines.append(f"{bad} and {listed - MAX_HOSTS_LISTED} more hosts not clean")
    total = len(sample.hosts)
    mark = good if hosts_clean == total else bad
    word = CLEAN if hosts_clean == total else NOT_CLEAN
    lines.append(
        f"{mark} {word}: {hosts_clean}/{total} hosts, {gpus_at}/{gpus_total} GPUs at baseline"
        f" ({verdict_note(sample)})"
    )
    return lines


def run_fleet_check(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The memory-only clean-slate verdict over the fleet; exit 0 clean, 1 not clean, 2 cannot tell.

    With ``--wait`` it asks again every ``CHECK_POLL_S`` until every host is clean or the deadline passed
    (a Prometheus that is down meanwhile is asked again too; its last error decides if it never answers).
    """
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    safe_streams(out, err)
    choice: FleetChoice = args.fleet
    source = PrometheusSource(choice.settings)
    baselines = _baselines(args, err)
    started = time.monotonic()
    deadline = started + (args.wait or 0.0)
    if args.wait is not None and not args.json:
        print(f"waiting up to {args.wait:g} s for a clean slate on the fleet…", file=err)
    while True:
        sample, error = _read(source, baselines)
        if sample is not None and fleet_status(sample) == EXIT_CLEAN:
            waited: float | None = time.monotonic() - started
            break
        remaining = deadline - time.monotonic()
        if args.wait is None or remaining <= 0:
            waited = None
            break
        time.sleep(min(CHECK_POLL_S, remaining))
    status = EXIT_ERROR if error is not None else fleet_status(sample)
    if error is not None:
        print(f"gputui: {visible(error, 400)}", file=err)
    elif sample is not None and not sample.hosts:
        print(_no_hosts_line(choice), file=err)
    if args.json:
        document = _document(choice, source, sample, error)
        if args.wait is not None:
            document["clean_after_s"] = waited
        print(json_visible(document, indent=1), file=out)
        return status
    if sample is not None and sample.hosts:
        for line in format_fleet_check(sample, marks(out)):
            print(line, file=out)
    if args.wait is not None:
        last = wait_line(waited, args.wait, status != EXIT_ERROR)
        if last is not None:
            print(last, file=out)
    return status
