"""Real GPU-server-shaped process trees for the check/kill tests (and anyone else who needs one).

``Launcher`` starts what an sglang/vLLM launch looks like from the outside: a daemonised launcher process
(its own session and process group, reparented to init like ``nohup ... &`` after the shell exits) with
eight worker children, each registered in the fake NVML state as the holder of ~40 GiB on its GPU, and a
detokenizer child that holds nothing. Variants: a worker that ignores SIGTERM, a worker that exited and is
never reaped (a real zombie), a worker whose middle parent exited (a double-forked orphan, reparented to
init or the nearest subreaper, still in the launcher's process group), and memory held by pids that do not
exist here (``unused_pid`` + fake ``invisible``/``ghost`` holders).

Everything is a real process; the finaliser kills the launcher's whole process group and every pid it
reported, and waits until they are gone.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 30.0
WORKER_MIB = 40960
"""What each worker holds on its GPU in the fake NVML state (40 GiB)."""

# A worker: names itself (what `ps -o comm` and the collector show), then sleeps, ignores TERM, or exits
# at once (a zombie, since the launcher never waits for it).
WORKER = r"""
import ctypes, signal, sys, time
name, mode = sys.argv[1], sys.argv[2]
ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
if mode == "exit":
    sys.exit(0)
if mode == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    time.sleep(3600)
"""

# The launcher: daemonises (the starter exits, the launcher setsid()s so it leads its own session and
# process group), spawns the workers, waits until each has named itself (or become a zombie), reports
# {"launcher": pid, "workers": {name: pid}} on stdout and then never waits for a child.
LAUNCHER = r"""
import json, os, sys, time
spec = json.loads(sys.argv[1])
if os.fork():
    os._exit(0)
os.setsid()
devnull = os.open(os.devnull, os.O_RDWR)
quiet = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1)]

def spawn(worker):
    argv = [sys.executable, "-S", "-c", spec["code"], worker["name"], worker["mode"]]
    return os.posix_spawn(sys.executable, argv, os.environ, file_actions=quiet)

workers = {}
for worker in spec["workers"]:
    if worker["orphan"]:
        read_end, write_end = os.pipe()
        middle = os.fork()
        if middle == 0:
            os.write(write_end, str(spawn(worker)).encode())
            os._exit(0)
        os.close(write_end)
        pid = int(os.read(read_end, 64))
        os.close(read_end)
        os.waitpid(middle, 0)  # the middle parent is gone: its child is reparented away from this tree
    else:
        pid = spawn(worker)
    workers[worker["name"]] = pid

def ready(name, pid, mode):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode("utf-8", "replace")
    except OSError:
        return False
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    state = stat[stat.rindex(")") + 2]
    return (state == "Z") if mode == "exit" else comm == name[:15]

deadline = time.monotonic() + 30
modes = {w["name"]: w["mode"] for w in spec["workers"]}
while not all(ready(n, p, modes[n]) for n, p in workers.items()):
    if time.monotonic() > deadline:
        break
    time.sleep(0.01)
os.write(1, (json.dumps({"launcher": os.getpid(), "workers": workers}) + "\n").encode())
os.dup2(devnull, 1)
while True:
    time.sleep(3600)
