"""The series of one answer, gathered per host and per GPU (one ``Parser`` per answer)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gputui.core.fleet import DCGM_OWNER_LABELS, dcgm_owner
from gputui.core.model import Owner
from gputui.core.text import visible
from gputui.transports.pacing import SLICE_ITEMS, pace
from gputui.transports.prometheus.gputui_series import GPU_FIGURES, gpu_figure, take
from gputui.transports.prometheus.parts import (
    GpuParts,
    HostParts,
    Series,
    host_part,
    newer,
    number,
    series_key,
)
from gputui.transports.prometheus.query import (
    DCGM_METRICS,
    DCGM_RENAMED,
    FB_USED,
    GONE_PART,
    GPU_INSTANCE_ID,
    GPU_INSTANCE_PROFILE,
    GPUTUI_MEMORY_USED,
    GPUTUI_PREFIX,
    HOST_LABEL_FALLBACKS,
    INSTANCE,
    PART_LABEL,
    SERVER_METRICS,
    TIME_PART,
    UP,
    UP_TIME_PART,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_GPU_LABELS = ("UUID", "modelName", "pci_bus_id", "device")
_ADDRESS_LABELS = frozenset({INSTANCE, "exported_instance"})
"""Host labels whose value is an exporter's address (``host:port``): its host part is the SSH host."""


def host_labels(configured: str) -> tuple[str, ...]:
    """The labels that name a host, in the order they are tried: the configured one, then
    ``HOST_LABEL_FALLBACKS``, then ``instance``."""
    return tuple(dict.fromkeys((configured, *HOST_LABEL_FALLBACKS, INSTANCE)))


class Parser:
    """Turns the answer's series into hosts; one instance per answer."""

    def __init__(self, host_label: str, stale_after_s: float) -> None:
        self.host_label = host_label
        self.host_labels = host_labels(host_label)
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
        self.targets: dict[str, dict[str, str]] = {}
        """Instance -> the owner labels of its scrape target (``pod``, ``namespace``: the exporter's own)."""
        self._time_series: list[tuple[dict[str, str], float]] = []
        self._gone_series: list[dict[str, str]] = []
        self._times: dict[frozenset[tuple[str, str]], float] | None = None

    def own_time(self, series: Series) -> float | None:
        """The own sample time of a DCGM series: that of the time part's series with the same labels.

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

    def host_name(self, labels: Mapping[str, str]) -> tuple[str, str]:
        """``(name, ssh host)`` a series names its host by (the first of ``host_labels`` it has); empty
        strings for none."""
        for label in self.host_labels:
            value = labels.get(label) or ""
            if value:
                return value, host_part(value) if label in _ADDRESS_LABELS else value
        return "", ""

    def host_of(self, labels: Mapping[str, str]) -> HostParts | None:
        name, ssh_host = self.host_name(labels)
        if not name:
            return None
        instance = labels.get(INSTANCE) or ""
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
        # Nearly every answer is printable text throughout: checked a series at a time, in one pass over its
        # joined texts, before any label is made visible on its own.
        printable = str.isprintable
        join = "".join

        for count, item in enumerate(result, 1):
            if count % SLICE_ITEMS == 0:
                pace()
            if not isinstance(item, dict):
                self.ignored += 1
                continue
            labels = item.get("metric")
            sample = item.get("value")
            if not isinstance(labels, dict) or not isinstance(sample, list) or len(sample) != 2:
                self.ignored += 1
                continue
            # Every label is machine text: made visible here, once, for every view of the fleet.
            try:
                clean = printable(join(labels)) and printable(join(labels.values()))
            except TypeError:  # a value that is not text
                clean = False
            if not clean:
                labels = {visible(k): visible(v) if isinstance(v, str) else v for k, v in labels.items()}
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
            elif part == GONE_PART and name in (FB_USED, GPUTUI_MEMORY_USED):
                self._gone_series.append(labels)
            elif part == UP_TIME_PART and value is not None and labels.get(INSTANCE):
                instance = labels[INSTANCE]
                self.up_time[instance] = max(value, self.up_time.get(instance, value))
            else:
                self.ignored += 1
        for count, (name, series) in enumerate(values, 1):
            if count % SLICE_ITEMS == 0:
                pace()
            if name == UP:
                instance = series.labels.get(INSTANCE)
                if instance:
                    own = {k: series.labels[k] for k in DCGM_OWNER_LABELS if series.labels.get(k)}
                    self.targets.setdefault(instance, own)
                if instance and series.value is not None:
                    self.up[instance] = self.up.get(instance, True) and series.value >= 1
                    if series.value < 1 and series.labels.get("job"):
                        self.down_targets.append((instance, series.labels["job"]))
            elif name in SERVER_METRICS:
                self.servers.append(series)
            elif name in DCGM_METRICS:
                self._dcgm(name, series)
            elif name.startswith(GPUTUI_PREFIX):
                self._gputui(name, series)
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

    def _gputui(self, name: str, series: Series) -> None:
        if name in GPU_FIGURES:
            gpu = self._gpu_from(series.labels)
            if gpu is not None:
                gpu_figure(gpu, name, series)
            return
        host = self.host_of(series.labels)
        if host is None or not take(host, series):
            self.ignored += 1

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
        if old is None or _preferred(old, series, self.own_time):
            slot[figure] = series
        gpu.live = True  # any current series of a GPU is current data of it
        if any(series.labels.get(label) for label in DCGM_OWNER_LABELS):
            gpu.owner_labels.setdefault(_owner_key(series.labels, mig_id), series.labels)

    def owners(self, gpu: GpuParts) -> dict[str, Owner]:
        """The pods that have ``gpu`` (key: its MIG instance, or a shared GPU's other owner labels), without
        the pod of the exporter's own scrape target."""
        out: dict[str, Owner] = {}
        for key, labels in sorted(gpu.owner_labels.items()):
            owner = dcgm_owner(labels, self.targets.get(labels.get(INSTANCE) or ""))
            if owner is not None and owner not in out.values():
                out[key] = owner
        return out


def _owner_key(labels: Mapping[str, str], mig_id: str | None) -> str:
    """Where one owner sits on a GPU: its MIG instance, else its owner labels (pods sharing a GPU)."""
    owner = "/".join(labels.get(label) or "" for label in DCGM_OWNER_LABELS)
    return f"{mig_id or ''}|{owner}"


def _preferred(old: Series, new: Series, own_time: Callable[[Series], float | None]) -> bool:
    """Whether ``new`` replaces ``old`` for one figure of a GPU: a field's current DCGM name over an older one
    (``DCGM_RENAMED``: both are sent while a fleet moves to DCGM 4.x), else the newer sample."""
    old_renamed = old.labels.get("__name__") in DCGM_RENAMED
    new_renamed = new.labels.get("__name__") in DCGM_RENAMED
    if old_renamed != new_renamed:
        return old_renamed
    return newer(own_time(old), old, own_time(new), new)
