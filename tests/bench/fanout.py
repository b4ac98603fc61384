"""Section 3: what the client costs with 1, 8, 32 and 64 hosts.

The client process does what the TUI does with its links: open them in parallel (one thread per host, as the
app's per-host workers do), take every snapshot as it comes, run the analysis on it and keep the latest per
host. Measured from inside that process: time from start to the first complete frame (every host has a
snapshot), then CPU (utime + stime of this process only, from /proc/self/stat: the agents and sshd sessions
that share this machine are not counted) and RSS over a steady-state window.

Transports, best first: the SSH link (``gputui.commands.inputs.targets.open_link`` on Host aliases that all point at one
loopback sshd), else a pipe link of this module that runs the very same agent source the same way SSH does
(``python3 -u -c exec(...)``) without the crypto, so the figure is the link layer minus SSH.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

CLK_TCK = os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    text = Path("/proc/self/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def self_status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class PipeLink:
    """The agent over a pipe, started exactly as the SSH transport starts it remotely (minus SSH)."""

    def __init__(self, target: str, memory_interval_s: float, process_interval_s: float) -> None:
        self.target = target
        self._args = [
            "--target",
            target,
            "--read-only",
            "--no-discover",
            "--interval",
            str(memory_interval_s),
            "--process-interval",
            str(process_interval_s),
        ]
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._proc: subprocess.Popen | None = None

    def open(self) -> None:
        from tests.bench.run_bench import agent_stream_command

        loader, payload = agent_stream_command()
        self._proc = subprocess.Popen(
            [*loader, *self._args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self._proc.stdin is not None
        self._proc.stdin.write(payload)
        self._proc.stdin.flush()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def next_snapshot(self, timeout_s: float) -> Any:
        from gputui.core.model import HostSnapshot

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                raise RuntimeError(f"{self.target}: agent exited")
            message = json.loads(line)
            if message.get("t") == "snapshot":
                return HostSnapshot.from_dict(message["snapshot"])

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(b'{"id":1,"cmd":"quit"}\n')
                self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except Exception:
                self._proc.kill()
                self._proc.wait()


# A stand-in collector: the real agent's hello and first snapshot, replayed once per interval. It starts
# in the time of a bare python3 (no pynvml, psutil or NVML), so a first frame through it measures what the
# client and sshd cost when the collectors run on hosts of their own.
STAND_IN = r"""
import json, sys, threading, time
HELLO = json.loads(%(hello)r)
SNAPSHOT = json.loads(%(snapshot)r)
interval = float(sys.argv[sys.argv.index("--interval") + 1]) if "--interval" in sys.argv else 1.0
out = sys.stdout
lock = threading.Lock()
def send(message):
    with lock:
        out.write(json.dumps(message) + "\n")
        out.flush()
def commands():
    for line in sys.stdin:
        command = json.loads(line)
        send({"t": "reply", "id": command.get("id"), "ok": True, "result": {}})
        if command.get("cmd") == "quit":
            break
    out.flush()
    import os
    os._exit(0)
threading.Thread(target=commands, daemon=True).start()
send(HELLO)
while True:
    now = time.time()
    SNAPSHOT["time"] = now
    SNAPSHOT["processes_time"] = now
    send({"t": "snapshot", "snapshot": SNAPSHOT})
    time.sleep(interval)
