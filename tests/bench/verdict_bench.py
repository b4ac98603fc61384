"""The verdict engine's cost per sample on a host whose GPU job has hundreds of members.

An 8-GPU host runs one server: a launcher, 8 workers each holding one GPU, and idle helpers under them (the
job has ``--members`` processes in all), behind a login shell; the server's health endpoint names the
launcher. Samples are judged as the TUI judges them: ``judge(snapshot, Baselines(), servers=watch)`` with one
``ServerWatch`` across samples, two ways: process samples (every list a new one, so nothing the engine keeps
per sample is reused: the process forest is built each time) and memory samples (the lists of the sample
before, as a collector's line marked ``processes_same`` gives them). Prints the CPU time per sample and, with
``--profile``, the calls cProfile counted (the most called functions), so that what grows with GPUs x
processes shows by its count.

    python tests/bench/verdict_bench.py [--samples 100] [--members 300] [--gpus 8] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gputui.core.model import EndpointSample, Gpu, GpuProcess, HostSnapshot, Proc, replace  # noqa: E402
from gputui.core.servers import ServerWatch  # noqa: E402
from gputui.core.text import visible  # noqa: E402
from gputui.core.verdict import Baselines, judge  # noqa: E402

WORKER_MIB = 70_000
SHELL, LAUNCHER = 950, 1000
T0 = 1_700_000_000.0


def job_processes(members: int, gpus: int) -> list[Proc]:
    """A login shell, and the job: its launcher, one worker per GPU, then idle helpers under the workers."""
    shell = Proc(pid=SHELL, ppid=900, state="S", name=visible("bash"), cmdline=(visible("-bash"),), sid=SHELL)
    launcher = Proc(
        pid=LAUNCHER,
        ppid=SHELL,
        state="S",
        name=visible("python3"),
        cmdline=tuple(map(visible, ("python3", "-m", "sglang.launch_server", "--tp", str(gpus)))),
        sid=SHELL,
        pgid=LAUNCHER,
        start_ticks=100,
        listen_ports=(30000,),
        cpu_pct=1.0,
    )
    procs = [shell, launcher]
    for index in range(gpus):
        procs.append(
            Proc(
                pid=LAUNCHER + 1 + index,
                ppid=LAUNCHER,
                state="S",
                name=visible("sglang::schedul"),
                sid=SHELL,
                pgid=LAUNCHER,
                start_ticks=110 + index,
                gpu_memory_mib={index: WORKER_MIB},
                cpu_pct=100.0,
            )
        )
    for n in range(max(0, members - 1 - gpus)):
        procs.append(
            Proc(
                pid=LAUNCHER + 1 + gpus + n,
                ppid=LAUNCHER + 1 + n % gpus,
                state="S",
                name=visible("python3"),
                sid=SHELL,
                pgid=LAUNCHER,
                start_ticks=200 + n,
                cpu_pct=0.0,
            )
        )
    return procs


def sample(procs: list[Proc], at: float, count: int) -> HostSnapshot:
    """One process sample of the host at ``at`` with ``count`` GPUs: every list a new one, as a fresh
    sample's are."""
    gpus = tuple(
        Gpu(
            index=index,
            uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
            name=visible("NVIDIA H100 80GB HBM3"),
            memory_used_mib=WORKER_MIB + 500,
            memory_total_mib=81_559,
            utilization_pct=97,
            power_w=400.0,
            power_limit_w=700.0,
            processes=(GpuProcess(pid=LAUNCHER + 1 + index, used_mib=WORKER_MIB),),
        )
        for index in range(count)
    )
    endpoint = EndpointSample(
        url=visible("http://127.0.0.1:30000/health"),
        state=visible("UP"),
        code=200,
        since=T0,
        last_ok=at,
        checked_at=at,
        launcher_pid=LAUNCHER,
        launcher_age_s=at - T0,
    )
    return HostSnapshot(
        target="gpu-node-07",
        hostname=visible("gpu-node-07"),
        boot_id="b00t",
        time=at,
        mode="nvml",
        agent_pid=4000,
        processes_time=at,
        gpus=gpus,
        processes=tuple(procs),
        device_holders=(),
        listening_ports=(22, 30000),
        endpoints=(endpoint,),
    )


def run(samples: list[HostSnapshot], profiler: cProfile.Profile | None) -> tuple[float, HostSnapshot]:
    """CPU milliseconds per sample to judge ``samples`` with one watch, and the last one judged."""
    watch, baselines = ServerWatch(), Baselines()
    judged = judge(samples[0], baselines, servers=watch)  # classes compile their __init__ once
    started = time.process_time()
    if profiler is not None:
        profiler.enable()
    for snapshot in samples[1:]:
        judged = judge(snapshot, baselines, servers=watch)
    if profiler is not None:
        profiler.disable()
    return (time.process_time() - started) * 1000 / (len(samples) - 1), judged


def report(label: str, samples: list[HostSnapshot], profile: bool) -> None:
    profiler = cProfile.Profile() if profile else None
    per_sample_ms, judged = run(samples, profiler)
    verdict = judged.verdict
    print(
        f"{label}: {per_sample_ms:.2f} ms CPU per sample{' (under cProfile)' if profiler else ''}; "
        f"clean={None if verdict is None else verdict.clean}, {len(judged.findings)} findings"
    )
    if profiler is not None:
        stats = pstats.Stats(profiler)
        total = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
        print(f"{total / (len(samples) - 1):.0f} calls per sample")
        stats.sort_stats("ncalls").print_stats(15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--members", type=int, default=300)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--profile", action="store_true", help="count calls with cProfile (slower)")
    args = parser.parse_args()
    procs = job_processes(args.members, args.gpus)
    fresh = [sample(procs, T0 + 2.0 * n, args.gpus) for n in range(args.samples + 1)]
    first = fresh[0]
    kept = [replace(first, time=T0 + 2.0 * n) for n in range(args.samples + 1)]
    print(f"{args.samples} samples, {args.gpus} GPUs, {len(procs)} processes ({args.members}-member job)")
    report("process samples", fresh, args.profile)
    report("memory samples", kept, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
