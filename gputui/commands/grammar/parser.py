"""The command line's grammar: the parser of the TUI and of each subcommand, and how the words split.

One grammar for all of them: ``gputui [OPTIONS] [SUBCOMMAND] [OPTIONS] [WORDS]``. Options may come before the
subcommand, after it, and between or after the positional words (``gputui --interval 2 snapshot``,
``gputui kill HOST --yes PID``); ``--`` ends the options (``gputui -- check`` watches a host named "check").
Every duration and count is range-checked; a usage error is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence

from gputui import __version__
from gputui.agent.protocol import (
    ESCALATE_MAX_S,
    INTERVAL_MAX_S,
    INTERVAL_MIN_S,
    MEMORY_INTERVAL_S,
    PROBE_BUFFER_MAX_MIB,
    PROBE_BUFFER_MIB,
    PROBE_BUFFER_MIN_MIB,
    PROBE_DEADLINE_MAX_S,
    PROBE_DEADLINE_MIN_S,
    PROBE_DEADLINE_S,
    PROCESS_INTERVAL_S,
)
from gputui.commands.grammar import fleet as fleet_options
from gputui.core.link import SSH_CLIENTS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SUBCOMMANDS = ("snapshot", "check", "kill", "reset", "leftovers", "exporter", "record", "replay", "bundle")
SUMMARIES: dict[str, str] = {
    "snapshot": "one sample of each host: GPUs, jobs, findings, the verdict (a table or JSON)",
    "check": "the clean-slate verdict; --wait until clean, --calibrate the idle baselines",
    "kill": "signal GPU processes or whole jobs, confirmed and audited",
    "reset": "can nvidia-smi -r reset these GPUs now? the plan; --yes runs it",
    "leftovers": "what killed jobs left behind (/dev/shm segments, MPS daemons); --remove",
    "exporter": "serve this host's GPUs, findings and verdict to Prometheus",
    "record": "record every sample, finding, verdict and kill to a file",
    "replay": "open the TUI on a recording, or print its timeline or a moment",
    "bundle": "one host's snapshot, check, fitness, audit lines and recording in a tar.gz",
}
"""One line per subcommand: the TUI's help, the completion's and the manual page's list of commands."""
COMMON_TITLE = "common options"
COMMON_DESCRIPTION = "shared by the TUI and the subcommands; before or after the subcommand and its words"
TUI_DESCRIPTION = """\
Watch GPU memory, the process trees that hold it, what is stuck or dead and the
inference servers' health, kill from the keyboard, and see whether every GPU is
back at a clean slate: the job's workers gone, no residue, every GPU fit. With
no target: this host; --demo: two simulated hosts, no GPU needed. In the app,
? lists the keys and what every glyph and colour means."""
TUI_EPILOG = """\
exit status:
  0  quit
  2  usage error: a bad option, a target named twice, an unknown theme, a config
     file that cannot be read"""
SNAPSHOT_DESCRIPTION = """\
Take one whole-host sample of each target and print its GPUs, its GPU jobs, the
findings and the verdict block exactly as check prints it; --json prints the
document scripts read. snapshot reports; check decides by its exit status."""
SNAPSHOT_EPILOG = """\
exit status:
  0  every host sampled, whatever its verdict
  2  a host unreachable or without a driver, or a usage error"""
CHECK_DESCRIPTION = """\
The clean slate of each host: one verdict with three facts, the job's workers
gone (whoever killed them), no residue (ports, /dev/shm segments, zombies,
profiler leftovers), and every GPU fit (memory at its baseline, nothing the
driver asks for; --probe: proven to take work). --wait samples fast until clean
or the deadline; --calibrate records an idle host's memory as its baseline."""
CHECK_EPILOG = """\
exit status:
  0  CLEAN (with --calibrate: every GPU recorded)
  1  NOT CLEAN or NOT READY: memory held, a process or residue left, a server
     UNHEALTHY or STALLED, a GPU that needs an action first
  2  CANNOT TELL (unreachable, no driver, a GPU not read, stale data), a refused
     calibration, or a usage error"""
