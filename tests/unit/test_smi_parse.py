"""The nvidia-smi mode: the CSV parser (fuzzed) and the long-lived ``-lms`` process with a fake nvidia-smi.

No nvidia-smi exists in CI: the parser is tested directly, and the agent's smi mode runs against a small
executable named ``nvidia-smi`` on PATH that prints what the test writes into files.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gputui.agent.gpu.smiparse import (
    parse_smi_apps_output,
    parse_smi_gpu_line,
    parse_smi_gpu_output,
    parse_smi_handle_error,
    smi_exit_error,
)
from gputui.core.model import HostSnapshot
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import SLEEPER, agent_process, script, wait_for

MISSING = ["[N/A]", "[Not Supported]", "[Unknown Error]", "ERR!", "", "N/A", "[Insufficient Permissions]"]
GOOD_LINE = "0, NVIDIA RTX PRO 6000 Blackwell, GPU-aaaa, 00000000:17:00.0, 3, 49152, 7, 41, 60.50, 600.00"


def test_a_good_line() -> None:
    assert parse_smi_gpu_line(GOOD_LINE) == {
        "index": 0,
        "name": "NVIDIA RTX PRO 6000 Blackwell",
        "uuid": "GPU-aaaa",
        "pci_bus_id": "00000000:17:00.0",
        "memory_used_mib": 3,
        "memory_total_mib": 49152,
        "memory_reserved_mib": None,
        "utilization_pct": 7,
        "temperature_c": 41,
        "power_w": 60.5,
        "power_limit_w": 600.0,
    }


def test_missing_markers_become_none_and_bad_memory_is_a_gpu_error() -> None:
    gpu = parse_smi_gpu_line("1, Tesla T4, GPU-b, 00000000:18:00.0, [Unknown Error], 15360, [N/A], ERR!, , ")
    assert gpu is not None
    assert gpu["memory_used_mib"] is None
    assert gpu["memory_total_mib"] == 15360
    assert gpu["utilization_pct"] is None
    assert gpu["temperature_c"] is None
    assert gpu["power_w"] is None
    assert gpu["power_limit_w"] is None
    assert gpu["error"] == "nvidia-smi: memory.used is [Unknown Error]"


def test_commas_in_the_name_plain_or_quoted() -> None:
    tail = "GPU-c, 00000000:19:00.0, 5, 81920, 0, 30, 50, 300"
    plain = parse_smi_gpu_line("2, NVIDIA A100, 80GB, PCIe, " + tail)
    quoted = parse_smi_gpu_line('2, "NVIDIA A100, 80GB, PCIe", ' + tail)
    assert plain is not None
    assert quoted is not None
    for gpu in (plain, quoted):
        assert gpu["name"] == "NVIDIA A100, 80GB, PCIe"
        assert gpu["uuid"] == "GPU-c"
        assert gpu["memory_used_mib"] == 5
        assert gpu["power_limit_w"] == 300.0


def test_comma_name_without_uuid_is_found_by_the_pci_bus_id() -> None:
    gpu = parse_smi_gpu_line("3, A, B, [N/A], 00000000:1A:00.0, 7, 100, 1, 2, 3, 4")
    assert gpu is not None
    assert gpu["name"] == "A, B"
    assert gpu["uuid"] is None
    assert gpu["memory_used_mib"] == 7


def test_extra_columns_are_ignored() -> None:
    gpu = parse_smi_gpu_line(GOOD_LINE + ", 1234, Enabled, [N/A]")
    assert gpu == parse_smi_gpu_line(GOOD_LINE)


def test_header_blank_and_junk_lines_give_no_gpu() -> None:
    header = (
        "index, name, uuid, pci.bus_id, memory.used [MiB], memory.total [MiB], utilization.gpu [%], "
        "temperature.gpu, power.draw [W], power.limit [W]"
    )
    assert parse_smi_gpu_output(header + "\n") == []
    assert parse_smi_gpu_output("") == []
    assert parse_smi_gpu_line("No devices were found") is None
    assert parse_smi_gpu_line("-1, x, y, z, 1, 2, 3, 4, 5, 6") is None


def test_short_line_is_an_error_for_that_gpu() -> None:
    assert parse_smi_gpu_line("4, NVIDIA") == {"index": 4, "error": "nvidia-smi printed 2 of 10 fields"}


def test_lost_gpu_message_names_the_bus_id() -> None:
    line = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system"
    assert parse_smi_handle_error(line) == ("00000000:3B:00.0", "GPU is lost")
    assert parse_smi_handle_error(GOOD_LINE) is None


def _line(index: int, bus: int, used: int = 3) -> str:
    fields = f"{index}, NVIDIA H100, GPU-{index:04d}, 00000000:{bus:02X}:00.0, {used}, 81559"
    return fields + ", 0, 35, 70.00, 700.00"


LOST_3B = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system"


def test_a_lost_gpu_is_an_error_row_at_its_place_in_bus_order() -> None:
    """Four GPUs on buses 17, 2A, 3B, 5D; the one on 3B is lost: NVML numbers them by bus, so it is GPU2."""
    text = "\n".join([LOST_3B, _line(0, 0x17), _line(1, 0x2A), _line(3, 0x5D)])
    gpus = parse_smi_gpu_output(text)
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert gpus[2] == {
        "index": 2,
        "pci_bus_id": "00000000:3B:00.0",
        "error": "GPU is lost",
        "unreachable": "lost",  # a fact with an action: a reboot
    }
    assert all("error" not in g for i, g in enumerate(gpus) if i != 2)
    # nvidia-smi renumbers what it can read (0, 1, 2): the lost GPU then takes the first free index.
    renumbered = parse_smi_gpu_output("\n".join([_line(0, 0x17), _line(1, 0x2A), _line(2, 0x5D), LOST_3B]))
    assert [(g["index"], g.get("error")) for g in renumbered] == [
        (0, None),
        (1, None),
        (2, None),
        (3, "GPU is lost"),
    ]
    # The same bus as a listed GPU is that GPU, already shown.
    assert len(parse_smi_gpu_output("\n".join([_line(0, 0x3B), LOST_3B]))) == 1


def test_exit_code_15_says_a_gpu_is_lost_not_the_first_csv_line() -> None:
    message = smi_exit_error(15, "\n".join([_line(0, 0x17), LOST_3B]))
    assert message.startswith("a GPU is lost (nvidia-smi exit 15): Unable to determine the device handle")
    assert "NVIDIA H100" not in message


def test_exit_code_9_says_the_driver_is_not_loaded() -> None:
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    driver = smi_exit_error(9, "\n" + message + "\n")
    assert driver == "NVIDIA driver not loaded (nvidia-smi exit 9): " + message
    no_devices = smi_exit_error(6, "No devices were found")
    assert no_devices == "nvidia-smi exited with status 6: No devices were found"
    assert "\n" not in smi_exit_error(9, "a\nb\nc")


def test_compute_apps() -> None:
    apps = parse_smi_apps_output(
        "GPU-a, 4242, 40960\nGPU-a, 4243, [N/A]\nGPU-b, [N/A], 3\n\nGPU-c, x, 1\nshort\nGPU-b, 99, 12 MiB\n"
    )
    assert apps == {
        "GPU-a": [
            {"pid": 4242, "used_mib": 40960, "type": "compute"},
            {"pid": 4243, "used_mib": None, "type": "compute"},
        ],
        "GPU-b": [{"pid": 99, "used_mib": 12, "type": "compute"}],
    }


def _check_typed(gpu: dict[str, Any]) -> None:
    assert isinstance(gpu["index"], int)
    for key in ("memory_used_mib", "memory_total_mib", "utilization_pct", "temperature_c"):
        assert gpu.get(key) is None or isinstance(gpu[key], int)
    for key in ("power_w", "power_limit_w"):
        assert gpu.get(key) is None or isinstance(gpu[key], float)
    for key in ("name", "uuid", "pci_bus_id", "error"):
        assert gpu.get(key) is None or isinstance(gpu[key], str)
    HostSnapshot.from_dict({"target": "t", "gpus": [gpu]})


@settings(max_examples=300, deadline=None)
@given(st.text())
@example("0,,,,,,,,,")
@example('0, "unterminated, name')
@example("0, x, GPU-1, 1:2:3.4, 1e400, nan, inf, -inf, 1e308, 99999999999999999999")
def test_any_text_parses_without_raising(text: str) -> None:
    for gpu in parse_smi_gpu_output(text):
        _check_typed(gpu)
    for procs in parse_smi_apps_output(text).values():
        for proc in procs:
            assert isinstance(proc["pid"], int)
            assert proc["pid"] > 0
    parse_smi_handle_error(text)
    assert "\n" not in smi_exit_error(9, text)


numbers = st.integers(min_value=0, max_value=10**6)
missing = st.sampled_from(MISSING)
name_parts = st.lists(
    st.text(
        alphabet=st.characters(blacklist_characters=',"\n\r', blacklist_categories=("Cs",)),
        min_size=1,
        max_size=12,
    )
    .map(str.strip)
    .filter(lambda s: s and not s.startswith(("GPU-", "MIG-", "["))),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=64),
    name=name_parts,
    used=st.one_of(numbers, missing),
    total=st.one_of(numbers, missing),
    util=st.one_of(st.integers(0, 100), missing),
    temp=st.one_of(st.integers(0, 120), missing),
    power=st.one_of(st.floats(0, 2000, allow_nan=False).map(lambda f: round(f, 2)), missing),
    extra=st.lists(st.sampled_from(["1", "[N/A]", "Enabled", "x, y"]), max_size=3),
)
def test_generated_lines_keep_every_value_or_none(
    index: int, name: list[str], used: Any, total: Any, util: Any, temp: Any, power: Any, extra: list[str]
) -> None:
    fields = [
        str(index),
        ", ".join(name),
        f"GPU-{index:04d}",
        f"00000000:{index:02X}:00.0",
        str(used),
        str(total),
        str(util),
        str(temp),
        str(power),
        "600.00",
        *extra,
    ]
    gpu = parse_smi_gpu_line(", ".join(fields))
    assert gpu is not None
    _check_typed(gpu)
    assert gpu["index"] == index
    assert gpu["name"] == ", ".join(name)
    assert gpu["uuid"] == f"GPU-{index:04d}"
    assert gpu["memory_used_mib"] == (used if isinstance(used, int) else None)
    assert gpu["memory_total_mib"] == (total if isinstance(total, int) else None)
    assert gpu["utilization_pct"] == (util if isinstance(util, int) else None)
    assert gpu["temperature_c"] == (temp if isinstance(temp, int) else None)
    assert gpu["power_w"] == (float(power) if isinstance(power, float) else None)
    assert gpu["power_limit_w"] == 600.0
    # Memory the GPU does not report (unified memory) is unknown; any other unreadable figure is an error.
    unreported = used in ("[N/A]", "[Not Supported]", "N/A")
    assert ("error" in gpu) == (not isinstance(used, int) and not unreported)
    assert gpu.get("memory_unreported", False) == unreported


# -- the long-lived process, with a fake nvidia-smi --------------------------------------------------------

FAKE_SMI = r"""#!{python}
import os, sys, time
here = os.environ["FAKE_SMI_DIR"]
def read(name):
    try:
        with open(os.path.join(here, name)) as fh:
            return fh.read()
    except OSError:
        return ""
