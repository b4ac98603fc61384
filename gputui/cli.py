"""Command-line entry: the TUI, ``snapshot``, ``check`` and ``kill``.

One grammar for all of them: ``gputui [OPTIONS] [SUBCOMMAND] [OPTIONS] [WORDS]``. Options may come before the
subcommand, after it, and between or after the positional words (``gputui --interval 2 snapshot``,
``gputui kill HOST --yes PID``); ``--`` ends the options (``gputui -- check`` watches a host named "check").
Every duration and count is range-checked. A first word close to a subcommand that is no host this machine
knows of is a mistyped command, not a host to connect to.

Every failure a user can cause or meet (bad input, no driver, unreachable host) ends as one line on stderr
naming the host and the cause, and exit status 2; never a traceback. Output to a closed pipe or a full
disk ends quietly, with status 2.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gputui import __version__
from gputui.agent.protocol import ESCALATE_MAX_S, INTERVAL_MAX_S, INTERVAL_MIN_S, PROCESS_INTERVAL_S
from gputui.commands import fleet_options
from gputui.core.link import SSH_CLIENTS

SUBCOMMANDS = ("snapshot", "check", "kill", "reset", "leftovers", "exporter")
KILL_DESCRIPTION = """\
Signal GPU processes or their jobs. The plan lists everything it will signal; the intent is written to the
audit log before anything is sent, and each process's identity is checked again right before its signal.

A job is the GPU process with the ancestors that share its session and cgroup, up to (not including) a
shell, sshd, tmux, a service manager, a cron or display daemon, pid 1, or a daemon init adopted that leads
neither the job's session nor its process group; --tree takes everything below its root, never the root's
siblings. --all-gpu leaves graphics-only holders (Xorg, ...) out. pid 1 is never signalled. A kill never
crosses an owner (Slurm step, pod, container, unit) nobody picked: a tree stops at a member of another one,
and --all-gpu on a host whose GPU jobs have several owners needs --owner KIND:ID (or --owner all).