KILL_DESCRIPTION = """\
Signal GPU processes or their jobs. The plan lists everything it will signal; the
intent is written to the audit log before anything is sent, and each process's
identity is checked again right before its signal.

A job is the GPU process with the ancestors that share its session and cgroup,
up to (not including) a shell, sshd, tmux, a service manager, a cron or display
daemon, pid 1, or a daemon init adopted that leads neither the job's session nor
its process group; --tree takes everything below its root, never the root's
siblings. --all-gpu leaves graphics-only holders (Xorg, ...) out. pid 1 is never
signalled. A kill never crosses an owner (Slurm step, pod, container, unit)
nobody picked: a tree stops at a member of another one, and --all-gpu on a host
whose GPU jobs have several owners needs --owner KIND:ID (or --owner all).

TERM escalates to KILL after 5 s (--escalate S to change, --no-escalate for TERM
only); the collector runs the escalation and finishes it even if this command is
interrupted. Ctrl-C says what is pending and keeps waiting; a second Ctrl-C
abandons the escalation and says which processes were left."""
KILL_EPILOG = """\
exit status:
  0  every targeted process is gone
  1  some process survived, was denied, changed or refused by the collector, the
     escalation was abandoned, or the confirmation was declined
  2  usage error, read-only mode, a refused plan, an audit log that cannot be
     written, or cannot tell (host unreachable, no answer)"""
NOT_OFFERED: dict[str, dict[str, object]] = {
    "exporter": {
        "read_only": True,
        "demo": False,
        "accept_new": False,
        "ssh_config": None,
        "ssh_client": None,
        "connect_timeout": 10.0,
    },
}
"""Common options a subcommand does not offer, by destination, with the value its code reads instead: the
exporter serves this host and nothing else (no SSH, no simulated host served to a real Prometheus), and its
collector is read-only whatever is asked."""
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


def _terminal_columns() -> int:
    """The width ``shutil.get_terminal_size`` gives help text (``COLUMNS``, else the terminal on stdout,
    else 80), worked out here: argparse's own formatter imports shutil for it, and with it the archive modules
    and their libraries, in every run, even one that prints no help."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    stdout = sys.__stdout__
    if columns <= 0 and stdout is not None:
        try:
            columns = os.get_terminal_size(stdout.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, as wide as the terminal (``_terminal_columns``)."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None
    ) -> None:
        width = _terminal_columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """``HelpFormatter`` that keeps the description's and epilog's lines as they are written."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("unrecognized arguments"):  # e.g. an option another subcommand takes
            message += f" ({self.prog} --help lists its options)"
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


def _whole(low: int, high: int, unit: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]; ``unit`` names it in the error (" of MiB")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number{unit} from {low} to {high}: {text!r}")
        return value

    return parse


def _add_probe(parser: argparse.ArgumentParser) -> None:
    """The readiness probe's options (``check``, ``snapshot``)."""
    parser.add_argument(
        "--probe",
        action="store_true",
        help="prove each GPU takes work: create a context, write and read back a buffer (libcuda.so.1)",
    )
    parser.add_argument(
        "--probe-deadline",
        type=_seconds(PROBE_DEADLINE_MIN_S, PROBE_DEADLINE_MAX_S),
        default=PROBE_DEADLINE_S,
        metavar="SECONDS",
        help=f"a GPU that has not taken work by then is not ready (default {PROBE_DEADLINE_S:g})",
    )
    parser.add_argument(
        "--probe-mib",
        type=_whole(PROBE_BUFFER_MIN_MIB, PROBE_BUFFER_MAX_MIB),
        default=PROBE_BUFFER_MIB,
        metavar="MIB",
        help=f"the buffer each GPU writes and reads back (default {PROBE_BUFFER_MIB})",
    )


TARGETS_HELP = "local, an ssh alias, [user@]host[:port], @group from the config (default: local)"
_mib = _whole(0, MIB_MAX, " of MiB")
"""An argparse type: MiB from 0 to ``MIB_MAX``."""


def _add_common(parser: argparse.ArgumentParser, command: str | None) -> None:
    """The common options, in a group of their own after the command's own (argparse lists groups in the
    order they are made); those ``command`` does not offer (``NOT_OFFERED``) are left out, and their
    destinations set to the value its code reads."""
    left_out = NOT_OFFERED.get(command or "", {})
    group = parser.add_argument_group(COMMON_TITLE, COMMON_DESCRIPTION)

    def add(*flags: str, **kwargs: Any) -> None:
        long = next(flag for flag in flags if flag.startswith("--"))
        if long[2:].replace("-", "_") not in left_out:
            group.add_argument(*flags, **kwargs)

    _add_common_options(add)
    parser.set_defaults(**left_out)


