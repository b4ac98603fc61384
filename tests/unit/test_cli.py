"""The command line's own parsing: subcommand detection, flag validation, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gputui import __version__
from gputui.cli import build_parser, split_command
from gputui.targets import default_targets, options_from_args

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True, text=True, timeout=60, cwd=str(REPO), stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("argv", "command", "rest"),
    [
        (["snapshot", "--json"], "snapshot", ["--json"]),
        (["--demo", "check", "--wait", "5"], "check", ["--demo", "--wait", "5"]),
        (["host-a", "host-b"], None, ["host-a", "host-b"]),
        (["--read-only", "kill", "host-a", "42"], "kill", ["--read-only", "host-a", "42"]),
        # A host that happens to be named like a subcommand comes after "--".
        (["--", "check"], None, ["--", "check"]),
        ([], None, []),
    ],
)
def test_split_command(argv: list[str], command: str | None, rest: list[str]) -> None:
    assert split_command(argv) == (command, rest)


def test_common_flags_reach_the_link_options() -> None:
    args = build_parser("snapshot").parse_args(
        ["--interval", "0.5", "--process-interval", "2", "--read-only", "--health", "http://127.0.0.1:1/health",
         "--no-discover", "--health-generate", "--accept-new", "-F", "/tmp/cfg", "host-a"]
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
        (["snapshot", "--interval", "nan"], "must be a positive number"),
        (["snapshot", "--interval", "-1"], "must be a positive number"),
        (["check", "--wait", "soon"], "not a number"),
        (["check", "--baseline-mib", "-3"], "must not be negative"),
        (["kill", "--signal", "HUP", "1"], "invalid choice"),
        (["--no-such-flag"], "unrecognized arguments"),
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
    assert (build_app(args)._audit is not None) is audited


def _demo_kill(state_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``gputui kill --demo --yes ARGS`` with its state (audit log) directory under ``state_home``."""
    import os

    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", "kill", "--demo", "--yes", *args],
        capture_output=True, text=True, timeout=60, cwd=str(REPO), stdin=subprocess.DEVNULL,
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


def test_kill_without_escalation_says_after_the_delay_that_it_is_still_alive(tmp_path: Path) -> None:
    """``--no-escalate``: TERM only, and the exit status tells the truth (1: it survived)."""
    import json

    done = _demo_kill(tmp_path, "--json", "--no-escalate", "4250")
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert (document["plan"]["escalate_s"], document["plan"]["wait_s"]) == (None, 5.0)
    assert [(o["stage"], o["signal"], o["result"]) for o in document["outcomes"]] == [
        ("signal", "TERM", "sent"), ("wait", None, "still_alive")
    ]
    assert document["outcomes"][-1]["detail"] == "still alive 5 s after TERM"
    assert document["all_gone"] is False
