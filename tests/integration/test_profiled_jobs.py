"""Profiled jobs end to end, with real processes on the fake NVML: a job under a process that is ``nsys
profile --trace=cuda,nvtx -o PATH`` by its binary and argv, and a job whose worker carries Nsight Systems'
injection in its environment, each holding GPU memory.

``check``, ``snapshot --json``, the TUI (a Pilot run in a process of its own, for the fake NVML) and the
exporter, read back by the fleet through a real Prometheus, all name both; a preload of another library and
a binary merely named like a profiler are none. Once the nsys job is killed from outside, its unfinished
report (the ``.qdstrm`` nsys leaves without the ``.nsys-rep``) is residue in ``check``, kept by it, and
removed only by ``gputui leftovers --remove``, which lists it first. A collector that cannot read another
user's environment says the profiler is unknown for that many processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from gputui.core.fleet import FleetHost, analyze_fleet
from gputui.core.verdict import Baselines
from gputui.transports.prometheus import FleetSettings, PrometheusSource
from tests.integration.exporter_proc import ExporterProcess
from tests.integration.procs import REPO, gputui_env, is_gone, run_gputui, shared_copy, wait_for
from tests.integration.profiled import NSYS_INSTALL, build_fake_nsys, injected_job, nsys_job
from tests.integration.prometheus import PrometheusServer

pytestmark = pytest.mark.timeout(240)

HELD_MIB = 4096
INJECTION = f"CUDA_INJECTION64_PATH={NSYS_INSTALL}/libToolsInjection64.so"
NODE = os.uname().nodename
PRELOAD = next(
    (p for p in ("/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib64/libz.so.1") if os.path.exists(p)), "libz.so.1"
)
"""A preloaded library that is no profiler's (one the host has: the loader complains of a missing one)."""
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def fake_nsys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nsys(tmp_path_factory.mktemp("nsys"))


class Jobs:
    """The jobs of one test: ``nsys`` (nsys, worker), ``injected`` (launcher, worker), and the two that are
    no profiled jobs: ``preload`` (a worker preloading zlib) and ``lookalike`` (a binary ``nsys-foo``
    with nsys's argv)."""

    def __init__(self, pids: dict[str, dict[str, int]], output: Path) -> None:
        self.pids = pids
        self.output = output


@contextmanager
def profiled_jobs(fake_nsys: Path, fake: Any, tmp_path: Path) -> Iterator[Jobs]:
    output = tmp_path / "reports" / "sglang_profile"
    output.parent.mkdir()
    lookalike = tmp_path / "bin" / "nsys-foo"
    lookalike.parent.mkdir()
    shutil.copy2(fake_nsys, lookalike)
    with ExitStack() as stack:
        nsys = stack.enter_context(nsys_job(fake_nsys, "--trace=cuda,nvtx", "-o", str(output)))
        injected = stack.enter_context(injected_job(INJECTION))
        preload = stack.enter_context(injected_job(f"LD_PRELOAD={PRELOAD}"))
        other = stack.enter_context(nsys_job(lookalike, "--trace=cuda,nvtx", "-o", str(tmp_path / "x")))
        pids = {
            "nsys": nsys.pids,
            "injected": injected.pids,
            "preload": preload.pids,
            "lookalike": other.pids,
        }
        for gpu, name in enumerate(pids):
            fake.state.add_holder(gpu, pids[name]["worker"], HELD_MIB)
        fake.write()
        yield Jobs(pids, output)


def _host(env: dict[str, str]) -> dict[str, Any]:
    done = run_gputui(["snapshot", "--json", "--no-discover"], env)
    assert done.returncode == 0, done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    return host


