"""The collector against real pynvml over the fake libnvidia-ml.so.1, and real processes.

The agent runs in a subprocess started the way SSH starts it (its bundle on stdin, then JSON-line commands),
so pynvml loads the fake library through LD_LIBRARY_PATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputui.core.model import HostSnapshot
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import (
    CHAIN,
    REPO,
    SLEEPER,
    ZOMBIE_MAKER,
    Binary,
    agent_process,
    build_vfork_waiter,
    is_gone,
    script,
    start_ticks,
    state_of,
    wait_for,
)
from tests.interpreters import python38

NVML_BOUND_S = 20.0
"""Generous bound for a sample while one GPU hangs for a minute (the agent's own deadline is 2 s)."""


def gpus_by_index(snapshot):
    return {g["index"]: g for g in snapshot["gpus"]}


def procs_by_pid(snapshot):
    return {p["pid"]: p for p in snapshot["processes"]}


def parent_chain(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as fh:
            pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        if pid > 0:
            chain.append(pid)
    return chain


def test_eight_gpus_report_every_figure(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[1].reserved_mib = 500
    fake_nvml.state.gpus[2].util_pct = 87
    fake_nvml.state.gpus[2].power_mw = 412500
    fake_nvml.write()
    with agent_process(env=fake_nvml.env()) as agent:
        assert agent.hello["mode"] == "nvml"
        assert agent.hello["error"] is None
        assert agent.hello["protocol"] == 1
        snapshot = agent.sample()
    assert snapshot["error"] is None
    assert snapshot["driver_version"] == "570.124.06"
    assert snapshot["cuda_driver_version"] == "12.8"
    assert snapshot["mode"] == "nvml"
    assert snapshot["agent_pid"] == agent.hello["pid"]
    assert snapshot["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    gpus = gpus_by_index(snapshot)
    assert sorted(gpus) == list(range(8))
    for gpu in gpus.values():
        assert gpu.get("error") is None
        assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell"
        assert gpu["uuid"].startswith("GPU-")
        assert gpu["pci_bus_id"]
        assert gpu["memory_used_mib"] == 3  # v2: the reservation is not in "used"
        assert gpu["memory_total_mib"] == 49152
        assert gpu["temperature_c"] == 40
        assert gpu["power_limit_w"] == 600.0
        assert gpu["processes"] == []
    assert len({g["uuid"] for g in gpus.values()}) == 8
    assert gpus[1]["memory_reserved_mib"] == 500
    assert gpus[0]["memory_reserved_mib"] == 0
    assert gpus[2]["utilization_pct"] == 87
    assert gpus[2]["power_w"] == 412.5
    assert snapshot["device_holders"] is None  # nothing unaccounted: no /dev/nvidia* scan
    # The wire form is exactly what the model reads and writes back.
    model = HostSnapshot.from_dict(snapshot)
    assert HostSnapshot.from_dict(model.to_dict()) == model
    assert model.gpus[1].memory_reserved_mib == 500


@pytest.mark.parametrize("proc_source", ["psutil", "proc"])
def test_holder_tree_with_ancestors_and_descendants(fake_nvml: FakeNvml, proc_source: str) -> None:
    args = ["--no-psutil"] if proc_source == "proc" else []
    with (
        script(CHAIN, ["root", "holder", "leaf"]) as chain,
        agent_process(*args, env=fake_nvml.env()) as agent,
    ):
        assert agent.hello["psutil"] is (proc_source == "psutil")
        root, holder, leaf = chain.pids["root"], chain.pids["holder"], chain.pids["leaf"]
        fake_nvml.state.add_holder(2, holder, 1000)
        fake_nvml.write()
        snapshot = agent.sample()
        gpus = gpus_by_index(snapshot)
        assert gpus[2]["memory_used_mib"] == 1003
        assert gpus[2]["processes"] == [{"pid": holder, "used_mib": 1000, "type": "compute", "visible": True}]
        procs = procs_by_pid(snapshot)
        # The holder, its descendant, and every ancestor up to pid 1.
        expected = {holder, leaf, root, *parent_chain(root)}
        assert expected <= set(procs), sorted(expected - set(procs))
        me = pwd.getpwuid(os.getuid()).pw_name
        for pid in (root, holder, leaf):
            proc = procs[pid]
            assert proc["start_ticks"] == start_ticks(pid)
            assert proc["user"] == me
            assert proc["uid"] == os.getuid()
            assert proc["cmdline"] == chain.argv  # forked children keep the argv
            assert proc["state"] == "S"
            assert proc["rss_kib"] > 0
            assert proc["create_time"] == pytest.approx(time.time(), abs=120)
            assert proc["state_since"] is not None
        assert procs[holder]["ppid"] == root
        assert procs[leaf]["ppid"] == holder
        assert procs[holder]["gpu_memory_mib"] == {"2": 1000}
        assert procs[root]["gpu_memory_mib"] == {}
        assert snapshot["processes_time"] == snapshot["time"]


def test_graphics_and_compute_lists_are_both_reported(fake_nvml: FakeNvml) -> None:
    with (
        script(SLEEPER, ["sleeper"]) as first,
        script(SLEEPER, ["sleeper"]) as second,
        agent_process(env=fake_nvml.env()) as agent,
    ):
        a, b = first.pids["sleeper"], second.pids["sleeper"]
        fake_nvml.state.add_holder(7, a, 600)
        fake_nvml.state.add_holder(7, b, 250, "graphics")
        fake_nvml.write()
        snapshot = agent.sample()
        gpu7 = gpus_by_index(snapshot)[7]
        assert gpu7["memory_used_mib"] == 853
        assert sorted((p["pid"], p["type"], p["used_mib"]) for p in gpu7["processes"]) == sorted(
            [(a, "compute", 600), (b, "graphics", 250)]
        )
        procs = procs_by_pid(snapshot)
        assert procs[a]["gpu_memory_mib"] == {"7": 600}
        assert procs[b]["gpu_memory_mib"] == {"7": 250}
        assert snapshot["device_holders"] is None  # every MiB is accounted for


def test_zombie_appears_with_state_z_and_its_parent(fake_nvml: FakeNvml) -> None:
    with script(ZOMBIE_MAKER, ["parent", "zombie"]) as maker, agent_process(env=fake_nvml.env()) as agent:
        zombie, parent = maker.pids["zombie"], maker.pids["parent"]
        wait_for(lambda: state_of(zombie) == "Z", "the child to become a zombie")
        procs = procs_by_pid(agent.sample())
        assert procs[zombie]["state"] == "Z"
        assert procs[zombie]["ppid"] == parent
        assert procs[zombie]["cmdline"] == []
        assert procs[parent]["state"] == "S"  # listed as the zombie's ancestor


def test_d_state_process_is_listed(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    waiter_binary = build_vfork_waiter(tmp_path)
    waiter = Binary(waiter_binary, ["waiter"])
    try:
        pid = waiter.pids["waiter"]
        wait_for(lambda: state_of(pid) == "D", "the vfork parent to wait in state D")
        with agent_process(env=fake_nvml.env()) as agent:
            procs = procs_by_pid(agent.sample())
            assert procs[pid]["state"] == "D"
            assert procs[pid]["cmdline"] == [str(waiter_binary)]
    finally:
        waiter.kill()


def test_lost_gpu_is_an_error_while_the_others_report(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[3].error = "GPU_IS_LOST"
    fake_nvml.write()
    with agent_process(env=fake_nvml.env()) as agent:
        snapshot = agent.sample()
    gpus = gpus_by_index(snapshot)
    assert sorted(gpus) == list(range(8))
    assert gpus[3]["error"] == "GPU is lost"
    assert gpus[3].get("memory_used_mib") is None
    for index in (0, 1, 2, 4, 5, 6, 7):
        assert gpus[index].get("error") is None
        assert gpus[index]["memory_used_mib"] == 3
    assert snapshot["error"] is None


def test_driver_not_loaded_is_a_host_error(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.init_error = "DRIVER_NOT_LOADED"
    fake_nvml.write()
    with agent_process(env=fake_nvml.env()) as agent:
        assert agent.hello["error"] == "NVIDIA driver not loaded"
        snapshot = agent.sample()
        assert snapshot["error"] == "NVIDIA driver not loaded"
        assert snapshot["gpus"] == []
        assert agent.proc.poll() is None  # errors are data: the agent keeps serving


def test_library_not_found_is_a_host_error() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE")}
    with agent_process(env=env) as agent:
        snapshot = agent.sample()
    assert snapshot["error"] == "libnvidia-ml.so.1 not found"
    assert snapshot["gpus"] == []
    assert snapshot["mode"] == "nvml"


def test_hung_gpu_does_not_block_the_snapshot(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[5].hang_ms = 60_000
    fake_nvml.write()
    with agent_process(env=fake_nvml.env()) as agent:
        for _ in range(2):  # the second sample finds the call still stuck and skips the device at once
            snapshot = agent.sample(timeout_s=NVML_BOUND_S)
            gpus = gpus_by_index(snapshot)
            assert gpus[5]["error"] == "NVML call timed out"
            assert [gpus[i]["memory_used_mib"] for i in (0, 1, 2, 3, 4, 6, 7)] == [3] * 7
        # The stream of snapshots keeps flowing meanwhile.
        agent.result({"cmd": "configure", "memory_interval_s": 0.2})
        agent.next_snapshot(timeout_s=NVML_BOUND_S)


def test_a_gpu_that_hangs_mid_stream_is_isolated_and_the_others_keep_reporting(fake_nvml: FakeNvml) -> None:
    # Devices are queried one after another on one thread; the first overrun isolates the wedged device
    # and the devices after it still report in that same sample.
    with agent_process(env=fake_nvml.env()) as agent:
        assert [g.get("error") for g in agent.sample()["gpus"]] == [None] * 8
        fake_nvml.state.gpus[2].hang_ms = 60_000
        fake_nvml.write()
        started = time.monotonic()
        first = gpus_by_index(agent.sample(timeout_s=3 * NVML_BOUND_S))
        first_s = time.monotonic() - started
        assert first[2]["error"] == "NVML call timed out"
        assert [first[i]["memory_used_mib"] for i in (0, 1, 3, 4, 5, 6, 7)] == [3] * 7
        assert all(first[i].get("error") is None for i in (0, 1, 3, 4, 5, 6, 7))
        started = time.monotonic()
        second = gpus_by_index(agent.sample(timeout_s=NVML_BOUND_S))
        # Still stuck: skipped at once instead of waited for again.
        assert time.monotonic() - started < first_s
        assert second[2]["error"] == "NVML call timed out"
        assert [second[i]["memory_used_mib"] for i in (0, 1, 3, 4, 5, 6, 7)] == [3] * 7


def test_memory_returns_to_baseline_after_the_holder_is_killed(fake_nvml: FakeNvml) -> None:
    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process(env=fake_nvml.env()) as agent:
        pid = sleeper.pids["sleeper"]
        ticks = start_ticks(pid)
        fake_nvml.state.add_holder(0, pid, 5000)
        fake_nvml.write()
        before = agent.sample()
        assert gpus_by_index(before)[0]["memory_used_mib"] == 5003
        assert procs_by_pid(before)[pid]["gpu_memory_mib"] == {"0": 5000}
        outcomes = agent.result(
            {
                "cmd": "kill",
                "boot_id": before["boot_id"],
                "signal": "TERM",
                "tree": False,
                "escalate_s": 10.0,
                "targets": [{"pid": pid, "start_ticks": ticks}],
            }
        )["outcomes"]
        assert [o["result"] for o in outcomes] == ["sent", "exited"]
        assert outcomes[0]["gpu_mib"] == 5000
        wait_for(lambda: is_gone(pid), "the holder to die")
        after = agent.sample()
        gpu0 = gpus_by_index(after)[0]
        assert gpu0["memory_used_mib"] == 3
        assert gpu0["processes"] == []


def test_pid_from_another_namespace_is_not_visible(fake_nvml: FakeNvml) -> None:
    pid = 4_194_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    fake_nvml.state.add_holder(4, pid, 2048, "invisible")
    fake_nvml.write()
    with agent_process(env=fake_nvml.env()) as agent:
        snapshot = agent.sample()
    gpu4 = gpus_by_index(snapshot)[4]
    assert gpu4["processes"] == [{"pid": pid, "used_mib": 2048, "type": "compute", "visible": False}]
    assert pid not in procs_by_pid(snapshot)


def test_in_a_child_pid_namespace_an_unrelated_local_pid_is_not_the_holder(fake_nvml: FakeNvml) -> None:
    """The driver reports pid 1 holding memory; inside a container pid 1 is some unrelated process.

    The agent runs in a new PID namespace (unshare), where pid 1 is the agent's own process and has no
    /dev/nvidia* node open: it must not be shown as the holder. On the host the same report is pid 1.
    """
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux unshare is needed to make a PID namespace"
    fake_nvml.state.add_holder(0, 1, 4096)
    fake_nvml.write()
    prefix = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    with agent_process(env=fake_nvml.env(), prefix=prefix) as agent:
        assert agent.hello["pid_namespace"] == "child"
        assert agent.hello["pid"] == 1
        snapshot = agent.sample()
    gpu0 = gpus_by_index(snapshot)[0]
    assert gpu0["processes"] == [{"pid": 1, "used_mib": 4096, "type": "compute", "visible": False}]
    assert all(p["gpu_memory_mib"] == {} for p in snapshot["processes"])
    with agent_process(env=fake_nvml.env()) as agent:
        assert agent.hello["pid_namespace"] == "host"
        snapshot = agent.sample()
    assert gpus_by_index(snapshot)[0]["processes"][0]["visible"] is True
    assert procs_by_pid(snapshot)[1]["gpu_memory_mib"] == {"0": 4096}


# Inside the new namespaces: /dev is a tmpfs of its own (so a file named /dev/nvidia1 can be held without a
# device node), and a process of the container holds it under a pid number the driver also reports.
CONTAINER_WITH_A_HOLDER = r"""
set -e
mount -t tmpfs tmpfs /dev
: > /dev/null
: > /dev/nvidia1
F="$HOLDER_PID_FILE" sh -c 'exec 3</dev/nvidia1; echo $$ > "$F.tmp"; mv "$F.tmp" "$F"; exec sleep 600' &
exec "$@"
"""


def test_in_a_pid_namespace_a_container_process_holding_a_gpu_node_is_not_the_drivers_pid(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """The driver's pids are the host's: a container process that shares the number and holds
    /dev/nvidia1 is not the process the driver lists on GPU0, is never shown holding its memory, and no
    kill plan names it (RELIABILITY 54)."""
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux unshare is needed to make a PID namespace"
    pid_file = tmp_path / "holder.pid"
    env = dict(fake_nvml.env(), HOLDER_PID_FILE=str(pid_file))
    prefix = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount", "--mount-proc"]
    prefix += ["sh", "-c", CONTAINER_WITH_A_HOLDER, "container"]
    with agent_process(env=env, prefix=prefix) as agent:
        assert agent.hello["pid_namespace"] == "child"
        deadline = time.monotonic() + 30
        while not pid_file.exists():
            assert time.monotonic() < deadline, "the container's holder did not start"
            time.sleep(0.05)
        inner = int(pid_file.read_text())
        fake_nvml.state.add_holder(0, inner, 30000)
        fake_nvml.write()
        snapshot = agent.sample()
        listed = procs_by_pid(snapshot)
        holder = listed.get(inner)
        assert holder is None or holder["gpu_memory_mib"] == {}, holder
        assert gpus_by_index(snapshot)[0]["processes"] == [
            {"pid": inner, "used_mib": 30000, "type": "compute", "visible": False}
        ]
        judged = HostSnapshot.from_dict(snapshot)
        assert all(p.gpu_memory_mib == {} for p in judged.processes)


def test_unaccounted_memory_triggers_the_device_holder_scan(fake_nvml: FakeNvml) -> None:
    with agent_process(env=fake_nvml.env()) as agent:
        assert agent.sample()["device_holders"] is None
        fake_nvml.state.add_holder(6, 1, 900, "ghost")  # counted in used memory, listed nowhere
        fake_nvml.write()
        snapshot = agent.sample()
        assert gpus_by_index(snapshot)[6]["memory_used_mib"] == 903
        assert gpus_by_index(snapshot)[6]["processes"] == []
        holders = snapshot["device_holders"]
        assert isinstance(holders, list)  # scanned (this host has no /dev/nvidia* nodes to find)
        assert all(h["device"].startswith("/dev/nvidia") for h in holders)


def test_process_data_is_reused_while_gpu_memory_stands_still(fake_nvml: FakeNvml) -> None:
    with agent_process(env=fake_nvml.env()) as agent:
        agent.result({"cmd": "configure", "memory_interval_s": 0.1, "process_interval_s": 3600})
        forced = agent.sample()
        later = [agent.next_snapshot() for _ in range(25)]  # 2.5 s: past the changed-memory gap too
        assert later[-1]["time"] - forced["time"] > 2.0
        assert {snapshot["processes_time"] for snapshot in later} == {forced["processes_time"]}
        again = agent.sample()
        assert again["processes_time"] > forced["processes_time"]


def test_a_gpu_whose_memory_moved_has_its_process_list_read_again(fake_nvml: FakeNvml) -> None:
    """A new CUDA context allocates memory: the list follows the memory without a forced sample."""
    with script(SLEEPER, ["sleeper"]) as sleeper, agent_process(env=fake_nvml.env()) as agent:
        agent.result({"cmd": "configure", "memory_interval_s": 0.1, "process_interval_s": 3600})
        forced = agent.sample()
        pid = sleeper.pids["sleeper"]
        fake_nvml.state.add_holder(1, pid, 700)
        fake_nvml.write()
        written = time.monotonic()
        listed = None
        while listed is None and time.monotonic() < written + 30:
            snapshot = agent.next_snapshot()
            gpu = gpus_by_index(snapshot)[1]
            if gpu["memory_used_mib"] == 703 and [p["pid"] for p in gpu["processes"]] == [pid]:
                listed = snapshot
            elif snapshot["processes_time"] == forced["processes_time"]:
                assert gpu["processes"] == []  # memory may move first; the list is the forced one's
        assert listed is not None, "the new holder was never listed"
        assert listed["processes_time"] > forced["processes_time"]
        # Read on the first sample after the changed-memory gap (2 s from the forced list), not an hour later.
        assert time.monotonic() - written < 10


def test_memory_samples_keep_the_last_telemetry_until_its_interval_or_a_process_sample(
    fake_nvml: FakeNvml,
) -> None:
    """Utilisation, temperature and power are read on their own cadence; memory on every sample."""
    fake_nvml.state.gpus[2].util_pct = 10
    fake_nvml.write()
    with agent_process("--telemetry-interval", "3600", env=fake_nvml.env()) as agent:
        agent.result({"cmd": "configure", "memory_interval_s": 0.1, "process_interval_s": 3600})
        assert gpus_by_index(agent.sample())[2]["utilization_pct"] == 10
        fake_nvml.state.gpus[2].util_pct = 90
        fake_nvml.state.gpus[2].baseline_mib = 100
        fake_nvml.write()
        deadline = time.monotonic() + 30
        while gpus_by_index(snapshot := agent.next_snapshot())[2]["memory_used_mib"] != 100:
            assert time.monotonic() < deadline, "memory figures did not follow the state file"
        assert gpus_by_index(snapshot)[2]["utilization_pct"] == 10  # memory is fresh, telemetry is kept
        assert gpus_by_index(snapshot)[2]["temperature_c"] is not None
        assert gpus_by_index(agent.sample())[2]["utilization_pct"] == 90  # a process sample reads it all
    with agent_process("--telemetry-interval", "0", env=fake_nvml.env()) as agent:
        agent.result({"cmd": "configure", "memory_interval_s": 0.1, "process_interval_s": 3600})
        agent.sample()
        fake_nvml.state.gpus[2].util_pct = 33
        fake_nvml.write()
        deadline = time.monotonic() + 30
        while gpus_by_index(agent.next_snapshot())[2]["utilization_pct"] != 33:
            assert time.monotonic() < deadline, "telemetry did not follow the state file at interval 0"


def test_a_bad_telemetry_interval_is_one_line_and_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gputui.agent", "--telemetry-interval", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == "gputui-agent: --telemetry-interval must be 0 or a positive number\n"


def test_stream_lines_leave_out_process_lists_already_sent(fake_nvml: FakeNvml) -> None:
    """--elide-unchanged: a line whose lists are the previous line's says so instead of repeating them."""
    fake_nvml.state.gpus[1].baseline_mib = 703
    fake_nvml.write()
    elide = agent_process("--elide-unchanged", env=fake_nvml.env())
    with elide as agent, script(SLEEPER, ["sleeper"]) as sleeper:
        agent.result({"cmd": "configure", "memory_interval_s": 0.1, "process_interval_s": 3600})
        fake_nvml.state.add_holder(1, sleeper.pids["sleeper"], 700)
        fake_nvml.state.gpus[1].baseline_mib = 3
        fake_nvml.write()
        for _ in range(4):
            agent.next_snapshot()
        lines = agent.snapshots  # every stream line so far, in order
        assert "processes" in lines[0]  # the first line carries the lists
        assert "processes_same" not in lines[0]
        later = [line for line in lines[1:] if line["processes_time"] == lines[0]["processes_time"]]
        assert len(later) >= 4
        for line in later[-2:]:
            assert line["processes_same"] is True
            assert "processes" not in line
            assert all("processes" not in gpu for gpu in line["gpus"])
            assert gpus_by_index(line)[1]["memory_used_mib"] == 703  # memory is still in every line
        forced = agent.sample()  # a reply carries everything, and moves processes_time on
        assert [p["pid"] for p in gpus_by_index(forced)[1]["processes"]] == [sleeper.pids["sleeper"]]
        deadline = time.monotonic() + 30
        while (line := agent.next_snapshot())["processes_time"] != forced["processes_time"]:
            assert time.monotonic() < deadline, "no stream line with the forced sample's list"
        assert "processes" in line  # the first line with a new list carries it
        assert "processes_same" not in line


def test_calibrate_returns_used_memory_per_gpu_key(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[7].baseline_mib = 5
    fake_nvml.write()
    with agent_process(env=fake_nvml.env()) as agent:
        snapshot = agent.sample()
        result = agent.result({"cmd": "calibrate"})
    used = result["memory_used_mib"]
    assert len(used) == 8
    uuid7 = gpus_by_index(snapshot)[7]["uuid"]
    assert used[uuid7] == 5
    assert sorted(used.values()) == [3] * 7 + [5]


def test_configure_rejects_bad_intervals(fake_nvml: FakeNvml) -> None:
    with agent_process(env=fake_nvml.env()) as agent:
        for bad in (0, -1, "x", float("inf"), True, 1e-300, 1e10):
            reply = agent.send({"cmd": "configure", "memory_interval_s": bad})
            assert reply["ok"] is False
            assert reply["error"] == "memory_interval_s must be a number of seconds from 0.05 to 3600"
        # An escalation nobody could wait for is refused before anything is signalled.
        reply = agent.send({"cmd": "kill", "escalate_s": 1e10, "targets": [{"pid": 1, "start_ticks": 1}]})
        assert reply == {
            "t": "reply",
            "id": reply["id"],
            "ok": False,
            "error": "escalate_s must be seconds up to 3600, or null",
        }


def test_the_remote_form_refuses_a_busy_loop_interval() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gputui.agent", "--once", "--interval", "1e-300"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == "gputui-agent: --interval must be a number of seconds from 0.05 to 3600\n"


def test_quit_and_eof_end_the_agent(fake_nvml: FakeNvml) -> None:
    with agent_process(env=fake_nvml.env()) as agent:
        assert agent.result({"cmd": "quit"}) == {}
        assert agent.proc.wait(timeout=10) == 0
    with agent_process(env=fake_nvml.env()) as agent:
        assert agent.proc.stdin is not None
        agent.proc.stdin.close()
        assert agent.proc.wait(timeout=10) == 0


def test_shipped_agent_runs_on_python38_without_nvml_or_psutil() -> None:
    """The remote form on Python 3.8 with NVML off and neither psutil nor nvidia-smi: /proc still tells."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE")}
    env["PATH"] = "/nonexistent"  # no nvidia-smi either
    with (
        script(ZOMBIE_MAKER, ["parent", "zombie"]) as maker,
        agent_process("--no-pynvml", "--no-psutil", python=python38(), env=env) as agent,
    ):
        assert agent.hello["python"].startswith("3.8.")
        assert agent.hello["mode"] == "none"
        assert "nvidia-smi" in agent.hello["error"]
        assert agent.hello["psutil"] is False
        wait_for(lambda: state_of(maker.pids["zombie"]) == "Z", "the zombie")
        snapshot = agent.sample()
        assert snapshot["mode"] == "none"
        assert snapshot["gpus"] == []
        assert procs_by_pid(snapshot)[maker.pids["zombie"]]["state"] == "Z"
        HostSnapshot.from_dict(snapshot)


def test_python38_streams_full_nvml_figures_with_the_shipped_bindings(fake_nvml: FakeNvml) -> None:
    """A python3 with no pynvml of its own (3.8 here): the collector's own copy reads every GPU and its
    processes through NVML, in the stream a client reads."""
    with (
        script(CHAIN, ["root", "holder", "leaf"]) as chain,
        agent_process("--interval", "0.2", python=python38(), env=fake_nvml.env()) as agent,
    ):
        assert agent.hello["python"].startswith("3.8.")
        assert (agent.hello["mode"], agent.hello["pynvml"], agent.hello["error"]) == ("nvml", "bundled", None)
        holder = chain.pids["holder"]
        fake_nvml.state.add_holder(3, holder, 4096)
        fake_nvml.write()
        snapshot = agent.sample()
        gpus = gpus_by_index(snapshot)
        assert sorted(gpus) == list(range(8))
        assert gpus[3]["memory_used_mib"] == 4099
        assert gpus[3]["processes"] == [{"pid": holder, "used_mib": 4096, "type": "compute", "visible": True}]
        assert all(gpu["temperature_c"] is not None and gpu["name"] for gpu in gpus.values())
        assert {chain.pids["root"], holder, chain.pids["leaf"]} <= set(procs_by_pid(snapshot))
        # The stream's lines, queued since the start, reach the holder within seconds.
        wait_for(lambda: agent.next_snapshot()["gpus"][3]["memory_used_mib"] == 4099, "the stream")
        assert HostSnapshot.from_dict(agent.next_snapshot()).gpus[3].memory_used_mib == 4099


def test_garbage_command_lines_get_an_error_reply_and_the_agent_goes_on(fake_nvml: FakeNvml) -> None:
    with agent_process(env=fake_nvml.env()) as agent:
        assert agent.proc.stdin is not None
        for garbage in (b"not json\n", b"[1, 2]\n", b"\xff\xfe\n", b'{"cmd": 5}\n'):
            agent.proc.stdin.write(garbage)
            agent.proc.stdin.flush()
            reply = agent._next("reply", 30.0)
            assert reply["ok"] is False
            assert reply["error"]
        assert len(agent.sample()["gpus"]) == 8


V1_FALLBACK = r"""
import json, pynvml
real = pynvml.nvmlDeviceGetMemoryInfo
def old_driver(handle, version=None):
    if version:  # a driver without nvmlDeviceGetMemoryInfo_v2
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    return real(handle)
pynvml.nvmlDeviceGetMemoryInfo = old_driver
from gputui.agent.collector import Agent
agent = Agent()
print(json.dumps([agent.sample(), agent.sample()]))
agent.close()
"""


def test_memory_info_falls_back_to_v1_on_an_old_driver(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[0].reserved_mib = 500
    fake_nvml.write()
    done = subprocess.run(
        [sys.executable, "-c", V1_FALLBACK],
        cwd=REPO,
        env=fake_nvml.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for snapshot in json.loads(done.stdout):
        gpu0 = gpus_by_index(snapshot)[0]
        assert gpu0.get("error") is None
        assert gpu0["memory_used_mib"] == 503  # v1 counts the reservation as used
        assert gpu0["memory_reserved_mib"] is None  # unknown, not zero


def test_state_since_is_when_the_agent_first_saw_the_current_state(fake_nvml: FakeNvml) -> None:
    with script(SLEEPER, ["sleeper"]) as holder, agent_process(env=fake_nvml.env()) as agent:
        pid = holder.pids["sleeper"]
        fake_nvml.state.add_holder(0, pid, 100)
        fake_nvml.write()
        first = procs_by_pid(agent.sample())[pid]
        again = procs_by_pid(agent.sample())[pid]
        assert first["state"] == again["state"] == "S"
        assert again["state_since"] == first["state_since"]
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: state_of(pid) == "T", "the holder to stop")
            stopped = procs_by_pid(agent.sample())[pid]
            assert stopped["state"] == "T"
            assert stopped["state_since"] > first["state_since"]
            assert procs_by_pid(agent.sample())[pid]["state_since"] == stopped["state_since"]
        finally:
            os.kill(pid, signal.SIGCONT)


def test_a_changed_power_limit_shows_on_memory_only_lines_within_the_telemetry_interval(
    fake_nvml: FakeNvml,
) -> None:
    """The limit is read with the telemetry (it changes at run time); lines without process lists carry it."""
    with agent_process("--interval", "0.1", "--process-interval", "60", env=fake_nvml.env()) as agent:
        first = agent.next_snapshot()
        assert {g["power_limit_w"] for g in first["gpus"]} == {600.0}
        fake_nvml.state.gpus[3].power_limit_mw = 450000  # as `nvidia-smi -i 3 -pl 450` would
        fake_nvml.write()
        deadline = time.monotonic() + 10
        seen = []
        while time.monotonic() < deadline:
            snapshot = agent.next_snapshot()
            assert snapshot["processes_time"] == first["processes_time"]  # no process sample in between
            seen.append(gpus_by_index(snapshot)[3]["power_limit_w"])
            if seen[-1] == 450.0:
                break
        assert seen[-1] == 450.0, seen
        assert None not in seen  # every memory-only line has the limit, not only the process samples


@pytest.mark.parametrize("python", ["current", "3.8"])
def test_a_watched_holder_exit_is_sampled_at_once_with_a_fresh_list(fake_nvml: FakeNvml, python: str) -> None:
    """``watch_exits`` (a clean-slate check): the line after a GPU holder dies comes at once, not an interval
    later, and lists processes read with it; without it the interval is kept."""
    interpreter = python38() if python == "3.8" else sys.executable
    with (
        script(SLEEPER, ["sleeper"]) as sleeper,
        agent_process(env=fake_nvml.env(), python=interpreter) as agent,
    ):
        pid = sleeper.pids["sleeper"]
        fake_nvml.state.add_holder(0, pid, 5000)
        fake_nvml.write()
        agent.result({"cmd": "configure", "memory_interval_s": 30, "process_interval_s": 3600})
        assert gpus_by_index(agent.sample())[0]["memory_used_mib"] == 5003
        with contextlib.suppress(AssertionError):
            while True:
                agent.next_snapshot(timeout_s=0.3)  # the lines sent before the interval changed
        agent.result({"cmd": "configure", "watch_exits": True})
        with pytest.raises(AssertionError):
            agent.next_snapshot(timeout_s=0.5)  # the interval stands while nobody exits
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        line = agent.next_snapshot(timeout_s=10)
        assert time.monotonic() - killed < 2.0  # the interval is 30 s
        assert gpus_by_index(line)[0]["memory_used_mib"] == 3
        assert line["processes_time"] == line["time"]
        assert gpus_by_index(line)[0]["processes"] == []
        bad = agent.send({"cmd": "configure", "watch_exits": "yes"})
        assert not bad["ok"]
        assert "watch_exits" in bad["error"]
