"""Real processes for the collector and kill tests: trees, zombies, TERM-ignorers, and the agent itself.

Everything here starts real OS processes and reads the real /proc; nothing is mocked. Every wait has a
generous deadline so a broken test fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gputui.transports.ssh.bundle import bundle_for, loader

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 30.0

# The exact bootstrap the SSH transport uses: the bundle arrives on stdin, then the JSON-line commands.
AGENT_PAYLOAD = bundle_for()
BOOTSTRAP = loader(AGENT_PAYLOAD)

SLEEPER = r"""
import json, os, sys, time
os.write(1, (json.dumps({"role": "sleeper", "pid": os.getpid()}) + "\n").encode())
time.sleep(600)
"""

TERM_IGNORER = r"""
import json, os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.write(1, (json.dumps({"role": "ignorer", "pid": os.getpid()}) + "\n").encode())
time.sleep(600)
"""

ZOMBIE_MAKER = r"""
import json, os, time
child = os.fork()
if child == 0:
    os._exit(0)
# The parent never waits: the child stays a zombie until the parent dies.
os.write(1, (json.dumps({"role": "parent", "pid": os.getpid()}) + "\n").encode())
os.write(1, (json.dumps({"role": "zombie", "pid": child}) + "\n").encode())
time.sleep(600)
"""

# root (session and group leader) -> A (sleeps) and B; B double-forks G and exits; root reaps B, so G is
# reparented away from the tree and only its process group (led by root) ties it to root.
TREE = r"""
import json, os, sys, time
def say(role):
    # One write(2) per line: forked writers sharing the pipe never interleave inside a line.
    os.write(1, (json.dumps({"role": role, "pid": os.getpid(), "ppid": os.getppid()}) + "\n").encode())
def sleep_forever():
    try:
        time.sleep(600)
    finally:
        os._exit(0)
a = os.fork()
if a == 0:
    say("A")
    sleep_forever()
b = os.fork()
if b == 0:
    say("B")
    g = os.fork()
    if g == 0:
        say("G")
        sleep_forever()
    os._exit(0)
os.waitpid(b, 0)
say("root")
time.sleep(600)
"""

# A chain for the collector: root -> holder -> leaf. The holder is registered as a GPU holder.
CHAIN = r"""
import json, os, sys, time
def say(role):
    # One write(2) per line: forked writers sharing the pipe never interleave inside a line.
    os.write(1, (json.dumps({"role": role, "pid": os.getpid(), "ppid": os.getppid()}) + "\n").encode())
holder = os.fork()
if holder == 0:
    leaf = os.fork()
    if leaf == 0:
        say("leaf")
        time.sleep(600)
        os._exit(0)
    say("holder")
    time.sleep(600)
    os._exit(0)
