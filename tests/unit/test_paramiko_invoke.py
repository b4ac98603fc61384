"""paramiko is loaded without invoke, and paramiko's config parser (the fallback resolver) still runs
``Match exec`` lines. Each check runs in a fresh interpreter: what is loaded is per process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration._procs import REPO


def run_fresh(code: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_ssh_transport_loads_paramiko_without_invoke() -> None:
    loaded = run_fresh(
        "import json, sys\n"
        "import gputui.transports.ssh.link, gputui.transports.ssh.paramiko.connect\n"
        "import gputui.transports.ssh.paramiko.auth\n"
        "print(json.dumps(sorted(m for m in sys.modules if sys.modules[m] is not None)))\n"
    )
    assert "paramiko" in loaded
    assert [m for m in loaded if m == "invoke" or m.startswith("invoke.")] == []


def test_the_paramiko_resolver_still_runs_match_exec_after_the_transport_loaded(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        'Match host yes-host exec "true"\n'
        "  HostName matched.example\n"
        'Match host no-host exec "false"\n'
        "  HostName wrong.example\n"
    )
    found = run_fresh(
        "import json\n"
        "import gputui.transports.ssh.link\n"
        "from gputui.transports.ssh.config import resolve\n"
        f"yes = resolve('yes-host', {str(config)!r}, use_openssh=False)\n"
        f"no = resolve('no-host', {str(config)!r}, use_openssh=False)\n"
        "print(json.dumps([yes.resolver, yes.hostname, no.hostname]))\n"
    )
    assert found == ["paramiko", "matched.example", "no-host"]
