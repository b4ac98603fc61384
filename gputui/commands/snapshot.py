"""``gputui snapshot``: one full sample of each target, printed as a compact table or as JSON."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from gputui.agent.protocol import HEALTH_STATE_UP
from gputui.commands.check import link_error_line, resolve_baselines
from gputui.commands.targets import default_targets, open_link, options_from_args
from gputui.core.analysis import analyze
from gputui.core.commandline import command_display
from gputui.core.model import HealthSample, HostSnapshot, snapshots_document
from gputui.core.servers import judge_once
from gputui.core.textsafe import json_visible, visible
from gputui.transports.base import LinkError, one_shot_sample

EXIT_OK = 0
EXIT_ERROR = 2
DASH = "–"
COMMAND_WIDTH = 80
HEALTH_URL_WIDTH = 60
HEALTH_DETAIL_WIDTH = 60


def _analyze(snapshot: HostSnapshot, args: argparse.Namespace, err: TextIO) -> HostSnapshot:
    """Findings and the clean-slate verdict, against the same baselines ``gputui check`` uses."""
    baselines = resolve_baselines(
        snapshot.target, args.baseline_mib, args.tolerance_mib, bool(getattr(args, "demo", False)), err
    )
    return analyze(snapshot, baselines)


def take_snapshot(target: str, args: argparse.Namespace) -> HostSnapshot:
    """Open a link to ``target``, take one full sample (processes included) and close it.

    Raises:
        LinkError: the host could not be reached or answered badly (one readable line).
    """
    options = options_from_args(args).for_target(target)
    link = open_link(target, options, demo=bool(getattr(args, "demo", False)))
    try:
        link.open()
        return judge_once(one_shot_sample(link, target))
    finally:
        link.close()


def _num(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return DASH
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def _clock(epoch_s: float | None) -> str:
    """HH:MM:SS in local time, or "–"."""
    if epoch_s is None:
        return DASH
    try:
        return time.strftime("%H:%M:%S", time.localtime(epoch_s))
    except (OverflowError, OSError, ValueError):
        return DASH


def format_health_line(sample: HealthSample) -> str:
    """One endpoint: URL, state, HTTP code, latency and since when the state holds (detail when not UP)."""
    url = visible(sample.url, HEALTH_URL_WIDTH)
    state = visible(sample.state, 10) if sample.state else DASH
    code = str(sample.code) if sample.code is not None else DASH
    latency = f"{sample.latency_ms:.0f} ms" if sample.latency_ms is not None else DASH
    line = f"  {url:<40} {state:<9} {code:>3} {latency:>8}  since {_clock(sample.since)}"
    if sample.detail and sample.state != HEALTH_STATE_UP:
        line += f"  {visible(sample.detail, HEALTH_DETAIL_WIDTH)}"
    metrics = sample.metrics or {}
    if metrics.get("engine"):
        kv = metrics.get("kv_cache_usage")
        line += (
            f"\n    {visible(str(metrics['engine']), 10)}: {_num(metrics.get('running'))} running, "
            f"{_num(metrics.get('waiting'))} waiting, KV {_num(None if kv is None else kv * 100, '%')}"
        )
    elif sample.metrics_error:
        line += f"\n    metrics: {visible(sample.metrics_error, HEALTH_DETAIL_WIDTH)}"
    return line


def format_table(snapshot: HostSnapshot) -> list[str]:
    """The compact text form of one snapshot: a header, one line per GPU, the GPU processes, health."""
    host = visible(snapshot.hostname or DASH, 60)
    header = f"{visible(snapshot.target, 60)} ({host})"
    if snapshot.driver_version:
        header += f"  driver {visible(snapshot.driver_version, 30)}"
    if snapshot.mode:
        header += f"  mode {visible(snapshot.mode, 10)}"
    lines = [header]
    if snapshot.error:
        lines.append(f"  error: {visible(snapshot.error, 200)}")
    if snapshot.gpus:
        lines.append(
            f"{'GPU':>3}  {'NAME':<30} {'USED / TOTAL MiB':>17} {'UTIL':>5} {'TEMP':>5} {'POWER':>13}"
        )
    for gpu in snapshot.gpus:
        name = visible(gpu.name or DASH, 30)
        if gpu.error:
            lines.append(f"{gpu.index:>3}  {name:<30} error: {visible(gpu.error, 80)}")
            continue
        memory = f"{_num(gpu.memory_used_mib)} / {_num(gpu.memory_total_mib)}"
        power = f"{_num(gpu.power_w, 'W')} / {_num(gpu.power_limit_w, 'W')}"
        lines.append(
            f"{gpu.index:>3}  {name:<30} {memory:>17} {_num(gpu.utilization_pct, '%'):>5}"
            f" {_num(gpu.temperature_c, 'C'):>5} {power:>13}"
        )
    rows: list[tuple[int, str, str, str]] = []
    for gpu in snapshot.gpus:
        for gpu_proc in gpu.processes:
            proc = snapshot.process(gpu_proc.pid) if gpu_proc.visible else None
            user = visible(proc.user, 16) if proc is not None and proc.user else DASH
            if proc is not None:
                command = command_display(proc.cmdline, proc.name, COMMAND_WIDTH, proc.cmdline_truncated)
            else:
                command = "(not visible here)" if not gpu_proc.visible else DASH
            mib = f"{gpu.index}:{_num(gpu_proc.used_mib)}"
            rows.append((gpu_proc.pid, user, mib, command))
    if rows:
        lines.append(f"{'PID':>8}  {'USER':<16} {'GPU:MiB':>10}  COMMAND")
        for pid, user, mib, command in rows:
            lines.append(f"{pid:>8}  {user:<16} {mib:>10}  {command}")
    if snapshot.health:
        lines.append("HEALTH")
        lines.extend(format_health_line(sample) for sample in snapshot.health)
    verdict = snapshot.verdict
    if verdict is not None:
        state = "clean" if verdict.clean else ("unknown" if not verdict.known else "NOT clean")
        lines.append(f"clean slate: {state}")
        for reason in verdict.reasons[:10]:
            lines.append(f"  - {visible(reason, 200)}")
    for finding in snapshot.findings[:20]:
        lines.append(f"! {visible(finding.kind, 20)}: {visible(finding.detail, 200)}")
    return lines


def run_snapshot(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Sample every target once and print the result; returns the exit status.

    Exit 2 when a host could not be reached or reports a host-level error with no GPU (no driver, no NVML);
    the cause is one line on stderr. With ``--json`` the document is printed even then (errors are data).
    """
    if getattr(args, "fleet", None) is not None:
        from gputui.commands.fleet import run_fleet_snapshot

        return run_fleet_snapshot(args, out, err)
    out = out or sys.stdout
    err = err or sys.stderr
    targets = default_targets(list(getattr(args, "targets", []) or []), bool(getattr(args, "demo", False)))
    snapshots: list[HostSnapshot] = []
    status = EXIT_OK
    for target in targets:
        try:
            snapshot = take_snapshot(target, args)
        except LinkError as exc:
            print(link_error_line(target, exc), file=err)
            status = EXIT_ERROR
            continue
        except Exception as exc:  # anything else a transport raises: still one line, never a traceback
            print(link_error_line(target, RuntimeError(f"{type(exc).__name__}: {exc}")), file=err)
            status = EXIT_ERROR
            continue
        if snapshot.error and not snapshot.gpus:
            print(f"gputui: {visible(target, 60)}: {visible(snapshot.error, 300)}", file=err)
            status = EXIT_ERROR
        snapshots.append(_analyze(snapshot, args, err))
    if getattr(args, "json", False):
        out.write(json_visible(snapshots_document(snapshots), indent=1) + "\n")
    else:
        for i, snapshot in enumerate(snapshots):
            if snapshot.error and not snapshot.gpus:
                continue  # already said on stderr
            if i:
                out.write("\n")
            out.write("\n".join(format_table(snapshot)) + "\n")
    out.flush()
    return status
