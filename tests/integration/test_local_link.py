"""LocalLink: the in-process agent behind the HostLink interface (run in a subprocess for the fake NVML)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO

LINK_SCRIPT = r"""
import json, sys, time
from gputui.core.link import LinkError, LinkOptions
from gputui.transports.local import LocalLink

out = {}
link = LocalLink(LinkOptions(memory_interval_s=30.0, process_interval_s=60.0, read_only=True))
link.open()
out["hello"] = link.hello
first = link.next_snapshot(timeout_s=10.0)
out["first_gpus"] = len(first.gpus)
out["first_has_processes"] = first.processes_time is not None
out["target"] = first.target
out["early"] = link.next_snapshot(timeout_s=0.2) is None       # the next one is not due for 30 s
link.request({"cmd": "configure", "memory_interval_s": 0.05}, timeout_s=5.0)
second = link.next_snapshot(timeout_s=20.0)
out["second_after_configure"] = second is not None and second.time > first.time
out["reused_processes"] = second.processes_time == first.processes_time
# Not decoded again: the same model objects as the list's first snapshot (the stream's processes_same).
out["same_objects"] = second.processes is first.processes and all(
    a.processes is b.processes for a, b in zip(first.gpus, second.gpus))
sampled = link.request({"cmd": "sample"}, timeout_s=10.0)["snapshot"]
out["sample_fresh_processes"] = sampled["processes_time"] > first.processes_time
kill = link.request({"cmd": "kill", "boot_id": first.boot_id, "signal": "KILL",
                     "targets": [{"pid": 1, "start_ticks": 0}]}, timeout_s=10.0)
out["read_only_kill"] = [o["result"] for o in kill["outcomes"]]
try:
    link.request({"cmd": "bogus"}, timeout_s=5.0)
except LinkError as exc:
    out["bad_command"] = str(exc)
link.close()
try:
    link.next_snapshot(timeout_s=1.0)
except LinkError as exc:
    out["after_close"] = str(exc)
print(json.dumps(out))
"""


def test_local_link_paces_samples_and_forwards_commands(fake_nvml: FakeNvml) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LINK_SCRIPT],
        cwd=REPO,
        env=fake_nvml.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["hello"]["mode"] == "nvml"
    assert out["target"] == "local"
    assert out["first_gpus"] == 8
    assert out["first_has_processes"] is True
    assert out["early"] is True
    assert out["second_after_configure"] is True
    assert out["reused_processes"] is True
    assert out["same_objects"] is True
    assert out["sample_fresh_processes"] is True
    assert out["read_only_kill"] == ["refused"]
    assert out["bad_command"] == "local: unknown command 'bogus'"
    assert out["after_close"] == "local: link closed"
