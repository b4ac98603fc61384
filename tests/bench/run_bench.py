"""gputui's overhead budget, measured against the tools people use today.

Run from the repository root::

    .venv/bin/python tests/bench/run_bench.py [--quick] [--section N ...] [--no-peers] [--json FILE]
        [--overhead PART ...] [--soak-minutes M]

Sections (each prints "n/a (reason)" when the piece it measures is not there; no figure is ever made up):

1. collector CPU per full and per memory-only sample of ``gputui.agent.collector.Agent`` on a fake 8-GPU host with
   ~300 real processes, against ``gpustat --json``, nvitop's API and a bare pynvml loop; spawn count; process
   list cadence at rest and while draining.
2. remote cost: bytes per sample and agent CPU per sample of the JSON-lines stream (over SSH through a
   byte-counting loopback proxy when the SSH transport and its sshd fixture exist, else over a pipe).
3. fan-out: time to the first complete frame, steady-state CPU and RSS of the client with 1/8/32/64 hosts.
4. drain latency: last holder killed -> clean-slate verdict, in ``gputui check --wait``.
5. render cost: one update of 8 hosts x 8 GPUs x 200 processes applied to the app's widgets.
6. fleet view on Prometheus: client CPU and render per refresh at 500 hosts x 8 GPUs (recorded JSON), and the
   whole loop against a real Prometheus scraping 50 exporters (``fleet_bench.py``).
7. inference server metrics: the collector's probe + filter of a ~50 KB ``/metrics`` body, the bytes per
   sample on the wire, the client's parse (``metrics_bench.py``).
8. the overhead targets as whole processes beside their peers: ``snapshot --json`` against ``nvitop -1`` and
   the floor at ~400 and ~3,000 pids, the remote one-shot against ``ssh HOST nvitop -1``, collector start,
   both TUIs in tmux, a soak (``overhead_bench.py``).
9. as users run it (``users_bench.py``): a fresh non-editable install at its defaults, holders that are
   children of the calling process, idle processes in sessions of their own, NVML calls counted in the
   library; both TUIs side by side, the one-shots, the clean slate seen after the last GPU drains.

Every figure is a median over repeated runs. The peers (gpustat 1.1.1, nvitop 1.7.2) are installed into a
throwaway virtualenv under ``~/.cache/gputui-bench/peers-venv``; they are not project dependencies. The
machine is shared: figures are CPU time, not wall time, wherever the question is "what does it cost".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.bench.procs import DetachedGroup  # noqa: E402

WORKER = Path(__file__).with_name("bench_worker.py")
CACHE_DIR = Path(os.environ.get("GPUTUI_BENCH_CACHE") or Path.home() / ".cache" / "gputui-bench")
PEERS_VENV = CACHE_DIR / "peers-venv"
PEER_PACKAGES = ("gpustat==1.1.1", "nvitop==1.7.2")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024

# Targets (the benchmark prints PASS/FAIL against them; the test suite never times anything).
TARGET_VS_NVITOP = 1 / 3
TARGET_VS_GPUSTAT = 1 / 10
TARGET_MEMORY_VS_FULL = 1 / 10
TARGET_DRAIN_MS = 250.0
TARGET_FIRST_FRAME_S = 3.0
TARGET_STAND_IN_FIRST_FRAME_S = 2.0
"""64 hosts, each collector replaced by a stand-in: what the client and sshd cost to the first full frame."""
TARGET_CLIENT_CPU_PCT = 8.0
TARGET_CLIENT_RSS_MIB = 150.0


# --- results ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table: a figure (or None for n/a), its comparison and its verdict."""

    section: int
    metric: str
    value: float | None
    unit: str
    compare: str = ""
    target: str = ""
    verdict: str = ""
    reason: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: dict[int, list[str]] = field(default_factory=dict)

    def add(
        self,
        section: int,
        metric: str,
        value: float | None,
        unit: str,
        compare: str = "",
        target: str = "",
        verdict: str = "",
        reason: str = "",
    ) -> Row:
        if value is None and not verdict:
            verdict = "n/a"
        row = Row(section, metric, value, unit, compare, target, verdict, reason)
        self.rows.append(row)
        return row

    def na(self, section: int, metric: str, reason: str, target: str = "") -> Row:
        return self.add(section, metric, None, "", target=target, verdict="n/a", reason=reason)

    def note(self, section: int, text: str) -> None:
        self.notes.setdefault(section, []).append(text)
        print(f"  [{section}] {text}", file=sys.stderr, flush=True)


