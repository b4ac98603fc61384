"""The fleet source: DCGM exporter metrics for every GPU host, read from Prometheus's HTTP API.

One instant query per refresh (``GET /api/v1/query``) reads, for every host the user's label matcher selects:

* the DCGM exporter's gauges (``DCGM_METRICS``): memory used/free/reserved (MiB), utilisation (%),
  temperature (°C), power (W) and the last XID error;
* ``timestamp()`` of ``DCGM_FI_DEV_FB_USED``, the own time of each GPU's newest sample. An instant query
  answers with its evaluation time, and an instant selector looks back up to 5 minutes: without the sample's
  own time, five-minute-old figures would pass for current ones;
* the ``DCGM_FI_DEV_FB_USED`` series of the last ``LOOKBACK`` that have no current sample: when an exporter
  dies Prometheus marks its series stale and the instant selector drops them at once, so only this part
  still knows the host and its GPUs (their old values are not used);
* for every scrape target that is down, when its ``up`` was last 1 (a subquery over one series per target,
  to within ``LOOKBACK_STEP``): the age of a dead exporter's data;
* ``up`` of every scrape target and the vLLM/sglang request gauges (``SERVER_METRICS``), attached to the
  hosts they run on.

The parts other than the values carry the label ``PART_LABEL``: ``or`` matches label sets without the metric
name, and would otherwise drop them as duplicates of the values. Every part reads at most one series per GPU
or per target at one instant, except the stale series' lookback, which reads their raw samples: a subquery
over every GPU's series costs Prometheus far more (one selector evaluation per step and series).

Hosts are keyed by a configurable label (``Hostname`` by default, which dcgm-exporter sets; under Kubernetes
it is the exporter pod's name) and fall back to ``instance``; GPUs by ``UUID``, else ``gpu``. MIG series
(``GPU_I_ID``/``GPU_I_PROFILE``) are instances of their GPU. Each host becomes a ``HostSnapshot`` of the
usual shape with ``mode`` "prometheus": what DCGM cannot know (processes, device holders) stays empty or
None, and a host whose data is old says so in ``error`` with no figures at all, never the old ones as
current.

Every label value and every byte of the answer comes from machines we do not control: values are parsed
defensively (NaN, infinities, garbage become None), and text put into error lines goes through
``textsafe.visible``. Standard library only; no Textual or Rich.
"""

from __future__ import annotations

import json
import math
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gputui import __version__
from gputui.agent.protocol import HEALTH_STATE_DOWN, HEALTH_STATE_UP, MODE_PROMETHEUS
from gputui.core.analysis import age_text
from gputui.core.model import Finding, Gpu, HealthSample, HostSnapshot
from gputui.core.textsafe import visible
from gputui.transports.base import LinkError

FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_METRICS: dict[str, str] = {
    FB_USED: "used",
    "DCGM_FI_DEV_FB_FREE": "free",
    "DCGM_FI_DEV_FB_RESERVED": "reserved",
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_GPU_TEMP": "temp",
    "DCGM_FI_DEV_POWER_USAGE": "power",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
}
"""The DCGM exporter's metric names (its default counters file) -> the figure each one gives."""

SERVER_METRICS: dict[str, tuple[str, str]] = {
    "vllm:num_requests_running": ("vllm", "running"),
    "vllm:num_requests_waiting": ("vllm", "waiting"),
    "sglang:num_running_reqs": ("sglang", "running"),
    "sglang:num_queue_reqs": ("sglang", "waiting"),
}
"""Inference-server gauges -> (server kind, figure)."""

UP = "up"
PART_LABEL = "gputui_part"
"""Marks the series of the answer's parts other than the values, with one of the ``*_PART`` values."""
TIME_PART = "time"
"""Own sample time of a live FB_USED series."""
GONE_PART = "gone"
"""An FB_USED series of the lookback without a current sample."""
UP_TIME_PART = "up_time"
"""When a target that is down now was last up."""
DEFAULT_HOST_LABEL = "Hostname"
INSTANCE = "instance"
GPU_INSTANCE_ID = "GPU_I_ID"
GPU_INSTANCE_PROFILE = "GPU_I_PROFILE"