say("root")
time.sleep(600)
"""


def proc_stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (independent of the agent's parser), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int:
    fields = proc_stat_fields(pid)
    assert fields is not None, f"pid {pid} is gone"
    return int(fields[19])


def state_of(pid: int) -> str | None:
    fields = proc_stat_fields(pid)
    return None if fields is None else fields[0]


def wait_for(predicate: Any, what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def is_gone(pid: int, ticks: int | None = None) -> bool:
    """Gone, a zombie, or another process now (pid reused)."""
    fields = proc_stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return True
    return ticks is not None and int(fields[19]) != ticks


class Script:
    """A python script run as a child process that reports its pids as JSON lines on stdout."""

    def __init__(
        self,
        code: str,
        roles: Sequence[str],
        python: str = sys.executable,
        user: int | None = None,
        argv_extra: Sequence[str] = (),
        new_session: bool = True,
        new_group: bool = False,
    ) -> None:
        self.argv = [python, "-c", code, *argv_extra] if code else [python, *argv_extra]
        self.new_session = new_session
        # A process group of its own inside the caller's session: what `cmd &` gets from a job-control shell.
        self.new_group = new_group and not new_session
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=new_session,
            preexec_fn=os.setpgrp if self.new_group else None,
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
            cwd="/",
        )
        self.pids: dict[str, int] = {}
        self.lines: list[dict[str, Any]] = []
        deadline = time.monotonic() + DEADLINE_S
        assert self.proc.stdout is not None
        buffer = b""
        while not all(r in self.pids for r in roles):
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise AssertionError(f"script did not report {roles}: got {self.pids}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                self.kill()
                raise AssertionError(f"script exited before reporting {roles}: got {self.pids}")
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                self.lines.append(message)
                self.pids[message["role"]] = message["pid"]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """Kill the whole session this script started (its group) and reap the direct child."""
        if self.new_session or self.new_group:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in self.pids.values():
            try:
                os.kill(pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def script(code: str, roles: Sequence[str], **kwargs: Any) -> Iterator[Script]:
    running = Script(code, roles, **kwargs)
    try:
        yield running
    finally:
        running.kill()


class AgentProcess:
    """The agent in a subprocess, started exactly as the SSH transport starts it, spoken to in JSON lines."""

    def __init__(
        self,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        python: str = sys.executable,
        user: int | None = None,
        new_session: bool = True,
        prefix: Sequence[str] = (),
    ) -> None:
        self.proc = subprocess.Popen(
            [*prefix, python, "-u", "-c", BOOTSTRAP, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=new_session,
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(AGENT_PAYLOAD.data)
        self.proc.stdin.flush()
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next_id = 0
        self.snapshots: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.hello = self._next("hello", DEADLINE_S)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self._messages.put(json.loads(line))
        self._messages.put(None)

    def _next(self, kind: str, timeout_s: float, reply_id: int | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"agent sent no {kind} within {timeout_s} s")
            try:
                message = self._messages.get(timeout=left)
            except queue.Empty:
                continue
            if message is None:
                stderr = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise AssertionError(f"agent exited while waiting for {kind}: {stderr}")
            if message.get("t") == "snapshot":
                self.snapshots.append(message["snapshot"])
            if message.get("t") == kind and (reply_id is None or message.get("id") == reply_id):
                return message

    def send(self, command: dict[str, Any], timeout_s: float = DEADLINE_S) -> dict[str, Any]:
        """Send one command and return its whole reply message."""
        self._next_id += 1
        command = dict(command, id=self._next_id)
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command) + "\n").encode())
        self.proc.stdin.flush()
        return self._next("reply", timeout_s, self._next_id)

    def result(self, command: dict[str, Any], timeout_s: float = DEADLINE_S) -> dict[str, Any]:
        reply = self.send(command, timeout_s)
        assert reply["ok"], reply
        return reply["result"]

    def sample(self, timeout_s: float = DEADLINE_S) -> dict[str, Any]:
        return self.result({"cmd": "sample"}, timeout_s)["snapshot"]

    def next_snapshot(self, timeout_s: float = DEADLINE_S) -> dict[str, Any]:
        return self._next("snapshot", timeout_s)["snapshot"]

    def close(self) -> int | None:
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write(b'{"cmd":"quit"}\n')
                self.proc.stdin.flush()
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return None
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


@contextmanager
def agent_process(*args: str, **kwargs: Any) -> Iterator[AgentProcess]:
    agent = AgentProcess(args, **kwargs)
    try:
        yield agent
    finally:
        agent.close()


VFORK_WAITER_C = r"""
#include <stdio.h>
#include <unistd.h>
/* The parent of a vfork() waits in the kernel, state D, until the child execs or exits: a real
 * D-state process without a broken disk or NFS server. */
int main(void)
{
    printf("{\"role\": \"waiter\", \"pid\": %d}\n", (int)getpid());
    fflush(stdout);
    if (vfork() == 0) {
        sleep(600);
        _exit(0);
    }
    return 0;
}
"""


def build_c_helper(out_dir: Path, name: str, source: str, flags: Sequence[str] = ()) -> Path:
    """Compile one C helper into ``out_dir`` (needs the C compiler the fake NVML build needs anyway)."""
    source_path = out_dir / f"{name}.c"
    binary = out_dir / name
    source_path.write_text(source)
    cc = os.environ.get("CC") or "cc"
    subprocess.run([cc, "-O0", *flags, "-o", str(binary), str(source_path)], check=True, timeout=120)
    return binary


def build_vfork_waiter(out_dir: Path) -> Path:
    """Compile the D-state helper."""
    return build_c_helper(out_dir, "vfork_waiter", VFORK_WAITER_C)


class Binary(Script):
    """A compiled helper that reports its pid like the scripts do."""

    def __init__(self, binary: Path, roles: Sequence[str], args: Sequence[str] = ()) -> None:
        super().__init__("", roles, python=str(binary), argv_extra=args)


class MainRun:
    """What ``gputui.cli.main(words)`` did in an interpreter of its own (``run_main``)."""

    def __init__(self, status: int, modules: set[str], stdout: str, stderr: str) -> None:
        self.status = status
        self.modules = modules
        """The modules it loaded: what the interpreter had before gputui was imported is left out (an
        editable install's finder loads pathlib at start-up; an installed gputui does not)."""
        self.stdout = stdout
        self.stderr = stderr


def run_main(words: Sequence[str], env: dict[str, str], timeout_s: float = 120.0) -> MainRun:
    """Run ``gputui.cli.main(words)`` in a fresh python from the repository, and say what it loaded."""
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "from gputui.cli import main\n"
        f"status = main({list(words)!r})\n"
        "sys.stdout.flush()\n"
        "loaded = sorted(set(sys.modules) - before)\n"
        "print(json.dumps({'status': status, 'modules': loaded}), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=dict(env, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert lines, f"no report: exit {done.returncode}"
    report = json.loads(lines[-1])
    return MainRun(report["status"], set(report["modules"]), done.stdout, done.stderr)
