"""Health discovery reads the command lines of the processes whose name says they may be launchers, never
every process's: real processes, the collector's own process sampler."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gputui.agent.proc import processes
from gputui.agent.proc.procfs import read_stat
from gputui.agent.servers.discovery import health_launcher_like_name


@contextmanager
def running(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("name", "may_be_launcher"),
    [
        ("python3", True),
        ("python3.11", True),
        ("pt_main_thread", True),
        ("sglang", True),
        ("VLLM::EngineCor", True),
        ("sleep", False),
        ("bash", False),
        ("sshd", False),
    ],
)
def test_launcher_like_names(name: str, may_be_launcher: bool) -> None:
    assert health_launcher_like_name(name) is may_be_launcher


def test_only_launcher_like_processes_have_their_command_line_read(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[int] = []
    real_read = processes.read_cmdline

    def counting_read(pid: int) -> list[str] | None:
        read.append(pid)
        return real_read(pid)

    monkeypatch.setattr(processes, "read_cmdline", counting_read)
    launcher_argv = [sys.executable, "-c", "import time; time.sleep(120)", "-m", "sglang.launch_server"]
    with running(["sleep", "120"]) as sleeper, running(launcher_argv) as python:
        sampler = processes.ProcessSampler(False, may_be_launcher=health_launcher_like_name)
        try:
            found = {entry["pid"]: entry["cmdline"] for entry in sampler.launcher_cmdlines()}
            assert found[python.pid] == launcher_argv
            assert sleeper.pid not in found
            assert read, "nothing read"
            names = {pid: stat.name for pid in read if (stat := read_stat(pid)) is not None}
            assert all(health_launcher_like_name(name) for name in names.values()), names
            # Kept per process: asked again at once, nothing is read again.
            read.clear()
            again = {entry["pid"]: entry["cmdline"] for entry in sampler.launcher_cmdlines()}
            assert again[python.pid] == launcher_argv
            assert python.pid not in read
        finally:
            sampler.close()
