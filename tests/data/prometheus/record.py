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


def record_tests() -> dict:
    with tempfile.TemporaryDirectory(prefix="gputui-record-") as tmp:
        fleet = Fleet(Path(tmp))
        try:
            exporters = fleet.exporter([
                {"name": "gpu-a", "gpus": 8},
                {"name": "gpu-b", "gpus": 4, "mig": {"0": ["3g.40gb", "3g.40gb"]}},
                {"name": "gpu-c", "gpus": 2},
                {"name": "gpu-d", "gpus": 8, "hostname_label": False},
                {"name": "vllm-a", "kind": "vllm"},
            ])
            server = fleet.prometheus({"vllm-a": "gpu-a"})
            exporters.set("gpu-a", 3, used=41236, util=97, temp=84, power=612.4, xid=79)
            exporters.set("vllm-a", None, running=3, waiting=1)
            server.wait_until(lambda: len(server.query("DCGM_FI_DEV_FB_USED")) >= 23, "every GPU scraped")
            time.sleep(8)  # a few samples of each, so the lookback finds gpu-c's last one
            exporters.stop("gpu-c")
            gone = 'DCGM_FI_DEV_FB_USED{Hostname="gpu-c"}'
            server.wait_until(lambda: not server.query(gone), "gpu-c stale")
            time.sleep(2)
            return dict(fetch(server.url, build_query(), 10.0))
        finally:
            fleet.close()


def record_demo() -> dict:
    rnd = random.Random(7)
    names = [f"a100-{i:02d}" for i in range(1, 9)] + [f"h100-{i:02d}" for i in range(1, 9)]
    with tempfile.TemporaryDirectory(prefix="gputui-record-") as tmp:
        fleet = Fleet(Path(tmp))
        try:
            exporters = fleet.exporter(
                [{"name": name, "gpus": 8} for name in names]
                + [{"name": "vllm-h100-02", "kind": "vllm"}, {"name": "vllm-h100-05", "kind": "vllm"}]
            )
            server = fleet.prometheus({"vllm-h100-02": "h100-02", "vllm-h100-05": "h100-05"})
            for name in ("h100-02", "h100-05", "a100-03", "a100-07"):
                for gpu in range(8):
                    exporters.set(name, gpu, used=rnd.randint(60000, 78000), util=rnd.randint(70, 100),
                                  temp=rnd.randint(60, 86), power=rnd.uniform(380, 690))
            for gpu in (0, 1, 2):
                used = rnd.randint(20000, 40000)
                exporters.set("h100-07", gpu, used=used, util=rnd.randint(10, 40), temp=55)
            exporters.set("a100-07", 5, xid=79)
            exporters.set("vllm-h100-02", running=12, waiting=3)
            exporters.set("vllm-h100-05", running=4, waiting=0)
            server.wait_until(lambda: len(server.query("DCGM_FI_DEV_FB_USED")) >= 128, "every GPU scraped")
            time.sleep(8)
            exporters.stop("h100-04")
            gone = 'DCGM_FI_DEV_FB_USED{Hostname="h100-04"}'
            server.wait_until(lambda: not server.query(gone), "h100-04 stale")
            time.sleep(12)
            return dict(fetch(server.url, build_query(), 10.0))
        finally:
            fleet.close()


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
