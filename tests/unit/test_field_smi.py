"""nvidia-smi and NVML as the field writes them: real captures through the real parsers, a unified-memory GPU
(GB10) that reports no memory, a GPU in "Unknown Error" beside healthy ones, and what the clean slate makes
of them.

The samples live in ``tests/data/nvidia_smi``, each naming its source in its leading ``#`` lines; a
``# $ nvidia-smi …`` line gives the query's columns where the output has no header of its own. The
collector's smi mode runs against a small executable named ``nvidia-smi`` that prints a sample; its NVML mode
against the fake libnvidia-ml with memory info NOT_SUPPORTED.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.agent.gpu.smiparse import (
    SMI_GPU_COLUMNS,
    parse_smi_apps_output,
    parse_smi_gpu_output,
    parse_smi_handle_error,
    smi_run,
)
from gputui.commands.output.verdict_text import verdict_lines
from gputui.core.model import Gpu, GpuProcess, HostSnapshot, Proc, replace
from gputui.core.verdict import Baselines, analyze, memory_at_baseline, memory_verdict
from gputui.core.verdict.wording import REASON_SENTENCES
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import SLEEPER, agent_process, script, wait_for
from tests.unit.test_smi_parse import make_fake_smi

DATA = Path(__file__).resolve().parent.parent / "data" / "nvidia_smi"
GB10_NOTE = "GPU0 memory not reported (unified memory): judged by its processes"


def sample(name: str) -> str:
    """A sample's nvidia-smi output: its lines without the leading ``#`` lines that name the source."""
    return "".join(line for line in (DATA / name).read_text().splitlines(True) if not line.startswith("#"))


def query_columns(name: str, option: str = "--query-gpu=") -> tuple[str, ...]:
    """The columns of the ``# $ nvidia-smi <option>…`` line a sample recorded."""
    for line in (DATA / name).read_text().splitlines():
        if line.startswith("# $ nvidia-smi ") and option in line:
            return tuple(line.split(option, 1)[1].split()[0].split(","))
    raise AssertionError(f"{name} names no {option} query")


def test_every_sample_names_its_source() -> None:
    for path in sorted(DATA.glob("*.txt")):
        head = path.read_text().splitlines()[0]
        assert head.startswith(("# Source:", "# HAND-ADAPTED", '# "Unable')), path.name


# (file, idle/load) -> the figures gputui reads: name, used MiB, total MiB, util %, temperature C, power W.
EXPORTER_CAPTURES = {
    "exporter_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt": [
        ("NVIDIA H100 80GB HBM3", 0, 81559, 0, 41, 69.85),
        ("NVIDIA H100 80GB HBM3", 19818, 81559, 100, 59, 631.95),
    ],
    # MIG mode: utilization.gpu is [N/A] (it is per instance), memory is still the whole card's.
    "exporter_linux-x86_64__nvidia-h100-mig__590.48.01.txt": [
        ("NVIDIA H100 80GB HBM3", 59, 81559, None, 42, 71.15),
        ("NVIDIA H100 80GB HBM3", 11125, 81559, None, 53, 433.78),
    ],
    "exporter_linux-x86_64__nvidia-h200__590.48.01.txt": [
        ("NVIDIA H200", 0, 143771, 0, 28, 77.71),
        ("NVIDIA H200", 32362, 143771, 100, 52, 627.4),
    ],
    "exporter_linux-x86_64__nvidia-l40s__595.80.txt": [
        ("NVIDIA L40S", 0, 46068, 100, 63, 144.97),
        ("NVIDIA L40S", 1235, 46068, 9, 54, 110.23),
    ],
    "exporter_linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt": [
        ("NVIDIA GeForce RTX 4080 SUPER", 596, 16376, 0, 43, 26.2),
        ("NVIDIA GeForce RTX 4080 SUPER", 1474, 16376, 7, 46, 84.24),
    ],
    "exporter_windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt": [
        ("NVIDIA GeForce RTX 2080 SUPER", 702, 8192, 0, 40, 38.92),
        ("NVIDIA GeForce RTX 2080 SUPER", 1296, 8192, 7, 45, 97.43),
    ],
}


