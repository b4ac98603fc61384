"""Real sessions recorded and replayed: a real job on this host killed while ``gputui record local`` runs, a
host over the real sshd, the demo; each replayed in the app (Pilot), every sample read back exactly, a file
cut mid-record read up to the cut, and no secret from argv anywhere in a recording."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gputui.commands.inputs.targets import DEMO_TARGETS
from gputui.core.recording import EVENT_AUDIT, Recording
from gputui.core.recording import format as fmt
from gputui.transports.replay import REPLAY_REFUSAL
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.widgets.process_table import ProcessTable
from tests.fakenvml.plugin import FakeNvml
from tests.integration.procs import REPO, Worker, gputui_env, is_gone, launcher, run_gputui, wait_for
from tests.integration.sshd import ClientHome, SshdFactory
from tests.pilot.conftest import wait_for as pilot_wait_for

pytestmark = pytest.mark.timeout(240)

API_KEY = "sk-proj-0123456789abcdefABCDEF"
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
SECRET_ARGS = ("--api-key", API_KEY, f"--hf-token={HF_TOKEN}")
SECRETS = (API_KEY, HF_TOKEN)


def _start_recording(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gputui.cli", "record", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _samples_so_far(path: Path, target: str) -> int:
    """What a reader gets from the file while it is written: whole records only."""
    try:
        return Recording.load(path).count(target)
    except Exception:  # noqa: BLE001 - not written yet
        return 0


def _decoded(path: Path) -> str:
    """Every record of the file as JSON text (what a secret would have to hide in)."""
    data = path.read_bytes()
    return "\n".join(json.dumps(r) for _at, r in fmt.frames(data, len(fmt.header())) if isinstance(r, dict))


async def _replay_in_pilot(recording: Recording, target: str, pid: int | None = None) -> None:
    """Open the app on ``recording``: its first sample shows, ``]`` moves to a moment, kill keys refused."""
    from gputui.commands.replay import build_replay_app

    app = build_replay_app(recording, notify_timeout_s=60.0)
    async with app.run_test(size=(160, 50)) as pilot:
        host = app.hosts.get(target)
        assert host is not None
        await pilot_wait_for(pilot, lambda: host.snapshot is not None, "a recorded sample")
        assert app.replay is not None
        await pilot.press("p")
        await pilot.press("right_square_bracket")
        now = app.replay.clock.now()
        await pilot_wait_for(pilot, lambda: host.snapshot == recording.snapshot_at(target, now), "the moment")
        if pid is not None:
            app.query_one(ProcessTable).select_pid(pid)
        for key in ("k", "X", "T"):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmKillScreen)
            assert app.notices[-1][2] == REPLAY_REFUSAL


async def test_a_local_job_killed_while_recording(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    path = tmp_path / "local.gtrec"
    workers = [Worker("scheduler_TP0", gpu=0, args=SECRET_ARGS), Worker("scheduler_TP1", gpu=1)]
    with launcher(workers, fake_nvml) as server:
        victim = server["scheduler_TP0"]
        recorder = _start_recording(
            ["local", "-o", str(path), "--interval", "0.2", "--process-interval", "0.2", "--no-discover"], env
        )
        try:
            wait_for(lambda: _samples_so_far(path, "local") >= 5, "samples of the job")
            killed = run_gputui(
                ["--no-discover", "kill", "local", "--yes", str(victim), "--signal", "KILL"], env
            )
            assert killed.returncode == 0, killed.stdout + killed.stderr
            wait_for(lambda: is_gone(victim), "the victim to go")
            fake_nvml.state.gpus[0].processes = []
            fake_nvml.write()
            seen = _samples_so_far(path, "local")
            wait_for(lambda: _samples_so_far(path, "local") >= seen + 8, "samples after the kill")
        finally:
            recorder.send_signal(signal.SIGINT)
            _out, err = recorder.communicate(timeout=60)
        assert recorder.returncode == 0, err
        assert f"gputui: {path}: " in err
    recording = Recording.load(path)
    assert recording.closed
    assert recording.damage is None
    samples = recording.samples("local")
    assert samples[0].process(victim) is not None
    after = samples[-1].process(victim)
    assert after is None or after.is_zombie  # the launcher never reaps: a zombie, killed
    audit = [e for e in recording.events if e.kind == EVENT_AUDIT]
    assert {e.data["pid"] for e in audit} == {victim}
    assert any(e.data["stage"] == "intent" for e in audit)
    assert any(m.kind == "audit" for m in recording.moments)
    # The collector redacted the worker's argv; the recording carries no secret, in samples or audit lines.
    assert not any(secret in _decoded(path) for secret in SECRETS)
    proc = samples[0].process(victim)
    assert proc is not None
    assert "--hf-token=***" in proc.cmdline

    # Cut mid-record, it reads up to its last whole record.
    data = path.read_bytes()
    cut = tmp_path / "cut.gtrec"
    cut.write_bytes(data[: len(data) - 7])
    partial = Recording.load(cut)
    assert partial.damage is not None
    assert "cut in the middle of a record" in partial.damage
    assert partial.samples("local") == samples[: partial.count("local")]

    timeline = run_gputui(["replay", str(path), "--timeline"], env)
    assert timeline.returncode == 0, timeline.stderr
    assert f"pid {victim}" in timeline.stdout
    at_end = run_gputui(["replay", str(path), "--at", "end", "--json"], env)
    assert at_end.returncode == 0, at_end.stderr
    assert not any(secret in at_end.stdout for secret in SECRETS)
    await _replay_in_pilot(recording, "local")


LOCAL_ROUND_TRIP = r"""
import json, sys
from gputui.core.link import LinkOptions
from gputui.core.recording import Recording, RecordingWriter
from gputui.core.servers import ServerWatch
from gputui.core.verdict import Baselines, judge
from gputui.transports.local import LocalLink

