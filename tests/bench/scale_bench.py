"""Section 9's rows for cost that must not grow with the job or the fleet.

* ``job``: the 8 GPU holders and 300 more idle processes, all children of one launcher (this benchmark, one
  session), so that every one of them is a member of the GPU job. Both TUIs side by side (five runs: the
  median of the per-run ratios and their spread), their RSS, and ``snapshot --json`` against ``nvitop -1``
  with the job alone and with ~3,000 host pids (idle processes in sessions of their own added);
* ``ssh``: the TUI watching 32 SSH hosts over one loopback sshd (the suite's fixture), each host's
  collector under the fake NVML, against 32 ``ssh -tt HOST nvitop``: the CPU of the clients plus that of
  the remote commands (sshd's own in neither), over a window; then keys pressed in the TUI, each timed
  until the screen shows its effect;
* ``fleet``: 500 hosts x 8 GPUs served by the suite's stand-in DCGM exporter (``tests/integration``) and
  scraped by a real Prometheus every 15 s: one refresh's CPU and RSS in a fresh process, then the TUI's
  fleet view on it with keys pressed while it refreshes, each timed until the screen shows its effect.

A key is timed from ``tmux send-keys`` until ``tmux capture-pane`` (every 5 ms) shows the sort mode it
chose; the capture's own delay is in the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench.overhead_bench import Tmux, pid_count
from tests.bench.run_bench import (
    PEERS_VENV,
    REPO_ROOT,
    Report,
    bare_python,
    proc_cpu_s,
    proc_rss_mib,
    verdict,
)
from tests.bench.users_bench import UsersHost, run_cpu_ms, tuis_side_by_side, users_host

JOB_MEMBERS = 300
TARGET_JOB_TUI_CPU = 0.8
TARGET_JOB_RSS_MIB = 40.0
TARGET_JOB_ONESHOT = 0.8
SSH_HOSTS = 32
TARGET_SSH_CPU = 0.4
TARGET_KEY_MS = 100.0
FLEET_HOSTS = 500
FLEET_SCRAPE = "15s"
SORT_RE = re.compile(r"sort: ?([\w-]+)")


def spread(values: list[float], fmt: str = ".2f") -> str:
    return f"min {min(values):{fmt}} max {max(values):{fmt}}"


# --- the 300-member job ------------------------------------------------------------------------------------


def start_job(host: UsersHost, members: int) -> None:
    """The holders, then ``members`` idle processes, all children of this process in its session."""
    host.start_holders()
    for _ in range(members):
        host.idle.append(host._start(session=False))


def job_rows(args: argparse.Namespace, bin_dir: Path, report: Report, sec: int) -> None:
    settle_s, window_s, runs = (5.0, 15.0, 2) if args.quick else (10.0, 60.0, 5)
    rounds = 5 if args.quick else 11
    with (
        tempfile.TemporaryDirectory(prefix="gputui-bench-job-") as tmp_name,
        users_host(Path(tmp_name), 0) as host,
    ):
        start_job(host, JOB_MEMBERS)
        results = [
            r for r in (tuis_side_by_side(bin_dir, host, settle_s, window_s) for _ in range(runs)) if r
        ]
        label = f"TUI CPU / nvitop's TUI, a {JOB_MEMBERS}-member job"
        target = f"<= {TARGET_JOB_TUI_CPU:g}x in every run"
        if not results:
            report.na(sec, label, "a TUI did not run", target=target)
        else:
            ratios = [
                r["gputui"]["cpu_pct"] / r["nvitop"]["cpu_pct"] for r in results if r["nvitop"]["cpu_pct"]
            ]
            ours = statistics.median(r["gputui"]["cpu_pct"] for r in results)
            theirs = statistics.median(r["nvitop"]["cpu_pct"] for r in results)
            report.add(
                sec,
                label,
                statistics.median(ratios),
                "x CPU",
                compare=f"{spread(ratios, '.2f')}; gputui {ours:.2f}, nvitop {theirs:.2f} % of a core; "
                f"{window_s:.0f} s x {len(results)}",
                target=target,
                verdict=verdict(max(ratios) <= TARGET_JOB_TUI_CPU),
            )
            rss = [r["gputui"]["rss_mib"] for r in results]
            report.add(
                sec,
                f"TUI RSS, a {JOB_MEMBERS}-member job",
                statistics.median(rss),
                "MiB",
                compare=f"{spread(rss, '.1f')}; nvitop {statistics.median(r['nvitop']['rss_mib'] for r in results):.1f}",
                target=f"<= {TARGET_JOB_RSS_MIB:g} MiB",
                verdict=verdict(max(rss) <= TARGET_JOB_RSS_MIB),
            )
        nvitop = [str(PEERS_VENV / "bin" / "nvitop"), "-1"]
        snapshot = [str(bin_dir / "gputui"), "snapshot", "--json"]
        for total in (0, 3000):
            if total:
                host.top_up(total - pid_count())
            env = host.env()
            for cmd in (snapshot, nvitop):
                run_cpu_ms(cmd, env)  # page cache
            runs_of: dict[str, list[tuple[float, int, int]]] = {"snapshot": [], "nvitop": []}
            for _ in range(rounds):
                for name, cmd in (("snapshot", snapshot), ("nvitop", nvitop)):
                    one = run_cpu_ms(cmd, env)
                    if one is not None and one[1] == 0:
                        runs_of[name].append(one)
            metric = f"snapshot --json / nvitop -1, {JOB_MEMBERS}-member job" + (
                ", ~3,000 host pids" if total else ""
            )
            if len(runs_of["snapshot"]) != rounds or len(runs_of["nvitop"]) != rounds:
                report.na(sec, metric, "a one-shot failed", target=f"<= {TARGET_JOB_ONESHOT:g}x")
                continue
            ours = [r[0] for r in runs_of["snapshot"]]
            theirs = [r[0] for r in runs_of["nvitop"]]
            ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
            value = statistics.median(ratios)
            report.add(
                sec,
                metric,
                value,
                "x CPU",
                compare=f"gputui {statistics.median(ours):.0f} ms, nvitop {statistics.median(theirs):.0f} ms; "
                f"{spread(ratios)}; {pid_count()} pids, n={rounds}, {runs_of['snapshot'][0][2] / 1024:.0f} kB out",
                target=f"<= {TARGET_JOB_ONESHOT:g}x",
                verdict=verdict(value <= TARGET_JOB_ONESHOT),
            )


# --- keys --------------------------------------------------------------------------------------------------


def sort_shown(screen: str) -> str | None:
    found = SORT_RE.search(screen)
    return None if found is None else found.group(1)


def key_latencies(tmux: Tmux, presses: int, gap_s: float, timeout_s: float = 5.0) -> list[float]:
    """Press ``s`` (sort) ``presses`` times; per press, ms until the screen shows another sort mode."""
    session = f"s{tmux.sessions}"
    times: list[float] = []
    for _ in range(presses):
        before = sort_shown(tmux.screen())
        if before is None:
            time.sleep(gap_s)
            continue
        sent = time.monotonic()
        tmux._tmux("send-keys", "-t", session, "s")
        while time.monotonic() - sent < timeout_s:
            now = sort_shown(tmux.screen())
            if now is not None and now != before:
                times.append((time.monotonic() - sent) * 1000)
                break
            time.sleep(0.005)
        time.sleep(gap_s)
    return times


def key_row(report: Report, sec: int, label: str, times: list[float], presses: int) -> None:
    target = f"<= {TARGET_KEY_MS:g} ms (max)"
    if not times:
        report.na(sec, label, "no key was seen answered", target=target)
        return
    report.add(
        sec,
        label,
        statistics.median(times),
        "ms key -> screen",
        compare=f"max {max(times):.0f}, n={len(times)} of {presses}",
        target=target,
        verdict=verdict(max(times) <= TARGET_KEY_MS),
    )


# --- 32 SSH hosts ------------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found.extend(int(p) for p in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    return found


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    stack = _children(pid)
    while stack:
        one = stack.pop()
        out.append(one)
        stack.extend(_children(one))
    return out


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def tree_cpu(pids: Callable[[], list[int]]) -> dict[int, float]:
    """pid -> CPU seconds of each process ``pids()`` names now."""
    out: dict[int, float] = {}
    for pid in pids():
        cpu = proc_cpu_s(pid)
        if cpu is not None:
            out[pid] = cpu
    return out


def window_cpu(pids: Callable[[], list[int]], window_s: float) -> float:
    """CPU seconds over ``window_s`` of the processes ``pids()`` names at both ends (children started and
    reaped inside the window are not seen: the clients here keep theirs)."""
    first = tree_cpu(pids)
    time.sleep(window_s)
    last = tree_cpu(pids)
    return sum(last[pid] - first.get(pid, 0.0) for pid in last)


def sshd_pid(hosts: Any) -> int | None:
    """The listening sshd of the suite's fixture (the parent of every session)."""
    for candidate in ("proc", "process"):
        found = getattr(getattr(hosts.close, "__self__", None), candidate, None)
        if found is not None and hasattr(found, "pid"):
            return int(found.pid)
    return None


