"""``gputui snapshot``: one full sample of each target, printed as a compact table or as JSON."""

from __future__ import annotations

import argparse
import sys

from gputui.agent.protocol import ENDPOINT_STATE_UP
from gputui.commands.inputs.baselines import accepted_xids, resolve_baselines
from gputui.commands.inputs.targets import default_targets, open_link, options_from_args
from gputui.commands.output.streams import link_error_line
from gputui.commands.output.verdict_text import verdict_lines
from gputui.core.link import LinkError, one_shot_sample
from gputui.core.model import EndpointSample, HostSnapshot
from gputui.core.store import load_watched_ports
from gputui.core.text import DASH, clock_time, command_display, fit, json_visible, visible
from gputui.core.verdict import fitness_summary, judge, no_data

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

EXIT_OK = 0
EXIT_ERROR = 2
COMMAND_WIDTH = 80
ENDPOINT_URL_WIDTH = 60
ENDPOINT_DETAIL_WIDTH = 60


def _analyze(snapshot: HostSnapshot, args: argparse.Namespace, err: TextIO) -> HostSnapshot:
    """Server states, findings and the verdict by the engine ``gputui check`` uses, against the same
    baselines and the same watched ports (read only: only ``check`` forgets a port it sees free)."""
    demo = bool(getattr(args, "demo", False))
    baselines = resolve_baselines(
        snapshot.target, args.baseline_mib, args.tolerance_mib, demo, err, accepted_xids(args)
    )
    ports = () if demo else load_watched_ports(snapshot.target, snapshot.boot_id)
    return judge(snapshot, baselines, watched_ports=ports, one_shot=True)


def take_snapshot(target: str, args: argparse.Namespace) -> HostSnapshot:
    """Open a link to ``target``, take one full sample (processes included) and close it.

    Raises:
        LinkError: the host could not be reached or answered badly (one readable line).
    """
    options = options_from_args(args, one_shot=True).for_target(target)
    link = open_link(target, options, demo=bool(getattr(args, "demo", False)))
    try:
        link.open()
        if getattr(args, "probe", False):
            from gputui.commands.check import with_probe

            return with_probe(link, target, args)
        return one_shot_sample(link, target)
    finally:
        link.close()


