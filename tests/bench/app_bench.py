"""Sections 4 (TUI part) and 5: the Textual app itself, headless under ``App.run_test``.

Both run in a worker process (``python tests/bench/app_bench.py KIND``): the drain check needs the fake NVML
loaded through LD_LIBRARY_PATH, which the dynamic linker reads only at process start.

- ``render``: 8 hosts x 8 GPUs x 200 processes of synthetic ``model.HostSnapshot`` objects (analysed, as the
  poll workers hand them over) are delivered as the app's own ``Hosts.Sampled`` messages, one round per
  tick for every host; timed until the app is idle again (handlers, widget updates, layout and the headless
  paint). The active host's round is timed apart: it redraws the GPU panel and the process tree.
- ``drain``: the app polls the local host (LocalLink, in-process agent) under the fake NVML; a holder process
  keeps memory on every GPU; the clean-slate check is started (``checks.start``, what key ``c`` does), then the
  holder is killed and reaped at a known monotonic time; the latency is until the app marks the check clean.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

HOSTS = 8
GPUS = 8
PROCESSES = 200


class IdleLink:
    """A link that connects and never delivers: the benchmark feeds snapshots itself."""

    def __init__(self, target: str) -> None:
        self.target = target

    def open(self) -> None:
        return None

    def next_snapshot(self, timeout_s: float) -> Any:
        time.sleep(min(timeout_s, 0.5))
        return None

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        return None


def synthetic_snapshot(target: str, round_no: int) -> Any:
    """One host: a launcher, 8 GPU workers each with children, idle helpers; 200 processes in all."""
    from gputui.core.model import Gpu, GpuProcess, HostSnapshot, Proc

    now = 1_800_000_000.0 + round_no
    processes: list[Proc] = [
        Proc(
            pid=1000,
            ppid=1,
            user="svc",
            uid=1000,
            state="S",
            name="python3",
            cmdline=("python3", "-m", "sglang.launch_server", "--tp", "8"),
            start_ticks=1000,
            create_time=now - 3600,
            rss_kib=2_000_000,
        )
    ]
    gpus = []
    pid = 1001
    for index in range(GPUS):
        worker = pid
        used = 40_000 + (round_no * 37 + index * 101) % 2000
        processes.append(
            Proc(
                pid=worker,
                ppid=1000,
                user="svc",
                uid=1000,
                state="S",
                name=f"sglang::scheduler_TP{index}",
                cmdline=("python3", "-c", "from multiprocessing.spawn import spawn_main"),
                start_ticks=pid,
                create_time=now - 3500,
                rss_kib=8_000_000,
                gpu_memory_mib={index: used},
            )
        )
        pid += 1
        gpus.append(
            Gpu(
                index=index,
                name="NVIDIA RTX PRO 6000 Blackwell",
                uuid=f"GPU-{target}-{index}",
                pci_bus_id=f"00000000:{index + 1:02X}:00.0",
                memory_used_mib=used + 3,
                memory_total_mib=49152,
                memory_reserved_mib=0,
                utilization_pct=(round_no + index) % 100,
                temperature_c=60,
                power_w=300.0,
                power_limit_w=600.0,
                processes=(GpuProcess(pid=worker, used_mib=used),),
            )
        )
        for _child in range(20):
            processes.append(
                Proc(
                    pid=pid,
                    ppid=worker,
                    user="svc",
                    uid=1000,
                    state="S",
                    name="python3",
                    cmdline=("python3", "-c", "compile worker"),
                    start_ticks=pid,
                    create_time=now - 3400,
                    rss_kib=100_000,
                )
            )
            pid += 1
    while len(processes) < PROCESSES:
        state = "Z" if len(processes) % 50 == 0 else "S"
        processes.append(
            Proc(
                pid=pid,
                ppid=1000,
                user="svc",
                uid=1000,
                state=state,
                name="detokenizer",
                cmdline=("python3",),
                start_ticks=pid,
                create_time=now - 3000,
                rss_kib=50_000,
            )
        )
        pid += 1
    return HostSnapshot(
        target=target,
        hostname=target,
        boot_id="boot-" + target,
        time=now,
        driver_version="570.124.06",
        mode="sim",
        agent_pid=999,
        processes_time=now,
        gpus=tuple(gpus),
        processes=tuple(processes),
    )


async def _render(args: argparse.Namespace) -> dict:
    from gputui.core.verdict import Baselines, analyze
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.session.hosts import Hosts

    targets = [f"host-{i}" for i in range(HOSTS)]
    rounds = args.rounds
    prepared = [
        [analyze(synthetic_snapshot(t, r), Baselines(), now=1_800_000_000.0 + r) for t in targets]
        for r in range(rounds + 3)
    ]
    app = GpuTuiApp(targets, link_factory=IdleLink, read_only=True)
    all_cpu, all_wall, active_cpu, active_wall, rest_cpu = [], [], [], [], []
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        for r, snapshots in enumerate(prepared):
            # The active host alone: GPU panel + process tree redraw.
            cpu0, wall0 = time.process_time(), time.perf_counter()
            app.post_message(Hosts.Sampled(targets[0], snapshots[0]))
            await pilot.pause()
            cpu1, wall1 = time.process_time(), time.perf_counter()
            # The seven others: host bar and overview only.
            for target, snapshot in zip(targets[1:], snapshots[1:], strict=True):
                app.post_message(Hosts.Sampled(target, snapshot))
            await pilot.pause()
            cpu2, wall2 = time.process_time(), time.perf_counter()
            if r >= 3:  # the first rounds build the rows
                active_cpu.append((cpu1 - cpu0) * 1000)
                active_wall.append((wall1 - wall0) * 1000)
                rest_cpu.append((cpu2 - cpu1) * 1000)
                all_cpu.append((cpu2 - cpu0) * 1000)
                all_wall.append((wall2 - wall0) * 1000)
        rows = None
        try:
            from gputui.ui.widgets.process_table import ProcessTable

            table = app.query_one(ProcessTable)
            rows = getattr(table, "row_count", None)
        except Exception:
            rows = None
    med = statistics.median
    return {
        "round_cpu_ms": med(all_cpu),
        "round_wall_ms": med(all_wall),
        "active_cpu_ms": med(active_cpu),
        "active_wall_ms": med(active_wall),
        "others_cpu_ms": med(rest_cpu),
        "rounds": len(all_cpu),
        "rows": rows,
    }


async def _drain(args: argparse.Namespace) -> dict:
    from gputui.core.link import LinkOptions
    from gputui.transports.local import LocalLink
    from gputui.ui.app import GpuTuiApp
    from tests.bench.procs import DetachedGroup
    from tests.fakenvml import FakeNvmlState

    state_path = Path(os.environ["FAKE_NVML_STATE"])
    clean_at: list[float] = []

    options = LinkOptions(read_only=True, discover_health=False)
    latencies, clean_times = [], []
    rest_gaps: list[float] = []
    check_gaps: list[float] = []
    for repeat in range(args.repeats):
        lists: list[tuple[float, float]] = []
        group = DetachedGroup(1)
        holder_pid = group.pids[0]
        state = FakeNvmlState.with_gpus(GPUS)
        for index in range(GPUS):
            state.add_holder(index, holder_pid, 20000)
        state.write(state_path)
        clean_at.clear()
        app = GpuTuiApp(["local"], link_factory=lambda _t: LocalLink(options), read_only=True)
        host = app.hosts[0]
        apply_snapshot = host.apply

        def timed_apply(
            snapshot: Any, now_s: float, apply_snapshot: Any = apply_snapshot, lists: Any = lists
        ) -> Any:
            # Process-list cadence, from the snapshots the app applies (an instance attribute shadows the
            # method).
            if snapshot.processes_time is not None and (not lists or lists[-1][1] != snapshot.processes_time):
                lists.append((time.monotonic(), snapshot.processes_time))
            return apply_snapshot(snapshot, now_s)

        host.apply = timed_apply  # type: ignore[method-assign]
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                snap = app.hosts[0].snapshot
                if snap is not None and any(p.pid == holder_pid for p in snap.processes):
                    break
                await pilot.pause(0.05)
            if repeat == 0:
                # Process-list cadence at rest (default intervals), from the snapshots' processes_time.
                await pilot.pause(7.0)
            check_at = time.monotonic()
            app.checks.start(app.hosts[0])
            # Let the configure command land and a few fast samples pass: the check is draining.
            await pilot.pause(1.5)
            # The holder's server reaps at once: the fake driver frees memory when /proc/<pid> is gone.
            killed_at = group.kill(holder_pid)
            # The receipt: the app marks the check clean once a fresh full sample confirmed the clean memory
            # sample, so poll the check itself rather than the snapshots applied.
            deadline = time.monotonic() + 20
            while not clean_at and time.monotonic() < deadline:
                check = app.hosts[0].check
                if check is not None and check.clean:
                    clean_at.append(time.monotonic())
                    break
                await pilot.pause(0.01)
            check_end = clean_at[0] if clean_at else time.monotonic()
            for (seen_a, a), (seen_b, b) in zip(lists, lists[1:], strict=False):
                if seen_b < check_at:
                    rest_gaps.append(b - a)
                elif seen_a >= check_at + 0.3 and seen_b <= check_end:  # after the configure landed
                    check_gaps.append(b - a)
            if clean_at:
                latencies.append((clean_at[0] - killed_at) * 1000)
                check = app.hosts[0].check
                clean_times.append(check.finished_s - check.started_s if check and check.finished_s else None)
            await app.action_quit()
        group.close()
    return {
        "latencies_ms": latencies,
        "repeats": args.repeats,
        "rest_gaps_s": rest_gaps,
        "check_gaps_s": check_gaps,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("render", "drain"))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        result = asyncio.run(_render(args) if args.kind == "render" else _drain(args))
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    # Poll workers may still sit in a link call on non-daemon executor threads: do not wait for them.
    os._exit(0)


# --- harness side ----------------------------------------------------------------------------------------


def _run_worker(
    kind: str, env: dict[str, str], *extra: str, timeout_s: float = 600, script: Path = Path(__file__)
) -> dict:
    """Run ``script KIND EXTRA...`` in a fresh process; the last JSON line it prints (or {"error": ...})."""
    cmd = [sys.executable, str(script), kind, *extra]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"{kind} worker timed out"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"{kind} worker exit {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def render(args: argparse.Namespace, report: Any, sec: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    res = _run_worker("render", env, "--rounds", "8" if args.quick else "25")
    metric = f"render {HOSTS} hosts x {GPUS} GPUs x {PROCESSES} procs"
    if "error" in res:
        report.na(sec, metric, res["error"])
        return
    report.add(
        sec,
        metric + ": one round",
        res["round_cpu_ms"],
        "CPU ms/round",
        compare=f"wall {res['round_wall_ms']:.0f} ms; {res['rounds']} rounds of 8 messages",
    )
    report.add(
        sec,
        "  active host (GPU panel + process tree)",
        res["active_cpu_ms"],
        "CPU ms",
        compare=f"wall {res['active_wall_ms']:.0f} ms, {res['rows']} table rows",
    )
    report.add(sec, "  7 other hosts (host bar, overview)", res["others_cpu_ms"], "CPU ms")
    report.note(
        sec,
        "render: GpuTuiApp under App.run_test(size=(160, 50)), snapshots pre-analysed, delivered as "
        "Hosts.Sampled messages, timed until the app is idle (pilot.pause)",
    )


def drain_tui(args: argparse.Namespace, report: Any, sec: int) -> None:
    from tests.bench.run_bench import TARGET_DRAIN_MS, fake_host, verdict

    with fake_host(0, 0) as host:
        res = _run_worker("drain", host.env(), "--repeats", "7" if args.quick else "21")
    target = f"<= {TARGET_DRAIN_MS:.0f} ms"
    if "error" in res or not res.get("latencies_ms"):
        report.na(sec, "drain latency, TUI", res.get("error") or "the check never went clean", target=target)
        return
    values = res["latencies_ms"]
    value = statistics.median(values)
    report.add(
        sec,
        "drain latency, TUI",
        value,
        "ms kill->CLEAN",
        compare=f"min {min(values):.0f} max {max(values):.0f}, n={len(values)}",
        target=target,
        verdict=verdict(value <= TARGET_DRAIN_MS),
    )
    rest, fast = res.get("rest_gaps_s") or [], res.get("check_gaps_s") or []
    rest_gap = statistics.median(rest) if rest else None
    fast_gap = statistics.median(fast) if fast else None
    report.add(
        1,
        "TUI process lists at rest",
        rest_gap,
        "s between lists",
        compare=f"{len(rest)} gaps, default intervals",
        target="> memory interval",
        verdict=verdict(None if rest_gap is None else rest_gap > 1.5),
    )
    report.add(
        1,
        "TUI process lists while a check drains",
        fast_gap,
        "s between lists",
        compare=f"{len(fast)} gaps after key c",
        target="< at rest",
        verdict=verdict(None if fast_gap is None or rest_gap is None else fast_gap < rest_gap / 2),
        reason="no process list seen during the check",
    )
    report.note(
        sec,
        "TUI: GpuTuiApp + LocalLink under run_test, check started with checks.start (key c), "
        "holder of 8 GPUs killed+reaped after 1 s of draining",
    )


if __name__ == "__main__":
    sys.exit(main())