TERM escalates to KILL after 5 s (--escalate S to change, --no-escalate for TERM only); the collector runs
the escalation and finishes it even if this command is interrupted. Ctrl-C says what is pending and keeps
waiting; a second Ctrl-C abandons the escalation and says which processes were left."""
KILL_EPILOG = """\
exit status:
  0  every targeted process is gone
  1  some process survived, was denied, changed or refused by the collector, the escalation was abandoned,
     or the confirmation was declined
  2  usage error, read-only mode, a refused plan, an audit log that cannot be written, or cannot tell
     (host unreachable, no answer)"""
EXIT_OK = 0
EXIT_NOT_CLEAN = 1
EXIT_ERROR = 2
CONNECT_TIMEOUT_MIN_S = 0.5
CONNECT_TIMEOUT_MAX_S = 600.0
WAIT_MAX_S = 86400.0
"""``check --wait``: at most a day."""
ESCALATE_MIN_S = 0.1
MIB_MAX = 1 << 20
"""``--baseline-mib`` / ``--tolerance-mib``: at most 1 TiB."""
MISTYPED_COMMAND_CUTOFF = 0.75
"""How close (difflib's ratio) a word must be to a subcommand to be taken for a mistyped one."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"gputui: {message}\n")


def _seconds(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number of seconds in [low, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (math.isfinite(value) and value > 0 and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be seconds from {low:g} to {high:g}: {text!r}")
        return value

    return parse


def _mib(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 0 <= value <= MIB_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number of MiB from 0 to {MIB_MAX}: {text!r}")
    return value


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--demo", action="store_true", help="use simulated hosts (no GPU needed)")
    parser.add_argument(
        "--read-only", action="store_true", help="never signal anything: kill keys and commands are refused"
    )
    parser.add_argument(
        "--interval",
        type=_seconds(INTERVAL_MIN_S, INTERVAL_MAX_S),
        default=1.0,
        metavar="SECONDS",
        help=f"memory sample interval ({INTERVAL_MIN_S:g} to {INTERVAL_MAX_S:g})",
    )
    parser.add_argument(
        "--process-interval",
        type=_seconds(INTERVAL_MIN_S, INTERVAL_MAX_S),
        default=PROCESS_INTERVAL_S,
        metavar="SECONDS",
        help=f"process-list period while GPU memory stands still; lists are read again when it moves "
        f"({INTERVAL_MIN_S:g} to {INTERVAL_MAX_S:g})",
    )
    parser.add_argument(
        "--baseline-mib",
        type=_mib,
        default=None,
        metavar="MIB",
        help="idle baseline per GPU (default: calibrated value, else 3)",
    )
    parser.add_argument(
        "--tolerance-mib",
        type=_mib,
        default=None,
        metavar="MIB",
        help="allowed excess over the baseline",
    )
    parser.add_argument(
        "--health",
        action="append",
        default=[],
        metavar="URL",
        help="health endpoint probed on the GPU host itself (repeatable)",
    )
    parser.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="URL",
        help="server metrics endpoint read on the GPU host beside the health URL of its origin (repeatable)",
    )
    parser.add_argument(
        "--health-generate",
        action="store_true",
        help="also probe token-generating endpoints (/health_generate), at most every 10 s",
    )
    parser.add_argument(
        "--no-discover", action="store_true", help="do not probe health URLs discovered from launchers"
    )
    parser.add_argument(
        "--accept-new",
        action="store_true",
        help="accept and record unknown SSH host keys (never changed ones)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="gputui config file (default: $XDG_CONFIG_HOME/gputui/config.toml)",
    )
    parser.add_argument(
        "-F",
        "--ssh-config",
        default=None,
        metavar="FILE",
        help="ssh config file to use instead of ~/.ssh/config (like ssh -F)",
    )
    parser.add_argument(
        "--ssh-client",
        choices=SSH_CLIENTS,
        default=None,
        help="what reaches remote hosts: paramiko (built in; the default), openssh (the system ssh: "
        "ProxyCommand, certificates, GSSAPI, a running ControlMaster), auto (openssh where the ssh config "
        "needs it); overrides ssh_client in the config",
    )
    parser.add_argument(
        "--connect-timeout",
        type=_seconds(CONNECT_TIMEOUT_MIN_S, CONNECT_TIMEOUT_MAX_S),
        default=10.0,
        metavar="SECONDS",
        help=f"deadline for connecting to a host ({CONNECT_TIMEOUT_MIN_S:g} to {CONNECT_TIMEOUT_MAX_S:g})",
    )


def _add_no_audit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-audit",
        action="store_true",
        help="kill even though the audit log cannot be written, and write nothing to it",
    )


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser for one subcommand, or for the TUI when ``command`` is None."""
    if command is None:
        parser = _Parser(
            prog="gputui",
            description="Terminal GPU monitor: memory, process trees, zombies, health, the clean slate.",
            epilog=f"subcommands: {', '.join(SUBCOMMANDS)} (gputui SUBCOMMAND --help)",
        )
        parser.add_argument("--version", action="version", version=f"gputui {__version__}")
        _add_common(parser)
        _add_no_audit(parser)
        fleet_options.add_arguments(parser)
        parser.add_argument(
            "--theme",
            default=None,
            metavar="NAME",
            help="colours: ansi (the terminal's own), or a Textual theme such as textual-dark, nord, "
            "gruvbox; kept for the next run",
        )
        parser.add_argument(
            "targets",
            nargs="*",
            metavar="TARGET",
            help="local, an ssh alias, [user@]host[:port], @group from the config",
        )
        return parser
    parser = _Parser(prog=f"gputui {command}")
    _add_common(parser)
    if command == "snapshot":
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.add_argument(
            "--all-processes",
            action="store_true",
            help="with --json: every process of the sample, not only the GPU jobs and what findings name",
        )
        fleet_options.add_arguments(parser)
        parser.add_argument("targets", nargs="*", metavar="TARGET")
    elif command == "check":
        parser.add_argument("--json", action="store_true", help="print JSON instead of lines")
        fleet_options.add_arguments(parser)
        parser.add_argument(
            "--wait",
            type=_seconds(0.0, WAIT_MAX_S),
            default=None,
            metavar="SECONDS",
            help=f"sample quickly until clean or the deadline (at most {WAIT_MAX_S:g})",
        )
        parser.add_argument(
            "--calibrate",
            action="store_true",
            help="record the current per-GPU memory of this idle host as its baseline",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="with --calibrate: record GPUs that do not look idle too (each is named)",
        )
        parser.add_argument("targets", nargs="*", metavar="TARGET")
    elif command == "kill":
        parser.description = KILL_DESCRIPTION
        parser.epilog = KILL_EPILOG
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.add_argument("--signal", choices=("INT", "TERM", "KILL"), default="TERM")
        parser.add_argument("--tree", action="store_true", help="signal the job's tree, children first")
        parser.add_argument(
            "--all-gpu",
            action="store_true",
            help="every GPU job on the host (graphics-only holders such as Xorg left out)",
        )
        parser.add_argument(
            "--include-graphics",
            action="store_true",
            help="with --all-gpu, also the processes holding graphics memory only (the display stack)",
        )
        parser.add_argument(
            "--owner",
            default=None,
            metavar="KIND:ID",
            help="with --all-gpu, the GPU jobs of this owner only (slurm:4242, pod:NAME, container:ID, "
            "unit:NAME, user:NAME), or all for every owner's",
        )
        escalation = parser.add_mutually_exclusive_group()
        escalation.add_argument(
            "--escalate",
            type=_seconds(ESCALATE_MIN_S, ESCALATE_MAX_S),
            default=None,
            metavar="SECONDS",
            help=f"send KILL to whatever is left after this many seconds (default 5; {ESCALATE_MIN_S:g} to "
            f"{ESCALATE_MAX_S:g})",
        )
        escalation.add_argument(
            "--no-escalate",
            action="store_true",
            help="no KILL: only say after the delay whether each process is gone",
        )
        _add_no_audit(parser)
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
        parser.add_argument(
            "words",
            nargs="*",
            metavar="[TARGET] PID",
            help="an optional host target, then process ids",
        )
    elif command == "exporter":
        from gputui.commands.exporter_options import add_arguments

        parser.description = "Serve this host's GPUs, findings and clean-slate verdict to Prometheus."
        add_arguments(parser)
    elif command == "reset":
        from gputui.commands.reset_options import add_reset_arguments

        add_reset_arguments(parser)
        _add_no_audit(parser)
    elif command == "leftovers":
        from gputui.commands.reset_options import add_leftovers_arguments

        add_leftovers_arguments(parser)
        _add_no_audit(parser)
    return parser


def _value_options() -> tuple[set[str], list[str]]:
    """The option strings that take a value, in any of the parsers, and every long option string."""
    takes_value: set[str] = set()
    longs: list[str] = []
    for command in (None, *SUBCOMMANDS):
        for action in build_parser(command)._actions:
            for option in action.option_strings:
                if option.startswith("--"):
                    longs.append(option)
                if action.nargs != 0:
                    takes_value.add(option)
    return takes_value, longs


def _takes_value(word: str, takes_value: set[str], longs: list[str]) -> bool:
    """Whether option ``word`` (without ``=VALUE``) consumes the next word, as argparse would read it."""
    if word in takes_value:
        return True
    if word.startswith("--"):  # argparse accepts any unique prefix of a long option
        matches = {option for option in longs if option.startswith(word)}
        return len(matches) == 1 and matches.pop() in takes_value
    return False


def split_command(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Find the subcommand: the first word that is neither an option nor an option's value.

    Global options may come before it (``gputui -F cfg snapshot a``: "cfg" is -F's value, not a host).
    """
    args = list(argv)
    option_table: tuple[set[str], list[str]] | None = None  # built (four parsers) only once an option comes
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            break
        if word.startswith("-") and word != "-":
            attached = "=" in word or (not word.startswith("--") and len(word) > 2)  # --x=1, -Fcfg
            if attached:
                index += 1
                continue
            if option_table is None:
                option_table = _value_options()
            index += 2 if _takes_value(word, *option_table) else 1
            continue
        if word in SUBCOMMANDS:
            return word, args[:index] + args[index + 1 :]
        break
    return None, args


def parse_words(command: str | None, words: Sequence[str]) -> argparse.Namespace:
    """Parse the words after the subcommand: options anywhere before ``--``, only targets or pids after it.

    argparse's intermixed parsing reads options on both sides of ``--`` (``snapshot -- -Fcfg`` would set the
    ssh config), so the words after the first ``--`` are kept out of it and appended to the positionals.
    """
    words = list(words)
    cut = words.index("--") if "--" in words else len(words)
    parser = build_parser(command)
    args = parser.parse_intermixed_args(words[:cut])
    after = words[cut + 1 :]
    dest = next((d for d in ("words", "targets") if isinstance(getattr(args, d, None), list)), None)
    if dest is not None:
        setattr(args, dest, [*getattr(args, dest), *after])
    elif after:  # a command that takes no targets (the exporter)
        parser.error(f"unexpected words after --: {' '.join(after)[:80]!r}")
    return args


def mistyped_command(word: str, args: argparse.Namespace) -> str | None:
    """The subcommand ``word`` was probably meant to be ("chek": "check"), when no host by that name is known.

    Known means: "local", a host of the gputui config file, a Host alias of the ssh config, a name in
    known_hosts or /etc/hosts. Decided on this machine alone, without a name lookup: a real host whose
    name is one letter off a subcommand and is known to none of those is reached as ``gputui -- NAME``.
    """
    if any(char in word for char in "@:.[/") or word == "local":  # user@host, host:port, a FQDN or an IP
        return None
    import difflib  # only for a first word that may be a mistyped command

    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=MISTYPED_COMMAND_CUTOFF)
    if not close or _known_host(word, args):
        return None
    return close[0]


def _known_host(word: str, args: argparse.Namespace) -> bool:
    config = getattr(args, "config", None)
    if config is not None and word in getattr(config, "host_health_urls", {}):
        return True
    if word in _etc_hosts_names():
        return True
    from gputui.core.link import LinkError
    from gputui.transports.ssh.config import resolve
    from gputui.transports.ssh.knownhosts import known_key_types, load_known_hosts, lookup_name

    try:
        settings = resolve(word, getattr(args, "ssh_config", None))
    except (LinkError, OSError):
        return False
    if settings.hostname != word:  # an alias: the ssh config names it
        return True
    known = load_known_hosts(settings.user_known_hosts_files + settings.global_known_hosts_files)
    name = lookup_name(settings.hostname, settings.port, settings.host_key_alias)
    return bool(known_key_types(known, name))


def _etc_hosts_names(path: str = "/etc/hosts") -> set[str]:
    names: set[str] = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                names.update(line.split("#", 1)[0].split()[1:])
    except OSError:
        pass
    return names


def _run(command: str | None, args: argparse.Namespace) -> int:
    if command == "snapshot":
        from gputui.commands.snapshot import run_snapshot

        return run_snapshot(args)
    if command == "check":
        from gputui.commands.check import run_check

        return run_check(args)
    if command == "kill":
        from gputui.commands.kill import run_kill

        return run_kill(args)
    if command == "exporter":
        from gputui.commands.exporter import run_exporter

        return run_exporter(args)
    if command == "reset":
        from gputui.commands.reset import run_reset

        return run_reset(args)
    if command == "leftovers":
        from gputui.commands.leftovers import run_leftovers

        return run_leftovers(args)
    from gputui.commands.tui import run_tui

    return run_tui(args)


def _quiet_output_failure(exc: OSError) -> int:
    """End quietly after the output went away: a closed pipe says nothing, a full disk one line."""
    try:  # the interpreter flushes stdout once more at exit: let that write go nowhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    if exc.errno != errno.EPIPE:
        try:
            print(f"gputui: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        except OSError:
            pass
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run gputui; returns the exit status."""
    command, rest = split_command(sys.argv[1:] if argv is None else argv)
    args: Any = parse_words(command, rest)
    from gputui.core.config import ConfigError, load_config

    try:
        args.config = load_config(args.config)
        if command not in ("kill", "exporter", "reset", "leftovers"):
            fleet_options.resolve(args, command)
    except (ConfigError, fleet_options.FleetOptionError) as exc:
        print(f"gputui: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if command is None and args.targets and not args.demo and "--" not in rest:  # "--": taken as a host
        meant = mistyped_command(args.targets[0], args)
        if meant is not None:
            print(f"gputui: unknown command {args.targets[0]!r} (did you mean {meant}?)", file=sys.stderr)
            return EXIT_ERROR
    _exit_cleanly_on_termination()
    try:
        status = _run(command, args)
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        print("gputui: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno in (errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EIO):
            return _quiet_output_failure(exc)
        raise


def _exit_cleanly_on_termination() -> None:
    """Make SIGTERM and SIGHUP (its terminal closed) end gputui through its exit path.

    Python's default for both ends the process at once, without exit handlers: the system ``ssh`` processes
    that carry remote collectors run in sessions of their own and would outlive gputui while their host
    hangs. A signal the user set to be ignored (``nohup``) stays ignored.
    """

    def end(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, end)


if __name__ == "__main__":
    sys.exit(main())
