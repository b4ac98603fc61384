"""Kills that stay inside the job, never half-finish, and say what happened: the real CLI in a subprocess
(its agent reading real /proc, real pynvml over the fake NVML) against real process trees.

RELIABILITY 28 (a GPU job run by a daemon or under the display stack: only the job is planned) and 29 (Ctrl-C
during a confirmed escalation, an audit log that cannot be written), plus the job's survivors.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gputui.core.actions import plan_kill
from gputui.core.jobs import build_forest, flatten
from gputui.core.model import HostSnapshot
from tests.integration.procs import (
    DEADLINE_S,
    REPO,
    WORKER_MIB,
    Worker,
    audit_lines,
    gputui_env,
    is_gone,
    kill_json,
    launcher,
    node,
    proc_tree,
    run_gputui,
    sglang_workers,
    shared_copy,
    state_of,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

ALIVE = ("S", "R")
ANSI = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
"""Control sequences a terminal program writes (CSI, OSC, two-byte escapes)."""


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    return gputui_env(fake_nvml, tmp_path / "state")


def check_snapshot(env: dict[str, str]) -> HostSnapshot:
    result = run_gputui(["check", "--json", "--no-discover"], env)
    assert result.stdout, result.stderr
    (host,) = json.loads(result.stdout)["hosts"]
    return HostSnapshot.from_dict(host)


def tree_pids(snapshot: HostSnapshot, root: int) -> set[int]:
    (tree,) = [t for t in build_forest(snapshot) if t.proc.pid == root]
    return {n.proc.pid for n in flatten([tree])}


def register(fake: Any, holders: list[tuple[int, int, int, str]]) -> None:
    for gpu, pid, mib, kind in holders:
        fake.state.add_holder(gpu, pid, mib, kind)
    fake.write()


def cron_like(name: str, jobs_setsid: bool) -> dict[str, Any]:
    """A daemon (adopted by init) running ``sh -c '<gpu job>; exit 0'`` next to an unrelated job."""
    return node(
        name,
        daemon=True,
        setsid=True,
        children=[
            node("job_sh", sh=True, setsid=jobs_setsid, children=[node("gpu_job", "python3")]),
            node("sibling", "logrotate"),
        ],
    )


# -- the job rule --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("daemon", "jobs_setsid"),
    [("cron", False), ("jobrunnerd", True)],
    ids=["a cron daemon keeping its jobs in its session", "an unknown daemon giving each job a session"],
)
def test_a_daemons_gpu_job_is_killed_without_the_daemon_or_its_other_job(
    env: dict[str, str], fake_nvml: Any, daemon: str, jobs_setsid: bool
) -> None:
    """28: kill-all takes the job (sh -c and its child) only; the daemon and its unrelated child live on."""
    with proc_tree(cron_like(daemon, jobs_setsid)) as tree:
        register(fake_nvml, [(0, tree["gpu_job"], WORKER_MIB, "compute")])
        snapshot = check_snapshot(env)
        assert [t.proc.pid for t in build_forest(snapshot)] == [tree["job_sh"]]
        assert tree_pids(snapshot, tree["job_sh"]) == {tree["job_sh"], tree["gpu_job"]}
        planned = [t.pid for t in plan_kill(snapshot, [], all_gpu=True).targets]
        assert planned == [tree["gpu_job"], tree["job_sh"]]
        status, payload, stderr = kill_json(env, "--yes", "--all-gpu")
        assert status == 0, (payload, stderr)
        assert {t["pid"] for t in payload["plan"]["targets"]} == {tree["job_sh"], tree["gpu_job"]}
        assert {o["pid"] for o in payload["outcomes"]} == {tree["job_sh"], tree["gpu_job"]}
        wait_for(lambda: is_gone(tree["gpu_job"]) and is_gone(tree["job_sh"]), "the job to die")
        assert state_of(tree[daemon]) in ALIVE
        assert state_of(tree["sibling"]) in ALIVE


def writable_cgroup2() -> Path:
    """The mount point of a cgroup v2 hierarchy this test may create a cgroup in (needs root)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype == "cgroup2" and os.access(fields[4], os.W_OK):
            return Path(fields[4])
    raise AssertionError(
        "this test moves a process into a cgroup of its own: it needs a writable cgroup v2 "
        "hierarchy (run the suite as root on a host with one, as CI does)"
    )


