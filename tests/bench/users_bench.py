"""Section 9: gputui's overhead as users run it, beside nvitop, in one run.

What differs from the other sections, on purpose:

* gputui is a fresh NON-editable install (``pip install REPO`` into a new virtualenv in a temp dir, which
  compiles its bytecode as pip does), run through its console script with default flags and no config file;
* the 8 GPU holders are children of the calling process (the "shell" a user started their job from: this
  benchmark), and the measured commands are its children too, so the holders' job tree is what a user's is;
* the ~300 idle processes each run in a session of their own (``setsid``), as daemons and logins do;
* NVML calls are counted in the library (``nvml_counts.py``: the fake ``libnvidia-ml.so.1`` built with
  ``-finstrument-functions``), whichever binding made them;
* both TUIs run at the same time, side by side in one tmux server (160x50 each), at their defaults.

Rows, each with PASS/FAIL against the targets of the third overhead round:

* TUI CPU over a window (60 s after 10 s of settling, three runs; the median of the per-run ratios);
* TUI RSS at the end of each window;
* NVML process-list queries per second and all NVML calls per second, over the same windows;
* ``snapshot --json`` CPU against ``nvitop -1`` at ~430 and ~2,800 host pids (rounds interleaved), and
  ``check`` against ``nvitop -1`` at ~2,800;
* the remote one-shot, ``gputui snapshot --json HOST`` against ``ssh HOST nvitop -1`` over a loopback sshd,
  client plus remote CPU, plain and through a ControlMaster the user started (section 8's harness, run
  with the fresh install's console script);
* the clean slate seen after the last GPU drains: in the TUI (key ``c`` pressed, then the holders killed and
  reaped; the time until "CLEAN ✓" is on the terminal's screen) and in ``check --wait`` (until its clean line
  arrives on the pipe).
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
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tests.bench.nvml_counts import build_counting_lib, difference, process_list_calls, read_counts
from tests.bench.overhead_bench import Tmux, pid_count, remote_oneshot
from tests.bench.run_bench import (
    CACHE_DIR,
    PEERS_VENV,
    REPO_ROOT,
    USERS_PARTS,
    Report,
    ensure_peers_venv,
    proc_cpu_s,
    proc_rss_mib,
    verdict,
)

TARGET_TUI_CPU = 0.8
"""In every one of the runs, not only their median."""
TARGET_TUI_RSS_MIB = 40.0
TARGET_PROCESS_LIST_QUERIES = 0.5
TARGET_NVML_CALLS = 0.6
TARGET_ONESHOT_430 = 0.8
TARGET_ONESHOT_2800 = 0.8
TARGET_CLEAN_SEEN_MS = 100.0
GPU_COUNT = 8
CLEAN_MARK = "CLEAN ✓"


# --- the install ------------------------------------------------------------------------------------------


def fresh_install(tmp: Path) -> Path:
    """``pip install REPO`` (not editable) into a new virtualenv under ``tmp``; its bin directory."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-cache-dir", str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=tmp,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip install failed: {done.stderr.strip()[-300:]}")
    return venv / "bin"


# --- the host: holders under the calling process, idle processes in sessions of their own ----------------


class UsersHost:
    """Fake NVML (counting build), GPU holders as children of this process, idle processes in own sessions."""

    def __init__(self, tmp: Path, idle: int) -> None:
        self.lib_dir = build_counting_lib(CACHE_DIR / "fakenvml-counting")
        self.state_path = tmp / "fakenvml.state"
        self.count_dir = tmp / "nvml-counts"
        self.count_dir.mkdir()
        self.home = tmp / "home"
        self.home.mkdir()
        self.idle: list[subprocess.Popen[bytes]] = []
        self.holders: list[subprocess.Popen[bytes]] = []
        self.top_up(idle)
        self.write_state([])

    def _start(self, session: bool) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            ["sleep", "3600"], stdin=subprocess.DEVNULL, start_new_session=session, close_fds=True
        )

    def top_up(self, count: int) -> None:
        for _ in range(max(0, count)):
            self.idle.append(self._start(session=True))

    def trim_idle(self, keep: int) -> None:
        while len(self.idle) > keep:
            proc = self.idle.pop()
            proc.kill()
            proc.wait()

    def write_state(self, pids: list[int], mib_each: int = 20000) -> None:
        from tests.fakenvml import FakeNvmlState

        state = FakeNvmlState.with_gpus(GPU_COUNT)
        for i, pid in enumerate(pids):
            state.add_holder(i % GPU_COUNT, pid, mib_each)
        state.write(self.state_path)

    def start_holders(self, count: int = GPU_COUNT) -> None:
        self.holders = [self._start(session=False) for _ in range(count)]
        self.write_state([p.pid for p in self.holders])

    def kill_holders(self) -> float:
        """SIGKILL and reap every holder; the monotonic time once the last one is gone."""
        for proc in self.holders:
            proc.kill()
        for proc in self.holders:
            proc.wait()
        gone = time.monotonic()
        self.holders = []
        return gone

    def env(self) -> dict[str, str]:
        """A user's environment: the fake NVML, a home of its own (no config, no cache), a terminal."""
        return {
            "LD_LIBRARY_PATH": str(self.lib_dir),
            "FAKE_NVML_STATE": str(self.state_path),
            "FAKE_NVML_COUNT_DIR": str(self.count_dir),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / "config"),
            "XDG_CACHE_HOME": str(self.home / "cache"),
            "XDG_STATE_HOME": str(self.home / "state"),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
        }

    def close(self) -> None:
        for proc in self.holders + self.idle:
            with contextlib.suppress(OSError):
                proc.kill()
        for proc in self.holders + self.idle:
            proc.wait()


