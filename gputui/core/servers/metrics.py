"""An inference server's own figures, read from its Prometheus text: requests, KV cache, tokens generated.

The text is parsed with ``prometheus_client``'s parser; this module closes the gaps that parser leaves for a
monitor that must never show a wrong figure:

- a malformed line makes the parser give up on the whole text, so each metric is parsed on its own: a bad
  line blanks only the metric it names;
- NaN, infinities and negative counts parse as numbers: they blank their metric;
- the same series twice parses twice: the metric is ambiguous and blank;
- a body cut at a size cap can end in a line that still parses (``... 12`` cut to ``... 1``): the lines of
  the name being read at the cut are discarded (``metrics_filter.select_metric_lines``);
- a counter declared as ``# TYPE foo counter`` comes back renamed ``foo_total``: both names are accepted.

Which series add up follows the engines' documented meaning: vLLM reports per engine (``engine`` label,
one per data-parallel rank) and per model, sglang per scheduler; both add up. sglang can also report every
tensor-, pipeline- and expert-parallel rank of one data-parallel group (``tp_rank``, ``pp_rank``, ...);
those ranks serve the same requests, so their series count once (the largest). The KV cache usage is the
fullest engine's: that is the one that queues and preempts.

The engines are one table (``ENGINE_METRIC_NAMES``): vLLM, sglang (and the underscore names its router and
model gateway serve for their workers, one ``source`` or ``worker_addr`` per worker, which add up), Hugging
Face TGI, llama.cpp's server, TensorRT-LLM's own server and Triton with the TensorRT-LLM backend. A body is
read as the engine most of its names belong to. Some engines count a request's tokens only when it ends (TGI's
histogram sum, llama.cpp's counter); each also has a figure that moves while it decodes (``progress``), which
keeps a long generation from reading as a stall.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from gputui.agent.servers import metrics_filter as mf
from gputui.agent.servers.metrics_filter import METRICS_BODY_CAP_BYTES, METRICS_NAMES, select_metric_lines
from gputui.core.model import Record, replace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ENGINE_VLLM = "vllm"
ENGINE_SGLANG = "sglang"
ENGINE_TGI = "tgi"
ENGINE_LLAMACPP = "llamacpp"
ENGINE_TRTLLM = "trtllm"
ENGINE_TRITON = "triton"

RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank", "cp_rank"})
"""Labels of ranks inside one data-parallel group: their series describe the same requests."""
FRACTION_SLACK = 1e-6
"""A usage fraction may pass 1 by this much (float rounding) and is then read as 1."""
METRICS_JSON_KEYS = ("engine", "running", "waiting", "kv_cache_usage", "generation_tokens_per_s")
"""The keys of ``health[].metrics`` in the JSON output, in order."""

SeriesKey = tuple[tuple[str, str], ...]
"""A series' labels, sorted, rank labels left out: what identifies one counter across samples."""


class MetricsUnreadable(Exception):
    """Nothing usable in a metrics text; ``str()`` is the one-line reason."""


