"""The remote command line: fixed text, one integer and validated numbers, nothing else (no sshd needed)."""

from __future__ import annotations

import math
import re
import shlex
import subprocess

import pytest

from gputui.transports.base import LinkError, LinkOptions
from gputui.transports.ssh import agent_command, agent_source

LOADER = re.compile(
    r"^python3 -u -c 'import sys;exec\(compile\(sys\.stdin\.buffer\.read\((\d+)\),"
    r"\"gputui-agent\",\"exec\"\)\)'"
    r" --interval [0-9.e+-]+ --process-interval [0-9.e+-]+ --elide-unchanged( --read-only)?( --no-discover)?$"
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
    assert shlex.split(command)[5:] == [
        "0.25", "--process-interval", "2.0", "--elide-unchanged", "--read-only", "--no-discover"
    ]
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


def test_reduced_command_is_valid_sh_with_only_fixed_text() -> None:
    from gputui.transports.ssh import reduced_command

    command = reduced_command("0123456789abcdef", LinkOptions(memory_interval_s=0.5))
    words = shlex.split(command)
    assert words[:2] == ["sh", "-c"]
    assert len(words) == 3
    checked = subprocess.run(["sh", "-n", "-c", words[2]], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    assert "sleep 0.5 " in words[2]
    for bad in ("", "XYZ", "abc'; touch /tmp/x", "0123456789abcdeg"):
        with pytest.raises(LinkError):
            reduced_command(bad, LinkOptions())


def test_reduced_process_selection() -> None:
    from gputui.transports.ssh import _reduced_processes

    ps_lines = [
        "    1     0 Ss   root     /sbin/init",
        "  100     1 Ss   alice    bash",
        "  200   100 Sl   alice    python -m sglang.launch_server --tp 8",
        "  201   200 Sl   alice    python scheduler worker",
        "  202   200 Z    alice    [python] <defunct>",
        "  300     1 S    bob      unrelated editor",
        "  400     1 D    bob      stuck in io",
        "garbage line",
    ]
    rows = {row["pid"]: row for row in _reduced_processes(ps_lines, {201: {0: 1000}, 999: {1: 5}})}
    assert sorted(rows) == [100, 200, 201, 202, 400, 999]
    assert rows[201]["gpu_memory_mib"] == {"0": 1000}
    assert rows[200]["cmdline"] == ["python", "-m", "sglang.launch_server", "--tp", "8"]
    assert rows[202]["state"] == "Z"
    assert rows[999] == {"pid": 999, "gpu_memory_mib": {"1": 5}}
