"""The agent's copy of the session-boundary rule agrees with gputui.analysis.is_session_boundary.

The agent is shipped as one file and cannot import the analysis, so it carries its own copy of the rule that
decides where a GPU process tree stops; if the two drifted, the agent would list a different tree than the
one the client shows and kills.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui import agent, analysis
from gputui.model import Proc

CASES: list[tuple[int, str | None, list[str] | None]] = [
    (1, "process_api", ["/process_api", "--init"]),
    (0, "swapper", []),
    (4242, "systemd", ["/lib/systemd/systemd", "--user"]),
    (4242, "(sd-pam)", []),
    (4242, "sshd", ["sshd: alice@pts/0"]),
    (4242, "sshd-session", ["sshd-session: alice"]),
    (4242, "tmux: server", ["tmux", "new", "-s", "x"]),
    (4242, "containerd-shim", ["containerd-shim-runc-v2", "-namespace", "k8s.io"]),
    (4242, "tini", ["/tini", "--", "python3", "serve.py"]),
    (4242, "slurmstepd", ["slurmstepd: [42.0]"]),
    (4242, "SCREEN", ["SCREEN", "-S", "run"]),
    (4242, "bash", ["-bash"]),
    (4242, "-bash", ["-bash"]),
    (4242, "bash", ["/bin/bash"]),
    (4242, "bash", ["/bin/bash", "-l", "-i"]),
    (4242, "bash", ["bash", "run.sh"]),
    (4242, "bash", ["bash", "-x", "run.sh"]),
    (4242, "sh", ["sh", "-c", "python3 -m sglang.launch_server"]),
    (4242, "zsh", []),
    (4242, "zsh", None),
    (4242, "fish", ["fish", "--login"]),
    (4242, "busybox", ["busybox", "sh", "start.sh"]),
    (4242, "python3", ["python3", "-m", "sglang.launch_server"]),
    (4242, "sglang::schedul", ["sglang::scheduler_TP0"]),
    (4242, "torchrun", ["torchrun", "--nproc-per-node", "8", "train.py"]),
    (4242, "[bold]x", ["\x1b[2J", "-c"]),
    (4242, None, None),
    (4242, "", []),
    (4242, "cron", ["/usr/sbin/cron", "-f"]),
    (4242, "supervisord", ["supervisord", "-n"]),
    (4242, "bashful", ["bashful"]),
]
"""(pid, name, cmdline): boundaries and launchers of both kinds, shells every way they can be started."""


def client_rule(pid: int, name: str | None, cmdline: list[str] | None) -> bool:
    return analysis.is_session_boundary(Proc(pid=pid, name=name, cmdline=tuple(cmdline or ())))


@pytest.mark.parametrize(("pid", "name", "cmdline"), CASES)
def test_agent_and_analysis_agree(pid: int, name: str | None, cmdline: list[str] | None) -> None:
    assert agent.is_session_boundary(pid, name, cmdline) == client_rule(pid, name, cmdline)


def test_the_table_covers_both_answers() -> None:
    answers = [client_rule(*case) for case in CASES]
    assert answers.count(True) >= 10
    assert answers.count(False) >= 8


def test_the_name_lists_are_the_same() -> None:
    assert agent.SESSION_BOUNDARY_NAMES == analysis._BOUNDARY_NAMES
    assert agent.SESSION_BOUNDARY_PREFIXES == analysis._BOUNDARY_PREFIXES
    assert agent.SESSION_SHELLS == analysis._SHELLS


names = st.sampled_from(
    sorted(analysis._BOUNDARY_NAMES | analysis._SHELLS)
    + [p + "x" for p in analysis._BOUNDARY_PREFIXES]
    + ["-" + s for s in sorted(analysis._SHELLS)]
    + ["python3", "node", "", "x"]
) | st.text(max_size=8)
args = st.sampled_from(["-c", "-l", "-i", "--login", "-", "run.sh", "-x", ""]) | st.text(max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5), names, st.none() | st.lists(args, max_size=4))
def test_agent_and_analysis_agree_on_anything(pid: int, name: str, cmdline: list[str] | None) -> None:
    assert agent.is_session_boundary(pid, name, cmdline) == client_rule(pid, name, cmdline)