LOOKBACK = "5m"
"""How long Prometheus still lists a host whose exporter died: its own lookback."""
LOOKBACK_STEP = "5s"
"""When a target was last up is found to within this (older, never newer)."""
DEFAULT_STALE_AFTER_S = 90.0
"""A sample older than this is stale even when Prometheus still serves it (no staleness marker was written:
federation, a restart, exporters with explicit timestamps). Longer than the one-minute scrape interval that
Prometheus uses by default."""
DEFAULT_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 256 << 20
"""The answer is read up to this size: 500 hosts of 8 GPUs take about 10 MB."""
_READ_CHUNK = 1 << 16

_LABEL_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_STRING = r'"(?:[^"\\\n]|\\.)*"' + r"|'(?:[^'\\\n]|\\.)*'"
_ONE_MATCHER = rf"\s*({_LABEL_NAME})\s*(?:=~|!~|!=|=)\s*(?:{_STRING})\s*"
_MATCHER_RE = re.compile(_ONE_MATCHER)
_MATCHERS_RE = re.compile(rf"(?:{_ONE_MATCHER})(?:,(?:{_ONE_MATCHER}))*,?\s*")


class PrometheusError(LinkError):
    """Prometheus could not be asked or answered badly; ``str()`` is one line naming the server and why."""


def parse_matcher(text: str | None) -> str:
    """The user's label matcher list (``instance=~"gpu-.*",job="dcgm"``), checked and normalised.

    Outer braces are optional. It is put inside every DCGM selector of the query, so it must be a list of
    ``label op "value"`` terms and nothing else.

    Raises:
        ValueError: one line saying what is wrong.
    """
    if text is None:
        return ""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1].strip()
    if not body:
        return ""
    if not _MATCHERS_RE.fullmatch(body):
        raise ValueError(
            f"--match: not a label matcher list: {visible(text, 120)!r} "
            "(write label=\"value\", label=~\"regex\", label!=\"value\" or label!~\"regex\", comma-separated)"
        )
    names = [m.group(1) for m in _MATCHER_RE.finditer(body)]
    if "__name__" in names:
        raise ValueError("--match: __name__ cannot be matched: gputui chooses the metric names itself")
    return body.rstrip().rstrip(",")


def build_query(matcher: str = "") -> str:
    """The one PromQL expression a refresh asks (see the module docstring for its four parts).

    ``matcher`` (already checked by ``parse_matcher``) narrows the DCGM series; ``up`` and the server gauges
    are read whole and attached to the matched hosts by their labels.
    """
    extra = f",{matcher}" if matcher else ""
    dcgm = "|".join(DCGM_METRICS)
    anchor = f'{{__name__="{FB_USED}"{extra}}}'
    others = "|".join([UP, *SERVER_METRICS])

    def part(expression: str, value: str) -> str:
        return f'label_replace({expression}, "{PART_LABEL}", "{value}", "", "")'

    return " or ".join([
        f'{{__name__=~"{dcgm}"{extra}}}',
        part(f"timestamp({anchor})", TIME_PART),
        part(f"last_over_time({anchor}[{LOOKBACK}]) unless {anchor}", GONE_PART),
        part(
            f"last_over_time(timestamp({UP} == 1)[{LOOKBACK}:{LOOKBACK_STEP}])"
            f" unless on({INSTANCE}, job) {UP} == 1",
            UP_TIME_PART,
        ),
        f'{{__name__=~"{others}"}}',
    ])


