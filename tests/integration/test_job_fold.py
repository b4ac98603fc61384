"""A real job with many idle members, sampled by the real collector on the fake NVML: the sample lists every
member (a kill takes them all), each idle member's entry carries only what is known of it, and the panel's
rows fold the alike members into one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from gputui.agent.wire import PROCESS_KEYS_LEFT_OUT_WHEN_EMPTY
from gputui.core.jobs import FoldedMembers, build_forest, flatten, fold_members
from gputui.core.model import HostSnapshot
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import agent_process

pytestmark = pytest.mark.timeout(120)

IDLE = 30
LAUNCHER = r"""
import json, subprocess, sys, time
idle = [subprocess.Popen(["sleep", "600"]) for _ in range(int(sys.argv[1]))]
holder = subprocess.Popen(["sleep", "600"])
print(json.dumps({"holder": holder.pid, "idle": [p.pid for p in idle]}), flush=True)
try:
    sys.stdin.read()
finally:
    for proc in idle + [holder]:
        proc.kill()
        proc.wait()
"""


@pytest.fixture
def job() -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(IDLE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert launcher.stdout is not None
    pids = json.loads(launcher.stdout.readline())
    try:
        yield launcher, pids
    finally:
        assert launcher.stdin is not None
        launcher.stdin.close()
        try:
            launcher.wait(timeout=20)
        except subprocess.TimeoutExpired:
            launcher.send_signal(signal.SIGKILL)
            launcher.wait()


def test_a_job_of_idle_members_is_listed_whole_and_shown_folded(
    fake_nvml: FakeNvml, job: tuple[subprocess.Popen[str], dict[str, Any]]
) -> None:
    launcher, pids = job
    fake_nvml.state.add_holder(0, pids["holder"], 4096)
    fake_nvml.write()
    with agent_process(env=fake_nvml.env()) as agent:
        sample = agent.sample()
    entries = {p["pid"]: p for p in sample["processes"]}
    assert set(pids["idle"]) <= set(entries)
    for pid in pids["idle"]:
        left_out = set(PROCESS_KEYS_LEFT_OUT_WHEN_EMPTY) - set(entries[pid])
        assert {"gpu_sm_pct", "gpu_mem_bw_pct", "gpu_enc_pct", "gpu_dec_pct", "live_threads"} <= left_out
    assert "gpu_sm_pct" in entries[pids["holder"]]  # a GPU process has every per-GPU key

    snapshot = HostSnapshot.from_dict(sample)
    nodes = flatten(build_forest(snapshot))
    members = {node.proc.pid for node in nodes}
    assert {launcher.pid, pids["holder"], *pids["idle"]} <= members
    rows = fold_members(nodes)
    (fold,) = [row for row in rows if isinstance(row, FoldedMembers)]
    # The holder runs the same command: it holds GPU memory, so it keeps a row of its own.
    assert set(fold.pids) == set(pids["idle"])
    assert fold.parent == launcher.pid
    assert fold.proc.cmdline == ("sleep", "600")
    shown = [row.proc.pid for row in rows if not isinstance(row, FoldedMembers)]
    assert pids["holder"] in shown
    assert not set(pids["idle"]) & set(shown)