def _add_common_options(add: Callable[..., None]) -> None:
    """Every common option, each through ``add`` (which leaves out what a command does not offer)."""
    add("--demo", action="store_true", help="use simulated hosts (no GPU needed)")
    add("--read-only", action="store_true", help="never signal anything: kill keys and commands are refused")
    add(
        "--interval",
        type=_seconds(INTERVAL_MIN_S, INTERVAL_MAX_S),
        default=MEMORY_INTERVAL_S,
        metavar="SECONDS",
        help=f"memory sample interval ({INTERVAL_MIN_S:g} to {INTERVAL_MAX_S:g})",
    )
    add(
        "--process-interval",
        type=_seconds(INTERVAL_MIN_S, INTERVAL_MAX_S),
        default=PROCESS_INTERVAL_S,
        metavar="SECONDS",
        help=f"process-list period while GPU memory stands still; lists are read again when it moves "
        f"({INTERVAL_MIN_S:g} to {INTERVAL_MAX_S:g})",
    )
    add(
        "--baseline-mib",
        type=_mib,
        default=None,
        metavar="MIB",
        help="idle baseline per GPU (default: calibrated value, else 3)",
    )
    add(
        "--tolerance-mib",
        type=_mib,
        default=None,
        metavar="MIB",
        help="allowed excess over the baseline",
    )
    add(
        "--health",
        action="append",
        default=[],
        metavar="URL",
        help="health endpoint probed on the GPU host itself (repeatable)",
    )
    add(
        "--metrics",
        action="append",
        default=[],
        metavar="URL",
        help="server metrics endpoint read on the GPU host beside the health URL of its origin (repeatable)",
    )
    add(
        "--health-generate",
        action="store_true",
        help="also probe token-generating endpoints (/health_generate), at most every 10 s",
    )
    add("--no-discover", action="store_true", help="do not probe health URLs discovered from launchers")
    add(
        "--accept-new",
        action="store_true",
        help="accept and record unknown SSH host keys (never changed ones)",
    )
    add(
        "--config",
        default=None,
        metavar="FILE",
        help="gputui config file (default: $XDG_CONFIG_HOME/gputui/config.toml)",
    )
    add(
        "-F",
        "--ssh-config",
        default=None,
        metavar="FILE",
        help="ssh config file to use instead of ~/.ssh/config (like ssh -F)",
    )
    add(
        "--ssh-client",
        choices=SSH_CLIENTS,
        default=None,
        help="what reaches remote hosts: paramiko (built in), openssh (the system ssh: ProxyCommand, "
        "certificates, a running ControlMaster), auto (openssh where ssh is installed; one-shot commands' "
        "default) or config (per host, openssh where its ssh config needs it; the TUI's default); overrides "
        "the config's ssh_client",
    )
    add(
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
        help="kill, reset or remove even though the audit log cannot be written, and write nothing to it",
    )


SHELLS = ("bash", "zsh", "fish")
"""What ``--print-completion`` writes a completion script for."""


