"""The command line's own parsing: subcommand detection, flag validation, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputui import __version__
from gputui.commands.grammar.parser import build_parser, split_command
from gputui.commands.inputs.targets import default_targets, options_from_args

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("argv", "command", "rest"),
    [
        (["snapshot", "--json"], "snapshot", ["--json"]),
        (["--demo", "check", "--wait", "5"], "check", ["--demo", "--wait", "5"]),
        (["host-a", "host-b"], None, ["host-a", "host-b"]),
        (["--read-only", "kill", "host-a", "42"], "kill", ["--read-only", "host-a", "42"]),
        # Global options with a value before the subcommand: the value is not the subcommand or a host.
        (["--interval", "2", "snapshot"], "snapshot", ["--interval", "2"]),
        (["-F", "cfg", "snapshot", "a"], "snapshot", ["-F", "cfg", "a"]),
        (["--int", "2", "check"], "check", ["--int", "2"]),  # an abbreviation, as argparse takes it
        (["--interval=2", "-Fcfg", "kill", "1"], "kill", ["--interval=2", "-Fcfg", "1"]),
        (["--wait", "5", "check"], "check", ["--wait", "5"]),  # a subcommand's own option, given first
        # A host that happens to be named like a subcommand comes after "--".
        (["--", "check"], None, ["--", "check"]),
        ([], None, []),
    ],
)
def test_split_command(argv: list[str], command: str | None, rest: list[str]) -> None:
    assert split_command(argv) == (command, rest)


def test_options_may_follow_positionals() -> None:
    args = build_parser("kill").parse_intermixed_args(["host-a", "--yes", "4200", "--tree", "4201"])
    assert (args.words, args.yes, args.tree) == (["host-a", "4200", "4201"], True, True)
    words = ["host-a", "--json", "host-b", "--interval", "2"]
    snapshot = build_parser("snapshot").parse_intermixed_args(words)
    assert (snapshot.targets, snapshot.json, snapshot.interval) == (["host-a", "host-b"], True, 2.0)


def test_common_flags_reach_the_link_options() -> None:
    args = build_parser("snapshot").parse_args(
        [
            "--interval",
            "0.5",
            "--process-interval",
            "2",
            "--read-only",
            "--health",
            "http://127.0.0.1:1/health",
            "--no-discover",
            "--health-generate",
            "--accept-new",
            "-F",
            "/tmp/cfg",
            "host-a",
        ]
    )
    options = options_from_args(args)
    assert options.memory_interval_s == 0.5
    assert options.process_interval_s == 2.0
    assert options.read_only
    assert options.accept_new
    assert not options.discover_health
    assert options.health_generate
    assert options.health_urls == ("http://127.0.0.1:1/health",)
    assert options.extra == {"ssh_config": "/tmp/cfg"}
    assert args.targets == ["host-a"]


def test_default_targets() -> None:
    assert default_targets([], demo=False) == ["local"]
    assert default_targets([], demo=True) == ["gpu-node-07"]
    assert default_targets(["a", "b"], demo=True) == ["a", "b"]


def test_version() -> None:
    done = _run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"gputui {__version__}"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["snapshot", "--interval", "nan"], "--interval: must be seconds from 0.05 to 3600: 'nan'"),
        (["snapshot", "--interval", "-1"], "must be seconds from 0.05 to 3600"),
        # Busy-looped both ends at ~95 % CPU:
        (["--interval", "1e-300", "snapshot"], "--interval: must be seconds from 0.05 to 3600: '1e-300'"),
        (["check", "--process-interval", "1e-300"], "--process-interval: must be seconds from 0.05 to 3600"),
        # OverflowError tracebacks, the escalate one after the signal went out unaudited:
        (["snapshot", "--connect-timeout", "1e10"], "--connect-timeout: must be seconds from 0.5 to 600"),
        (["kill", "--escalate", "1e10", "host-a", "1"], "--escalate: must be seconds from 0.1 to 3600"),
        (["kill", "--escalate", "inf", "1"], "--escalate: must be seconds from 0.1 to 3600: 'inf'"),
        (["check", "--wait", "soon"], "not a number"),
        (["check", "--wait", "1e10"], "--wait: must be seconds from 0 to 86400"),
        (["check", "--baseline-mib", "-3"], "--baseline-mib: must be a whole number of MiB from 0 to 1048"),
        (["check", "--tolerance-mib", "99999999999"], "--tolerance-mib: must be a whole number of MiB"),
        (["kill", "--signal", "HUP", "1"], "invalid choice"),
        (["snapshot", "--ssh-client", "putty", "host-a"], "--ssh-client: invalid choice: 'putty'"),
        (["--no-such-flag"], "unrecognized arguments"),
        (["--demo", "kill", "1e3"], "not a process id: '1e3' (process ids are decimal numbers)"),
        (["--demo", "kill", "0x10"], "not a process id: '0x10'"),
        (["--demo", "kill", "+5"], "not a process id: '+5'"),
        (["--demo", "kill", "gpu-node-07", "12abc"], "not a process id: '12abc'"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert fragment in done.stderr
    assert "Traceback" not in done.stderr
    assert len(lines) == 1
    assert lines[0].startswith("gputui: ")


@pytest.mark.parametrize(
    ("argv", "audited"),
    [([], True), (["--no-audit"], False), (["--demo"], False)],
)
def test_the_tui_audits_real_kills_only(argv: list[str], audited: bool) -> None:
    from gputui.commands.tui import build_app

    args = build_parser(None).parse_args(argv)
    args.config = None
    assert (build_app(args).audit is not None) is audited


def _demo_kill(state_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``gputui kill --demo --yes ARGS`` with its state (audit log) directory under ``state_home``."""
    import os

    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", "kill", "--demo", "--yes", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, XDG_STATE_HOME=str(state_home)),
    )


