"""Every ``--help`` says what the command does and its exit status, lists its own options before the common
ones, offers only what means something to it, and gives every option a line; the shell completion scripts
and the manual page, generated here through the real command line, cover every subcommand and option."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.commands.grammar.parser import COMMON_TITLE, NOT_OFFERED, SUBCOMMANDS, build_parser

REPO = Path(__file__).resolve().parents[2]
COMMANDS: list[str | None] = [None, *SUBCOMMANDS]
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _gputui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _common(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for group in parser._action_groups
        if group.title == COMMON_TITLE
        for action in group._group_actions
        for option in action.option_strings
    }


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_has_a_description_and_its_exit_status(command: str | None) -> None:
    parser = build_parser(command)
    assert parser.description, command
    assert len(parser.description.split()) >= 12, command
    text = parser.format_help()
    status = text[text.index("exit status") :]
    assert re.search(r"^\s+0  \S", status, re.M), command
    assert re.search(r"^\s+2  \S", status, re.M), command


@pytest.mark.parametrize("command", COMMANDS)
def test_own_options_come_first_then_the_common_ones_in_their_group(command: str | None) -> None:
    parser = build_parser(command)
    text = parser.format_help()
    common_at = text.index(f"\n{COMMON_TITLE}:\n")
    common = _common(parser)
    assert "--interval" in common
    assert "--config" in common
    own = _options(parser) - common - {"-h", "--help"}
    assert own, command
    for option in own:
        assert text.index(f" {option}") < common_at, (command, option)
    for option in common:
        assert text.index(f" {option}", common_at) > common_at, (command, option)
    # The usage line names the options, it does not repeat them: the list below does.
    assert len(parser.format_usage().splitlines()) == 1


def test_every_option_of_every_parser_has_help() -> None:
    for command in COMMANDS:
        for action in build_parser(command)._actions:
            assert action.help, (command, action)
            assert action.help != argparse.SUPPRESS, (command, action)
            assert action.help.strip(), (command, action)


def test_the_exporter_offers_only_what_it_uses() -> None:
    parser = build_parser("exporter")
    offered = _options(parser)
    for option in (
        "--demo",
        "--accept-new",
        "-F",
        "--ssh-config",
        "--ssh-client",
        "--connect-timeout",
        "--read-only",
    ):
        assert option not in offered, option
    for option in (
        "--interval",
        "--health",
        "--no-discover",
        "--baseline-mib",
        "--config",
        "--listen",
        "--once",
    ):
        assert option in offered, option
    # What it does not offer reads as the exporter always behaves: this host, read-only, no SSH.
    args = parser.parse_intermixed_args([])
    assert (args.demo, args.read_only, args.accept_new, args.ssh_config, args.ssh_client) == (
        False,
        True,
        False,
        None,
        None,
    )
    assert set(NOT_OFFERED["exporter"]) <= set(vars(args))


@pytest.mark.parametrize(
    "words", [["exporter", "--demo"], ["-F", "cfg", "exporter"], ["exporter", "--accept-new"]]
)
def test_an_option_the_exporter_does_not_take_is_one_line(words: list[str]) -> None:
    done = _gputui(*words)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("gputui: unrecognized arguments:")
    assert "gputui exporter --help" in line
    assert not done.stdout


def test_the_other_commands_keep_every_common_option() -> None:
    every = _common(build_parser(None))
    for command in SUBCOMMANDS:
        left_out = {f"--{dest.replace('_', '-')}" for dest in NOT_OFFERED.get(command, {})}
        assert _common(build_parser(command)) | left_out | {"-F"} >= every, command


def _bash_sections(script: str) -> tuple[list[str], dict[str | None, set[str]]]:
    (commands,) = re.findall(r"^_shtab_gputui_subparsers=\((.*)\)$", script, re.M)
    sections: dict[str | None, set[str]] = {}
    for name, options in re.findall(r"^_shtab_gputui(_\w+)?_option_strings=\((.*)\)$", script, re.M):
        sections[name[1:] if name else None] = set(options.split())
    return commands.split(), sections


def _zsh_sections(script: str) -> tuple[list[str], dict[str | None, set[str]]]:
    listed = re.search(r"_shtab_gputui_commands\(\) \{\n  local _commands=\((.*?)\n  \)", script, re.S)
    assert listed is not None
    commands = re.findall(r"^\s+([\w-]+):", listed.group(1), re.M)
    sections: dict[str | None, set[str]] = {}
    for name, block in re.findall(r"^_shtab_gputui(_\w+)?_options=\((.*?)\n\)", script, re.M | re.S):
        found = set(OPTION.findall(re.sub(r"\[[^\n]*\]", "", block)))
        found |= {f"-{x}" if len(x) == 1 else f"--{x}" for x in re.findall(r"\{-(\w),--([\w-]+)\}", block)[0]}
        sections[name[1:] if name else None] = found
    return commands, sections


def _fish_sections(script: str) -> tuple[list[str], dict[str | None, set[str]]]:
    commands = re.findall(
        r"-n '_shtab_gputui_using; and test \$_shtab_gputui_npos -eq 0' -a ([\w-]+)", script
    )
    sections: dict[str | None, set[str]] = {}
    for line in script.splitlines():
        where = re.match(
            r"complete -c gputui -n (?:'_shtab_gputui_using ([\w-]+)'|_shtab_gputui_using )", line
        )
        if where is None:
            continue
        line = line.split(" -d ", 1)[0]  # the description may quote a command line ("man -l -")
        found = {f"-{s}" for s in re.findall(r" -s (\w)\b", line)} | {
            f"--{x}" for x in re.findall(r" -l ([\w-]+)", line)
        }
        sections.setdefault(where.group(1), set()).update(found)
    return commands, sections


@pytest.mark.parametrize(
    ("shell", "sections_of"), [("bash", _bash_sections), ("zsh", _zsh_sections), ("fish", _fish_sections)]
)
def test_the_completion_covers_every_subcommand_and_option(shell: str, sections_of) -> None:  # type: ignore[no-untyped-def]
    done = _gputui("--print-completion", shell)
    assert done.returncode == 0, done.stderr
    commands, sections = sections_of(done.stdout)
    assert sorted(commands) == sorted(SUBCOMMANDS)
    for command in COMMANDS:
        assert sections.get(command) == _options(build_parser(command)), (shell, command)


def test_an_unknown_shell_is_one_line() -> None:
    done = _gputui("--print-completion", "tcsh")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "bash" in done.stderr


def _man_sections(page: str) -> dict[str, str]:
    """``.SH``/``.SS`` title → its text (up to the next heading), hyphens unescaped."""
    sections: dict[str, str] = {}
    for title, body in re.findall(r"^\.S[HS] ([^\n]+)\n(.*?)(?=^\.S[HS] |\Z)", page, re.M | re.S):
        sections[title] = body.replace("\\-", "-")
    return sections


def _man_options(body: str) -> set[str]:
    """The options a section lists: the invocation line of each ``.TP`` entry."""
    return {
        option for line in re.findall(r"^\.TP\n\\fB(.*)\\fR$", body, re.M) for option in OPTION.findall(line)
    }


def test_the_manual_page_covers_every_subcommand_option_and_exit_status() -> None:
    done = _gputui("--print-man")
    assert done.returncode == 0, done.stderr
    page = done.stdout
    assert page.startswith(".TH GPUTUI 1 ")
    sections = _man_sections(page[: page.index(".SH EXIT STATUS")])  # whose .SS repeat the commands
    root = build_parser(None)
    common = _common(root)
    assert _man_options(sections["OPTIONS"]) == _options(root) - common - {"-h", "--help"}
    assert _man_options(sections["COMMON OPTIONS"]) == common
    for command in SUBCOMMANDS:
        parser = build_parser(command)
        body = sections[f"gputui {command}"]
        own = _options(parser) - _common(parser) - {"-h", "--help"}
        assert _man_options(body) == own, command
        # The common options it does not take are named, and only those.
        said = re.search(r"It takes the common options(?:, except (.*?))?\.(?: |$)", body.replace("\n", " "))
        assert said is not None, command
        missing = set(OPTION.findall(said.group(1) or ""))
        assert {a for a in common if a not in _common(parser)} - {"-F"} == missing, command
        assert (parser.description or "").split()[0] in body
    exit_status = page[page.index(".SH EXIT STATUS") : page.index(".SH FILES")]
    for command in COMMANDS:
        title = "gputui" if command is None else f"gputui {command}"
        assert f".SS {title}\n.nf\n" in exit_status, command
    assert "CANNOT TELL" in exit_status
    assert "every targeted process is gone" in exit_status
