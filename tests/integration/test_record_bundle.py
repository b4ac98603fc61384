"""``gputui bundle``: one host's snapshot, check, fitness, audit lines, recording and versions in a tar.gz,
with no secret from a real process's argv or from the environment in any of it."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from gputui.commands.bundle import BUNDLE_FILES
from gputui.core.recording import Recording
from gputui.core.recording import format as fmt
from tests.fakenvml.plugin import FakeNvml
from tests.integration.procs import Worker, gputui_env, is_gone, launcher, run_gputui, wait_for

pytestmark = pytest.mark.timeout(240)

API_KEY = "sk-proj-0123456789abcdefABCDEF"
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
ENV_TOKEN = "hf_ZyXwVuTsRqPoNmLkJiHgFeDc"
SECRETS = (API_KEY, HF_TOKEN, ENV_TOKEN)


def test_the_bundle_holds_what_it_lists_and_no_secret(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    env["HF_TOKEN"] = ENV_TOKEN  # never read: not one of the named keys
    env["CUDA_VISIBLE_DEVICES"] = f"0,1,HF_TOKEN={ENV_TOKEN}"  # a named key whose value carries a secret
    recordings = tmp_path / "state" / "gputui" / "recordings"
    recordings.mkdir(parents=True, mode=0o700)
    workers = [
        Worker("scheduler_TP0", gpu=0, args=("--api-key", API_KEY, "--hf-token", HF_TOKEN)),
        Worker("scheduler_TP1", gpu=1),
    ]
    with launcher(workers, fake_nvml) as server:
        victim = server["scheduler_TP1"]
        recorded = run_gputui(
            ["record", "local", "-o", str(recordings / "r.gtrec"), "--duration", "3", "--interval", "0.3"],
            env,
        )
        assert recorded.returncode == 0, recorded.stderr
        killed = run_gputui(["--no-discover", "kill", "local", "--yes", str(victim), "--signal", "KILL"], env)
        assert killed.returncode == 0, killed.stdout + killed.stderr
        wait_for(lambda: is_gone(victim), "the victim to go")
        out = tmp_path / "incident.tar.gz"
        done = run_gputui(["bundle", "local", "-o", str(out), "--no-discover"], env)
        assert done.returncode == 0, done.stderr
        again = run_gputui(["bundle", "local", "-o", str(out), "--no-discover"], env)
        assert again.returncode == 2
        assert again.stderr.strip() == f"gputui: {out}: exists already (name a new file)"
        holder = server["scheduler_TP0"]

    with tarfile.open(out, "r:gz") as archive:
        members = {m.name.split("/", 1)[1]: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
        assert all(m.name.startswith("gputui-bundle-local/") for m in archive.getmembers())
    assert set(members) == {name for name, _what in BUNDLE_FILES}
    manifest = members["MANIFEST.txt"].decode()
    for name, what in BUNDLE_FILES:
        assert f"{name} " in manifest
        assert what in manifest
    snapshot = json.loads(members["snapshot.json"])
    (host,) = snapshot["hosts"]
    (proc,) = [p for p in host["processes"] if p["pid"] == holder]
    assert proc["cmdline"][-4:] == ["--api-key", "***", "--hf-token", "***"]
    check = json.loads(members["check.json"])
    assert check["exit_status"] == 1
    assert check["verdict"]["level"] == "NOT CLEAN"
    assert "CLEAN SLATE" in members["snapshot.txt"].decode()
    assert len(json.loads(members["fitness.json"])["gpus"]) == 8
    assert members["fitness.txt"].decode().startswith("GPU0 ")
    audit = [json.loads(line) for line in members["audit.jsonl"].decode().splitlines()]
    assert {line["pid"] for line in audit} == {victim}
    versions = json.loads(members["versions.json"])
    assert versions["gputui"]
    assert versions["python"]
    assert versions["driver"]
    environment = json.loads(members["environment.json"])
    assert environment == {"CUDA_VISIBLE_DEVICES": "0,1,HF_TOKEN=***"}  # the token shape, redacted
    excerpt = tmp_path / "excerpt.gtrec"
    excerpt.write_bytes(members["recording.gtrec"])
    recording = Recording.load(excerpt)
    assert recording.count("local") >= 3
    assert recording.snapshot("local", 0).process(holder) is not None
    decoded = "\n".join(
        json.dumps(r)
        for _at, r in fmt.frames(members["recording.gtrec"], len(fmt.header()))
        if isinstance(r, dict)
    )
    for secret in SECRETS:
        assert not any(secret.encode() in data for data in members.values()), secret
        assert secret not in decoded
