"""@group targets, --hosts-file, and choosing the Prometheus fleet: every mistake is one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputui.commands.grammar.fleet import FleetOptionError, expand_targets, read_hosts_file, resolve
from gputui.commands.grammar.parser import build_parser
from gputui.core.store import Config, ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def _resolve(argv: list[str], command: str | None, config: Path | None = None):  # type: ignore[no-untyped-def]
    args = build_parser(command).parse_args(argv)
    args.config = load_config(config) if config is not None else Config()
    resolve(args, command)
    return args


def test_groups_and_hosts_file_expand_in_order_without_repeats(tmp_path: Path) -> None:
    groups = '[groups]\na100 = ["gpu-a", "gpu-b"]\nh100 = ["gpu-b", "gpu-c"]\n'
    config = load_config(_config(tmp_path, groups))
    hosts = tmp_path / "hosts"
    hosts.write_text("# the rack\ngpu-d\n\n  gpu-a   # again\n@h100\nroot@10.0.0.7:2222\n")
    assert expand_targets(["local", "@a100", "@h100"], hosts, config) == [
        "local",
        "gpu-a",
        "gpu-b",
        "gpu-c",
        "gpu-d",
        "root@10.0.0.7:2222",
    ]
    # Typed twice stays twice: the TUI refuses it as before.
    assert expand_targets(["gpu-a", "gpu-a"], None, config) == ["gpu-a", "gpu-a"]


def test_unknown_group_names_the_known_ones(tmp_path: Path) -> None:
    path = _config(tmp_path, '[groups]\na100 = ["gpu-a"]\n')
    with pytest.raises(FleetOptionError) as caught:
        expand_targets(["@h100"], None, load_config(path))
    assert str(caught.value) == f"no group 'h100' in {path} ([groups]: a100)"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"gpu-a gpu-b\n", "hosts:1: one target per line"),
        (b"\xff\xfe\n", "not UTF-8 text"),
        (b"gpu-a\x00\n", "not a text file"),
        (b"# only comments\n\n", "no targets in it"),
    ],
)
def test_bad_hosts_files(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "hosts"
    path.write_bytes(content)
    with pytest.raises(FleetOptionError, match=expected) as caught:
        read_hosts_file(path)
    assert "\n" not in str(caught.value)


def test_hosts_files_that_are_not_regular_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(FleetOptionError, match="not a regular file|cannot open"):
            read_hosts_file(path)
    with pytest.raises(FleetOptionError, match="cannot open: No such file"):
        read_hosts_file(tmp_path / "missing")


def test_the_fleet_is_chosen_by_flag_or_config(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        '[fleet]\nprometheus = "http://prom:9090/"\nmatch = \'job="dcgm"\'\nhost_label = "node"\n'
        'ssh_target = "admin@{host}"\nstale_after_s = 30\nrefresh_s = 1.5\n',
    )
    tui = _resolve([], None, config)
    assert tui.fleet is not None
    assert tui.fleet.settings.url == "http://prom:9090"
    assert tui.fleet.settings.matcher == 'job="dcgm"'
    assert tui.fleet.settings.host_label == "node"
    assert tui.fleet.settings.stale_after_s == 30.0
    assert tui.fleet.refresh_s == 1.5
    assert tui.fleet.ssh_target == "admin@{host}"
    # A target named, or a script: the config alone does not turn the fleet on.
    assert _resolve(["gpu-a"], None, config).fleet is None
    assert _resolve([], "check", config).fleet is None
    flagged = _resolve(["--prometheus", "http://other:9090", "--match", 'instance=~"x"'], "check", config)
    assert flagged.fleet.settings.url == "http://other:9090"
    assert flagged.fleet.settings.matcher == 'instance=~"x"'
    assert _resolve(["--prometheus"], "snapshot", config).fleet.settings.url == "http://prom:9090"


@pytest.mark.parametrize(
    ("argv", "command", "expected"),
    [
        (["--prometheus"], "snapshot", "--prometheus: no URL given and no [fleet] prometheus"),
        (["--prometheus", "gpu-a"], None, "--prometheus: not an http(s) URL: 'gpu-a'"),
        (["--prometheus", "http://p:9090", "gpu-a"], None, "name no targets"),
        (["--prometheus", "http://p:9090", "--demo"], None, "--demo simulates hosts"),
        (["--prometheus", "http://p:9090", "--calibrate"], "check", "--calibrate records one idle host"),
        (["--match", 'job="x"'], "check", "--match selects DCGM series: it needs --prometheus"),
        (
            ["--prometheus", "http://p:9090", "--match", "up or vector(1)"],
            "check",
            "--match: not a label matcher",
        ),
    ],
)
def test_fleet_option_mistakes(argv: list[str], command: str | None, expected: str) -> None:
    with pytest.raises(FleetOptionError) as caught:
        _resolve(argv, command)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[fleet]\nprometheus = 9090\n", "fleet.prometheus must be a string"),
        ("[fleet]\nrefresh_s = 0\n", "fleet.refresh_s must be a number of seconds above 0"),
        ("[fleet]\nrefresh_s = 1e300\n", "fleet.refresh_s must be a number of seconds above 0"),
        ("[fleet]\nport = 1\n", "unknown setting fleet.'port'"),
        ('[groups]\na = "gpu-a"\n', "groups.'a' must be a list of host targets"),
        ("groups = 3\n", "groups must be a table"),
    ],
)
def test_bad_fleet_and_group_config(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(_config(tmp_path, text))


def test_a_bad_template_in_the_config_names_the_file(tmp_path: Path) -> None:
    config = _config(tmp_path, '[fleet]\nprometheus = "http://p:9090"\nssh_target = "-o{host}"\n')
    with pytest.raises(FleetOptionError) as caught:
        _resolve([], None, config)
    assert str(caught.value).startswith(f"{config}: ssh_target '-o{{host}}' does not give a valid target")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["@nope"], "gputui: no group 'nope' in"),
        (["--hosts-file", "/dev/zero"], "gputui: --hosts-file /dev/zero: not a regular file"),
        (["snapshot", "--prometheus", "ftp://x"], "gputui: --prometheus: not an http(s) URL: 'ftp://x'"),
        (["check", "--match", "x"], "gputui: --match selects DCGM series: it needs --prometheus"),
    ],
)
def test_the_command_line_says_one_line_and_exits_2(tmp_path: Path, argv: list[str], expected: str) -> None:
    done = _run(*argv, env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.startswith(expected), done.stderr
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
