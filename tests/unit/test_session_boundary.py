"""Where a GPU process tree stops: the session-boundary rule the agent kills by and the client shows.

The agent (shipped as one file) owns the rule; gputui.core.jobs.forest uses the same function, so the tree
the confirmation lists is the tree the agent signals.
"""

from __future__ import annotations

import pytest

from gputui.agent.proc import procfs, proctree
from gputui.core.jobs import forest as jobs_forest
from gputui.core.model import Proc

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
    (4242, "bashful", ["bashful"], LAUNCHER),
    (4242, "nsys", ["nsys", "profile", "-o", "x", "python3", "-m", "sglang.launch_server"], LAUNCHER),
    (4242, "sudo", ["sudo", "python3", "train.py"], LAUNCHER),
    # Daemons that run other people's jobs, and the display stack.
    (4242, "cron", ["/usr/sbin/cron", "-f"], BOUNDARY),
    (4242, "crond", ["crond", "-n"], BOUNDARY),
    (4242, "atd", ["/usr/sbin/atd", "-f"], BOUNDARY),
    (4242, "gdm3", ["/usr/sbin/gdm3"], BOUNDARY),
    (4242, "gdm-session-wor", ["gdm-session-worker [pam/gdm-password]"], BOUNDARY),
    (4242, "Xorg", ["/usr/lib/xorg/Xorg", "vt2", "-displayfd", "3"], BOUNDARY),
    (4242, "gnome-shell", ["/usr/bin/gnome-shell"], BOUNDARY),
    (4242, "gnome-terminal-", ["/usr/libexec/gnome-terminal-server"], BOUNDARY),
    (4242, "systemd-logind", ["/lib/systemd/systemd-logind"], BOUNDARY),
    (4242, "dockerd", ["/usr/bin/dockerd", "-H", "fd://"], BOUNDARY),
    (4242, "slurmd", ["/usr/sbin/slurmd"], BOUNDARY),
]


@pytest.mark.parametrize(("pid", "name", "cmdline", "expected"), CASES)
def test_the_rule(pid: int, name: str | None, cmdline: list[str] | None, expected: bool) -> None:
    assert proctree.is_session_boundary(pid, name, cmdline) is expected


@pytest.mark.parametrize(("pid", "name", "cmdline", "expected"), CASES)
def test_the_client_uses_the_agents_rule(
    pid: int, name: str | None, cmdline: list[str] | None, expected: bool
) -> None:
    assert jobs_forest.is_session_boundary(Proc(pid=pid, name=name, cmdline=tuple(cmdline or ()))) is expected


# -- the job rule: where the climb from a GPU process stops --------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cgroup v2 only: the unified path.
        ("0::/user.slice/user-1000.slice/session-3.scope\n", "/user.slice/user-1000.slice/session-3.scope"),
        # Hybrid, unified at its root: systemd's own v1 hierarchy says where the process is.
        ("12:pids:/\n1:name=systemd:/system.slice/cron.service\n0::/\n", "/system.slice/cron.service"),
        # Hybrid with a unified placement: the unified path.
        ("1:name=systemd:/system.slice/a.service\n0::/system.slice/b.service\n", "/system.slice/b.service"),
        # Everything at the root (no manager): "/" (it tells nothing apart, but it is known).
        ("9:name=systemd:/\n4:memory:/process_api/39eb\n0::/\n", "/"),
        # v1 controllers without systemd's hierarchy: cannot tell.
        ("4:memory:/docker/abc\n3:cpuset:/docker/abc\n", None),
        ("", None),
        ("garbage without colons\n", None),
    ],
)
def test_parse_cgroup(text: str, expected: str | None) -> None:
    assert procfs.parse_cgroup(text.encode()) == expected


def facts(*rows: tuple) -> dict[int, proctree.JobFacts]:
    """(pid, ppid, name, cmdline, session, pgrp, cgroup) rows as a facts table."""
    return {row[0]: proctree.JobFacts(*row) for row in rows}


INIT = (1, 0, "systemd", ["/sbin/init"], 1, 1, "/")
CG = "/system.slice/cron.service"