def test_a_demo_kill_never_writes_the_real_audit_log(tmp_path: Path) -> None:
    done = _demo_kill(tmp_path, "--signal", "KILL", "4250")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4250  signal   KILL  sent" in done.stdout
    assert not (tmp_path / "gputui").exists()


def test_kill_help_states_the_job_rule_the_escalation_and_the_exit_codes() -> None:
    text = build_parser("kill").format_help()
    assert "share its session and cgroup" in text
    assert "TERM escalates to KILL after 5 s" in text
    assert "0  every targeted process is gone" in text
    assert "--no-escalate" in text
    assert "--no-audit" in text


@pytest.mark.parametrize("columns", [50, 120])
def test_help_is_laid_out_as_argparse_lays_it_out_for_the_terminal_width(
    monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    """The parsers' formatter works out the width without shutil: the help must be argparse's own, line for
    line, at the width ``COLUMNS`` gives (kill's and reset's epilogs kept as written)."""
    import argparse

    monkeypatch.setenv("COLUMNS", str(columns))
    for command in (None, "snapshot", "check", "kill", "reset"):
        parser = build_parser(command)
        ours = parser.format_help()
        raw = issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter
        assert ours == parser.format_help(), command
    assert "\n  0  the reset can go ahead" in build_parser("reset").format_help()
    options = [line for line in build_parser(None).format_help().splitlines() if line.startswith("  -")]
    widest = max(len(line) for line in options)
    assert widest <= columns - 2
    assert (widest > 50) == (columns == 120)


def test_kill_without_escalation_says_after_the_delay_that_it_is_still_alive(tmp_path: Path) -> None:
    """``--no-escalate``: TERM only, and the exit status tells the truth (1: it survived)."""
    import json

    done = _demo_kill(tmp_path, "--json", "--no-escalate", "4250")
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert (document["plan"]["escalate_s"], document["plan"]["wait_s"]) == (None, 5.0)
    assert [(o["stage"], o["signal"], o["result"]) for o in document["outcomes"]] == [
        ("signal", "TERM", "sent"),
        ("wait", None, "still_alive"),
    ]
    assert document["outcomes"][-1]["detail"] == "still alive 5 s after TERM"
    assert document["all_gone"] is False


def test_a_word_close_to_a_command_is_a_mistyped_command(tmp_path: Path) -> None:
    """Not a host to connect to ("chek" opened the TUI on a host of that name): unless this machine knows a
    host by that name, from the ssh config, known_hosts or the gputui config."""
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(
        f"Host chekk\n  HostName 127.0.0.1\nHost *\n  UserKnownHostsFile {tmp_path / 'known_hosts'}\n"
        "  GlobalKnownHostsFile /dev/null\n"
    )
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIGpyE2hDsV0l5tZHb3qxvLWJwYzT"
    (tmp_path / "known_hosts").write_text(f"kil ssh-ed25519 {key}\n")
    for word, meant in (("chek", "check"), ("snapshoot", "snapshot"), ("kiil", "kill")):
        done = _run("-F", str(ssh_config), word)
        assert done.returncode == 2
        assert done.stderr == f"gputui: unknown command '{word}' (did you mean {meant}?)\n"
        assert done.stdout == ""
    from gputui.cli import mistyped_command

    args = build_parser(None).parse_args(["-F", str(ssh_config)])
    assert mistyped_command("chekk", args) is None  # an ssh alias
    assert mistyped_command("kil", args) is None  # in known_hosts
    assert mistyped_command("gpu-node-07", args) is None  # close to nothing
    assert mistyped_command("chek.example.com", args) is None  # a name with dots is a host
    assert mistyped_command("root@chek", args) is None


def test_config_must_be_a_small_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1024 * 1024) + "\n")
    for path, why in (
        ("/dev/zero", "not a regular file"),
        (str(fifo), "not a regular file"),
        (str(tmp_path), "not a regular file"),
        (str(big), "larger than 1024 KiB"),
    ):
        done = _run("--config", path, "snapshot", "--demo")
        assert done.returncode == 2, path
        assert done.stderr == f"gputui: {path}: {why}\n"