path = sys.argv[1]
options = LinkOptions(memory_interval_s=0.05, process_interval_s=0.1, discover_health=False, read_only=True)
link = LocalLink(options)
link.open()
writer = RecordingWriter(path, ["local"], interval_s=0.05, keyframe_every=7)
writer.start()
servers, handed = ServerWatch(), []
while len(handed) < 40:
    snapshot = link.next_snapshot(5.0)
    if snapshot is not None:
        judged = judge(snapshot, Baselines(), servers=servers, now=snapshot.time)
        handed.append(judged)
        writer.sample("local", judged)
writer.close(30.0)
link.close()
back = Recording.load(path).samples("local")
print(json.dumps({"count": len(back), "equal": back == handed,
                  "pids": sorted({p.pid for s in handed for g in s.gpus for p in g.processes})}))
"""


def test_local_samples_read_back_exactly(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    with launcher([Worker("scheduler_TP0", gpu=0), Worker("scheduler_TP1", gpu=3)], fake_nvml) as server:
        done = subprocess.run(
            [sys.executable, "-c", LOCAL_ROUND_TRIP, str(tmp_path / "rt.gtrec")],
            cwd=REPO,
            env=dict(fake_nvml.env(), PYTHONPATH=str(REPO), XDG_STATE_HOME=str(tmp_path / "state")),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result == {"count": 40, "equal": True, "pids": sorted(server.pids.values())}


async def test_a_host_over_ssh_recorded_and_replayed(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    path = tmp_path / "ssh.gtrec"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with launcher([Worker("scheduler_TP0", gpu=2, args=SECRET_ARGS)], fake_nvml) as job:
        recorder = _start_recording(["host-a", "-o", str(path), "--interval", "0.3", "--duration", "8"], env)
        _out, err = recorder.communicate(timeout=120)
        assert recorder.returncode == 0, err
        pid = job["scheduler_TP0"]
    recording = Recording.load(path)
    assert recording.targets == ["host-a"]
    samples = recording.samples("host-a")
    assert len(samples) >= 5
    assert all(s.mode == "nvml" for s in samples)
    assert any(s.process(pid) is not None for s in samples)
    assert samples[-1].verdict is not None
    assert not any(secret in _decoded(path) for secret in SECRETS)
    await _replay_in_pilot(recording, "host-a", pid)


async def test_the_demo_recorded_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "demo.gtrec"
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_STATE_HOME=str(tmp_path / "state"))
    started = time.monotonic()
    done = run_gputui(["record", "--demo", "-o", str(path), "--duration", "9", "--interval", "0.5"], env)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    recording = Recording.load(path)
    assert sorted(recording.targets) == sorted(DEMO_TARGETS)
    kinds: dict[str, Any] = {m.kind: m for m in recording.moments}
    assert "server" in kinds  # the demo's wedge, UP → UNHEALTHY, after 6 s
    assert not [e for e in recording.events if e.kind == "error"]  # the end is no error
    again = run_gputui(["record", "--demo", "-o", str(path), "--duration", "1"], env)
    assert again.returncode == 2
    assert again.stderr.strip() == f"gputui: {path}: exists already (name a new file)"
    await _replay_in_pilot(recording, "gpu-node-07")
