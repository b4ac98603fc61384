"""The demo's story: two simulated hosts, their processes and GPUs, every figure deterministic.

* the wedge (any target except ``gpu-node-08``): eight 48 GiB "NVIDIA RTX PRO 6000 Blackwell" GPUs, an sglang
  launcher started under ``nsys`` with eight scheduler workers (~40 GiB each) and a detokenizer. After
  ``wedged_at_s`` seconds of serving, the schedulers' leaders turn defunct (``Z``): TP0's last thread exits
  with it (a true zombie: its memory drains at once), the other seven each keep two threads stuck in the
  driver (``D``) and hold their memory. ``/health`` answers 503 and the metrics show requests pending with
  the generated-token counter flat: UNHEALTHY, then STALLED. A kill signals the defunct leaders themselves;
  once their threads leave the driver, their memory drains to the 3 MiB idle baseline over ``DRAIN_S``
  seconds, and the launcher's death reaps TP0.
  GPU1 is where it started: a contained ECC error (Xid 94) with a row remap pending, and the driver's
  recovery action asks for a GPU reset, so that GPU stays NOT READY after the kill until it is reset (the
  simulated collector answers ``reset_plan`` and ``reset_run``; ``gputui.transports.sim.resets``). The
  ranks' collective kernels keep polling on GPUs 1-7 (100 % busy at idle power: a spinning collective), and
  the other ranks' threads come out of the driver ``D_RELEASE_S`` after the wedge (their calls fail once the
  driver has contained GPU1's error) to wait (S) for TP1, which never answers; TP1's stay in D.
* the healthy host (``gpu-node-08``): a vLLM server on four of eight GPUs, plus, under ``escaping-test``, a
  process whose name and arguments are hostile text (markup, terminal escapes, a bidi override, a 100 KB
  argument) under a parent that says it is a test of escaping, to keep every renderer honest. Between
  ``BUSY_FROM_S`` and ``BUSY_UNTIL_S`` of the scenario its ``/health`` times out under load while it keeps
  generating: BUSY, not dead.
* the shared host (``gpu-node-09``): what the other findings look like, one of each
  (``gputui.transports.sim.shared``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gputui.agent.proc.profiler import profiler_of_argv
from gputui.agent.servers import metrics_filter as names
from gputui.core.model import Record, field

Clock = Callable[[], float]
"""Returns wall-clock epoch seconds."""

HEALTHY_TARGET = "gpu-node-08"
"""The demo host that stays healthy; every other simulated target replays the wedge (but the shared one)."""
SHARED_TARGET = "gpu-node-09"
"""The demo's shared host: the finding kinds the wedge does not show."""

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell"
GPU_TOTAL_MIB = 49152
IDLE_MIB = 3
"""What an idle GPU reports as used: the driver's own footprint."""
DRAIN_S = 2.0
"""Seconds within which a dead holder's GPU memory is back with the driver (GPU 7 takes this long)."""
PORT_LINGER_S = 1.0
"""Seconds a dead process's listening port stays in LISTEN (its socket closes with its last holder)."""


def drain_s(gpu_index: int) -> float:
    """Seconds GPU ``gpu_index`` takes to release a dead holder's memory: GPU 0 is quickest (1.3 s), GPU 7
    takes ``DRAIN_S``, so a clean-slate check sees the GPUs come back one after another."""
    return DRAIN_S * (0.65 + 0.05 * min(gpu_index, 7))


BUSY_FROM_S = 15.0
BUSY_UNTIL_S = 90.0
"""Scenario seconds during which the healthy host's /health times out while its tokens keep flowing."""
GPU_COUNT = 8
ENDPOINT_PROBE_S = 2.0
"""Seconds between the simulated agent's health probes."""
POWER_LIMIT_W = 600.0
CLOCK_TICKS_PER_S = 100
BOOT_EPOCH_S = 1_780_000_000.0
"""Epoch seconds at which the simulated hosts booted (start ticks count from here)."""

SGLANG_PORT = 30000
SGLANG_CMDLINE = (
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/models/GLM-5-NVFP4",
    "--tp",
    "8",
    "--port",
    str(SGLANG_PORT),
    "--enable-layerwise-nvtx-marker",
    "--enable-metrics",
)
NSYS_CMDLINE = (
    "nsys",
    "profile",
    "--trace=cuda,nvtx",
    "--cuda-graph-trace=node",
    "-o",
    "/tmp/glm5_decode",  # noqa: S108 (a string shown, never a path used)
    *SGLANG_CMDLINE,
)
VLLM_CMDLINE = (
    "python3",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "/models/Qwen3-32B",
    "--tensor-parallel-size",
    "4",
    "--port",
    "8000",
)


