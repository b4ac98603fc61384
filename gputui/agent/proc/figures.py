"""Per-process figures of a snapshot's process entries: CPU % and NVML's per-process GPU utilisation.

Stdlib only, Python 3.8.
"""

from __future__ import annotations

from gputui.agent.proc.procfs import CLOCK_TICKS_PER_S

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROCESS_UTIL_KEY = "process_util"
"""The key of a GPU dict from the backend holding that GPU's per-process samples: a list of
``{"pid", "sm_pct", "mem_bw_pct", "enc_pct", "dec_pct"}``; None where the GPU or driver does not support them;
absent when none were read in this sample (they are read at a slow cadence)."""
PROCESS_UTIL_FIELDS = (
    ("sm_pct", "gpu_sm_pct"),
    ("mem_bw_pct", "gpu_mem_bw_pct"),
    ("enc_pct", "gpu_enc_pct"),
    ("dec_pct", "gpu_dec_pct"),
)
"""(a sample's field, the process entry's key: GPU index -> percent)."""


def no_gpu_util() -> dict[str, dict[str, int]]:
    """The entry's keys of a process with no sample on any GPU, each empty."""
    return {key: {} for _field, key in PROCESS_UTIL_FIELDS}


class CpuMeter:
    """CPU % of each process between two of its samples (100 = one core), None on its first."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], tuple[float, int]] = {}

    def percent(self, key: tuple[int, int], cpu_ticks: int | None, now_mono: float) -> float | None:
        if cpu_ticks is None:
            return None
        last = self._last.get(key)
        self._last[key] = (now_mono, cpu_ticks)
        if last is None or now_mono <= last[0] or cpu_ticks < last[1]:
            return None
        seconds = (cpu_ticks - last[1]) / float(CLOCK_TICKS_PER_S)
        return round(100.0 * seconds / (now_mono - last[0]), 1)

    def forget_except(self, live: set[tuple[int, int]]) -> None:
        for key in [k for k in self._last if k not in live]:
            del self._last[key]


class GpuUtilBook:
    """The latest per-process samples of each GPU (kept between the slow reads)."""

    def __init__(self) -> None:
        self._by_gpu: dict[int, dict[int, dict[str, Any]]] = {}

    def take(self, gpus: list[dict[str, Any]]) -> None:
        """Take (and remove) the ``PROCESS_UTIL_KEY`` of each GPU dict that has one."""
        for gpu in gpus:
            if PROCESS_UTIL_KEY not in gpu:
                continue
            samples = gpu.pop(PROCESS_UTIL_KEY)
            index = gpu.get("index")
            if not isinstance(index, int):
                continue
            by_pid: dict[int, dict[str, Any]] = {}
            for sample in samples or ():
                pid = sample.get("pid")
                if isinstance(pid, int) and pid > 0:
                    by_pid[pid] = sample
            self._by_gpu[index] = by_pid
        known = {gpu.get("index") for gpu in gpus}
        for index in [i for i in self._by_gpu if i not in known]:
            del self._by_gpu[index]

    def fields(self, pid: int) -> dict[str, dict[str, int]]:
        """The process entry's keys for ``pid``, every one always there (one shape): GPU index -> percent
        for the GPUs with a sample of it, empty where none has."""
        out = no_gpu_util()
        for index in sorted(self._by_gpu):
            sample = self._by_gpu[index].get(pid)
            if sample is None:
                continue
            for field, key in PROCESS_UTIL_FIELDS:
                value = sample.get(field)
                if isinstance(value, int) and 0 <= value <= 100:
                    out.setdefault(key, {})[str(index)] = value
        return out
