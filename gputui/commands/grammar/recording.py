"""The argument grammar of ``gputui record``, ``gputui replay``, ``gputui bundle`` and the TUI's ``--record``
(kept out of the shared ``parser``)."""

from __future__ import annotations

import argparse
import math
import re

RECORD_DESCRIPTION = """\
Record every sample of the targets as gputui receives it (GPUs, the GPU jobs'
processes, fitness, findings, the verdict and its facts, the servers' states) and
every audit line written meanwhile, to a compact, crash-safe file that
gputui replay FILE plays back. Only what changed since a host's last sample is
written (a whole sample every 60); the file is synced every 2 s. Without
--max-mib or --max-age the recording stops at 512 MiB; with either it is a ring
that keeps the newest. Ctrl-C (or --duration) ends it."""
RECORD_EPILOG = """\
exit status:
  0  recorded until stopped
  2  the file exists or cannot be written, or a usage error"""
REPLAY_DESCRIPTION = """\
Open the TUI on a recording: the same screens and findings, a time bar with the
incident's moments marked; p pauses, > and < step, ] and [ go to the next or
previous moment, + and - change the speed. Nothing can be signalled: every kill,
reset or probe key answers "replay: nothing to signal". --timeline lists the
moments; --at TIME --json prints the samples at that moment."""
REPLAY_EPILOG = """\
TIME: HH:MM[:SS] (local time of day), +SECONDS or +90s, +5m, +2h (from the start),
epoch seconds, start or end.

exit status:
  0  shown
  2  not a recording gputui reads, nothing recorded at TIME, or a usage error"""
BUNDLE_DESCRIPTION = """\
Gather what an incident review needs about one host into FILE.tar.gz: its
snapshot and check (JSON and text), the GPUs' fitness and the kernel-log lines
behind it, the audit lines of the last hours, the last minutes of the newest
recording that has the host, and the versions (driver, NVML, CUDA, gputui,
Python). Secrets in command lines and in the environment are redacted as every
view redacts them."""
BUNDLE_EPILOG = """\
exit status:
  0  written
  2  the host could not be sampled, the file exists or cannot be written, or a
     usage error"""
MAX_MIB_LIMIT = 4096
AGE_MAX_S = 30 * 86400.0
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(s|m|min|h|d)?")
_UNIT_S = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, high_s: float = AGE_MAX_S) -> float:
    """An argparse type: ``90``, ``90s``, ``15m``, ``2h``, ``1d`` as seconds in (0, ``high_s``]."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration (90s, 15m, 2h): {text[:40]!r}")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not (math.isfinite(seconds) and 0 < seconds <= high_s):
        raise argparse.ArgumentTypeError(f"must be a duration up to {high_s / 86400:g} days: {text[:40]!r}")
    return seconds


def _max_mib(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if not 1 <= value <= MAX_MIB_LIMIT:
        raise argparse.ArgumentTypeError(f"must be MiB from 1 to {MAX_MIB_LIMIT}: {text[:40]!r}")
    return value


def add_tui_record_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--record",
        default=None,
        metavar="FILE",
        help="record the session to FILE from the start (a new file; w starts and stops one in the app)",
    )


def add_record_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = RECORD_DESCRIPTION
    parser.epilog = RECORD_EPILOG
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the new recording file")
    parser.add_argument(
        "--max-mib",
        type=_max_mib,
        default=None,
        metavar="MIB",
        help=f"a ring: keep the file under this size, dropping the oldest (1 to {MAX_MIB_LIMIT})",
    )
    parser.add_argument(
        "--max-age",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="a ring: keep this much of the newest (90s, 15m, 2h, 1d)",
    )
    parser.add_argument(
        "--duration",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="stop after this long (default: until Ctrl-C)",
    )
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="the hosts to record (default: local)")


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = REPLAY_DESCRIPTION
    parser.epilog = REPLAY_EPILOG
    parser.add_argument("--at", default=None, metavar="TIME", help="the moment to show or print")
    parser.add_argument("--json", action="store_true", help="print the samples at --at as JSON and exit")
    parser.add_argument("--timeline", action="store_true", help="list the recording's moments and exit")
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        metavar="X",
        help="recording seconds per second to start at (0.25 to 256)",
    )
    parser.add_argument("--theme", default=None, metavar="NAME", help="colours, as for the TUI")
    parser.add_argument("file", metavar="FILE", help="the recording")


def add_bundle_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = BUNDLE_DESCRIPTION
    parser.epilog = BUNDLE_EPILOG
    parser.add_argument("-o", "--output", required=True, metavar="FILE.tar.gz", help="the new bundle")
    parser.add_argument(
        "--audit-hours",
        type=float,
        default=6.0,
        metavar="HOURS",
        help="the audit lines of this many last hours (default 6)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=15.0,
        metavar="MINUTES",
        help="the last minutes of the recording (default 15)",
    )
    parser.add_argument(
        "--recording",
        default=None,
        metavar="FILE",
        help="the recording to take them from (default: the newest in the recordings folder that has "
        "the host)",
    )
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="the host (default: local)")
