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
``text.visible``. Standard library only; no Textual or Rich.

* ``query``: the query, the server's URL, the bounded HTTP exchange;
* ``series`` and ``parse``: an answer turned into hosts (``fleet``: the shapes it yields);
* ``source``: one query per refresh, and the hosts remembered between refreshes.
"""

from gputui.transports.prometheus.parse import parse_answer, server_detail, xid_finding
from gputui.transports.prometheus.query import (
    DCGM_METRICS,
    DEFAULT_HOST_LABEL,
    DEFAULT_STALE_AFTER_S,
    DEFAULT_TIMEOUT_S,
    FB_USED,
    PART_LABEL,
    SERVER_METRICS,
    PrometheusError,
    build_query,
    fetch,
    normalise_url,
    parse_matcher,
    shown_url,
)
from gputui.transports.prometheus.source import FleetSettings, PrometheusSource, gone_host

__all__ = [
    "DCGM_METRICS",
    "DEFAULT_HOST_LABEL",
    "DEFAULT_STALE_AFTER_S",
    "DEFAULT_TIMEOUT_S",
    "FB_USED",
    "PART_LABEL",
    "SERVER_METRICS",
    "FleetSettings",
    "PrometheusError",
    "PrometheusSource",
    "build_query",
    "fetch",
    "gone_host",
    "normalise_url",
    "parse_answer",
    "parse_matcher",
    "server_detail",
    "shown_url",
    "xid_finding",
]