@contextmanager
def own_cgroup(name: str) -> Iterator[Path]:
    path = writable_cgroup2() / name
    path.mkdir()
    try:
        yield path
    finally:
        wait_for(lambda: not (path / "cgroup.procs").read_text().split(), "the cgroup to empty")
        path.rmdir()


def test_a_process_in_a_cgroup_of_its_own_is_a_job_of_its_own(env: dict[str, str], fake_nvml: Any) -> None:
    """Same session as the script that started it, but a service manager put it in a cgroup of its own."""
    spec = node("launch_sh", sh=True, children=[node("gpu_job", "python3")])
    with (
        proc_tree(node("runner", setsid=True, children=[spec])) as tree,
        own_cgroup(f"gputui-test-{os.getpid()}") as cgroup,
    ):
        register(fake_nvml, [(0, tree["gpu_job"], WORKER_MIB, "compute")])
        assert [t.proc.pid for t in build_forest(check_snapshot(env))] == [tree["runner"]]
        (cgroup / "cgroup.procs").write_text(str(tree["gpu_job"]))
        snapshot = check_snapshot(env)
        job = snapshot.process(tree["gpu_job"])
        assert job is not None
        assert job.cgroup == "/" + cgroup.name
        assert job.sid == snapshot.process(tree["launch_sh"]).sid  # type: ignore[union-attr]
        assert [t.proc.pid for t in build_forest(snapshot)] == [tree["gpu_job"]]
        tree.kill()


def test_the_display_stack_stays_out_of_kill_all(env: dict[str, str], fake_nvml: Any) -> None:
    """28: a desktop (gdm3 -> session worker -> Xorg + gnome-shell, type G memory) next to a compute job."""
    desktop = node(
        "gdm3",
        daemon=True,
        setsid=True,
        children=[
            node(
                "session_worker",
                "gdm-session-worker",
                children=[node("xorg", "Xorg"), node("shell", "gnome-shell")],
            ),
        ],
    )
    with proc_tree(desktop) as tree, launcher(sglang_workers(2), fake_nvml) as server:
        register(fake_nvml, [(0, tree["xorg"], 300, "graphics"), (0, tree["shell"], 200, "graphics")])
        snapshot = check_snapshot(env)
        listed = {(p.pid, p.type) for gpu in snapshot.gpus for p in gpu.processes}
        assert {(tree["xorg"], "graphics"), (tree["shell"], "graphics")} <= listed
        roots = {t.proc.pid for t in build_forest(snapshot)}
        assert roots == {server.pid, tree["xorg"], tree["shell"]}  # never the display manager above them
        status, payload, stderr = kill_json(env, "--yes", "--all-gpu")
        assert status == 0, (payload, stderr)
        assert {o["pid"] for o in payload["outcomes"]} == set(server.all_pids)
        assert any("holds graphics memory only" in n for n in payload["plan"]["notes"])
        wait_for(lambda: all(is_gone(p) for p in server.all_pids), "the compute job to die")
        assert all(state_of(pid) in ALIVE for pid in tree.pids.values())
        # Asked for, the graphics holders go too; their display manager still does not.
        listing = run_gputui(["kill", "--no-discover", "--yes", "--all-gpu", "--include-graphics"], env)
        assert listing.returncode == 0, listing.stdout + listing.stderr
        assert f"{tree['xorg']}" in listing.stdout
        xorg = f"{tree['xorg']:>8}  root"
        (xorg_line,) = [line for line in listing.stdout.splitlines() if line.startswith(xorg)]
        assert xorg_line.endswith("  [graphics]")
        wait_for(lambda: is_gone(tree["xorg"]) and is_gone(tree["shell"]), "the display holders to die")
        assert state_of(tree["gdm3"]) in ALIVE
        assert state_of(tree["session_worker"]) in ALIVE


