"""The config file: per-host health URLs, and one clear line for every way the file can be wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gputui.commands.grammar.parser import build_parser
from gputui.commands.inputs.targets import options_from_args
from gputui.core.store import Config, ConfigError, default_config_path, load_config

REPO = Path(__file__).resolve().parents[2]


def test_missing_default_file_is_an_empty_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_config_path() == str(tmp_path / "gputui" / "config.toml")
    assert load_config() == Config()


def test_default_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "gputui").mkdir()
    (tmp_path / "gputui" / "config.toml").write_text('health = "http://127.0.0.1:30000/health"\n')
    assert load_config().health_urls == ("http://127.0.0.1:30000/health",)


def test_the_site_s_accepted_xids(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("accepted_xids = [4242, 13]\n")
    assert load_config(path).accepted_xids == frozenset({13, 4242})
    assert Config().accepted_xids == frozenset()


def test_probe_after_check_is_read_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("probe_after_check = true\n")
    assert load_config(path).probe_after_check is True
    assert Config().probe_after_check is False


def test_per_host_urls_are_added_to_that_host_only(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'health = ["http://127.0.0.1:30000/health"]\n'
        '[hosts."gpu-node-07"]\n'
        'health = ["http://127.0.0.1:8000/health", "http://127.0.0.1:30000/health"]\n'
    )
    args = build_parser("snapshot").parse_args(["--health", "http://127.0.0.1:9/health"])
    args.config = load_config(path)
    options = options_from_args(args)
    everywhere = ("http://127.0.0.1:30000/health", "http://127.0.0.1:9/health")
    assert options.health_urls == everywhere
    assert options.for_target("gpu-node-08").health_urls == everywhere
    assert options.for_target("gpu-node-07").health_urls == (*everywhere, "http://127.0.0.1:8000/health")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("health = [", "not valid TOML"),
        ("helth = []", "unknown setting 'helth'"),
        ('[hosts."a"]\nport = 3', "unknown setting hosts.'a'.'port'"),
        ("health = 3", "health must be a URL or a list of URLs"),
        ("hosts = 3", "hosts must be a table"),
        ("[hosts]\na = 3", "hosts.'a' must be a table"),
        ('ssh_client = "putty"', 'ssh_client must be one of "paramiko", "openssh", "auto", "config"'),
        ("ssh_client = 1", "ssh_client must be one of"),
        ('[hosts."a"]\nssh_client = "OpenSSH"', "hosts.'a'.ssh_client must be one of"),
        ("accepted_xids = 13", "accepted_xids must be a list of Xid numbers (1 to 65535)"),
        ('accepted_xids = ["13"]', "accepted_xids must be a list of Xid numbers"),
        ("accepted_xids = [true]", "accepted_xids must be a list of Xid numbers"),
        ("accepted_xids = [0, 70000]", "accepted_xids must be a list of Xid numbers"),
        ('probe_after_check = "yes"', "probe_after_check must be true or false"),
    ],
)
def test_bad_files_are_one_clear_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert fragment in message
    assert message.startswith(str(path))
    assert "\n" not in message


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml")


def test_binary_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xff\xfe\x00health")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_cli_reports_a_bad_config_in_one_line_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("health = [\n")
    done = subprocess.run(
        [sys.executable, "-m", "gputui.cli", "snapshot", "--demo", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"gputui: {path}: not valid TOML")


def test_ssh_client_globally_per_host_and_from_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('ssh_client = "auto"\n[hosts."gpu-bastioned"]\nssh_client = "openssh"\n')
    config = load_config(path)
    assert (config.ssh_client, config.host_ssh_clients) == ("auto", {"gpu-bastioned": "openssh"})
    args = build_parser("snapshot").parse_args(["gpu-a"])
    args.config = config
    options = options_from_args(args)
    assert options.for_target("gpu-a").ssh_client == "auto"
    assert options.for_target("gpu-bastioned").ssh_client == "openssh"
    # The flag is the user's word for this run: it beats the file, per host too.
    args = build_parser("snapshot").parse_args(["--ssh-client", "paramiko", "gpu-a"])
    args.config = config
    options = options_from_args(args)
    assert options.for_target("gpu-bastioned").ssh_client == "paramiko"
    # Nothing said anywhere: per host, by what its ssh config needs (``client_choice``).
    args = build_parser("snapshot").parse_args(["gpu-a"])
    args.config = Config()
    assert options_from_args(args).for_target("gpu-a").ssh_client == "config"


def test_a_planted_default_config_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default file goes through ``safefile``: a FIFO never blocks, another user's file or a folder
    others may write is refused, as OpenSSH refuses such a ~/.ssh/config."""
    import os

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    folder = tmp_path / "gputui"
    folder.mkdir(mode=0o700)
    path = folder / "config.toml"
    os.mkfifo(path)
    with pytest.raises(ConfigError, match=r"config\.toml: a FIFO, not a regular file$"):
        load_config()
    path.unlink()
    path.write_text('ssh_client = "openssh"\n')
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match=r"config\.toml: owned by uid 65534"):
        load_config()
    os.chown(path, os.geteuid(), os.getegid())
    folder.chmod(0o777)
    with pytest.raises(ConfigError, match=r"folder .*gputui: writable by group or others \(mode 0777\)$"):
        load_config()


def test_a_default_config_linked_from_a_dotfiles_folder_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir(mode=0o700)
    (dotfiles / "gputui.toml").write_text('ssh_client = "openssh"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "config" / "gputui").mkdir(parents=True, mode=0o700)
    (tmp_path / "config" / "gputui" / "config.toml").symlink_to(dotfiles / "gputui.toml")
    assert load_config().ssh_client == "openssh"
    (dotfiles / "gputui.toml").chmod(0o666)  # what the link leads to is checked as any other file
    with pytest.raises(ConfigError, match=r"gputui\.toml: writable by group or others"):
        load_config()
