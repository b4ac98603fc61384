"""Section 8: the overhead targets, measured from outside as whole processes, each beside its peer.

* one-shot: ``gputui snapshot --json`` against ``nvitop -1`` and against the floor (a python that imports
  pynvml and makes 8 memory and 8 × 2 process-list queries), at ~400 and ~3,000 host pids, health discovery
  on as shipped; rounds interleaved, the ratio taken per round, the median ratio printed;
* remote one-shot: ``gputui -F CONFIG snapshot --json HOST`` against ``ssh -F CONFIG HOST nvitop -1`` over a
  loopback sshd, the client's CPU plus the remote command's (a measuring wrapper on the remote side);
* collector start: exec, hello, first snapshot and quit of the shipped collector in a python without
  pynvml or psutil (the common remote: it gets the shipped pynvml);
* TUI: gputui's TUI and nvitop's in a real terminal (tmux), each at its default interval, on a clean host and
  with a finding (a zombie outside every GPU tree) and a discovered health endpoint on screen: CPU over a
  window and RSS;
* soak: the TUI at ``--interval 0.5`` on a wedged host (findings, a discovered /health answering 503), RSS
  from 1/12 of the run to its end (minute 5 to 60 with ``--soak-minutes 60``; 6 minutes by default).

Every child process is started here and ended here; tmux runs on a socket of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gputui.agent.gpu.xid import TEST_SOURCE_ENV as KERNEL_LOG
from tests.bench.run_bench import (
    PEERS_VENV,
    REPO_ROOT,
    FakeHost,
    Report,
    bare_python,
    ensure_peers_venv,
    fake_host,
    proc_cpu_s,
    proc_rss_mib,
    verdict,
)

TARGET_ONESHOT_400 = 0.6
TARGET_ONESHOT_3000 = 0.8
TARGET_ONESHOT_FLOOR = 1.6
TARGET_REMOTE_ONESHOT = 1.0
TARGET_TUI_CLEAN = 0.6
TARGET_TUI_FINDING = 0.8
TARGET_COLLECTOR_START_MS = 50.0
TARGET_SOAK_GROWTH_MIB = 2.0
GPU_COUNT = 8

FLOOR = """
import pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pynvml.nvmlDeviceGetMemoryInfo(h)
    pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)
pynvml.nvmlShutdown()
"""
"""The floor of a one-shot: a python, pynvml, and the memory and process-list queries of every GPU."""

MEASURE = """
import os, sys
out, real = sys.argv[1], sys.argv[2]
pid = os.fork()
if pid == 0:
    os.execv(real, [real] + sys.argv[3:])
_, status, usage = os.wait4(pid, 0)
with open(out, "a") as fh:
    fh.write("%s %.3f\\n" % (os.path.basename(real), (usage.ru_utime + usage.ru_stime) * 1000))
os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""
"""The remote side's measuring wrapper: runs the real command as its child and writes down the child's CPU
(threads included); its own start is not counted."""

ZOMBIE_PARENT = """
import os, time
if os.fork() == 0:
    os._exit(0)
time.sleep(3600)
"""
"""A parent that never reaps its child: a zombie outside every GPU tree, a finding."""