def ssh_rows(args: argparse.Namespace, bin_dir: Path, report: Report, sec: int) -> None:
    from tests.bench.bench_sshd import start_hosts

    label = f"TUI watching {SSH_HOSTS} SSH hosts / {SSH_HOSTS} x ssh -tt HOST nvitop"
    target = f"<= {TARGET_SSH_CPU:g}x"
    bare = bare_python(report, sec)
    if bare is None:
        report.na(sec, label, "no bare python for the remote side", target=target)
        return
    settle_s, window_s = (20.0, 15.0) if args.quick else (30.0, 60.0)
    with (
        tempfile.TemporaryDirectory(prefix="gputui-bench-ssh32-") as tmp_name,
        users_host(Path(tmp_name), args.processes) as host,
    ):
        tmp = Path(tmp_name)
        host.start_holders()
        remote_bin = tmp / "remote-bin"
        remote_bin.mkdir()
        for name, real in (("python3", bare), ("nvitop", str(PEERS_VENV / "bin" / "nvitop"))):
            wrapper = remote_bin / name
            wrapper.write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
            wrapper.chmod(0o755)
        fake_env = {k: v for k, v in host.env().items() if k in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE")}
        hosts = start_hosts(tmp / "sshd", remote_bin, fake_env, SSH_HOSTS)
        try:
            server = sshd_pid(hosts)
            if server is None:
                report.na(sec, label, "the sshd's pid is not known", target=target)
                return
            config = hosts.client_env.get("GPUTUI_SSH_CONFIG") or str(
                Path(hosts.client_env["HOME"]) / ".ssh" / "config"
            )
            env = dict(host.env(), HOME=hosts.client_env["HOME"], GPUTUI_SSH_CONFIG=config)

            def remote() -> list[int]:
                return [p for p in descendants(server) if not _name(p).startswith("sshd")]

            tmux = Tmux()
            try:
                tui = tmux.run([str(bin_dir / "gputui"), *hosts.aliases], env)
                time.sleep(settle_s)
                collectors = len(remote())
                ours = window_cpu(lambda: [tui, *descendants(tui), *remote()], window_s)
                rss = proc_rss_mib(tui)
                presses = 5 if args.quick else 15
                times = key_latencies(tmux, presses, 0.7)
            finally:
                with contextlib.suppress(OSError):
                    os.kill(tui, 15)
                time.sleep(2)
                tmux.close()
            peers = [
                subprocess.Popen(
                    ["ssh", "-F", config, "-tt", "-o", "BatchMode=yes", alias, str(remote_bin / "nvitop")],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for alias in hosts.aliases
            ]
            try:
                time.sleep(settle_s)
                nvitops = len(remote())
                theirs = window_cpu(lambda: [p.pid for p in peers] + remote(), window_s)
            finally:
                for proc in peers:
                    proc.kill()
                for proc in peers:
                    proc.wait()
        finally:
            hosts.close()
    if theirs <= 0:
        report.na(sec, label, f"nvitop's side used no CPU (gputui's {ours:.2f} s)", target=target)
    else:
        value = ours / theirs
        report.add(
            sec,
            label,
            value,
            "x CPU",
            compare=f"gputui {100 * ours / window_s:.1f} %, nvitop {100 * theirs / window_s:.1f} % of a core "
            f"(clients + remote commands); {window_s:.0f} s; {collectors} and {nvitops} remote processes; "
            f"TUI RSS {rss or 0:.0f} MiB",
            target=target,
            verdict=verdict(value <= TARGET_SSH_CPU),
        )
    key_row(report, sec, f"  a key in the TUI watching {SSH_HOSTS} SSH hosts", times, 5 if args.quick else 15)
    report.note(
        sec, f"{SSH_HOSTS} SSH hosts: {hosts.source}; remote python3 a bare python, nvitop from the peers"
    )


# --- 500 hosts in Prometheus -------------------------------------------------------------------------------

_REFRESH = r"""
import json, os, sys, time
def mib(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
from gputui.core.fleet import analyze_fleet, summarize
from gputui.core.verdict import Baselines
from gputui.transports.prometheus import FleetSettings, PrometheusSource
source = PrometheusSource(FleetSettings(url=sys.argv[1]))
before = mib("VmRSS")
out = []
for _ in range(int(sys.argv[2])):
    cpu, wall = time.process_time(), time.perf_counter()
    sample = analyze_fleet(source.sample(), Baselines())
    rows = [summarize(h, 0.0, 90.0) for h in sample.hosts]
    out.append({"cpu_ms": 1000 * (time.process_time() - cpu), "wall_ms": 1000 * (time.perf_counter() - wall),
                "hosts": len(sample.hosts), "rss": mib("VmRSS"), "hwm": mib("VmHWM")})
print(json.dumps({"before": before, "refreshes": out}))
"""


def fleet_rows(args: argparse.Namespace, bin_dir: Path, report: Report, sec: int) -> None:
    import json

    from tests.integration.prometheus import Fleet, PrometheusServer

    label = f"fleet {FLEET_HOSTS} hosts x 8 GPUs, real Prometheus: one refresh"
    with tempfile.TemporaryDirectory(prefix="gputui-bench-fleet500-") as tmp_name:
        fleet = Fleet(Path(tmp_name))
        try:
            exporters = fleet.exporter([{"name": f"gpu-{i:03d}", "gpus": 8} for i in range(FLEET_HOSTS)])
            for i in range(0, FLEET_HOSTS, 3):
                exporters.set(f"gpu-{i:03d}", 3, used=40000 + i, util=90)
            jobs = {"dcgm": [(exporters.address(f"gpu-{i:03d}"), {}) for i in range(FLEET_HOSTS)]}
            server = PrometheusServer(Path(tmp_name) / "prometheus", jobs, scrape_interval=FLEET_SCRAPE)
            fleet.servers.append(server)
            server.start()
            server.wait_until(
                lambda: len(server.query("DCGM_FI_DEV_FB_USED")) >= FLEET_HOSTS * 8,
                "every GPU",
                timeout_s=300,
            )
            env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
            done = subprocess.run(
                [sys.executable, "-c", _REFRESH, server.url, "3" if args.quick else "7"],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            try:
                result = json.loads(done.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                report.na(sec, label, f"refresh worker failed: {done.stderr.strip()[-200:]}")
                result = None
            if result is not None:
                refreshes = result["refreshes"]
                cpus = [r["cpu_ms"] for r in refreshes]
                report.add(
                    sec,
                    label,
                    statistics.median(cpus),
                    "CPU ms/refresh",
                    compare=f"first {cpus[0]:.0f}, {spread(cpus, '.0f')}; wall "
                    f"{statistics.median(r['wall_ms'] for r in refreshes):.0f} ms; {refreshes[0]['hosts']} hosts",
                    target="measured",
                )
                report.add(
                    sec,
                    "  RSS of the refreshing process",
                    refreshes[-1]["rss"],
                    "MiB",
                    compare=f"before the first {result['before']:.0f} MiB, peak {refreshes[-1]['hwm']:.0f} MiB",
                    target="measured",
                )
            tmux = Tmux()
            try:
                tui = tmux.run(
                    [str(bin_dir / "gputui"), "--prometheus", server.url],
                    dict(_user_env(tmp_name), PATH=env["PATH"]),
                )
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and "gpu-" not in tmux.screen():
                    time.sleep(0.5)
                time.sleep(5)
                cpu0, started = proc_cpu_s(tui), time.monotonic()
                presses = 10 if args.quick else 40
                times = key_latencies(tmux, presses, 0.37)
                cpu1, took = proc_cpu_s(tui), time.monotonic() - started
                rss = proc_rss_mib(tui)
            finally:
                tmux.close()
            key_row(
                report,
                sec,
                f"  a key in the fleet view ({FLEET_HOSTS} hosts, refreshing every 5 s)",
                times,
                presses,
            )
            if cpu0 is not None and cpu1 is not None:
                report.add(
                    sec,
                    "  the fleet view's CPU while keys are pressed",
                    100 * (cpu1 - cpu0) / took,
                    "% of a core",
                    compare=f"over {took:.0f} s; RSS {rss or 0:.0f} MiB",
                    target="measured",
                )
        finally:
            fleet.close()
    report.note(
        sec, f"fleet: stand-in DCGM exporter (tests/integration), Prometheus scraping every {FLEET_SCRAPE}"
    )


def _user_env(tmp_name: str) -> dict[str, str]:
    home = Path(tmp_name) / "home"
    home.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_STATE_HOME": str(home / "state"),
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
    }
