"""An inference server's Prometheus text, cut down on the GPU host to the series gputui reads.

A real ``/metrics`` body of an inference server (vLLM, sglang, TGI, llama.cpp, TensorRT-LLM, Triton) is tens
of KB, almost all of it histogram buckets; gputui reads about a dozen series of it. :func:`filter_metrics`
keeps the sample lines of the names in ``METRICS_NAMES`` and their ``# TYPE`` lines, so what crosses the wire
per sample is a few hundred bytes and is still a well-formed exposition. The client parses what arrives with
a maintained parser (``gputui.core.servers``); nothing here interprets a value.

It runs on the GPU host beside the health probes. Nothing in a body can make the output large: an over-long
line or a name with too many series drops that name (its value would otherwise be partial), and the whole
output has a cap.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable

# The names gputui reads, from the engines' documented metrics: the collector filters on them and the client
# picks its figures by them, so both sides import them from here.
METRICS_VLLM_RUNNING = "vllm:num_requests_running"
METRICS_VLLM_WAITING = "vllm:num_requests_waiting"
METRICS_VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
"""KV-cache usage as a fraction (1 means 100 percent), despite the name."""
METRICS_VLLM_GPU_CACHE_USAGE = "vllm:gpu_cache_usage_perc"
"""The older name of ``vllm:kv_cache_usage_perc`` (same meaning), still served by older releases."""
METRICS_VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
METRICS_VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
METRICS_SGLANG_RUNNING = "sglang:num_running_reqs"
METRICS_SGLANG_WAITING = "sglang:num_queue_reqs"
METRICS_SGLANG_TOKEN_USAGE = "sglang:token_usage"  # noqa: S105 - a metric name
"""Fraction of the KV pool's tokens in use (0-1)."""
METRICS_SGLANG_GENERATION_TOKENS = "sglang:generation_tokens_total"
METRICS_SGLANG_GEN_THROUGHPUT = "sglang:gen_throughput"
"""The scheduler's own tokens/s, set when it logs decode statistics: it keeps its value when the scheduler
stops."""

# The same figures under the underscore names the sglang router and model gateway serve when they gather their
# workers' metrics (``/engine_metrics``: ``sglang_num_running_reqs{source="worker1"}``).
METRICS_SGLANG_ROUTER_RUNNING = "sglang_num_running_reqs"
METRICS_SGLANG_ROUTER_WAITING = "sglang_num_queue_reqs"
METRICS_SGLANG_ROUTER_TOKEN_USAGE = "sglang_token_usage"  # noqa: S105 - a metric name
METRICS_SGLANG_ROUTER_GENERATION_TOKENS = "sglang_generation_tokens_total"
METRICS_SGLANG_ROUTER_GEN_THROUGHPUT = "sglang_gen_throughput"
# Hugging Face text-generation-inference (its router's metrics).
METRICS_TGI_RUNNING = "tgi_batch_current_size"
METRICS_TGI_WAITING = "tgi_queue_size"
METRICS_TGI_GENERATED_TOKENS = "tgi_request_generated_tokens_sum"
"""The sum of the generated-tokens histogram: tokens of the requests finished so far."""
METRICS_TGI_FORWARD_PASSES = "tgi_batch_inference_duration_count"
"""Forward passes so far (prefill and decode): it moves while the batch decodes."""
# llama.cpp's llama-server (``--metrics``).
METRICS_LLAMACPP_RUNNING = "llamacpp:requests_processing"
METRICS_LLAMACPP_WAITING = "llamacpp:requests_deferred"
METRICS_LLAMACPP_KV_CACHE_USAGE = "llamacpp:kv_cache_usage_ratio"
"""Served by older releases only."""
METRICS_LLAMACPP_GENERATION_TOKENS = "llamacpp:tokens_predicted_total"
METRICS_LLAMACPP_TOKENS_PER_S = "llamacpp:predicted_tokens_seconds"
METRICS_LLAMACPP_DECODE_CALLS = "llamacpp:n_decode_total"
"""Calls of ``llama_decode()`` so far: it moves while a generation runs, the token counter when it ends."""
# TensorRT-LLM's own server (trtllm-serve).
METRICS_TRTLLM_RUNNING = "trtllm_num_requests_running"
METRICS_TRTLLM_WAITING = "trtllm_num_requests_waiting"
METRICS_TRTLLM_KV_CACHE_USAGE = "trtllm_kv_cache_utilization"
METRICS_TRTLLM_GENERATION_TOKENS = "trtllm_generation_tokens_total"
# Triton Inference Server with the TensorRT-LLM backend: one family, a label per figure.
METRICS_TRITON_TRT_LLM_REQUESTS = "nv_trt_llm_request_metrics"
"""``request_type`` is ``scheduled`` (running), ``waiting``, ``context``, ``active`` or ``max``."""
METRICS_TRITON_TRT_LLM_KV_CACHE = "nv_trt_llm_kv_cache_block_metrics"
"""``kv_cache_block_type="fraction"`` is the KV cache in use (0-1)."""
METRICS_TRITON_TRT_LLM_GENERAL = "nv_trt_llm_general_metrics"
"""``general_type="iteration_counter"``: the batch manager's iterations so far."""
METRICS_TRITON_PENDING = "nv_inference_pending_request_count"
"""Triton's own queue, per model: the waiting figure of a model without the TensorRT-LLM backend's."""
METRICS_TRITON_OUTPUT_TOKENS = "nv_llm_output_token_len_sum"
"""The TensorRT-LLM backend's output-token histogram sum (``response_metric_type="total_output_tokens"``)."""

