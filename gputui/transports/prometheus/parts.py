"""The pieces one answer is gathered into: a series, a GPU's and a host's parts, and the number rules."""

from __future__ import annotations

import math
from collections.abc import Mapping

from gputui.core.model import Record, field
from gputui.transports.prometheus.query import PART_LABEL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def number(text: Any) -> float | None:
    """A sample value: Prometheus sends numbers as strings ("NaN", "+Inf" included); None unless finite."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def whole(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def host_part(instance: str) -> str:
    """``gpu-a:9400`` -> ``gpu-a``; ``[fe80::1]:9400`` -> ``fe80::1``; anything else as it is."""
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    if instance.count(":") == 1:
        return instance.split(":", 1)[0]
    return instance


class Series(Record, frozen=False):
    """One series of the answer: its labels, its value and its own sample time (looked up when needed)."""

    labels: dict[str, str]
    value: float | None
    time: float | None = None
    invalid: str | None = None
    """The sample as sent when it is no finite number ("NaN", "-Inf"): named, never taken for a figure."""


class GpuParts(Record, frozen=False):
    """Everything the answer holds about one GPU (key: UUID, else ``gpu``)."""

    key: str
    index: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    figures: dict[str, Series] = field(default_factory=dict)
    """figure name -> the chosen series (the newest of duplicates)."""
    mig: dict[str, dict[str, Series]] = field(default_factory=dict)
    """GPU_I_ID -> figure name -> series."""
    mig_profiles: dict[str, str] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)
    """Own sample times of its current FB_USED series."""
    live: bool = False
    """A DCGM value of this GPU is in the instant result: a series of it is not marked stale."""
    owner_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Where an owner sits (``series._owner_key``) -> the labels of a series that names it."""
    instances: set[str] = field(default_factory=set)
    """The exporters (``instance``) whose series name this GPU."""
    gputui_figures: dict[str, Series] = field(default_factory=dict)
    """figure name -> gputui exporter's series, in DCGM's units (``gputui_series``)."""


class HostParts(Record, frozen=False):
    name: str
    ssh_host: str
    gpus: dict[str, GpuParts] = field(default_factory=dict)
    instances: set[str] = field(default_factory=set)
    gputui: list[Series] = field(default_factory=list)
    """The host's gputui exporter series other than GPU figures (``gputui_series.exported_host``)."""


def newer(old_time: float | None, old: Series, new_time: float | None, new: Series) -> bool:
    """Whether ``new`` replaces ``old`` among duplicate series: the newer own time, then a number."""
    if new_time is not None and (old_time is None or new_time > old_time):
        return True
    return new_time == old_time and old.value is None and new.value is not None


def series_key(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """A series' identity across the answer's parts: its labels without the metric name and the part mark."""
    rest = dict(labels)
    rest.pop("__name__", None)
    rest.pop(PART_LABEL, None)
    return frozenset(rest.items())
