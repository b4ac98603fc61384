"""Where a GPU process tree stops: the session-boundary rule the agent kills by and the client shows.

The agent (shipped as one file) owns the rule; gputui.analysis uses the same function, so the tree the
confirmation lists is the tree the agent signals.
"""

from __future__ import annotations

import pytest

from gputui import agent, analysis
from gputui.model import Proc

BOUNDARY, LAUNCHER = True, False

CASES: list[tuple[int, str | None, list[str] | None, bool]] = [
    (1, "process_api", ["/process_api", "--init"], BOUNDARY),  # pid 1, whatever its name
    (0, "swapper", [], BOUNDARY),
    (4242, "systemd", ["/lib/systemd/systemd", "--user"], BOUNDARY),
    (4242, "(sd-pam)", [], BOUNDARY),
    (4242, "sshd", ["sshd: alice@pts/0"], BOUNDARY),
    (4242, "sshd-session", ["sshd-session: alice"], BOUNDARY),
    (4242, "tmux: server", ["tmux", "new", "-s", "x"], BOUNDARY),
    (4242, "containerd-shim", ["containerd-shim-runc-v2", "-namespace", "k8s.io"], BOUNDARY),
    (4242, "tini", ["/tini", "--", "python3", "serve.py"], BOUNDARY),
    (4242, "slurmstepd", ["slurmstepd: [42.0]"], BOUNDARY),
    (4242, "SCREEN", ["SCREEN", "-S", "run"], BOUNDARY),
    (4242, "supervisord", ["supervisord", "-n"], BOUNDARY),
    # Shells: interactive or login ones start sessions; one running a script is the launcher.
    (4242, "bash", ["-bash"], BOUNDARY),
    (4242, "-bash", ["-bash"], BOUNDARY),
    (4242, "bash", ["/bin/bash"], BOUNDARY),
    (4242, "bash", ["/bin/bash", "-l", "-i"], BOUNDARY),
    (4242, "fish", ["fish", "--login"], BOUNDARY),
    (4242, "zsh", [], BOUNDARY),
    (4242, "zsh", None, BOUNDARY),  # unreadable: never take a possibly interactive shell for a launcher
    (4242, "bash", ["bash", "run.sh"], LAUNCHER),
    (4242, "bash", ["bash", "-x", "run.sh"], LAUNCHER),
    (4242, "sh", ["sh", "-c", "python3 -m sglang.launch_server"], LAUNCHER),
    (4242, "busybox", ["busybox", "sh", "start.sh"], LAUNCHER),
    # Everything else belongs to the work.
    (4242, "python3", ["python3", "-m", "sglang.launch_server"], LAUNCHER),
    (4242, "sglang::schedul", ["sglang::scheduler_TP0"], LAUNCHER),
    (4242, "torchrun", ["torchrun", "--nproc-per-node", "8", "train.py"], LAUNCHER),
    (4242, "[bold]x", ["\x1b[2J", "-c"], LAUNCHER),
    (4242, None, None, LAUNCHER),
    (4242, "", [], LAUNCHER),
    (4242, "cron", ["/usr/sbin/cron", "-f"], LAUNCHER),
    (4242, "bashful", ["bashful"], LAUNCHER),
]


@pytest.mark.parametrize(("pid", "name", "cmdline", "expected"), CASES)
def test_the_rule(pid: int, name: str | None, cmdline: list[str] | None, expected: bool) -> None:
    assert agent.is_session_boundary(pid, name, cmdline) is expected


@pytest.mark.parametrize(("pid", "name", "cmdline", "expected"), CASES)
def test_the_client_uses_the_agents_rule(
    pid: int, name: str | None, cmdline: list[str] | None, expected: bool
) -> None:
    assert analysis.is_session_boundary(Proc(pid=pid, name=name, cmdline=tuple(cmdline or ()))) is expected
