"""``gputui bundle TARGET -o FILE.tar.gz``: what an incident review needs about one host, in one file.

Made from one whole-host sample judged as ``check`` judges it, the audit log, the newest recording that has
the host, and the versions. Every command line goes through the collector's redaction once more on the way
in (``agent.argv_secrets``: the one rule table every view uses), and the environment is read for the named
keys of ``ENVIRONMENT_KEYS`` only, each value through the same rule. ``BUNDLE_FILES`` lists what it holds.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import tarfile
import time

from gputui import __version__
from gputui.agent import safefile
from gputui.agent.argv_secrets import redact_argv
from gputui.commands.check import format_check
from gputui.commands.inputs.baselines import accepted_xids, resolve_baselines
from gputui.commands.inputs.targets import LOCAL_TARGET
from gputui.commands.output.snapshot_document import document
from gputui.commands.output.streams import link_error_line
from gputui.commands.snapshot import format_table, take_snapshot
from gputui.core.link import LinkError
from gputui.core.model import HostSnapshot, plain, replace
from gputui.core.recording import Recording, RecordingError, recordings_folder, redact_line, write_excerpt
from gputui.core.store import load_watched_ports, saved
from gputui.core.text import clock_time, json_visible, visible
from gputui.core.verdict import exit_code, fitness_summary, judge

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

EXIT_OK = 0
EXIT_ERROR = 2
AUDIT_READ_MAX_BYTES = 64 << 20
ENVIRONMENT_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_MPS_PIPE_DIRECTORY",
    "SLURM_JOB_ID",
)
"""The environment variables of gputui's own process a bundle names (nothing else of it is read)."""
BUNDLE_FILES = (
    ("MANIFEST.txt", "what each file is, when and where the bundle was made"),
    ("snapshot.json", "the host's sample as gputui snapshot --json prints it"),
    ("snapshot.txt", "the same as gputui snapshot prints it"),
    ("check.json", "the clean-slate verdict, its three facts, reasons and findings, and check's exit status"),
    ("check.txt", "the same as gputui check prints it"),
    ("fitness.json", "each GPU's fitness figures and Xid history, and where the kernel log was read"),
    ("fitness.txt", "each GPU's fitness in one line, then its kernel-log (Xid) lines"),
    ("audit.jsonl", "the audit-log lines of the host from the last hours (kills, resets, removals)"),
    ("recording.gtrec", "the last minutes of the newest recording that has the host (when one exists)"),
    ("versions.json", "driver, NVML, CUDA, collector, gputui and Python versions, the collection mode"),
    ("environment.json", "the named GPU environment variables of gputui's process, redacted"),
)
"""Every file a bundle may hold, with what it is: the manifest and the README list them from here."""


def redacted(snapshot: HostSnapshot) -> HostSnapshot:
    """``snapshot`` with every command line through the redaction (the collector did it once already)."""
    procs = tuple(replace(p, cmdline=tuple(redact_argv(list(p.cmdline)))) for p in snapshot.processes)
    return replace(snapshot, processes=procs)


def _sample(target: str, args: argparse.Namespace) -> HostSnapshot:
    """One whole-host sample judged as ``check`` judges it (its baselines and watched ports)."""
    snapshot = take_snapshot(target, args)
    baselines = resolve_baselines(
        target, args.baseline_mib, args.tolerance_mib, bool(args.demo), sys.stderr, accepted_xids(args)
    )
    ports = () if args.demo else load_watched_ports(target, snapshot.boot_id)
    return redacted(judge(snapshot, baselines, watched_ports=ports, one_shot=True))


def _fitness(snapshot: HostSnapshot) -> tuple[dict[str, Any], list[str]]:
    gpus = []
    lines = []
    for gpu in snapshot.gpus:
        fitness = None if gpu.fitness is None else plain(gpu.fitness)
        gpus.append({"index": gpu.index, "uuid": gpu.uuid, "name": gpu.name, "fitness": fitness})
        lines.append(f"GPU{gpu.index} {fitness_summary(gpu) or 'fitness not read'}")
        for event in () if gpu.fitness is None else gpu.fitness.xids:
            cleared = f" (cleared: {event.cleared})" if event.cleared else ""
            lines.append(
                f"  {clock_time(event.time, snapshot.time)} Xid {event.xid} [{event.source}]"
                f" {event.detail}{cleared}"
            )
    note = snapshot.kernel_log
    if note is not None:
        lines.append(f"kernel log: {note.source or 'not read'}" + (f" ({note.error})" if note.error else ""))
        lines.extend(
            f"  {clock_time(e.time, snapshot.time)} Xid {e.xid} at {e.pci} {e.detail}" for e in note.unmatched
        )
    return {"gpus": gpus, "kernel_log": None if note is None else plain(note)}, lines


def _audit_lines(target: str, since_s: float) -> list[str]:
    path = os.path.join(saved.state_dir(), saved.AUDIT_FILE)
    try:
        data = safefile.read_bytes(path, AUDIT_READ_MAX_BYTES) or b""
    except safefile.UnsafeFile as exc:
        print(f"gputui: warning: audit log not read: {visible(str(exc), 300)}", file=sys.stderr)
        return []
    kept = []
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        at = line.get("time") if isinstance(line, dict) else None
        if line.get("host") == target and isinstance(at, (int, float)) and at >= since_s:
            kept.append(json_visible(redact_line(line), separators=(",", ":")))
    return kept