TUI_SCRIPT = r"""
import asyncio, json, sys
from gputui.commands.grammar.parser import build_parser
from gputui.commands.tui import build_app
from gputui.core.store import Config
from gputui.ui.widgets.findings_list import FindingsList, group_text

args = build_parser(None).parse_args(["--interval", "0.3", "--process-interval", "0.3", "--no-discover"])
args.config = Config()
app = build_app(args)

async def main():
    async with app.run_test(size=(200, 60)) as pilot:
        shown = []
        for _ in range(600):
            rows = app.screen.query(FindingsList)
            if rows:
                shown = [group_text(row).plain for row in rows.first().rows]
                if sum("profiled" in text for text in shown) >= 2:
                    break
            await pilot.pause(0.1)
        print(json.dumps(shown))
        await pilot.press("q")

asyncio.run(main())
"""


def test_check_snapshot_and_the_tui_name_the_profiler(
    fake_nsys: Path, fake_nvml: Any, tmp_path: Path
) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    with profiled_jobs(fake_nsys, fake_nvml, tmp_path) as jobs:
        nsys, injected = jobs.pids["nsys"], jobs.pids["injected"]
        check = run_gputui(["check", "--no-discover"], env)
        assert check.returncode == 1, check.stdout + check.stderr
        lines = check.stdout.splitlines()
        said = [line for line in lines if line.startswith("! profiled:")]
        assert said[0] == (
            f"! profiled: the job of pid {nsys['nsys']} (nsys) runs under Nsight Systems (nsys profile): "
            f"trace cuda,nvtx (NVTX on), output {jobs.output}"
        ), check.stdout
        assert lines[lines.index(said[0]) + 1].startswith("    -> tracing every CUDA call and NVTX range")
        comm = Path(f"/proc/{injected['worker']}/comm").read_text().strip()
        launcher, worker = injected["launcher"], injected["worker"]
        assert said[1] == (
            f"! profiled: the job of pid {launcher} ({comm}) is profiled: pid {worker} "
            f"({comm}) carries the injection of Nsight Systems: CUDA_INJECTION64_PATH set to "
            "libToolsInjection64.so"
        ), check.stdout
        assert len(said) == 2, check.stdout  # the zlib preload and the nsys-foo binary are none
        assert "profiler: unknown" not in check.stdout  # root reads every environment

        host = _host(env)
        procs = {p["pid"]: p for p in host["processes"]}
        assert procs[nsys["nsys"]]["profiler"] == {
            "tool": "nsys",
            "via": "argv",
            "command": "profile",
            "trace": "cuda,nvtx",
            "cuda_graph_trace": None,
            "output": str(jobs.output),
            "capture_range": None,
            "keys": [],
            "library": None,
        }
        assert procs[injected["worker"]]["profiler"]["keys"] == ["CUDA_INJECTION64_PATH"]
        assert procs[injected["launcher"]]["profiler"] is None
        assert procs[jobs.pids["preload"]["worker"]]["profiler"] is None
        assert procs[jobs.pids["lookalike"]["nsys"]]["profiler"] is None
        # Only the variable's name and the library's from gputui's own table: never the environment's values.
        marks = [p["profiler"] for p in host["processes"]]
        assert NSYS_INSTALL not in json.dumps([marks, host["findings"]])
        found = [f for f in host["findings"] if f["kind"] == "profiled"]
        assert {f["pid"] for f in found} == {nsys["nsys"], injected["worker"]}
        assert {f["detail"] for f in found} == {s[len("! profiled: ") :] for s in said}

        tui = subprocess.run(
            [sys.executable, "-c", TUI_SCRIPT],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert tui.returncode == 0, tui.stderr
        rows = [row for row in json.loads(tui.stdout.splitlines()[-1]) if "profiled" in row]
        assert len(rows) == 2, tui.stdout
        assert any(f"the job of pid {nsys['nsys']} (nsys) runs under Nsight Systems" in row for row in rows)


def test_the_unfinished_report_is_named_after_the_job_is_killed(
    fake_nsys: Path, fake_nvml: Any, tmp_path: Path
) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")  # one state folder: the collector's record of its jobs
    output = tmp_path / "reports" / "sglang_profile"
    output.parent.mkdir()
    stream = Path(f"{output}.qdstrm")
    with nsys_job(fake_nsys, "--trace=cuda,nvtx", "--cuda-graph-trace=node", "-o", str(output)) as job:
        fake_nvml.state.add_holder(0, job.pids["worker"], HELD_MIB)
        fake_nvml.write()
        assert _host(env)["findings"]  # the collector saw the job (and its profiler's output) once
        # The story's kill: the worker first; the profiler still runs, and is said as what it is.
        os.kill(job.pids["worker"], signal.SIGKILL)
        wait_for(lambda: is_gone(job.pids["worker"]), "the worker to die")
        fake_nvml.state.holders.clear()
        fake_nvml.write()
        check = run_gputui(["check", "--no-discover"], env)
        assert check.returncode == 1, check.stdout
        assert (
            f"residue: ✗ leftover: profiler pid {job.pids['nsys']} (nsys), Nsight Systems (nsys profile), "
            "still runs after the job of pid"
        ) in check.stdout, check.stdout
        assert "left unfinished" not in check.stdout  # it may yet write its report
        os.kill(job.pids["nsys"], signal.SIGKILL)
        wait_for(lambda: is_gone(job.pids["nsys"]), "nsys to die")
    check = run_gputui(["check", "--no-discover"], env)
    assert check.returncode == 1, check.stdout
    report = f"leftover: report {output}.nsys-rep left unfinished: only its raw stream {stream}"
    assert f"residue: ✗ {report}" in check.stdout, check.stdout
    assert f"  ! leftover: report {output}.nsys-rep left unfinished" in check.stdout or report in check.stdout
    assert stream.exists()  # said, never deleted unless asked

    listed = run_gputui(["leftovers", "--no-discover"], env)
    assert listed.returncode == 1, listed.stdout + listed.stderr
    assert listed.stdout.splitlines()[0].startswith(f"leftover: report {output}.nsys-rep left unfinished")
    assert stream.exists()
    removed = run_gputui(["leftovers", "--remove", "--yes", "--no-discover"], env)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    out = removed.stdout.splitlines()
    assert out[0].startswith(f"leftover: report {output}.nsys-rep left unfinished")  # listed first
    assert f"removed  {stream}" in removed.stdout
    assert not stream.exists()
    audit = (tmp_path / "state" / "gputui" / "audit.jsonl").read_text()
    assert str(stream) in audit
    assert run_gputui(["check", "--no-discover"], env).returncode == 0


def test_a_newer_nsys_s_own_unfinished_stream_is_named_after_the_job_is_killed(
    fake_nsys: Path, fake_nvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nsys from 2024 on collects into ``/var/tmp/nsys-report-NNNN.qdstrm`` and writes ``-o``'s report at the
    end: killed, it leaves that stream, named here by the report it never wrote."""
    temp = tmp_path / "var-tmp"
    temp.mkdir()
    monkeypatch.setenv("FAKE_NSYS_TEMP", str(temp))
    env = dict(gputui_env(fake_nvml, tmp_path / "state"), GPUTUI_TEST_NSYS_TEMP=str(temp))
    output = tmp_path / "reports" / "decode"
    output.parent.mkdir()
    (temp / "nsys-report-1.qdstrm").write_text("another run, before this job\n")
    os.utime(temp / "nsys-report-1.qdstrm", (time.time() - 7200, time.time() - 7200))
    with nsys_job(fake_nsys, "--trace=cuda,nvtx", "-o", str(output)) as job:
        stream = temp / f"nsys-report-{job.pids['nsys']}.qdstrm"
        fake_nvml.state.add_holder(0, job.pids["worker"], HELD_MIB)
        fake_nvml.write()
        assert _host(env)["findings"]  # the collector saw the job and its profiler once
        fake_nvml.state.holders.clear()
        fake_nvml.write()
    check = run_gputui(["check", "--no-discover"], env)
    assert check.returncode == 1, check.stdout
    report = f"leftover: report {output}.nsys-rep left unfinished: only its raw stream {stream}"
    assert report in check.stdout, check.stdout
    assert "nsys-report-1.qdstrm" not in check.stdout  # older than the job: not its
    assert stream.exists()


def _fleet_until(source: PrometheusSource, condition: Any, what: str) -> FleetHost:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        sample = analyze_fleet(source.sample(), Baselines())
        host = next((h for h in sample.hosts if h.name == NODE), None)
        if host is not None and condition(host):
            return host
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {sample.hosts}")
        time.sleep(0.25)


def test_the_exporter_publishes_it_and_the_fleet_words_it_as_the_monitor(
    fake_nsys: Path, fake_nvml: Any, tmp_path: Path
) -> None:
    env = gputui_env(fake_nvml, tmp_path / "state")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    exporter = ExporterProcess(env, tmp_path / "exporter.log")
    prometheus: PrometheusServer | None = None
    with profiled_jobs(fake_nsys, fake_nvml, tmp_path) as jobs:
        try:
            exporter.start()
            text = ""
            deadline = time.monotonic() + DEADLINE_S
            while f'gputui_findings{{Hostname="{NODE}",kind="profiled"}} 2.0' not in text:
                assert time.monotonic() < deadline, text
                time.sleep(0.3)
                text = exporter.scrape()
            nsys_pid = jobs.pids["nsys"]["nsys"]
            series = [
                line for line in text.splitlines() if line.startswith("gputui_finding_process_profiler{")
            ]
            assert len(series) == 2, series
            (mine,) = [line for line in series if f'pid="{nsys_pid}"' in line]
            for label in ('tool="nsys"', 'via="argv"', 'trace="cuda,nvtx"', f'output="{jobs.output}"'):
                assert label in mine, mine
            assert NSYS_INSTALL not in text
            prometheus = PrometheusServer(tmp_path / "prometheus", {"gputui": [(exporter.address, {})]})
            prometheus.start()
            source = PrometheusSource(FleetSettings(url=prometheus.url))
            host = _fleet_until(
                source,
                lambda h: sum(f.kind == "profiled" for f in h.snapshot.findings) == 2,
                "the profiled findings in the fleet",
            )
            monitor = {f["pid"]: f for f in _host(env)["findings"] if f["kind"] == "profiled"}
            fleet = {f.pid: f for f in host.snapshot.findings if f.kind == "profiled"}
            assert set(fleet) == set(monitor)
            for pid, finding in fleet.items():
                assert finding.detail == monitor[pid]["detail"]
                assert finding.action == monitor[pid]["action"]
        finally:
            if prometheus is not None:
                prometheus.stop()
            exporter.stop()


SYSTEM_PYTHON = "/usr/bin/python3"
CLI_UID = 65533


def test_another_users_environment_is_unknown_never_a_guess(fake_nvml: Any, tmp_path: Path) -> None:
    """The collector runs unprivileged; a GPU job of root's cannot have its environment read: "profiler:
    unknown for N processes". Needs root to start the CLI as another user (CI runs the suite as root)."""
    if os.geteuid() != 0:
        raise AssertionError("this test runs the CLI as another user: run the suite as root (CI does)")
    shared, state_path = shared_copy(fake_nvml)
    with injected_job(INJECTION) as job:
        fake_nvml.state.add_holder(0, job.pids["worker"], HELD_MIB)
        fake_nvml.state.write(state_path)
        state_path.chmod(0o644)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(shared / "state"),
            "LD_LIBRARY_PATH": str(shared),
            "FAKE_NVML_STATE": str(state_path),
            "XDG_STATE_HOME": str(shared / "state"),
            "PYTHONPATH": str(shared / "py"),
        }
        check = subprocess.run(
            [SYSTEM_PYTHON, "-m", "gputui.cli", "check", "--no-discover"],
            cwd="/",
            env=env,
            user=CLI_UID,
            group=CLI_UID,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert check.returncode == 1, check.stdout + check.stderr
        assert "! profiler_unknown: profiler: unknown for 2 processes of GPU jobs" in check.stdout, (
            check.stdout
        )
        assert "! profiled:" not in check.stdout