LAUNCHER = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Wedged(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Wedged).serve_forever()
"""
"""Runs as ``python3 DIR/sglang/launch_server.py --port P``: discovery finds it by its command line, and its
/health answers 503 (a wedged server)."""


def pid_count() -> int:
    return sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())


def child_cpu_ms(cmd: list[str], env: dict[str, str], timeout_s: float = 120) -> float | None:
    """CPU (user + system, threads included) of one run of ``cmd``; None when it failed."""
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return None
        time.sleep(0.005)
    if proc.returncode != 0:
        return None
    return (usage.ru_utime + usage.ru_stime) * 1000


def gputui_command() -> list[str]:
    """The installed console script, as users run it."""
    script = Path(sys.executable).with_name("gputui")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gputui.cli"]


def interleaved(commands: dict[str, list[str]], env: dict[str, str], rounds: int) -> dict[str, list[float]]:
    """Each command once per round, in turn; CPU ms per run (a failed run is left out)."""
    runs: dict[str, list[float]] = {name: [] for name in commands}
    for cmd in commands.values():  # one unmeasured run each: page cache, the bundle cache
        child_cpu_ms(cmd, env)
    for _ in range(rounds):
        for name, cmd in commands.items():
            value = child_cpu_ms(cmd, env)
            if value is not None:
                runs[name].append(value)
    return runs


def median_ratio(numerators: list[float], denominators: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(numerators, denominators, strict=False))


# --- one-shot ---------------------------------------------------------------------------------------------


def oneshot(args: argparse.Namespace, report: Report, sec: int, peer_python: str | None) -> None:
    rounds = 5 if args.quick else 15
    nvitop = str(PEERS_VENV / "bin" / "nvitop")
    floor_target = f"<= {TARGET_ONESHOT_FLOOR:g}x floor"
    for label, total, target in (("~400", 400, TARGET_ONESHOT_400), ("~3,000", 3000, TARGET_ONESHOT_3000)):
        with fake_host(max(0, total - pid_count() - args.holders), args.holders) as host:
            env = host.env()
            env["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="gputui-bench-noconfig-")
            commands = {
                "gputui": gputui_command() + ["snapshot", "--json"],
                "floor": [sys.executable, "-c", FLOOR],
            }
            if peer_python is not None:
                commands["nvitop"] = [nvitop, "-1"]
            pids = pid_count()
            runs = interleaved(commands, env, rounds)
            shutil.rmtree(env["XDG_CONFIG_HOME"], ignore_errors=True)
        ours = runs["gputui"]
        if not ours:
            report.na(
                sec, f"snapshot --json, {label} pids", "gputui snapshot failed", target=f"<= {target:g}x"
            )
            continue
        if "nvitop" in runs and len(runs["nvitop"]) == len(ours):
            ratio = median_ratio(ours, runs["nvitop"])
            report.add(
                sec,
                f"snapshot --json / nvitop -1, {label} host pids",
                ratio,
                "x CPU",
                compare=f"gputui {statistics.median(ours):.0f} ms, nvitop {statistics.median(runs['nvitop']):.0f}"
                f" ms; {pids} pids, n={len(ours)}",
                target=f"<= {target:g}x",
                verdict=verdict(ratio <= target),
            )
        else:
            report.na(
                sec,
                f"snapshot --json / nvitop -1, {label} host pids",
                "--no-peers" if peer_python is None else "nvitop -1 failed",
                target=f"<= {target:g}x",
            )
        if total == 400 and len(runs["floor"]) == len(ours):
            ratio = median_ratio(ours, runs["floor"])
            report.add(
                sec,
                f"snapshot --json / the floor, {label} host pids",
                ratio,
                "x CPU",
                compare=f"floor {statistics.median(runs['floor']):.0f} ms (python, pynvml, 8 x memory + "
                f"process lists)",
                target=floor_target,
                verdict=verdict(ratio <= TARGET_ONESHOT_FLOOR),
            )


# --- remote one-shot --------------------------------------------------------------------------------------


def remote_oneshot(
    args: argparse.Namespace,
    report: Report,
    sec: int,
    peer_python: str | None,
    gputui: list[str] | None = None,
) -> None:
    """Remote ``snapshot --json`` beside ``ssh HOST nvitop -1``, plain and through a ControlMaster.

    ``gputui``: the client command (default: this python's console script; section 9 passes its fresh
    install's).
    """
    client = gputui if gputui is not None else gputui_command()
    label = "remote one-shot / ssh HOST nvitop -1"
    label_master = "remote one-shot through a ControlMaster / the same"
    target = f"<= {TARGET_REMOTE_ONESHOT:g}x"
    if peer_python is None:
        report.na(sec, label, "--no-peers", target=target)
        return
    bare = bare_python(report, sec)
    if bare is None:
        report.na(sec, label, "no bare python for the remote side", target=target)
        return
    from tests.bench.bench_sshd import start_hosts

    rounds = 5 if args.quick else 21  # both sides' CPU moves from run to run: more rounds, a steadier median
    with (
        fake_host(args.processes, args.holders) as host,
        tempfile.TemporaryDirectory(prefix="gputui-bench-remote-") as tmp_name,
    ):
        tmp = Path(tmp_name)
        measure_py, log = tmp / "measure.py", tmp / "remote-cpu.log"
        measure_py.write_text(MEASURE)
        remote_bin = tmp / "measured"
        remote_bin.mkdir()
        for name, real in (("python3", bare), ("nvitop", str(PEERS_VENV / "bin" / "nvitop"))):
            wrapper = remote_bin / name
            wrapper.write_text(
                f'#!/bin/sh\nexec "{sys.base_exec_prefix}/bin/python3" -S -E "{measure_py}" '
                f'"{log}" "{real}" "$@"\n'
            )
            wrapper.chmod(0o755)
        fake_env = {
            k: v for k, v in host.env().items() if k in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE", KERNEL_LOG)
        }
        hosts = start_hosts(tmp / "sshd", remote_bin, fake_env, 1)
        rows: dict[str, tuple[dict[str, list[float]], dict[str, list[float]]]] = {}
        try:
            alias = hosts.aliases[0]
            env = dict(hosts.client_env, XDG_CONFIG_HOME=str(tmp / "no-config"))
            plain_config = env.get("GPUTUI_SSH_CONFIG") or str(Path(env["HOME"]) / ".ssh" / "config")
            # The same host through a ControlMaster the user started: both one-shots ride it.
            socket_path = tmp / "cm.sock"
            master_config = tmp / "ssh_config_master"
            master_config.write_text(
                f"Host {alias}\n  ControlPath {socket_path}\n  ControlMaster no\n\n"
                + Path(plain_config).read_text()
            )
            rows[label] = _remote_rounds(client, alias, plain_config, remote_bin, env, log, rounds)
            master = subprocess.Popen(
                ["ssh", "-F", str(master_config), "-o", "BatchMode=yes", "-M", "-N", alias],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                deadline = time.monotonic() + 10
                while not socket_path.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if socket_path.exists():
                    rows[label_master] = _remote_rounds(
                        client, alias, str(master_config), remote_bin, env, log, rounds
                    )
            finally:
                master.terminate()
                master.wait(timeout=10)
        finally:
            hosts.close()
    for name, (totals, clients) in rows.items():
        _remote_row(report, sec, name, totals, clients)
    if label_master not in rows:
        report.na(sec, label_master, "the ControlMaster did not start", target=target)
    report.note(
        sec,
        f"remote one-shot: {hosts.source}; the remote python3 is a bare python (no pynvml, no "
        "psutil: the shipped pynvml is used), nvitop from the peers virtualenv; sshd's own CPU is "
        "in neither figure; gputui at its defaults (a one-shot's client is auto: the system ssh where "
        "installed, paramiko where not)",
    )


def _remote_rounds(
    gputui: list[str], alias: str, config: str, remote_bin: Path, env: dict[str, str], log: Path, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Client + remote CPU per run, and the client's alone, of both one-shots through ``config``."""
    commands = {
        "gputui": gputui + ["-F", config, "snapshot", "--json", alias],
        "nvitop": [
            "ssh",
            "-F",
            config,
            "-o",
            "BatchMode=yes",
            alias,
            str(remote_bin / "nvitop"),
            "-1",
        ],
    }
    totals: dict[str, list[float]] = {"gputui": [], "nvitop": []}
    clients: dict[str, list[float]] = {"gputui": [], "nvitop": []}
    for cmd in commands.values():
        child_cpu_ms(cmd, env)  # the first connection: the bundle cache, host keys
    for _ in range(rounds):
        for name, cmd in commands.items():
            log.write_text("")
            client = child_cpu_ms(cmd, env)
            remote = [float(line.split()[1]) for line in log.read_text().splitlines() if line.strip()]
            if client is None or len(remote) != 1:
                continue
            clients[name].append(client)
            totals[name].append(client + remote[0])
    return totals, clients


def _remote_row(
    report: Report,
    sec: int,
    label: str,
    totals: dict[str, list[float]],
    clients: dict[str, list[float]],
) -> None:
    target = f"<= {TARGET_REMOTE_ONESHOT:g}x"
    if not totals["gputui"] or len(totals["gputui"]) != len(totals["nvitop"]):
        report.na(
            sec,
            label,
            f"runs failed (gputui {len(totals['gputui'])}, nvitop {len(totals['nvitop'])})",
            target=target,
        )
        return
    ratio = median_ratio(totals["gputui"], totals["nvitop"])
    report.add(
        sec,
        label,
        ratio,
        "x CPU",
        compare=f"gputui {statistics.median(totals['gputui']):.0f} ms (client "
        f"{statistics.median(clients['gputui']):.0f}), nvitop {statistics.median(totals['nvitop']):.0f}"
        f" ms (ssh {statistics.median(clients['nvitop']):.0f}); n={len(totals['gputui'])}",
        target=target,
        verdict=verdict(ratio <= TARGET_REMOTE_ONESHOT),
    )


# --- collector start --------------------------------------------------------------------------------------


def collector_start(args: argparse.Namespace, report: Report, sec: int) -> None:
    from tests.bench.run_bench import agent_stream_command

    label = "collector start (exec -> hello -> first snapshot)"
    target = f"<= {TARGET_COLLECTOR_START_MS:.0f} ms"
    bare = bare_python(report, sec)
    if bare is None:
        report.na(sec, label, "no bare python", target=target)
        return
    runs = 5 if args.quick else 21
    command, payload = agent_stream_command()
    cpu_ms: list[float] = []
    with fake_host(args.processes, args.holders) as host:
        for _ in range(runs + 1):
            proc = subprocess.Popen(
                [bare, *command[1:], "--read-only"],
                env=host.env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert proc.stdin is not None
            assert proc.stdout is not None
            proc.stdin.write(payload)
            proc.stdin.flush()
            lines = [proc.stdout.readline(), proc.stdout.readline()]
            proc.stdin.write(b'{"id":1,"cmd":"quit"}\n')
            proc.stdin.close()
            _pid, _status, usage = os.wait4(proc.pid, 0)
            proc.returncode = 0
            proc.stdout.close()
            if b'"snapshot"' not in lines[1]:
                report.na(sec, label, "no first snapshot", target=target)
                return
            cpu_ms.append((usage.ru_utime + usage.ru_stime) * 1000)
    value = statistics.median(cpu_ms[1:])
    report.add(
        sec,
        label,
        value,
        "CPU ms",
        compare=f"python without pynvml/psutil; {runs} starts; payload {len(payload)} B",
        target=target,
        verdict=verdict(value <= TARGET_COLLECTOR_START_MS),
    )


# --- the TUIs in a real terminal ------------------------------------------------------------------------


class Tmux:
    """A tmux server on a socket of its own; ``run`` starts a command in a new session."""

    def __init__(self) -> None:
        self.socket = f"gputui-bench-{os.getpid()}"
        self.sessions = 0
        # A session that stays, so the server does not exit (and race the next start) between two TUIs.
        self._tmux("new-session", "-d", "-s", "keep", "cat")

    def _tmux(self, *words: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *words], capture_output=True, text=True, timeout=30, check=False
        )
        return done.stdout.strip()

    def run(self, command: list[str], env: dict[str, str], width: int = 160, height: int = 50) -> int:
        """Start ``command`` (exec'd by the pane's shell) in a new session; its pid."""
        self.sessions += 1
        exports = " ".join(f"{k}={_quote(v)}" for k, v in sorted(env.items()))
        line = f"env -i {exports} {' '.join(_quote(w) for w in command)}"
        self._tmux(
            "new-session",
            "-d",
            "-s",
            f"s{self.sessions}",
            "-x",
            str(width),
            "-y",
            str(height),
            f"exec {line}",
        )
        return int(self._tmux("display-message", "-p", "-t", f"s{self.sessions}", "#{pane_pid}"))

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", f"s{self.sessions}")

    def close(self) -> None:
        self._tmux("kill-server")


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


@contextlib.contextmanager
def detached(argv: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session of its own (outside the bench's tree), killed on the way out."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def wedged(tmp: Path, port: int) -> Iterator[None]:
    """A zombie outside every GPU tree and a discovered launcher whose /health answers 503."""
    script = tmp / "sglang" / "launch_server.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(LAUNCHER)
    with (
        detached([sys.executable, "-c", ZOMBIE_PARENT]),
        detached([sys.base_exec_prefix + "/bin/python3", str(script), "--port", str(port)]),
    ):
        time.sleep(0.5)
        yield


def terminal_env(host: FakeHost, home: Path) -> dict[str, str]:
    """What a TUI in tmux gets: the fake NVML, a home of its own (no config, no cache), a terminal."""
    kept = ("LD_LIBRARY_PATH", "FAKE_NVML_STATE", "PYTHONPATH", KERNEL_LOG)
    env = {k: v for k, v in host.env().items() if k in kept}
    env.update(
        TERM="xterm-256color",
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        PATH="/usr/local/bin:/usr/bin:/bin",
        LANG="C.UTF-8",
    )
    return env


def tui_window(
    tmux: Tmux, command: list[str], env: dict[str, str], settle_s: float, window_s: float
) -> tuple[float, float, str] | None:
    """(% of a core over ``window_s`` after ``settle_s``, VmRSS MiB at the end, the screen) of one TUI."""
    pid = tmux.run(command, env)
    time.sleep(settle_s)
    start = proc_cpu_s(pid)
    time.sleep(window_s)
    end = proc_cpu_s(pid)
    rss = proc_rss_mib(pid)
    screen = tmux.screen()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if start is None or end is None or rss is None:
        return None
    return (end - start) / window_s * 100, rss, screen


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tui(args: argparse.Namespace, report: Report, sec: int, peer_python: str | None) -> None:
    if shutil.which("tmux") is None:
        report.na(sec, "TUI / nvitop's TUI", "tmux not installed")
        return
    settle_s, window_s = (5.0, 10.0) if args.quick else (10.0, 60.0)
    tmux = Tmux()
    try:
        with (
            fake_host(args.processes, args.holders) as host,
            tempfile.TemporaryDirectory(prefix="gputui-bench-tui-") as tmp_name,
        ):
            tmp = Path(tmp_name)
            env = terminal_env(host, tmp)
            for scene, target in (
                ("clean host", TARGET_TUI_CLEAN),
                ("finding + health on screen", TARGET_TUI_FINDING),
            ):
                with contextlib.ExitStack() as stack:
                    if scene != "clean host":
                        stack.enter_context(wedged(tmp, free_port()))
                    ours = tui_window(tmux, gputui_command(), env, settle_s, window_s)
                    theirs = None
                    if peer_python is not None:
                        theirs = tui_window(
                            tmux, [str(PEERS_VENV / "bin" / "nvitop")], env, settle_s, window_s
                        )
                label = f"TUI / nvitop's TUI, {scene}"
                if ours is None or theirs is None:
                    report.na(
                        sec,
                        label,
                        "--no-peers" if peer_python is None else "a TUI did not run",
                        target=f"<= {target:g}x",
                    )
                    continue
                ratio = ours[0] / theirs[0] if theirs[0] > 0 else float("inf")
                finding = (
                    ""
                    if scene == "clean host"
                    else (
                        "; finding on screen"
                        if "zombie" in ours[2]
                        else "; NO finding seen on gputui's screen"
                    )
                )
                report.add(
                    sec,
                    label,
                    ratio,
                    "x CPU",
                    compare=f"gputui {ours[0]:.2f} % (1 s), nvitop {theirs[0]:.2f} % of a core (its default); "
                    f"{window_s:.0f} s{finding}",
                    target=f"<= {target:g}x",
                    verdict=verdict(ratio <= target),
                )
                report.add(sec, f"  TUI RSS, {scene}", ours[1], "MiB", compare=f"nvitop {theirs[1]:.1f} MiB")
    finally:
        tmux.close()


def soak(args: argparse.Namespace, report: Report, sec: int) -> None:
    label = "TUI soak: RSS growth"
    minutes = args.soak_minutes or (2.0 if args.quick else 6.0)
    from_s = minutes * 60 / 12
    target = f"<= {TARGET_SOAK_GROWTH_MIB:g} MiB"
    if shutil.which("tmux") is None:
        report.na(sec, label, "tmux not installed", target=target)
        return
    tmux = Tmux()
    samples: list[tuple[float, float, int, int]] = []
    try:
        with (
            fake_host(args.processes, args.holders) as host,
            tempfile.TemporaryDirectory(prefix="gputui-bench-soak-") as tmp_name,
        ):
            tmp = Path(tmp_name)
            env = terminal_env(host, tmp)
            with wedged(tmp, free_port()):
                pid = tmux.run(gputui_command() + ["--interval", "0.5"], env)
                started = time.monotonic()
                end = started + minutes * 60
                while time.monotonic() < end:
                    rss = proc_rss_mib(pid)
                    if rss is None:
                        break
                    fds = len(os.listdir(f"/proc/{pid}/fd"))
                    threads = len(os.listdir(f"/proc/{pid}/task"))
                    samples.append((time.monotonic() - started, rss, fds, threads))
                    time.sleep(min(15.0, max(1.0, minutes * 60 / 48)))
                screen = tmux.screen()
    finally:
        tmux.close()
    after = [s for s in samples if s[0] >= from_s]
    if len(after) < 2:
        report.na(sec, label, "the TUI ended early", target=target)
        return
    growth = after[-1][1] - after[0][1]
    report.add(
        sec,
        label,
        growth,
        "MiB",
        compare=f"minute {from_s / 60:.1f} -> {after[-1][0] / 60:.1f} at --interval 0.5; RSS "
        f"{after[0][1]:.1f} -> {after[-1][1]:.1f} MiB; fds {after[0][2]}->{after[-1][2]}, threads "
        f"{after[0][3]}->{after[-1][3]}" + ("" if "zombie" in screen else "; NO finding on screen"),
        target=target,
        verdict=verdict(growth <= TARGET_SOAK_GROWTH_MIB),
    )


def compile_tree() -> None:
    """Bytecode for every gputui module, as an installed package has it (the peers' pip install compiled
    theirs): a run with PYTHONDONTWRITEBYTECODE set would otherwise compile the sources on every start."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO_ROOT / "gputui")],
        check=False,
        stdout=subprocess.DEVNULL,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    )


def run(args: argparse.Namespace, report: Report, sec: int) -> None:
    compile_tree()
    peer_python = None if args.no_peers else ensure_peers_venv(report, sec)
    parts: dict[str, Any] = {
        "oneshot": lambda: oneshot(args, report, sec, peer_python),
        "remote": lambda: remote_oneshot(args, report, sec, peer_python),
        "start": lambda: collector_start(args, report, sec),
        "tui": lambda: tui(args, report, sec, peer_python),
        "soak": lambda: soak(args, report, sec),
    }
    for name in args.overhead or list(parts):
        started = time.monotonic()
        try:
            parts[name]()
        except Exception as exc:  # one broken part must not hide the others' figures
            report.na(sec, f"overhead: {name}", f"harness error {type(exc).__name__}: {exc}")
        print(f"   overhead {name} took {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


__all__ = ["run", "FakeHost"]