def test_output_to_a_closed_pipe_or_a_full_disk_ends_quietly() -> None:
    reader, writer = os.pipe()
    os.close(reader)  # nobody reads: the first write gets EPIPE
    done = subprocess.run(
        [sys.executable, "-m", "gputui.cli", "snapshot", "--demo", "--json"],
        stdout=writer,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )
    os.close(writer)
    assert done.returncode == 2
    assert done.stderr == ""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "gputui.cli", "check", "--demo"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 2
    assert done.stderr == "gputui: cannot write the output: No space left on device\n"


@pytest.mark.parametrize(
    ("argv", "collecting"),
    [
        (["snapshot", "--json", "--demo"], False),
        (["check", "--demo"], False),
        (["check", "--demo", "--wait", "5"], True),
        (["--demo"], True),  # the TUI
        (["exporter", "--once", "/nonexistent/out.prom"], False),
        (["exporter"], True),
    ],
)
def test_the_garbage_collector_is_on_for_commands_that_keep_running(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], collecting: bool
) -> None:
    """Set-up runs without cyclic collection; a command that keeps running gets it back, and ``main``
    leaves the caller's collector as it found it."""
    import gc

    from gputui import cli

    seen: list[bool] = []

    def run(command: str | None, args: object) -> int:
        seen.append(gc.isenabled())
        return 0

    monkeypatch.setattr(cli, "_run", run)
    assert gc.isenabled()
    assert cli.main(argv) == 0
    assert seen == [collecting]
    assert gc.isenabled()
    gc.disable()
    try:
        assert cli.main(argv) == 0
        assert seen == [collecting, False]  # a caller that had it off keeps it off
        assert not gc.isenabled()
    finally:
        gc.enable()