class SimServerLoad(Record):
    """What a simulated server's metrics say (its counter grows by ``generation_tokens_per_s``)."""

    engine: str
    running: int
    waiting: int
    kv_cache_usage: float
    generation_tokens_per_s: float


SGLANG_SERVING = SimServerLoad("sglang", 6, 0, 0.62, 2400.0)
VLLM_SERVING = SimServerLoad("vllm", 4, 0, 0.38, 1800.0)
WEDGED = SimServerLoad("sglang", 8, 5, 0.91, 0.0)
"""The wedged server's figures: requests pending, the token counter flat (its throughput gauge keeps the
last value the scheduler logged)."""


def metrics_text(load: SimServerLoad, tokens_total: float, throughput: float) -> str:
    """A server's Prometheus text as the collector sends it (cut down to the names gputui reads)."""
    if load.engine == "vllm":
        lines = [
            f'{names.METRICS_VLLM_RUNNING}{{engine="0",model_name="qwen3"}} {load.running}',
            f'{names.METRICS_VLLM_WAITING}{{engine="0",model_name="qwen3"}} {load.waiting}',
            f'{names.METRICS_VLLM_KV_CACHE_USAGE}{{engine="0",model_name="qwen3"}} {load.kv_cache_usage}',
            f'{names.METRICS_VLLM_GENERATION_TOKENS}{{engine="0",model_name="qwen3"}} {tokens_total:.1f}',
        ]
    else:
        lines = [
            f'{names.METRICS_SGLANG_RUNNING}{{model_name="glm5"}} {load.running}',
            f'{names.METRICS_SGLANG_WAITING}{{model_name="glm5"}} {load.waiting}',
            f'{names.METRICS_SGLANG_TOKEN_USAGE}{{model_name="glm5"}} {load.kv_cache_usage}',
            f'{names.METRICS_SGLANG_GENERATION_TOKENS}{{model_name="glm5"}} {tokens_total:.1f}',
            f'{names.METRICS_SGLANG_GEN_THROUGHPUT}{{model_name="glm5"}} {throughput}',
        ]
    return "\n".join(lines) + "\n"


HOSTILE_TEXTS = (
    "[bold]x[/]",
    "[@click=app.quit]x[/]",
    "\x1b]0;t\x07",
    "\x1b[2J",
    "\u202eexe.txt",
    "[Bold]",
    "[$x]",
    "[/]",
    "\x9bJ",
)
"""Markup, terminal escapes and a bidi override, as machines may report them in names and arguments."""
HOSTILE_LONG_ARG_CHARS = 100_000
ESCAPING_TEST_PID = 5402
ESCAPING_TEST_ARGV = ("escaping-test", "--hostile-names", "--expect=shown-literally")
"""The hostile process's parent: its command says that the text under it is a test of escaping, not a bug."""

SCHEDULER_PID_BASE = 4240
"""Scheduler TP<i> has pid SCHEDULER_PID_BASE + i."""
LAUNCHER_PID = 4200
VLLM_PID = 5100
"""The healthy host's server: its /health answers while it lives."""
NSYS_PID = 4100
DETOKENIZER_PID = 4250
SCHEDULER_HELD_MIB = (41236, 41228, 41236, 41236, 41240, 41236, 41232, 41236)
STUCK_THREADS = {"D": 2}
"""The threads a wedged scheduler keeps once its leader is defunct: stuck in the driver."""
WAITING_THREADS = {"S": 2}
"""The same threads once out of the driver: waiting for TP1 in the collective."""
FAULTED_GPU = 1
"""The GPU whose contained memory error wedged the server: it needs a reset (its rank is TP1)."""
D_RELEASE_S = 120.0
"""Seconds after the wedge at which the other ranks' threads leave the driver (TP1's stay)."""
FAULT_XID = 94
FAULT_XID_DETAIL = "pid=4241, name=sglang::schedul, Contained ECC error"
"""The rest of the kernel's Xid line, as the driver logs a contained ECC error (the shape of
``NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error``, leptonai/gpud#1174; the
name is the kernel's 15-character comm)."""
RECOVERY_GPU_RESET = 1
"""``NVML_GPU_RECOVERY_ACTION_GPU_RESET``: what the driver asks for the faulted GPU."""
SPIN_POWER_W = 104.0
"""What a GPU draws while its collective kernel polls for a peer that never joins (near idle)."""


