"""Section 6: the fleet view on Prometheus.

    .venv/bin/python tests/bench/fleet_bench.py [--quick]     # this section alone (run_bench.py --section 6)

Each part runs in a fresh worker process (``python tests/bench/fleet_bench.py KIND``):

- ``client``: one refresh of 500 hosts x 8 GPUs from recorded JSON (``tests/data/prometheus``: the answer of
  a real Prometheus, grown to 500 hosts by ``scaled_answer``): JSON decode and parse (``PrometheusSource``),
  memory-only verdicts (``analyze_fleet``), and the overview rows sorted (``summarize``), in CPU time.
- ``render``: the same 500 hosts in ``FleetScreen`` under ``App.run_test(size=(160, 50))``. Pre-analysed
  answers in which 50 hosts' memory and every host's data age change each round (a 15 s scrape interval
  seen every 5 s) are handed over as the poller does, and timed until the app is idle again: the first answer (500 rows added), a steady refresh (cells updated in place), a
  refresh sorted by memory whose order changes, and the ``s`` key.
- ``loop``: the whole loop against the real engine: 50 exporters of 8 GPUs (one loopback process) scraped
  every second by Prometheus (``tests/integration/prometheus.py``); per refresh the client's wall and CPU
  time (HTTP, decode, parse, verdicts) and the answer's size, Prometheus's own CPU per query (its CPU with
  queries minus its CPU for as long without), and the TUI on it at a 1 s refresh (CPU of the process).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

HOSTS = 500
LOOP_HOSTS = 50
CHANGED_PER_ROUND = 50
WORKERS = ("client", "render", "loop")
TARGET_REFRESH_CPU_MS = 500.0
"""500 hosts x 8 GPUs, one refresh: at most 10 % of a core at the default 5 s refresh."""
TARGET_RENDER_MS = 100.0
"""Applying one refresh to the screen: no longer than a keypress may take to show."""
TARGET_LOOP_S = 1.0
"""One refresh against the real Prometheus with 50 exporters, wall time."""


def _changed(document: dict[str, Any], round_no: int) -> dict[str, Any]:
    """``document`` a refresh later, as with a 15 s scrape interval: GPU3's memory changed on
    ``CHANGED_PER_ROUND`` hosts (rotating by round), and every host's data of another age."""
    changed = copy.deepcopy(document)
    first = round_no * CHANGED_PER_ROUND % HOSTS
    wanted = {f"node-{(first + i) % HOSTS:04d}" for i in range(CHANGED_PER_ROUND)}
    for item in changed["data"]["result"]:
        metric = item["metric"]
        host = metric.get("Hostname", "")
        if metric.get("__name__") == "DCGM_FI_DEV_FB_USED" and metric.get("gpu") == "3" and host in wanted:
            item["value"][1] = str(1000 + (round_no * 7919) % 70000)
        elif metric.get("gputui_part") == "time" and host.startswith("node-"):
            age = (round_no * 5 + int(host[len("node-") :])) % 15 + 0.5
            item["value"][1] = str(float(item["value"][0]) - age)
    return changed


def _client(args: argparse.Namespace) -> dict[str, Any]:
    from gputui.core.fleet import analyze_fleet, sort_key, summarize
    from gputui.core.verdict import Baselines
    from gputui.transports.prometheus import FleetSettings, PrometheusSource
    from tests.data.prometheus import scaled_answer

    raw = json.dumps(scaled_answer(HOSTS)).encode()
    source = PrometheusSource(
        FleetSettings(url="http://bench"), fetcher=lambda url, query, timeout: json.loads(raw)
    )
    decode, parse, verdicts, rows, total = [], [], [], [], []
    for _ in range(args.repeats):
        t0 = time.process_time()
        json.loads(raw)
        t1 = time.process_time()
        sample = source.sample()  # decodes again (it is the fetcher), then parses
        t2 = time.process_time()
        analysed = analyze_fleet(sample, Baselines())
        t3 = time.process_time()
        summary = sorted((summarize(h) for h in analysed.hosts), key=sort_key("memory"))
        t4 = time.process_time()
        assert len(summary) == HOSTS
        decode.append((t1 - t0) * 1000)
        parse.append((t2 - t1 - (t1 - t0)) * 1000)
        verdicts.append((t3 - t2) * 1000)
        rows.append((t4 - t3) * 1000)
        total.append((t4 - t1) * 1000)
    med = statistics.median
    return {
        "total_ms": med(total),
        "decode_ms": med(decode),
        "parse_ms": med(parse),
        "verdicts_ms": med(verdicts),
        "rows_ms": med(rows),
        "bytes": len(raw),
        "series": len(json.loads(raw)["data"]["result"]),
        "repeats": args.repeats,
    }