def test_an_nsys_wrapped_sglang_server_from_a_login_shell_is_one_job(
    env: dict[str, str], fake_nvml: Any
) -> None:
    """Keeps what works: nsys is the root, the launcher, schedulers and detokenizer its members; the login
    shell is not part of it, and the defunct scheduler goes with its parent (exit 0)."""
    server = node(
        "nsys",
        children=[
            node(
                "launcher",
                "python3",
                children=[
                    node("tp0", "scheduler_TP0"),
                    node("tp1", "scheduler_TP1"),
                    node("tp2", "scheduler_TP2", mode="exit"),
                    node("detokenizer"),
                ],
            )
        ],
    )
    with proc_tree(server, login_shell=True) as tree:
        register(
            fake_nvml, [(0, tree["tp0"], WORKER_MIB, "compute"), (1, tree["tp1"], WORKER_MIB, "compute")]
        )
        snapshot = check_snapshot(env)
        assert [t.proc.pid for t in build_forest(snapshot)] == [tree["nsys"]]
        job = {tree[r] for r in ("nsys", "launcher", "tp0", "tp1", "tp2", "detokenizer")}
        assert tree_pids(snapshot, tree["nsys"]) == job
        status, payload, stderr = kill_json(env, "--yes", "--all-gpu")
        assert status == 0, (payload, stderr)
        finals = {o["pid"]: o["result"] for o in payload["outcomes"]}
        assert finals[tree["tp2"]] == "reaped"
        assert set(finals) == job
        wait_for(lambda: all(is_gone(p) for p in job), "the job to die")
        assert state_of(tree["login_shell"]) in ALIVE


# -- survivors and remnants ------------------------------------------------------------------------------


def test_term_ignoring_workers_and_a_zombie_go_with_the_default_escalation(
    env: dict[str, str], fake_nvml: Any
) -> None:
    """Done when: ``kill --tree --yes LAUNCHER`` exits 0 within the escalation delay plus a second, nothing of
    the job is left, and ``check --wait`` then says clean."""
    workers = sglang_workers(
        4,
        scheduler_TP1=Worker("scheduler_TP1", gpu=1, mode="ignore_term"),
        scheduler_TP2=Worker("scheduler_TP2", gpu=2, mode="ignore_term"),
        scheduler_TP3=Worker("scheduler_TP3", gpu=3, mode="exit"),
        detokenizer=Worker("detokenizer", mode="ignore_term"),
    )
    with launcher(workers, fake_nvml) as server:
        started = time.monotonic()
        status, payload, stderr = kill_json(env, "--yes", "--tree", str(server.pid))
        took_s = time.monotonic() - started
        assert status == 0, (payload["outcomes"], stderr)
        assert payload["plan"]["escalate_s"] == 5.0
        print(f"kill operation {payload['elapsed_s']:.2f} s, whole command {took_s:.2f} s")
        assert payload["elapsed_s"] <= 5.0 + 1.0
        finals = {o["pid"]: o for o in payload["outcomes"]}
        zombie = server["scheduler_TP3"]
        assert (finals[zombie]["stage"], finals[zombie]["result"]) == ("wait", "reaped")
        assert finals[zombie]["detail"] == f"reaped with its parent {server.pid}"
        escalated = [("signal", "TERM", "sent"), ("escalate", "KILL", "sent"), ("confirm", "KILL", "killed")]
        for name in ("scheduler_TP1", "scheduler_TP2", "detokenizer"):
            mine = [o for o in payload["outcomes"] if o["pid"] == server[name]]
            assert [(o["stage"], o["signal"], o["result"]) for o in mine] == escalated
        assert all(is_gone(p, server.ticks[p]) for p in server.all_pids)
        wait_for(lambda: all(state_of(p) is None for p in server.all_pids), "init to reap what is left")
        waited = run_gputui(["check", "--wait", "20", "--no-discover"], env)
        assert waited.returncode == 0, waited.stdout + waited.stderr
    # Every signal has its intent before it and its outcome after.
    lines = audit_lines(env)
    intents = [line for line in lines if line["stage"] == "intent"]
    assert lines[: len(intents)] == intents
    assert {line["pid"] for line in intents} == set(server.all_pids) - {zombie}
    sent = {(line["pid"], line["signal"]) for line in lines if line["result"] == "sent"}
    assert (server["detokenizer"], "KILL") in sent
    assert {(line["pid"], line["result"]) for line in lines if line["stage"] == "confirm"} == {
        (server[n], "killed") for n in ("scheduler_TP1", "scheduler_TP2", "detokenizer")
    }


