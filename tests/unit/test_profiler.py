"""Profiled jobs: real profiler command lines and environments (tests/data/profilers.txt), the marks the
collector sends, the finding and its sentence, the server's reason, and what a killed profiler leaves."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from gputui.agent.proc import profiler
from gputui.agent.proc.jobmemory import JobMemory
from gputui.core.fleet.exported import ExportedHost, ExportedSubject, exported_findings
from gputui.core.model import (
    FindingFacts,
    Gpu,
    GpuProcess,
    HostSnapshot,
    Proc,
    ProfilerMark,
    Remembered,
    plain,
)
from gputui.core.servers import job_facts
from gputui.core.verdict import Baselines, find_problems, word_finding
from gputui.core.verdict.remains import job_remains

DATA = Path(__file__).resolve().parents[1] / "data" / "profilers.txt"
NOW_S = 1_800_000_000.0


def _cases() -> list[tuple[str, str]]:
    rows = []
    for line in DATA.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            expect, _, text = line.partition("\t")
            rows.append((expect, text))
    return rows


ARGV_CASES = [(e, t) for e, t in _cases() if not t.startswith("env:")]
ENV_CASES = [(e, t[len("env:") :].strip()) for e, t in _cases() if t.startswith("env:")]


@pytest.mark.parametrize(("expect", "command"), ARGV_CASES)
def test_real_command_lines_by_binary_and_shape(expect: str, command: str) -> None:
    found = profiler.profiler_of_argv(shlex.split(command))
    if expect == "-":
        assert found is None
    else:
        assert found is not None
        assert f"{found['tool']}/{found['command']}" == expect
        assert found["via"] == "argv"


def test_the_options_that_matter_are_read() -> None:
    argv = shlex.split(ARGV_CASES[2][1])  # the layer-wise NVTX launch
    found = profiler.profiler_of_argv(argv)
    assert found == {
        "tool": "nsys",
        "via": "argv",
        "command": "profile",
        "cuda_graph_trace": "node",
        "capture_range": "cudaProfilerApi",
        "output": "layerwise_profile",
    }
    short = profiler.profiler_of_argv(["nsys", "profile", "-tcuda,nvtx", "-o", "/tmp/r", "python", "-o", "x"])
    assert short is not None
    assert short["trace"] == "cuda,nvtx"
    assert short["output"] == "/tmp/r"


@pytest.mark.parametrize(("expect", "env"), ENV_CASES)
def test_real_environments(expect: str, env: str) -> None:
    block = b"\0".join(pair.encode() for pair in env.split(" ;; ")) + b"\0"
    found = profiler.injection_of_environ(block)
    if expect == "-":
        assert found is None
    else:
        assert found is not None
        assert found["tool"] == expect
        # Only the keys and a library name from gputui's own table: no other value of the environment.
        kept = repr(found)
        for pair in env.split(" ;; "):
            key, _, value = pair.partition("=")
            if key not in profiler.ENV_KEYS:
                assert value not in kept
        assert "/" not in kept


def test_a_huge_environment_is_read_no_further_than_the_cap(tmp_path: Path) -> None:
    fake = tmp_path / "proc" / "77"
    fake.mkdir(parents=True)
    filler = b"X=" + b"y" * (profiler.ENVIRON_MAX_BYTES + 10) + b"\0"
    (fake / "environ").write_bytes(filler + b"CUDA_INJECTION64_PATH=/opt/libToolsInjection64.so\0")
    marks = profiler.ProfilerMarks(proc_root=str(tmp_path / "proc"))
    assert marks.mark(77, 1, ["python3", "worker.py"]) is None  # past the cap: not read, not guessed
    (fake / "environ").write_bytes(b"CUDA_INJECTION64_PATH=/opt/libToolsInjection64.so\0" + filler)
    marks = profiler.ProfilerMarks(proc_root=str(tmp_path / "proc"))
    assert marks.mark(77, 1, ["python3"]) == {
        "tool": "nsys",
        "via": "environ",
        "keys": ["CUDA_INJECTION64_PATH"],
        "library": "libToolsInjection64.so",
    }
    unreadable = profiler.ProfilerMarks(proc_root=str(tmp_path / "nowhere"))
    assert unreadable.mark(78, 1, ["python3"]) == {"tool": None, "via": "unreadable"}


def _wedged(*, mark: ProfilerMark | None, worker_mark: ProfilerMark | None = None) -> HostSnapshot:
    nsys = Proc(pid=4100, ppid=1, name="nsys", cmdline=("nsys", "profile"), start_ticks=1, profiler=mark)
    launcher = Proc(pid=4200, ppid=4100, name="python3", start_ticks=2)
    worker = Proc(
        pid=4241,
        ppid=4200,
        name="scheduler_TP1",
        start_ticks=3,
        gpu_memory_mib={0: 4096},
        profiler=worker_mark,
    )
    gpu = Gpu(index=0, memory_used_mib=4099, processes=(GpuProcess(pid=4241, used_mib=4096),))
    return HostSnapshot(target="h", time=NOW_S, gpus=(gpu,), processes=(nsys, launcher, worker))


NSYS_MARK = ProfilerMark.from_dict(profiler.profiler_of_argv(shlex.split(ARGV_CASES[2][1])))


def test_the_finding_names_the_profiler_its_options_and_advice() -> None:
    (finding,) = [f for f in find_problems(_wedged(mark=NSYS_MARK), Baselines()) if f.kind == "profiled"]
    assert finding.pid == 4100
    assert finding.detail == (
        "the job of pid 4100 (nsys) runs under Nsight Systems (nsys profile): nsys's default trace "
        "(NVTX on), cuda-graph-trace node, capture-range cudaProfilerApi, output layerwise_profile"
    )
    assert finding.action.startswith("tracing every CUDA call and NVTX range can stall")
    # The fleet words it from the exported facts with the same function.
    assert finding.facts is not None
    again = word_finding("profiled", "h", FindingFacts.from_dict(plain(finding.facts)) or FindingFacts())
    assert again == finding


def test_an_injection_in_a_worker_and_what_is_no_finding() -> None:
    injected = ProfilerMark.from_dict(
        {
            "tool": "nsys",
            "via": "environ",
            "keys": ["CUDA_INJECTION64_PATH"],
            "library": "libToolsInjection64.so",
        }
    )
    (finding,) = [
        f
        for f in find_problems(_wedged(mark=None, worker_mark=injected), Baselines())
        if f.kind == "profiled"
    ]
    assert finding.pid == 4241
    assert "is profiled: pid 4241 (scheduler_TP1) carries the injection of Nsight Systems" in finding.detail
    assert "CUDA_INJECTION64_PATH set to libToolsInjection64.so" in finding.detail
    assert not [f for f in find_problems(_wedged(mark=None), Baselines()) if f.kind.startswith("profile")]


def test_an_environment_that_cannot_be_read_is_unknown_never_a_guess() -> None:
    unknown = ProfilerMark.from_dict({"tool": None, "via": "unreadable"})
    findings = find_problems(_wedged(mark=unknown, worker_mark=unknown), Baselines())
    (finding,) = [f for f in findings if f.kind.startswith("profile")]
    assert finding.kind == "profiler_unknown"
    assert finding.detail.startswith("profiler: unknown for 2 processes of GPU jobs")
    # A profiler found elsewhere in the job decides: nothing is unknown about that job.
    known = find_problems(_wedged(mark=NSYS_MARK, worker_mark=unknown), Baselines())
    assert [f.kind for f in known if f.kind.startswith("profile")] == ["profiled"]


def test_the_server_reason_names_the_profiler() -> None:
    facts = job_facts(_wedged(mark=NSYS_MARK), 4200)
    assert facts.profiled == "its job is under Nsight Systems (nsys profile)"
    assert job_facts(_wedged(mark=None), 4200).profiled == ""


def test_the_fleet_words_the_exported_profiler_as_the_monitor_does() -> None:
    (finding,) = [f for f in find_problems(_wedged(mark=NSYS_MARK), Baselines()) if f.kind == "profiled"]
    subject = ExportedSubject(
        kind="profiled", pid=4100, comm="nsys", root_pid=4100, root_comm="nsys", profiler=NSYS_MARK
    )
    exported = ExportedHost(subjects=(subject,), profiler_unknown=3)
    fleet = exported_findings(exported, HostSnapshot(target="h"), NOW_S)
    assert [f.detail for f in fleet if f.kind == "profiled"] == [finding.detail]
    assert [f.detail for f in fleet if f.kind == "profiler_unknown"][0].startswith("profiler: unknown for 3")


def test_an_unfinished_report_and_a_profiler_left_running(tmp_path: Path) -> None:
    output = tmp_path / "glm5_decode"
    stream = tmp_path / "glm5_decode.qdstrm"
    stream.write_bytes(b"q" * 4096)
    memory = JobMemory("boot", str(tmp_path / "record.json"))
    mark = profiler.profiler_of_argv(["nsys", "profile", "--trace=cuda,nvtx", "-o", str(output), "python3"])
    procs = [
        {"pid": 4100, "start_ticks": 1, "name": "nsys", "profiler": mark},
        {"pid": 4241, "start_ticks": 3, "name": "worker", "gpu_memory_mib": {"0": 4096}},
    ]
    memory.note({4100: [4100, 4241]}, procs, [], NOW_S)
    memory.note({}, procs, [], NOW_S + 5)
    from gputui.agent.proc.leftovers import still_left

    wire = memory.wire({4100: 1}, None, still_left)
    (job,) = wire["jobs"]
    assert job["profilers"] == [[4100, 1]]
    assert [r["path"] for r in job["reports"]] == [str(stream)]
    nsys = Proc(pid=4100, ppid=1, name="nsys", start_ticks=1, profiler=ProfilerMark.from_dict(mark))
    snapshot = HostSnapshot(
        target="h", time=NOW_S + 5, processes=(nsys,), remembered=Remembered.from_dict(wire)
    )
    findings, reasons = job_remains(snapshot)
    (running,) = [f.detail for f in findings if f.kind == "leftover"]  # its report may yet be written
    assert running.startswith("profiler pid 4100 (nsys), Nsight Systems (nsys profile), still runs")
    assert reasons == (f"leftover: {running}",)
    assert not [f for f in findings if f.kind == "survivor"]
    gone = HostSnapshot(
        target="h", time=NOW_S + 6, remembered=Remembered.from_dict(memory.wire({}, None, still_left))
    )
    findings, reasons = job_remains(gone)
    (left,) = [f.detail for f in findings if f.kind == "leftover"]
    assert left.startswith(f"report {output}.nsys-rep left unfinished: only its raw stream {stream}")
    assert reasons == (f"leftover: {left}",)
    # Finished since: not a leftover; and never removed while the collector only looks.
    (tmp_path / "glm5_decode.nsys-rep").write_bytes(b"r")
    assert profiler.still_unfinished(job["reports"]) == []
    assert stream.exists()
    os.unlink(tmp_path / "glm5_decode.nsys-rep")


def test_a_templated_output_and_removal_only_of_the_same_idle_stream(tmp_path: Path) -> None:
    from gputui.agent.proc import leftovers

    (tmp_path / "prof_4242.qdstrm").write_bytes(b"q")
    (tmp_path / "prof_4243.qdstrm").write_bytes(b"q")
    (tmp_path / "prof_4243.nsys-rep").write_bytes(b"r")
    found = profiler.unfinished_reports([str(tmp_path / "prof_%p")])
    assert [r["path"] for r in found] == [str(tmp_path / "prof_4242.qdstrm")]
    changed = dict(found[0], inode=found[0]["inode"] + 1)
    assert leftovers.remove([], False, [changed])[0]["result"] == leftovers.CHANGED
    assert leftovers.remove([], False, [{"path": "/etc/passwd"}])[0]["result"] == leftovers.CHANGED
    with pytest.raises(PermissionError):
        leftovers.remove([], True, found)
    assert leftovers.remove([], False, found)[0]["result"] == leftovers.REMOVED
    assert not (tmp_path / "prof_4242.qdstrm").exists()