def _num(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return DASH
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def format_health_line(sample: EndpointSample) -> str:
    """One endpoint: URL, state, HTTP code, latency and since when the state holds (detail when not UP)."""
    url = fit(sample.url, ENDPOINT_URL_WIDTH)
    state = fit(sample.state, 10) if sample.state else DASH
    code = str(sample.code) if sample.code is not None else DASH
    latency = f"{sample.latency_ms:.0f} ms" if sample.latency_ms is not None else DASH
    line = f"  {url:<40} {state:<9} {code:>3} {latency:>8}  since {clock_time(sample.since)}"
    if sample.detail and sample.state != ENDPOINT_STATE_UP:
        line += f"  {fit(sample.detail, ENDPOINT_DETAIL_WIDTH)}"
    metrics = sample.metrics or {}
    if metrics.get("engine"):
        kv = metrics.get("kv_cache_usage")
        line += (
            f"\n    {fit(str(metrics['engine']), 10)}: {_num(metrics.get('running'))} running, "
            f"{_num(metrics.get('waiting'))} waiting, KV {_num(None if kv is None else kv * 100, '%')}"
        )
    elif sample.metrics_error:
        line += f"\n    metrics: {fit(sample.metrics_error, ENDPOINT_DETAIL_WIDTH)}"
    return line


def format_table(snapshot: HostSnapshot, stream: TextIO | None = None) -> list[str]:
    """The compact text form of one snapshot: a header, one line per GPU, the GPU processes, health, then
    the verdict block exactly as ``gputui check`` prints it (``verdict_text``); ``stream`` picks its marks."""
    host = fit(snapshot.hostname or DASH, 60)
    header = f"{fit(snapshot.target, 60)} ({host})"
    if snapshot.driver_version:
        header += f"  driver {fit(snapshot.driver_version, 30)}"
    if snapshot.mode:
        header += f"  mode {fit(snapshot.mode, 10)}"
    lines = [header]
    if snapshot.error:
        lines.append(f"  error: {fit(snapshot.error, 200)}")
    if snapshot.gpus:
        lines.append(
            f"{'GPU':>3}  {'NAME':<30} {'USED / TOTAL MiB':>17} {'UTIL':>5} {'TEMP':>5} {'POWER':>13}"
        )
    for gpu in snapshot.gpus:
        name = fit(gpu.name or DASH, 30)
        if gpu.error:
            lines.append(f"{gpu.index:>3}  {name:<30} error: {fit(gpu.error, 80)}")
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
            user = fit(proc.user, 16) if proc is not None and proc.user else DASH
            command: str
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
    if snapshot.endpoints:
        lines.append("HEALTH")
        lines.extend(format_health_line(sample) for sample in snapshot.endpoints)
    fitness_lines = [(gpu.index, fitness_summary(gpu)) for gpu in snapshot.gpus]
    if any(text is not None for _index, text in fitness_lines):
        lines.append("GPU FITNESS")
        lines.extend(f"  GPU{index} {text}" for index, text in fitness_lines if text is not None)
    if snapshot.verdict is not None:
        lines.append("CLEAN SLATE")
        lines.extend(verdict_lines(snapshot, sys.stdout if stream is None else stream))
    return lines


_PROCESSES_AT = "\0processes {}\0"
"""Stands for a host's process list while the rest is written (no text of the model holds a NUL)."""


def document_text(doc: dict[str, Any]) -> str:
    """The JSON document indented by one, each process entry on a line of its own.

    Python's JSON writer is C code without indentation only: a job of hundreds of members written with it
    one entry at a time costs a fraction of indenting every key of every entry.
    """
    lists: list[list[Any]] = []
    hosts = []
    for entry in doc.get("hosts", []):
        processes = entry.get("processes")
        if isinstance(processes, list) and processes:
            entry = dict(entry, processes=_PROCESSES_AT.format(len(lists)))
            lists.append(processes)
        hosts.append(entry)
    text = json_visible(dict(doc, hosts=hosts), indent=1)
    pieces: list[str] = []
    for index, processes in enumerate(lists):
        before, _placeholder, text = text.partition(json_visible(_PROCESSES_AT.format(index)))
        rows = ",\n    ".join(json_visible(proc, separators=(", ", ": ")) for proc in processes)
        pieces += [before, "[\n    ", rows, "\n   ]"]
    return "".join(pieces) + text


def run_snapshot(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Sample every target once and print the result; returns the exit status.

    Exit 2 when a host could not be reached or reports a host-level error with no GPU (no driver, no NVML);
    the cause is one line on stderr. With ``--json`` the document is printed even then (errors are data).
    """
    if getattr(args, "fleet", None) is not None:
        from gputui.commands.fleet_report import run_fleet_snapshot

        return run_fleet_snapshot(args, out, err)
    out = out or sys.stdout
    err = err or sys.stderr
    targets = default_targets(list(getattr(args, "targets", []) or []), bool(getattr(args, "demo", False)))
    snapshots: list[HostSnapshot] = []
    unreachable: list[HostSnapshot] = []
    """Hosts that could not be sampled: in the JSON document (errors are data), said on stderr in text."""
    status = EXIT_OK
    for target in targets:
        try:
            snapshot = take_snapshot(target, args)
        except LinkError as exc:
            print(link_error_line(target, exc), file=err)
            status = EXIT_ERROR
            unreachable.append(no_data(target, visible(str(exc) or type(exc).__name__, 300), None))
            continue
        except Exception as exc:  # anything else a transport raises: still one line, never a traceback
            cause = RuntimeError(f"{type(exc).__name__}: {exc}")
            print(link_error_line(target, cause), file=err)
            status = EXIT_ERROR
            unreachable.append(no_data(target, visible(str(cause), 300), None))
            continue
        if snapshot.error and not snapshot.gpus:
            print(f"gputui: {visible(target, 60)}: {fit(snapshot.error, 300)}", file=err)
            status = EXIT_ERROR
        snapshots.append(_analyze(snapshot, args, err))
    if getattr(args, "json", False):
        from gputui.commands.output.snapshot_document import document

        order = {target: i for i, target in enumerate(targets)}
        every = sorted(snapshots + unreachable, key=lambda s: order.get(s.target, len(order)))
        all_processes = bool(getattr(args, "all_processes", False))
        out.write(document_text(document(every, all_processes)) + "\n")
    else:
        for i, snapshot in enumerate(snapshots):
            if snapshot.error and not snapshot.gpus:
                continue  # already said on stderr
            if i:
                out.write("\n")
            out.write("\n".join(format_table(snapshot, out)) + "\n")
    out.flush()
    return status