METRICS_NAMES_VLLM = (
    METRICS_VLLM_RUNNING,
    METRICS_VLLM_WAITING,
    METRICS_VLLM_KV_CACHE_USAGE,
    METRICS_VLLM_GPU_CACHE_USAGE,
    METRICS_VLLM_GENERATION_TOKENS,
    METRICS_VLLM_PREEMPTIONS,
)
METRICS_NAMES_SGLANG = (
    METRICS_SGLANG_RUNNING,
    METRICS_SGLANG_WAITING,
    METRICS_SGLANG_TOKEN_USAGE,
    METRICS_SGLANG_GENERATION_TOKENS,
    METRICS_SGLANG_GEN_THROUGHPUT,
    METRICS_SGLANG_ROUTER_RUNNING,
    METRICS_SGLANG_ROUTER_WAITING,
    METRICS_SGLANG_ROUTER_TOKEN_USAGE,
    METRICS_SGLANG_ROUTER_GENERATION_TOKENS,
    METRICS_SGLANG_ROUTER_GEN_THROUGHPUT,
)
METRICS_NAMES_TGI = (
    METRICS_TGI_RUNNING,
    METRICS_TGI_WAITING,
    METRICS_TGI_GENERATED_TOKENS,
    METRICS_TGI_FORWARD_PASSES,
)
METRICS_NAMES_LLAMACPP = (
    METRICS_LLAMACPP_RUNNING,
    METRICS_LLAMACPP_WAITING,
    METRICS_LLAMACPP_KV_CACHE_USAGE,
    METRICS_LLAMACPP_GENERATION_TOKENS,
    METRICS_LLAMACPP_TOKENS_PER_S,
    METRICS_LLAMACPP_DECODE_CALLS,
)
METRICS_NAMES_TRTLLM = (
    METRICS_TRTLLM_RUNNING,
    METRICS_TRTLLM_WAITING,
    METRICS_TRTLLM_KV_CACHE_USAGE,
    METRICS_TRTLLM_GENERATION_TOKENS,
)
METRICS_NAMES_TRITON = (
    METRICS_TRITON_TRT_LLM_REQUESTS,
    METRICS_TRITON_TRT_LLM_KV_CACHE,
    METRICS_TRITON_TRT_LLM_GENERAL,
    METRICS_TRITON_PENDING,
    METRICS_TRITON_OUTPUT_TOKENS,
)
METRICS_NAMES = (
    METRICS_NAMES_VLLM
    + METRICS_NAMES_SGLANG
    + METRICS_NAMES_TGI
    + METRICS_NAMES_LLAMACPP
    + METRICS_NAMES_TRTLLM
    + METRICS_NAMES_TRITON
)

METRICS_BODY_CAP_BYTES = 1 << 20
"""At most this much of a ``/metrics`` body is read; a longer one is cut (``truncated``)."""
METRICS_MAX_LINE_BYTES = 1024
"""A kept line longer than this drops its name: label values are the server's to choose."""
METRICS_MAX_SERIES_PER_NAME = 64
"""More series than this under one name (engines, ranks, models) drops the name."""
METRICS_FILTERED_CAP_BYTES = 16384
"""The most a filtered body may be; names that would pass it are dropped whole, last ones first."""

