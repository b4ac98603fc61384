"""What an unprivileged user's processes can do to the collector's stream: nothing that blinds the monitor.

Real processes with megabytes of argv, stuck in D state (the parent of a ``vfork()`` waits in the kernel), and
the real collector shipped over a real sshd: the snapshot still arrives, with each command line cut on the
wire and marked, and the whole text is one ``process`` command away.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.agent.remote.serve import Writer
from gputui.agent.wire import PROCESS_TEXT_BYTES, WIRE_CMDLINE_BYTES
from gputui.core.link import LinkOptions, full_sample, process_text
from gputui.core.model import HostSnapshot
from gputui.transports.ssh import LINE_CAP_BYTES, SshLink
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO, build_vfork_waiter, state_of, wait_for
from tests.integration.sshd import ClientHome, SshdFactory

ARG_BYTES = 128 * 1024 - 1
"""The longest one argument may be (MAX_ARG_STRLEN, 32 pages, counts the terminating NUL)."""
ARG_COUNT = 15
CONTROL_ARGV = ["\x01" * ARG_BYTES] * ARG_COUNT
"""~1.9 MiB of control bytes: ~11.5 MiB once JSON-escaped (each byte becomes \\u0001)."""
PLAIN_ARGV = ["x" * ARG_BYTES] * ARG_COUNT


class Waiters:
    """D-state processes (vfork parents) with the given argv; each is its own session, killed as a group."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []

    def start(self, argv: list[str]) -> int:
        # An empty environment: argv and environment together must fit in ARG_MAX (a quarter of the stack).
        proc = subprocess.Popen(
            [str(self.binary), *argv],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env={},
            start_new_session=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the waiter did not report its pid"
        pid = int(json.loads(proc.stdout.readline())["pid"])
        wait_for(lambda: state_of(pid) == "D", f"pid {pid} to wait in D state")
        self.pids.append(pid)
        return pid

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the vfork child dies, so its waiting parent can
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def waiters(tmp_path: Path) -> Iterator[Waiters]:
    running = Waiters(build_vfork_waiter(tmp_path))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def host_a(sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml) -> str:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    return "host-a"


def _gputui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


def wire_bytes(argv: list[str]) -> int:
    """Bytes of this argv in a collector line (compact JSON, UTF-8)."""
    return len(json.dumps(argv, ensure_ascii=False, separators=(",", ":")).encode())


def _listed(host: dict, pid: int) -> dict:
    matches = [p for p in host["processes"] if p["pid"] == pid]
    assert matches, f"pid {pid} is not listed"
    return matches[0]


def test_megabytes_of_argv_in_d_state_processes_still_give_a_snapshot_over_ssh(
    host_a: str, waiters: Waiters
) -> None:
    """Two D-state processes with ~1.9 MiB of control bytes each, and nine with ~1.9 MiB of plain text:
    uncut, the first two alone make a 23 MiB line and the nine 18 MiB."""
    hostile = [waiters.start(CONTROL_ARGV) for _ in range(2)]
    plain = [waiters.start(PLAIN_ARGV) for _ in range(9)]

    # Every process of the sample: these D-state processes are in no GPU job, and no finding names them yet.
    done = _gputui("snapshot", "--json", "--all-processes", host_a)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "over 16 MiB" not in done.stderr
    host = json.loads(done.stdout)["hosts"][0]
    assert host["error"] is None
    assert len(host["gpus"]) == 8
    for pid in hostile + plain:
        listed = _listed(host, pid)
        assert listed["state"] == "D"
        assert listed["cmdline_truncated"] is True
        assert wire_bytes(listed["cmdline"]) <= WIRE_CMDLINE_BYTES
    assert _listed(host, hostile[0])["cmdline"][1].startswith("\\x01" * 100)
    assert _listed(host, plain[0])["cmdline"][1].startswith("x" * 1000)
    assert len(done.stdout.encode()) < LINE_CAP_BYTES // 8

    # The TUI's way: the stream itself (not only the one-shot sample) carries the host.
    link = SshLink(host_a, LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=20.0))
    link.open()
    try:
        deadline = time.monotonic() + 60
        streamed: HostSnapshot | None = None
        while streamed is None or not streamed.processes:
            assert time.monotonic() < deadline, "no snapshot with processes from the stream"
            streamed = link.next_snapshot(2.0)
        proc = streamed.process(plain[0])
        assert proc is not None
        assert proc.cmdline_truncated

        # The whole text, on request: exactly the argv the process was started with.
        whole = process_text(link, proc)
        assert whole.cmdline == (str(waiters.binary), *PLAIN_ARGV)
        assert whole.cmdline_truncated is False
        # Control bytes escape sixfold: even the whole-text answer stays under its own cap.
        hostile_proc = full_sample(link, host_a).process(hostile[0])
        assert hostile_proc is not None
        capped = process_text(link, hostile_proc)
        assert capped.cmdline_truncated is True
        assert wire_bytes(list(capped.cmdline)) <= PROCESS_TEXT_BYTES
        assert capped.cmdline[0] == str(waiters.binary)
    finally:
        link.close()


