"""gputui's own processes are known by their command line, never by "gputui" somewhere in a path."""

from __future__ import annotations

import shlex

import pytest

from gputui.agent.protocol import is_gputui_command
from gputui.core.link import LinkOptions
from gputui.transports.ssh.payload import agent_payload, remote_command_line


def test_the_collector_sent_over_ssh_is_gputui() -> None:
    assert is_gputui_command(shlex.split(remote_command_line(agent_payload(None), LinkOptions())))


@pytest.mark.parametrize(
    "cmdline",
    [
        ["gputui"],
        ["/home/u/.venv/bin/gputui", "exporter"],
        ["/usr/bin/python3", "/home/u/.venv/bin/gputui", "check"],
        ["python3", "-m", "gputui.cli", "snapshot"],
        ["python3.11", "-u", "-m", "gputui"],
    ],
)
def test_gputui_itself(cmdline: list[str]) -> None:
    assert is_gputui_command(cmdline)


@pytest.mark.parametrize(
    "cmdline",
    [
        ["/home/u/gputui-experiments/.venv/bin/python", "train.py"],
        ["/opt/gputui/.venv/bin/python3", "-m", "sglang.launch_server", "--tp", "8"],
        ["python3", "/home/u/gputui-experiments/train.py"],
        ["python3", "-c", "print('gputui')"],
        ["/srv/gputui/bin/server", "--gputui"],
        [],
    ],
)
def test_a_path_or_a_word_that_says_gputui_is_not_gputui(cmdline: list[str]) -> None:
    assert not is_gputui_command(cmdline)