def normalise_url(url: str) -> str:
    """The server's base URL as the user gave it, checked: http(s), a host, no query or fragment.

    A URL that already ends in ``/api/v1/query`` is taken as that endpoint's base.

    Raises:
        ValueError: one line.
    """
    text = url.strip()
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:
        raise ValueError(f"--prometheus: not a URL: {visible(url, 120)!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--prometheus: not an http(s) URL: {visible(url, 120)!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"--prometheus: the URL must not have a query or fragment: {visible(url, 120)!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/api/v1/query"):
        path = path[: -len("/api/v1/query")]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def shown_url(url: str) -> str:
    """``url`` for messages: without credentials, control characters made visible."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        pass
    return visible(url, 120)


# --- the HTTP exchange ---------------------------------------------------------------------------------


def _error_body_line(raw: bytes) -> str:
    """Prometheus's own error text from an error answer's JSON body, else a short visible excerpt."""
    try:
        document = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        document = None
    if isinstance(document, dict) and document.get("error"):
        kind = document.get("errorType")
        text = f"{kind}: {document['error']}" if kind else str(document["error"])
        return visible(text, 240)
    excerpt = raw[:200].decode("utf-8", "replace").strip()
    return visible(excerpt, 160) if excerpt else "no body"


def _read_bounded(response: Any, deadline: float, limit: int) -> bytes:
    """The body, read chunk by chunk until EOF, the deadline or ``limit`` bytes (then PrometheusError)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = response.read1(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise OverflowError
        chunks.append(chunk)


def fetch(
    base_url: str, query: str, timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int = MAX_RESPONSE_BYTES
) -> dict[str, Any]:
    """Ask ``/api/v1/query`` and return the decoded JSON answer of a successful query.

    The whole exchange (connect, headers, body) has one deadline, so a server that accepts and then drips
    bytes cannot hold a refresh longer than ``timeout_s``.

    Raises:
        PrometheusError: unreachable, too slow, an HTTP or API error, not a Prometheus answer.
    """
    where = f"prometheus {shown_url(base_url)}"
    url = f"{base_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    request = urllib.request.Request(  # noqa: S310 - the scheme was checked by normalise_url
        url, headers={"Accept": "application/json", "User-Agent": f"gputui/{__version__}"}
    )
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            raw = _read_bounded(response, deadline, max_bytes)
    except urllib.error.HTTPError as exc:
        try:
            body = _read_bounded(exc, deadline, 64 << 10)
        except (OSError, TimeoutError, OverflowError, ValueError):
            body = b""
        raise PrometheusError(f"{where}: answered HTTP {exc.code}: {_error_body_line(body)}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise PrometheusError(f"{where}: no answer within {timeout_s:g} s") from None
        if isinstance(reason, OSError):
            text = reason.strerror or str(reason)
        else:
            text = str(reason)
        raise PrometheusError(f"{where}: cannot connect: {visible(text, 200)}") from None
    except TimeoutError:
        raise PrometheusError(f"{where}: no answer within {timeout_s:g} s") from None
    except OverflowError:
        raise PrometheusError(f"{where}: the answer is larger than {max_bytes >> 20} MiB") from None
    except (OSError, ValueError) as exc:  # resets, a bad status line, a bad chunk size
        raise PrometheusError(f"{where}: {type(exc).__name__}: {visible(str(exc), 200)}") from None
    except Exception as exc:  # noqa: BLE001 - http.client raises its own HTTPException family
        raise PrometheusError(f"{where}: {type(exc).__name__}: {visible(str(exc), 200)}") from None
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        excerpt = raw[:80].decode("utf-8", "replace")
        raise PrometheusError(
            f"{where}: not a Prometheus API answer (not JSON: {visible(excerpt, 60)!r})"
        ) from None
    if not isinstance(document, dict):
        raise PrometheusError(f"{where}: not a Prometheus API answer (no JSON object)")
    if document.get("status") != "success":
        raise PrometheusError(f"{where}: query failed: {_error_body_line(raw)}")
    return document


# --- the model of a fleet ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigInstance:
    """One MIG GPU instance as DCGM reports it (``GPU_I_ID``, ``GPU_I_PROFILE``)."""

    instance_id: str
    profile: str | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    utilization_pct: int | None = None


@dataclass(frozen=True)
class FleetHost:
    """One host of the fleet: its snapshot in the common shape, plus what only the fleet view shows.

    Attributes:
        name: The host label's value (``Hostname`` by default), else the exporter's ``instance``.
        snapshot: ``mode`` "prometheus"; ``time`` the newest sample's own time; ``error`` says why there are
            no figures (stale, exporter down); ``findings`` the XID errors; ``health`` the servers.
        ssh_host: The name an SSH target is made from: the host label's value, else ``instance`` without
            its port.
        data_time: Epoch seconds (Prometheus's clock) of the newest sample of the host, None when unknown.
        age_s: How old that sample was when the query was evaluated.
        stale: No current data: the exporter died, its series went stale, or the data is too old.
        exporter_up: ``up`` of the host's exporter scrape target(s); None when Prometheus has no ``up`` for
            them (federated data, a matcher that leaves them out).
        instances: The exporter ``instance`` labels the host's series came from.
        xid: GPU index -> last XID error code, for GPUs whose last XID is not 0.
        mig: GPU index -> its MIG instances.
        gone: The host has no series in Prometheus any more; it is known from an earlier refresh.
    """

    name: str
    snapshot: HostSnapshot
    ssh_host: str
    data_time: float | None = None
    age_s: float | None = None
    stale: bool = False
    exporter_up: bool | None = None
    instances: tuple[str, ...] = ()
    xid: dict[int, int] = field(default_factory=dict)
    mig: dict[int, tuple[MigInstance, ...]] = field(default_factory=dict)
    gone: bool = False


@dataclass(frozen=True)
class FleetSample:
    """One refresh: every host, in name order.

    Attributes:
        eval_time: Epoch seconds (Prometheus's clock) the query was evaluated at; None when the answer had no
            series at all.
        ignored_series: Series that named no host or no GPU (left out).
    """

    hosts: tuple[FleetHost, ...]
    eval_time: float | None = None
    ignored_series: int = 0


# --- parsing an answer ---------------------------------------------------------------------------------


def _number(text: Any) -> float | None:
    """A sample value: Prometheus sends numbers as strings ("NaN", "+Inf" included); None unless finite."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _whole(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _host_part(instance: str) -> str:
    """``gpu-a:9400`` -> ``gpu-a``; ``[fe80::1]:9400`` -> ``fe80::1``; anything else as it is."""
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    if instance.count(":") == 1:
        return instance.split(":", 1)[0]
    return instance


@dataclass(slots=True)
class _Series:
    """One series of the answer: its labels, its value and its own sample time (looked up when needed)."""

    labels: dict[str, str]
    value: float | None
    time: float | None = None


@dataclass
class _GpuParts:
    """Everything the answer holds about one GPU (key: UUID, else ``gpu``)."""

    key: str
    index: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    figures: dict[str, _Series] = field(default_factory=dict)
    """figure name -> the chosen series (the newest of duplicates)."""
    mig: dict[str, dict[str, _Series]] = field(default_factory=dict)
    """GPU_I_ID -> figure name -> series."""
    mig_profiles: dict[str, str] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)
    """Own sample times of its current FB_USED series."""
    live: bool = False
    """An FB_USED value of this GPU is in the instant result: a series of it is not marked stale."""


@dataclass
class _HostParts:
    name: str
    ssh_host: str
    gpus: dict[str, _GpuParts] = field(default_factory=dict)
    instances: set[str] = field(default_factory=set)


def _newer(old_time: float | None, old: _Series, new_time: float | None, new: _Series) -> bool:
    """Whether ``new`` replaces ``old`` among duplicate series: the newer own time, then a number."""
    if new_time is not None and (old_time is None or new_time > old_time):
        return True
    return new_time == old_time and old.value is None and new.value is not None


def _series_key(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """A series' identity across the answer's parts: its labels without the metric name and the part mark."""
    rest = dict(labels)
    rest.pop("__name__", None)
    rest.pop(PART_LABEL, None)
    return frozenset(rest.items())


_GPU_LABELS = ("UUID", "modelName", "pci_bus_id", "device")


class _Parser:
    """Turns the answer's series into hosts; one instance per answer."""

    def __init__(self, host_label: str, stale_after_s: float) -> None:
        self.host_label = host_label
        self.stale_after_s = stale_after_s
        self.hosts: dict[str, _HostParts] = {}
        self.up: dict[str, bool] = {}
        self.servers: list[_Series] = []
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

    def own_time(self, series: _Series) -> float | None:
        """The own sample time of a DCGM series: that of the FB_USED series with the same labels.

        Needed only to choose among duplicate series, so the map is built on first use: making the identity
        of every series of a 500-host answer costs more than everything else the parser does.
        """
        if series.time is None:
            if self._times is None:
                self._times = {}
                for labels, at in self._time_series:
                    key = _series_key(labels)
                    self._times[key] = max(at, self._times.get(key, at))
            series.time = self._times.get(_series_key(series.labels))
        return series.time

    def host_of(self, labels: Mapping[str, str]) -> _HostParts | None:
        name = labels.get(self.host_label) or ""
        instance = labels.get(INSTANCE) or ""
        ssh_host = name
        if not name:
            name = instance
            ssh_host = _host_part(instance)
        if not name:
            return None
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = _HostParts(name, ssh_host or name)
        if instance:
            host.instances.add(instance)
        job = labels.get("job")
        if job:
            self.dcgm_jobs.add(job)
        return host

    def gpu_of(self, host: _HostParts, labels: Mapping[str, str]) -> _GpuParts | None:
        uuid = labels.get("UUID") or ""
        index_text = labels.get("gpu") or ""
        key = uuid or (f"gpu:{index_text}" if index_text else "")
        if not key:
            return None
        gpu = host.gpus.get(key)
        if gpu is None:
            gpu = host.gpus[key] = _GpuParts(key)
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
        values: list[tuple[str, _Series]] = []
        for item in result:
            if not isinstance(item, dict):
                self.ignored += 1
                continue
            labels = item.get("metric")
            sample = item.get("value")
            if not isinstance(labels, dict) or not isinstance(sample, list) or len(sample) != 2:
                self.ignored += 1
                continue
            at = _number(sample[0])
            if at is not None and (self.eval_time is None or at > self.eval_time):
                self.eval_time = at
            name = labels.get("__name__")
            value = _number(sample[1])
            part = labels.get(PART_LABEL)
            if part is None and name is not None:
                values.append((name, _Series(labels, value)))
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

    def _gpu_from(self, labels: Mapping[str, str]) -> _GpuParts | None:
        host = self.host_of(labels)
        gpu = None if host is None else self.gpu_of(host, labels)
        if gpu is None:
            self.ignored += 1
        return gpu

    def _dcgm(self, name: str, series: _Series) -> None:
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
        if old is None or _newer(self.own_time(old), old, self.own_time(series), series):
            slot[figure] = series
        if name == FB_USED:
            gpu.live = True


def _figure(figures: Mapping[str, _Series], name: str) -> float | None:
    series = figures.get(name)
    return None if series is None else series.value


def _memory(figures: Mapping[str, _Series]) -> tuple[int | None, int | None, int | None]:
    """(used, total, reserved) MiB: DCGM's used excludes the reserved part, as nvidia-smi's does."""
    used = _figure(figures, "used")
    free = _figure(figures, "free")
    reserved = _figure(figures, "reserved")
    total = None if used is None or free is None else used + free + (reserved or 0)
    return _whole(used), _whole(total), _whole(reserved)


def _mig_instances(parts: _GpuParts) -> tuple[MigInstance, ...]:
    out = []
    for mig_id in sorted(parts.mig, key=lambda i: (len(i), i)):
        figures = parts.mig[mig_id]
        used, total, _ = _memory(figures)
        out.append(
            MigInstance(
                instance_id=mig_id,
                profile=parts.mig_profiles.get(mig_id),
                memory_used_mib=used,
                memory_total_mib=total,
                utilization_pct=_whole(_figure(figures, "util")),
            )
        )
    return tuple(out)


def _sum(values: Iterable[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _mig_max(parts: _GpuParts, figure: str) -> float | None:
    """The largest ``figure`` any MIG instance of the GPU reports (device-wide ones repeat per instance)."""
    values = [v for figures in parts.mig.values() if (v := _figure(figures, figure)) is not None]
    return max(values, default=None)


def _build_gpu(
    parts: _GpuParts, index: int, stale: bool, stale_reason: str
) -> tuple[Gpu, int | None, tuple[MigInstance, ...]]:
    """The model's GPU from its parts (no figures when stale), its last XID (None: no error) and its MIG
    instances."""
    labels = parts.labels
    name, uuid, pci_bus_id = labels.get("modelName"), labels.get("UUID"), labels.get("pci_bus_id")
    if stale:
        return Gpu(index=index, name=name, uuid=uuid, pci_bus_id=pci_bus_id, error=stale_reason), None, ()
    figures = parts.figures
    used, total, reserved = _memory(figures)
    instances = _mig_instances(parts) if parts.mig else ()
    xid = _figure(figures, "xid")
    temp = _figure(figures, "temp")
    power = _figure(figures, "power")
    if instances:
        if used is None:
            # MIG without GPU-level memory series: the GPU holds what its instances hold.
            used = _sum(i.memory_used_mib for i in instances)
            total = _sum(i.memory_total_mib for i in instances)
        xid = _mig_max(parts, "xid") if xid is None else xid
        temp = _mig_max(parts, "temp") if temp is None else temp
        power = _mig_max(parts, "power") if power is None else power
    gpu = Gpu(
        index=index,
        name=name,
        uuid=uuid,
        pci_bus_id=pci_bus_id,
        memory_used_mib=used,
        memory_total_mib=total,
        memory_reserved_mib=reserved,
        utilization_pct=_whole(_figure(figures, "util")),
        temperature_c=_whole(temp),
        power_w=None if power is None else round(power, 1),
        error=None if used is not None else "DCGM sent no memory figure for this GPU",
    )
    code = _whole(xid)
    return gpu, (code if code else None), instances


def _last_is(age_s: float | None) -> str:
    """"; the last is 12 s old", or nothing when the age is not known."""
    return "" if age_s is None else f"; the last is {age_text(age_s)} old"


def xid_finding(target: str, gpu_index: int, code: int) -> Finding:
    """The finding that says a GPU's last XID error is not 0 (the SSH view and ``dmesg`` tell more)."""
    return Finding(
        kind="xid",
        target=target,
        gpu_index=gpu_index,
        detail=f"GPU{gpu_index} reported XID {code} (DCGM_FI_DEV_XID_ERRORS)",
        action="look at the host's kernel log (dmesg | grep -i xid); open it over SSH for its processes",
    )


def _index_gpus(parts: Iterable[_GpuParts]) -> list[tuple[int, _GpuParts]]:
    """GPUs in index order; a GPU without a ``gpu`` label gets the next free index (by its key)."""
    known = sorted((p for p in parts if p.index is not None), key=lambda p: (p.index, p.key))
    taken = {p.index for p in known}
    out: list[tuple[int, _GpuParts]] = [(p.index, p) for p in known if p.index is not None]
    next_index = 0
    for p in sorted((p for p in parts if p.index is None), key=lambda p: p.key):
        while next_index in taken:
            next_index += 1
        taken.add(next_index)
        out.append((next_index, p))
    out.sort(key=lambda pair: pair[0])
    return out


def _servers_by_host(
    parser: _Parser, aliases: Mapping[str, str | None]
) -> dict[str, dict[str, dict[str, Any]]]:
    """host name -> server instance -> {"kind", figure: value}: each server attached to the host it runs on.

    A series with the host label names its host; else its ``instance`` without the port must name exactly one
    host (or that host's exporter address). Anything else is left out: several hosts behind one address
    (loopback, a NAT) cannot be told apart.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for series in parser.servers:
        kind, figure = SERVER_METRICS[series.labels.get("__name__", "")]
        host = series.labels.get(parser.host_label)
        instance = series.labels.get(INSTANCE) or ""
        if not host or host not in parser.hosts:
            host = aliases.get(_host_part(instance)) if instance else None
        if not host:
            continue
        entry = out.setdefault(host, {}).setdefault(instance or kind, {"kind": kind})
        if series.value is not None:
            entry[figure] = entry.get(figure, 0.0) + series.value
    return out


def _alias_map(parser: _Parser) -> dict[str, str | None]:
    """Address or name -> the one host it stands for (None: it stands for several)."""
    aliases: dict[str, str | None] = {}
    for host in parser.hosts.values():
        names = {host.name, host.ssh_host} | {_host_part(i) for i in host.instances}
        for alias in names:
            if not alias:
                continue
            aliases[alias] = host.name if aliases.get(alias, host.name) == host.name else None
    return aliases


def server_detail(kind: str, figures: Mapping[str, Any]) -> str:
    """"vllm: 3 running, 1 waiting" (a figure the server did not send is left out)."""
    parts = [f"{int(figures[f])} {f}" for f in ("running", "waiting") if figures.get(f) is not None]
    return f"{kind}: " + (", ".join(parts) if parts else "no request figures")


def parse_answer(
    document: Mapping[str, Any],
    host_label: str = DEFAULT_HOST_LABEL,
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
    known_servers: Mapping[str, tuple[str, str]] | None = None,
    list_down_targets: bool = True,
    claimed_instances: Iterable[str] = (),
) -> FleetSample:
    """The fleet in one ``/api/v1/query`` answer of ``build_query``'s expression.

    Args:
        document: The decoded JSON answer.
        host_label: The label that names a host (``instance`` when a series lacks it).
        stale_after_s: A GPU whose newest sample is older than this has no current data.
        known_servers: Server instance -> (host, kind) from earlier answers: a server whose gauges went away
            while its ``up`` is 0 is shown DOWN on its host.
        list_down_targets: List a target of a DCGM scrape job that is down and has left no series in the
            lookback as a host of its own (named by its ``instance``). Off when a label matcher narrows the
            fleet: whether it would select such a target cannot be told.
        claimed_instances: Exporter addresses of hosts known from earlier answers (not listed again).

    Raises:
        PrometheusError: the answer is not an instant vector.
    """
    data = document.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(result, list):
        raise PrometheusError("prometheus: the answer is not an instant vector")
    parser = _Parser(host_label, stale_after_s)
    try:
        parser.feed(result)
        if list_down_targets:
            _add_down_targets(parser, set(claimed_instances))
        now = parser.eval_time
        servers = _servers_by_host(parser, _alias_map(parser))
        for instance, (host_name, kind) in (known_servers or {}).items():
            if host_name in parser.hosts and parser.up.get(instance) is False:
                servers.setdefault(host_name, {}).setdefault(instance, {"kind": kind})
        hosts = [_build_host(parser.hosts[n], parser, now, servers.get(n, {})) for n in sorted(parser.hosts)]
    except (TypeError, AttributeError, ValueError) as exc:
        cause = f"{type(exc).__name__}: {visible(str(exc), 80)}"
        raise PrometheusError(f"prometheus: malformed answer ({cause})") from None
    return FleetSample(hosts=tuple(hosts), eval_time=now, ignored_series=parser.ignored)


def _add_down_targets(parser: _Parser, claimed: set[str]) -> None:
    """A host for each target of a DCGM job that is down and that no host's series name."""
    claimed |= {instance for host in parser.hosts.values() for instance in host.instances}
    for instance, job in parser.down_targets:
        if job in parser.dcgm_jobs and instance not in claimed and instance not in parser.hosts:
            parser.hosts[instance] = _HostParts(instance, _host_part(instance), instances={instance})


def _build_host(
    parts: _HostParts, parser: _Parser, now: float | None, servers: Mapping[str, Mapping[str, Any]]
) -> FleetHost:
    ups = [parser.up[i] for i in sorted(parts.instances) if i in parser.up]
    exporter_up = None if not ups else any(ups)  # one working scrape of a duplicated exporter is enough
    # A GPU's data is as old as its newest sample; without a current one, as old as the last time its
    # exporter was up.
    last_up = max((parser.up_time[i] for i in parts.instances if i in parser.up_time), default=None)
    newest = max((t for g in parts.gpus.values() for t in g.times), default=last_up)
    host_age = None if newest is None or now is None else max(0.0, now - newest)
    gpus: list[Gpu] = []
    xid: dict[int, int] = {}
    mig: dict[int, tuple[MigInstance, ...]] = {}
    stale_count = 0
    for index, gpu_parts in _index_gpus(parts.gpus.values()):
        gpu_newest = max(gpu_parts.times, default=last_up)
        age = None if gpu_newest is None or now is None else max(0.0, now - gpu_newest)
        too_old = age is not None and age > parser.stale_after_s
        stale = not gpu_parts.live or too_old
        reason = f"no current data{_last_is(age)}"
        gpu, code, instances = _build_gpu(gpu_parts, index, stale, reason)
        stale_count += stale
        gpus.append(gpu)
        if code:
            xid[index] = code
        if instances:
            mig[index] = instances
    host_stale = stale_count == len(gpus) if gpus else exporter_up is False
    error = None
    if host_stale:
        why = "its exporter is down (up=0)" if exporter_up is False else "its series went stale"
        error = f"no current data: {why}{_last_is(host_age)}"
        if not gpus:
            error += f", and Prometheus has none of its GPU series in the last {LOOKBACK}"
        gpus = [replace(g, error=None) for g in gpus]  # one host-level reason, not eight copies
    elif exporter_up is False:
        error = "its exporter is down (up=0), but Prometheus still serves its last data"
    health = tuple(
        HealthSample(
            url=instance,
            state=(
                None
                if parser.up.get(instance) is None
                else (HEALTH_STATE_UP if parser.up[instance] else HEALTH_STATE_DOWN)
            ),
            detail=server_detail(str(figures["kind"]), figures),
            checked_at=now,
        )
        for instance, figures in sorted(servers.items())
    )
    snapshot = HostSnapshot(
        target=parts.name,
        hostname=parts.ssh_host,
        time=newest,
        error=error,
        mode=MODE_PROMETHEUS,
        gpus=tuple(gpus),
        findings=tuple(xid_finding(parts.name, i, c) for i, c in sorted(xid.items())),
        health=health,
    )
    return FleetHost(
        name=parts.name,
        snapshot=snapshot,
        ssh_host=parts.ssh_host,
        data_time=newest,
        age_s=host_age,
        stale=host_stale,
        exporter_up=exporter_up,
        instances=tuple(sorted(parts.instances)),
        xid=xid,
        mig=mig,
    )


# --- the source ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetSettings:
    """How to read the fleet.

    Attributes:
        url: Prometheus's base URL (checked by ``normalise_url``).
        matcher: Label matchers for the DCGM series (checked by ``parse_matcher``).
        host_label: The label naming a host.
        stale_after_s: Samples older than this are not current data.
        timeout_s: Deadline of one query, connect to last byte.
    """

    url: str
    matcher: str = ""
    host_label: str = DEFAULT_HOST_LABEL
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    timeout_s: float = DEFAULT_TIMEOUT_S


Fetcher = Callable[[str, str, float], Mapping[str, Any]]


class PrometheusSource:
    """Reads the fleet, one query per ``sample()``, and remembers hosts and servers between samples.

    A host that had series in an earlier answer and has none now (its exporter died longer ago than the
    ``LOOKBACK``, or Prometheus lost it) stays listed as gone, with the age of its last data.
    """

    def __init__(self, settings: FleetSettings, fetcher: Fetcher | None = None) -> None:
        self.settings = settings
        self.query = build_query(settings.matcher)
        self._fetch: Fetcher = fetcher or fetch
        self._known: dict[str, FleetHost] = {}
        self._servers: dict[str, tuple[str, str]] = {}

    def sample(self) -> FleetSample:
        """Ask once and return every host, gone ones included.

        Raises:
            PrometheusError: one line naming the server and the cause.
        """
        document = self._fetch(self.settings.url, self.query, self.settings.timeout_s)
        try:
            sample = parse_answer(
                document, self.settings.host_label, self.settings.stale_after_s, self._servers,
                list_down_targets=not self.settings.matcher,
                # A host named by its address stays that host when its exporter is down.
                claimed_instances=[i for h in self._known.values() for i in h.instances if i != h.name],
            )
        except PrometheusError as exc:
            cause = str(exc).split(": ", 1)[-1]
            raise PrometheusError(f"prometheus {shown_url(self.settings.url)}: {cause}") from None
        return self._remember(sample)

    def _remember(self, sample: FleetSample) -> FleetSample:
        current = {host.name: host for host in sample.hosts}
        hosts = list(sample.hosts)
        for name, old in self._known.items():
            if name not in current:
                hosts.append(gone_host(old, sample.eval_time))
        hosts.sort(key=lambda h: h.name)
        self._known = {host.name: host for host in hosts}
        for host in sample.hosts:
            for health in host.snapshot.health:
                kind = (health.detail or "").split(":", 1)[0]
                self._servers[health.url] = (host.name, kind)
        return replace(sample, hosts=tuple(hosts))


def gone_host(old: FleetHost, now: float | None) -> FleetHost:
    """``old`` as a host Prometheus no longer has any series of: GPUs by name only, the age of its data."""
    age = None if old.data_time is None or now is None else max(0.0, now - old.data_time)
    gpus = tuple(
        Gpu(index=g.index, name=g.name, uuid=g.uuid, pci_bus_id=g.pci_bus_id) for g in old.snapshot.gpus
    )
    snapshot = replace(
        old.snapshot,
        gpus=gpus,
        error=f"no series in Prometheus any more{_last_is(age)}",
        findings=(),
        health=(),
        verdict=None,
    )
    return replace(old, snapshot=snapshot, age_s=age, stale=True, xid={}, mig={}, gone=True)
