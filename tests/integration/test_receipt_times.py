"""``gputui kill``'s receipt says when the job was gone by the collector's own times of the kill's outcomes,
not how long the command took: the real CLI against a real process tree (real /proc, the fake NVML), a worker
that ignores TERM and goes with the escalation's KILL."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import Worker, gputui_env, is_gone, launcher, run_gputui

pytestmark = pytest.mark.timeout(120)
ESCALATE_S = 1.2
GONE = re.compile(r"^receipt: workers gone ([0-9.]+) s after the signal$", re.MULTILINE)


def _kill(fake_nvml: Any, env: dict[str, str], *extra: str) -> tuple[str, float]:
    """Kill a fresh job whose workers ignore TERM: (the command's stdout, its wall time in seconds)."""
    workers = [Worker("scheduler_TP0", gpu=0, mode="ignore_term"), Worker("detokenizer", mode="ignore_term")]
    with launcher(workers, fake_nvml) as server:
        started = time.monotonic()
        done = run_gputui(
            [
                "kill",
                "--no-discover",
                "--yes",
                "--tree",
                "--escalate",
                str(ESCALATE_S),
                *extra,
                str(server.pid),
            ],
            env,
        )
        took_s = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        assert all(is_gone(p, server.ticks[p]) for p in server.all_pids)
    return done.stdout, took_s


def test_the_receipt_says_when_the_last_process_went(fake_nvml: Any, tmp_path: Path) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    stdout, took_s = _kill(fake_nvml, env)
    (figure,) = GONE.findall(stdout)
    gone_after_s = float(figure)
    # The escalation's KILL ended the job: as long after the TERM as the delay (and the collector's look),
    # less than the command took (its start, the samples before and after are not the job's).
    assert ESCALATE_S <= gone_after_s <= ESCALATE_S + 0.5, stdout
    assert gone_after_s < took_s
    assert "every process is gone" in stdout
    assert "since the kill" not in stdout


def test_the_time_is_the_outcomes_own(fake_nvml: Any, tmp_path: Path) -> None:
    """The collector stamps each outcome with its own clock; the receipt is the span between them."""
    env = gputui_env(fake_nvml, tmp_path / "state")
    stdout, _took_s = _kill(fake_nvml, env, "--json")
    document = json.loads(stdout)
    outcomes = document["outcomes"]
    assert all(isinstance(o["time"], float) for o in outcomes)
    sent = min(o["time"] for o in outcomes if o["stage"] == "signal")
    last = {o["pid"]: o for o in outcomes}
    gone = max(o["time"] for o in last.values())
    assert {o["result"] for o in last.values()} <= {"exited", "killed", "reaped"}
    assert document["workers_gone_after_s"] == round(gone - sent, 3)
    assert ESCALATE_S <= document["workers_gone_after_s"] <= document["elapsed_s"] + 0.1