class Selector(Record):
    """The series of one figure: a sample name, and the label values they must have (Triton keeps several
    figures in one family, told apart by a label)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def pick(self, values: Mapping[SeriesKey, float]) -> dict[SeriesKey, float]:
        """The series of ``values`` this selector takes, its own labels left out of their keys."""
        if not self.labels:
            return dict(values)
        wanted = set(self.labels)
        return {
            tuple(item for item in key if item not in wanted): value
            for key, value in values.items()
            if wanted <= set(key)
        }


def _sel(name: str, **labels: str) -> Selector:
    return Selector(name, tuple(sorted(labels.items())))


class EngineMetricNames(Record):
    """Where one engine keeps each figure. Each figure lists its selectors in order of preference: the first
    whose series are present is read (a newer name before an older one)."""

    engine: str
    running: tuple[Selector, ...]
    waiting: tuple[Selector, ...]
    kv_cache_usage: tuple[Selector, ...] = ()
    generation_tokens: tuple[Selector, ...] = ()
    """A counter of tokens generated (some engines count a request's tokens when it ends)."""
    preemptions: tuple[Selector, ...] = ()
    engine_tokens_per_s: tuple[Selector, ...] = ()
    """The engine's own tokens/s gauge: shown when the counter has not moved."""
    progress: tuple[Selector, ...] = ()
    """A figure that changes while the engine decodes (a throughput gauge it sets as it logs, a count of
    forward passes or decode calls): progress even when the token counter waits for requests to end."""

    def selectors(self) -> tuple[Selector, ...]:
        return (
            *self.running,
            *self.waiting,
            *self.kv_cache_usage,
            *self.generation_tokens,
            *self.preemptions,
            *self.engine_tokens_per_s,
            *self.progress,
        )

    def all_names(self) -> frozenset[str]:
        """Every name this engine's figures are read from."""
        return frozenset(selector.name for selector in self.selectors())


ENGINE_METRIC_NAMES = (
    EngineMetricNames(
        ENGINE_VLLM,
        running=(_sel(mf.METRICS_VLLM_RUNNING),),
        waiting=(_sel(mf.METRICS_VLLM_WAITING),),
        kv_cache_usage=(_sel(mf.METRICS_VLLM_KV_CACHE_USAGE), _sel(mf.METRICS_VLLM_GPU_CACHE_USAGE)),
        generation_tokens=(_sel(mf.METRICS_VLLM_GENERATION_TOKENS),),
        preemptions=(_sel(mf.METRICS_VLLM_PREEMPTIONS),),
    ),
    EngineMetricNames(
        ENGINE_SGLANG,
        running=(_sel(mf.METRICS_SGLANG_RUNNING), _sel(mf.METRICS_SGLANG_ROUTER_RUNNING)),
        waiting=(_sel(mf.METRICS_SGLANG_WAITING), _sel(mf.METRICS_SGLANG_ROUTER_WAITING)),
        kv_cache_usage=(_sel(mf.METRICS_SGLANG_TOKEN_USAGE), _sel(mf.METRICS_SGLANG_ROUTER_TOKEN_USAGE)),
        generation_tokens=(
            _sel(mf.METRICS_SGLANG_GENERATION_TOKENS),
            _sel(mf.METRICS_SGLANG_ROUTER_GENERATION_TOKENS),
        ),
        engine_tokens_per_s=(
            _sel(mf.METRICS_SGLANG_GEN_THROUGHPUT),
            _sel(mf.METRICS_SGLANG_ROUTER_GEN_THROUGHPUT),
        ),
        progress=(_sel(mf.METRICS_SGLANG_GEN_THROUGHPUT), _sel(mf.METRICS_SGLANG_ROUTER_GEN_THROUGHPUT)),
    ),
    EngineMetricNames(
        ENGINE_TGI,
        running=(_sel(mf.METRICS_TGI_RUNNING),),
        waiting=(_sel(mf.METRICS_TGI_WAITING),),
        generation_tokens=(_sel(mf.METRICS_TGI_GENERATED_TOKENS),),
        progress=(_sel(mf.METRICS_TGI_FORWARD_PASSES),),
    ),
    EngineMetricNames(
        ENGINE_LLAMACPP,
        running=(_sel(mf.METRICS_LLAMACPP_RUNNING),),
        waiting=(_sel(mf.METRICS_LLAMACPP_WAITING),),
        kv_cache_usage=(_sel(mf.METRICS_LLAMACPP_KV_CACHE_USAGE),),
        generation_tokens=(_sel(mf.METRICS_LLAMACPP_GENERATION_TOKENS),),
        engine_tokens_per_s=(_sel(mf.METRICS_LLAMACPP_TOKENS_PER_S),),
        progress=(_sel(mf.METRICS_LLAMACPP_DECODE_CALLS),),
    ),
    EngineMetricNames(
        ENGINE_TRTLLM,
        running=(_sel(mf.METRICS_TRTLLM_RUNNING),),
        waiting=(_sel(mf.METRICS_TRTLLM_WAITING),),
        kv_cache_usage=(_sel(mf.METRICS_TRTLLM_KV_CACHE_USAGE),),
        generation_tokens=(_sel(mf.METRICS_TRTLLM_GENERATION_TOKENS),),
    ),
    EngineMetricNames(
        ENGINE_TRITON,
        running=(_sel(mf.METRICS_TRITON_TRT_LLM_REQUESTS, request_type="scheduled"),),
        waiting=(
            _sel(mf.METRICS_TRITON_TRT_LLM_REQUESTS, request_type="waiting"),
            _sel(mf.METRICS_TRITON_PENDING),
        ),
        kv_cache_usage=(_sel(mf.METRICS_TRITON_TRT_LLM_KV_CACHE, kv_cache_block_type="fraction"),),
        generation_tokens=(
            _sel(mf.METRICS_TRITON_OUTPUT_TOKENS, response_metric_type="total_output_tokens"),
        ),
        progress=(_sel(mf.METRICS_TRITON_TRT_LLM_GENERAL, general_type="iteration_counter"),),
    ),
)
"""Every engine gputui reads, by the names its documentation and its code give its figures: the one table the
collector's filter (``metrics_filter.METRICS_NAMES``), this parser and the fleet's server gauges follow."""

ENGINES = tuple(entry.engine for entry in ENGINE_METRIC_NAMES)
NO_SERVER_METRICS = "no metrics of a known inference server in the text"


class ServerMetrics(Record):
    """One reading of a server's metrics. None wherever the figure is unknown (absent, unreadable, cut).

    Attributes:
        engine: One of ``ENGINES`` (``"vllm"``, ``"sglang"``, ``"tgi"``, ``"llamacpp"``, ``"trtllm"``,
            ``"triton"``).
        sampled_at: Epoch seconds at which the collector read the body (its clock).
        running: Requests being executed, every engine together.
        waiting: Requests queued, every engine together.
        kv_cache_usage: Fraction (0-1) of the fullest engine's KV cache in use.
        generation_tokens_total: Tokens generated since the server started, every engine together.
        preemptions_total: Requests preempted since the server started (vLLM).
        engine_tokens_per_s: The engine's own throughput figure (sglang's ``gen_throughput``, llama.cpp's
            ``predicted_tokens_seconds``): set when the engine logs, so it may keep its last value when the
            engine stops. Shown where the counter has not moved, never trusted for a stall on its own.
        progress: The engine's figure that changes while it decodes (``EngineMetricNames.progress``).
        generation_tokens_per_s: Derived from the generated-token counter between this reading and the one
            before (:func:`with_rate`); None for a first reading.
        generation_tokens_series: The counter per series, to tell a restart (a series going down) from
            progress.
        unreadable: ``(name, reason)`` for each metric present but unreadable (malformed, NaN, duplicated,
            cut at a cap).
    """

    engine: str
    sampled_at: float
    running: int | None = None
    waiting: int | None = None
    kv_cache_usage: float | None = None
    generation_tokens_total: int | None = None
    preemptions_total: int | None = None
    engine_tokens_per_s: float | None = None
    progress: float | None = None
    generation_tokens_per_s: float | None = None
    generation_tokens_series: tuple[tuple[SeriesKey, float], ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()

    @property
    def pending(self) -> int | None:
        """Requests running or waiting; None when neither figure is known."""
        if self.running is None and self.waiting is None:
            return None
        return (self.running or 0) + (self.waiting or 0)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``health[].metrics``: exactly ``METRICS_JSON_KEYS``, null where unknown."""
        return {
            "engine": self.engine,
            "running": self.running,
            "waiting": self.waiting,
            "kv_cache_usage": None if self.kv_cache_usage is None else round(self.kv_cache_usage, 4),
            "generation_tokens_per_s": (
                None if self.generation_tokens_per_s is None else round(self.generation_tokens_per_s, 1)
            ),
        }


def metrics_json(metrics: ServerMetrics | None) -> dict[str, Any]:
    """``metrics.to_dict()``, or the same keys all null when there is no reading."""
    return dict.fromkeys(METRICS_JSON_KEYS) if metrics is None else metrics.to_dict()


class _Unreadable(Exception):
    pass


def _read_series(name: str, lines: list[bytes]) -> dict[SeriesKey, float]:
    """Every series of one metric: labels → value. Raises _Unreadable with the reason."""
    # Imported when a server's metrics are first read: the commands that read none (kill) never load it.
    from prometheus_client.parser import text_string_to_metric_families

    text = "\n".join(line.decode("utf-8", "replace") for line in lines) + "\n"
    try:
        families = list(text_string_to_metric_families(text))
    except Exception:  # ValueError for a malformed line; the lax parser can raise others on hostile text
        raise _Unreadable("malformed") from None
    values: dict[SeriesKey, float] = {}
    for family in families:
        for sample in family.samples:
            if sample.name not in (name, name + "_total"):
                raise _Unreadable("malformed")
            key = tuple(sorted(sample.labels.items()))
            value = float(sample.value)
            if key in values:
                raise _Unreadable("duplicated series")
            if not math.isfinite(value) or value < 0:
                raise _Unreadable(f"not a usable figure: {value}")
            values[key] = value
    return values


def _by_group(values: Mapping[SeriesKey, float]) -> dict[SeriesKey, float]:
    """Series merged over rank labels (the largest value of the ranks of one group)."""
    groups: dict[SeriesKey, float] = {}
    for key, value in values.items():
        group = tuple(item for item in key if item[0] not in RANK_LABELS)
        groups[group] = max(value, groups.get(group, value))
    return groups


def _total(values: Mapping[SeriesKey, float] | None) -> float | None:
    return None if values is None else sum(_by_group(values).values())


def _count(values: Mapping[SeriesKey, float] | None) -> int | None:
    total = _total(values)
    return None if total is None else round(total)


def _fraction(values: Mapping[SeriesKey, float]) -> float:
    """The largest of ``values`` as a fraction; raises _Unreadable when it is not one."""
    fullest = max(values.values())
    if fullest > 1.0 + FRACTION_SLACK:
        raise _Unreadable(f"not a fraction: {fullest}")
    return min(fullest, 1.0)


def _pick_engine(found: Iterable[str]) -> EngineMetricNames | None:
    """The engine most of the names found belong to (on a tie, the first listed); None for none."""
    present = set(found)
    best = max(ENGINE_METRIC_NAMES, key=lambda entry: len(entry.all_names() & present))
    return best if best.all_names() & present else None


def _figure(
    selectors: tuple[Selector, ...], series: Mapping[str, dict[SeriesKey, float]]
) -> tuple[Selector | None, dict[SeriesKey, float] | None]:
    """The series of the first of ``selectors`` present (None, None when none is)."""
    for selector in selectors:
        values = series.get(selector.name)
        if values is None:
            continue
        picked = selector.pick(values)
        if picked:
            return selector, picked
    return None, None


def parse_server_metrics(text: str, sampled_at: float, dropped: Iterable[str] = ()) -> ServerMetrics:
    """Read a server's figures from its Prometheus text (filtered on the host, or a whole body).

    Args:
        text: The exposition text. Only the lines of ``metrics_filter.METRICS_NAMES`` are looked at; text
            past ``METRICS_BODY_CAP_BYTES`` is cut off as the collector would.
        sampled_at: Epoch seconds at which the body was read.
        dropped: Names the collector dropped (over a cap, or cut): unknown, never partial.

    Returns:
        The reading; ``generation_tokens_per_s`` is None (see :func:`with_rate`).

    Raises:
        MetricsUnreadable: Not one of the names is in the text, or every one present is unreadable.
    """
    body = text.encode("utf-8", "backslashreplace")
    truncated = len(body) > METRICS_BODY_CAP_BYTES
    groups, cut = select_metric_lines(body[:METRICS_BODY_CAP_BYTES], METRICS_NAMES, truncated)
    unreadable = {name: "over a size cap" for name in (*dropped, *cut) if name in METRICS_NAMES}
    series: dict[str, dict[SeriesKey, float]] = {}
    for name, lines in groups.items():
        try:
            values = _read_series(name, lines)
        except _Unreadable as exc:
            unreadable[name] = str(exc)
            continue
        if values:  # a "# TYPE" line without samples says nothing
            series[name] = values
    engine = _pick_engine([*series, *unreadable])
    if engine is None:
        raise MetricsUnreadable(NO_SERVER_METRICS)
    mine = engine.all_names()
    if not mine & set(series):
        name, reason = next((n, r) for n, r in unreadable.items() if n in mine)
        raise MetricsUnreadable(f"{engine.engine} metrics unreadable: {name}: {reason}")
    kv_cache_usage = None
    kv_selector, kv_values = _figure(engine.kv_cache_usage, series)
    if kv_selector is not None and kv_values is not None:
        try:
            kv_cache_usage = _fraction(kv_values)
        except _Unreadable as exc:
            unreadable[kv_selector.name] = str(exc)
    _, generation = _figure(engine.generation_tokens, series)
    generation_groups = _by_group(generation) if generation is not None else {}
    return ServerMetrics(
        engine=engine.engine,
        sampled_at=sampled_at,
        running=_count(_figure(engine.running, series)[1]),
        waiting=_count(_figure(engine.waiting, series)[1]),
        kv_cache_usage=kv_cache_usage,
        generation_tokens_total=_count(generation),
        preemptions_total=_count(_figure(engine.preemptions, series)[1]),
        engine_tokens_per_s=_total(_figure(engine.engine_tokens_per_s, series)[1]),
        progress=_total(_figure(engine.progress, series)[1]),
        generation_tokens_series=tuple(sorted(generation_groups.items())),
        unreadable=tuple((name, reason) for name, reason in unreadable.items() if name in mine),
    )


class CounterDelta(Record):
    """The generated-token counter between two readings."""

    tokens: float
    """Tokens generated in between (after a reset, what the new series counted since)."""
    seconds: float
    reset: bool
    """A series went down: the server (or one engine) restarted in between."""


def generation_delta(previous: ServerMetrics | None, current: ServerMetrics) -> CounterDelta | None:
    """How far the generated-token counter moved from ``previous`` to ``current``.

    Per series, as Prometheus's ``increase()`` does: a series that went down restarted from zero, so its
    whole new value counts; a series new in ``current`` counts nothing yet.

    Returns:
        None when there is no earlier reading of the same engine, the counter is unknown in either, or
        ``current`` is not later than ``previous``.
    """
    if previous is None or previous.engine != current.engine:
        return None
    seconds = current.sampled_at - previous.sampled_at
    if seconds <= 0 or not previous.generation_tokens_series or not current.generation_tokens_series:
        return None
    before = dict(previous.generation_tokens_series)
    tokens = 0.0
    reset = False
    for key, value in current.generation_tokens_series:
        old = before.get(key)
        if old is None:
            continue
        if value < old:
            reset = True
            tokens += value
        else:
            tokens += value - old
    return CounterDelta(tokens, seconds, reset)


def with_rate(previous: ServerMetrics | None, current: ServerMetrics) -> ServerMetrics:
    """``current`` with ``generation_tokens_per_s`` derived from the counter since ``previous``."""
    delta = generation_delta(previous, current)
    if delta is None:
        return current
    return replace(current, generation_tokens_per_s=delta.tokens / delta.seconds)
