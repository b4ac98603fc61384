"""A server launched with its credentials in argv: no secret is shown, printed as JSON or written to the
audit log, by the snapshot, the ``process`` command (the whole command line) or a kill."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.answers import process_text
from tests.integration.procs import (
    Worker,
    audit_lines,
    gputui_env,
    is_gone,
    launcher,
    run_gputui,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

API_KEY = "sk-proj-0123456789abcdefABCDEF"
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
DB_PASSWORD = "s3cr3t-pw"
SECRET_ARGS = (
    "--api-key",
    API_KEY,
    f"--hf-token={HF_TOKEN}",
    "--db",
    f"postgres://serve:{DB_PASSWORD}@127.0.0.1/models",
    "--max-tokens",
    "4096",
)
SECRETS = (API_KEY, HF_TOKEN, DB_PASSWORD)


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    return gputui_env(fake_nvml, tmp_path / "state")


def test_no_view_carries_a_secret_from_argv(env: dict[str, str], fake_nvml: Any) -> None:
    with launcher([Worker("scheduler_TP0", gpu=0, args=SECRET_ARGS)], fake_nvml) as server:
        victim = server["scheduler_TP0"]
        done = run_gputui(["snapshot", "--json", "--no-discover"], env)
        assert done.returncode == 0, done.stderr
        assert not any(secret in done.stdout for secret in SECRETS)
        (host,) = json.loads(done.stdout)["hosts"]
        (proc,) = [p for p in host["processes"] if p["pid"] == victim]
        # The options keep their names and what is no secret stays: an operator sees a key was given.
        assert proc["cmdline"][-7:] == [
            "--api-key",
            "***",
            "--hf-token=***",
            "--db",
            "postgres://serve:***@127.0.0.1/models",
            "--max-tokens",
            "4096",
        ]
        check = run_gputui(["check", "--json", "--no-discover"], env)
        assert not any(secret in check.stdout + check.stderr for secret in SECRETS)

        # The collector's ``process`` command, which a confirmation asks for the whole command line.
        for use_psutil in (False, True):
            whole = process_text(
                {"cmd": "process", "pid": victim, "start_ticks": proc["start_ticks"]}, use_psutil
            )
            assert whole["cmdline"][-5:-2] == [
                "--hf-token=***",
                "--db",
                "postgres://serve:***@127.0.0.1/models",
            ]
            assert not any(secret in json.dumps(whole) for secret in SECRETS)

        killed = run_gputui(["--no-discover", "kill", "local", "--yes", str(victim), "--signal", "KILL"], env)
        assert killed.returncode == 0, killed.stdout + killed.stderr
        assert not any(secret in killed.stdout + killed.stderr for secret in SECRETS)
        wait_for(lambda: is_gone(victim, server.ticks[victim]), "the victim to die")
    lines = audit_lines(env)
    assert lines
    assert any("--api-key" in json.dumps(line) for line in lines)
    assert not any(secret in json.dumps(line) for line in lines for secret in SECRETS)
