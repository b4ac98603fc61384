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
import shlex
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

# A worker: names itself (what `ps -o comm` and the collector show), then sleeps or exits at once (a zombie,
# since the launcher never waits for it); "setsid" starts a session of its own first, "ignore_term" ignores
# TERM before it names itself, since the name is what tells the launcher the worker is ready.
WORKER = r"""
import ctypes, os, signal, sys, time
name, mode = sys.argv[1], sys.argv[2]
if mode == "setsid":
    os.setsid()
if mode == "ignore_term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: the launcher's "ready"
if mode == "exit":
    sys.exit(0)
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
    argv = [sys.executable, "-S", "-c", spec["code"], worker["name"], worker["mode"], *worker["args"]]
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
        mode: "sleep", "ignore_term" (SIGTERM ignored), "exit" (exits at once: a zombie) or "setsid" (sleeps
            in a session of its own).
        orphan: Started through a middle process that then exits (a double-forked orphan).
        args: More arguments on its command line (after the name and the mode).
    """

    name: str
    gpu: int | None = None
    mib: int = WORKER_MIB
    mode: str = "sleep"
    orphan: bool = False
    args: tuple[str, ...] = ()


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


def read_until(fd: int, marker: bytes, accept_eof: bool = False, timeout_s: float = DEADLINE_S) -> bytes:
    """What ``fd`` (a pipe or a pty's master) gives until ``marker`` is in it; with ``accept_eof``, what came
    before the other side closed. Fails on the deadline, or on a close that was not accepted."""
    data = b""
    deadline = time.monotonic() + timeout_s
    while marker not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {marker!r} in {data[-3000:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side closed
            chunk = b""
        if not chunk:
            if accept_eof:
                return data
            raise AssertionError(f"closed before {marker!r}: {data[-3000:]!r}")
        data += chunk
    return data


def unused_pid() -> int:
    """A pid number no process has here (for holders in another PID namespace or that never existed)."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(pid_max - 1, 300, -1):
        if not Path(f"/proc/{pid}").exists():
            return pid
    raise AssertionError("no free pid number")


def kill_each(ticks: dict[int, int | None]) -> None:
    """SIGKILL each pid that is still the process that started at its recorded start ticks."""
    for pid, started in ticks.items():
        if started is not None and start_ticks_of(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class Launcher:
    """A daemonised launcher with worker children; see the module docstring."""

    def __init__(self, workers: Sequence[Worker], python: str = sys.executable) -> None:
        self.workers = list(workers)
        spec = {
            "code": WORKER,
            "workers": [
                {"name": w.name, "mode": w.mode, "orphan": w.orphan, "args": list(w.args)}
                for w in self.workers
            ],
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
        kill_each(getattr(self, "ticks", {}))
        for pid, ticks in getattr(self, "ticks", {}).items():
            wait_for(lambda p=pid, t=ticks: is_gone(p, t), f"pid {pid} to die in cleanup")


def shared_copy(fake_nvml: Any) -> tuple[Path, Path]:
    """The fake library, the code and a state file where an unprivileged uid can read them.

    pytest's tmp is 0700, and so may be the checkout and its virtualenv (a clone under a private home or a
    mktemp directory): gputui, pynvml and psutil are copied next to the library, readable by everyone.
    """
    import shutil
    import tempfile

    import psutil
    import pynvml

    shared = Path(tempfile.mkdtemp(prefix="gputui-shared-"))
    shared.chmod(0o755)
    shutil.copy2(Path(fake_nvml.lib_dir) / "libnvidia-ml.so.1", shared / "libnvidia-ml.so.1")
    code = shared / "py"
    no_cache = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "gputui", code / "gputui", ignore=no_cache)
    shutil.copy2(pynvml.__file__, code / "pynvml.py")
    shutil.copytree(Path(psutil.__file__).parent, code / "psutil", ignore=no_cache)
    for path in [code, *code.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (shared / "state").mkdir(mode=0o777)
    (shared / "state").chmod(0o1777)  # like /tmp: anyone may make a folder, nobody may move it
    return shared, shared / "fakenvml.state"


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


def hangup_ends_it() -> None:
    """``preexec_fn`` for a child whose SIGHUP and SIGTERM must take their default course: a test run under
    ``nohup`` (or any runner that ignores them) would otherwise hand it the ignored hangup."""
    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def gputui_env(fake: Any, state_home: Path) -> dict[str, str]:
    """Environment for ``python -m gputui.cli``: the fake NVML and a private XDG state directory."""
    env = fake.env()
    env["XDG_STATE_HOME"] = str(state_home)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def kill_json(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    """``gputui kill --json --no-discover ARGS``: (exit status, the JSON document, stderr)."""
    result = run_gputui(["kill", "--json", "--no-discover", *args], env)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout), result.stderr


def audit_lines(env: dict[str, str]) -> list[dict[str, Any]]:
    """The audit log of the CLI runs made with ``env`` (``gputui_env``), one dict per line."""
    path = Path(env["XDG_STATE_HOME"]) / "gputui" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_gputui(
    args: Sequence[str], env: dict[str, str], timeout_s: float = 90.0, stdin: int | None = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
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


# A tree of named processes for the job-rule tests, built from a JSON spec. Each node is a process that
# names itself (comm), may start a session of its own (setsid), reports {"role", "pid", "ppid"} on the report
# fd, starts its children, and then sleeps, ignores TERM, or exits at once (a zombie: nobody waits for it).
# A node with "sh" is a real `sh -c '<child>; exit 0'` whose one child is the next node (the shell stays as
# its parent); "escape" double-forks a setsid daemon (its middle process reaped at once, so init adopts it);
# "daemon" on the top node daemonises it (init adopts it, as after `nohup ... &` and logout); "subreaper"
# makes a node adopt the orphans below it without ever reaping them (a container's init that does not reap);
# "shm" makes it create and keep open a 1 MiB file at that path (a /dev/shm segment).
TREE_BUILDER = r"""
import ctypes, json, os, shlex, signal, sys, time
REPORT = int(os.environ["GPUTUI_TREE_FD"])
libc = ctypes.CDLL(None)
HELD = []

def say(node, **extra):
    line = dict(role=node["role"], pid=os.getpid(), ppid=os.getppid(), **extra)
    os.write(REPORT, (json.dumps(line) + "\n").encode())

def run(node, **extra):
    if node.get("setsid") and os.getsid(0) != os.getpid():
        os.setsid()
    if node.get("subreaper"):
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: adopts the orphans below, never reaps them
    libc.prctl(15, node["name"].encode()[:15], 0, 0, 0)  # PR_SET_NAME
    if node.get("mode") == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if node.get("shm"):
        HELD.append(os.open(node["shm"], os.O_RDWR | os.O_CREAT, 0o600))
        os.write(HELD[-1], b"x" * (1 << 20))
    if node.get("mode") == "exit":
        say(node, **extra)
        os._exit(0)
    for child in node.get("children", []):
        start(child)
    if node.get("escape"):
        middle = os.fork()
        if middle == 0:
            os.setsid()
            if os.fork() == 0:
                run(node["escape"])
            os._exit(0)
        os.waitpid(middle, 0)
    say(node, **extra)
    while True:
        time.sleep(3600)

def start(node):
    if os.fork() != 0:
        return
    try:
        if node.get("sh"):
            if node.get("setsid"):
                os.setsid()
            child = dict(node["children"][0], shell_role=node["role"])
            argv = (sys.executable, "-S", "-c", CODE, CODE, json.dumps(child))
            os.execv("/bin/sh", ["sh", "-c", " ".join(shlex.quote(a) for a in argv) + "; exit 0"])
        run(node)
    finally:
        os._exit(0)

CODE = sys.argv[1]
top = json.loads(sys.argv[2])
if top.get("daemon"):
    if os.fork():
        os._exit(0)
    os.setsid()
run(top, shell_role=top.get("shell_role"))
"""


def _roles(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("children", []):
        found.extend(_roles(child))
    if node.get("escape"):
        found.extend(_roles(node["escape"]))
    return found


class ProcTree:
    """Real processes from a spec (see ``TREE_BUILDER``): ``pids[role]``, killed with everything they are.

    Args:
        spec: The top node: ``{"role", "name", "mode", "setsid", "sh", "daemon", "escape", "children"}``.
        login_shell: Start the top node from a real login shell (``-bash``), which stays as its parent.
    """

    def __init__(self, spec: dict[str, Any], login_shell: bool = False) -> None:
        self.spec = spec
        read_end, write_end = os.pipe()
        os.set_inheritable(write_end, True)
        env = dict(os.environ, GPUTUI_TREE_FD=str(write_end))
        argv = [sys.executable, "-S", "-c", TREE_BUILDER, TREE_BUILDER, json.dumps(spec)]
        if login_shell:
            spec = dict(spec, shell_role="login_shell")
            argv = [sys.executable, "-S", "-c", TREE_BUILDER, TREE_BUILDER, json.dumps(spec)]
            # The shell outlives its job, as an interactive one would.
            command = " ".join(shlex.quote(a) for a in argv) + "; exec sleep 3600"
            argv = ["-bash", "--noprofile", "--norc", "-c", command]
        self.starter = subprocess.Popen(
            argv,
            executable="/bin/bash" if login_shell else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
            pass_fds=(write_end,),
            start_new_session=True,
            cwd="/",
        )
        os.close(write_end)
        self.pids: dict[str, int] = {}
        expected = _roles(self.spec)
        self._read_reports(read_end, expected, login_shell)
        os.close(read_end)
        self.ticks = {pid: start_ticks_of(pid) for pid in self.pids.values()}
        exiting = [self.pids[n["role"]] for n in expected if n.get("mode") == "exit"]
        try:
            wait_for(lambda: all(state_of(p) == "Z" for p in exiting), "the exited children to be zombies")
        except AssertionError:
            self.kill()
            raise

    def _read_reports(self, fd: int, expected: list[dict[str, Any]], login_shell: bool) -> None:
        roles = {node["role"] for node in expected}
        shells = {node["role"] for node in expected if node.get("sh")}
        if login_shell:
            shells.add("login_shell")
        deadline = time.monotonic() + DEADLINE_S
        buffer = b""
        while not roles <= set(self.pids) or not shells <= set(self.pids):
            left = deadline - time.monotonic()
            if left <= 0:
                self.ticks = {pid: start_ticks_of(pid) for pid in self.pids.values()}
                self.kill()  # what did report, daemons included
                raise AssertionError(f"the tree did not report {sorted(roles | shells)}: got {self.pids}")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            buffer += os.read(fd, 65536)
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                report = json.loads(line)
                self.pids[report["role"]] = report["pid"]
                if report.get("shell_role"):
                    self.pids[report["shell_role"]] = report["ppid"]

    def __getitem__(self, role: str) -> int:
        return self.pids[role]

    def kill(self) -> None:
        """SIGKILL every process of the tree (checked by start time), then wait until each is gone."""
        kill_each(getattr(self, "ticks", {}))
        try:
            os.killpg(self.starter.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.starter.wait(timeout=DEADLINE_S)
        for pid, ticks in getattr(self, "ticks", {}).items():
            wait_for(lambda p=pid, t=ticks: start_ticks_of(p) != t, f"pid {pid} to be reaped in cleanup")


@contextmanager
def proc_tree(spec: dict[str, Any], login_shell: bool = False) -> Iterator[ProcTree]:
    running = ProcTree(spec, login_shell=login_shell)
    try:
        yield running
    finally:
        running.kill()


def node(role: str, name: str | None = None, **extra: Any) -> dict[str, Any]:
    """One node of a ``ProcTree`` spec (its comm name defaults to the role)."""
    return {"role": role, "name": name or role, **extra}


OUTSIDE_KILL_SCHEDULERS = ("sched0", "sched1")


def outside_kill_job(segment: Path | None = None) -> dict[str, Any]:
    """An sglang-shaped job under a profiler named ``nsys``, below a container init that adopts orphans and
    never reaps them: two schedulers that ignore TERM (the GPU holders; the first holds ``segment`` open when
    given) and a detokenizer that holds none."""
    shm = {"shm": str(segment)} if segment is not None else {}
    workers = [
        node(role, "sglang::schedul", mode="ignore_term", **(shm if role == "sched0" else {}))
        for role in OUTSIDE_KILL_SCHEDULERS
    ]
    launcher = node("launcher", "python3", children=[*workers, node("detok", "sglang::detoken")])
    return node("init", "tini", subreaper=True, children=[node("nsys", "nsys", children=[launcher])])


def kill_from_outside(tree: ProcTree) -> tuple[str, ...]:
    """The story's own kill, by pid: TERM to the profiler and the launcher, KILL to the schedulers; returns
    the roles left defunct (under the init that does not reap)."""
    for role in ("nsys", "launcher"):
        os.kill(tree[role], signal.SIGTERM)
    for role in OUTSIDE_KILL_SCHEDULERS:
        os.kill(tree[role], signal.SIGKILL)
    dead = ("nsys", "launcher", *OUTSIDE_KILL_SCHEDULERS)
    wait_for(lambda: all(state_of(tree[r]) == "Z" for r in dead), "the killed processes to be defunct")
    return dead