def _tui_epilog() -> str:
    """The TUI's epilog: every subcommand with its line (``SUMMARIES``), then the exit status."""
    width = max(len(name) for name in SUBCOMMANDS) + 2
    lines = ["subcommands (gputui SUBCOMMAND --help for each):"]
    lines += [f"  {name:<{width}}{SUMMARIES.get(name, '')}".rstrip() for name in SUBCOMMANDS]
    return "\n".join(lines) + "\n\n" + TUI_EPILOG


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser for one subcommand, or for the TUI when ``command`` is None.

    Its help lists the command's own options first, then the common ones in a group of their own
    (``COMMON_TITLE``), whatever the subcommand: a branch below adds only the command's own options, its
    description and its exit status (the epilog). Descriptions and epilogs are kept as written.
    """
    parser = _Parser(
        prog="gputui" if command is None else f"gputui {command}",
        formatter_class=RawDescriptionHelpFormatter,
    )
    if command is None:
        parser.description = TUI_DESCRIPTION
        parser.epilog = _tui_epilog()
        parser.add_argument("--version", action="version", version=f"gputui {__version__}")
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
            "--print-completion",
            choices=SHELLS,
            default=None,
            metavar="SHELL",
            help=f"print the shell completion script for {', '.join(SHELLS)} and exit "
            "(e.g. gputui --print-completion bash > ~/.local/share/bash-completion/completions/gputui)",
        )
        parser.add_argument(
            "--print-man",
            action="store_true",
            help="print the manual page (roff) and exit (e.g. gputui --print-man | man -l -)",
        )
        from gputui.commands.grammar.recording import add_tui_record_argument

        add_tui_record_argument(parser)
        parser.add_argument(
            "targets",
            nargs="*",
            metavar="TARGET",
            help=TARGETS_HELP,
        )
    elif command == "snapshot":
        parser.description = SNAPSHOT_DESCRIPTION
        parser.epilog = SNAPSHOT_EPILOG
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.add_argument(
            "--all-processes",
            action="store_true",
            help="with --json: every process of the sample, not only the GPU jobs and what findings name",
        )
        _add_probe(parser)
        parser.add_argument(
            "--force", action="store_true", help="with --probe: probe GPUs that list a process too"
        )
        fleet_options.add_arguments(parser)
        parser.add_argument("targets", nargs="*", metavar="TARGET", help=TARGETS_HELP)
    elif command == "check":
        parser.description = CHECK_DESCRIPTION
        parser.epilog = CHECK_EPILOG
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
            help="with --calibrate: record GPUs that do not look idle too (each is named); with --probe:"
            " probe GPUs that list a process too",
        )
        _add_probe(parser)
        parser.add_argument("targets", nargs="*", metavar="TARGET", help=TARGETS_HELP)
    elif command == "kill":
        parser.description = KILL_DESCRIPTION
        parser.epilog = KILL_EPILOG
        parser.add_argument(
            "--signal",
            choices=("INT", "TERM", "KILL"),
            default="TERM",
            help="the signal sent first (default TERM); what is left after the delay gets KILL, unless "
            "it was KILL already or --no-escalate",
        )
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
        from gputui.commands.grammar.exporter import add_arguments

        add_arguments(parser)
    elif command == "reset":
        from gputui.commands.grammar.reset import add_reset_arguments

        add_reset_arguments(parser)
        _add_no_audit(parser)
    elif command == "leftovers":
        from gputui.commands.grammar.reset import add_leftovers_arguments

        add_leftovers_arguments(parser)
        _add_no_audit(parser)
    elif command in ("record", "replay", "bundle"):
        from gputui.commands.grammar import recording

        getattr(recording, f"add_{command}_arguments")(parser)
    _add_common(parser, command)
    parser.usage = _usage(parser, command)
    return parser


def _usage(parser: argparse.ArgumentParser, command: str | None) -> str:
    """``gputui check [options] [TARGET ...]``: the options are listed below it, not repeated in it."""
    words = [parser.prog]
    if command is None:
        words.append("[SUBCOMMAND]")
    words.append("[options]")
    for action in parser._actions:
        if not action.option_strings:
            words.append(
                f"[{action.metavar or action.dest} ...]" if action.nargs == "*" else str(action.metavar)
            )
    return " ".join(words)


def _value_options(commands: Sequence[str | None]) -> tuple[set[str], list[str], set[str]]:
    """Of these commands' parsers: the option strings that take a value, every long one, and every one."""
    takes_value: set[str] = set()
    longs: list[str] = []
    every: set[str] = set()
    for command in commands:
        for action in build_parser(command)._actions:
            every.update(action.option_strings)
            for option in action.option_strings:
                if option.startswith("--"):
                    longs.append(option)
                if action.nargs != 0:
                    takes_value.add(option)
    return takes_value, longs, every


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
    # Built only once an option comes: the TUI's parser first (its options are the ones users put before a
    # subcommand: -F, --interval), every parser only for a word that is not one of them.
    global_table: tuple[set[str], list[str], set[str]] | None = None
    option_table: tuple[set[str], list[str], set[str]] | None = None
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
            if global_table is None:
                global_table = _value_options([None])
            table = global_table
            if word not in global_table[2]:
                if option_table is None:
                    option_table = _value_options([None, *SUBCOMMANDS])
                table = option_table
            index += 2 if _takes_value(word, table[0], table[1]) else 1
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
