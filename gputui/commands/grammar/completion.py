"""Shell completion and the manual page, made from the parsers themselves (``parser.build_parser``).

Completion: one parser stands for the whole grammar, the TUI's with every subcommand's parser below it as an
argparse subcommand, and shtab writes the bash, zsh and fish scripts from it (imported only then). The
manual page is roff written here from the same parsers: each option once, the common ones in a section of
their own, every command's description and exit status as its ``--help`` gives them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from gputui import __version__
from gputui.commands.grammar.parser import (
    COMMON_DESCRIPTION,
    COMMON_TITLE,
    SUBCOMMANDS,
    SUMMARIES,
    TUI_EPILOG,
    build_parser,
)

MAN_TITLE = "User Commands"
MAN_NAME = "terminal GPU monitor: memory, process trees, zombies, health, the clean slate"
MAN_SEE_ALSO = "nvidia-smi(1), ssh(1), ssh_config(5)"
MAN_FILES = (
    ("$XDG_CONFIG_HOME/gputui/config.toml", "health and metrics URLs, the SSH client, accepted Xids, groups"),
    ("$XDG_STATE_HOME/gputui/audit.jsonl", "every signal and reset step, before it is sent and after"),
    ("$XDG_STATE_HOME/gputui/baselines.json", "each GPU's idle memory by UUID (gputui check --calibrate)"),
    ("$XDG_STATE_HOME/gputui/", "watched_ports.json, leftovers.json, ui.json: read by the next check or run"),
    ("$XDG_CACHE_HOME/gputui/", "the collector bundle sent to remote hosts"),
)


def whole_parser() -> argparse.ArgumentParser:
    """The TUI's parser with each subcommand's own parser as an argparse subcommand.

    The TUI's TARGET words are left out of it, so that completion offers the subcommands at the first word.
    """
    root = build_parser(None)
    _drop(root, lambda action: action.dest == "targets")
    commands = root.add_subparsers(dest="command", metavar="SUBCOMMAND", title="subcommands")
    for name in SUBCOMMANDS:
        own = build_parser(name)
        commands.add_parser(
            name,
            parents=[own],
            add_help=False,
            help=SUMMARIES.get(name, ""),
            description=SUMMARIES.get(name, ""),  # what the shells show beside the subcommand's name
            formatter_class=own.formatter_class,
            usage=own.usage,
        )
    return root


def _drop(parser: argparse.ArgumentParser, which: Callable[[argparse.Action], bool]) -> None:
    """Take the actions ``which`` selects out of the parser and its groups."""
    for action in [action for action in parser._actions if which(action)]:
        parser._remove_action(action)
        for group in parser._action_groups:
            if action in group._group_actions:
                group._group_actions.remove(action)


def completion_script(shell: str) -> str:
    """The completion script for ``shell`` (bash, zsh or fish).

    Raises:
        NotImplementedError: a shell shtab does not write for.
    """
    import shtab  # only for --print-completion

    return str(shtab.complete(whole_parser(), shell=shell))


def _groups(parser: argparse.ArgumentParser) -> tuple[list[argparse.Action], list[argparse.Action]]:
    """(own, common) actions of a parser, help left out; positionals first among its own."""
    common = [a for g in parser._action_groups if g.title == COMMON_TITLE for a in g._group_actions]
    own = [a for a in parser._actions if a not in common and not isinstance(a, argparse._HelpAction)]
    own.sort(key=lambda action: bool(action.option_strings))
    return own, common


def manual_page() -> str:
    """gputui(1) in roff: the TUI, its options, the common options once, then each subcommand with its own
    options and the common ones it does not take, every command's exit status, the files."""
    root = build_parser(None)
    own, common = _groups(root)
    lines = [
        f'.TH GPUTUI 1 "" "gputui {_escape(__version__)}" "{MAN_TITLE}"',
        ".SH NAME",
        f"gputui \\- {_escape(MAN_NAME)}",
        ".SH SYNOPSIS",
        *_usage_lines(root),
        ".br",
        ".B gputui",
        "\\fISUBCOMMAND\\fR [options] [\\fIWORDS\\fR ...]",
        ".SH DESCRIPTION",
        *_paragraphs(root.description or ""),
        ".SH OPTIONS",
        *_options(root, own),
        f".SH {COMMON_TITLE.upper()}",
        *_paragraphs(COMMON_DESCRIPTION + "."),
        *_options(root, common),
        ".SH SUBCOMMANDS",
    ]
    offered = {action.dest for action in common}
    exit_status = [".SH EXIT STATUS", ".SS gputui", *_verbatim(_exit_lines(TUI_EPILOG))]
    for name in SUBCOMMANDS:
        parser = build_parser(name)
        own, common = _groups(parser)
        left_out = offered - {action.dest for action in common}
        missing = [action.option_strings[-1] for action in _groups(root)[1] if action.dest in left_out]
        takes = "It takes the common options" + (f", except {', '.join(missing)}." if missing else ".")
        lines += [
            f".SS gputui {name}",
            *_usage_lines(parser),
            ".PP",
            *_paragraphs(f"{parser.description or ''}\n\n{takes}"),
            *_options(parser, own),
        ]
        exit_status += [f".SS gputui {name}", *_verbatim(_exit_lines(parser.epilog or ""))]
    lines += exit_status
    lines += [".SH FILES"]
    for path, what in MAN_FILES:
        lines += [".TP", f"\\fI{_escape(path)}\\fR", _escape(what)]
    lines += [".SH SEE ALSO", _escape(MAN_SEE_ALSO)]
    return "\n".join(lines) + "\n"


def _usage_lines(parser: argparse.ArgumentParser) -> list[str]:
    """``.B gputui check`` then the rest of its usage line."""
    usage = (parser.usage or parser.prog).replace("%(prog)s", parser.prog)
    rest = usage[len(parser.prog) :].strip()
    return [f".B {_escape(parser.prog)}", _escape(rest)]


def _options(parser: argparse.ArgumentParser, actions: Iterable[argparse.Action]) -> list[str]:
    """One ``.TP`` per option or positional: its invocation as --help writes it, then its help."""
    formatter = parser._get_formatter()
    lines: list[str] = []
    for action in actions:
        invocation = formatter._format_action_invocation(action)
        lines += [".TP", f"\\fB{_escape(invocation)}\\fR", _escape(formatter._expand_help(action))]
    return lines


def _exit_lines(epilog: str) -> list[str]:
    """An epilog's lines after its "exit status:" heading (the section has that heading)."""
    lines = epilog.splitlines()
    return lines[1:] if lines and lines[0] == "exit status:" else lines


def _paragraphs(text: str) -> list[str]:
    """Text in fill mode, ``.PP`` between its blank-line-separated paragraphs."""
    lines: list[str] = []
    for paragraph in text.strip().split("\n\n"):
        if lines:
            lines.append(".PP")
        lines += [_escape(line) for line in paragraph.splitlines()]
    return lines


def _verbatim(lines: list[str]) -> list[str]:
    """Lines kept as they are written (no fill)."""
    return [".nf", *(_escape(line) for line in lines), ".fi"]


def _escape(text: str) -> str:
    """Text for roff: backslashes and hyphens spelled out, a line that would read as a request guarded."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text
