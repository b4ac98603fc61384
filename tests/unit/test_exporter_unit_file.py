"""The systemd unit in contrib/: an unprivileged, read-only service whose command line is the CLI's own."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

from gputui.commands.grammar.exporter import DEFAULT_LISTEN
from gputui.commands.grammar.parser import build_parser, split_command

UNIT = Path(__file__).resolve().parents[2] / "contrib" / "systemd" / "gputui-exporter.service"


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def test_the_service_runs_unprivileged_and_read_only() -> None:
    service = _service()
    assert service["DynamicUser"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert "User" not in service or service["User"] != "root"


def test_its_command_line_is_the_exporter_on_loopback() -> None:
    argv = shlex.split(_service()["ExecStart"])
    command, rest = split_command(argv[1:])
    assert command == "exporter"
    args = build_parser(command).parse_intermixed_args(rest)
    assert args.listen == DEFAULT_LISTEN
    assert not args.insecure
    assert args.once is None
