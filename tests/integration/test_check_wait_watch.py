"""``gputui check --wait`` judges its samples with one server watch, as the TUI does: a server whose tokens
stop while requests wait is STALLED by the end of the wait (the config's ``stall_after_s``), not read as a
single UP sample."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fakenvml.plugin import FakeNvml
from tests.integration.metrics_server import MetricsPeer

REPO = Path(__file__).resolve().parents[2]


def test_a_server_that_stalls_during_the_wait_reads_stalled(
    peer: MetricsPeer, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    peer.set(engine="sglang", running=2, waiting=3, tokens_per_scrape=0)
    fake_nvml.state.add_holder(0, peer.process.pid, 30000)  # the server's memory: the wait cannot end clean
    fake_nvml.write()
    config = tmp_path / "config.toml"
    config.write_text("stall_after_s = 1\n")
    config.chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-m", "gputui.cli", "check", "--json", "--no-discover", "--config", str(config)]
        + ["--health", peer.url("/health"), "--metrics", peer.url("/metrics"), "--wait", "8", "local"],
        cwd=REPO,
        env=dict(fake_nvml.env(), XDG_STATE_HOME=str(tmp_path / "state")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    (server,) = [h for h in host["health"] if h["url"] == peer.url("/health")]
    assert server["state"] == "STALLED", server
