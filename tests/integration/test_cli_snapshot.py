"""``python -m gputui.cli snapshot`` end to end: real pynvml over the fake NVML, real holder processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gputui.core.text import visible
from tests.fakenvml import FakeNvmlState
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO, SLEEPER, is_gone, script, wait_for

HOSTILE_ARG = "\x1b]0;pwned\x07\x1b[2J[bold]x[/bold]\u202e;rm -rf ~"


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as state:  # no calibration recorded by whoever runs the tests
        return subprocess.run(
            [sys.executable, "-m", "gputui.cli", "snapshot", *args],
            cwd=REPO,
            env=dict(env, XDG_STATE_HOME=state),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def snapshot_json(fake: FakeNvml) -> dict[str, Any]:
    done = run_cli("--json", env=fake.env())
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    document = json.loads(done.stdout)
    assert len(document["hosts"]) == 1
    return document["hosts"][0]


def expected_gpus(state: FakeNvmlState, alive: set[int]) -> list[dict[str, Any]]:
    """What the state file says each GPU must report."""
    gpus = []
    for index, gpu in enumerate(state.gpus):
        holders = [h for h in state.holders if h.gpu == index and h.pid in alive]
        gpus.append(
            {
                "index": index,
                "name": gpu.name,
                "memory_used_mib": gpu.baseline_mib + sum(h.mib for h in holders),
                "memory_total_mib": gpu.total_mib,
                "memory_reserved_mib": gpu.reserved_mib,
                "utilization_pct": gpu.util_pct,
                "temperature_c": gpu.temp_c,
                "power_w": gpu.power_mw / 1000,
                "power_limit_w": gpu.power_limit_mw / 1000,
                "processes": sorted(h.pid for h in holders),
            }
        )
    return gpus


def reported_gpus(host: dict[str, Any]) -> list[dict[str, Any]]:
    keys = (
        "index",
        "name",
        "memory_used_mib",
        "memory_total_mib",
        "memory_reserved_mib",
        "utilization_pct",
        "temperature_c",
        "power_w",
        "power_limit_w",
    )
    return [
        dict({k: g[k] for k in keys}, processes=sorted(p["pid"] for p in g["processes"]))
        for g in host["gpus"]
    ]


def test_json_snapshot_equals_the_state_file_and_follows_a_kill(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[2].util_pct = 55
    fake_nvml.state.gpus[4].reserved_mib = 321
    with script(SLEEPER, ["sleeper"]) as first, script(SLEEPER, ["sleeper"]) as second:
        a, b = first.pids["sleeper"], second.pids["sleeper"]
        fake_nvml.state.add_holder(0, a, 20000)
        fake_nvml.state.add_holder(1, a, 18000)
        fake_nvml.state.add_holder(5, b, 4096)
        fake_nvml.write()
        host = snapshot_json(fake_nvml)
        assert host["target"] == "local"
        assert host["error"] is None
        assert host["driver_version"] == "570.124.06"
        assert reported_gpus(host) == expected_gpus(fake_nvml.state, {a, b})
        procs = {p["pid"]: p for p in host["processes"]}
        assert procs[a]["gpu_memory_mib"] == {"0": 20000, "1": 18000}
        # The visible form, as every view shows it: a python -c script's newlines arrive as backslash-n.
        assert procs[a]["cmdline"] == [visible(word) for word in first.argv]

        first.kill()
        wait_for(lambda: is_gone(a), "the first holder to die")
        after = snapshot_json(fake_nvml)
        assert reported_gpus(after) == expected_gpus(fake_nvml.state, {b})
        assert [g["memory_used_mib"] for g in after["gpus"]][:2] == [3, 3]
        assert a not in {p["pid"] for p in after["processes"]}


def test_table_lists_gpus_and_sanitised_processes(fake_nvml: FakeNvml) -> None:
    with script(SLEEPER, ["sleeper"], argv_extra=[HOSTILE_ARG]) as holder:
        pid = holder.pids["sleeper"]
        fake_nvml.state.gpus[3].error = "GPU_IS_LOST"
        fake_nvml.state.add_holder(6, pid, 1234)
        fake_nvml.write()
        done = run_cli(env=fake_nvml.env())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    gpu_lines = [line for line in lines if re.match(r"^ {2}\d {2}", line)]
    assert len(gpu_lines) == 8
    assert any("3 / 49152" in line for line in gpu_lines)
    assert any("1237 / 49152" in line for line in gpu_lines)
    assert any(line.lstrip().startswith("3 ") and "GPU is lost" in line for line in gpu_lines)
    process_lines = [line for line in lines if line.lstrip().startswith(str(pid))]
    assert len(process_lines) == 1
    assert "6:1234" in process_lines[0]
    # Terminal-active characters are shown as escapes; nothing raw reaches the terminal.
    assert "\x1b" not in done.stdout
    assert "\u202e" not in done.stdout
    assert process_lines[0].endswith("…")  # long command lines are cut to the column


def test_json_output_escapes_c1_bidi_and_zero_width_and_stays_valid(fake_nvml: FakeNvml) -> None:
    """JSON output is often piped to a terminal: nothing terminal-active or invisible is printed raw."""
    hostile = "csi\x9b2J bidi\u202eexe zero\u200bwidth join\u2060er del\x7f"
    with script(SLEEPER, ["sleeper"], argv_extra=[hostile]) as holder:
        pid = holder.pids["sleeper"]
        fake_nvml.state.add_holder(2, pid, 512)
        fake_nvml.write()
        done = run_cli("--json", env=fake_nvml.env())
    assert done.returncode == 0, done.stderr
    for raw in ("\x9b", "\u202e", "\u200b", "\u2060", "\x7f"):
        assert raw not in done.stdout
    process = {p["pid"]: p for p in json.loads(done.stdout)["hosts"][0]["processes"]}[pid]
    # The model holds the visible form, so JSON carries it too: `jq -r` prints nothing terminal-active either.
    assert process["cmdline"][-1] == "csi\\x9b2J bidi\\u202eexe zero\\u200bwidth join\\u2060er del\\x7f"


def test_table_shows_hostile_strings_as_visible_escapes() -> None:
    from gputui.commands.snapshot import format_table
    from gputui.core.model import Gpu, GpuProcess, HostSnapshot, Proc

    snapshot = HostSnapshot(
        target="local",
        hostname="node\x1b[2J",
        gpus=(
            Gpu(
                index=0,
                name="[bold]GPU\x9b",
                memory_used_mib=None,
                memory_total_mib=49152,
                processes=(GpuProcess(pid=42, used_mib=None), GpuProcess(pid=43, visible=False)),
            ),
        ),
        processes=(Proc(pid=42, user="ev\u202eil\u200b", name="x", cmdline=("python", HOSTILE_ARG)),),
    )
    text = "\n".join(format_table(snapshot))
    assert "\u200b" not in text
    assert "ev\\u202eil\\u200b" in text
    assert "\x1b" not in text
    assert "\x9b" not in text
    assert "\u202e" not in text
    assert "node\\x1b[2J" in text
    assert "[bold]GPU\\x9b" in text
    assert "python \\x1b]0;pwned\\x07\\x1b[2J[bold]x[/bold]\\u202e;rm -rf ~" in text
    assert "ev\\u202eil" in text
    assert "– / 49152" in text  # missing value: a dash, never a fake zero
    assert "0:–" in text
    assert "(not visible here)" in text


def test_missing_values_show_as_a_dash(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.gpus[0].error = "NOT_SUPPORTED"  # every call fails: not lost, just not supported
    fake_nvml.write()
    done = run_cli(env=fake_nvml.env())
    assert done.returncode == 0, done.stderr
    assert "–" in done.stdout


def test_no_driver_is_one_line_on_stderr_and_exit_2(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.init_error = "DRIVER_NOT_LOADED"
    fake_nvml.write()
    for args in ((), ("--json",)):
        done = run_cli(*args, env=fake_nvml.env())
        assert done.returncode == 2
        assert done.stderr.splitlines() == ["gputui: local: NVIDIA driver not loaded"]
        assert "Traceback" not in done.stdout + done.stderr
    # JSON still carries the error as data.
    assert json.loads(done.stdout)["hosts"][0]["error"] == "NVIDIA driver not loaded"


def test_no_nvml_library_is_one_line_on_stderr_and_exit_2() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE")}
    done = run_cli(env=env)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["gputui: local: libnvidia-ml.so.1 not found"]
    assert done.stdout == ""


def test_unreachable_host_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = dict(os.environ, HOME=str(tmp_path))  # no ssh config or known_hosts of the machine's user
    done = run_cli("--connect-timeout", "5", "127.0.0.1:1", env=env)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("gputui: ")
    assert "127.0.0.1" in done.stderr
    assert "Traceback" not in done.stderr


def test_demo_snapshot_shows_the_simulated_host() -> None:
    done = run_cli("--demo", "--json", env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    host = json.loads(done.stdout)["hosts"][0]
    assert host["target"] == "gpu-node-07"
    assert len(host["gpus"]) == 8
    assert host["mode"] == "sim"
