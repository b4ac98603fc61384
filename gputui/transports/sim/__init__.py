"""Simulated hosts for ``--demo`` and tests: the wedged-sglang story, replayed deterministically.

``SimLink`` speaks the ``HostLink`` interface exactly like a real link, so the UI and the commands have no
demo special cases. The story is ``scenario``'s: a wedged sglang host and a healthy vLLM one.

Every pid, name and time is deterministic; times come from an injectable clock (``ManualClock`` in tests), so
frozen-clock snapshots are byte-for-byte stable. The kill commands (``kills``) follow the collector's
protocol and speak its vocabulary (``gputui.agent.protocol``): identity check (pid + start ticks + boot id),
trees children first, zombies of the tree reaped with their parent, refusals (pid 1, read-only, a zombie
asked for by itself), and the TERM → KILL escalation, due on the real clock and answered by ``kill_wait`` and
``kill_abandon``. This package must not import textual or rich.
"""

from gputui.transports.sim.link import SimLink
from gputui.transports.sim.scenario import (
    BOOT_EPOCH_S,
    DETOKENIZER_PID,
    DRAIN_S,
    GPU_COUNT,
    GPU_NAME,
    GPU_TOTAL_MIB,
    HEALTHY_TARGET,
    HOSTILE_TEXTS,
    IDLE_MIB,
    LAUNCHER_PID,
    NSYS_PID,
    SCHEDULER_PID_BASE,
    SGLANG_PORT,
    VLLM_PID,
    ManualClock,
    SimProc,
    drain_s,
)

__all__ = [
    "BOOT_EPOCH_S",
    "DETOKENIZER_PID",
    "DRAIN_S",
    "GPU_COUNT",
    "GPU_NAME",
    "GPU_TOTAL_MIB",
    "HEALTHY_TARGET",
    "HOSTILE_TEXTS",
    "IDLE_MIB",
    "LAUNCHER_PID",
    "NSYS_PID",
    "SCHEDULER_PID_BASE",
    "SGLANG_PORT",
    "VLLM_PID",
    "ManualClock",
    "SimLink",
    "SimProc",
    "drain_s",
]
