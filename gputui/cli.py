"""Command-line entry: the TUI, ``snapshot``, ``check`` and ``kill``.

Every failure a user can cause or meet (bad input, no driver, unreachable host) ends as one line on stderr
naming the host and the cause, and exit status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gputui import __version__, fleet_options

SUBCOMMANDS = ("snapshot", "check", "kill")
EXIT_OK = 0
EXIT_NOT_CLEAN = 1
EXIT_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"gputui: {message}\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--demo", action="store_true", help="use simulated hosts (no GPU needed)")
    parser.add_argument(
        "--read-only", action="store_true", help="never signal anything: kill keys and commands are refused"
    )
    parser.add_argument(
        "--interval", type=_positive_float, default=1.0, metavar="SECONDS", help="memory sample interval"
    )
    parser.add_argument(
        "--process-interval",
        type=_positive_float,
        default=3.0,
        metavar="SECONDS",
        help="process-list sample interval (the expensive NVML query)",
    )
    parser.add_argument(
        "--baseline-mib", type=_non_negative_int, default=None, metavar="MIB",
        help="idle baseline per GPU (default: calibrated value, else 3)",
    )
    parser.add_argument(
        "--tolerance-mib", type=_non_negative_int, default=None, metavar="MIB",
        help="allowed excess over the baseline",
    )
    parser.add_argument(
        "--health", action="append", default=[], metavar="URL",
        help="health endpoint probed on the GPU host itself (repeatable)",
    )
    parser.add_argument(
        "--health-generate", action="store_true",
        help="also probe token-generating endpoints (/health_generate), at most every 10 s",
    )
    parser.add_argument(
        "--no-discover", action="store_true", help="do not probe health URLs discovered from launchers"
    )
    parser.add_argument(
        "--accept-new", action="store_true",
        help="accept and record unknown SSH host keys (never changed ones)",
    )
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE",
        help="gputui config file (default: $XDG_CONFIG_HOME/gputui/config.toml)",
    )
    parser.add_argument(
        "-F", "--ssh-config", default=None, metavar="FILE",
        help="ssh config file to use instead of ~/.ssh/config (like ssh -F)",
    )
    parser.add_argument(
        "--connect-timeout", type=_positive_float, default=10.0, metavar="SECONDS",
        help="deadline for connecting to a host",
    )


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser for one subcommand, or for the TUI when ``command`` is None."""
    if command is None:
        parser = _Parser(
            prog="gputui",
            description="Terminal GPU monitor: memory, process trees, zombies, health, the clean slate.",
            epilog="subcommands: snapshot, check, kill (gputui SUBCOMMAND --help)",
        )
        parser.add_argument("--version", action="version", version=f"gputui {__version__}")
        _add_common(parser)
        fleet_options.add_arguments(parser)
        parser.add_argument(
            "targets", nargs="*", metavar="TARGET",
            help="local, an ssh alias, [user@]host[:port], @group from the config",
        )
        return parser
    parser = _Parser(prog=f"gputui {command}")
    _add_common(parser)
    if command == "snapshot":
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        fleet_options.add_arguments(parser)
        parser.add_argument("targets", nargs="*", metavar="TARGET")
    elif command == "check":
        parser.add_argument("--json", action="store_true", help="print JSON instead of lines")
        fleet_options.add_arguments(parser)
        parser.add_argument(
            "--wait", type=_positive_float, default=None, metavar="SECONDS",
            help="sample quickly until clean or the deadline",
        )
        parser.add_argument(
            "--calibrate", action="store_true",
            help="record the current per-GPU memory of this idle host as its baseline",
        )
        parser.add_argument("targets", nargs="*", metavar="TARGET")
    elif command == "kill":
        parser.add_argument("--signal", choices=("INT", "TERM", "KILL"), default="TERM")
        parser.add_argument("--tree", action="store_true", help="signal descendants first, then the process")
        parser.add_argument("--all-gpu", action="store_true", help="every GPU process tree on the host")
        parser.add_argument(
            "--escalate", type=_positive_float, default=None, metavar="SECONDS",
            help="send KILL to whatever is left after this many seconds",
        )
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
        parser.add_argument(
            "words", nargs="*", metavar="[TARGET] PID",
            help="an optional host target, then process ids",
        )
    return parser


def split_command(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Find the subcommand: the first word that is not an option."""
    args = list(argv)
    for i, word in enumerate(args):
        if word == "--":
            break
        if word.startswith("-"):
            continue
        if word in SUBCOMMANDS:
            return word, args[:i] + args[i + 1 :]
        break
    return None, args


def main(argv: Sequence[str] | None = None) -> int:
    """Run gputui; returns the exit status."""
    command, rest = split_command(sys.argv[1:] if argv is None else argv)
    args = build_parser(command).parse_args(rest)
    from gputui.config import ConfigError, load_config

    try:
        args.config = load_config(args.config)
        if command != "kill":
            fleet_options.resolve(args, command)
    except (ConfigError, fleet_options.FleetOptionError) as exc:
        print(f"gputui: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        if command == "snapshot":
            from gputui.commands.snapshot import run_snapshot

            return run_snapshot(args)
        if command == "check":
            from gputui.commands.check import run_check

            return run_check(args)
        if command == "kill":
            from gputui.commands.kill import run_kill

            return run_kill(args)
        from gputui.commands.tui import run_tui

        return run_tui(args)
    except KeyboardInterrupt:
        print("gputui: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