@pytest.mark.parametrize("name", list(EXPORTER_CAPTURES))
def test_real_captures_with_their_header_and_units(name: str) -> None:
    """A header line names the columns (hundreds of them here, in another order); units are in the figures."""
    gpus = parse_smi_gpu_output(sample(name))
    read = [
        (g["name"], g["memory_used_mib"], g["memory_total_mib"], g["utilization_pct"], g["temperature_c"])
        + (g["power_w"],)
        for g in gpus
    ]
    assert read == EXPORTER_CAPTURES[name]
    for gpu in gpus:
        assert gpu["index"] == 0
        assert "error" not in gpu
        assert gpu["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"  # masked by the capture tool
        assert gpu["pci_bus_id"].startswith("00000000:")


def _gb10(gpu: dict[str, Any]) -> None:
    assert gpu["index"] == 0
    assert gpu["name"] == "NVIDIA GB10"
    assert gpu["memory_used_mib"] is None
    assert gpu["memory_total_mib"] is None
    assert "error" not in gpu


def test_gb10_memory_is_not_reported_not_an_error() -> None:
    # Its own query, no header: the columns come from the command line the sample recorded.
    columns = query_columns("gb10_marimo_pr6822.txt")
    assert columns == ("index", "name", "memory.total", "memory.used", "memory.free")
    (marimo,) = parse_smi_gpu_output(sample("gb10_marimo_pr6822.txt"), columns)
    _gb10(marimo)
    assert marimo["memory_unreported"] is True
    # With a header; memory.used not asked for at all: unknown, and nothing said about it.
    (unsloth,) = parse_smi_gpu_output(sample("gb10_unsloth_pr10703.txt"))
    _gb10(unsloth)
    # gputui's own query, as the collector and the reduced mode run it.
    assert query_columns("gb10_query_adapted.txt") == SMI_GPU_COLUMNS
    gpus, host_error = smi_run(0, sample("gb10_query_adapted.txt"))
    assert host_error is None
    (ours,) = gpus
    _gb10(ours)
    assert ours["memory_unreported"] is True
    assert (ours["pci_bus_id"], ours["temperature_c"], ours["power_w"], ours["power_limit_w"]) == (
        "0000000F:01:00.0",
        36,
        3.0,
        None,
    )
    gpu = Gpu.from_dict(ours)
    assert (gpu.memory_unreported, gpu.error, gpu.memory_used_mib) == (True, None, None)


def test_gb10_processes_report_their_memory() -> None:
    columns = query_columns("gb10_apps_llama_swap_782.txt", "--query-compute-apps=")
    apps = parse_smi_apps_output(sample("gb10_apps_llama_swap_782.txt"), columns)
    assert apps == {"GPU-...": [{"pid": 114687, "used_mib": 19135, "type": "compute"}]}


def test_unknown_error_lines_name_their_gpu() -> None:
    found = [parse_smi_handle_error(line) for line in sample("handle_errors_unknown.txt").splitlines()]
    assert found == [
        ("00000000:4F:00.0", "Unknown Error"),
        ("00000000:0B:00.0", "Unknown Error"),
        ("00000000:08:00.0", "Unknown Error"),
        ("00000000:20:00.0", "Unknown Error"),
        ("00000000:17:00.0", "Unknown Error"),
    ]


def test_a_gpu_in_unknown_error_beside_healthy_ones() -> None:
    """nvidia-smi exits 255: the GPUs it read stand, the one it could not open is an error row of its own."""
    gpus, host_error = smi_run(255, sample("unknown_error_run_adapted.txt"))
    assert host_error is None  # the error is that GPU's, not the host's
    rows = [(g["index"], g.get("pci_bus_id"), g.get("memory_used_mib"), g.get("error")) for g in gpus]
    assert rows == [
        (0, "00000000:0A:00.0", 10822, None),
        (1, "00000000:41:00.0", 1, None),
        (2, "00000000:42:00.0", 1, None),
        (3, "00000000:0B:00.0", None, "Unknown Error"),
    ]
    verdict = analyze(HostSnapshot.from_dict({"target": "h", "gpus": gpus}), Baselines()).verdict
    assert verdict is not None
    assert (verdict.clean, verdict.known) == (False, False)  # cannot tell, never clean
    assert "GPU3 error: Unknown Error" in verdict.reasons


def test_exit_statuses_that_say_no_gpu_can_be_read() -> None:
    text = sample("unknown_error_run_adapted.txt")
    assert smi_run(9, text) == ([], "NVIDIA driver not loaded (nvidia-smi exit 9): " + text.splitlines()[0])
    # A failure no GPU row explains is said beside the GPUs it printed: the host cannot be told clean.
    gpus, host_error = smi_run(255, "\n".join(text.splitlines()[1:]) + "\nFailed to query: Unknown Error\n")
    assert len(gpus) == 3
    assert host_error == "nvidia-smi exited with status 255: Failed to query: Unknown Error"
    assert smi_run(6, "No devices were found\n") == (
        [],
        "nvidia-smi exited with status 6: No devices were found",
    )


# -- the clean slate of a GPU that reports no memory ---------------------------------------------------------


def _host(*, listed: bool) -> HostSnapshot:
    worker = Proc(pid=4242, ppid=1, user="alice", state="S", name="python3", gpu_memory_mib={0: 19135})
    gpu = Gpu(
        index=0,
        name="NVIDIA GB10",
        memory_unreported=True,
        processes=(GpuProcess(4242, 19135),) if listed else (),
    )
    return HostSnapshot(target="spark", boot_id="b", gpus=(gpu,), processes=(worker,) if listed else ())


def test_the_clean_slate_judges_it_by_its_processes() -> None:
    clean = analyze(_host(listed=False), Baselines()).verdict
    assert clean is not None
    assert (clean.clean, clean.known, clean.reasons) == (True, True, ())
    assert clean.gpus[0].note == GB10_NOTE
    assert REASON_SENTENCES["unreported_memory"](0) == GB10_NOTE
    held = analyze(_host(listed=True), Baselines()).verdict
    assert held is not None
    assert (held.clean, held.known) == (False, True)
    assert held.reasons == ("GPU0 memory not reported (unified memory): held by pid 4242 (python3, orphan)",)
    # The check's cheap memory test waits for the process list; the fleet, which has none, cannot tell.
    assert memory_at_baseline(_host(listed=False), Baselines())
    assert not memory_at_baseline(_host(listed=True), Baselines())
    fleet = memory_verdict(_host(listed=False), Baselines())
    assert (fleet.clean, fleet.known, fleet.reasons) == (
        False,
        False,
        ("GPU0 memory not reported (unified memory)",),
    )
    # A figure where the flag says there is none is read as a figure (a collector is not trusted to say so).
    figured = replace(
        _host(listed=False), gpus=(replace(_host(listed=False).gpus[0], memory_used_mib=90000),)
    )
    assert analyze(figured, Baselines()).verdict.gpus[0].note is None  # type: ignore[union-attr]


def test_check_prints_the_note_on_the_gpu_line(tmp_path: Path) -> None:
    snapshot = replace(_host(listed=False), verdict=analyze(_host(listed=False), Baselines()).verdict)
    with (tmp_path / "out").open("w") as stream:
        lines = verdict_lines(snapshot, stream)
    assert lines[0].startswith("GPU0  – MiB  ")
    assert lines[0].endswith("memory not reported (unified memory): judged by its processes")


# -- the collector: nvidia-smi and NVML on such hosts --------------------------------------------------------


def test_smi_mode_reads_a_gb10_and_survives_an_unknown_error_exit(tmp_path: Path) -> None:
    data, env = make_fake_smi(tmp_path)
    (data / "gpus").write_text(sample("gb10_query_adapted.txt"))
    with agent_process("--no-pynvml", "--interval", "0.1", env=env) as agent:
        snapshot = agent.sample()
        (gpu,) = snapshot["gpus"]
        assert (gpu["name"], gpu["memory_used_mib"], gpu.get("error")) == ("NVIDIA GB10", None, None)
        assert gpu["memory_unreported"] is True
        assert snapshot["error"] is None
    (tmp_path / "unknown").mkdir()
    data, env = make_fake_smi(tmp_path / "unknown")
    run = sample("unknown_error_run_adapted.txt")
    (data / "gpus").write_text(run)
    (data / "message").write_text(run)
    (data / "exit").write_text("255\n")
    with agent_process("--no-pynvml", "--interval", "0.1", env=env) as agent:
        wait_for(lambda: len(agent.sample()["gpus"]) == 4, "the GPUs nvidia-smi printed before exiting 255")
        snapshot = agent.sample()
    assert snapshot["error"] is None
    rows = [(g["index"], g.get("error")) for g in snapshot["gpus"]]
    assert rows == [(0, None), (1, None), (2, None), (3, "Unknown Error")]


def test_nvml_memory_not_supported_is_unknown_and_judged_by_processes(fake_nvml: FakeNvml) -> None:
    """The fake library answers both memory info calls NOT_SUPPORTED for GPU 0, as a GB10's driver does."""
    fake_nvml.state.gpus[0].unsupported = "memory"
    fake_nvml.write()
    with (
        script(SLEEPER, ["sleeper"]) as holder,
        agent_process("--interval", "0.1", env=fake_nvml.env()) as agent,
    ):
        pid = holder.pids["sleeper"]
        fake_nvml.state.add_holder(0, pid, 19135)
        fake_nvml.write()
        wait_for(lambda: bool(agent.sample()["gpus"][0].get("processes")), "the holder to be listed")
        snapshot = agent.sample()
        gpu0, gpu1 = snapshot["gpus"][:2]
        assert (gpu0["memory_used_mib"], gpu0["memory_total_mib"], gpu0.get("error")) == (None, None, None)
        assert gpu0["memory_unreported"] is True
        assert gpu0["processes"] == [{"pid": pid, "used_mib": 19135, "type": "compute", "visible": True}]
        assert gpu1["memory_used_mib"] == 3
        assert "memory_unreported" not in gpu1
        verdict = analyze(HostSnapshot.from_dict(snapshot), Baselines()).verdict
        assert verdict is not None
        assert (verdict.clean, verdict.known) == (False, True)
        assert verdict.reasons[0].startswith("GPU0 memory not reported (unified memory): held by pid ")
        fake_nvml.state.holders.clear()
        fake_nvml.write()
        wait_for(lambda: not agent.sample()["gpus"][0].get("processes"), "the holder to be gone")
        snapshot = agent.sample()
    verdict = analyze(HostSnapshot.from_dict(snapshot), Baselines()).verdict
    assert verdict is not None
    assert (verdict.clean, verdict.known) == (True, True)
    assert verdict.gpus[0].note == GB10_NOTE


# -- hostile headers: the columns a header names are the input's too -----------------------------------------

COLUMN_NAMES = [*SMI_GPU_COLUMNS, "memory.free", "timestamp", "driver_version", "pstate", "x"]


@settings(max_examples=300, deadline=None)
@given(
    columns=st.lists(st.sampled_from(COLUMN_NAMES), min_size=1, max_size=12),
    rows=st.lists(
        st.lists(
            st.sampled_from(["0", "7", "-1", "NVIDIA GB10", "[N/A]", "[Not Supported]", "ERR!", "", "1e400"])
        )
    ),
)
def test_any_header_and_rows_parse_without_raising(columns: list[str], rows: list[list[str]]) -> None:
    text = "\n".join([", ".join(columns), *(", ".join(row) for row in rows)])
    for gpu in parse_smi_gpu_output(text):
        assert isinstance(gpu["index"], int)
        assert 0 <= gpu["index"] <= 4095
        Gpu.from_dict(gpu)
    parse_smi_apps_output(text, tuple(columns))
