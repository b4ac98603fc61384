"""Inference-server health endpoints, probed from the GPU host itself.

``http://127.0.0.1:30000/health`` is the host's own loopback: the collector probes its own host. Probing never
blocks the snapshot stream: ``prober.EndpointProber`` runs one scheduler thread and at most one probe thread
per URL, and its ``samples()`` only copies the latest state under a lock never held during I/O. The states are
``protocol.ENDPOINT_STATES``.

* ``urls``: what a URL means (generating, credentials, how it is shown);
* ``discovery``: the /health URLs of sglang and vLLM launchers in the process list, on this host's addresses;
* ``http`` and ``probe``: one bounded HTTP/1.1 GET and what its answer means, imported only when a probe runs;
* ``metrics_filter``: a server's ``/metrics`` body cut down to the series the client reads;
* ``prober``: what is probed, how often, and the latest state of each endpoint.
"""

ENDPOINT_DEFAULT_DEADLINE_S = 30.0
"""Total deadline of one probe: longer than sglang's own 20 s generation check behind /health."""
ENDPOINT_DEFAULT_INTERVAL_S = 5.0
"""Seconds between the starts of two probes of one URL."""
ENDPOINT_GENERATE_MIN_INTERVAL_S = 10.0
"""Floor on the interval of endpoints that generate tokens (/health_generate): the monitor must not load
the server it watches. It cannot be configured lower."""
ENDPOINT_MIN_GAP_S = 0.5
"""Least pause between the end of one probe of a URL and the start of the next (a slow endpoint is not
probed back to back)."""
ENDPOINT_BODY_CAP_BYTES = 4096
"""At most this much of a response body is read; the rest is never downloaded."""
ENDPOINT_HEADER_CAP_BYTES = 16384
ENDPOINT_DETAIL_MAX_CHARS = 120
ENDPOINT_MAX_URL_CHARS = 2048
ENDPOINT_MAX_URLS = 32
"""At most this many configured URLs, and as many discovered ones: bounds the probe threads."""
ENDPOINT_DISCOVERED_LINGER_S = 60.0
"""A discovered endpoint stays listed this long after its launcher vanished, so that the operator sees it go
DOWN after a kill instead of silently disappearing."""
