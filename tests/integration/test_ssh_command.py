"""The remote command line: fixed text, one integer and validated numbers, nothing else (no sshd needed)."""

from __future__ import annotations
import __future__

import glob
import importlib.util
import marshal
import math
import os
import re
import shlex
import subprocess
import sys
import threading
import zlib

import pytest

from gputui.transports.base import LinkError, LinkOptions
from gputui.transports.ssh import AgentPayload, agent_command, agent_loader, agent_payload, agent_source

LOADER = re.compile(
    r"^python3 -u -c 'import sys,zlib,marshal;"
    r"exec\(\(lambda s,c:marshal\.loads\(zlib\.decompress\(c\)\) if c and"
    r" getattr\(sys\.modules\.get\(\"_frozen_importlib_external\"\),\"MAGIC_NUMBER\",0\)=="
    r"bytes\.fromhex\(\"([0-9a-f]+)\"\) else compile\(zlib\.decompress\(s\),\"gputui-agent\",\"exec\"\)\)"
    r"\(sys\.stdin\.buffer\.read\((\d+)\),sys\.stdin\.buffer\.read\((\d+)\)\)\)'"
    r" --interval [0-9.e+-]+ --process-interval [0-9.e+-]+ --elide-unchanged( --read-only)?( --no-discover)?$"
)
PAYLOAD = AgentPayload(b"x" * 12345, b"y" * 678, "a70d0d0a")


def test_command_holds_only_fixed_text_and_numbers() -> None:
    hostile = LinkOptions(
        memory_interval_s=0.25,
        process_interval_s=2,
        read_only=True,
        discover_health=False,
        health_urls=("http://x/$(touch /tmp/pwned)", "http://y/`id`;rm -rf ~"),
        extra={"anything": "'; touch /tmp/pwned; '"},
    )
    command = agent_command(PAYLOAD, hostile)
    match = LOADER.fullmatch(command)
    assert match is not None, command
    assert match.groups()[:3] == ("a70d0d0a", "12345", "678")
    assert shlex.split(command)[5:] == [
        "0.25", "--process-interval", "2.0", "--elide-unchanged", "--read-only", "--no-discover"
    ]
    assert "pwned" not in command
    assert "$" not in command
    assert "`" not in command


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_intervals_never_reach_the_command(bad: float) -> None:
    with pytest.raises(LinkError, match="positive number"):
        agent_command(PAYLOAD, LinkOptions(memory_interval_s=bad))
    with pytest.raises(LinkError, match="positive number"):
        agent_command(PAYLOAD, LinkOptions(process_interval_s=bad))


def test_an_empty_source_or_an_odd_magic_never_reaches_the_command() -> None:
    with pytest.raises(LinkError, match="empty"):
        agent_payload(b"")
    with pytest.raises(LinkError, match="empty"):
        agent_command(AgentPayload(b"", b"y", "a70d0d0a"), LinkOptions())
    with pytest.raises(LinkError, match="magic"):
        agent_command(AgentPayload(b"x", b"y", "a7'; id; '"), LinkOptions())


def test_the_shipped_source_is_the_collector_file() -> None:
    source = agent_source()
    assert b'if __name__ == "__main__":' in source
    payload = agent_payload(source)
    assert zlib.decompress(payload.source_zlib) == source
    assert payload.magic_hex == importlib.util.MAGIC_NUMBER.hex()
    code = marshal.loads(zlib.decompress(payload.code_zlib))  # noqa: S302 - our own bytes
    assert code.co_filename == "gputui-agent"
    plain = marshal.loads(zlib.decompress(agent_payload(b"x: int = 1").code_zlib))  # noqa: S302
    assert not plain.co_flags & __future__.annotations.compiler_flag  # ssh.py's own flags do not leak in
    match = LOADER.fullmatch(agent_command(payload, LinkOptions()))
    assert match is not None
    assert int(match.group(2)) + int(match.group(3)) == len(payload.data)


def _run_loader(payload: AgentPayload, python: str = sys.executable) -> str:
    done = subprocess.run(
        [python, "-c", agent_loader(payload)], input=payload.data + b"rest of stdin",
        capture_output=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


SOURCE = b"import sys; print('from source', repr(sys.stdin.buffer.read()))"


def test_the_loader_runs_the_code_when_the_magic_matches_and_the_source_otherwise() -> None:
    """Which of the two parts runs is told apart by what each prints; both leave the rest of stdin unread."""
    code = compile("import sys; print('from code', repr(sys.stdin.buffer.read()))", "gputui-agent", "exec")
    code_zlib = zlib.compress(marshal.dumps(code))
    magic = importlib.util.MAGIC_NUMBER.hex()
    source_zlib = zlib.compress(SOURCE)
    assert _run_loader(AgentPayload(source_zlib, code_zlib, magic)) == "from code b'rest of stdin'\n"
    other = "%08x" % (int(magic, 16) ^ 1)
    assert _run_loader(AgentPayload(source_zlib, code_zlib, other)) == "from source b'rest of stdin'\n"
    assert _run_loader(AgentPayload(source_zlib, b"", magic)) == "from source b'rest of stdin'\n"


def test_a_python_of_another_version_compiles_the_source() -> None:
    olds = sorted(glob.glob("/root/.pyenv/versions/3.8*/bin/python3.8") + glob.glob("/usr/bin/python3.8"))
    python = olds[0] if olds else sys.executable
    payload = agent_payload(SOURCE)
    if python == sys.executable:  # no other python here: make this one's magic the odd one out
        payload = AgentPayload(payload.source_zlib, payload.code_zlib, "00000000")
    assert _run_loader(payload, python) == "from source b'rest of stdin'\n"


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
    from gputui.transports.ssh.reduced import reduced_processes

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
    rows = {row["pid"]: row for row in reduced_processes(ps_lines, {201: {0: 1000}, 999: {1: 5}})}
    assert sorted(rows) == [100, 200, 201, 202, 400, 999]
    assert rows[201]["gpu_memory_mib"] == {"0": 1000}
    assert rows[200]["cmdline"] == ["python", "-m", "sglang.launch_server", "--tp", "8"]
    assert rows[202]["state"] == "Z"
    assert rows[999] == {"pid": 999, "gpu_memory_mib": {"1": 5}}


def test_links_opening_at_once_share_one_payload_build() -> None:
    """A fleet's links open together: the payload is built once, and every link gets that same object."""
    source = b"# " + os.urandom(16).hex().encode() + b"\n" + agent_source()  # not built before
    barrier = threading.Barrier(8)
    built: list[AgentPayload] = []

    def open_one() -> None:
        barrier.wait()
        built.append(agent_payload(source))

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(built) == 8
    assert all(payload is built[0] for payload in built)
