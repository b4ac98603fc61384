"""Command-line entry: the TUI, ``snapshot``, ``check``, ``kill``, ``reset``, ``leftovers``, ``exporter``,
``record``, ``replay`` and ``bundle``.

The words are parsed by ``commands.grammar``. A first word close to a subcommand that is no host this machine
knows of is a mistyped command, not a host to connect to.

Python's cyclic garbage collector is off while a command is set up: start-up creates tens of thousands of
objects that live until exit (modules, functions, classes, tables) and the collector would rescan them
several times over while they are made, a tenth of a one-shot's own CPU. A command that keeps running (the
TUI, the exporter's server, ``check --wait``) turns it back on before it starts; the others are bounded and
end with it off (reference counting still frees everything that is not a cycle).

Every failure a user can cause or meet (bad input, no driver, unreachable host) ends as one line on stderr
naming the host and the cause, and exit status 2; never a traceback. Output to a closed pipe or a full
disk ends quietly, with status 2.
"""

from __future__ import annotations

import argparse
import errno
import gc
import os
import signal
import sys
from collections.abc import Sequence

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MISTYPED_COMMAND_CUTOFF = 0.75
"""How close (difflib's ratio) a word must be to a subcommand to be taken for a mistyped one."""


def mistyped_command(word: str, args: argparse.Namespace) -> str | None:
    """The subcommand ``word`` was probably meant to be ("chek": "check"), when no host by that name is known.

    Known means: "local", a host of the gputui config file, a Host alias of the ssh config, a name in
    known_hosts or /etc/hosts. Decided on this machine alone, without a name lookup: a real host whose
    name is one letter off a subcommand and is known to none of those is reached as ``gputui -- NAME``.
    """
    if any(char in word for char in "@:.[/") or word == "local":  # user@host, host:port, a FQDN or an IP
        return None
    import difflib  # only for a first word that may be a mistyped command

    from gputui.commands.grammar.parser import SUBCOMMANDS

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
    from gputui.transports.ssh.hostkeys.knownhosts import known_key_types, load_known_hosts, lookup_name

    try:
        settings = resolve(word, getattr(args, "ssh_config", None))
    except (LinkError, OSError):
        return False
    if settings.hostname != word:  # an alias: the ssh config names it
        return True
    try:
        known = load_known_hosts(settings.user_known_hosts_files + settings.global_known_hosts_files)
    except LinkError:
        return False
    name = lookup_name(settings.hostname, settings.port, settings.host_key_alias)
    return bool(known_key_types(known, name))


def _etc_hosts_names(path: str = "/etc/hosts") -> set[str]:
    from gputui.agent.safefile import UnsafeFile, read_plain

    names: set[str] = set()
    try:
        data = read_plain(path, 4 << 20)  # a hint only: a FIFO, a device or a huge file gives none
    except UnsafeFile:
        return names
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        names.update(line.split("#", 1)[0].split()[1:])
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
    if command in ("record", "replay", "bundle"):
        from importlib import import_module

        return int(import_module(f"gputui.commands.{command}").run(args))
    from gputui.commands.tui import run_tui

    return run_tui(args)


def _print_reference(args: argparse.Namespace) -> int:
    """``--print-completion SHELL`` or ``--print-man``, from the parsers, before any config file is read."""
    from gputui.commands.grammar.completion import completion_script, manual_page

    try:
        text = completion_script(args.print_completion) if args.print_completion else manual_page()
    except ImportError as exc:  # shtab is a dependency: only a broken install lacks it
        print(f"gputui: --print-completion needs the shtab package: {exc}", file=sys.stderr)
        from gputui.commands.grammar.parser import EXIT_ERROR

        return EXIT_ERROR
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        return _quiet_output_failure(exc)
    return 0


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
    from gputui.commands.grammar.parser import EXIT_ERROR

    return EXIT_ERROR


def runs_long(command: str | None, args: argparse.Namespace) -> bool:
    """Whether the command keeps running until stopped or a deadline (the collector is back on for it)."""
    if command is None:  # the TUI
        return True
    if command == "exporter":
        return not getattr(args, "once", False)
    if command in ("record", "replay"):
        return not (getattr(args, "json", False) or getattr(args, "timeline", False))
    return command == "check" and getattr(args, "wait", None) is not None


def main(argv: Sequence[str] | None = None) -> int:
    """Run gputui; returns the exit status."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv, collecting)
    finally:
        if collecting:
            gc.enable()


def _main(argv: Sequence[str] | None, collecting: bool) -> int:
    # Imported here, with the collector off (see the module's docstring).
    from gputui.commands.grammar import fleet as fleet_options
    from gputui.commands.grammar.parser import EXIT_ERROR, parse_words, split_command

    command, rest = split_command(sys.argv[1:] if argv is None else argv)
    args: Any = parse_words(command, rest)
    if command is None and (args.print_completion or args.print_man):
        return _print_reference(args)
    from gputui.core.store import ConfigError, load_config

    try:
        args.config = load_config(args.config)
        if command not in ("kill", "exporter", "reset", "leftovers", "record", "replay", "bundle"):
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
    if collecting and runs_long(command, args):
        gc.enable()
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


def run() -> None:
    """The console script: ``main``, then the process ends with its status.

    What the command made is frozen out of the collector first: finalization would otherwise run one full
    collection over every object of the process, modules and all, just before it frees them anyway.
    """
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    run()