def fmt_value(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    if abs(value) >= 0.1:
        return f"{value:.3f}"
    return f"{value:.3g}"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def render_table(report: Report) -> str:
    header = ("sec", "metric", "median", "unit", "compared with", "target", "result")
    lines = []
    for row in report.rows:
        result = row.verdict + (f" ({row.reason})" if row.value is None and row.reason else "")
        lines.append(
            (str(row.section), row.metric, fmt_value(row.value), row.unit, row.compare, row.target, result)
        )
    widths = [
        max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)
    ]
    # The last column carries n/a reasons; it is not padded.
    out = ["  ".join(h.ljust(w) for h, w in zip(header[:-1], widths[:-1], strict=True)) + "  " + header[-1]]
    out.append("-" * (sum(widths[:-1]) + 2 * (len(widths) - 1) + len(header[-1])))
    for line in lines:
        out.append(
            "  ".join(c.ljust(w) for c, w in zip(line[:-1], widths[:-1], strict=True)) + "  " + line[-1]
        )
    for section in sorted(report.notes):
        for text in report.notes[section]:
            out.append(f"  [{section}] {text}")
    return "\n".join(out)


def median(values: list[float]) -> float:
    return statistics.median(values)


# --- the environment: fake NVML, a realistic process table ----------------------------------------------


def have_module(name: str) -> bool:
    """Whether gputui module or package ``name`` (e.g. "gputui.agent") exists in this tree (not imported)."""
    path = REPO_ROOT / name.replace(".", "/")
    return path.with_name(path.name + ".py").is_file() or (path / "__init__.py").is_file()


