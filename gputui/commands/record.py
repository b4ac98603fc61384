"""``gputui record TARGET… -o FILE``: every sample of the targets, judged as the TUI judges it, to a file.

One thread per host streams its link (reconnecting with a jittered backoff, as the TUI does), judges each
sample with the engine the TUI uses (findings, verdict, server states) and hands it to the recording's writer;
another follows the audit log, so a ``gputui kill`` or reset run meanwhile is in the recording with its audit
lines. Ctrl-C, SIGTERM or ``--duration`` ends it; the file is closed cleanly and one line says what it holds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from gputui.agent import safefile
from gputui.commands.grammar.fleet import expand_targets
from gputui.commands.inputs.baselines import accepted_xids, resolve_baselines, server_watch
from gputui.commands.inputs.targets import DEMO_TARGETS, LOCAL_TARGET, open_link, options_from_args
from gputui.commands.output.streams import link_error_line
from gputui.core.link import HostLink, LinkError, LinkOptions
from gputui.core.recording import EVENT_AUDIT, EVENT_ERROR, RecordingError, RecordingWriter
from gputui.core.store import Config, saved
from gputui.core.text import visible
from gputui.core.verdict import judge
from gputui.transports.reconnect import Backoff, worth_retrying

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

EXIT_OK = 0
EXIT_ERROR = 2
NEXT_SNAPSHOT_WAIT_S = 1.0
AUDIT_POLL_S = 1.0
AUDIT_READ_MAX_BYTES = 64 << 20
DEMO_WEDGE_AFTER_S = 6.0


def _targets(args: argparse.Namespace) -> list[str]:
    config = args.config if isinstance(getattr(args, "config", None), Config) else Config()
    targets = expand_targets(list(args.targets), None, config)
    if targets:
        return targets
    return list(DEMO_TARGETS) if args.demo else [LOCAL_TARGET]


def _link_factory(args: argparse.Namespace, options: LinkOptions) -> Any:
    def make(target: str) -> HostLink:
        if args.demo:
            from gputui.transports.sim import SimLink

            return SimLink(target, options.for_target(target), wedged_at_s=DEMO_WEDGE_AFTER_S, gpu_fault=True)
        return open_link(target, options)

    return make


class HostRecorder:
    """Streams one host into the writer from a daemon thread of its own, until ``stop`` is set."""

    def __init__(
        self,
        target: str,
        make_link: Any,
        writer: RecordingWriter,
        args: argparse.Namespace,
        stop: threading.Event,
    ) -> None:
        self.target = target
        self._make_link = make_link
        self._writer = writer
        self._stop = stop
        self._servers = server_watch(args)  # the config's stall and spin windows, as the TUI's
        self._baselines = resolve_baselines(
            target, args.baseline_mib, args.tolerance_mib, bool(args.demo), sys.stderr, accepted_xids(args)
        )
        self.link: HostLink | None = None
        self.halted: str | None = None
        """The error retrying cannot fix (a host key, authentication), said once."""

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"record-{self.target[:20]}", daemon=True).start()

    def _run(self) -> None:
        backoff = Backoff()
        while not self._stop.is_set():
            link = self._make_link(self.target)
            self.link = link
            try:
                link.open()
                while not self._stop.is_set():
                    snapshot = link.next_snapshot(NEXT_SNAPSHOT_WAIT_S)
                    if snapshot is None or self._stop.is_set():
                        continue
                    judged = judge(snapshot, self._baselines, servers=self._servers, now=snapshot.time)
                    self._writer.sample(self.target, judged)
                    backoff.reset()
            except LinkError as exc:
                if self._stop.is_set():
                    return  # closed because the recording ends
                line = visible(str(exc) or type(exc).__name__, 300)
                self._writer.event(EVENT_ERROR, line, self.target)
                if not worth_retrying(exc):
                    self.halted = link_error_line(self.target, exc)
                    print(self.halted, file=sys.stderr)
                    return
            except Exception as exc:  # noqa: BLE001 - one bad sample must not end the recording of this host
                self._writer.event(EVENT_ERROR, visible(f"{type(exc).__name__}: {exc}", 300), self.target)
            finally:
                self.link = None
                _close(link)
            self._stop.wait(backoff.next_delay_s())


def _close(link: HostLink) -> None:
    threading.Thread(target=link.close, name="record-close", daemon=True).start()


class AuditFollower:
    """Hands the writer every audit-log line written for the recorded hosts after it started."""

    def __init__(self, targets: list[str], writer: RecordingWriter, stop: threading.Event) -> None:
        self._targets = set(targets)
        self._writer = writer
        self._stop = stop
        self._path = os.path.join(saved.state_dir(), saved.AUDIT_FILE)
        self._offset = self._size()

    def _size(self) -> int:
        try:
            return os.stat(self._path).st_size
        except OSError:
            return 0

    def start(self) -> None:
        threading.Thread(target=self._run, name="record-audit", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(AUDIT_POLL_S):
            self.poll()

    def poll(self) -> None:
        size = self._size()
        if size <= self._offset:
            self._offset = min(self._offset, size)
            return
        try:
            data = safefile.read_bytes(self._path, AUDIT_READ_MAX_BYTES) or b""
        except safefile.UnsafeFile:
            return
        fresh, self._offset = data[self._offset :], len(data)
        for raw in fresh.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("host") in self._targets:
                signal = line.get("signal") or ""
                text = f"{line.get('stage')} {signal} pid {line.get('pid')}: {line.get('result')}"
                self._writer.event(EVENT_AUDIT, visible(text, 200), str(line["host"]), line)


def run(args: argparse.Namespace) -> int:
    """Record until stopped; returns the exit status."""
    targets = _targets(args)
    if len(set(targets)) != len(targets):
        print("gputui: a target is named twice", file=sys.stderr)
        return EXIT_ERROR
    writer = RecordingWriter(
        args.output,
        targets,
        interval_s=args.interval,
        max_bytes=None if args.max_mib is None else args.max_mib << 20,
        max_age_s=args.max_age,
    )
    try:
        writer.start()
    except RecordingError as exc:
        print(f"gputui: {visible(str(exc), 300)}", file=sys.stderr)
        return EXIT_ERROR
    stop = threading.Event()
    make_link = _link_factory(args, options_from_args(args))
    recorders = [HostRecorder(target, make_link, writer, args, stop) for target in targets]
    print(
        f"gputui: recording {', '.join(visible(t, 60) for t in targets)} to {visible(args.output, 200)}"
        " (Ctrl-C stops)",
        file=sys.stderr,
    )
    follower = None if args.demo else AuditFollower(targets, writer, stop)
    try:
        for recorder in recorders:
            recorder.start()
        if follower is not None:
            follower.start()
        deadline = None if args.duration is None else time.monotonic() + args.duration
        while not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            if all(r.halted for r in recorders):
                break
            if writer.stopped is not None:
                break
            stop.wait(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        for recorder in recorders:
            link = recorder.link
            if link is not None:
                _close(link)
        if follower is not None:
            follower.poll()
        writer.close()
    if writer.stopped is not None:
        print(f"gputui: {visible(writer.stopped, 300)}", file=sys.stderr)
    size_mib = writer.size_bytes / (1 << 20)
    line = f"gputui: {visible(args.output, 200)}: {writer.samples} samples, {size_mib:.1f} MiB"
    if writer.dropped:
        line += f", {writer.dropped} not written (the disk was behind)"
    print(line, file=sys.stderr)
    return EXIT_OK if all(r.halted is None for r in recorders) else EXIT_ERROR
