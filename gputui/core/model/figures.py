"""Figures no card can have: negative memory, used beyond the card's total, NaN or negative power, more than
100 % utilisation.

A driver bug, a broken exporter or a planted series can send any of them. Taken as they are, a negative used
figure sits under every baseline and reads as clean, and the fleet view prints "-10M". So a GPU with one is
"cannot tell": ``model.Gpu`` drops the figures named here (they show as missing) and carries one error line
naming them, which the verdict engine's existing cannot-tell path turns into its reason. The sources need do
nothing of their own: NVML, nvidia-smi, the reduced mode and DCGM all build a ``Gpu``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gputui.core.model.record import replace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MEMORY_MAX_MIB = 1 << 40
"""No card holds an exabyte: a larger memory figure is a wrapped-around or garbage counter."""
POWER_MAX_W = 100_000.0
IMPOSSIBLE = "impossible figures"
"""How the error line of such a GPU begins (``impossible_error``)."""


def impossible_memory(used_mib: int | None, total_mib: int | None, reserved_mib: int | None) -> list[str]:
    """The impossible memory figures, each as "used -5 MiB"; empty when they are possible (or missing)."""
    problems: list[str] = []
    for name, value in (("used", used_mib), ("total", total_mib), ("reserved", reserved_mib)):
        if value is not None and (value < 0 or value > MEMORY_MAX_MIB):
            problems.append(f"memory {name} {value} MiB")
    if not problems and total_mib == 0:
        problems.append("memory total 0 MiB")  # no card has none: every figure against it would read idle
    if not problems and used_mib is not None and total_mib is not None and used_mib > total_mib:
        problems.append(f"memory used {used_mib} MiB > total {total_mib} MiB")
    if not problems and reserved_mib is not None and total_mib is not None and reserved_mib > total_mib:
        problems.append(f"memory reserved {reserved_mib} MiB > total {total_mib} MiB")
    return problems


def impossible_other(
    utilization_pct: int | None,
    memory_utilization_pct: int | None,
    temperature_c: int | None,
    power_w: float | None,
    power_limit_w: float | None,
) -> dict[str, str]:
    """The impossible figures besides memory: ``model.Gpu`` field name -> the figure named, as
    ``impossible_memory`` names its own."""
    problems: dict[str, str] = {}
    for field, name, pct in (
        ("utilization_pct", "utilization", utilization_pct),
        ("memory_utilization_pct", "memory utilization", memory_utilization_pct),
    ):
        if pct is not None and not 0 <= pct <= 100:
            problems[field] = f"{name} {pct} %"
    if temperature_c is not None and not -273 <= temperature_c <= 1000:
        problems["temperature_c"] = f"temperature {temperature_c} C"
    for field, name, watts in (
        ("power_w", "power", power_w),
        ("power_limit_w", "power limit", power_limit_w),
    ):
        if watts is not None and (not math.isfinite(watts) or not 0 <= watts <= POWER_MAX_W):
            problems[field] = f"{name} {'NaN' if math.isnan(watts) else f'{watts:g}'} W"
    return problems


def impossible_processes(pid_mib: Iterable[tuple[int, int | None]]) -> list[str]:
    """Processes listed with negative (or impossibly large) GPU memory."""
    return [
        f"pid {pid} using {mib} MiB"
        for pid, mib in pid_mib
        if mib is not None and (mib < 0 or mib > MEMORY_MAX_MIB)
    ]


def impossible_error(problems: Iterable[str]) -> str:
    """The one line a GPU with impossible figures carries as its error."""
    return f"{IMPOSSIBLE}: {', '.join(problems)}"


def dropped(gpu: Any) -> dict[str, Any]:
    """What a ``model.Gpu`` with impossible figures becomes: field name -> its new value (the figures None,
    ``error`` naming them unless it holds an error already); empty when every figure is possible."""
    memory = impossible_memory(gpu.memory_used_mib, gpu.memory_total_mib, gpu.memory_reserved_mib)
    other = impossible_other(
        gpu.utilization_pct, gpu.memory_utilization_pct, gpu.temperature_c, gpu.power_w, gpu.power_limit_w
    )
    listed = impossible_processes((p.pid, p.used_mib) for p in gpu.processes)
    if not (memory or other or listed):
        return {}
    out: dict[str, Any] = dict.fromkeys(other)
    if memory:  # which of them is wrong cannot be told: none is shown
        out.update(memory_used_mib=None, memory_total_mib=None, memory_reserved_mib=None)
    if listed:
        out["processes"] = tuple(
            replace(p, used_mib=None) if impossible_processes([(p.pid, p.used_mib)]) else p
            for p in gpu.processes
        )
    if gpu.error is None:
        out["error"] = impossible_error([*memory, *other.values(), *listed])
    return out