async def _render(args: argparse.Namespace) -> dict[str, Any]:
    from gputui.core.fleet import analyze_fleet
    from gputui.core.verdict import Baselines
    from gputui.transports.prometheus import parse_answer
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.screens.fleet import FleetScreen
    from gputui.ui.session.fleet_poller import FleetUpdate
    from gputui.ui.widgets.fleet_table import FleetTable
    from tests.data.prometheus import scaled_answer

    base = scaled_answer(HOSTS)
    samples = [analyze_fleet(parse_answer(_changed(base, r)), Baselines()) for r in range(args.rounds + 1)]
    fleet = FleetScreen(
        lambda: samples[0],
        source_name="prometheus http://bench",
        ssh_target=lambda h: h.name,
        refresh_s=3600.0,
        stale_after_s=90.0,
    )
    app = GpuTuiApp([], lambda target: None, fleet=fleet, read_only=True)  # type: ignore[arg-type, return-value]

    async def apply(sample: Any) -> tuple[float, float]:
        answers = fleet.answers
        cpu0, wall0 = time.process_time(), time.perf_counter()
        fleet._deliver(FleetUpdate(sample, None, time.time(), 0.0))
        while fleet.answers == answers:
            await pilot.pause(0)
        await pilot.pause()
        return (time.process_time() - cpu0) * 1000, (time.perf_counter() - wall0) * 1000

    steady, steady_wall, sorted_cpu, sort_key_cpu = [], [], [], []
    async with app.run_test(size=(160, 50)) as pilot:
        table = fleet.query_one(FleetTable)
        while fleet.answers == 0:  # the poller's own first answer
            await pilot.pause(0.05)
        fleet.poller.stop()
        app.screen.query_one(FleetTable)  # composed
        first_cpu, first_wall = await apply(samples[0])
        for sample in samples[1:]:
            cpu, wall = await apply(sample)
            steady.append(cpu)
            steady_wall.append(wall)
        fleet.sort_mode = "memory"
        await pilot.pause()
        for sample in samples[1:]:
            cpu, _ = await apply(sample)
            sorted_cpu.append(cpu)
        for _ in range(5):
            cpu0 = time.process_time()
            await pilot.press("s")
            await pilot.pause()
            sort_key_cpu.append((time.process_time() - cpu0) * 1000)
        rows = table.row_count
    med = statistics.median
    return {
        "first_cpu_ms": first_cpu,
        "first_wall_ms": first_wall,
        "steady_cpu_ms": med(steady),
        "steady_wall_ms": med(steady_wall),
        "sorted_cpu_ms": med(sorted_cpu),
        "sort_key_cpu_ms": med(sort_key_cpu),
        "rows": rows,
        "rounds": len(steady),
    }