with open(os.path.join(here, "calls"), "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\n")
def maybe_exit():
    code = read("exit").strip()
    if code:
        sys.stdout.write(read("message"))
        sys.stdout.flush()
        sys.exit(int(code))
maybe_exit()
args = sys.argv[1:]
if any(a.startswith("--query-compute-apps=") for a in args):
    sys.stdout.write(read("apps"))
elif "--query-gpu=driver_version" in args:
    print("570.124.06")
elif "-lms" in args:
    period_s = int(args[args.index("-lms") + 1]) / 1000.0
    while True:
        maybe_exit()
        sys.stdout.write(read("gpus"))
        sys.stdout.flush()
        time.sleep(period_s)
"""


def make_fake_smi(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI.replace("{python}", sys.executable))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    data = tmp_path / "smi"
    data.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["FAKE_SMI_DIR"] = str(data)
    return data, env


def gpu_lines(used: list[str]) -> str:
    names = ["NVIDIA H100 80GB HBM3", "NVIDIA A100, 80GB, PCIe"]
    return "".join(
        f"{i}, {names[i % 2]}, GPU-{i:04d}, 00000000:{0x17 + i:02X}:00.0, {u}, 81559, 0, 35, [N/A], 700.00\n"
        for i, u in enumerate(used)
    )


def test_nvidia_smi_mode_only_where_the_nvml_library_cannot_be_loaded(
    tmp_path: Path, fake_nvml: FakeNvml
) -> None:
    """With both on the host, NVML is used (no process per poll); nvidia-smi only without the library."""
    data, env = make_fake_smi(tmp_path)
    (data / "gpus").write_text(gpu_lines(["3", "3"]))
    with agent_process("--interval", "0.1", env=env) as agent:
        assert (agent.hello["mode"], agent.hello["error"]) == ("smi", None)
        assert len(agent.sample()["gpus"]) == 2
    with_library = dict(env, **{k: v for k, v in fake_nvml.env().items() if k != "PATH"})
    with agent_process("--interval", "0.1", env=with_library) as agent:
        assert (agent.hello["mode"], agent.hello["error"]) == ("nvml", None)
        assert len(agent.sample()["gpus"]) == 8


def test_long_lived_nvidia_smi_mode(tmp_path: Path) -> None:
    data, env = make_fake_smi(tmp_path)
    (data / "gpus").write_text(gpu_lines(["3", "3"]))
    with (
        script(SLEEPER, ["sleeper"]) as holder,
        agent_process("--no-pynvml", "--interval", "0.1", env=env) as agent,
    ):
        pid = holder.pids["sleeper"]
        assert agent.hello["mode"] == "smi"
        assert agent.hello["error"] is None
        snapshot = agent.sample()
        assert snapshot["mode"] == "smi"
        assert snapshot["driver_version"] == "570.124.06"
        assert [g["memory_used_mib"] for g in snapshot["gpus"]] == [3, 3]
        assert snapshot["gpus"][1]["name"] == "NVIDIA A100, 80GB, PCIe"
        assert snapshot["gpus"][0]["power_w"] is None

        (data / "apps").write_text(f"GPU-0001, {pid}, 30000\n")
        (data / "gpus").write_text(gpu_lines(["3", "30003"]))
        wait_for(
            lambda: [g["memory_used_mib"] for g in agent.sample()["gpus"]] == [3, 30003],
            "the long-lived nvidia-smi to report the new figure",
        )
        snapshot = agent.sample()
        gpu1 = snapshot["gpus"][1]
        assert gpu1["processes"] == [{"pid": pid, "used_mib": 30000, "type": "compute", "visible": True}]
        holder_proc = {p["pid"]: p for p in snapshot["processes"]}[pid]
        assert holder_proc["gpu_memory_mib"] == {"1": 30000}
        assert holder_proc["cmdline"] == holder.argv

        calls = (data / "calls").read_text().splitlines()
        loops = [c for c in calls if "-lms" in c]
        assert len(loops) == 1, calls  # one long-lived process, not one per sample
        assert loops[0].split() == [
            "--query-gpu=index,name,uuid,pci.bus_id,memory.used,memory.total,utilization.gpu,temperature.gpu,"
            "power.draw,power.limit",
            "--format=csv,noheader,nounits",
            "-lms",
            "100",
        ]
        assert any(c.startswith("--query-compute-apps=gpu_uuid,pid,used_memory") for c in calls)

        # The driver goes away: nvidia-smi exits 9. A host error, and the agent keeps serving.
        (data / "message").write_text("NVIDIA-SMI has failed: it couldn't communicate with the driver.\n")
        (data / "exit").write_text("9\n")

        def host_error() -> str | None:
            return agent.sample()["error"]

        wait_for(
            lambda: (host_error() or "").startswith("NVIDIA driver not loaded (nvidia-smi exit 9)"),
            "the exit status 9 to become a host error",
        )
        snapshot = agent.sample()
        assert snapshot["gpus"] == []
        assert agent.proc.poll() is None


def test_lost_gpu_line_in_the_loop_marks_that_gpu(tmp_path: Path) -> None:
    data, env = make_fake_smi(tmp_path)
    (data / "gpus").write_text(gpu_lines(["3", "3"]))
    with agent_process("--no-pynvml", "--interval", "0.1", env=env) as agent:
        assert [g["index"] for g in agent.sample()["gpus"]] == [0, 1]
        lost = "Unable to determine the device handle for GPU0000:18:00.0: GPU is lost.  Reboot the system\n"
        (data / "gpus").write_text(gpu_lines(["3"]) + lost)

        def gpu1_error() -> str | None:
            gpus = agent.sample()["gpus"]
            return gpus[1].get("error") if len(gpus) == 2 else None

        wait_for(lambda: gpu1_error() == "GPU is lost", "GPU 1 to be reported lost")
        gpus = agent.sample()["gpus"]
        assert gpus[0]["memory_used_mib"] == 3
        assert gpus[0].get("error") is None


def test_a_gpu_lost_from_the_start_is_an_error_row(tmp_path: Path) -> None:
    """No line of its own ever: only its bus id in the error message. Dropped, the host looked clean."""
    data, env = make_fake_smi(tmp_path)
    lost = "Unable to determine the device handle for GPU0000:19:00.0: GPU is lost.  Reboot the system\n"
    (data / "gpus").write_text(lost + gpu_lines(["3", "3"]))
    with agent_process("--no-pynvml", "--interval", "0.1", env=env) as agent:
        wait_for(lambda: len(agent.sample()["gpus"]) == 3, "the lost GPU to be listed")
        gpus = agent.sample()["gpus"]
        assert [(g["index"], g.get("error")) for g in gpus] == [(0, None), (1, None), (2, "GPU is lost")]
        assert gpus[2]["pci_bus_id"] == "00000000:19:00.0"
        snapshot = HostSnapshot.from_dict(agent.sample())
    from gputui.core.verdict import Baselines, analyze

    verdict = analyze(snapshot, Baselines()).verdict
    assert verdict is not None
    # A lost GPU is a known fact with its action, not "cannot tell".
    assert (verdict.clean, verdict.known) == (False, True)
    assert verdict.not_ready == ("GPU2 needs a reboot of the host (the driver says it is lost)",)


def test_nvidia_smi_that_exits_15_keeps_the_gpus_it_printed(tmp_path: Path) -> None:
    data, env = make_fake_smi(tmp_path)
    lost = "Unable to determine the device handle for GPU0000:19:00.0: GPU is lost.  Reboot the system\n"
    (data / "gpus").write_text(gpu_lines(["3", "3"]) + lost)
    (data / "message").write_text(gpu_lines(["3", "3"]) + lost)
    (data / "exit").write_text("15\n")
    with agent_process("--no-pynvml", "--interval", "0.1", env=env) as agent:
        wait_for(lambda: len(agent.sample()["gpus"]) == 3, "the GPUs nvidia-smi printed before exiting 15")
        snapshot = agent.sample()
    assert snapshot["error"] is None
    rows = [(g["index"], g.get("error")) for g in snapshot["gpus"]]
    assert rows == [(0, None), (1, None), (2, "GPU is lost")]


def test_silent_nvidia_smi_is_a_host_error_not_an_empty_host(tmp_path: Path) -> None:
    data, env = make_fake_smi(tmp_path)
    (data / "gpus").write_text("")  # the loop runs but prints nothing, like a hung driver call
    with agent_process("--no-pynvml", "--interval", "0.1", env=env) as agent:
        wait_for(
            lambda: (agent.sample()["error"] or "").startswith("nvidia-smi has printed no GPU line"),
            "the silence to be reported",
        )
        (data / "gpus").write_text(gpu_lines(["3"]))
        wait_for(lambda: agent.sample()["error"] is None, "the first line to clear the error")
        assert [g["memory_used_mib"] for g in agent.sample()["gpus"]] == [3]
