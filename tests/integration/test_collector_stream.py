"""The collector stream over a child process's pipes: the command and stream of SSH, without paramiko.

``sh -c <remote_command_line>`` runs the command an SSH server would hand to the login shell, and the
stream writes the bundle and the commands to its stdin and reads its stdout through ``ProcessPipe``, the
pipe a transport over the system ssh client would have. Whatever the stream promises (hello, snapshots,
replies, stale, the end of a host without python3, quit on close) holds without an SSH channel underneath,
for a stand-in collector and for the installed one shipped as its bundle.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gputui.agent.protocol import CMD_CALIBRATE, MODE_NVML, PROTOCOL_VERSION
from gputui.core.link import LinkError, LinkOptions
from gputui.transports.ssh.errors import PythonMissing
from gputui.transports.ssh.payload import agent_payload, remote_command_line
from gputui.transports.ssh.stream import CollectorStream
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO
from tests.integration.sshd import stand_in_agent

OPTIONS = LinkOptions(memory_interval_s=0.3, process_interval_s=0.3)
DEADLINE_S = 30.0
POLL_S = 1.0


class ProcessPipe:
    """``stream.Pipe`` over a child process's stdin, stdout and stderr (what ``ssh -T`` would give)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        self.proc = proc
        self._stdin = proc.stdin.fileno()
        self._stdout = proc.stdout.fileno()
        self._stderr = proc.stderr.fileno()
        os.set_blocking(self._stdin, False)
        os.set_blocking(self._stderr, False)
        # The stream's reader thread may still be in a call when the test closes the pipe: the lock keeps
        # a closed (or reused) descriptor from being read, and a closed pipe reads as ended.
        self._lock = threading.Lock()
        self._closed = False

    def recv(self, max_bytes: int) -> bytes | None:
        with self._lock:
            if self._closed:
                return b""
            readable, _, _ = select.select([self._stdout], [], [], POLL_S)
            return os.read(self._stdout, max_bytes) if readable else None

    def send(self, data: memoryview) -> int | None:
        with self._lock:
            if self._closed:
                raise BrokenPipeError("pipe closed")
            _, writable, _ = select.select([], [self._stdin], [], POLL_S)
            if not writable:
                return None
            try:
                return os.write(self._stdin, data)
            except BlockingIOError:
                return None

    def stderr(self, tail_bytes: int) -> bytes:
        with self._lock:
            return b"" if self._closed else self._stderr_tail(tail_bytes)

    def _stderr_tail(self, tail_bytes: int) -> bytes:
        tail = bytearray()
        while True:
            try:
                chunk = os.read(self._stderr, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            tail += chunk
            del tail[:-tail_bytes]
        return bytes(tail)

    def exit_status(self, wait_s: float) -> int | None:
        try:
            return self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                assert stream is not None
                stream.close()


@contextmanager
def running(
    source: bytes | None, env: dict[str, str] | None = None
) -> Iterator[tuple[CollectorStream, ProcessPipe]]:
    """The command an SSH server would run for ``source`` (None: the installed collector), run by ``sh -c``,
    and a started stream over it."""
    payload = agent_payload(source)
    proc = subprocess.Popen(
        ["/bin/sh", "-c", remote_command_line(payload, OPTIONS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
        env=env,
    )
    pipe = ProcessPipe(proc)
    stream = CollectorStream("pipe-host", pipe, stale_after_s=1.0, first_grace_s=5.0)
    try:
        stream.start(payload.data, 10.0)
        yield stream, pipe
    finally:
        stream.end(2.0)
        if proc.poll() is None:
            proc.kill()
        proc.wait(DEADLINE_S)


def test_hello_snapshots_replies_and_quit_over_a_child_process() -> None:
    with running(stand_in_agent()) as (stream, pipe):
        hello = stream.hello
        assert hello is not None
        assert (hello["protocol"], hello["mode"]) == (1, "stand-in")
        snapshot = stream.next_snapshot(10.0)
        assert snapshot is not None
        assert snapshot.target == "pipe-host"
        assert stream.request({"cmd": "echo", "payload": "é;$(x)"}, 10.0) == {"echo": "é;$(x)"}
        with pytest.raises(LinkError, match=r"^pipe-host: frobnicate failed: stand-in: unknown command$"):
            stream.request({"cmd": "frobnicate"}, 10.0)
        stream.close()
        assert pipe.proc.wait(DEADLINE_S) == 0  # the collector quit when asked
        with pytest.raises(LinkError, match=r"^pipe-host: link closed$"):
            _read_twice(stream)  # a snapshot taken before the close may come first, then no more


def _read_twice(stream: CollectorStream) -> None:
    stream.next_snapshot(1.0)
    stream.next_snapshot(1.0)


def test_a_silent_collector_goes_stale() -> None:
    with running(stand_in_agent("hang_after_hello")) as (stream, _pipe):
        with pytest.raises(LinkError, match=r"^pipe-host: no data for \d+\.\d s$"):
            stream.next_snapshot(DEADLINE_S)


def test_no_python3_is_told_apart_from_other_ends() -> None:
    no_python = {"PATH": str(REPO / "tests" / "no-such-dir")}
    with pytest.raises(PythonMissing, match=r"^pipe-host: python3 not found on host$"):
        with running(stand_in_agent(), env=no_python):
            pass


def test_the_installed_collector_streams_from_its_bundle(fake_nvml: FakeNvml) -> None:
    """The real collector, shipped as the bundle on stdin, under the remote command line and a login shell."""
    with running(None, env=fake_nvml.env()) as (stream, pipe):
        hello = stream.hello
        assert hello is not None
        assert (hello["protocol"], hello["mode"]) == (PROTOCOL_VERSION, MODE_NVML)
        snapshot = stream.next_snapshot(DEADLINE_S)
        assert snapshot is not None
        assert snapshot.target == "pipe-host"
        assert len(snapshot.gpus) == 8
        used = stream.request({"cmd": CMD_CALIBRATE}, DEADLINE_S)["memory_used_mib"]
        assert sorted(used) == sorted(gpu.key for gpu in snapshot.gpus)
        stream.close()
        assert pipe.proc.wait(DEADLINE_S) == 0