"""


@dataclass(frozen=True)
class Worker:
    """One child of the launcher.

    Attributes:
        name: Its process name (comm, at most 15 characters are kept).
        gpu: GPU index it holds memory on in the fake NVML state; None: holds nothing.
        mib: What it holds there.
        mode: "sleep", "ignore_term" (SIGTERM ignored) or "exit" (exits at once: a zombie).
        orphan: Started through a middle process that then exits (a double-forked orphan).
    """

    name: str
    gpu: int | None = None
    mib: int = WORKER_MIB
    mode: str = "sleep"
    orphan: bool = False


def sglang_workers(count: int = 8, **variants: Worker) -> list[Worker]:
    """Eight schedulers (one per GPU, ~40 GiB each) and a detokenizer; ``variants`` replace by name."""
    workers = [Worker(f"scheduler_TP{i}", gpu=i) for i in range(count)]
    workers.append(Worker("detokenizer"))
    return [variants.get(w.name, w) for w in workers] + [
        w for name, w in variants.items() if name not in {x.name for x in workers}
    ]


def proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def state_of(pid: int) -> str | None:
    fields = proc_stat(pid)
    return None if fields is None else fields[0]


def ppid_of(pid: int) -> int | None:
    fields = proc_stat(pid)
    return None if fields is None else int(fields[1])


def start_ticks_of(pid: int) -> int | None:
    fields = proc_stat(pid)
    return None if fields is None else int(fields[19])


def is_gone(pid: int, ticks: int | None = None) -> bool:
    """Gone, a zombie, or (with ``ticks``) another process now."""
    fields = proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return True
    return ticks is not None and int(fields[19]) != ticks


def wait_for(predicate: Any, what: str, timeout_s: float = DEADLINE_S) -> None:
    """Poll ``predicate`` until true; a generous deadline only so a broken test fails instead of hanging."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def unused_pid() -> int:
    """A pid number no process has here (for holders in another PID namespace or that never existed)."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(pid_max - 1, 300, -1):
        if not Path(f"/proc/{pid}").exists():
            return pid
    raise AssertionError("no free pid number")


class Launcher:
    """A daemonised launcher with worker children; see the module docstring."""

    def __init__(self, workers: Sequence[Worker], python: str = sys.executable) -> None:
        self.workers = list(workers)
        spec = {
            "code": WORKER,
            "workers": [{"name": w.name, "mode": w.mode, "orphan": w.orphan} for w in self.workers],
        }
        starter = subprocess.Popen(
            [python, "-S", "-c", LAUNCHER, json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
            cwd="/",
        )
        self.pid = 0
        self.pids: dict[str, int] = {}
        try:
            report = self._read_report(starter)
        finally:
            starter.wait(timeout=DEADLINE_S)  # the starter exits at once: reap it
            if starter.stdout is not None:
                starter.stdout.close()
        self.pid = int(report["launcher"])
        self.pids = {str(k): int(v) for k, v in report["workers"].items()}
        self.ticks = {pid: start_ticks_of(pid) for pid in self.all_pids}

    @staticmethod
    def _read_report(starter: subprocess.Popen[bytes]) -> dict[str, Any]:
        assert starter.stdout is not None
        deadline = time.monotonic() + DEADLINE_S
        buffer = b""
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("the launcher did not report its workers")
            ready, _, _ = select.select([starter.stdout], [], [], left)
            if ready:
                chunk = os.read(starter.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError(f"the launcher exited before reporting: {buffer!r}")
                buffer += chunk
        return json.loads(buffer.split(b"\n", 1)[0])

    @property
    def all_pids(self) -> list[int]:
        return [self.pid, *self.pids.values()]

    def __getitem__(self, name: str) -> int:
        return self.pids[name]

    def register(self, fake: Any) -> None:
        """Record every GPU worker as a holder in the fake NVML state and write it."""
        for worker in self.workers:
            if worker.gpu is not None and worker.mode != "exit":
                fake.state.add_holder(worker.gpu, self.pids[worker.name], worker.mib)
        fake.write()

    def kill(self) -> None:
        """Kill the launcher's process group and every reported pid (checked by start time), wait for them."""
        if self.pid:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid, ticks in getattr(self, "ticks", {}).items():
            if ticks is not None and start_ticks_of(pid) == ticks:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for pid, ticks in getattr(self, "ticks", {}).items():
            wait_for(lambda p=pid, t=ticks: is_gone(p, t), f"pid {pid} to die in cleanup")


@contextmanager
def launcher(workers: Sequence[Worker], fake: Any = None) -> Iterator[Launcher]:
    """A running Launcher (registered in ``fake`` when given), killed with all its processes afterwards."""
    running = Launcher(workers)
    try:
        if fake is not None:
            running.register(fake)
        yield running
    finally:
        running.kill()


def gputui_env(fake: Any, state_home: Path) -> dict[str, str]:
    """Environment for ``python -m gputui.cli``: the fake NVML and a private XDG state directory."""
    env = fake.env()
    env["XDG_STATE_HOME"] = str(state_home)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_gputui(args: Sequence[str], env: dict[str, str], timeout_s: float = 90.0,
               stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (the local link runs the agent inside it)."""
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        cwd=REPO,
        env=env,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