class SimProc(Record, frozen=False):
    """A simulated process. Mutable: the scenario and kills change it."""

    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...]
    user: str = "root"
    uid: int = 0
    state: str = "S"
    gpu_mib: dict[int, int] = field(default_factory=dict)
    ignores_term: bool = False
    defunct_on_wedge: bool = False
    threads_on_wedge: dict[str, int] = field(default_factory=dict)
    """Threads (state letter -> count) still alive once the leader is defunct: none makes a true zombie."""
    live_threads: dict[str, int] | None = None
    """While the process is in state Z: its live threads (empty: a true zombie)."""
    start_offset_s: float = 1000.0
    state_since: float | None = None
    rss_kib: int = 1_048_576
    listen_ports: tuple[int, ...] = ()
    profiler: dict[str, object] | None = None
    """What the collector would say of it as a process of a GPU job (``protocol.PROCESS_PROFILER``)."""

    @property
    def start_ticks(self) -> int:
        return int(self.start_offset_s * CLOCK_TICKS_PER_S)


class ManualClock:
    """A clock that moves only when told to: for deterministic tests and snapshots.

    Args:
        start_s: Epoch seconds it reads at first.
    """

    def __init__(self, start_s: float = BOOT_EPOCH_S + 86_400.0) -> None:
        self._now_s = start_s
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now_s

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        with self._lock:
            self._now_s += seconds


def wedge_processes() -> list[SimProc]:
    procs = [
        SimProc(
            NSYS_PID,
            3811,
            "nsys",
            NSYS_CMDLINE,
            start_offset_s=80_000.0,
            rss_kib=412_000,
            profiler=profiler_of_argv(NSYS_CMDLINE),
        ),
        SimProc(
            LAUNCHER_PID,
            NSYS_PID,
            "python3",
            SGLANG_CMDLINE,
            start_offset_s=80_001.0,
            rss_kib=3_200_000,
            listen_ports=(SGLANG_PORT,),
        ),
    ]
    for tp in range(GPU_COUNT):
        procs.append(
            SimProc(
                SCHEDULER_PID_BASE + tp,
                LAUNCHER_PID,
                f"sglang::scheduler_TP{tp}",
                # The title sglang sets (setproctitle): what /proc/PID/cmdline reads while it lives.
                (f"sglang::scheduler_TP{tp}",),
                gpu_mib={tp: SCHEDULER_HELD_MIB[tp]},
                defunct_on_wedge=True,
                threads_on_wedge={} if tp == 0 else dict(STUCK_THREADS),
                start_offset_s=80_009.0 + tp / 10,
                rss_kib=9_800_000,
            )
        )
    procs.append(
        SimProc(
            DETOKENIZER_PID,
            LAUNCHER_PID,
            "sglang::detokenizer",
            ("sglang::detokenizer",),
            ignores_term=True,
            start_offset_s=80_010.0,
            rss_kib=640_000,
        )
    )
    return procs


def healthy_processes() -> list[SimProc]:
    procs = [
        SimProc(VLLM_PID, 2901, "python3", VLLM_CMDLINE, user="svc-llm", uid=1001, start_offset_s=40_000.0),
        SimProc(
            5110,
            5100,
            "VLLM::EngineCore",
            ("VLLM::EngineCore",),
            user="svc-llm",
            uid=1001,
            start_offset_s=40_004.0,
        ),
    ]
    for tp in range(4):
        procs.append(
            SimProc(
                5120 + tp,
                5110,
                f"VLLM::Worker_TP{tp}",
                (f"VLLM::Worker_TP{tp}",),
                user="svc-llm",
                uid=1001,
                gpu_mib={tp: 44236},
                start_offset_s=40_006.0 + tp / 10,
                rss_kib=7_400_000,
            )
        )
    hostile_argv = ("python3", *HOSTILE_TEXTS, "A" * HOSTILE_LONG_ARG_CHARS)
    # Labelled as what it is: the hostile process runs under a test of escaping (a pid after its children's,
    # as after a wrap of the pid counter).
    procs.append(
        SimProc(
            ESCAPING_TEST_PID,
            3000,
            ESCAPING_TEST_ARGV[0],
            ESCAPING_TEST_ARGV,
            user="svc-test",
            uid=1004,
            start_offset_s=59_990.0,
            rss_kib=4_000,
        )
    )
    procs.append(
        SimProc(
            5400,
            ESCAPING_TEST_PID,
            "[bold]x[/]",
            hostile_argv,
            user="[@click=app.quit]x[/]",
            uid=1002,
            gpu_mib={6: 1024},
            start_offset_s=60_000.0,
            rss_kib=300_000,
        )
    )
    procs.append(
        SimProc(
            5401,
            5400,
            "\x1b]0;t\x07\x1b[2J",
            ("\u202eexe.txt", "[$x]"),
            user="[Bold]",
            uid=1003,
            start_offset_s=60_001.0,
            rss_kib=20_000,
        )
    )
    return procs