def _proc_cpu_s(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _loop(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    from gputui.core.fleet import analyze_fleet
    from gputui.core.verdict import Baselines
    from gputui.transports.prometheus import FleetSettings, PrometheusSource, build_query, fetch
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.screens.fleet import FleetScreen
    from tests.integration.prometheus import Fleet

    with tempfile.TemporaryDirectory(prefix="gputui-bench-fleet-") as tmp:
        fleet = Fleet(Path(tmp))
        try:
            exporters = fleet.exporter([{"name": f"gpu-{i:03d}", "gpus": 8} for i in range(LOOP_HOSTS)])
            for i in range(0, LOOP_HOSTS, 3):
                exporters.set(f"gpu-{i:03d}", 3, used=40000 + i, util=90)
            server = fleet.prometheus()
            server.wait_until(
                lambda: len(server.query("DCGM_FI_DEV_FB_USED")) >= LOOP_HOSTS * 8, "every GPU", timeout_s=120
            )
            time.sleep(3.0)
            assert server.process is not None
            prom_pid = server.process.pid
            source = PrometheusSource(FleetSettings(url=server.url))
            walls, cpus = [], []
            size = len(json.dumps(fetch(server.url, build_query(), 10.0)))
            # Prometheus's CPU for a window without queries, then for as long with queries back to back.
            window = args.window
            idle0 = _proc_cpu_s(prom_pid)
            time.sleep(window)
            idle_cpu = _proc_cpu_s(prom_pid) - idle0
            busy0 = _proc_cpu_s(prom_pid)
            started = time.monotonic()
            while time.monotonic() - started < window:
                wall0, cpu0 = time.perf_counter(), time.process_time()
                sample = analyze_fleet(source.sample(), Baselines())
                walls.append(time.perf_counter() - wall0)
                cpus.append((time.process_time() - cpu0) * 1000)
                assert len(sample.hosts) == LOOP_HOSTS
            busy_cpu = _proc_cpu_s(prom_pid) - busy0
            queries = len(walls)
            # The TUI on it, refreshing every second.
            screen = FleetScreen(
                lambda: analyze_fleet(source.sample(), Baselines()),
                source_name=f"prometheus {server.url}",
                ssh_target=lambda h: h.name,
                refresh_s=1.0,
                stale_after_s=90.0,
            )
            app = GpuTuiApp([], lambda target: None, fleet=screen, read_only=True)  # type: ignore[arg-type, return-value]
            async with app.run_test(size=(160, 50)) as pilot:
                while screen.answers == 0:
                    await pilot.pause(0.1)
                answers0, cpu0, wall0 = screen.answers, time.process_time(), time.perf_counter()
                await pilot.pause(window)
                tui_cpu_pct = 100 * (time.process_time() - cpu0) / (time.perf_counter() - wall0)
                tui_answers = screen.answers - answers0
        finally:
            fleet.close()
    med = statistics.median
    return {
        "wall_s": med(walls),
        "wall_max_s": max(walls),
        "client_cpu_ms": med(cpus),
        "bytes": size,
        "queries": queries,
        "prom_cpu_ms_per_query": 1000 * (busy_cpu - idle_cpu) / queries,
        "prom_idle_pct": 100 * idle_cpu / window,
        "tui_cpu_pct": tui_cpu_pct,
        "tui_answers": tui_answers,
        "window_s": window,
    }


def worker_main(kind: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args(argv)
    try:
        if kind == "client":
            result = _client(args)
        else:
            result = asyncio.run(_render(args) if kind == "render" else _loop(args))
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)


# --- harness side ----------------------------------------------------------------------------------------


def _run_worker(kind: str, *extra: str) -> dict[str, Any]:
    from tests.bench.app_bench import _run_worker as run_worker

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return run_worker(kind, env, *extra, timeout_s=900, script=Path(__file__))


def run(args: argparse.Namespace, report: Any, sec: int) -> None:
    """Section 6 of ``run_bench.py``: rows for the client, the render and the loop with the real engine."""
    from tests.bench.run_bench import verdict

    size = f"{HOSTS} hosts x 8 GPUs"
    res = _run_worker("client", "--repeats", "5" if args.quick else "15")
    target = f"<= {TARGET_REFRESH_CPU_MS:.0f} ms"
    if "error" in res:
        report.na(sec, f"fleet {size}: client CPU per refresh", res["error"], target=target)
    else:
        report.add(
            sec,
            f"fleet {size}: client CPU per refresh",
            res["total_ms"],
            "CPU ms/refresh",
            compare=f"{res['bytes'] / 1e6:.1f} MB answer, {res['series']} series",
            target=target,
            verdict=verdict(res["total_ms"] <= TARGET_REFRESH_CPU_MS),
        )
        report.add(sec, "  JSON decode (stdlib)", res["decode_ms"], "CPU ms")
        report.add(sec, "  parse into hosts", res["parse_ms"], "CPU ms")
        report.add(sec, "  memory-only verdicts", res["verdicts_ms"], "CPU ms")
        report.add(sec, "  overview rows, sorted", res["rows_ms"], "CPU ms")
    res = _run_worker("render", "--rounds", "5" if args.quick else "12")
    target = f"<= {TARGET_RENDER_MS:.0f} ms"
    if "error" in res:
        report.na(sec, f"fleet {size}: render one refresh", res["error"], target=target)
    else:
        report.add(
            sec,
            f"fleet {size}: render one refresh",
            res["steady_cpu_ms"],
            "CPU ms/refresh",
            compare=f"wall {res['steady_wall_ms']:.0f} ms, every age and {CHANGED_PER_ROUND} hosts' memory "
            f"changed, {res['rows']} rows",
            target=target,
            verdict=verdict(res["steady_cpu_ms"] <= TARGET_RENDER_MS),
        )
        report.add(
            sec,
            "  first answer (every row added)",
            res["first_cpu_ms"],
            "CPU ms",
            compare=f"wall {res['first_wall_ms']:.0f} ms",
        )
        report.add(sec, "  refresh sorted by memory (order changes)", res["sorted_cpu_ms"], "CPU ms")
        report.add(sec, "  key s (sort again)", res["sort_key_cpu_ms"], "CPU ms")
    res = _run_worker("loop", "--window", "10" if args.quick else "30")
    target = f"<= {TARGET_LOOP_S:g} s"
    loop = f"fleet real Prometheus, {LOOP_HOSTS} exporters x 8 GPUs: one refresh"
    if "error" in res:
        report.na(sec, loop, res["error"], target=target)
    else:
        report.add(
            sec,
            loop,
            res["wall_s"],
            "s wall",
            compare=f"max {res['wall_max_s']:.2f} s, n={res['queries']}",
            target=target,
            verdict=verdict(res["wall_s"] <= TARGET_LOOP_S),
        )
        report.add(
            sec,
            "  client CPU per refresh",
            res["client_cpu_ms"],
            "CPU ms",
            compare=f"answer {res['bytes'] / 1e3:.0f} kB",
        )
        report.add(
            sec,
            "  Prometheus CPU per query",
            res["prom_cpu_ms_per_query"],
            "CPU ms",
            compare=f"scraping alone {res['prom_idle_pct']:.1f} % of a core",
        )
        report.add(
            sec,
            "  TUI on it at a 1 s refresh",
            res["tui_cpu_pct"],
            "% of a core",
            compare=f"{res['tui_answers']} answers in {res['window_s']:.0f} s",
        )
    report.note(
        sec,
        f"fleet: client and render from tests/data/prometheus/fleet.json grown to {HOSTS} hosts; "
        f"loop: {LOOP_HOSTS} fake DCGM exporters, Prometheus at a 1 s scrape interval, on this box",
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in WORKERS:
        return worker_main(sys.argv[1], sys.argv[2:])
    from tests.bench import run_bench

    return run_bench.main(["--section", "6", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
