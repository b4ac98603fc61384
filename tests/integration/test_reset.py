"""``gputui reset`` end to end: real holder processes on stand-in device files, the fake NVML's modes, a fake
``nvidia-smi`` that records its argv and refuses ``-r`` while a device file is open (``reset_host``)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration._procs import agent_process, script
from tests.integration.reset_host import REPO, ResetHost, holder_code, make_reset_host, uuid_of
from tests.interpreters import python38

NOBODY = 65534


def gpu0_cycle() -> list[list[str]]:
    """What the fake nvidia-smi is asked for a reset of GPU 0 with persistence on."""
    return [["-pm", "0", "-i", uuid_of(0)], ["-r", "-i", uuid_of(0)], ["-pm", "1", "-i", uuid_of(0)]]


@pytest.fixture
def host(tmp_path: Path, fake_nvml_lib: Path) -> ResetHost:
    return make_reset_host(tmp_path / "host", fake_nvml_lib)


def test_a_process_holding_the_device_blocks_and_is_named(host: ResetHost) -> None:
    with script(holder_code(host.prefix + "0", uid=NOBODY), ["holder"]) as job:
        pid = job.pids["holder"]
        done = host.run("local", "0")
        assert done.returncode == 1, done.stdout + done.stderr
        line = next(line for line in done.stdout.splitlines() if f" {pid} " in f" {line} ")
        assert "nobody" in line
        assert "python" in line
        assert f"[{host.prefix}0]" in line
        assert f"gputui kill local {pid}" in line
        assert "the reset is blocked" in done.stdout.splitlines()[-1]
        status, plan = host.plan_json("local", "0")
        assert status == 1
        assert plan["verdict"] == "blocked"
        held = [b["holder"] for b in plan["blockers"] if b["code"] == "holder" and b["holder"]["pid"] == pid]
        assert held
        assert held[0]["kind"] == "process"
        assert held[0]["user"] == "nobody"
        assert held[0]["devices"] == [host.prefix + "0"]
    assert host.smi_calls() == []  # a plan runs nothing
    status, plan = host.plan_json("local", "0")
    assert status == 0, plan["blockers"]
    assert plan["verdict"] == "go"


def test_a_holder_of_another_gpu_does_not_block_but_a_control_node_holder_does(host: ResetHost) -> None:
    with script(holder_code(host.prefix + "1"), ["holder"]):
        assert host.run("local", "0").returncode == 0
        assert host.run("local", "1").returncode == 1
    with script(holder_code(host.prefix + "ctl"), ["holder"]):
        done = host.run("local", "0")
        assert done.returncode == 1
        assert f"[{host.prefix}ctl]" in done.stdout


def test_the_collectors_own_handle_is_named_and_stepped_aside(host: ResetHost) -> None:
    status, plan = host.plan_json("local", uuid_of(0))
    assert status == 0
    own = [b for b in plan["blockers"] if b["code"] == "holder" and b["holder"]["kind"] == "own"]
    assert own
    assert own[0]["effect"] == "step"
    assert own[0]["holder"]["devices"] == [host.prefix + "0"]
    done = host.run("local", "0")
    assert "gputui's own collector (this one): it steps aside before the reset" in done.stdout


def test_another_gputui_collector_is_named_as_gputui(host: ResetHost) -> None:
    # Started exactly as the ssh transport starts one: known by its first stage's mark, not by a path.
    with agent_process("--interval", "0.5", env=host.env) as other:
        other.sample()  # NVML is open: the collector holds the device
        pid = other.proc.pid
        status, plan = host.plan_json("local", "0")
        kinds = {b["holder"]["pid"]: b["holder"]["kind"] for b in plan["blockers"] if b["code"] == "holder"}
        done = host.run("local", "0")
    assert status == 1
    assert kinds.get(pid) == "gputui", kinds
    assert "gputui (a TUI's collector, its NVML event set, or an exporter): quit it first" in done.stdout


def test_a_process_under_a_folder_named_gputui_is_not_gputui(
    host: ResetHost, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE", "FAKE_NVML_DEVICE"):
        monkeypatch.setenv(name, host.env[name])
    train = tmp_path / "gputui-experiments" / "train.py"
    train.parent.mkdir()
    train.write_text(
        "import json, os, time\nfrom gputui.agent.collector import Agent\nagent = Agent()\n"
        "os.write(1, (json.dumps({'role': 'train', 'pid': os.getpid()}) + '\\n').encode())\ntime.sleep(600)\n"
    )
    with script("", ["train"], argv_extra=[str(train)]) as other:
        pid = other.pids["train"]
        _status, plan = host.plan_json("local", "0")
        kinds = {b["holder"]["pid"]: b["holder"]["kind"] for b in plan["blockers"] if b["code"] == "holder"}
    assert kinds.get(pid) == "process", kinds


def test_persistence_steps_only_where_it_is_on(host: ResetHost) -> None:
    host.state.gpus[1].persistence = False
    host.write()
    done = host.run("local", "--all")
    assert done.returncode == 0, done.stdout
    steps = [
        line.split(". ", 1)[1] for line in done.stdout.splitlines() if line.startswith("  ") and ". " in line
    ]
    smi = str(host.root / "bin" / "nvidia-smi")
    assert steps == [
        f"{smi} -pm 0 -i {uuid_of(0)}",
        f"{smi} -r -i {uuid_of(0)}",
        f"{smi} -r -i {uuid_of(1)}",
        f"{smi} -pm 1 -i {uuid_of(0)}",
    ]


def test_yes_runs_the_steps_in_order_after_the_collector_let_go(host: ResetHost) -> None:
    done = host.run("local", "--all", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert host.smi_calls() == [
        ["-pm", "0", "-i", uuid_of(0)],
        ["-pm", "0", "-i", uuid_of(1)],
        ["-r", "-i", uuid_of(0)],
        ["-r", "-i", uuid_of(1)],
        ["-pm", "1", "-i", uuid_of(0)],
        ["-pm", "1", "-i", uuid_of(1)],
    ]
    # The fake nvidia-smi refuses -r while anything holds a device file: the collector had let go.
    assert "stepped aside" in done.stdout
    assert "verified clean after" in done.stdout.splitlines()[-1]
    assert host.persistence() == ["1", "1"]
    lines = [json.loads(line) for line in host.audit.read_text().splitlines()]
    assert [(line["stage"], line["step"]) for line in lines] == [("intent", n) for n in range(1, 7)] + [
        ("reset", n) for n in range(1, 7)
    ]
    assert all(line["result"] == "ok" for line in lines[6:])
    assert lines[2]["command"][1:] == ["-r", "-i", uuid_of(0)]


def test_a_failed_reset_still_restores_persistence_and_says_not_clean(host: ResetHost) -> None:
    env = dict(host.env, FAKE_SMI_FAIL="-r")
    done = host.run("local", "0", "--yes", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert host.smi_calls() == [
        ["-pm", "0", "-i", uuid_of(0)],
        ["-r", "-i", uuid_of(0)],
        ["-pm", "1", "-i", uuid_of(0)],
    ]
    assert host.persistence()[0] == "1"
    assert "failed on purpose" in done.stdout
    assert "a step failed" in done.stdout.splitlines()[-1]


def test_yes_with_a_blocker_runs_nothing(host: ResetHost) -> None:
    with script(holder_code(host.prefix + "0"), ["holder"]):
        done = host.run("local", "0", "--yes")
    assert done.returncode == 1
    assert "nothing was run" in done.stderr
    assert host.smi_calls() == []
    assert not host.audit.exists()


def test_read_only_refuses(host: ResetHost) -> None:
    done = host.run("local", "0", "--yes", "--read-only")
    assert done.returncode == 2
    assert done.stderr.strip() == "gputui: local: read-only mode: reset refused, nothing is run"
    assert host.smi_calls() == []
    plan = host.run("local", "0", "--read-only")
    assert plan.returncode == 1
    assert "read-only mode" in plan.stdout


def test_no_nvidia_smi_says_so_and_cannot_perform(host: ResetHost) -> None:
    done = host.run("local", "0", env=host.without_smi())
    assert done.returncode == 1
    assert "nvidia-smi is not on PATH on this host: the reset cannot be performed" in done.stdout
    assert host.run("local", "0", "--yes", env=host.without_smi()).returncode == 1


def test_mig_blocks_and_a_display_means_reboot(host: ResetHost) -> None:
    host.state.gpus[0].mig_current = True
    host.state.gpus[1].display_active = True
    host.write()
    mig = host.run("local", "0")
    assert mig.returncode == 1
    assert "GPU 0: MIG mode is on" in mig.stdout
    display = host.run("local", "1")
    assert display.returncode == 1
    assert "a reset cannot work here: reboot (GPU 1: a display is attached)" in display.stdout


def test_nvswitch_baseboard_is_reset_whole(host: ResetHost) -> None:
    (host.root / "dev" / "nvidia-nvswitch0").write_bytes(b"")
    part = host.run("local", "0")
    assert part.returncode == 1
    assert "NVSwitch baseboard: all its GPUs must be free and reset together (missing: 1)" in part.stdout
    whole = host.run("local", "--all", "--yes")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert ["-r"] in host.smi_calls()
    assert not [call for call in host.smi_calls() if call[:1] == ["-r"] and len(call) > 1]


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["local"], "name at least one GPU"),
        (["local", "0;rm"], "not a GPU index or UUID"),
        (["local", "0", "--all"], "not both"),
        ([], "name the host"),
        (["3"], "'3' is taken as the host; name a GPU after it"),
    ],
)
def test_bad_words_are_one_line(host: ResetHost, words: list[str], message: str) -> None:
    done = host.run(*words)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_a_gpu_the_host_does_not_have_is_one_line(host: ResetHost) -> None:
    done = host.run("local", "7")
    assert done.returncode == 2
    assert done.stderr.strip() == "gputui: local: no GPU '7' on this host (an index or a UUID)"


def test_the_shipped_collector_on_python38_steps_aside_over_json_lines(host: ResetHost) -> None:
    env = dict(host.env, FAKE_SMI_RESET_S="1.5")
    with agent_process("--interval", "0.2", env=env, python=python38()) as agent:
        agent.next_snapshot()
        plan = agent.result({"cmd": "reset_plan", "gpus": ["0"]})["plan"]
        assert plan["verdict"] == "go"
        steps = [step["argv"] for step in plan["steps"]]
        changed = agent.send({"cmd": "reset_run", "gpus": ["0"], "steps": steps[:1]})
        assert changed["result"]["refused"] == "the plan changed since it was shown: nothing was run"
        assert host.smi_calls() == []
        agent.snapshots.clear()
        result = agent.result({"cmd": "reset_run", "gpus": ["0"], "steps": steps}, timeout_s=60)
        assert result["verified"] is True, result
        assert result["released"] is True
        assert [o["result"] for o in result["steps"]] == ["ok", "ok", "ok"]
        aside = [s for s in agent.snapshots if s.get("error") == result["stepped_aside"]]
        assert aside, "no snapshot said the collector stepped aside"
        assert not aside[0]["gpus"]
        back = agent.next_snapshot()
        assert back.get("error") is None
        assert len(back["gpus"]) == 2
    assert host.smi_calls() == [
        ["-pm", "0", "-i", uuid_of(0)],
        ["-r", "-i", uuid_of(0)],
        ["-pm", "1", "-i", uuid_of(0)],
    ]


def test_a_read_only_collector_refuses_the_run(host: ResetHost) -> None:
    with agent_process("--read-only", env=host.env) as agent:
        plan = agent.result({"cmd": "reset_plan", "gpus": None})["plan"]
        assert plan["verdict"] == "blocked"
        reply = agent.send({"cmd": "reset_run", "gpus": None, "steps": [s["argv"] for s in plan["steps"]]})
        assert reply["ok"] is False
        assert reply["error"] == "read-only mode: reset refused, nothing was run"
        bad = agent.send({"cmd": "reset_plan", "gpus": [7]})
        assert bad["ok"] is False
    assert host.smi_calls() == []


def test_without_nvml_the_modes_come_from_nvidia_smi(host: ResetHost) -> None:
    host.state.gpus[1].persistence = False
    host.write()
    env = dict(host.env, LD_LIBRARY_PATH=str(host.root / "no-such-lib"))
    done = host.run("--json", "local", "--all", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads(done.stdout)["plan"]
    assert [(g["uuid"], g["persistence"]) for g in plan["gpus"]] == [(uuid_of(0), True), (uuid_of(1), False)]
    assert [s["argv"][1:] for s in plan["steps"] if s["kind"] == "persistence_off"] == [
        ["-pm", "0", "-i", uuid_of(0)]
    ]
    assert ["--query-gpu" in " ".join(call) for call in host.smi_calls()] == [True] * len(host.smi_calls())


def test_a_simulated_host_plans_a_reset_by_the_collectors_rule(host: ResetHost) -> None:
    """The demo's wedged host: its defunct ranks hold the device nodes from the driver, so the plan is a
    reboot, as the collector's rule says of stuck holders; nothing real is asked of nvidia-smi."""
    done = host.run("--demo", "gpu-node-07", "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("gpu-node-07: a reset cannot work here: reboot (")
    assert "stuck in the driver (state Z)" in done.stdout
    assert host.smi_calls() == []


@contextlib.contextmanager
def gpu_stack_service(binary: str, device: str) -> Iterator[int]:
    """A real process whose first argument is a GPU-stack service's binary, holding ``device`` open, outside
    any systemd unit (as the GPU operator's pods run them)."""
    proc = subprocess.Popen(
        ["bash", "-c", f'exec 3<"$1"; exec -a "/usr/bin/{binary}" sleep 600', "bash", device],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(f"/usr/bin/{binary}".encode()):
            assert time.monotonic() < deadline, "the service stand-in did not start"
            time.sleep(0.02)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_gpu_stack_service_in_a_container_is_named_and_never_offered_to_kill(host: ResetHost) -> None:
    """RELIABILITY 55: the DCGM host engine, run as the GPU operator runs it, blocks the reset as a service
    to stop where it runs, and neither the plan nor ``gputui kill`` signals it."""
    with gpu_stack_service("nv-hostengine", host.prefix + "0") as pid:
        status, plan = host.plan_json("local", "0")
        done = host.run("local", "0")
        host.state.add_holder(0, pid, 300)  # DCGM's profiling module holds a context on the GPU
        host.write()
        kill = subprocess.run(
            [sys.executable, "-m", "gputui.cli", "kill", "local", str(pid), "--yes"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env=host.env,
        )
        kill_all = subprocess.run(
            [sys.executable, "-m", "gputui.cli", "kill", "local", "--all-gpu", "--yes"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env=host.env,
        )
        assert Path(f"/proc/{pid}").exists()
    assert status == 1
    held = [b for b in plan["blockers"] if b["code"] == "holder" and b["holder"]["pid"] == pid]
    assert held[0]["holder"]["kind"] == "gpu_service"
    assert held[0]["holder"]["service"] == "nv-hostengine"
    assert held[0]["effect"] == "blocked"
    line = next(line for line in done.stdout.splitlines() if f" {pid} " in f" {line} ")
    assert "nv-hostengine, the DCGM host engine, outside a systemd unit" in line
    assert "gputui kill" not in line
    assert kill.returncode != 0
    refusal = f"pid {pid} is nv-hostengine, the DCGM host engine: a GPU-stack service is never signalled"
    assert refusal in kill.stdout + kill.stderr
    assert refusal in kill_all.stdout + kill_all.stderr