"""


def record_stand_in(env: dict[str, str]) -> bytes:
    """The stand-in collector's source, with the real agent's hello and first snapshot (from ``env``'s host)."""
    from tests.bench.run_bench import agent_stream_command

    loader, payload = agent_stream_command()
    proc = subprocess.Popen(
        [*loader, "--read-only", "--no-discover"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(payload)
    proc.stdin.flush()
    hello = json.loads(proc.stdout.readline())
    snapshot = json.loads(proc.stdout.readline())["snapshot"]
    proc.stdin.write(b'{"id":1,"cmd":"quit"}\n')
    proc.stdin.close()
    proc.wait(timeout=30)
    return (STAND_IN % {"hello": json.dumps(hello), "snapshot": json.dumps(snapshot)}).encode()


def _start_profiler(path: Path | None) -> Any:
    if path is None:
        return None
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.001, async_mode="disabled")
    profiler.start()
    return profiler


def _stop_profiler(profiler: Any, path: Path | None) -> None:
    if profiler is not None and path is not None:
        profiler.stop()
        path.write_text(profiler.output_text(unicode=False, show_all=False))


def client_main(argv: list[str]) -> int:
    """The client process: N links, one thread each, analysis on every snapshot; prints one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("pipe", "ssh", "app"), required=True)
    parser.add_argument("--targets", required=True, help="comma-separated")
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--process-interval", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--stand-in",
        type=Path,
        default=None,
        help="ship this collector source instead of the installed collector (app mode)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="write a pyinstrument text profile of the steady window here (needs pyinstrument)",
    )
    args = parser.parse_args(argv)
    targets = args.targets.split(",")
    if args.mode == "app":
        progress: dict[str, Any] = {
            "hosts": len(targets),
            "first_frame_s": None,
            "hosts_with_snapshot": 0,
            "errors": {},
        }

        def watchdog() -> None:
            # The app may not come back (a UI loop that cannot keep up): report where it stood, then leave.
            time.sleep(120 + args.warmup + args.duration + 30)
            progress["errors"] = {"watchdog": "the app did not finish its run in time"}
            sys.stdout.write(json.dumps(progress) + "\n")
            sys.stdout.flush()
            os._exit(0)

        threading.Thread(target=watchdog, daemon=True).start()
        result = asyncio.run(_app_client(targets, args, progress))
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
        # Poll workers may still sit in a link call on non-daemon executor threads: do not wait for them.
        os._exit(0)
    start = time.monotonic()
    analyze = None
    try:
        from gputui.core.verdict import Baselines
        from gputui.core.verdict import analyze as analyze_fn

        baselines = Baselines()

        def analyze(snapshot: Any) -> Any:
            return analyze_fn(snapshot, baselines)
    except ImportError:
        pass
    if args.mode == "ssh":
        from gputui.commands.inputs.targets import open_link
        from gputui.core.link import LinkOptions

        options = LinkOptions(
            memory_interval_s=args.interval,
            process_interval_s=args.process_interval,
            read_only=True,
            discover_health=False,
            connect_timeout_s=60.0,
        )
        links = [open_link(t, options) for t in targets]
    else:
        links = [PipeLink(t, args.interval, args.process_interval) for t in targets]
    latest: dict[str, Any] = {}
    counts: dict[str, int] = dict.fromkeys(targets, 0)
    errors: dict[str, str] = {}
    lock = threading.Lock()
    complete = threading.Event()
    stop = threading.Event()

    def host_worker(link: Any) -> None:
        try:
            link.open()
            while not stop.is_set():
                snapshot = link.next_snapshot(2.0)
                if snapshot is None:
                    continue
                if analyze is not None:
                    snapshot = analyze(snapshot)
                with lock:
                    latest[link.target] = snapshot
                    counts[link.target] += 1
                    if len(latest) == len(targets):
                        complete.set()
        except Exception as exc:
            with lock:
                errors[link.target] = f"{type(exc).__name__}: {exc}"
                if len(latest) + len(errors) == len(targets):
                    complete.set()

    threads = [threading.Thread(target=host_worker, args=(link,), daemon=True) for link in links]
    for thread in threads:
        thread.start()
    complete.wait(timeout=120)
    first_frame_s = time.monotonic() - start if len(latest) == len(targets) else None
    result: dict[str, Any] = {
        "hosts": len(targets),
        "first_frame_s": first_frame_s,
        "errors": errors,
        "analysis": analyze is not None,
        "connect_cpu_s": self_cpu_s(),
        "hosts_with_snapshot": len(latest),
    }
    if first_frame_s is not None:
        time.sleep(args.warmup)
        with lock:
            counts0 = dict(counts)
        profiler = _start_profiler(args.profile)
        cpu0, wall0 = self_cpu_s(), time.monotonic()
        time.sleep(args.duration)
        cpu1, wall1 = self_cpu_s(), time.monotonic()
        _stop_profiler(profiler, args.profile)
        with lock:
            counts1 = dict(counts)
        snapshots = sum(counts1.values()) - sum(counts0.values())
        result.update(
            cpu_pct=(cpu1 - cpu0) / (wall1 - wall0) * 100,
            snapshots_per_host_s=snapshots / len(targets) / (wall1 - wall0),
            cpu_ms_per_snapshot=(cpu1 - cpu0) * 1000 / snapshots if snapshots else None,
            rss_mib=self_status_mib("VmRSS"),
            hwm_mib=self_status_mib("VmHWM"),
            threads=threading.active_count(),
            processes_per_snapshot=len(next(iter(latest.values())).processes),
        )
    stop.set()
    closers = [threading.Thread(target=link.close, daemon=True) for link in links]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join(10)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


async def _app_client(
    targets: list[str], args: argparse.Namespace, progress: dict[str, Any]
) -> dict[str, Any]:
    """The real app, headless (App.run_test), polling every host over SSH; measured like the link client."""
    start = time.monotonic()
    from gputui.commands.inputs.targets import open_link
    from gputui.core.link import LinkOptions
    from gputui.ui.app import GpuTuiApp

    options = LinkOptions(
        memory_interval_s=args.interval,
        process_interval_s=args.process_interval,
        read_only=True,
        discover_health=False,
        connect_timeout_s=60.0,
    )
    if args.stand_in is not None:
        from gputui.transports.ssh import SshLink

        source = args.stand_in.read_bytes()

        def link_factory(target: str) -> Any:
            return SshLink(target, options.for_target(target), source=source)
    else:

        def link_factory(target: str) -> Any:
            return open_link(target, options)

    app = GpuTuiApp(
        targets,
        link_factory=link_factory,
        read_only=True,
        memory_interval_s=args.interval,
        process_interval_s=args.process_interval,
    )
    applied = [0]
    for host in app.hosts:
        apply_snapshot = host.apply

        def counting_apply(snapshot: Any, now_s: float, apply_snapshot: Any = apply_snapshot) -> Any:
            applied[0] += 1
            return apply_snapshot(snapshot, now_s)

        host.apply = counting_apply  # type: ignore[method-assign]
    result: dict[str, Any] = {"hosts": len(targets), "analysis": True, "errors": {}}
    async with app.run_test(size=(160, 50)) as pilot:
        deadline = start + 120
        while time.monotonic() < deadline and not all(h.snapshot is not None for h in app.hosts):
            progress["hosts_with_snapshot"] = sum(1 for h in app.hosts if h.snapshot is not None)
            await pilot.pause(0.02)
        complete = all(h.snapshot is not None for h in app.hosts)
        result["first_frame_s"] = time.monotonic() - start if complete else None
        progress["first_frame_s"] = result["first_frame_s"]
        result["connect_cpu_s"] = self_cpu_s()
        result["hosts_with_snapshot"] = sum(1 for h in app.hosts if h.snapshot is not None)
        result["errors"] = {h.target: h.error for h in app.hosts if h.snapshot is None and h.error}
        if complete:
            await asyncio.sleep(args.warmup)
            profiler = _start_profiler(args.profile)
            count0, cpu0, wall0 = applied[0], self_cpu_s(), time.monotonic()
            await asyncio.sleep(args.duration)
            count1, cpu1, wall1 = applied[0], self_cpu_s(), time.monotonic()
            _stop_profiler(profiler, args.profile)
            snapshots = count1 - count0
            result.update(
                cpu_pct=(cpu1 - cpu0) / (wall1 - wall0) * 100,
                snapshots_per_host_s=snapshots / len(targets) / (wall1 - wall0),
                cpu_ms_per_snapshot=(cpu1 - cpu0) * 1000 / snapshots if snapshots else None,
                rss_mib=self_status_mib("VmRSS"),
                hwm_mib=self_status_mib("VmHWM"),
                threads=threading.active_count(),
                processes_per_snapshot=len(app.hosts[0].snapshot.processes),
            )
        await app.action_quit()
    return result


# --- harness side ----------------------------------------------------------------------------------------


def run(args: argparse.Namespace, report: Any, sec: int) -> None:
    from tests.bench.run_bench import (
        TARGET_CLIENT_CPU_PCT,
        TARGET_CLIENT_RSS_MIB,
        TARGET_FIRST_FRAME_S,
        TARGET_STAND_IN_FIRST_FRAME_S,
        fake_host,
        verdict,
    )

    host_counts = [int(n) for n in args.hosts.split(",") if n.strip()]
    duration = 15.0 if args.quick else 60.0
    have_app = (REPO_ROOT / "gputui" / "ui" / "app.py").is_file()
    app_note = (
        "the app is measured apart (mode app): link layer alone"
        if have_app
        else "gputui/ui/app.py absent: link layer measured"
    )
    with fake_host(args.processes, args.holders) as host:
        modes = []
        if (REPO_ROOT / "gputui" / "transports" / "ssh" / "__init__.py").is_file():
            if have_app:
                modes.append("app")
            modes.append("ssh")
            if have_app:
                modes.append("app-stand-in")
        else:
            report.na(sec, "fan-out over SSH", "gputui/transports/ssh/ not in the tree yet")
            modes.append("pipe")
        for mode in modes:
            with tempfile.TemporaryDirectory(prefix="gputui-bench-fanout-") as tmp:
                env = host.env()
                hosts = None
                if mode != "pipe":
                    from gputui.agent.gpu.xid import TEST_SOURCE_ENV as KERNEL_LOG
                    from tests.bench import bench_sshd

                    fake_env = {
                        k: env[k] for k in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE", KERNEL_LOG) if k in env
                    }
                    try:
                        hosts = bench_sshd.start_hosts(
                            Path(tmp) / "ssh", Path(sys.executable).parent, fake_env, max(host_counts)
                        )
                    except Exception as exc:
                        report.na(sec, "fan-out over SSH", f"sshd: {type(exc).__name__}: {exc}")
                        continue
                    env = dict(hosts.client_env, PYTHONPATH=str(REPO_ROOT))
                    report.note(
                        sec,
                        f"{mode}: {max(host_counts)} Host aliases -> one sshd on 127.0.0.1 from "
                        f"{hosts.source}",
                    )
                res: dict[str, Any] = {}
                extra: list[str] = []
                if mode == "app-stand-in":
                    stand_in = Path(tmp) / "stand_in.py"
                    stand_in.write_bytes(record_stand_in(host.env()))
                    extra = ["--stand-in", str(stand_in)]
                try:
                    for count in host_counts:
                        if mode == "app-stand-in" and count != max(host_counts):
                            continue
                        targets = (
                            hosts.aliases[:count] if hosts else [f"pipe-host-{i:02d}" for i in range(count)]
                        )
                        cmd = [
                            sys.executable,
                            str(Path(__file__)),
                            "client",
                            "--mode",
                            mode.split("-")[0],
                            "--targets",
                            ",".join(targets),
                            "--duration",
                            str(duration),
                            *extra,
                        ]
                        try:
                            proc = subprocess.run(
                                cmd,
                                env=env,
                                capture_output=True,
                                text=True,
                                timeout=duration + 240,
                                cwd=REPO_ROOT,
                            )
                        except subprocess.TimeoutExpired:
                            report.na(sec, f"{mode} {count} hosts", "client timed out")
                            continue
                        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
                        if not lines:
                            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                            report.na(sec, f"{mode} {count} hosts", tail[:200])
                            continue
                        res = json.loads(lines[-1])
                        if res["first_frame_s"] is None:
                            err = next(iter(res["errors"].values()), "no complete frame within 120 s")
                            report.na(
                                sec,
                                f"{mode} {count} hosts",
                                f"{res.get('hosts_with_snapshot')}/{count} "
                                f"hosts had a snapshot after 120 s; {len(res['errors'])} failed: {err}",
                            )
                            continue
                        if mode == "app-stand-in":
                            big = count == max(host_counts)
                            report.add(
                                sec,
                                f"app {count:>2} hosts, stand-in collectors: first frame",
                                res["first_frame_s"],
                                "s",
                                compare=f"client CPU {res['connect_cpu_s']:.2f} s; agents replaced",
                                target=f"<= {TARGET_STAND_IN_FIRST_FRAME_S:g} s" if big else "",
                                verdict=verdict(res["first_frame_s"] <= TARGET_STAND_IN_FIRST_FRAME_S)
                                if big
                                else "",
                            )
                            report.add(
                                sec,
                                f"app {count:>2} hosts, stand-in collectors: client CPU",
                                res["cpu_pct"],
                                "% of a core",
                                compare=f"{res['cpu_ms_per_snapshot'] or float('nan'):.2f} ms/snapshot",
                            )
                            continue
                        big = count == max(host_counts)
                        report.add(
                            sec,
                            f"{mode} {count:>2} hosts: first complete frame",
                            res["first_frame_s"],
                            "s",
                            compare=f"client CPU {res['connect_cpu_s']:.2f} s to get there",
                            target=f"<= {TARGET_FIRST_FRAME_S:.0f} s" if big else "",
                            verdict=verdict(res["first_frame_s"] <= TARGET_FIRST_FRAME_S) if big else "",
                        )
                        report.add(
                            sec,
                            f"{mode} {count:>2} hosts: client CPU",
                            res["cpu_pct"],
                            "% of a core",
                            compare=f"{res['cpu_ms_per_snapshot'] or float('nan'):.2f} ms/snapshot, "
                            f"{res['snapshots_per_host_s']:.2f} snap/host/s",
                            target=f"<= {TARGET_CLIENT_CPU_PCT:.0f} %" if big else "",
                            verdict=verdict(res["cpu_pct"] <= TARGET_CLIENT_CPU_PCT) if big else "",
                        )
                        report.add(
                            sec,
                            f"{mode} {count:>2} hosts: client RSS",
                            res["rss_mib"],
                            "MiB",
                            compare=f"peak {res['hwm_mib']:.0f} MiB, {res['threads']} threads",
                            target=f"<= {TARGET_CLIENT_RSS_MIB:.0f} MB" if big else "",
                            verdict=verdict(res["hwm_mib"] <= TARGET_CLIENT_RSS_MIB) if big else "",
                        )
                    what = {
                        "app": "GpuTuiApp headless (run_test 160x50) over SSH links",
                        "app-stand-in": "the same app, each host's collector replaced by a replay of the real "
                        "agent's hello and first snapshot (a bare python3, no pynvml/psutil/NVML): "
                        "the first frame without the cost of 64 collector starts on these cores",
                    }.get(mode, app_note)
                    what += "; every agent and sshd session runs on this same 2-core box"
                    report.note(
                        sec,
                        f"{mode}: {what}; analysis {'on' if res.get('analysis') else 'absent'}; "
                        f"1 s memory / 3 s processes; {duration:.0f} s steady window after 3 s; "
                        f"{res.get('processes_per_snapshot', '?')} processes per snapshot",
                    )
                finally:
                    if hosts is not None:
                        hosts.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        sys.exit(client_main(sys.argv[2:]))
    sys.exit("usage: fanout.py client ...")
