"""Two gputui on one host, each with its own collector (a Slurm prolog's ``check --probe`` beside another's):
one probe of a GPU at a time host-wide, the second one waits, then leaves that GPU out and says why; the
first one's child is never the other's job, survivor or kill target, and its memory is the probe's own. A
process that only copies the child's argv (no gputui parent, or more memory than a probe holds) is listed as
any other. Real CLI processes, real pynvml on the fake NVML, the fake ``libcuda.so.1``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.proc.probechild import MARKER
from tests.fakecuda.plugin import FakeCuda
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO
from tests.kernellog import KernelLog

pytestmark = pytest.mark.timeout(180)


def _env(fake_nvml: FakeNvml, fake_cuda: FakeCuda, state: str) -> dict[str, str]:
    return dict(fake_cuda.env(fake_nvml.env()), XDG_STATE_HOME=state)


def _check(fake_nvml: FakeNvml, fake_cuda: FakeCuda, *args: str) -> tuple[int, dict[str, Any], float]:
    """``gputui check --json …``: its exit status, its host, and how long it took."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as state:
        done = subprocess.run(
            [sys.executable, "-m", "gputui.cli", "check", "--json", *args],
            cwd=REPO,
            env=_env(fake_nvml, fake_cuda, state),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)["hosts"][0], time.monotonic() - started


def _holders(nvml_state: Path, gpu: int) -> list[int]:
    """The pids the fake NVML lists on ``gpu`` now (the fake libcuda writes them there)."""
    pids = []
    for line in nvml_state.read_text().splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "holder" and words[1] == str(gpu):
            pids.append(int(words[2]))
    return pids


def _until(condition: Any, seconds: float) -> Any:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return None


def _listed_pids(host: dict[str, Any]) -> set[int]:
    pids = {p["pid"] for g in host["gpus"] for p in g.get("processes") or ()}
    return pids | {p["pid"] for p in host["processes"]}


class FirstProbe:
    """``gputui check --probe`` whose GPU0 child holds its buffer and then hangs in the write until
    ``release``: a probe under way, for as long as the test needs."""

    def __init__(self, fake_nvml: FakeNvml, fake_cuda: FakeCuda, state: str) -> None:
        self.fake_cuda = fake_cuda
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gputui.cli", "check", "--probe", "--probe-deadline", "60", "--json"],
            cwd=REPO,
            env=_env(fake_nvml, fake_cuda, state),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.child = _until(lambda: _holders(fake_nvml.state_path, 0), 30)
        assert self.child, "the first probe's child never held its buffer"

    def release(self) -> tuple[int, dict[str, Any]]:
        self.fake_cuda.state.gpus[0].hang = None
        self.fake_cuda.write()
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, json.loads(out)["hosts"][0]

    def end(self) -> None:
        """Kill what is left of it (after a failed assertion): the CLI and its probe child."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
        for pid in self.child or ():
            try:
                os.killpg(pid, signal.SIGKILL)  # the child leads a session of its own
            except ProcessLookupError:
                pass


def test_a_second_gputui_waits_for_a_gpu_another_is_probing_then_leaves_it_out(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog, tmp_path: Path
) -> None:
    fake_cuda.state.show_in_nvml(fake_nvml.state_path)
    fake_cuda.state.gpus[0].hang = "memcpy"
    fake_cuda.write()
    first = FirstProbe(fake_nvml, fake_cuda, str(tmp_path))
    try:
        (child,) = first.child
        # Another gputui's check meanwhile: the probe child is not its job, and its memory is the probe's.
        code, host, _ = _check(fake_nvml, fake_cuda)
        assert code == 0, host["verdict"]
        assert host["verdict"]["clean"] is True
        assert child not in _listed_pids(host)
        assert host["gpus"][0]["memory_used_mib"] == 3
        # Another gputui's probe waits its deadline for GPU0, then leaves it out, saying why; it probes the
        # others, and cannot prove the GPUs fact (exit 2).
        code, host, took = _check(fake_nvml, fake_cuda, "--probe", "--probe-deadline", "2")
        assert code == 2, host["verdict"]
        assert took >= 2.0
        gpu0 = host["probe"]["gpus"][0]
        assert (gpu0["result"], gpu0["busy"], gpu0["steps"]) == ("skipped", True, [])
        assert [p["result"] for p in host["probe"]["gpus"][1:]] == ["ok"] * 7
        assert host["verdict"]["known"] is False  # cannot tell
        assert "GPU0 cannot be probed: another gputui is probing it" in host["verdict"]["reasons"]
        assert child not in _listed_pids(host)
        # The first probe's other children, done meanwhile, were reaped at once: no zombie of it is seen.
        assert [f for f in host["findings"] if f["kind"] == "zombie"] == []
        assert _holders(fake_nvml.state_path, 0) == [child]  # never a second probe of GPU0 meanwhile
        code, host = first.release()
    finally:
        first.end()
    assert code == 0, host["verdict"]
    assert [p["result"] for p in host["probe"]["gpus"]] == ["ok"] * 8
    assert host["probe"]["lock_problem"] is None


def test_a_process_that_copies_a_probe_childs_argv_is_listed_as_any_other(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda, kernel_log: KernelLog, tmp_path: Path
) -> None:
    # Started by the test, not by a gputui: its marker alone hides nothing.
    fake = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import time; time.sleep(60)",
            MARKER,
            "0000:17:00.0",
            "64",
            "2.0",
            "20",
        ]
    )
    try:
        fake_nvml.state.add_holder(1, fake.pid, 64)
        fake_nvml.write()
        code, host, _ = _check(fake_nvml, fake_cuda)
        assert code == 1, host["verdict"]
        assert [p["pid"] for p in host["gpus"][1]["processes"]] == [fake.pid]
    finally:
        fake.kill()
        fake.wait()
    # A real probe child that holds more than a probe's buffer and context: listed too.
    fake_nvml.state.holders.clear()
    fake_nvml.write()
    fake_cuda.state.show_in_nvml(fake_nvml.state_path)
    fake_cuda.state.gpus[0].hang = "memcpy"
    fake_cuda.state.gpus[0].ctx_mib = 4000
    fake_cuda.write()
    first = FirstProbe(fake_nvml, fake_cuda, str(tmp_path))
    try:
        (child,) = first.child
        code, host, _ = _check(fake_nvml, fake_cuda)
        assert code == 1, host["verdict"]
        assert [p["pid"] for p in host["gpus"][0]["processes"]] == [child]
        first.release()
    finally:
        first.end()