@contextlib.contextmanager
def users_host(tmp: Path, idle: int) -> Iterator[UsersHost]:
    host = UsersHost(tmp, idle)
    try:
        yield host
    finally:
        host.close()


# --- TUIs side by side ------------------------------------------------------------------------------------


def stop(pid: int, wait_s: float = 10.0) -> None:
    """SIGTERM a TUI and wait until it is gone (SIGKILL after ``wait_s``), before its terminal goes away: a
    second signal (the SIGHUP of a closing tmux) while it shuts down must not leave it running unwatched."""
    deadline = time.monotonic() + wait_s
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        while time.monotonic() < deadline:
            if proc_cpu_s(pid) is None or _state(pid) == "Z":
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def _state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2]


def tuis_side_by_side(
    bin_dir: Path, host: UsersHost, settle_s: float, window_s: float
) -> dict[str, dict[str, float]] | None:
    """Both TUIs at once, each in its own tmux session; per TUI: CPU %, RSS MiB, NVML calls/s."""
    tmux = Tmux()
    pids: dict[str, int] = {}
    try:
        pids["gputui"] = tmux.run([str(bin_dir / "gputui")], host.env())
        pids["nvitop"] = tmux.run([str(PEERS_VENV / "bin" / "nvitop")], host.env())
        time.sleep(settle_s)
        cpu0 = {name: proc_cpu_s(pid) for name, pid in pids.items()}
        calls0 = {name: read_counts(host.count_dir, pid) for name, pid in pids.items()}
        time.sleep(window_s)
        result: dict[str, dict[str, float]] = {}
        for name, pid in pids.items():
            cpu1, rss = proc_cpu_s(pid), proc_rss_mib(pid)
            calls = difference(read_counts(host.count_dir, pid), calls0[name])
            start = cpu0[name]
            if start is None or cpu1 is None or rss is None:
                return None
            result[name] = {
                "cpu_pct": (cpu1 - start) / window_s * 100,
                "rss_mib": rss,
                "calls_s": sum(calls.values()) / window_s,
                "lists_s": process_list_calls(calls) / window_s,
            }
        return result
    finally:
        for pid in pids.values():
            stop(pid)
        tmux.close()


