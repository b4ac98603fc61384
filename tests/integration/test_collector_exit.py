"""A collector ends within seconds once its client is gone, at any stage, and leaves no process behind.

The real collector, started exactly as the SSH transport starts it (the loader reads the payload from stdin):
its stdin closed before it could say hello, its parent killed while its stdin stays open elsewhere, and a
real sshd whose client goes away. The end-of-run check of the suite (``tests/leakcheck.py``) is itself tried
on a run that leaks a collector.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gputui.core.link import LinkOptions
from gputui.transports.ssh import SshLink
from tests.integration._procs import AGENT_PAYLOAD, BOOTSTRAP, REPO, is_gone, wait_for
from tests.integration.sshd import ClientHome, SshdFactory
from tests.leakcheck import RUN_TOKEN_VAR, run_token

GONE_WITHIN_S = 20.0
"""A generous "does not hang" deadline: the collector checks every 0.5 s."""

HANGING_SMI = """#!/bin/sh
# An nvidia-smi stuck in the driver: says who it is, then never answers.
echo $$ >> "{pids}"
exec sleep 600
"""


def _hanging_smi(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "smi-pids"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(HANGING_SMI.replace("{pids}", str(pids)))
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
    env.pop("LD_LIBRARY_PATH", None)
    return env, pids


def test_stdin_closed_before_the_hello_ends_the_collector_and_its_children(tmp_path: Path) -> None:
    """Its start takes ~10 s here (nvidia-smi hangs, and each wait for it is bounded by 5 s); the client gave
    up at once. Before, it finished starting, said hello to nobody, and only then noticed."""
    env, smi_pids = _hanging_smi(tmp_path)
    collector = subprocess.Popen(
        [sys.executable, "-u", "-c", BOOTSTRAP, "--no-pynvml", "--no-discover"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd="/",
        start_new_session=True,
    )
    try:
        assert collector.stdin is not None
        collector.stdin.write(AGENT_PAYLOAD.data)
        collector.stdin.flush()
        wait_for(lambda: smi_pids.exists(), "the collector to start nvidia-smi")
        collector.stdin.close()  # the client is gone
        assert collector.wait(GONE_WITHIN_S) == 0
        assert collector.stdout is not None
        assert collector.stdout.read() == b""  # it never got as far as the hello
        for pid in [int(p) for p in smi_pids.read_text().split()]:
            wait_for(lambda pid=pid: is_gone(pid), f"its nvidia-smi {pid} to be gone", GONE_WITHIN_S)
    finally:
        if collector.poll() is None:
            collector.kill()
            collector.wait(10)
        for stream in (collector.stdout, collector.stderr):
            if stream is not None:
                stream.close()
        for pid in [int(p) for p in smi_pids.read_text().split()] if smi_pids.exists() else []:
            if not is_gone(pid):
                os.kill(pid, signal.SIGKILL)


PARENT = textwrap.dedent("""
    import json, subprocess, sys, time
    argv, stdin_fd = json.loads(sys.argv[1]), int(sys.argv[2])
    child = subprocess.Popen(argv, stdin=stdin_fd, stdout=subprocess.DEVNULL, pass_fds=(stdin_fd,), cwd="/")
    print(child.pid, flush=True)
    time.sleep(600)
""")


def test_parent_death_ends_the_collector_even_with_its_stdin_still_open() -> None:
    """sshd's session process is killed, but something else still holds the collector's stdin (no EOF)."""
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-u", "-c", BOOTSTRAP, "--no-pynvml", "--no-discover", "--interval", "0.2"]
    env = dict(os.environ, PATH="/nonexistent")
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, json.dumps(argv), str(read_end)],
        stdout=subprocess.PIPE,
        pass_fds=(read_end,),
        env=env,
        start_new_session=True,
    )
    os.close(read_end)
    collector_pid = 0
    try:
        os.write(write_end, AGENT_PAYLOAD.data)
        assert parent.stdout is not None
        collector_pid = int(parent.stdout.readline())
        time.sleep(1.0)  # serving by now: hello and snapshots go to /dev/null
        assert not is_gone(collector_pid)
        parent.kill()
        parent.wait(10)
        wait_for(lambda: is_gone(collector_pid), "the orphaned collector to end", GONE_WITHIN_S)
    finally:
        os.close(write_end)
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()
        if collector_pid and not is_gone(collector_pid):
            os.kill(collector_pid, signal.SIGKILL)


def _processes_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if marker.encode() in fh.read().split(b"\0") and not is_gone(int(name)):
                    found.append(int(name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("stage", ["before hello", "after hello"])
def test_over_ssh_nothing_stays_when_the_client_gives_up(
    sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path, stage: str
) -> None:
    """Not the collector, not its nvidia-smi, not a session process: everything of the server ends."""
    server = sshd_factory(python="bare", nvml=False)  # no NVML library: the collector reads nvidia-smi
    smi = server.python_dir / "nvidia-smi"
    if stage == "before hello":
        smi.write_text(HANGING_SMI.replace("{pids}", str(tmp_path / "smi-pids")))
    else:
        smi.write_text("#!/bin/sh\nexit 9\n")  # no driver: the collector says so and serves
    smi.chmod(0o755)
    marker = f"HOME={server.env['HOME']}"  # every session of this server, and what it starts
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    link = SshLink("host-a", LinkOptions(memory_interval_s=0.5, connect_timeout_s=3.0))
    try:
        if stage == "before hello":
            with pytest.raises(Exception, match="no hello"):
                link.open()
            assert (tmp_path / "smi-pids").exists()
        else:
            link.open()
            assert link.next_snapshot(10.0) is not None
            assert _processes_with(marker)  # the session and its collector run now
    finally:
        link.close()
    wait_for(lambda: not _processes_with(marker), "every process of the session to end", GONE_WITHIN_S)


LEAKY_RUN = textwrap.dedent("""
    from tests.integration._procs import AgentProcess

    kept = []

    def test_starts_a_collector_and_forgets_it():
        agent = AgentProcess(("--no-pynvml", "--no-discover"), env=None)
        kept.append(agent)  # its stdin stays open: the collector serves until someone ends it
        with open("collector.pid", "w") as fh:
            fh.write(str(agent.proc.pid))
""")


def test_the_suite_fails_when_a_test_leaks_a_collector(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    pytester.makepyfile(test_leaky=LEAKY_RUN)
    options = ("-p", "tests.leakcheck", "-p", "no:cacheprovider", "--leak-grace=2")
    result = pytester.runpytest_subprocess(*options)
    pid = int((pytester.path / "collector.pid").read_text())
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"FAILED: the run left 1 process(es) behind (killed now): pid {pid}: *"])
    assert is_gone(pid)
    # The same run without the leak passes: the check counts only what that run started.
    pytester.makepyfile(test_leaky="def test_nothing():\n    pass\n")
    clean = pytester.runpytest_subprocess(*options)
    assert clean.ret == pytest.ExitCode.OK
    assert os.environ[RUN_TOKEN_VAR] == run_token()  # this run's token is untouched by the inner runs
