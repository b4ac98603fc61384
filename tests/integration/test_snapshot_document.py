"""``snapshot --json`` lists the GPU jobs and what findings name, and counts the rest; ``--all-processes``
lists every process of the sample. Real processes (a daemonised launcher with GPU workers, a parent that never
reaps its child) on the fake NVML, the CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO, ZOMBIE_MAKER, script
from tests.integration.procs import Worker, launcher


def cli(env: dict[str, str], *argv: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "gputui.cli", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_document_lists_jobs_and_finding_subjects_and_counts_the_rest(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    env = dict(
        fake_nvml.env(), XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_STATE_HOME=str(tmp_path / "state")
    )
    workers = [Worker("scheduler_TP0", gpu=0), Worker("detokenizer")]
    with launcher(workers, fake_nvml) as job, script(ZOMBIE_MAKER, ["parent", "zombie"]) as zombie:
        status, trimmed = cli(env, "snapshot", "--json", "--no-discover")
        all_status, whole = cli(env, "snapshot", "--json", "--no-discover", "--all-processes")
        check_status, checked = cli(env, "check", "--json", "--no-discover")
        (host,) = trimmed["hosts"]
        (every,) = whole["hosts"]
        listed = {p["pid"] for p in host["processes"]}
        everything = {p["pid"] for p in every["processes"]}

        assert {job.pid, job["scheduler_TP0"], job["detokenizer"]} <= listed  # the GPU job's whole tree
        assert {zombie.pids["zombie"], zombie.pids["parent"]} <= listed  # what the zombie finding names
        finding_pids = {f["pid"] for f in host["findings"]} | {f["action_pid"] for f in host["findings"]}
        assert zombie.pids["zombie"] in finding_pids
        # The rest of the sample (the jobs' ancestors: init, the test's own shell and runner) is counted.
        assert 1 in everything
        assert 1 not in listed
        rest = host["processes_not_listed"]
        assert rest["count"] == len(everything) - len(listed) > 0
        assert sum(rest["states"].values()) == rest["count"]
        assert "processes_not_listed" not in every
        assert listed < everything
        # The same sweep and the same verdict as check.
        assert status == all_status == 0
        assert check_status == 1
        assert host["verdict"] == every["verdict"]
        assert host["verdict"]["clean"] is checked["hosts"][0]["verdict"]["clean"] is False
