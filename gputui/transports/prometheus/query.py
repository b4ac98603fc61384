"""What a refresh asks Prometheus: the one PromQL query, the server's URL, and the bounded HTTP exchange."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.parse

from gputui import __version__
from gputui.core.fleet import DEFAULT_STALE_AFTER_S as DEFAULT_STALE_AFTER_S
from gputui.core.link import LinkError
from gputui.core.text import visible
from gputui.transports import pacing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_METRICS: dict[str, str] = {
    FB_USED: "used",
    "DCGM_FI_DEV_FB_FREE": "free",
    "DCGM_FI_DEV_FB_RESERVED": "reserved",
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_GPU_TEMP": "temp",
    "DCGM_FI_DEV_POWER_USAGE": "power",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_FI_DEV_XID_ERROR": "xid",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remap_pending",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remap_failure",
    "DCGM_FI_DEV_ROW_REMAP_FAILED": "remap_failure",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remap_corr",
    "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": "remap_corr",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remap_unc",
    "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": "remap_unc",
    "DCGM_FI_DEV_RETIRED_PENDING": "retired_pending",
    "DCGM_FI_DEV_PAGE_RETIRED_PENDING": "retired_pending",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_unc_volatile",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "ecc_unc_aggregate",
    "DCGM_FI_DEV_GPU_RECOVERY_ACTION": "recovery",
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": "recovery",
}
"""The DCGM exporter's metric names (its default counters file; the remap, retirement, ECC and recovery-action
ones where its counters file has them) -> the figure each one gives. dcgm-exporter names a series as the
field is named in its counters file, so both spellings of a field DCGM renamed are read (``DCGM_RENAMED``)."""

TIME_ANCHORS = (FB_USED, "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
"""The series whose own sample time dates a GPU, in order: a GPU is as current as its FB_USED series, else as
its first other one of the default counters (some releases send no memory series for a GPU in MIG mode).
``or`` keeps one time per label set, and timestamp() of a plain selector is the sample's own time."""

DCGM_RENAMED: dict[str, str] = {
    "DCGM_FI_DEV_XID_ERRORS": "DCGM_FI_DEV_XID_ERROR",
    "DCGM_FI_DEV_RETIRED_PENDING": "DCGM_FI_DEV_PAGE_RETIRED_PENDING",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "DCGM_FI_DEV_ROW_REMAP_FAILED",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": "DCGM_FI_DEV_GPU_RECOVERY_ACTION",
}
"""An older name of a DCGM field -> its name now (``dcgm_fields.h``): DCGM 4.6 renamed the Xid (field 230),
page-retirement (392) and row-remap (393-395) fields and keeps the old names as deprecated aliases; field 1523
(the driver's recovery action, ``nvmlDeviceGpuRecoveryAction_t``) was ``…_GET_GPU_RECOVERY_ACTION`` in 4.5.
dcgm-exporter's default counters file still has the old names, so a fleet may send either, or both while it is
rolled out: for one GPU, the series of the current name wins."""


def _server_metrics() -> dict[str, tuple[str, str]]:
    # The engines' own table: a fleet reads the request gauges a server's metrics reader reads. A figure kept
    # under a label of a shared family (Triton's) cannot be a name of its own here and is left out.
    from gputui.core.servers.metrics import ENGINE_METRIC_NAMES

    out: dict[str, tuple[str, str]] = {}
    for entry in ENGINE_METRIC_NAMES:
        for figure, selectors in (("running", entry.running), ("waiting", entry.waiting)):
            for selector in selectors:
                if not selector.labels:
                    out.setdefault(selector.name, (entry.engine, figure))
    return out


SERVER_METRICS: dict[str, tuple[str, str]] = _server_metrics()
"""Inference-server gauges -> (server kind, figure)."""

GPUTUI_PREFIX = "gputui_"
GPUTUI_MEMORY_USED = "gputui_gpu_memory_used_bytes"
"""The gputui exporter's anchor series, as FB_USED is DCGM's (``core.fleet.schema``)."""
UP = "up"
PART_LABEL = "gputui_part"
"""Marks the series of the answer's parts other than the values, with one of the ``*_PART`` values."""
TIME_PART = "time"
"""Own sample time of a GPU's live series (``TIME_ANCHORS``)."""
GONE_PART = "gone"
"""An FB_USED series of the lookback without a current sample."""
UP_TIME_PART = "up_time"
"""When a target that is down now was last up."""
DEFAULT_HOST_LABEL = "Hostname"
HOST_LABEL_FALLBACKS = ("Hostname", "hostname", "exported_Hostname", "exported_hostname", "exported_instance")
"""The labels that name a host, in order, after the configured one and before ``instance``: dcgm-exporter's
``Hostname``, its ``hostname`` (the spelling of its main branch), then either as Prometheus keeps it when the
target has a label of that name, then the ``instance`` a federated or pushed series brought with it."""
INSTANCE = "instance"
GPU_INSTANCE_ID = "GPU_I_ID"
GPU_INSTANCE_PROFILE = "GPU_I_PROFILE"

LOOKBACK = "5m"
"""How long Prometheus still lists a host whose exporter died: its own lookback."""
LOOKBACK_STEP = "5s"
"""When a target was last up is found to within this (older, never newer)."""
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
            '(write label="value", label=~"regex", label!="value" or label!~"regex", comma-separated)'
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
    times = " or ".join(f'timestamp({{__name__="{name}"{extra}}})' for name in TIME_ANCHORS)
    others = "|".join([UP, *SERVER_METRICS])

    def part(expression: str, value: str) -> str:
        return f'label_replace({expression}, "{PART_LABEL}", "{value}", "", "")'

    ours = f'{{__name__="{GPUTUI_MEMORY_USED}"{extra}}}'
    # ``a or b`` hashes the label set of every series of both sides, and a chain of ``or`` is evaluated from
    # the left, so a series of its first term is hashed again at every link. DCGM's values are most of the
    # answer: they stand alone on the left, the other parts are joined in parentheses on the right. The answer
    # is the same series in the same order (a series matching one on its left is left out either way).
    rest = " or ".join(
        [
            part(f"({times})", TIME_PART),
            part(f"last_over_time({anchor}[{LOOKBACK}]) unless {anchor}", GONE_PART),
            f'{{__name__=~"{GPUTUI_PREFIX}.+"{extra}}}',
            part(f"timestamp({ours})", TIME_PART),
            part(f"last_over_time({ours}[{LOOKBACK}]) unless {ours}", GONE_PART),
            part(
                f"last_over_time(timestamp({UP} == 1)[{LOOKBACK}:{LOOKBACK_STEP}])"
                f" unless on({INSTANCE}, job) {UP} == 1",
                UP_TIME_PART,
            ),
            f'{{__name__=~"{others}"}}',
        ]
    )
    return f'{{__name__=~"{dcgm}"{extra}}} or ({rest})'


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
    # The HTTP client (with email, http.client and ssl) is loaded by the first query, not by every
    # process that imports the fleet's shapes (the TUI of local and SSH hosts does).
    import urllib.error
    import urllib.request

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
        document = pacing.loads(raw)
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
