"""The benchmark's minimal path runs and prints real figures (no timing is asserted: the suite never times)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

RUN_BENCH = Path(__file__).with_name("run_bench.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _run_bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``run_bench.py ARGS`` with its cache under ``tmp_path``: the finished run and the rows it wrote."""
    rows_path = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(RUN_BENCH), *args, "--json", str(rows_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
        env=dict(os.environ, GPUTUI_BENCH_CACHE=str(tmp_path / "cache")),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, json.loads(rows_path.read_text())["rows"]


def _assert_measured(row: dict[str, Any]) -> None:
    """A figure that was measured: a finite positive number, never a placeholder."""
    assert isinstance(row["value"], float), row
    assert math.isfinite(row["value"]), row
    assert row["value"] > 0, row


def test_section_one_prints_a_table_of_measured_figures(tmp_path: Path) -> None:
    proc, listed = _run_bench(tmp_path, "--section", "1", "--quick", "--no-peers", "--processes", "40")
    header = next(line for line in proc.stdout.splitlines() if line.startswith("sec "))
    assert header.split()[:4] == ["sec", "metric", "median", "unit"]
    rows = {row["metric"]: row for row in listed}
    for metric in (
        "pynvml floor: memory+process lists x8",
        "gputui agent: full sample",
        "gputui agent: memory-only sample",
    ):
        _assert_measured(rows[metric])
        # The same figure is on the printed table, as a number.
        line = next(line for line in proc.stdout.splitlines() if metric in line)
        assert re.search(r"\s\d+(\.\d+)?\s+CPU ms/sample", line), line
    # Peers were switched off: said so, never a made-up number.
    assert rows["nvitop 1.7.2 API snapshot"]["value"] is None
    assert "n/a (--no-peers)" in proc.stdout
    # The agent spawned nothing while sampling.
    assert rows["gputui agent: processes spawned"]["value"] == 0


def test_the_metrics_section_prints_measured_figures(tmp_path: Path) -> None:
    _, listed = _run_bench(tmp_path, "--section", "7", "--quick")
    rows = {row["metric"]: row for row in listed}
    for engine in ("vllm", "sglang"):
        probes = [
            row for metric, row in rows.items() if metric.startswith(f"{engine} metrics probe + filter")
        ]
        assert probes
        for row in probes + [rows[f"{engine} client parse + state update"]]:
            _assert_measured(row)
        wire = rows[f"{engine} metrics on the wire per sample"]
        assert 0 < wire["value"] < 2048, wire  # a few hundred bytes of a ~50 KB body
        assert re.search(r"of a \d{5} B body", wire["compare"]), wire


def test_the_overhead_section_prints_the_collector_start_with_its_target(tmp_path: Path) -> None:
    _, rows = _run_bench(
        tmp_path, "--section", "8", "--overhead", "start", "--quick", "--no-peers", "--processes", "40"
    )
    start = next(row for row in rows if row["metric"].startswith("collector start"))
    _assert_measured(start)
    assert start["target"] == "<= 50 ms", start
    assert start["verdict"] in ("PASS", "FAIL"), start


def test_the_exporter_section_measures_gputui_s_exporter(tmp_path: Path) -> None:
    rows_path = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(RUN_BENCH.with_name("exporter_bench.py")), "--no-peers", "--window-s", "3",
         "--json", str(rows_path)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
        env=dict(os.environ, GPUTUI_BENCH_CACHE=str(tmp_path / "cache")), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {row["metric"]: row for row in json.loads(rows_path.read_text())["rows"]}
    ours = rows["gputui exporter: CPU per scrape (1 s scrape, 1 s sample)"]
    _assert_measured(ours)
    assert ours["series"] > 50
    assert rows["nvitop-exporter 1.7.2: CPU per scrape"]["value"] is None  # not installed: said, not made up
    assert "gputui exporter: CPU per scrape" in proc.stdout


NVML_CALLS = """
import os, sys, pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    handle = pynvml.nvmlDeviceGetHandleByIndex(i)
    pynvml.nvmlDeviceGetMemoryInfo(handle)
    if i < 3:
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
print(os.getpid())
"""


def test_nvml_calls_are_counted_in_the_library(tmp_path: Path) -> None:
    """Section 9's counting build of the fake NVML counts calls into it, not its own internal calls."""
    from tests.bench.nvml_counts import build_counting_lib, process_list_calls, read_counts
    from tests.fakenvml import FakeNvmlState, env_for

    lib_dir = build_counting_lib(tmp_path / "lib")
    state = tmp_path / "state"
    FakeNvmlState.with_gpus(8).write(state)
    counts_dir = tmp_path / "counts"
    counts_dir.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", NVML_CALLS],
        env=dict(env_for(lib_dir, state), FAKE_NVML_COUNT_DIR=str(counts_dir)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    counts = read_counts(counts_dir, int(done.stdout.split()[-1]))
    memory = {name: calls for name, calls in counts.items() if name.startswith("nvmlDeviceGetMemoryInfo")}
    assert sum(memory.values()) == 8
    assert process_list_calls(counts) == 3
    assert sum(calls for name, calls in counts.items() if name.startswith("nvmlDeviceGetHandleByIndex")) == 8
    assert read_counts(counts_dir, 1) == {}  # a process that made no call has no counts
