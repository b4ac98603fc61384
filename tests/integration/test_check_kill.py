"""``gputui check`` and ``gputui kill`` end to end: the real CLI in a subprocess, the agent inside it reading
real /proc and real pynvml over the fake NVML, against real process trees (see ``procs.py``).

RELIABILITY cases covered here: 13 (pid reused between listing and confirmation), 14 (TERM -> KILL
escalation), 15 (dead middle parent, double-forked grandchild), 16 (zombie -> its parent), 17 (D state),
18 (another user's process denied, the rest proceeds), 19 (pid from another PID namespace), 20 (pid 1, the
agent's own ancestors and session, read-only), 21 (ghost memory after a kill).
"""

from __future__ import annotations

import json
import os
import pty
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gputui.core.jobs import build_forest, flatten
from gputui.core.model import HostSnapshot
from tests.integration._procs import Binary, build_vfork_waiter
from tests.integration.procs import (
    DEADLINE_S,
    REPO,
    WORKER_MIB,
    Worker,
    audit_lines,
    gputui_env,
    is_gone,
    kill_json,
    launcher,
    ppid_of,
    read_until,
    run_gputui,
    sglang_workers,
    shared_copy,
    start_ticks_of,
    state_of,
    unused_pid,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

USED_MIB = WORKER_MIB + 3


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    return gputui_env(fake_nvml, tmp_path / "state")


def check_json(env: dict[str, str], *extra: str) -> tuple[int, HostSnapshot, dict[str, Any]]:
    result = run_gputui(["check", "--json", "--no-discover", *extra], env)
    assert result.stdout, result.stderr
    document = json.loads(result.stdout)
    (host,) = document["hosts"]
    return result.returncode, HostSnapshot.from_dict(host), document


# -- check --------------------------------------------------------------------------------------------------


def test_idle_host_is_clean_line_per_gpu(env: dict[str, str]) -> None:
    result = run_gputui(["check", "--no-discover"], env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:8] == [f"GPU{i}  3 MiB  ✓" for i in range(8)]
    assert lines[8] == "CLEAN: 8/8 GPUs at baseline (3 MiB + 2)"


def test_launcher_with_eight_workers_is_one_tree_and_not_clean(env: dict[str, str], fake_nvml: Any) -> None:
    with launcher(sglang_workers(), fake_nvml) as server:
        status, snapshot, _ = check_json(env)
        assert status == 1
        trees = [t for t in build_forest(snapshot) if t.proc.pid == server.pid]
        assert len(trees) == 1, [t.proc.pid for t in build_forest(snapshot)]
        tree = trees[0]
        schedulers = [server[f"scheduler_TP{i}"] for i in range(8)]
        # The collector lists each GPU process's whole tree below the session boundary: the detokenizer
        # (a child holding nothing, killed with the tree) is listed under the launcher too.
        assert [c.proc.pid for c in tree.children] == sorted([*schedulers, server["detokenizer"]])
        assert all(c.depth == 1 and not c.children for c in tree.children)
        assert tree.subtree_total_mib == 8 * WORKER_MIB
        assert tree.subtree_gpu_mib == {i: WORKER_MIB for i in range(8)}
        assert [n.proc.name for n in flatten([tree])][1:] == [f"scheduler_TP{i}" for i in range(8)] + [
            "detokenizer"
        ]
        assert snapshot.verdict is not None
        assert not snapshot.verdict.clean
        assert snapshot.verdict.known
        first = server["scheduler_TP0"]
        assert snapshot.verdict.reasons[0] == f"GPU0 {USED_MIB} MiB held by pid {first} (scheduler_TP0)"
        text = run_gputui(["check", "--no-discover"], env)
        assert text.returncode == 1
        third = server["scheduler_TP3"]
        assert f"GPU3  {USED_MIB} MiB  ✗ held by pid {third} (scheduler_TP3)" in text.stdout
        assert "NOT CLEAN: 0/8 GPUs at baseline" in text.stdout


def test_every_finding_from_real_processes(env: dict[str, str], fake_nvml: Any) -> None:
    """Zombie (16), orphan of a dead middle parent (15), pid of another namespace (19), ghost memory (21)."""
    workers = sglang_workers(
        scheduler_TP7=Worker("scheduler_TP7", gpu=7, mode="exit"),
        scheduler_TP6=Worker("scheduler_TP6", gpu=6, orphan=True),
    )
    hidden_pid, ghost_pid = unused_pid(), unused_pid() - 1
    with launcher(workers, fake_nvml) as server:
        fake_nvml.state.add_holder(7, hidden_pid, 1024, "invisible")  # the zombie's GPU, free otherwise
        fake_nvml.state.add_holder(5, ghost_pid, 1024, "ghost")
        fake_nvml.write()
        zombie, orphan = server["scheduler_TP7"], server["scheduler_TP6"]
        assert state_of(zombie) == "Z"
        assert ppid_of(orphan) != server.pid
        status, snapshot, _ = check_json(env)
    assert status == 1
    by_kind: dict[str, list] = {}
    for finding in snapshot.findings:
        by_kind.setdefault(finding.kind, []).append(finding)
    (zombie_finding,) = [f for f in by_kind["zombie"] if f.pid == zombie]
    assert zombie_finding.action_pid == server.pid
    assert f"parent {server.pid} (python" in zombie_finding.detail
    (orphan_finding,) = [f for f in by_kind["orphan"] if f.pid == orphan]
    assert orphan_finding.gpu_index == 6
    assert orphan_finding.action_pid == orphan
    (invisible,) = by_kind["invisible_pid"]
    assert (invisible.gpu_index, invisible.pid, invisible.action_pid) == (7, None, None)
    assert f"pid {hidden_pid} holds 1024 MiB but is not visible here" in invisible.detail
    ghosts = [f for f in by_kind["ghost_memory"] if f.gpu_index == 5]
    assert len(ghosts) == 1
    assert "1024 MiB more than its 3 MiB baseline" in ghosts[0].detail
    # The invisible pid never becomes a local process; the zombie stays in the launcher's tree.
    forest = build_forest(snapshot)
    assert hidden_pid not in {n.proc.pid for n in flatten(forest)}
    (tree,) = [t for t in forest if t.proc.pid == server.pid]
    assert zombie in {n.proc.pid for n in flatten([tree])}
    assert snapshot.verdict is not None
    assert f"GPU7 {1024 + 3} MiB held by pid {hidden_pid} (not visible here: another PID namespace)" in (
        snapshot.verdict.reasons
    )
    assert any(r.startswith(f"pid {zombie} (scheduler_TP7) is defunct") for r in snapshot.verdict.reasons)


def test_ghost_memory_after_everything_is_killed(env: dict[str, str], fake_nvml: Any) -> None:
    """21: memory not back and no process listed -> ghost memory, named per GPU, with the device scan."""
    with launcher(sglang_workers(2), fake_nvml) as server:
        fake_nvml.state.add_holder(1, unused_pid(), 2048, "ghost")
        fake_nvml.write()
        status, payload, _ = kill_json(env, "--yes", "--tree", str(server.pid))
        assert status == 0, payload
        ticks = dict(server.ticks)
        # Reaped, not just defunct: a job's zombie that lingers is a reason of its own.
        wait_for(lambda: all(start_ticks_of(p) != t for p, t in ticks.items()), "the tree to be reaped")
    status, snapshot, _ = check_json(env)
    assert status == 1
    assert snapshot.verdict is not None
    assert snapshot.verdict.reasons == ("GPU1 2048 MiB over baseline with no process listed (ghost memory)",)
    (ghost,) = [f for f in snapshot.findings if f.kind == "ghost_memory"]
    assert ghost.gpu_index == 1
    assert snapshot.device_holders is not None  # the agent looked for /dev/nvidia* holders
    result = run_gputui(["check", "--no-discover"], env)
    assert "GPU1  2051 MiB  ✗ 2048 MiB over baseline with no process listed (ghost memory)" in result.stdout


def test_no_driver_cannot_tell(env: dict[str, str], fake_nvml: Any) -> None:
    fake_nvml.state.init_error = "DRIVER_NOT_LOADED"
    fake_nvml.write()
    result = run_gputui(["check", "--no-discover"], env)
    assert result.returncode == 2
    assert result.stdout.startswith("cannot tell:")
    assert result.stdout.count("cannot tell") == 1  # said once, not "cannot tell: cannot tell: …"
    assert "Traceback" not in result.stderr


def test_wait_without_a_driver_ends_at_once(env: dict[str, str], fake_nvml: Any) -> None:
    fake_nvml.state.init_error = "DRIVER_NOT_LOADED"
    fake_nvml.write()
    started = time.monotonic()
    result = run_gputui(["check", "--wait", "120", "--no-discover"], env)
    assert result.returncode == 2
    assert time.monotonic() - started < 60  # not the 120 s deadline: waiting cannot help
    assert "still not clean" not in result.stdout
    assert result.stdout.count("cannot tell") == 1


def test_kill_all_gpu_without_nvml_says_so(env: dict[str, str], fake_nvml: Any) -> None:
    fake_nvml.state.init_error = "DRIVER_NOT_LOADED"
    fake_nvml.write()
    result = run_gputui(["kill", "--all-gpu", "--yes", "--no-discover"], env)
    assert result.returncode == 2
    assert "NVML is unavailable" in result.stderr
    assert "nothing to signal" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_lost_gpu_is_not_ready_and_needs_a_reboot(env: dict[str, str], fake_nvml: Any) -> None:
    """A GPU the driver says is lost is a known fact whose action is a reboot: NOT READY, exit 1."""
    fake_nvml.state.gpus[2].error = "GPU_IS_LOST"
    fake_nvml.write()
    result = run_gputui(["check", "--no-discover"], env)
    assert result.returncode == 1
    assert "GPU2  – MiB  ✗ needs a reboot of the host (the driver says it is lost)" in result.stdout
    assert "NOT READY: 7/8 GPUs at baseline" in result.stdout
    assert "cannot tell" not in result.stdout


def test_timed_out_gpu_cannot_tell(env: dict[str, str], fake_nvml: Any) -> None:
    fake_nvml.state.gpus[5].hang_ms = 6000  # longer than the collector's 2 s NVML deadline
    fake_nvml.write()
    code, snapshot, _document = check_json(env)
    assert code == 2
    assert snapshot.verdict is not None
    assert not snapshot.verdict.known
    assert snapshot.gpus[5].error == "NVML call timed out"
    assert [g.memory_used_mib for g in snapshot.gpus if g.index != 5] == [3] * 7


def test_calibrate_records_uuid_baselines_and_refuses_a_busy_host(
    env: dict[str, str], fake_nvml: Any
) -> None:
    for gpu in fake_nvml.state.gpus:
        gpu.baseline_mib = 7
    fake_nvml.write()
    before = run_gputui(["check", "--no-discover"], env)
    assert before.returncode == 1  # 7 MiB is over 3 + 2
    calibrated = run_gputui(["check", "--calibrate", "--no-discover"], env)
    assert calibrated.returncode == 0, calibrated.stderr
    stored = json.loads((Path(env["XDG_STATE_HOME"]) / "gputui" / "baselines.json").read_text())
    assert set(stored["hosts"]["local"]["gpus"].values()) == {7}
    assert all(key.startswith("GPU-") for key in stored["hosts"]["local"]["gpus"])
    after = run_gputui(["check", "--no-discover"], env)
    assert after.returncode == 0, after.stdout
    assert "CLEAN: 8/8 GPUs at baseline (7 MiB + 2)" in after.stdout
    with launcher([Worker("scheduler_TP0", gpu=0)], fake_nvml):
        busy = run_gputui(["check", "--calibrate", "--no-discover"], env)
    assert busy.returncode == 2
    assert "GPU0 refused: lists pid " in busy.stderr
    assert "cannot calibrate: 1 GPU not idle; nothing recorded" in busy.stderr
    assert json.loads((Path(env["XDG_STATE_HOME"]) / "gputui" / "baselines.json").read_text()) == stored


def test_calibrate_refuses_held_memory_with_no_process_unless_forced(
    env: dict[str, str], fake_nvml: Any
) -> None:
    """Memory no process accounts for is not an idle footprint: recording it would bless it forever."""
    fake_nvml.state.gpus[3].baseline_mib = 40_000
    fake_nvml.write()
    path = Path(env["XDG_STATE_HOME"]) / "gputui" / "baselines.json"
    refused = run_gputui(["check", "--calibrate", "--no-discover"], env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "GPU3 refused: holds 40000 MiB, more than an idle GPU of its size" in refused.stderr
    assert "GPU0" not in refused.stderr  # only the refused GPU is named
    assert not path.exists()  # nothing recorded, not even the idle GPUs
    forced = run_gputui(["check", "--calibrate", "--force", "--no-discover"], env)
    assert forced.returncode == 0, forced.stderr
    assert "GPU3 recorded although it holds 40000 MiB" in forced.stderr
    assert "GPU3  40000 MiB  baseline recorded (forced)" in forced.stdout
    after = run_gputui(["check", "--no-discover"], env)
    assert after.returncode == 0, after.stdout
    assert "CLEAN: 8/8 GPUs at baseline (3/40000 MiB + 2)" in after.stdout  # calibrated values shown


def test_corrupt_baselines_file_warns_once_and_uses_defaults(env: dict[str, str]) -> None:
    path = Path(env["XDG_STATE_HOME"]) / "gputui" / "baselines.json"
    path.parent.mkdir(parents=True)
    path.write_text("{broken")
    result = run_gputui(["check", "--no-discover"], env)
    assert result.returncode == 0
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert "not valid JSON" in warnings[0]
    assert "Traceback" not in result.stderr
    refused = run_gputui(["check", "--calibrate", "--no-discover"], env)
    assert refused.returncode == 2
    assert "not overwriting" in refused.stderr
    assert path.read_text() == "{broken"


# -- kill ---------------------------------------------------------------------------------------------------


def test_tree_kill_with_escalation_then_wait_reports_clean(env: dict[str, str], fake_nvml: Any) -> None:
    """14 + 15: one worker ignores TERM and one was double-forked away; the wait sees memory come back."""
    workers = sglang_workers(
        scheduler_TP2=Worker("scheduler_TP2", gpu=2, mode="ignore_term"),
        scheduler_TP5=Worker("scheduler_TP5", gpu=5, orphan=True),
    )
    with launcher(workers, fake_nvml) as server:
        status, _, _ = check_json(env)
        assert status == 1
        waiter = subprocess.Popen(
            [sys.executable, "-m", "gputui.cli", "check", "--wait", "20", "--no-discover"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            status, payload, stderr = kill_json(env, "--yes", "--tree", "--escalate", "1", str(server.pid))
            out, err = waiter.communicate(timeout=60)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
        assert status == 0, (payload, stderr)
        outcomes = payload["outcomes"]
        signalled = [o["pid"] for o in outcomes if o["stage"] == "signal"]
        # Every process of the tree, the double-forked orphan included, children before the root.
        assert sorted(signalled) == sorted(server.all_pids)
        assert signalled[-1] == server.pid
        stubborn = server["scheduler_TP2"]
        stages = [(o["stage"], o["signal"], o["result"]) for o in outcomes if o["pid"] == stubborn]
        assert stages == [
            ("signal", "TERM", "sent"),
            ("escalate", "KILL", "sent"),
            ("confirm", "KILL", "killed"),
        ]
        assert all(is_gone(p, server.ticks[p]) for p in server.all_pids)
        # The planned listing showed all that the agent signalled (the orphan via the launcher's group).
        planned = {t["pid"] for t in payload["plan"]["targets"]}
        assert planned <= set(signalled)
        assert waiter.returncode == 0, (out, err)
        assert out.splitlines()[-1].startswith("clean after ")
        assert out.splitlines()[-1].endswith(" s")
        assert "CLEAN: 8/8 GPUs at baseline" in out
    audit = audit_lines(env)
    assert {line["pid"] for line in audit} == set(signalled)
    # The intent of every listed process first, then what each stage did.
    intents = [line for line in audit if line["stage"] == "intent"]
    assert audit[: len(intents)] == intents
    first = audit[len(intents)]
    assert first["host"] == "local"
    assert first["local_user"]
    assert first["start_ticks"] == server.ticks[first["pid"]]
    assert (first["stage"], first["result"]) == ("signal", "sent")
    stubborn_lines = {(line["signal"], line["result"]) for line in audit if line["pid"] == stubborn}
    assert ("KILL", "killed") in stubborn_lines


def test_zombie_is_routed_to_its_parent(env: dict[str, str], fake_nvml: Any) -> None:
    """16: asking to kill a zombie signals the parent that does not reap it; the zombie is then reaped."""
    workers = [Worker("scheduler_TP0", gpu=0), Worker("scheduler_TP1", gpu=1, mode="exit")]
    with launcher(workers, fake_nvml) as server:
        zombie = server["scheduler_TP1"]
        status, payload, _ = kill_json(env, "--yes", str(zombie))
        assert status == 0, payload
        assert [t["pid"] for t in payload["plan"]["targets"]] == [server.pid]
        assert payload["plan"]["notes"] == [
            f"pid {zombie} is a zombie: its parent {server.pid} will be signalled instead"
        ]
        results = [(o["pid"], o["result"]) for o in payload["outcomes"]]
        assert results == [(server.pid, "sent"), (server.pid, "exited")]
        wait_for(lambda: state_of(zombie) is None, "the zombie to be reaped once its parent died")


def test_pid_reused_between_listing_and_confirmation_is_refused(env: dict[str, str], fake_nvml: Any) -> None:
    """13: the confirmation lists pid P; P exits and a new process gets P before "y" -> "process changed"."""
    sleeper = subprocess.Popen(
        [sys.executable, "-S", "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    victim = sleeper.pid
    fake_nvml.state.add_holder(0, victim, WORKER_MIB)
    fake_nvml.write()
    try:
        master, slave = pty.openpty()
        cli = subprocess.Popen(
            [sys.executable, "-m", "gputui.cli", "kill", "--no-discover", str(victim)],
            cwd=REPO,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        impostor: subprocess.Popen[bytes] | None = None
        try:
            screen = read_until(master, b"[y/N] ")
            assert b"Send SIGTERM to 1 process?" in screen
            assert f"{victim}".encode() in screen
            assert b"40960" in screen
            sleeper.kill()
            sleeper.wait(timeout=DEADLINE_S)
            impostor = _start_with_pid(victim)
            os.write(master, b"y\n")
            output = read_until(master, b"not every process is gone", accept_eof=True)
            assert cli.wait(timeout=DEADLINE_S) == 1
            assert b"changed" in output
            assert b"process changed" in output
            assert state_of(victim) not in (None, "Z")  # the impostor was not signalled
        finally:
            os.close(master)
            if cli.poll() is None:
                cli.kill()
                cli.wait()
            if impostor is not None:
                impostor.kill()
                impostor.wait()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    intent, line = audit_lines(env)
    assert (intent["pid"], intent["stage"], intent["signal"]) == (victim, "intent", "TERM")
    assert (line["pid"], line["result"], line["signal"]) == (victim, "changed", None)


def _start_with_pid(pid: int) -> subprocess.Popen[bytes]:
    """Start a sleeper that gets exactly ``pid`` (pid reuse made on purpose via ns_last_pid; needs root)."""
    for _ in range(50):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        proc = subprocess.Popen(
            [sys.executable, "-S", "-c", "import time; time.sleep(600)"], start_new_session=True
        )
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    raise AssertionError(f"could not get pid {pid} reused")


def test_pid_1_and_the_agents_own_ancestors_are_refused(env: dict[str, str], fake_nvml: Any) -> None:
    """20: pid 1 refused before anything is sent; a tree that holds the agent itself is refused by it."""
    refused = run_gputui(["kill", "--yes", "1"], env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == "gputui: local: pid 1 is init: it is never signalled"
    # A runner in this test's session owns a GPU worker and runs `gputui kill --tree <runner>` as its child.
    runner_code = (
        "import subprocess, sys, time\n"
        "worker = subprocess.Popen([sys.executable, '-S', '-c', 'import time; time.sleep(600)'])\n"
        "print(worker.pid, flush=True)\n"
        "sys.stdin.readline()\n"
        "import os\n"
        "cli = subprocess.run([sys.executable, '-m', 'gputui.cli', 'kill', '--json', '--yes', '--tree',\n"
        "                      '--no-discover', str(os.getpid())], capture_output=True, text=True)\n"
        "print(cli.returncode, flush=True)\n"
        "print(cli.stdout.replace(chr(10), ' '), flush=True)\n"
        "worker.kill(); worker.wait()\n"
    )
    runner = subprocess.Popen(
        [sys.executable, "-c", runner_code],
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert runner.stdin is not None
        assert runner.stdout is not None
        worker = int(runner.stdout.readline())
        fake_nvml.state.add_holder(0, worker, 1000)
        fake_nvml.write()
        runner.stdin.write("go\n")
        runner.stdin.flush()
        returncode = int(runner.stdout.readline())
        payload = json.loads(runner.stdout.readline())
        assert runner.wait(timeout=DEADLINE_S) == 0
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert returncode == 1
    results = {o["pid"]: (o["result"], o["detail"]) for o in payload["outcomes"]}
    assert results[runner.pid][0] == "refused"
    assert "ancestor of the gputui agent" in results[runner.pid][1]
    assert all(result != "sent" for result, _ in results.values())


def test_all_gpu_takes_every_tree_but_nothing_that_runs_gputui(
    env: dict[str, str], fake_nvml: Any, tmp_path: Path
) -> None:
    """20: --all-gpu kills a daemonised server tree and a server the same script started in the background,
    but nothing on the line that runs gputui: not the script, not the ``cat`` its output is piped into.

    The script runs in a session of its own (so the job ends there, whatever runs the tests); ``timeout``
    gives gputui a process group of its own, so only the job rule keeps ``cat`` out of the plan.
    """
    go = tmp_path / "go"
    python = shlex.quote(sys.executable)
    script = (
        f"{python} -S -c 'import time; time.sleep(600)' </dev/null >/dev/null 2>&1 & echo $!; "
        f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.05; done; "
        f"{{ timeout 120 {python} -m gputui.cli kill --json --no-discover --yes --all-gpu; "
        'echo "status=$?" >&2; } | cat'
    )
    session = subprocess.Popen(  # noqa: S603 - this interpreter and fixed words
        ["/bin/sh", "-c", script],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert session.stdout is not None
    background = int(session.stdout.readline())
    try:
        with launcher(sglang_workers(2), fake_nvml) as server:
            fake_nvml.state.add_holder(3, background, 500)
            fake_nvml.write()
            go.touch()
            out, err = session.communicate(timeout=90)
            assert "status=0" in err, err
            payload = json.loads(out)  # whole: cat was not signalled
            finals = {o["pid"]: o["result"] for o in payload["outcomes"]}
            assert finals == dict.fromkeys([*server.all_pids, background], "exited"), payload["outcomes"]
            assert {line["pid"] for line in audit_lines(env)} == {*server.all_pids, background}
            wait_for(lambda: all(is_gone(p) for p in server.all_pids), "the server tree to die")
        assert session.returncode == 0
    finally:
        go.touch()
        if session.poll() is None:
            session.kill()
            session.communicate()
        try:
            os.kill(background, signal.SIGKILL)
        except ProcessLookupError:
            pass
        wait_for(lambda: is_gone(background), "the background server to be gone")


def test_read_only_refuses_before_anything(env: dict[str, str], fake_nvml: Any) -> None:
    with launcher([Worker("scheduler_TP0", gpu=0)], fake_nvml) as server:
        victim = server["scheduler_TP0"]
        result = run_gputui(["kill", "--read-only", "--yes", str(victim)], env)
        assert result.returncode == 2
        assert result.stderr.strip() == "gputui: local: read-only mode: kill refused, nothing is signalled"
        assert start_ticks_of(victim) == server.ticks[victim]
    assert not (Path(env["XDG_STATE_HOME"]) / "gputui" / "audit.jsonl").exists()


def test_options_may_follow_the_host_and_the_pids(env: dict[str, str], fake_nvml: Any) -> None:
    """``gputui kill HOST --yes PID`` failed ("unrecognized arguments"); global options may come first."""
    with launcher([Worker("scheduler_TP0", gpu=0)], fake_nvml) as server:
        victim = server["scheduler_TP0"]
        result = run_gputui(["--no-discover", "kill", "local", "--yes", str(victim), "--signal", "KILL"], env)
        assert result.returncode == 0, result.stdout + result.stderr
        wait_for(lambda: is_gone(victim, server.ticks[victim]), "the victim to die")


def test_no_terminal_and_no_yes_refuses(env: dict[str, str], fake_nvml: Any) -> None:
    with launcher([Worker("scheduler_TP0", gpu=0)], fake_nvml) as server:
        victim = server["scheduler_TP0"]
        result = run_gputui(["kill", str(victim)], env)
        assert result.returncode == 2
        assert "not a terminal" in result.stderr
        assert f"{victim}" in result.stdout  # the listing was shown
        assert start_ticks_of(victim) == server.ticks[victim]


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["local", "12x"], "gputui: kill: not a process id: '12x' (process ids are decimal numbers)"),
        (["4242", "-"], "gputui: kill: not a process id: '-' (process ids are decimal numbers)"),
        ([], "gputui: kill: name at least one process id, or use --all-gpu"),
        (["99999999"], "gputui: kill: not a process id: '99999999' (from 1 to 4194304)"),
        # Numbers in other spellings were taken for host names and connected to:
        (["1e3"], "gputui: kill: not a process id: '1e3' (process ids are decimal numbers)"),
        (["0x10", "5"], "gputui: kill: not a process id: '0x10' (process ids are decimal numbers)"),
        (["+5"], "gputui: kill: not a process id: '+5' (process ids are decimal numbers)"),
    ],
)
def test_bad_pid_words_are_one_line(env: dict[str, str], words: list[str], message: str) -> None:
    result = run_gputui(["kill", "--yes", *words], env)
    assert result.returncode == 2
    assert result.stderr.strip() == message


def test_unknown_pid_and_unreachable_target_are_one_line(env: dict[str, str]) -> None:
    result = run_gputui(["kill", "--yes", str(unused_pid())], env)
    assert result.returncode == 2
    assert "is not a GPU process" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_d_state_process_is_reported_and_the_tool_does_not_hang(
    env: dict[str, str], fake_nvml: Any, tmp_path: Path
) -> None:
    """17: a GPU process stuck in D is reported as uninterruptible and keeps the host from being clean."""
    waiter = Binary(build_vfork_waiter(tmp_path), ["waiter"])
    try:
        pid = waiter.pids["waiter"]
        wait_for(lambda: state_of(pid) == "D", "the vfork parent to wait in state D")
        fake_nvml.state.add_holder(0, pid, 1000)
        fake_nvml.write()
        status, snapshot, document = check_json(env, "--wait", "8")
        assert status == 1
        assert document["clean_after_s"] == {"local": None}
        assert snapshot.verdict is not None
        (reason,) = [r for r in snapshot.verdict.reasons if r.startswith(f"pid {pid} (vfork_waiter) is")]
        assert "in uninterruptible sleep (D)" in reason
        (stuck,) = [f for f in snapshot.findings if f.kind == "uninterruptible" and f.pid == pid]
        assert "may not die" in stuck.detail
        assert stuck.since is not None  # seen in D over the wait: its start is known, its age not worded
        assert reason == stuck.detail  # one fact, one sentence: the verdict says what the finding says
        listing = run_gputui(["kill", str(pid)], env)
        assert "[D: may not die]" in listing.stdout
    finally:
        waiter.kill()


SYSTEM_PYTHON = "/usr/bin/python3"
"""A Python every user can run (the test venv's interpreter may live under root's private home)."""
CLI_UID = 65533  # an unprivileged uid that is not nobody
OTHER_UID = 65534  # nobody


def test_another_users_process_is_denied_and_the_rest_of_the_batch_proceeds(fake_nvml: Any) -> None:
    """18: the CLI runs unprivileged; one target belongs to another user: denied for that one, the other dies.

    Needs root to start processes as two other users (the suite runs as root in CI); it fails, not skips,
    elsewhere.
    """
    import shutil

    if os.geteuid() != 0:
        raise AssertionError("this test starts processes as other users: run the suite as root (CI does)")
    shared, state_path = shared_copy(fake_nvml)
    sleep_code = "import time; time.sleep(600)"
    foreign = subprocess.Popen(
        [SYSTEM_PYTHON, "-S", "-c", sleep_code],
        user=OTHER_UID,
        group=OTHER_UID,
        extra_groups=[],
        start_new_session=True,
        cwd="/",
    )
    own = subprocess.Popen(
        [SYSTEM_PYTHON, "-S", "-c", sleep_code],
        user=CLI_UID,
        group=CLI_UID,
        extra_groups=[],
        start_new_session=True,
        cwd="/",
    )
    try:
        fake_nvml.state.add_holder(0, foreign.pid, 1000)
        fake_nvml.state.add_holder(1, own.pid, 2000)
        fake_nvml.state.write(state_path)
        state_path.chmod(0o644)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(shared / "state"),
            "LD_LIBRARY_PATH": str(shared),
            "FAKE_NVML_STATE": str(state_path),
            "XDG_STATE_HOME": str(shared / "state"),
            # Copies of gputui, pynvml and psutil (built for this same Python minor version).
            "PYTHONPATH": str(shared / "py"),
            "USER": "root",  # misleading on purpose: the audit must name the real uid's user
        }
        cli = subprocess.run(
            [
                SYSTEM_PYTHON,
                "-m",
                "gputui.cli",
                "kill",
                "--yes",
                "--json",
                "--no-discover",
                str(foreign.pid),
                str(own.pid),
            ],
            cwd="/",
            env=env,
            user=CLI_UID,
            group=CLI_UID,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert cli.stdout, cli.stderr
        payload = json.loads(cli.stdout)
        assert cli.returncode == 1
        finals = {o["pid"]: o for o in payload["outcomes"]}
        assert finals[foreign.pid]["result"] == "denied"
        assert "permission denied" in finals[foreign.pid]["detail"]
        assert finals[own.pid]["result"] == "exited"
        assert own.wait(timeout=DEADLINE_S) == -signal.SIGTERM
        assert foreign.poll() is None
        audit_path = shared / "state" / "gputui" / "audit.jsonl"
        audit = [json.loads(x) for x in audit_path.read_text().splitlines()]
        assert {(a["pid"], a["result"]) for a in audit} == {
            (foreign.pid, "requested"),
            (foreign.pid, "denied"),
            (own.pid, "requested"),
            (own.pid, "sent"),
            (own.pid, "exited"),
        }
        assert {a["local_user"] for a in audit} != {"root"}
    finally:
        for proc in (foreign, own):
            proc.kill()
            proc.wait()
        shutil.rmtree(shared, ignore_errors=True)


def test_several_targets_one_unreachable_is_one_line_and_exit_2(env: dict[str, str]) -> None:
    with socket_closed_port() as port:
        target = f"127.0.0.1:{port}"
        result = run_gputui(["check", "--no-discover", "--connect-timeout", "5", "local", target], env)
        as_json = run_gputui(["check", "--json", "--no-discover", "--connect-timeout", "5", target], env)
        document = json.loads(as_json.stdout)
    assert result.returncode == 2
    assert result.stdout.splitlines()[0].startswith("local (")  # a header per host when there are several
    assert "CLEAN: 8/8 GPUs at baseline" in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"gputui: {target}: ")
    (host,) = document["hosts"]
    assert host["target"] == target
    assert host["verdict"]["known"] is False


@contextmanager
def socket_closed_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, never listening, so no one else takes it meanwhile)."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()