def newest_recording(target: str, chosen: str | None) -> Recording | None:
    """The recording named with ``--recording``, else the newest in the recordings folder with ``target``."""
    if chosen is not None:
        return Recording.load(chosen)
    folder = recordings_folder()
    try:
        names = sorted(
            (entry for entry in os.scandir(folder) if entry.name.endswith(".gtrec") and entry.is_file()),
            key=lambda entry: entry.stat().st_mtime,
            reverse=True,
        )
    except OSError:
        return None
    for entry in names:
        try:
            recording = Recording.load(entry.path)
        except RecordingError:
            continue
        if recording.count(target):
            return recording
    return None


def _versions(snapshot: HostSnapshot, target: str) -> dict[str, Any]:
    return {
        "gputui": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "driver": snapshot.driver_version,
        "cuda_driver": snapshot.cuda_driver_version,
        "nvml": _nvml_version() if target == LOCAL_TARGET else None,
        "collector": snapshot.agent_version,
        "mode": snapshot.mode,
    }


def _nvml_version() -> str | None:
    """NVML's own version on this host (None where the library cannot say)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetNVMLVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no library, no driver, a fake: the version is not known
        return None
    return visible(version.decode() if isinstance(version, bytes) else str(version), 40)


def _environment() -> dict[str, str]:
    found = {key: os.environ[key] for key in ENVIRONMENT_KEYS if key in os.environ}
    return {key: redact_argv([f"{key}={value}"])[0].partition("=")[2] for key, value in found.items()}


class _Tar:
    """The members of the bundle, each from bytes, under one folder."""

    def __init__(self, archive: tarfile.TarFile, folder: str, now_s: float) -> None:
        self.archive, self.folder, self.now_s = archive, folder, now_s
        self.names: list[str] = []

    def add(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(f"{self.folder}/{name}")
        info.size, info.mtime, info.mode = len(data), int(self.now_s), 0o600
        self.archive.addfile(info, io.BytesIO(data))
        self.names.append(name)

    def json(self, name: str, value: Any) -> None:
        self.add(name, (json_visible(value, indent=1) + "\n").encode())

    def text(self, name: str, lines: list[str]) -> None:
        self.add(name, ("\n".join(lines) + "\n").encode())


def run(args: argparse.Namespace) -> int:
    """Write the bundle; returns the exit status."""
    targets = list(args.targets) or [LOCAL_TARGET]
    if len(targets) != 1:
        print("gputui: bundle takes one host", file=sys.stderr)
        return EXIT_ERROR
    target = targets[0]
    now_s = time.time()
    try:
        snapshot = _sample(target, args)
    except LinkError as exc:
        print(link_error_line(target, exc), file=sys.stderr)
        return EXIT_ERROR
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(args.output, flags, 0o600)
    except OSError as exc:
        why = "exists already (name a new file)" if isinstance(exc, FileExistsError) else exc.strerror
        print(f"gputui: {visible(args.output, 200)}: {why}", file=sys.stderr)
        return EXIT_ERROR
    excerpt_path = f"{args.output}.recording.tmp"
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as archive:
            tar = _Tar(archive, f"gputui-bundle-{visible(target, 60).replace('/', '_')}", now_s)
            _fill(tar, target, snapshot, args, excerpt_path, now_s)
    except OSError as exc:
        print(f"gputui: {visible(args.output, 200)}: cannot write ({exc.strerror or exc})", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if os.path.exists(excerpt_path):
            os.unlink(excerpt_path)
    print(f"gputui: {visible(args.output, 200)}: {', '.join(tar.names)}", file=sys.stderr)
    return EXIT_OK


def _fill(
    tar: _Tar, target: str, snapshot: HostSnapshot, args: argparse.Namespace, excerpt_path: str, now_s: float
) -> None:
    recording_line = "recording.gtrec: no recording has this host"
    try:
        recording = newest_recording(target, args.recording)
    except RecordingError as exc:
        recording, recording_line = None, f"recording.gtrec: {exc}"
    tar.json("snapshot.json", document([snapshot]))
    tar.text("snapshot.txt", format_table(snapshot, io.StringIO()))
    verdict = snapshot.verdict
    tar.json(
        "check.json",
        {
            "target": target,
            "exit_status": exit_code(verdict),
            "verdict": None if verdict is None else verdict.to_dict(),
            "findings": [plain(f) for f in snapshot.findings],
        },
    )
    tar.text("check.txt", format_check(snapshot, io.StringIO(), header=True))
    fitness, fitness_lines = _fitness(snapshot)
    tar.json("fitness.json", fitness)
    tar.text("fitness.txt", fitness_lines)
    tar.add(
        "audit.jsonl",
        "".join(line + "\n" for line in _audit_lines(target, now_s - args.audit_hours * 3600)).encode(),
    )
    if recording is not None and recording.count(target):
        since_s = recording.end_s - args.minutes * 60
        samples = write_excerpt(recording, excerpt_path, [target], since_s)
        with open(excerpt_path, "rb") as excerpt:
            tar.add("recording.gtrec", excerpt.read())
        recording_line = f"recording.gtrec: {samples} samples from {recording.path}"
    tar.json("versions.json", _versions(snapshot, target))
    tar.json("environment.json", _environment())
    manifest = [
        f"gputui {__version__} incident bundle of {visible(target, 100)} ({snapshot.hostname or '?'}),"
        f" made {time.strftime('%Y-%m-%d %H:%M:%S %z', time.localtime(now_s))}",
        "",
        *(f"{name:<18} {what}" for name, what in BUNDLE_FILES),
        "",
        recording_line,
        "Command lines and environment values are redacted (secrets read ***).",
    ]
    tar.text("MANIFEST.txt", manifest)
