"""A spinning collective end to end: the collector reads the fake NVML and a real fake inference server, the
client's watch judges the sequence of real snapshots.

A script in a subprocess (the fake ``libnvidia-ml.so.1`` is loaded there) starts the fake server
(``metrics_server``: sglang's ``/metrics``, the token counter the test sets) holding GPUs 0-3 in the fake
NVML, and three jobs of their own (``sleep`` in a session of its own): one on GPUs 4-5, one on GPU 6, one on
GPU 7. Through a ``LocalLink`` (the collector in process, the server's URLs configured) it takes samples
with every GPU idle and tokens flowing, then turns GPUs 0-5 to 100 % busy at 110 W of 700 W, GPU 6 to 100 %
at 550 W (computing), GPU 7 idle, and the server's counter flat with requests pending; each snapshot goes
through ``judge`` with one ``ServerWatch`` (stall window 1 s, spin window 2 s: the states come in seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO

pytestmark = pytest.mark.timeout(120)

SCRIPT = r"""
import json, os, subprocess, sys, time
from gputui.core.link import LinkOptions
from gputui.core.servers import ServerWatch
from gputui.core.verdict import Baselines, judge
from gputui.transports.local import LocalLink
from tests.fakenvml import FakeGpu, FakeNvmlState
from tests.integration.metrics_server import MetricsPeer

REACH_S = 40.0
state_path = os.environ["FAKE_NVML_STATE"]
peer = MetricsPeer()
jobs = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(3)]
held = [(gpu, peer.process.pid) for gpu in range(4)] + [(4, jobs[0].pid), (5, jobs[0].pid)]
held += [(6, jobs[1].pid), (7, jobs[2].pid)]


def gpus(figures):
    state = FakeNvmlState(gpus=[
        FakeGpu(name="NVIDIA H100 80GB HBM3", total_mib=81559, util_pct=util, power_mw=watts * 1000,
                power_limit_mw=700000)
        for util, watts in figures
    ])
    for gpu, pid in held:
        state.add_holder(gpu, pid, 70000)
    state.write(state_path)


out = {"servers": [], "findings": {}}
link = None
try:
    gpus([(0, 70)] * 8)
    peer.set(engine="sglang", running=2, waiting=3, tokens_per_scrape=50)
    options = LinkOptions(
        memory_interval_s=0.2, process_interval_s=0.3, read_only=True, discover_health=False,
        health_urls=(peer.url("/health"),), metrics_urls=(peer.url("/metrics"),),
    )
    link = LocalLink(options)
    link.open()
    link.request({"cmd": "health", "interval_s": 0.2}, timeout_s=10.0)
    watch = ServerWatch(stall_after_s=1.0, spin_after_s=2.0)

    def judged():
        snapshot = link.next_snapshot(timeout_s=10.0)
        if snapshot is None:
            return None
        result = judge(snapshot, Baselines(), servers=watch)
        for finding in result.findings:
            if finding.kind == "spinning":
                out["findings"].setdefault(finding.detail, finding.since)
        for server in result.endpoints:
            seen = [server.state, server.detail]
            if not out["servers"] or out["servers"][-1] != seen:
                out["servers"].append(seen)
        return result

    rate = None
    deadline = time.monotonic() + REACH_S
    while time.monotonic() < deadline:  # serving, every GPU idle: the watch sees the idle power
        result = judged()
        rate = None if result is None or not result.endpoints else result.endpoints[0].metrics.get(
            "generation_tokens_per_s")
        if rate:
            break
    out["serving"] = bool(rate)
    out["before"] = sorted(out["findings"])
    peer.set(tokens_per_scrape=0)
    gpus([(100, 110)] * 6 + [(100, 550), (0, 72)])
    out["turned_at"] = time.time()
    deadline = time.monotonic() + REACH_S
    while time.monotonic() < deadline:
        judged()
        if len(out["findings"]) >= 2 and "collective" in (out["servers"][-1][1] or ""):
            break
    out["roots"] = {"peer_job": peer.process.pid, "quiet": jobs[0].pid}
finally:
    if link is not None:
        link.close()
    for job in jobs:
        job.kill()
        job.wait()
    peer.close()
print(json.dumps(out))
"""


def test_gpus_busy_at_idle_power_with_tokens_flat_are_a_finding_and_stalled(fake_nvml: FakeNvml) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        env=fake_nvml.env(),
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["serving"], out
    assert out["before"] == []
    tokens = "GPUs 0–3 busy at idle power for 2 s, no tokens: a collective is likely hung"
    quiet = "GPUs 4–5 busy at idle power for 2 s, no CPU used: a collective is likely hung"
    details = sorted(out["findings"])
    assert len(details) == 2, out
    assert details[0].startswith(f"{tokens} (the job of pid "), details
    assert details[1] == f"{quiet} (the job of pid {out['roots']['quiet']} (sleep))", details
    # The spin began when the GPUs turned, not before (the idle samples said nothing).
    assert all(since >= out["turned_at"] - 1.0 for since in out["findings"].values())
    # No finding names GPU 6 (computing) or GPU 7 (idle).
    assert not any("GPU 6" in d or "GPU 7" in d or "6–7" in d for d in details)
    # The server: UP, STALLED on the token stall, then STALLED with the collective's sentence.
    states = [state for state, _ in out["servers"]]
    assert states[0] == "UP"
    last_state, last_detail = out["servers"][-1]
    assert last_state == "STALLED"
    assert last_detail.startswith(f"{tokens} (2 running, 3 waiting, health UP)"), out["servers"]
    assert any(
        state == "STALLED" and detail.startswith("stalled: 2 running, 3 waiting, no token generated for")
        for state, detail in out["servers"]
    ), out["servers"]
