"""``gputui replay FILE``: the TUI on a recording; ``--timeline`` lists its moments, ``--at TIME --json``
prints its samples at a moment (the document ``gputui snapshot --json`` prints).

The TUI runs unchanged on ``ReplayLink``s (``transports.replay``): the same screens, the recorded findings and
verdicts, a time bar, and every key that would signal or ask a host refused.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from gputui.core.recording import Recording, RecordingError
from gputui.core.text import clock_time, fit, json_visible, visible
from gputui.transports.replay import SPEEDS, ReplayClock, ReplayControl, ReplayLink

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from gputui.ui.app import GpuTuiApp

EXIT_OK = 0
EXIT_ERROR = 2
_OFFSET_RE = re.compile(r"\+([0-9]+(?:\.[0-9]+)?)(s|m|h)?")
_CLOCK_RE = re.compile(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}(?:\.[0-9]+)?))?")
_UNIT_S = {None: 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
DAY_S = 86400.0


class TimeError(ValueError):
    """A ``--at`` that names no moment of the recording (one line)."""


def parse_time(text: str, recording: Recording) -> float:
    """The recording's epoch seconds that ``text`` names (``REPLAY_EPILOG`` lists the forms).

    Raises:
        TimeError: Not a time, or one outside the recording.
    """
    start, end = recording.start_s, recording.end_s
    word = text.strip().lower()
    span = f"the recording runs from {clock_time(start, end)} to {clock_time(end, start)}"
    if word == "start":
        return start
    if word == "end":
        return end
    offset = _OFFSET_RE.fullmatch(word)
    if offset is not None:
        at_s = start + float(offset.group(1)) * _UNIT_S[offset.group(2)]
    elif _CLOCK_RE.fullmatch(word):
        at_s = _time_of_day(word, start, end)
    else:
        try:
            at_s = float(word)
        except ValueError:
            raise TimeError(f"not a time: {visible(text, 40)!r} (HH:MM:SS, +90s, +5m, start, end)") from None
    if not (start - 1.0 <= at_s <= end + 1.0):
        raise TimeError(f"{visible(text, 40)} is not in the recording: {span}")
    return min(max(at_s, start), end)


def _time_of_day(word: str, start: float, end: float) -> float:
    """The first moment from the recording's first day on whose local time of day is ``word``."""
    match = _CLOCK_RE.fullmatch(word)
    assert match is not None  # noqa: S101 - checked by the caller
    hours, minutes, seconds = int(match.group(1)), int(match.group(2)), float(match.group(3) or 0)
    if hours > 23 or minutes > 59 or seconds >= 60:
        raise TimeError(f"not a time of day: {word}")
    first = time.localtime(start)
    day = 0
    while True:
        moment = time.mktime(
            (first.tm_year, first.tm_mon, first.tm_mday + day, hours, minutes, int(seconds), 0, 0, -1)
        ) + (seconds % 1)
        if moment >= start - 1.0 or day > (end - start) / DAY_S + 1:
            return moment
        day += 1


def timeline_lines(recording: Recording) -> list[str]:
    """The ``--timeline`` listing: a heading, then one line per moment (time, offset, host, kind, line)."""
    meta = recording.meta
    hosts = ", ".join(f"{target} ({recording.count(target)})" for target in recording.targets)
    lines = [
        f"{recording.path}: format {recording.version}, gputui {meta.get('gputui', '?')}, samples of {hosts};"
        f" {clock_time(recording.start_s, recording.end_s)} to"
        f" {clock_time(recording.end_s, recording.start_s)}"
        + ("" if recording.closed else " (not closed: cut while recording)")
    ]
    for moment in recording.moments:
        offset = int(moment.t - recording.start_s)
        lines.append(
            f"{clock_time(moment.t, recording.start_s)}  +{offset // 3600}:{offset // 60 % 60:02d}:"
            f"{offset % 60:02d}  {fit(moment.target or '-', 30):<16} {moment.kind:<8} {fit(moment.text, 160)}"
        )
    return lines


def document_at(recording: Recording, at_s: float) -> dict[str, object] | None:
    """Every host's sample at ``at_s`` as ``snapshot --json`` prints it; None: nothing recorded yet."""
    from gputui.commands.output.snapshot_document import document

    snapshots = [s for s in (recording.snapshot_at(t, at_s) for t in recording.targets) if s is not None]
    if not snapshots:
        return None
    return {"recording": recording.path, "at": at_s, **document(snapshots)}


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Replay, print the timeline or a moment; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    if not SPEEDS[0] <= args.speed <= SPEEDS[-1]:
        print(f"gputui: --speed must be from {SPEEDS[0]:g} to {SPEEDS[-1]:g}", file=err)
        return EXIT_ERROR
    try:
        recording = Recording.load(args.file)
    except RecordingError as exc:
        print(f"gputui: {visible(str(exc), 400)}", file=err)
        return EXIT_ERROR
    if recording.damage:
        print(f"gputui: warning: {recording.damage}", file=err)
    if args.timeline:
        out.write("\n".join(timeline_lines(recording)) + "\n")
        return EXIT_OK
    try:
        at_s = None if args.at is None else parse_time(args.at, recording)
    except TimeError as exc:
        print(f"gputui: {exc}", file=err)
        return EXIT_ERROR
    if args.json:
        doc = document_at(recording, recording.end_s if at_s is None else at_s)
        if doc is None:
            print(f"gputui: nothing is recorded by {visible(args.at or 'end', 40)}", file=err)
            return EXIT_ERROR
        out.write(json_visible(doc, indent=1) + "\n")
        return EXIT_OK
    return _run_tui(recording, at_s, args)


def build_replay_app(
    recording: Recording, at_s: float | None = None, speed: float = 1.0, **kwargs: Any
) -> GpuTuiApp:
    """The app on ``recording``, its clock at ``at_s`` (default: the start) and ``speed``."""
    from gputui.commands.tui import _asyncio_without_tls

    with _asyncio_without_tls():
        from gputui.ui.app import GpuTuiApp

    clock = ReplayClock(recording.start_s, recording.end_s, speed=speed)
    if at_s is not None:
        clock.seek(at_s)
    control = ReplayControl(recording, clock)
    interval = recording.meta.get("interval_s") or 1.0
    return GpuTuiApp(
        list(recording.targets),
        lambda target: ReplayLink(target, recording, clock),
        clock=clock.now,
        memory_interval_s=float(interval),
        audit=False,
        replay=control,
        **kwargs,
    )


def _run_tui(recording: Recording, at_s: float | None, args: argparse.Namespace) -> int:
    from gputui.commands.tui import run_app, size_for_a_sizeless_terminal, theme_known

    theme = getattr(args, "theme", None)
    if not theme_known(theme):
        return EXIT_ERROR
    kwargs: dict[str, object] = {}
    if theme is not None:
        from gputui.ui.theme import resolve

        kwargs["theme"] = resolve(theme)
    size_for_a_sizeless_terminal()
    return run_app(build_replay_app(recording, at_s, args.speed, **kwargs))
