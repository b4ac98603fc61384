"""One NVML read of a GPU's per-process utilisation (SM, memory bandwidth, encoder, decoder)."""

from __future__ import annotations

from gputui.agent.gpu import nvmlapi
from gputui.agent.gpu.nvmlapi import nvml_function_missing, nvml_is_lost

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def read_process_util(handle: Any, since_us: int) -> tuple[list[dict[str, Any]], int | None] | None:
    """The latest sample of each pid on one GPU since ``since_us`` (NVML's microsecond clock).

    Returns:
        (rows, newest_us): one row per pid, sorted by pid, and the newest sample's time stamp to read from
        next (None when there was no sample); ([], None) when the driver has none in the window (NOT_FOUND:
        nothing ran). None: this GPU or driver cannot say. A lost GPU raises.
    """
    nv = nvmlapi.pynvml
    try:
        samples = nv.nvmlDeviceGetProcessUtilization(handle, since_us)
    except Exception as exc:
        if nvml_is_lost(exc):
            raise
        if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_NOT_FOUND", -1):
            return [], None
        if isinstance(exc, nv.NVMLError) or nvml_function_missing(exc):
            return None
        raise
    latest: dict[int, Any] = {}
    for sample in samples or ():
        pid = int(sample.pid)
        if pid not in latest or sample.timeStamp >= latest[pid].timeStamp:
            latest[pid] = sample
    newest_us = max(int(s.timeStamp) for s in latest.values()) if latest else None
    rows = [
        {
            "pid": pid,
            "sm_pct": _pct(sample.smUtil),
            "mem_bw_pct": _pct(sample.memUtil),
            "enc_pct": _pct(sample.encUtil),
            "dec_pct": _pct(sample.decUtil),
        }
        for pid, sample in sorted(latest.items())
    ]
    return rows, newest_us


def _pct(value: Any) -> int | None:
    """A percent from NVML; None for what no percent can be (the driver's "not available" markers)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if 0 <= number <= 100 else None