def tui_rows(args: argparse.Namespace, bin_dir: Path, report: Report, sec: int) -> None:
    settle_s, window_s, runs = (5.0, 15.0, 2) if args.quick else (10.0, 60.0, 5)
    results = []
    with tempfile.TemporaryDirectory(prefix="gputui-bench-users-") as tmp_name:
        with users_host(Path(tmp_name), args.processes) as host:
            host.start_holders()
            for _ in range(runs):
                one = tuis_side_by_side(bin_dir, host, settle_s, window_s)
                if one is not None:
                    results.append(one)
    if not results:
        report.na(
            sec, "TUI / nvitop's TUI at defaults", "a TUI did not run", target=f"<= {TARGET_TUI_CPU:g}x"
        )
        return

    def ratio(key: str) -> float:
        return statistics.median(
            r["gputui"][key] / r["nvitop"][key] if r["nvitop"][key] else float("inf") for r in results
        )

    def both(key: str, fmt: str) -> str:
        ours = statistics.median(r["gputui"][key] for r in results)
        theirs = statistics.median(r["nvitop"][key] for r in results)
        return f"gputui {ours:{fmt}}, nvitop {theirs:{fmt}}"

    span = f"{window_s:.0f} s x {len(results)}"
    value = ratio("cpu_pct")
    each = [r["gputui"]["cpu_pct"] / r["nvitop"]["cpu_pct"] for r in results if r["nvitop"]["cpu_pct"]]
    report.add(
        sec,
        "TUI CPU / nvitop's TUI, both at defaults",
        value,
        "x CPU",
        compare=f"min {min(each, default=0):.2f} max {max(each, default=0):.2f}; "
        + both("cpu_pct", ".2f")
        + f" % of a core; side by side, {span}",
        target=f"<= {TARGET_TUI_CPU:g}x in every run",
        verdict=verdict(bool(each) and max(each) <= TARGET_TUI_CPU),
    )
    sizes = [r["gputui"]["rss_mib"] for r in results]
    rss = statistics.median(sizes)
    report.add(
        sec,
        "TUI RSS",
        rss,
        "MiB",
        compare=f"min {min(sizes):.1f} max {max(sizes):.1f}; "
        f"nvitop {statistics.median(r['nvitop']['rss_mib'] for r in results):.1f} MiB",
        target=f"<= {TARGET_TUI_RSS_MIB:g} MiB",
        verdict=verdict(max(sizes) <= TARGET_TUI_RSS_MIB),
    )
    value = ratio("lists_s")
    report.add(
        sec,
        "NVML process-list queries / nvitop's",
        value,
        "x calls/s",
        compare=both("lists_s", ".2f") + f" per s (counted in the library); {span}",
        target=f"<= {TARGET_PROCESS_LIST_QUERIES:g}x",
        verdict=verdict(value <= TARGET_PROCESS_LIST_QUERIES),
    )
    value = ratio("calls_s")
    report.add(
        sec,
        "NVML calls, all / nvitop's",
        value,
        "x calls/s",
        compare=both("calls_s", ".1f") + f" per s; {span}",
        target=f"<= {TARGET_NVML_CALLS:g}x",
        verdict=verdict(value <= TARGET_NVML_CALLS),
    )


# --- one-shots --------------------------------------------------------------------------------------------