def test_a_setsid_daemon_that_escaped_the_job_is_named_as_its_survivor(
    env: dict[str, str], fake_nvml: Any
) -> None:
    """After the tree is gone, what escaped it (setsid + double fork) and still holds memory is reported."""
    spec = node(
        "launcher",
        "python3",
        daemon=True,
        setsid=True,
        children=[
            node("tp0", "scheduler_TP0"),
            node("detokenizer", escape=node("escapee", "cache_daemon")),
        ],
    )
    with proc_tree(spec) as tree:
        register(fake_nvml, [(0, tree["tp0"], WORKER_MIB, "compute"), (0, tree["escapee"], 1024, "compute")])
        status, payload, stderr = kill_json(env, "--yes", "--tree", str(tree["launcher"]))
        assert status == 0, (payload, stderr)
        assert tree["escapee"] not in {o["pid"] for o in payload["outcomes"]}
        (survivor,) = payload["survivors"]
        assert (survivor["kind"], survivor["pid"], survivor["action_pid"]) == (
            "survivor",
            tree["escapee"],
            tree["escapee"],
        )
        assert f"a survivor of the job of pid {tree['launcher']} (python3)" in survivor["detail"]
        assert "holds 1024 MiB on GPU0" in survivor["detail"]
        assert state_of(tree["escapee"]) in ALIVE
        text = run_gputui(["check", "--no-discover"], env)
        assert text.returncode == 1  # it still holds memory: not clean
        status, payload, _ = kill_json(env, "--yes", str(tree["escapee"]))
        assert status == 0, payload
        wait_for(lambda: is_gone(tree["escapee"]), "the survivor to die")


# -- Ctrl-C and the audit log --------------------------------------------------------------------------------