_NAME_RE = re.compile(rb"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_line_name(line: bytes) -> bytes | None:
    """The metric name a sample line starts with, or None for comments, blank lines and anything else.

    ``line`` is one line without its line break; surrounding blanks are ignored, as the text format allows.
    """
    match = _NAME_RE.match(line.strip())
    return None if match is None else match.group()


def _type_line_name(line: bytes, wanted: dict[bytes, str]) -> str | None:
    """The wanted name a ``# TYPE name type`` line declares (``# TYPE foo counter``: ``foo_total``)."""
    parts = line.split(None, 3)
    if len(parts) < 4 or parts[0] != b"#" or parts[1] != b"TYPE":
        return None
    return wanted.get(parts[2]) or wanted.get(parts[2] + b"_total")


def select_metric_lines(
    body: bytes,
    names: Iterable[str] = METRICS_NAMES,
    truncated: bool = False,
    max_line_bytes: int = METRICS_MAX_LINE_BYTES,
    max_series: int = METRICS_MAX_SERIES_PER_NAME,
) -> tuple[dict[str, list[bytes]], list[str]]:
    """The lines of ``names`` in ``body``, grouped by name, and the names that had to be dropped.

    Args:
        body: A Prometheus text exposition (``\\n`` or ``\\r\\n`` line ends).
        names: The sample names to keep (``vllm:generation_tokens_total``, not the family name).
        truncated: Whether ``body`` was cut at a size cap. Its unterminated last line is then discarded,
            and so is every line of the name being read at the cut (its series may go on past it): the
            partial line's name, or the last whole line's when the cut left no name to read.
        max_line_bytes: A kept line longer than this drops its name.
        max_series: A name with more sample lines than this is dropped.

    Returns:
        ``(groups, dropped)``: for each name found, its ``# TYPE`` line(s) then its sample lines, stripped,
        in body order; and the names dropped (over a cap, or cut), in ``names`` order. A dropped name has no
        group: its value is unknown rather than partial.
    """
    wanted: dict[bytes, str] = {}
    for wanted_name in names:
        wanted[wanted_name.encode("ascii")] = wanted_name
    # At a cut, the name being read is the one on the partial last line when that line got past its name,
    # else (cut at a line end, or inside a name) the last whole sample line's: its series may go on.
    tail_name: str | None = None
    tail_closes = False
    if truncated:
        end = body.rfind(b"\n") + 1
        tail = body[end:].strip()
        body = body[:end]
        token = metric_line_name(tail)
        tail_closes = tail.startswith(b"#") or (token is not None and len(tail) > len(token))
        tail_name = None if token is None or not tail_closes else wanted.get(token)
    starts = tuple(wanted) + (b"#",)
    groups: dict[str, list[bytes]] = {}
    series: dict[str, int] = {}
    bad = set()
    last_sample: str | None = None
    name: str | None = None
    for line in body.split(b"\n"):
        line = line.strip()
        if not line.startswith(starts):
            if line:
                last_sample = None  # another metric's line: the block before it is complete
            continue
        is_sample = not line.startswith(b"#")
        if is_sample:
            token = metric_line_name(line)
            name = None if token is None else wanted.get(token)
            last_sample = name
        else:
            name = _type_line_name(line, wanted)
            last_sample = None
        if name is None or name in bad:
            continue
        if len(line) > max_line_bytes:
            bad.add(name)
            continue
        if is_sample:
            series[name] = series.get(name, 0) + 1
            if series[name] > max_series:
                bad.add(name)
                continue
        groups.setdefault(name, []).append(line)
    being_read = tail_name if tail_closes else last_sample
    if truncated and being_read is not None:
        bad.add(being_read)
    for name in bad:
        groups.pop(name, None)
    dropped = [name for name in wanted.values() if name in bad]
    return groups, dropped


def filter_metrics(
    body: bytes,
    truncated: bool = False,
    names: Iterable[str] = METRICS_NAMES,
    cap_bytes: int = METRICS_FILTERED_CAP_BYTES,
) -> tuple[bytes, list[str]]:
    """``body`` cut down to the lines of ``names`` (and their ``# TYPE`` lines): what goes on the wire.

    Args:
        body: The ``/metrics`` body as read (at most ``METRICS_BODY_CAP_BYTES``).
        truncated: Whether the read stopped at its cap (see :func:`select_metric_lines`).
        names: The sample names to keep.
        cap_bytes: The most the result may be; a name that would pass it is dropped whole.

    Returns:
        ``(text, dropped)``: a Prometheus text exposition holding each kept name's lines together (each line
        ending in ``\\n``; empty when nothing was found), and the names dropped by a cap or a cut, whose
        values the client must then treat as unknown.
    """
    names = tuple(names)
    groups, dropped = select_metric_lines(body, names, truncated)
    out: list[bytes] = []
    size = 0
    for name in names:
        lines = groups.get(name)
        if not lines:
            continue
        block = b"\n".join(lines) + b"\n"
        if size + len(block) > cap_bytes:
            dropped.append(name)
            continue
        out.append(block)
        size += len(block)
    return b"".join(out), dropped
