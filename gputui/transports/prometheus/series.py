"""The series of one answer, gathered per host and per GPU (one ``Parser`` per answer)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gputui.transports.prometheus.query import (
    DCGM_METRICS,
    FB_USED,
    GONE_PART,
    GPU_INSTANCE_ID,
    GPU_INSTANCE_PROFILE,
    INSTANCE,
    PART_LABEL,
    SERVER_METRICS,
    TIME_PART,
    UP,
    UP_TIME_PART,
)


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


@dataclass(slots=True)
class Series:
    """One series of the answer: its labels, its value and its own sample time (looked up when needed)."""

    labels: dict[str, str]
    value: float | None
    time: float | None = None
    invalid: str | None = None
    """The sample as sent when it is no finite number ("NaN", "-Inf"): named, never taken for a figure."""


@dataclass
class GpuParts:
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
    """An FB_USED value of this GPU is in the instant result: a series of it is not marked stale."""
    instances: set[str] = field(default_factory=set)
    """The exporters (``instance``) whose series name this GPU."""


@dataclass
class HostParts:
    name: str
    ssh_host: str
    gpus: dict[str, GpuParts] = field(default_factory=dict)
    instances: set[str] = field(default_factory=set)


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


_GPU_LABELS = ("UUID", "modelName", "pci_bus_id", "device")


class Parser:
    """Turns the answer's series into hosts; one instance per answer."""

    def __init__(self, host_label: str, stale_after_s: float) -> None:
        self.host_label = host_label
        self.stale_after_s = stale_after_s
        self.hosts: dict[str, HostParts] = {}
        self.up: dict[str, bool] = {}
        self.servers: list[Series] = []
        self.eval_time: float | None = None
        self.ignored = 0
        self.dcgm_jobs: set[str] = set()
        """Scrape jobs of the DCGM series."""
        self.down_targets: list[tuple[str, str]] = []
        """(instance, job) of every target whose ``up`` is 0."""
        self.up_time: dict[str, float] = {}
        """Instance -> when its ``up`` was last 1, for targets that are down."""
        self._time_series: list[tuple[dict[str, str], float]] = []
        self._gone_series: list[dict[str, str]] = []
        self._times: dict[frozenset[tuple[str, str]], float] | None = None

    def own_time(self, series: Series) -> float | None:
        """The own sample time of a DCGM series: that of the FB_USED series with the same labels.

        Needed only to choose among duplicate series, so the map is built on first use: making the identity
        of every series of a 500-host answer costs more than everything else the parser does.
        """
        if series.time is None:
            if self._times is None:
                self._times = {}
                for labels, at in self._time_series:
                    key = series_key(labels)
                    self._times[key] = max(at, self._times.get(key, at))
            series.time = self._times.get(series_key(series.labels))
        return series.time

    def host_of(self, labels: Mapping[str, str]) -> HostParts | None:
        name = labels.get(self.host_label) or ""
        instance = labels.get(INSTANCE) or ""
        ssh_host = name
        if not name:
            name = instance
            ssh_host = host_part(instance)
        if not name:
            return None
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = HostParts(name, ssh_host or name)
        if instance:
            host.instances.add(instance)
        job = labels.get("job")
        if job:
            self.dcgm_jobs.add(job)
        return host

    def gpu_of(self, host: HostParts, labels: Mapping[str, str]) -> GpuParts | None:
        uuid = labels.get("UUID") or ""
        index_text = labels.get("gpu") or ""
        key = uuid or (f"gpu:{index_text}" if index_text else "")
        if not key:
            return None
        gpu = host.gpus.get(key)
        if gpu is None:
            gpu = host.gpus[key] = GpuParts(key)
        if gpu.index is None and index_text.isdigit():
            gpu.index = int(index_text)
        if len(gpu.labels) < len(_GPU_LABELS):  # every series of a GPU repeats them: take them once
            for name in _GPU_LABELS:
                if labels.get(name) and name not in gpu.labels:
                    gpu.labels[name] = labels[name]
        return gpu

    def feed(self, result: Iterable[Any]) -> None:
        """Take every series of the answer's result list.

        Label names and values are JSON strings in any answer of Prometheus; anything else makes a later
        step raise TypeError or AttributeError, which ``parse_answer`` reports as a malformed answer.
        """
        values: list[tuple[str, Series]] = []
        for item in result:
            if not isinstance(item, dict):
                self.ignored += 1
                continue
            labels = item.get("metric")
            sample = item.get("value")
            if not isinstance(labels, dict) or not isinstance(sample, list) or len(sample) != 2:
                self.ignored += 1
                continue
            at = number(sample[0])
            if at is not None and (self.eval_time is None or at > self.eval_time):
                self.eval_time = at
            name = labels.get("__name__")
            value = number(sample[1])
            part = labels.get(PART_LABEL)
            if part is None and name is not None:
                invalid = str(sample[1])[:20] if value is None and sample[1] is not None else None
                values.append((name, Series(labels, value, invalid=invalid)))
            elif part == TIME_PART and value is not None:
                self._time_series.append((labels, value))
            elif part == GONE_PART and name == FB_USED:
                self._gone_series.append(labels)
            elif part == UP_TIME_PART and value is not None and labels.get(INSTANCE):
                instance = labels[INSTANCE]
                self.up_time[instance] = max(value, self.up_time.get(instance, value))
            else:
                self.ignored += 1
        for name, series in values:
            if name == UP:
                instance = series.labels.get(INSTANCE)
                if instance and series.value is not None:
                    self.up[instance] = self.up.get(instance, True) and series.value >= 1
                    if series.value < 1 and series.labels.get("job"):
                        self.down_targets.append((instance, series.labels["job"]))
            elif name in SERVER_METRICS:
                self.servers.append(series)
            elif name in DCGM_METRICS:
                self._dcgm(name, series)
        for labels, at in self._time_series:
            gpu = self._gpu_from(labels)
            if gpu is not None:
                gpu.times.append(at)
        for labels in self._gone_series:
            self._gpu_from(labels)  # known, without current data

    def _gpu_from(self, labels: Mapping[str, str]) -> GpuParts | None:
        host = self.host_of(labels)
        gpu = None if host is None else self.gpu_of(host, labels)
        if gpu is None:
            self.ignored += 1
        elif labels.get(INSTANCE):
            gpu.instances.add(labels[INSTANCE])
        return gpu

    def _dcgm(self, name: str, series: Series) -> None:
        gpu = self._gpu_from(series.labels)
        if gpu is None:
            return
        figure = DCGM_METRICS[name]
        mig_id = series.labels.get(GPU_INSTANCE_ID)
        if mig_id:
            slot = gpu.mig.setdefault(mig_id, {})
            profile = series.labels.get(GPU_INSTANCE_PROFILE)
            if profile:
                gpu.mig_profiles.setdefault(mig_id, profile)
        else:
            slot = gpu.figures
        old = slot.get(figure)
        if old is None or newer(self.own_time(old), old, self.own_time(series), series):
            slot[figure] = series
        if name == FB_USED:
            gpu.live = True
