"""Record the ``/api/v1/query`` answers the fleet unit tests, snapshots and benchmark replay.

    .venv/bin/python tests/data/prometheus/record.py [fleet.json] [demo.json]

Starts the fake DCGM exporters and a real Prometheus (``tests/integration/prometheus.py``), sets up a fleet,
lets one exporter die, and writes the answer to gputui's own query (``build_query``). ``fleet.json``, for
the tests:

* ``gpu-a``: 8 GPUs; GPU3 holds 41236 MiB at 97 % and 84 °C and reported XID 79; a vLLM server on it (a
  scrape target labelled ``Hostname="gpu-a"``) runs 3 requests with 1 waiting.
* ``gpu-b``: 4 GPUs; GPU0 in MIG mode with two 3g.40gb instances.
* ``gpu-c``: 2 GPUs; its exporter is stopped before the answer is taken (stale, up=0).
* a host whose exporter sets no ``Hostname`` label: keyed by its ``instance``.

``demo.json``, for the README's screenshot: sixteen 8-GPU hosts of an inference cluster, some serving (two
vLLM servers), some idle, one with an XID, one whose exporter died.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from gputui.transports.prometheus import build_query, fetch  # noqa: E402
from tests.integration.prometheus import Fleet  # noqa: E402

HERE = Path(__file__).parent


Figures = list[tuple[str, "int | None", dict[str, float]]]


def _record(
    hosts: list[dict], servers: dict[str, str], figures: Figures, series: int, dead: str, after_s: float
) -> dict:
    """Serve ``hosts`` (server endpoints labelled with the host they run on), set ``figures``, wait until
    Prometheus has ``series`` FB_USED series and a few samples of each, stop ``dead``'s exporter, and return
    the answer to gputui's query ``after_s`` after Prometheus marked its series stale."""
    with tempfile.TemporaryDirectory(prefix="gputui-record-") as tmp:
        fleet = Fleet(Path(tmp))
        try:
            exporters = fleet.exporter(hosts)
            server = fleet.prometheus(servers)
            for host, gpu, values in figures:
                exporters.set(host, gpu, **values)
            server.wait_until(lambda: len(server.query("DCGM_FI_DEV_FB_USED")) >= series, "every GPU scraped")
            time.sleep(8)  # a few samples of each, as of any exporter that ran for a while
            exporters.stop(dead)
            gone = f'DCGM_FI_DEV_FB_USED{{Hostname="{dead}"}}'
            server.wait_until(lambda: not server.query(gone), f"{dead} stale")
            time.sleep(after_s)
            return dict(fetch(server.url, build_query(), 10.0))
        finally:
            fleet.close()


def record_tests() -> dict:
    hosts = [
        {"name": "gpu-a", "gpus": 8},
        {"name": "gpu-b", "gpus": 4, "mig": {"0": ["3g.40gb", "3g.40gb"]}},
        {"name": "gpu-c", "gpus": 2},
        {"name": "gpu-d", "gpus": 8, "hostname_label": False},
        {"name": "vllm-a", "kind": "vllm"},
    ]
    figures: Figures = [
        ("gpu-a", 3, {"used": 41236, "util": 97, "temp": 84, "power": 612.4, "xid": 79}),
        ("vllm-a", None, {"running": 3, "waiting": 1}),
    ]
    return _record(hosts, {"vllm-a": "gpu-a"}, figures, series=23, dead="gpu-c", after_s=2)


def record_demo() -> dict:
    rnd = random.Random(7)
    names = [f"a100-{i:02d}" for i in range(1, 9)] + [f"h100-{i:02d}" for i in range(1, 9)]
    hosts = [{"name": name, "gpus": 8} for name in names]
    hosts += [{"name": "vllm-h100-02", "kind": "vllm"}, {"name": "vllm-h100-05", "kind": "vllm"}]
    figures: Figures = []
    for name in ("h100-02", "h100-05", "a100-03", "a100-07"):
        for gpu in range(8):
            figures.append(
                (
                    name,
                    gpu,
                    {
                        "used": rnd.randint(60000, 78000),
                        "util": rnd.randint(70, 100),
                        "temp": rnd.randint(60, 86),
                        "power": rnd.uniform(380, 690),
                    },
                )
            )
    for gpu in (0, 1, 2):
        figures.append(
            ("h100-07", gpu, {"used": rnd.randint(20000, 40000), "util": rnd.randint(10, 40), "temp": 55})
        )
    figures += [
        ("a100-07", 5, {"xid": 79}),
        ("vllm-h100-02", None, {"running": 12, "waiting": 3}),
        ("vllm-h100-05", None, {"running": 4, "waiting": 0}),
    ]
    servers = {"vllm-h100-02": "h100-02", "vllm-h100-05": "h100-05"}
    return _record(hosts, servers, figures, series=128, dead="h100-04", after_s=12)


def compact(document: dict) -> str:
    """The answer as JSON with one series per line: small, and a re-recording diffs line by line."""
    series = ",\n".join(json.dumps(item, separators=(",", ":")) for item in document["data"]["result"])
    head = json.dumps({k: v for k, v in document.items() if k != "data"}, separators=(",", ":"))[:-1]
    return f'{head},"data":{{"resultType":"vector","result":[\n{series}\n]}}}}\n'


def main() -> int:
    for name, record in (("fleet.json", record_tests), ("demo.json", record_demo)):
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            continue
        document = record()
        path = HERE / name
        path.write_text(compact(document))
        print(f"wrote {path} ({len(document['data']['result'])} series)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