class Cli:
    """``gputui kill`` in a subprocess whose output is read line by line while it runs."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gputui.cli", "kill", "--no-discover", *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.out = b""
        self.err = b""

    def read_until(self, marker: bytes, stream: str = "out", timeout_s: float = DEADLINE_S) -> None:
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout_s
        while marker not in (self.out if stream == "out" else self.err):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {marker!r} in {stream}: {self.out!r} {self.err!r}")
            ready, _, _ = select.select([self.proc.stdout, self.proc.stderr], [], [], left)
            for pipe in ready:
                chunk = os.read(pipe.fileno(), 65536)
                if pipe is self.proc.stdout:
                    self.out += chunk
                else:
                    self.err += chunk
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"exited before {marker!r}: {self.out!r} {self.err!r}")

    def finish(self) -> int:
        out, err = self.proc.communicate(timeout=DEADLINE_S)
        self.out += out
        self.err += err
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@contextmanager
def cli(env: dict[str, str], *args: str) -> Iterator[Cli]:
    running = Cli(env, *args)
    try:
        yield running
    finally:
        running.close()


def test_ctrl_c_during_the_escalation_says_what_is_pending_and_finishes_it(
    env: dict[str, str], fake_nvml: Any
) -> None:
    """29: the TERM is out, KILL is due; Ctrl-C says so and keeps waiting; the KILL is sent and audited."""
    workers = [Worker("scheduler_TP0", gpu=0), Worker("scheduler_TP1", gpu=1, mode="ignore_term")]
    with launcher(workers, fake_nvml) as server, cli(env, "--yes", "--tree", str(server.pid)) as run:
        stubborn = server["scheduler_TP1"]
        run.read_until(f"{server.pid}  signal   TERM  sent".encode())
        run.proc.send_signal(signal.SIGINT)
        run.read_until(b"Ctrl-C again to abandon", stream="err")
        assert b"KILL in " in run.err
        assert f"to 1 process: {stubborn} (scheduler_TP1)".encode() in run.err
        assert run.finish() == 0, (run.out, run.err)
        assert f"{stubborn}  confirm  KILL  killed".encode() in run.out
        assert b"every process is gone" in run.out
        assert all(is_gone(p, server.ticks[p]) for p in server.all_pids)
    stages = [
        (line["stage"], line["signal"], line["result"])
        for line in audit_lines(env)
        if line["pid"] == stubborn
    ]
    assert stages == [
        ("intent", "TERM", "requested"),
        ("signal", "TERM", "sent"),
        ("escalate", "KILL", "sent"),
        ("confirm", "KILL", "killed"),
    ]


def test_a_second_ctrl_c_abandons_the_escalation_and_says_what_was_left(
    env: dict[str, str], fake_nvml: Any
) -> None:
    workers = [Worker("scheduler_TP0", gpu=0), Worker("scheduler_TP1", gpu=1, mode="ignore_term")]
    with (
        launcher(workers, fake_nvml) as server,
        cli(env, "--yes", "--tree", "--escalate", "60", str(server.pid)) as run,
    ):
        stubborn = server["scheduler_TP1"]
        run.read_until(f"{server.pid}  signal   TERM  sent".encode())
        run.proc.send_signal(signal.SIGINT)
        run.read_until(b"Ctrl-C again to abandon", stream="err")
        run.proc.send_signal(signal.SIGINT)
        assert run.finish() == 1, (run.out, run.err)
        left = f"abandoned; left: {stubborn} (scheduler_TP1): alive after TERM; KILL not sent"
        assert left.encode() in run.err
        assert state_of(stubborn) in ALIVE  # left alive, and said so
    stages = [(line["stage"], line["result"]) for line in audit_lines(env) if line["pid"] == stubborn]
    assert stages == [("intent", "requested"), ("signal", "sent"), ("abandon", "abandoned")]


def test_an_audit_log_that_cannot_be_written_refuses_the_kill(env: dict[str, str], fake_nvml: Any) -> None:
    """29: the intent cannot be recorded, so nothing is sent (one line); ``--no-audit`` is the way out."""
    audit_dir = Path(env["XDG_STATE_HOME"]) / "gputui"
    audit_dir.mkdir(parents=True)
    (audit_dir / "audit.jsonl").mkdir()  # where the log file should be
    with launcher([Worker("scheduler_TP0", gpu=0)], fake_nvml) as server:
        victim = server["scheduler_TP0"]
        refused = run_gputui(["kill", "--no-discover", "--yes", str(victim)], env)
        assert refused.returncode == 2
        (line,) = refused.stderr.splitlines()
        assert line.startswith("gputui: local: kill refused, nothing signalled: audit log: ")
        assert line.endswith("(--no-audit to kill without it)")
        assert state_of(victim) in ALIVE
        done = run_gputui(["kill", "--no-discover", "--yes", "--no-audit", str(victim)], env)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_for(lambda: is_gone(victim), "the victim to die")
    assert list((audit_dir / "audit.jsonl").iterdir()) == []


CLI_UID = 65533  # an unprivileged uid that is not nobody
SYSTEM_PYTHON = "/usr/bin/python3"


def test_an_unwritable_audit_directory_refuses_the_kill(fake_nvml: Any) -> None:
    """29 as a user meets it: the state directory is not theirs to write. The CLI runs unprivileged (root
    writes anywhere), its victim is its own process."""
    import shutil

    if os.geteuid() != 0:
        raise AssertionError("this test runs the CLI as another user: run the suite as root (CI does)")
    shared, state_path = shared_copy(fake_nvml)
    victim = subprocess.Popen(
        [SYSTEM_PYTHON, "-S", "-c", "import time; time.sleep(600)"],
        user=CLI_UID,
        group=CLI_UID,
        extra_groups=[],
        start_new_session=True,
        cwd="/",
    )
    try:
        fake_nvml.state.add_holder(0, victim.pid, 1000)
        fake_nvml.state.write(state_path)
        state_path.chmod(0o644)
        locked = shared / "locked"
        (locked / "gputui").mkdir(parents=True, mode=0o755)  # root's, read-only for the CLI's user
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(locked),
            "LD_LIBRARY_PATH": str(shared),
            "FAKE_NVML_STATE": str(state_path),
            "XDG_STATE_HOME": str(locked),
            "PYTHONPATH": str(shared / "py"),
        }
        cli = subprocess.run(
            [SYSTEM_PYTHON, "-m", "gputui.cli", "kill", "--yes", "--no-discover", str(victim.pid)],
            cwd="/",
            env=env,
            user=CLI_UID,
            group=CLI_UID,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert cli.returncode == 2, cli.stdout + cli.stderr
        (line,) = cli.stderr.splitlines()
        assert "kill refused, nothing signalled: audit log: " in line
        assert "Permission denied" in line
        assert victim.poll() is None
        assert not (locked / "gputui" / "audit.jsonl").exists()
    finally:
        victim.kill()
        victim.wait()
        shutil.rmtree(shared, ignore_errors=True)


def test_q_in_the_tui_during_an_escalation_finishes_it_then_leaves(
    env: dict[str, str], fake_nvml: Any
) -> None:
    """29 in the TUI on a real host: ``t``, ``y``, then ``q`` before the KILL is due. The app says what is
    pending, stays until the collector has KILLed the TERM-ignoring worker, then leaves saying so."""
    import fcntl
    import pty
    import struct
    import termios

    workers = [Worker("scheduler_TP0", gpu=0), Worker("scheduler_TP1", gpu=1, mode="ignore_term")]
    with launcher(workers, fake_nvml) as server:
        stubborn = server["scheduler_TP1"]
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
        tui = subprocess.Popen(
            [sys.executable, "-m", "gputui.cli", "--no-discover", "--interval", "0.5"],
            cwd=REPO,
            env=dict(env, TERM="xterm-256color", COLUMNS="140", LINES="40"),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        screen = b""

        def text() -> bytes:
            """What was drawn, without the escape sequences between (and within) the cells."""
            return ANSI.sub(b"", screen)

        def read_until(marker: bytes) -> None:
            nonlocal screen
            deadline = time.monotonic() + DEADLINE_S
            while marker not in text():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {marker!r} on the screen: {text()[-3000:]!r}; {sent()}")
                ready, _, _ = select.select([master], [], [], left)
                if ready:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        raise AssertionError(f"the TUI closed its terminal before {marker!r}; {sent()}")
                    screen += chunk

        def sent() -> str:
            """What the audit log says was done so far, for a failure to tell the screen from the kill."""
            try:
                lines = audit_lines(env)
            except OSError as exc:
                return f"no audit log: {exc}"
            return "audit: " + ", ".join(f"{x['pid']} {x['stage']} {x['result']}" for x in lines)

        try:
            read_until(f"{server.pid}".encode())  # the launcher's tree is the first row
            # The cursor starts on the first GPU process; Home goes up to the launcher, the tree's root.
            os.write(master, b"\x1b[H")
            time.sleep(0.5)
            os.write(master, b"T")
            read_until(b"Send TERM to 3 processes on local")
            os.write(master, b"y")
            read_until(b"KILL after 5 s to 1 process")
            os.write(master, b"q")
            read_until(b"q again to abandon")
            assert state_of(stubborn) in ALIVE  # the KILL is not due yet: the app is still here
            deadline = time.monotonic() + DEADLINE_S
            while tui.poll() is None and time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.1)
                if ready:
                    try:
                        screen += os.read(master, 65536)
                    except OSError:
                        break
            assert tui.wait(timeout=DEADLINE_S) == 0
            assert f"killed (KILL): {stubborn} scheduler_TP1".encode() in text()  # said after leaving
        finally:
            os.close(master)
            if tui.poll() is None:
                tui.kill()
                tui.wait()
        assert is_gone(stubborn, server.ticks[stubborn])
    stages = [(line["stage"], line["result"]) for line in audit_lines(env) if line["pid"] == stubborn]
    assert stages == [
        ("intent", "requested"),
        ("signal", "sent"),
        ("escalate", "sent"),
        ("confirm", "killed"),
    ]