@dataclass
class FakeHost:
    """A fake 8-GPU host: the fake NVML library, its state file, ~300 idle processes and GPU holders.

    The idle processes and the holders belong to separate detached "servers" (see ``procs.py``), so the
    holders' process tree is a server and its workers, as on a real inference host, not the whole table.
    """

    lib_dir: Path
    state_path: Path
    groups: list[DetachedGroup] = field(default_factory=list)
    idle_pids: list[int] = field(default_factory=list)
    holder_pids: list[int] = field(default_factory=list)
    gpu_count: int = 8

    def env(self) -> dict[str, str]:
        from tests.fakenvml import env_for

        env = env_for(self.lib_dir, self.state_path)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def write_state(self, holder_pids: list[int], mib_each: int = 20000) -> None:
        """Idle GPUs plus one holder per pid, pid i on GPU i % 8 (and a second GPU for even i)."""
        from tests.fakenvml import FakeNvmlState

        state = FakeNvmlState.with_gpus(self.gpu_count)
        for i, pid in enumerate(holder_pids):
            state.add_holder(i % self.gpu_count, pid, mib_each)
            if i % 2 == 0:
                state.add_holder((i + 1) % self.gpu_count, pid, mib_each // 4)
        state.write(self.state_path)

    def spawn_holder(self) -> tuple[DetachedGroup, int]:
        """A new one-worker server; returns it and the worker's pid (kill it with ``group.kill(pid)``)."""
        group = DetachedGroup(1)
        self.groups.append(group)
        return group, group.pids[0]

    def close(self) -> None:
        for group in self.groups:
            group.close()


@contextlib.contextmanager
def fake_host(process_count: int, holder_count: int) -> Iterator[FakeHost]:
    """Build the fake NVML, start ``process_count`` idle processes and ``holder_count`` GPU holders."""
    from tests.fakenvml import build

    lib_dir = CACHE_DIR / "fakenvml-lib"
    build(lib_dir)
    with tempfile.TemporaryDirectory(prefix="gputui-bench-") as tmp:
        host = FakeHost(lib_dir=lib_dir, state_path=Path(tmp) / "fakenvml.state")
        try:
            if process_count:
                idle = DetachedGroup(process_count)
                host.groups.append(idle)
                host.idle_pids = idle.pids
            if holder_count:
                server = DetachedGroup(holder_count)
                host.groups.append(server)
                host.holder_pids = server.pids
            host.write_state(host.holder_pids)
            yield host
        finally:
            host.close()


def run_worker(
    host: FakeHost, kind: str, *extra: str, python: str | None = None, timeout_s: float = 300
) -> dict:
    """Run one worker in a fresh process under the fake NVML; its JSON result (or {"error": ...})."""
    cmd = [python or sys.executable, str(WORKER), kind, *extra]
    try:
        proc = subprocess.run(
            cmd, env=host.env(), capture_output=True, text=True, timeout=timeout_s, check=False, cwd=REPO_ROOT
        )
    except subprocess.TimeoutExpired:
        return {"error": f"worker {kind} timed out after {timeout_s:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"worker {kind} exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def repeat_worker(
    host: FakeHost, kind: str, repeats: int, *extra: str, python: str | None = None
) -> tuple[list[dict], str | None]:
    results = []
    for _ in range(repeats):
        result = run_worker(host, kind, *extra, python=python)
        if "error" in result:
            return results, result["error"]
        results.append(result)
    return results, None


def ensure_peers_venv(report: Report, section: int) -> str | None:
    """The peers' python (gpustat + nvitop in a throwaway venv), creating it on first use; None on failure."""
    python = PEERS_VENV / "bin" / "python"
    probe = "import gpustat, nvitop; assert gpustat.__version__ == '1.1.1' and nvitop.__version__ == '1.7.2'"
    if python.exists() and subprocess.run([python, "-c", probe], capture_output=True).returncode == 0:
        return str(python)
    report.note(section, f"creating the peers virtualenv {PEERS_VENV} ({' '.join(PEER_PACKAGES)})")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", str(PEERS_VENV)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        report.note(section, f"peers virtualenv failed: {exc} {detail.decode(errors='replace')[-300:]}")
        return None
    return str(python)


# --- /proc readings --------------------------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid`` itself (not its children), seconds; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mib(pid: int, key: str = "VmRSS") -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


# --- section 1: collector cost --------------------------------------------------------------------------


def section_collector(args: argparse.Namespace, report: Report) -> None:
    sec = 1
    repeats = 3 if args.quick else 5
    samples = 20 if args.quick else 50
    with fake_host(args.processes, args.holders) as host:
        report.note(
            sec,
            f"fake NVML: {host.gpu_count} GPUs, {len(host.idle_pids)} idle `sleep` processes under "
            f"one server, {len(host.holder_pids)} GPU holders under another; process table now "
            f"{sum(1 for p in Path('/proc').iterdir() if p.name.isdigit())} pids",
        )
        peers: dict[str, float] = {}

        floor, error = repeat_worker(host, "pynvml", repeats, "--samples", str(samples))
        if error:
            report.na(sec, "pynvml floor: memory+process lists x8", error)
        else:
            peers["pynvml"] = median([r["full"]["cpu_ms"] for r in floor])
            report.add(
                sec,
                "pynvml floor: memory+process lists x8",
                peers["pynvml"],
                "CPU ms/sample",
                compare="floor (bare NVML calls)",
            )
            report.add(
                sec,
                "pynvml floor: memory info x8",
                median([r["memory"]["cpu_ms"] for r in floor]),
                "CPU ms/sample",
                compare="floor",
            )

        peer_python = None if args.no_peers else ensure_peers_venv(report, sec)
        if args.no_peers:
            report.na(sec, "nvitop 1.7.2 API snapshot", "--no-peers")
            report.na(sec, "gpustat 1.1.1 --json one-shot", "--no-peers")
        elif peer_python is None:
            report.na(sec, "nvitop 1.7.2 API snapshot", "peers virtualenv could not be created")
            report.na(sec, "gpustat 1.1.1 --json one-shot", "peers virtualenv could not be created")
        else:
            nvitop, error = repeat_worker(
                host, "nvitop", repeats, "--samples", str(samples), python=peer_python
            )
            if error:
                report.na(sec, "nvitop 1.7.2 API snapshot", error)
            else:
                peers["nvitop"] = median([r["full"]["cpu_ms"] for r in nvitop])
                report.add(
                    sec,
                    "nvitop 1.7.2 API snapshot",
                    peers["nvitop"],
                    "CPU ms/sample",
                    compare=f"{nvitop[0]['gpu_processes']} GPU procs seen",
                )
                missing = sorted({m for r in nvitop for m in r.get("missing_symbols", [])})
                if missing:
                    report.note(
                        sec,
                        "nvitop asked the fake NVML for missing symbol(s): "
                        + ", ".join(missing)
                        + " (nvitop treats them as N/A; figures kept)",
                    )
            gpustat_runs = 3 if args.quick else 5
            gpustat, error = repeat_worker(
                host, "gpustat", 1, "--samples", str(gpustat_runs), python=peer_python
            )
            if error:
                report.na(sec, "gpustat 1.1.1 --json one-shot", error)
            else:
                peers["gpustat"] = gpustat[0]["full"]["cpu_ms"]
                report.add(
                    sec,
                    "gpustat 1.1.1 --json one-shot",
                    peers["gpustat"],
                    "CPU ms/run",
                    compare=f"wall {gpustat[0]['full']['wall_ms']:.0f} ms (sleeps 0.1 s/GPU)",
                )
                once = run_worker(host, "gpustat_once", python=peer_python)
                if once.get("missing_symbols"):
                    report.note(
                        sec,
                        "gpustat asked the fake NVML for missing symbol(s): "
                        + ", ".join(once["missing_symbols"]),
                    )
                elif "error" in once:
                    report.note(sec, f"gpustat symbol probe failed: {once['error']}")

        if not have_module("gputui.agent"):
            for metric in (
                "gputui agent: full sample",
                "gputui agent: memory-only sample",
                "gputui agent: processes spawned",
            ):
                report.na(sec, metric, "gputui.agent not in the tree yet")
            report.na(sec, "process-list cadence", "gputui.agent not in the tree yet")
            return
        agent, error = repeat_worker(host, "agent", repeats, "--samples", str(samples))
        if error:
            for metric in ("gputui agent: full sample", "gputui agent: memory-only sample"):
                report.na(sec, metric, error)
        else:
            full_ms = median([r["full"]["cpu_ms"] for r in agent])
            mem_ms = median([r["memory"]["cpu_ms"] for r in agent])
            first = agent[0]
            report.note(
                sec,
                f"agent mode={first['mode']}, {first['gpus']} GPUs, "
                f"{first['gpu_processes']} GPU process entries, {first['processes_listed']} "
                f"processes in the snapshot",
            )
            comparisons, oks = [], []
            if "nvitop" in peers:
                ratio = full_ms / peers["nvitop"]
                comparisons.append(f"{ratio:.2f}x nvitop")
                oks.append(ratio <= TARGET_VS_NVITOP)
            if "gpustat" in peers:
                ratio = full_ms / peers["gpustat"]
                comparisons.append(f"{ratio:.3f}x gpustat")
                oks.append(ratio <= TARGET_VS_GPUSTAT)
            if "pynvml" in peers:
                comparisons.append(f"{full_ms / peers['pynvml']:.0f}x floor")
            report.add(
                sec,
                "gputui agent: full sample",
                full_ms,
                "CPU ms/sample",
                compare=", ".join(comparisons),
                target="<=1/3 nvitop, <=1/10 gpustat",
                verdict=verdict(all(oks) if oks else None),
                reason="" if oks else "no peer measured",
            )
            mem_ratio = mem_ms / full_ms
            refreshed = any(r["memory_only_refreshed_processes"] for r in agent)
            report.add(
                sec,
                "gputui agent: memory-only sample",
                mem_ms,
                "CPU ms/sample",
                compare=f"{mem_ratio:.3f}x full",
                target="<=1/10 of full",
                verdict="FAIL" if refreshed else verdict(mem_ratio <= TARGET_MEMORY_VS_FULL),
            )
            if all(r.get("memory_telemetry") for r in agent):
                tel_ms = median([r["memory_telemetry"]["cpu_ms"] for r in agent])
                report.add(
                    sec,
                    "  memory + telemetry sample (each 1 s one)",
                    tel_ms,
                    "CPU ms/sample",
                    compare=f"{tel_ms / full_ms:.3f}x full; util/temp/power read too",
                )
            if all(r.get("interval_process") for r in agent):
                every = first.get("full_sweep_every")
                report.add(
                    sec,
                    "  process sample on the agent's schedule",
                    median([r["interval_process"]["cpu_ms"] for r in agent]),
                    "CPU ms/sample",
                    compare=f"a whole-host sweep every {every}, GPU trees between",
                )
            if refreshed:
                report.note(
                    sec,
                    "memory-only loop refreshed the process list (processes_time changed): "
                    "the agent does not keep process lists apart from memory samples",
                )
            spawns = [e for r in agent for e in r["spawn_events"]]
            children_cpu = sum(r["children_cpu_s"] for r in agent)
            ok = not spawns and children_cpu == 0
            report.add(
                sec,
                "gputui agent: processes spawned",
                float(len(spawns)),
                "over all samples",
                compare=f"children CPU {children_cpu * 1000:.0f} ms",
                target="0",
                verdict=verdict(ok),
            )
            if spawns:
                report.note(sec, f"spawn audit events during sampling: {sorted(set(spawns))}")
            strace_check(host, report, sec)
        cadence_check(args, host, report, sec)


def strace_check(host: FakeHost, report: Report, sec: int) -> None:
    """Cross-check 'no process spawned per poll' at the syscall level: fork/vfork/non-thread clones."""
    strace = shutil.which("strace")
    if not strace:
        report.note(
            sec, "strace not installed: spawn check relies on Python audit events and RUSAGE_CHILDREN"
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "strace.log"
        cmd = [
            strace,
            "-f",
            "-qq",
            "-o",
            str(log),
            "-e",
            "trace=fork,vfork,clone,clone3",
            sys.executable,
            str(WORKER),
            "agent",
            "--samples",
            "10",
        ]
        proc = subprocess.run(cmd, env=host.env(), capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0 or not log.exists():
            report.note(sec, f"strace cross-check could not run: {proc.stderr.strip()[-200:]}")
            return
        calls = [line for line in log.read_text().splitlines() if "(" in line and "resumed" not in line]
        threads = [c for c in calls if "CLONE_THREAD" in c]
        spawns = [c for c in calls if c not in threads]
        report.note(
            sec,
            f"strace cross-check (whole worker: imports, NVML init, 13 full + 43 memory-only samples): {len(spawns)} "
            f"process-creating syscalls, {len(threads)} thread clones",
        )


def cadence_check(args: argparse.Namespace, host: FakeHost, report: Report, sec: int) -> None:
    """Process lists sampled less often than memory by default, and faster while memory drains."""
    group, holder_pid = host.spawn_holder()
    host.write_state([holder_pid] + host.holder_pids[: args.holders - 1])
    memory_interval, process_interval = 0.2, 1.0
    duration = 6.0 if args.quick else 12.0
    drain_at = duration / 2
    # The idle holders keep memory non-zero after the kill: draining, not drained.
    result = run_worker(
        host,
        "cadence",
        "--duration",
        str(duration),
        "--memory-interval",
        str(memory_interval),
        "--process-interval",
        str(process_interval),
        "--drain-at",
        str(drain_at),
        "--holder-pid",
        str(holder_pid),
    )
    group.close()
    host.write_state(host.holder_pids)
    if "error" in result:
        report.na(sec, "process-list cadence", result["error"])
        return
    default_mem, default_proc = result["default_memory_interval_s"], result["default_process_interval_s"]
    report.add(
        sec,
        "default process/memory interval",
        default_proc / default_mem,
        "ratio",
        compare=f"{default_proc:g} s / {default_mem:g} s",
        target=">1",
        verdict=verdict(default_proc > default_mem),
    )
    killed_at = result["killed_at"]
    before, after = [], []
    last_time = None
    for t, processes_time, _used in result["records"]:
        if processes_time is not None and processes_time != last_time:
            (before if killed_at is None or t < killed_at else after).append(processes_time)
            last_time = processes_time

    def gaps(times: list[float]) -> list[float]:
        return [b - a for a, b in zip(times, times[1:], strict=False)]

    rest_gap = median(gaps(before)) if len(before) > 2 else None
    drain_gap = median(gaps(after)) if len(after) > 2 else None
    samples = len(result["records"])
    report.add(
        sec,
        "process list refresh at rest",
        rest_gap,
        "s between lists",
        compare=f"memory every {memory_interval} s ({samples} samples)",
        target=f"> {memory_interval} s",
        verdict=verdict(None if rest_gap is None else rest_gap > memory_interval * 1.5),
    )
    report.add(
        sec,
        "process list refresh while draining",
        drain_gap,
        "s between lists",
        compare=f"vs {fmt_value(rest_gap)} s at rest (agent alone, configured {process_interval} s)",
        target="< rest",
        verdict=verdict(None if drain_gap is None or rest_gap is None else drain_gap < rest_gap * 0.75),
        reason="fewer than 3 lists after the kill",
    )
    report.note(
        sec,
        "cadence: agent sampled on its own, memory 0.2 s / processes 1.0 s configured; a holder "
        "killed mid-run makes memory drain. Faster lists while draining may instead come from "
        "the client's configure command (check --wait): see section 4.",
    )


# --- section 2: remote cost ----------------------------------------------------------------------------


def agent_stream_command() -> tuple[list[str], bytes]:
    """The remote command line SSH runs (python3 -u -c <loader>) and the bundle its stdin gets first."""
    from gputui.transports.ssh.bundle import bundle_for, loader

    payload = bundle_for()
    return [sys.executable, "-u", "-c", loader(payload)], payload.data


def section_remote(args: argparse.Namespace, report: Report) -> None:
    sec = 2
    if not have_module("gputui.agent"):
        report.na(sec, "stream bytes per sample", "gputui.agent not in the tree yet")
        report.na(sec, "remote agent CPU per sample", "gputui.agent not in the tree yet")
        return
    duration = 8.0 if args.quick else 30.0
    with fake_host(args.processes, args.holders) as host:
        pipe_stream(args, host, report, sec, duration)
        collector_start(args, host, report, sec)
    ssh_stream(args, report, sec, duration)


def bare_python(report: Report, sec: int) -> str | None:
    """This python's base interpreter in a venv of its own: no pynvml, no psutil (made once, kept)."""
    python = CACHE_DIR / "bare-venv" / "bin" / "python3"
    if not python.exists():
        base = getattr(sys, "_base_executable", None) or sys.executable
        try:
            subprocess.run(
                [base, "-m", "venv", "--without-pip", str(python.parents[1])],
                check=True,
                capture_output=True,
                timeout=300,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            report.note(sec, f"bare virtualenv failed: {exc}")
            return None
    return str(python)


def collector_start(args: argparse.Namespace, host: FakeHost, report: Report, sec: int) -> None:
    """CPU of one collector through its first snapshot (and quit), as the SSH transport starts it, minus SSH.

    With this python's bytecode accepted (same magic number) and with the sources compiled remotely (a remote
    python of another version); each with this python (its own pynvml and psutil) and with a python that has
    neither (the shipped pynvml then). 64 of these start at once when gputui opens a 64-host fleet.
    """
    from gputui.core.model import replace
    from gputui.transports.ssh.bundle import bundle_for, loader

    payload = bundle_for()
    other = replace(payload, magic_hex="00000000")
    runs = 5 if args.quick else 15
    bare = bare_python(report, sec)
    pythons = [("", sys.executable)] + ([(", no pynvml installed", bare)] if bare else [])
    for suffix, python in pythons:
        for label, chosen in (("bytecode shipped", payload), ("source compiled there", other)):
            cpu_ms: list[float] = []
            for _ in range(runs):
                proc = subprocess.Popen(
                    [python, "-u", "-c", loader(chosen), "--read-only"],
                    env=host.env(),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
                assert proc.stdin is not None
                assert proc.stdout is not None
                proc.stdin.write(chosen.data)
                proc.stdin.flush()
                lines = [proc.stdout.readline(), proc.stdout.readline()]
                proc.stdin.write(b'{"id":1,"cmd":"quit"}\n')
                proc.stdin.close()
                _pid, _status, usage = os.wait4(proc.pid, 0)  # this child's own CPU, threads included
                proc.returncode = 0
                cpu_ms.append((usage.ru_utime + usage.ru_stime) * 1000)
                if b'"snapshot"' not in lines[1]:
                    report.na(sec, f"collector start, {label}{suffix}", "no first snapshot")
                    break
            else:
                report.add(
                    sec,
                    f"collector start, {label}{suffix}",
                    median(cpu_ms),
                    "CPU ms",
                    compare=f"exec, hello, first snapshot, quit; {runs} starts; payload {len(chosen.data)} B",
                )


def pipe_stream(args: argparse.Namespace, host: FakeHost, report: Report, sec: int, duration: float) -> None:
    """The agent's JSON-lines stream over a pipe: the same bytes SSH carries inside its channel."""
    interval, process_interval = 0.25, 0.75
    loader, payload = agent_stream_command()
    cmd = loader + [
        "--target",
        "bench",
        "--read-only",
        "--no-discover",
        "--interval",
        str(interval),
        "--process-interval",
        str(process_interval),
    ]
    proc = subprocess.Popen(
        cmd, env=host.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin
    assert proc.stdout
    proc.stdin.write(payload)
    proc.stdin.flush()
    sizes: dict[str, list[int]] = {}
    with_processes: list[int] = []
    memory_only: list[int] = []
    memory_only_slim: list[int] = []
    last_processes_time = None
    cpu_start = None
    snapshots_counted = 0
    deadline = time.monotonic() + duration + 10
    start = None
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            kind = msg.get("t", "?")
            sizes.setdefault(kind, []).append(len(line))
            if kind != "snapshot":
                continue
            if start is None:
                # The first snapshot carries start-up cost (imports, NVML init): count from here.
                start, cpu_start = time.monotonic(), proc_cpu_s(proc.pid)
                last_processes_time = msg["snapshot"].get("processes_time")
                continue
            snapshots_counted += 1
            processes_time = msg["snapshot"].get("processes_time")
            fresh = processes_time != last_processes_time
            (with_processes if fresh else memory_only).append(len(line))
            if not fresh:
                # What this line would weigh if an unchanged process list were not re-sent.
                slim = dict(
                    msg,
                    snapshot=dict(
                        msg["snapshot"],
                        processes=[],
                        gpus=[dict(g, processes=[]) for g in msg["snapshot"]["gpus"]],
                    ),
                )
                memory_only_slim.append(len(json.dumps(slim, ensure_ascii=False).encode()) + 1)
            last_processes_time = processes_time
            if time.monotonic() - start >= duration:
                break
        cpu_end = proc_cpu_s(proc.pid)
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.write(b'{"id":99,"cmd":"quit"}\n')
            proc.stdin.flush()
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if not snapshots_counted or cpu_start is None or cpu_end is None:
        err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
        report.na(sec, "stream bytes per sample (pipe)", (err or ["no snapshot lines"])[-1][:200])
        return
    all_sizes = sizes["snapshot"][1:]
    report.add(
        sec,
        "stream bytes per sample (pipe)",
        median(all_sizes),
        "bytes/sample",
        compare=f"mean {statistics.mean(all_sizes):.0f}, {snapshots_counted} samples",
    )
    if with_processes:
        report.add(sec, "  sample with a fresh process list", median(with_processes), "bytes")
    if memory_only:
        report.add(
            sec,
            "  memory-only sample",
            median(memory_only),
            "bytes",
            compare=f"{median(memory_only_slim):.0f} B without the unchanged process lists",
        )
    report.add(
        sec,
        "stream bytes per second (pipe)",
        sum(all_sizes) / duration,
        "B/s",
        compare=f"at {interval} s memory / {process_interval} s processes",
    )
    report.add(
        sec,
        "agent CPU per sample (pipe, remote side)",
        (cpu_end - cpu_start) * 1000 / snapshots_counted,
        "CPU ms/sample",
        compare=f"{(cpu_end - cpu_start) / duration * 100:.1f}% of a core at {interval} s",
    )
    report.note(
        sec,
        f"pipe: `python3 -u -c <loader>` as SSH runs it, payload on stdin, {len(payload)} bytes "
        f"shipped once (source and bytecode, compressed); hello {sizes.get('hello', [0])[0]} bytes; {args.processes} idle procs",
    )


def ssh_stream(args: argparse.Namespace, report: Report, sec: int, duration: float) -> None:
    if not have_module("gputui.transports.ssh"):
        report.na(sec, "bytes per sample over SSH", "gputui/transports/ssh/ not in the tree yet")
        return
    if not (REPO_ROOT / "tests" / "integration" / "sshd.py").is_file():
        report.na(sec, "bytes per sample over SSH", "tests/integration/sshd.py fixture not in the tree yet")
        return
    try:
        from tests.bench import ssh_bench
    except Exception as exc:
        report.na(sec, "bytes per sample over SSH", f"{type(exc).__name__}: {exc}")
        return
    ssh_bench.measure_ssh_stream(args, report, sec, duration)


# --- section 3: fan-out --------------------------------------------------------------------------------


def section_fanout(args: argparse.Namespace, report: Report) -> None:
    sec = 3
    if not have_module("gputui.agent"):
        report.na(sec, "fan-out", "gputui.agent not in the tree yet")
        return
    try:
        from tests.bench import fanout
    except Exception as exc:
        report.na(sec, "fan-out", f"{type(exc).__name__}: {exc}")
        return
    fanout.run(args, report, sec)


# --- section 4: drain latency --------------------------------------------------------------------------


def section_drain(args: argparse.Namespace, report: Report) -> None:
    sec = 4
    if not have_module("gputui.commands.check"):
        report.na(
            sec,
            "drain latency, check --wait",
            "gputui/commands/check.py not in the tree yet",
            target=f"<= {TARGET_DRAIN_MS:.0f} ms",
        )
    else:
        drain_check_wait(args, report, sec)
    if not have_module("gputui.ui.app"):
        report.na(
            sec,
            "drain latency, TUI",
            "gputui/ui/app.py not in the tree yet",
            target=f"<= {TARGET_DRAIN_MS:.0f} ms",
        )
    else:
        try:
            from tests.bench import app_bench
        except Exception as exc:
            report.na(sec, "drain latency, TUI", f"{type(exc).__name__}: {exc}")
            return
        app_bench.drain_tui(args, report, sec)


def drain_check_wait(args: argparse.Namespace, report: Report, sec: int) -> None:
    """Kill the last holder while ``check --wait`` waits; time until it prints its verdict line."""
    repeats = 7 if args.quick else 21
    label = "drain latency, check --wait"
    latencies_print: list[float] = []
    latencies_exit: list[float] = []
    clean_after: list[str] = []
    failure = None
    with fake_host(args.processes, 0) as host:
        for _ in range(repeats):
            group, holder_pid = host.spawn_holder()
            host.write_state([holder_pid])
            env = host.env()
            env["PYTHONUNBUFFERED"] = "1"  # what a terminal sees: each line as it is printed
            cmd = [sys.executable, "-m", "gputui.cli", "check", "--wait", "20", "local"]
            check = subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO_ROOT
            )
            assert check.stdout
            lines: list[tuple[float, str]] = []

            def read(stream=check.stdout, sink=lines) -> None:  # noqa: B008
                for raw in stream:
                    sink.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            # Let it start, see the holder and settle into its wait loop before the holder dies.
            time.sleep(2.0)
            if check.poll() is not None:
                reader.join(2)
                failure = f"check exited {check.returncode} before the kill: " + (
                    lines[-1][1] if lines else "no output"
                )
                group.close()
                break
            seen_before = len(lines)
            # The server reaps at once: the fake driver frees memory when /proc/<pid> is gone.
            killed_at = group.kill(holder_pid)
            try:
                check.wait(timeout=25)
            except subprocess.TimeoutExpired:
                check.kill()
                check.wait()
                failure = "check --wait did not finish within 25 s"
                break
            exited_at = time.monotonic()
            reader.join(5)
            after = [(t, text) for t, text in lines[seen_before:]]
            clean_lines = [(t, text) for t, text in after if "clean" in text.lower()]
            if check.returncode != 0:
                failure = f"check exited {check.returncode}: " + (lines[-1][1] if lines else "no output")
                break
            first = (clean_lines or after or [(exited_at, "")])[0]
            latencies_print.append((first[0] - killed_at) * 1000)
            latencies_exit.append((exited_at - killed_at) * 1000)
            clean_after.extend(text for _, text in clean_lines[:1])
    target = f"<= {TARGET_DRAIN_MS:.0f} ms"
    if failure or not latencies_print:
        report.na(sec, label, failure or "no run completed", target=target)
        return
    value = median(latencies_print)
    report.add(
        sec,
        label,
        value,
        "ms kill->verdict line",
        compare=f"min {min(latencies_print):.0f} max {max(latencies_print):.0f}, n={len(latencies_print)}",
        target=target,
        verdict=verdict(value <= TARGET_DRAIN_MS),
    )
    report.add(sec, "  kill -> check exits", median(latencies_exit), "ms")
    if clean_after:
        report.note(sec, f"check --wait printed: {clean_after[0]!r}")


# --- section 5: render ---------------------------------------------------------------------------------


def section_render(args: argparse.Namespace, report: Report) -> None:
    sec = 5
    if not have_module("gputui.ui.app"):
        report.na(sec, "render 8 hosts x 8 GPUs x 200 procs", "gputui/ui/app.py not in the tree yet")
        return
    try:
        from tests.bench import app_bench
    except Exception as exc:
        report.na(sec, "render 8 hosts x 8 GPUs x 200 procs", f"{type(exc).__name__}: {exc}")
        return
    app_bench.render(args, report, sec)


def section_fleet(args: argparse.Namespace, report: Report) -> None:
    from tests.bench import fleet_bench

    fleet_bench.run(args, report, 6)


def section_metrics(args: argparse.Namespace, report: Report) -> None:
    from tests.bench import metrics_bench

    metrics_bench.run(args, report, 7)


def section_overhead(args: argparse.Namespace, report: Report) -> None:
    from tests.bench import overhead_bench

    overhead_bench.run(args, report, 8)


def section_users(args: argparse.Namespace, report: Report) -> None:
    from tests.bench import users_bench

    users_bench.run(args, report, 9)


def section_model(args: argparse.Namespace, report: Report) -> None:
    from tests.bench import model_bench

    peer_python = None if args.no_peers else ensure_peers_venv(report, 11)
    with fake_host(args.processes, args.holders) as host:
        model_bench.bench(report, 11, peer_python, dict(os.environ, **host.env()))


SECTIONS: dict[int, tuple[str, Callable[[argparse.Namespace, Report], None]]] = {
    1: ("collector cost per sample", section_collector),
    2: ("remote cost", section_remote),
    3: ("fan-out", section_fanout),
    4: ("drain latency", section_drain),
    5: ("render cost", section_render),
    6: ("fleet view on Prometheus", section_fleet),
    7: ("inference server metrics", section_metrics),
    8: ("overhead targets: whole processes beside their peers", section_overhead),
    9: ("as users run it: a fresh install beside nvitop, NVML calls counted in the library", section_users),
    11: ("the client model's value classes: records, dataclasses, msgspec", section_model),
}
OVERHEAD_PARTS = ("oneshot", "remote", "start", "tui", "soak")
USERS_PARTS = ("tui", "oneshot", "remote", "clean", "job", "ssh", "fleet")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and shorter runs")
    parser.add_argument(
        "--section",
        type=int,
        action="append",
        choices=sorted(SECTIONS),
        help="run only this section (repeatable)",
    )
    parser.add_argument("--no-peers", action="store_true", help="skip gpustat/nvitop (no peers virtualenv)")
    parser.add_argument("--processes", type=int, default=300, help="idle processes on the fake host")
    parser.add_argument("--holders", type=int, default=8, help="of them, how many hold GPU memory")
    parser.add_argument("--hosts", type=str, default="1,8,32,64", help="fan-out host counts")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument(
        "--overhead",
        action="append",
        choices=OVERHEAD_PARTS,
        help="section 8: run only this part (repeatable)",
    )
    parser.add_argument(
        "--users",
        action="append",
        choices=USERS_PARTS,
        help="section 9: run only this part (repeatable)",
    )
    parser.add_argument(
        "--soak-minutes",
        type=float,
        default=None,
        help="section 8 soak length (default 6, 2 with --quick; 60 for the full hour)",
    )
    args = parser.parse_args(argv)
    report = Report()
    started = dt.datetime.now(dt.UTC)
    load = os.getloadavg()
    print(
        f"gputui bench {started:%Y-%m-%d %H:%M} UTC  python {sys.version.split()[0]}  cpus {os.cpu_count()}  "
        f"load {load[0]:.2f} {load[1]:.2f}  {'quick' if args.quick else 'full'}",
        flush=True,
    )
    for number in args.section or sorted(SECTIONS):
        title, run = SECTIONS[number]
        print(f"-- section {number}: {title}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            run(args, report)
        except Exception as exc:  # a broken section must not hide the others' figures
            report.na(number, title, f"harness error {type(exc).__name__}: {exc}")
        print(f"   section {number} took {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(render_table(report), flush=True)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "started": started.isoformat(),
                    "load": load,
                    "quick": args.quick,
                    "rows": [row.__dict__ for row in report.rows],
                    "notes": report.notes,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        sys.exit(main())