JOBS: list[tuple[str, dict[int, proctree.JobFacts], int, int]] = [
    (
        "cron daemon that keeps its jobs in its own session: its name stops the climb",
        facts(
            INIT,
            (100, 1, "cron", ["/usr/sbin/cron", "-f"], 100, 100, CG),
            (200, 100, "sh", ["sh", "-c", "python3 job.py; exit"], 100, 100, CG),
            (300, 200, "python3", ["python3", "job.py"], 100, 100, CG),
            (210, 100, "sh", ["sh", "-c", "logrotate"], 100, 100, CG),
        ),
        300,
        200,
    ),
    (
        "an unknown daemon whose jobs get sessions of their own: the session stops the climb",
        facts(
            INIT,
            (100, 1, "jobrunnerd", ["jobrunnerd"], 100, 100, CG),
            (200, 100, "sh", ["sh", "-c", "python3 job.py; exit"], 200, 200, CG),
            (300, 200, "python3", ["python3", "job.py"], 200, 200, CG),
        ),
        300,
        200,
    ),
    (
        "a daemonised launcher leads its workers' session: it is the root",
        facts(
            INIT,
            (100, 1, "python3", ["python3", "-m", "sglang.launch_server"], 100, 100, "/"),
            (101, 100, "scheduler_TP0", [], 100, 100, "/"),
        ),
        101,
        100,
    ),
    (
        "a nohup'ed launcher whose login shell is gone leads its process group: it is the root",
        facts(
            INIT,
            (100, 1, "python3", ["python3", "serve.py"], 50, 100, "/"),
            (101, 100, "worker", [], 50, 100, "/"),
        ),
        101,
        100,
    ),
    (
        "a process init adopted that leads neither the session nor the group: a daemon, not the job",
        facts(
            INIT,
            (100, 1, "helperd", ["helperd"], 50, 50, "/"),
            (101, 100, "python3", ["python3", "x.py"], 50, 50, "/"),
        ),
        101,
        101,
    ),
    (
        "another cgroup above: the job stops below it",
        facts(
            INIT,
            (100, 1, "sh", ["sh", "-c", "run"], 100, 100, "/system.slice/a.service"),
            (101, 100, "python3", ["python3", "x.py"], 100, 100, "/system.slice/b.service"),
        ),
        101,
        101,
    ),
    (
        "nsys under a login shell: nsys is the root, the launcher and workers below it",
        facts(
            INIT,
            (40, 1, "sshd", ["sshd: alice"], 40, 40, "/"),
            (50, 40, "bash", ["-bash"], 50, 50, "/"),
            (60, 50, "nsys", ["nsys", "profile", "python3"], 50, 60, "/"),
            (70, 60, "python3", ["python3", "-m", "sglang.launch_server"], 50, 60, "/"),
            (71, 70, "scheduler_TP0", [], 50, 60, "/"),
        ),
        71,
        60,
    ),
    (
        "the display stack: an X server's parents are the display manager's",
        facts(
            INIT,
            (100, 1, "gdm3", ["/usr/sbin/gdm3"], 100, 100, "/"),
            (110, 100, "gdm-session-wor", ["gdm-session-worker"], 100, 100, "/"),
            (120, 110, "Xorg", ["/usr/lib/xorg/Xorg", "vt2"], 100, 100, "/"),
        ),
        120,
        120,
    ),
    (
        "pid 1 holding GPU memory is its own root (and never in a plan)",
        facts(INIT),
        1,
        1,
    ),
    (
        "sessions and cgroups unknown (an old collector): the names alone decide",
        facts(
            (1, 0, "init", [], None, None, None),
            (100, 1, "bash", ["bash", "run.sh"], None, None, None),
            (101, 100, "python3", ["python3"], None, None, None),
        ),
        101,
        100,
    ),
]


@pytest.mark.parametrize(("why", "table", "holder", "root"), JOBS, ids=[j[0] for j in JOBS])
def test_job_root(why: str, table: dict[int, proctree.JobFacts], holder: int, root: int) -> None:
    assert proctree.job_root(holder, table.get) == root, why


@pytest.mark.parametrize(("why", "table", "holder", "root"), JOBS, ids=[j[0] for j in JOBS])
def test_the_client_roots_trees_by_the_same_rule(
    why: str, table: dict[int, proctree.JobFacts], holder: int, root: int
) -> None:
    from gputui.core.model import Gpu, GpuProcess, HostSnapshot

    procs = tuple(
        Proc(
            pid=f.pid,
            ppid=f.ppid,
            name=f.name,
            cmdline=tuple(f.cmdline or ()),
            sid=f.session,
            pgid=f.pgrp,
            cgroup=f.cgroup,
            gpu_memory_mib={0: 100} if f.pid == holder else {},
        )
        for f in table.values()
    )
    gpu = Gpu(index=0, processes=(GpuProcess(pid=holder, used_mib=100),))
    snapshot = HostSnapshot(target="t", gpus=(gpu,), processes=procs)
    forest = jobs_forest.build_forest(snapshot)
    assert [node.proc.pid for node in forest] == [root], why