def test_the_collector_writes_whole_lines_when_stdout_takes_part_of_them() -> None:
    """``python3 -u`` makes stdout a raw file: a write may take part of a line (a non-blocking pipe here);
    the rest must follow, or the client glues the tail of one line to the next."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    stream = open(write_end, "wb", buffering=0)  # noqa: SIM115 - closed below
    received = bytearray()

    def drain() -> None:
        while True:
            time.sleep(0.002)  # slower than the writer: the pipe fills up
            chunk = os.read(read_end, 65536)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    writer = Writer(stream)
    lines = [{"t": "snapshot", "n": n, "pad": "p" * 300_000} for n in range(5)]
    try:
        for line in lines:
            assert writer.write(line)
    finally:
        stream.close()
    reader.join(30)
    os.close(read_end)
    assert [json.loads(raw) for raw in bytes(received).splitlines()] == lines


def test_a_host_with_more_stuck_processes_than_a_line_holds_says_how_many_are_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gputui.agent.collector import Agent
    from gputui.agent.proc import processes
    from tests.integration._procs import ZOMBIE_MAKER, script, state_of, wait_for

    roles = ["parent", "zombie"]
    with (
        script(ZOMBIE_MAKER, roles) as one,
        script(ZOMBIE_MAKER, roles) as two,
        script(ZOMBIE_MAKER, roles) as three,
    ):
        zombies = {s.pids["zombie"] for s in (one, two, three)}
        # The parent says its child's pid right after the fork: the child may not have exited yet.
        wait_for(lambda: all(state_of(pid) == "Z" for pid in zombies), "the three zombies")
        collector = Agent(use_pynvml=False, discover_health=False)
        try:
            listed = collector.sample(force_processes=True)
            assert zombies <= {p["pid"] for p in listed["processes"]}
            assert listed["processes_omitted"] == 0
            # Room for no zombie with its ancestors: each is left out, and counted.
            monkeypatch.setattr(processes, "WIRE_MAX_PROCESSES", 1)
            capped = collector.sample(force_processes=True)
            assert len(capped["processes"]) <= 1  # (pid 1 itself, were it ever seen in D state)
            assert not zombies & {p["pid"] for p in capped["processes"]}
            assert capped["processes_omitted"] >= len(zombies)
            assert HostSnapshot.from_dict(capped).processes_omitted == capped["processes_omitted"]
        finally:
            collector.close()


def test_a_host_without_python3_cuts_command_lines_too(
    sshd_factory: SshdFactory, ssh_client: ClientHome
) -> None:
    """The reduced mode reads ``ps``: a process's line is cut as the collector cuts command lines."""
    from tests.integration._procs import SLEEPER, script
    from tests.integration.sshd import host_without_python

    gpus = "0, NVIDIA H200, GPU-aaaa-0000, 00000000:17:00.0, 20483, 143771, 97, 61, 512.30, 700.00\n"
    server = host_without_python(sshd_factory, ssh_client, "reduced", gpus)
    assert server.smi_dir is not None
    with script(SLEEPER, ["sleeper"], argv_extra=["y" * 100_000]) as holder:
        pid = holder.pids["sleeper"]
        (server.smi_dir / "apps.csv").write_text(f"GPU-aaaa-0000, {pid}, 20480\n")
        done = _gputui("snapshot", "--json", "reduced")
    assert done.returncode == 0, done.stderr
    listed = _listed(json.loads(done.stdout)["hosts"][0], pid)
    assert listed["cmdline_truncated"] is True
    assert len(" ".join(listed["cmdline"])) < 4096
    assert listed["cmdline"][-1].startswith("y" * 1000)
