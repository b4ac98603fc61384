"""The remote command line: fixed text, one integer and validated numbers, nothing else (no sshd needed)."""

from __future__ import annotations

import math
import re
import shlex

import pytest

from gputui.transports.base import LinkError, LinkOptions
from gputui.transports.ssh import agent_command, agent_source

LOADER = re.compile(
    r"^python3 -u -c 'import sys;exec\(compile\(sys\.stdin\.buffer\.read\((\d+)\),"
    r"\"gputui-agent\",\"exec\"\)\)'"
    r" --interval [0-9.e+-]+ --process-interval [0-9.e+-]+( --read-only)?( --no-discover)?$"
)


def test_command_holds_only_fixed_text_and_numbers() -> None:
    hostile = LinkOptions(
        memory_interval_s=0.25,
        process_interval_s=2,
        read_only=True,
        discover_health=False,
        health_urls=("http://x/$(touch /tmp/pwned)", "http://y/`id`;rm -rf ~"),
        extra={"anything": "'; touch /tmp/pwned; '"},
    )
    command = agent_command(12345, hostile)
    match = LOADER.fullmatch(command)
    assert match is not None, command
    assert match.group(1) == "12345"
    assert shlex.split(command)[5:] == ["0.25", "--process-interval", "2.0", "--read-only", "--no-discover"]
    assert "pwned" not in command
    assert "$" not in command
    assert "`" not in command


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_intervals_never_reach_the_command(bad: float) -> None:
    with pytest.raises(LinkError, match="positive number"):
        agent_command(100, LinkOptions(memory_interval_s=bad))
    with pytest.raises(LinkError, match="positive number"):
        agent_command(100, LinkOptions(process_interval_s=bad))


def test_source_length_must_be_a_positive_int() -> None:
    with pytest.raises(LinkError):
        agent_command(0, LinkOptions())


def test_the_shipped_source_is_the_collector_file() -> None:
    source = agent_source()
    assert b'if __name__ == "__main__":' in source
    assert LOADER.fullmatch(agent_command(len(source), LinkOptions()))