def run_cpu_ms(cmd: list[str], env: dict[str, str], timeout_s: float = 120) -> tuple[float, int, int] | None:
    """(CPU ms of the whole process, its exit status, bytes on stdout) of one run; None when it hung."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL)
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
            time.sleep(0.003)
        size = out.tell()
    return (usage.ru_utime + usage.ru_stime) * 1000, proc.returncode, size


def oneshot_rows(args: argparse.Namespace, bin_dir: Path, report: Report, sec: int) -> None:
    rounds = 5 if args.quick else 11
    nvitop = [str(PEERS_VENV / "bin" / "nvitop"), "-1"]
    with tempfile.TemporaryDirectory(prefix="gputui-bench-users-") as tmp_name:
        with users_host(Path(tmp_name), 0) as host:
            host.start_holders()
            for label, total, target, with_check in (
                ("~430", 430, TARGET_ONESHOT_430, False),
                ("~2,800", 2800, TARGET_ONESHOT_2800, True),
            ):
                host.top_up(total - pid_count())
                commands = {"snapshot": [str(bin_dir / "gputui"), "snapshot", "--json"], "nvitop": nvitop}
                if with_check:
                    commands["check"] = [str(bin_dir / "gputui"), "check"]
                env = host.env()
                runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name in commands}
                for cmd in commands.values():
                    run_cpu_ms(cmd, env)  # page cache
                pids = pid_count()
                for _ in range(rounds):
                    for name, cmd in commands.items():
                        one = run_cpu_ms(cmd, env)
                        if one is not None:
                            runs[name].append(one)
                failed = [n for n, r in runs.items() if len(r) != rounds or (n != "check" and r[0][1] != 0)]
                if failed:
                    report.na(sec, f"snapshot --json / nvitop -1, {label} pids", f"{failed} failed")
                    continue
                theirs = [r[0] for r in runs["nvitop"]]
                for name in [n for n in commands if n != "nvitop"]:
                    ours = [r[0] for r in runs[name]]
                    value = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
                    metric = "snapshot --json" if name == "snapshot" else "check (one-shot)"
                    size = f", {runs[name][0][2] / 1024:.0f} kB out" if name == "snapshot" else ""
                    report.add(
                        sec,
                        f"{metric} / nvitop -1, {label} host pids",
                        value,
                        "x CPU",
                        compare=f"gputui {statistics.median(ours):.0f} ms, nvitop {statistics.median(theirs):.0f}"
                        f" ms; {pids} pids, n={rounds}{size}",
                        target=f"<= {target:g}x",
                        verdict=verdict(value <= target),
                    )


# --- the clean slate seen ---------------------------------------------------------------------------------


def clean_seen_tui(bin_dir: Path, host: UsersHost, settle_s: float) -> float | None:
    """Key c, then every holder killed and reaped: ms until "CLEAN ✓" is on the screen (None: never)."""
    tmux = Tmux()
    pid = None
    try:
        host.start_holders()
        pid = tmux.run([str(bin_dir / "gputui")], host.env())
        time.sleep(settle_s)
        tmux._tmux("send-keys", "-t", f"s{tmux.sessions}", "c")
        time.sleep(1.0)
        if CLEAN_MARK in tmux.screen():
            return None  # clean before the kill: the holders were not seen
        gone = host.kill_holders()
        deadline = gone + 10
        while time.monotonic() < deadline:
            if CLEAN_MARK in tmux.screen():
                return (time.monotonic() - gone) * 1000
            time.sleep(0.005)
        return None
    finally:
        if pid is not None:
            stop(pid)
        if host.holders:
            host.kill_holders()
        tmux.close()


def clean_seen_check(bin_dir: Path, host: UsersHost, settle_s: float) -> float | None:
    """``check --wait`` with every GPU held; the holders killed and reaped: ms until its clean line."""
    host.start_holders()
    env = host.env()
    proc = subprocess.Popen(
        [str(bin_dir / "gputui"), "check", "--wait", "20"],
        env=dict(env, PYTHONUNBUFFERED="1"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append((time.monotonic(), raw.decode(errors="replace")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        time.sleep(settle_s)
        if proc.poll() is not None:
            return None
        gone = host.kill_holders()
        proc.wait(timeout=25)
        reader.join(5)
        clean = [
            t
            for t, text in lines
            if t >= gone and "clean" in text.lower() and "not clean" not in text.lower()
        ]
        return (clean[0] - gone) * 1000 if clean and proc.returncode == 0 else None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if host.holders:
            host.kill_holders()


def clean_rows(args: argparse.Namespace, bin_dir: Path, report: Report, sec: int) -> None:
    repeats = 5 if args.quick else 21
    target = f"<= {TARGET_CLEAN_SEEN_MS:g} ms"
    with tempfile.TemporaryDirectory(prefix="gputui-bench-users-") as tmp_name:
        with users_host(Path(tmp_name), args.processes) as host:
            for label, measure, settle_s in (
                ("clean slate seen, TUI (key c)", clean_seen_tui, 4.0),
                ("clean slate seen, check --wait", clean_seen_check, 2.0),
            ):
                values = [
                    v for v in (measure(bin_dir, host, settle_s) for _ in range(repeats)) if v is not None
                ]
                if not values:
                    report.na(sec, label, "never seen clean", target=target)
                    continue
                value = statistics.median(values)
                report.add(
                    sec,
                    label,
                    value,
                    "ms last holder reaped -> seen",
                    compare=f"min {min(values):.0f} max {max(values):.0f}, n={len(values)} of {repeats}",
                    target=target,
                    verdict=verdict(value <= TARGET_CLEAN_SEEN_MS),
                )


def remote_rows(args: argparse.Namespace, bin_dir: Path, report: Report, sec: int) -> None:
    remote_oneshot(args, report, sec, ensure_peers_venv(report, sec), gputui=[str(bin_dir / "gputui")])


def run(args: argparse.Namespace, report: Report, sec: int) -> None:
    if shutil.which("tmux") is None:
        report.na(sec, "as users run it", "tmux not installed")
        return
    if ensure_peers_venv(report, sec) is None:
        report.na(sec, "as users run it", "no peers virtualenv (nvitop)")
        return
    with tempfile.TemporaryDirectory(prefix="gputui-bench-install-") as tmp_name:
        started = time.monotonic()
        bin_dir = fresh_install(Path(tmp_name))
        report.note(sec, f"fresh non-editable install of {REPO_ROOT} in {time.monotonic() - started:.0f} s")
        from tests.bench.scale_bench import fleet_rows, job_rows, ssh_rows

        parts = {
            "tui": tui_rows,
            "oneshot": oneshot_rows,
            "remote": remote_rows,
            "clean": clean_rows,
            "job": job_rows,
            "ssh": ssh_rows,
            "fleet": fleet_rows,
        }
        for name in getattr(args, "users", None) or USERS_PARTS:
            started = time.monotonic()
            try:
                parts[name](args, bin_dir, report, sec)
            except Exception as exc:  # one broken part must not hide the others' figures
                report.na(sec, f"users: {name}", f"harness error {type(exc).__name__}: {exc}")
            print(f"   users {name} took {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
