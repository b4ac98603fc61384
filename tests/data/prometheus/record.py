"""Record the ``/api/v1/query`` answers the fleet unit tests, snapshots and benchmark replay.

    .venv/bin/python tests/data/prometheus/record.py

Starts the fake DCGM exporters and a real Prometheus (``tests/integration/prometheus.py``), sets up a small
fleet, lets one exporter die, and writes the answer to gputui's own query (``build_query``) as
``fleet.json``:

* ``gpu-a``: 8 GPUs; GPU3 holds 41236 MiB at 97 % and 84 °C and reported XID 79; a vLLM server on it (a
  scrape target labelled ``Hostname="gpu-a"``) runs 3 requests with 1 waiting.
* ``gpu-b``: 4 GPUs; GPU0 in MIG mode with two 3g.40gb instances.
* ``gpu-c``: 2 GPUs; its exporter is stopped before the answer is taken (stale, up=0).
* a host whose exporter sets no ``Hostname`` label: keyed by its ``instance``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from gputui.transports.prometheus import build_query, fetch  # noqa: E402
from tests.integration.prometheus import Fleet  # noqa: E402

OUT = Path(__file__).with_name("fleet.json")


def main() -> int:
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
            document = fetch(server.url, build_query(), 10.0)
        finally:
            fleet.close()
    OUT.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {OUT} ({len(document['data']['result'])} series)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
