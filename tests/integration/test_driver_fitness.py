"""The driver's own word on a GPU's fitness, end to end: real collector processes, real pynvml on the fake
NVML, kernel-log lines as the field writes them, the CLI as a subprocess.

The driver's recovery action (NVML field 230) decides over the Xid table; NVLink fabric registration; the
recovery-action and Xid events bring a fitness read with the next process sample; a lost GPU and a wedged
driver are facts with an action; a verified ``gputui reset`` clears the GPU's reset-class Xids, for the
collector that ran it and for every later one in the same boot (the record in the state folder).

Kernel-log lines are copied from ``tests/data/kernel_log`` (each names its source there) with the PCI address
changed to one of the fake's GPUs (bus numbers from 0x17: GPU0 ``0000:17:00`` ... GPU7 ``0000:1e:00``); the
rest of each line is verbatim.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.gpu.fitness import RESET_RECORD_FILE
from gputui.agent.gpu.xid import DETAIL_MAX
from gputui.core.model import HostSnapshot
from gputui.core.text import clock_time
from gputui.core.verdict import Baselines, analyze
from gputui.core.verdict.fitness import fitness_figures
from tests.fakenvml import FakeGpu
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO, agent_process
from tests.integration.reset_host import ResetHost, make_reset_host, uuid_of
from tests.interpreters import python38
from tests.kernellog import KernelLog

# gpu-operator#1146 (tests/data/kernel_log/issue_threads.txt), logged at [  219.470994] for PCI 0000:07:00.
XID_48 = (
    "NVRM: Xid (PCI:{pci}): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has"
    " been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1."
)
XID_48_AT_S = 219.470994


def pci(index: int) -> str:
    """The kernel log's spelling of the fake GPU's PCI address."""
    return f"0000:{0x17 + index:02x}:00"


def run_cli(
    command: str, fake: FakeNvml | None, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own; a state folder of its own unless ``env`` brings one."""
    with tempfile.TemporaryDirectory() as state:
        environment = dict(env) if env is not None else dict(fake.env() if fake else {}, XDG_STATE_HOME=state)
        return subprocess.run(
            [sys.executable, "-m", "gputui.cli", command, *args],
            cwd=REPO,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def snapshot_host(fake: FakeNvml | None, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = run_cli("snapshot", fake, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["hosts"][0]


def gpu_line(out: str, index: int) -> str:
    """``check``'s table line of one GPU ("GPU2  3 MiB  ✗ needs a reset (...)")."""
    lines = [line for line in out.splitlines() if line.startswith(f"GPU{index}  ")]
    assert len(lines) == 1, out
    return lines[0]


def says_not_ready(out: str, reason: str) -> None:
    """NOT READY, the GPU's line gives ``reason`` (``GPU2 needs …``), and so does the GPUs fact line."""
    gpu, rest = reason.split(" ", 1)
    assert re.search(r"^NOT READY: \d+/\d+ GPUs at baseline", out, re.M), out
    assert re.search(rf"^{gpu}  (\d+|–) MiB  ✗ {re.escape(rest)}$", out, re.M), out
    assert f"! gpu_health: {reason}" in out.splitlines(), out


def figure(gpu: dict[str, Any], label: str) -> str:
    """What the GPU view lists for one fitness figure, from the snapshot's JSON as a client reads it."""
    fitness = HostSnapshot.from_dict({"target": "local", "gpus": [gpu]}).gpus[0].fitness
    assert fitness is not None
    return dict(fitness_figures(fitness))[label]


# -- 1. the driver's recovery action decides ----------------------------------------------------------------


@pytest.mark.parametrize("recovery", [1, 0, 42, None])
def test_the_recovery_action_decides_over_the_xid_table(
    fake_nvml: FakeNvml, kernel_log: KernelLog, recovery: int | None
) -> None:
    kernel_log.add(XID_48.format(pci=pci(2)), at_s=XID_48_AT_S)
    fake_nvml.state.gpus[2].recovery_action = recovery
    fake_nvml.write()
    done = run_cli("check", fake_nvml)
    host = snapshot_host(fake_nvml)
    health = host["gpus"][2]["health"]
    assert [(x["xid"], x["source"], x["cleared"]) for x in health["xids"]] == [(48, "kernel log", None)]
    assert health["xids"][0]["detail"] == XID_48.split("): 48, ", 1)[1][:DETAIL_MAX]  # kept to its cap
    at = clock_time(health["xids"][0]["time"])
    assert health["recovery_action"] == recovery
    if recovery == 1:
        reason = f"GPU2 needs a reset (Xid 48: double-bit ECC error at {at}; the driver asks for GPU Reset)"
        assert done.returncode == 1, done.stdout + done.stderr
        says_not_ready(done.stdout, reason)
        assert "    -> reset the GPU (nvidia-smi -r -i 2, nothing may hold it) before the next launch" in (
            done.stdout.splitlines()
        )
        assert (health["action"], health["needs_reset"]) == ("reset", True)
        assert host["verdict"]["not_ready"] == [reason]
        assert figure(host["gpus"][2], "recovery action (driver)") == "GPU Reset"
    elif recovery == 0:
        note = f"Xid 48: double-bit ECC error at {at}; the driver asks for nothing"
        assert done.returncode == 0, done.stdout + done.stderr
        assert gpu_line(done.stdout, 2) == "GPU2  3 MiB  ✓"
        assert done.stdout.startswith("GPU0  3 MiB  ✓\n")
        assert "CLEAN: 8/8 GPUs at baseline (3 MiB + 2)" in done.stdout
        assert f"! xid: GPU2 {note} (does not block the next launch)" in done.stdout.splitlines()
        assert (health["action"], health["notes"], health["causes"]) == ("none", [note], [])
        assert host["verdict"]["clean"] is True
        assert figure(host["gpus"][2], "recovery action (driver)") == "None"
    elif recovery == 42:
        reason = (
            "GPU2 needs a recovery action gputui does not know"
            f" (Xid 48: double-bit ECC error at {at}; the driver reports unknown recovery action 42)"
        )
        assert done.returncode == 1, done.stdout + done.stderr
        says_not_ready(done.stdout, reason)
        assert health["action"] == "unknown_recovery"
        assert health["needs_reset"] is False
        assert host["verdict"]["not_ready"] == [reason]
        assert figure(host["gpus"][2], "recovery action (driver)") == "unknown recovery action 42"
    else:  # a driver before R565: no field 230, the table decides (and no time: the table's own words)
        reason = "GPU2 needs a reset (Xid 48: double-bit ECC error)"
        assert done.returncode == 1, done.stdout + done.stderr
        says_not_ready(done.stdout, reason)
        assert host["verdict"]["not_ready"] == [reason]
        assert figure(host["gpus"][2], "recovery action (driver)") == "– (a driver before R565 reports none)"
    others = [g["health"] for i, g in enumerate(host["gpus"]) if i != 2]
    assert [(h["recovery_action"], h["action"], h["xids"]) for h in others] == [(None, "none", [])] * 7


UNKNOWN_RECOVERY_HINT = (
    "    -> the driver asks for an action gputui does not know (value {value}): see NVIDIA's NVML"
    " documentation of nvmlDeviceGpuRecoveryAction_t; GPU {gpu} counts as not ready until the driver's"
    " recovery action returns to None"
)


def test_an_unknown_recovery_action_is_said_as_one_never_as_an_xid(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    """A recovery action gputui does not know is the driver's, not an Xid: its hint names the value and
    NVML's type, never the Xid Catalog or ``accepted_xids``; it blocks until the action returns to None."""
    kernel_log.add(XID_48.format(pci=pci(2)), at_s=XID_48_AT_S)
    fake_nvml.state.gpus[2].recovery_action = 9
    fake_nvml.write()
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert UNKNOWN_RECOVERY_HINT.format(value=9, gpu=2) in lines, done.stdout
    assert "Xid Catalog" not in done.stdout
    assert "accepted_xids" not in done.stdout
    # Xid 154's log form of the same value, on a GPU whose NVML gives no field: said the same way (gpud
    # kmsg_test.go's GB200 line, its code changed to one gputui does not know).
    kernel_log.add(
        f"NVRM: Xid (PCI:{pci(4)}): 154, GPU recovery action changed from 0x0 (None) to 0x9 (Unknown)",
        at_s=300.0,
    )
    both = run_cli("check", fake_nvml)
    assert UNKNOWN_RECOVERY_HINT.format(value=9, gpu=4) in both.stdout.splitlines(), both.stdout
    says_not_ready(
        both.stdout,
        "GPU4 needs a recovery action gputui does not know (Xid 154: GPU recovery action changed to unknown"
        " recovery action 9)",
    )
    # Back to None: nothing blocks on GPU2 any more.
    fake_nvml.state.gpus[2].recovery_action = 0
    fake_nvml.write()
    after = run_cli("check", fake_nvml)
    assert gpu_line(after.stdout, 2) == "GPU2  3 MiB  ✓"


# -- 2. the NVLink fabric ------------------------------------------------------------------------------------


def _manager_here() -> str:
    """What the collector finds of the fabric manager on this machine ("running" where one runs here)."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "nv-fabricmanage":
                return "running"
        except OSError:
            continue
    return "not running"


FABRIC_HINT = (
    "    -> start or restart the fabric manager (systemctl restart nvidia-fabricmanager), then check again:"
    " every CUDA job fails on this GPU until then"
)


def test_a_gpu_whose_fabric_registration_is_in_progress_is_not_ready(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    fake_nvml.state.gpus[5].fabric_state = 2
    fake_nvml.write()
    manager = _manager_here()
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1, done.stdout + done.stderr
    reason = (
        "GPU5 is not registered with the NVLink fabric"
        f" (NVLink fabric registration in progress (fabric manager {manager}))"
    )
    says_not_ready(done.stdout, reason)
    assert FABRIC_HINT in done.stdout.splitlines()
    host = snapshot_host(fake_nvml)
    gpu5 = host["gpus"][5]
    health = gpu5["health"]
    assert (health["fabric_state"], health["fabric_status"], health["fabric_health_mask"]) == (2, 0, 0)
    assert health["fabric_manager"] == manager
    assert health["action"] == "restart_fabric_manager"
    assert health["causes"] == [f"NVLink fabric registration in progress (fabric manager {manager})"]
    assert host["verdict"]["not_ready"] == [reason]
    assert figure(gpu5, "NVLink fabric") == f"registration in progress (fabric manager {manager})"
    # No fabric on the other GPUs: nothing said, the figure says so.
    assert all(host["gpus"][i]["health"]["fabric_state"] is None for i in (0, 1, 2, 3, 4, 6, 7))
    assert figure(host["gpus"][0], "NVLink fabric") == "– (none on this GPU)"


def test_a_running_fabric_manager_is_found_by_its_process_name(
    fake_nvml: FakeNvml, kernel_log: KernelLog, tmp_path: Path
) -> None:
    """The fabric manager's process is ``nv-fabricmanager``: 16 characters, which the kernel keeps as the
    15 of ``/proc/PID/comm`` (``nv-fabricmanage``)."""
    fake_nvml.state.gpus[5].fabric_state = 1
    fake_nvml.write()
    manager = tmp_path / "nv-fabricmanager"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", manager)
    held = subprocess.Popen([str(manager), "60"])
    try:
        comm = Path(f"/proc/{held.pid}/comm")
        end = time.monotonic() + 10.0
        while comm.read_text().strip() != "nv-fabricmanage":  # until it has exec'd
            assert time.monotonic() < end, comm.read_text()
            time.sleep(0.01)
        done = run_cli("check", fake_nvml)
    finally:
        held.kill()
        held.wait()
    assert done.returncode == 1, done.stdout + done.stderr
    says_not_ready(
        done.stdout,
        "GPU5 is not registered with the NVLink fabric"
        " (NVLink fabric registration not started (fabric manager running))",
    )


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (0, None),
        (
            999,
            "GPU5 is not registered with the NVLink fabric"
            " (NVLink fabric registration failed: unknown error (fabric manager {manager}))",
        ),
    ],
)
def test_a_completed_fabric_registration_is_clean_and_a_failed_one_is_not(
    fake_nvml: FakeNvml, kernel_log: KernelLog, status: int, reason: str | None
) -> None:
    fake_nvml.state.gpus[5].fabric_state = 3
    fake_nvml.state.gpus[5].fabric_status = status
    fake_nvml.state.gpus[5].fabric_health_mask = 0x1
    fake_nvml.write()
    done = run_cli("check", fake_nvml)
    host = snapshot_host(fake_nvml)
    health = host["gpus"][5]["health"]
    assert (health["fabric_state"], health["fabric_status"], health["fabric_health_mask"]) == (3, status, 1)
    if reason is None:
        assert done.returncode == 0, done.stdout + done.stderr
        assert gpu_line(done.stdout, 5) == "GPU5  3 MiB  ✓"
        assert "NVLink" not in done.stdout
        assert health["fabric_manager"] is None  # not looked for once registered
        assert figure(host["gpus"][5], "NVLink fabric") == "registered"
    else:
        reason = reason.format(manager=_manager_here())
        assert done.returncode == 1, done.stdout + done.stderr
        says_not_ready(done.stdout, reason)
        assert host["verdict"]["not_ready"] == [reason]


# gpud nvidia_smi_query.go (tests/data/kernel_log/gpud_kmsg.txt): Xid 45 alone, in dmesg --ctime form.
XID_45 = (
    "[Sat Oct 12 18:35:32 2024] NVRM: Xid (PCI:{pci}): 45, pid=1496200, name=distprovers-gpu, Ch 0000000f"
)


def test_a_job_killed_on_a_fabric_gpu_leaves_an_xid_45_that_does_not_block(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    """The operator kills a job on an NVSwitch system before asking whether it is safe to relaunch; the
    driver logs Xid 45 as it cleans up the job's channels. The fabric is judged from NVML's fabric state
    (registered here): the GPU is fit, and the Xid is shown with its advice."""
    fake_nvml.state.gpus[5].fabric_state = 3
    fake_nvml.state.gpus[5].fabric_status = 0
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        fake_nvml.state.add_holder(5, job.pid, 4096)
        fake_nvml.write()
        busy = run_cli("check", fake_nvml)
        assert busy.returncode == 1, busy.stdout + busy.stderr
        assert "NOT CLEAN: 7/8 GPUs at baseline (3 MiB + 2)" in busy.stdout.splitlines(), busy.stdout
    finally:
        job.terminate()  # the operator's kill
        job.wait(timeout=30)
    _dmesg(kernel_log, XID_45.format(pci=pci(5)))
    done = run_cli("check", fake_nvml)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "CLEAN: 8/8 GPUs at baseline (3 MiB + 2)" in lines, done.stdout
    assert gpu_line(done.stdout, 5) == "GPU5  3 MiB  ✓"
    note = (
        "Xid 45: preemptive cleanup: the driver cleaned up a stopped or failed application's work (a kill,"
        " Ctrl-C, or the Xid before it); informational, the GPU is fit; its NVLink fabric state (read from"
        " NVML) says whether the fabric manager needs a restart"
    )
    assert f"! xid: GPU5 {note} (does not block the next launch)" in lines, done.stdout
    assert "fabric manager (systemctl" not in done.stdout  # no restart asked for
    host = snapshot_host(fake_nvml)
    health = host["gpus"][5]["health"]
    assert [(x["xid"], x["detail"]) for x in health["xids"]] == [
        (45, "pid=1496200, name=distprovers-gpu, Ch 0000000f")
    ]
    assert (health["fabric_state"], health["fabric_status"]) == (3, 0)
    assert (health["action"], health["causes"], health["notes"]) == ("none", [], [note])
    assert host["verdict"]["clean"] is True


# -- 3. events bring a fitness read with the next process sample --------------------------------------------

STREAM = ("--interval", "0.1", "--process-interval", "0.2", "--no-discover")


def _process_samples(agent: Any, seconds: float) -> list[dict[str, Any]]:
    """The stream's samples with a fresh process list for ``seconds``."""
    seen: list[dict[str, Any]] = []
    last = None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        snapshot = agent.next_snapshot()
        if snapshot.get("processes_time") != last:
            last = snapshot.get("processes_time")
            seen.append(snapshot)
    return seen


def _first(agent: Any, seconds: float, test: Any) -> dict[str, Any]:
    end = time.monotonic() + seconds
    while True:
        snapshot = agent.next_snapshot()
        if test(snapshot):
            return snapshot
        assert time.monotonic() < end, f"no sample within {seconds} s"


def test_a_recovery_action_event_brings_the_fitness_read_at_once(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    with agent_process(*STREAM, env=fake_nvml.env()) as agent:
        assert agent.sample()["gpus"][3]["health"]["recovery_action"] is None
        fake_nvml.state.gpus[3].recovery_action = 1
        fake_nvml.write()
        # No event: the 30 s fitness period holds, and process sample after process sample keeps the figure.
        quiet = _process_samples(agent, 1.2)
        assert len(quiet) >= 3
        assert [s["gpus"][3]["health"]["recovery_action"] for s in quiet] == [None] * len(quiet)
        fake_nvml.state.recoveries.append((3, 1))
        fake_nvml.write()
        started = time.monotonic()
        changed = _first(agent, 5.0, lambda s: s["gpus"][3]["health"]["recovery_action"] == 1)
        assert time.monotonic() - started < 5.0  # not the 30 s period
        assert changed["gpus"][3]["processes"] == []  # a process sample, not a forced one
    judged = analyze(HostSnapshot.from_dict(changed), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.not_ready == ("GPU3 needs a reset (the driver asks for GPU Reset)",)


def test_an_xid_event_brings_the_fitness_read_at_once(fake_nvml: FakeNvml, kernel_log: KernelLog) -> None:
    with agent_process(*STREAM, env=fake_nvml.env()) as agent:
        assert agent.sample()["gpus"][6]["health"]["remap_pending"] is False
        fake_nvml.state.gpus[6].remap_pending = 1
        fake_nvml.write()
        quiet = _process_samples(agent, 1.2)
        assert len(quiet) >= 3
        assert [s["gpus"][6]["health"]["remap_pending"] for s in quiet] == [False] * len(quiet)
        fake_nvml.state.xids.append((6, 48))
        fake_nvml.write()
        changed = _first(agent, 5.0, lambda s: bool(s["gpus"][6]["health"]["xids"]))
        health = changed["gpus"][6]["health"]
        assert [(x["xid"], x["source"], x["cleared"]) for x in health["xids"]] == [(48, "NVML event", None)]
        assert health["remap_pending"] is True  # read with the event's sample
    judged = analyze(HostSnapshot.from_dict(changed), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.not_ready == (
        "GPU6 needs a reset (row remap pending; Xid 48: double-bit ECC error)",
    )


# -- 4. a lost GPU, a wedged driver -----------------------------------------------------------------------


def test_a_lost_gpu_needs_a_reboot(fake_nvml: FakeNvml, kernel_log: KernelLog) -> None:
    fake_nvml.state.gpus[2].error = "GPU_IS_LOST"
    fake_nvml.write()
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1, done.stdout + done.stderr
    reason = "GPU2 needs a reboot of the host (the driver says it is lost)"
    says_not_ready(done.stdout, reason)
    assert gpu_line(done.stdout, 2) == f"GPU2  – MiB  ✗ {reason.split(' ', 1)[1]}"
    assert "    -> reboot the host: a GPU reset does not recover from this" in done.stdout.splitlines()
    assert "cannot tell" not in done.stdout
    host = snapshot_host(fake_nvml)
    assert host["gpus"][2]["unreachable"] == "lost"
    assert host["gpus"][2]["error"] == "GPU is lost"
    assert [g["unreachable"] for i, g in enumerate(host["gpus"]) if i != 2] == [None] * 7
    assert host["verdict"]["known"] is True
    assert host["verdict"]["not_ready"] == [reason]


def _timeouts(snapshot: dict[str, Any]) -> list[tuple[str | None, int | None]]:
    """Each GPU's (unreachable, timeouts_in_row) as the collector sends them (absent: None)."""
    return [(g.get("unreachable"), g.get("timeouts_in_row")) for g in snapshot["gpus"]]


def test_every_gpu_timing_out_two_samples_in_a_row_is_a_wedged_driver(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    # Two GPUs keep it short: the first sample waits one deadline (2 s) per GPU, the next skips them at once.
    fake_nvml.state.gpus = [FakeGpu(hang_ms=4000), FakeGpu(hang_ms=4000)]
    fake_nvml.write()
    with agent_process("--interval", "0.2", "--no-discover", env=fake_nvml.env()) as agent:
        first = agent.next_snapshot()
        second = agent.next_snapshot()
    assert _timeouts(first) == [("timed_out", 1)] * 2
    assert _timeouts(second) == [("timed_out", 2)] * 2
    assert [g["error"] for g in second["gpus"]] == ["NVML call timed out"] * 2
    once = analyze(HostSnapshot.from_dict(first), Baselines())
    assert once.verdict is not None
    assert once.verdict.known is False  # one sample: cannot tell yet
    assert once.verdict.not_ready == ()
    judged = analyze(HostSnapshot.from_dict(second), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.known is True
    assert judged.verdict.not_ready == tuple(
        f"GPU{i} needs a reboot of the host (no NVML call on any GPU of the host returned, 2 samples in a"
        " row: the driver is wedged)"
        for i in (0, 1)
    )


def test_one_gpu_timing_out_cannot_tell(fake_nvml: FakeNvml, kernel_log: KernelLog) -> None:
    fake_nvml.state.gpus = [FakeGpu(), FakeGpu(hang_ms=4000)]
    fake_nvml.write()
    with agent_process("--interval", "0.2", "--no-discover", env=fake_nvml.env()) as agent:
        agent.next_snapshot()
        second = agent.next_snapshot()
    assert _timeouts(second) == [(None, None), ("timed_out", 2)]
    judged = analyze(HostSnapshot.from_dict(second), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.known is False
    assert judged.verdict.not_ready == ()
    done = run_cli("check", fake_nvml)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot tell: GPU1 error: NVML call timed out" in done.stdout
    assert "NOT READY" not in done.stdout


# -- 5. kernel-log lines as the field writes them -----------------------------------------------------------


def _dmesg(kernel_log: KernelLog, *lines: str) -> None:
    """Lines in dmesg's form (``[  12.345678] NVRM: ...``, continuation lines as printed), appended as is."""
    with kernel_log.path.open("a") as fh:
        fh.write("".join(line + "\n" for line in lines))


FALLEN = "GPU{n} needs a reboot of the host (Xid 79: GPU has fallen off the bus)"


@pytest.mark.parametrize(
    ("lines", "gpu", "code", "words"),
    [
        pytest.param(
            # gpud kmsg_test.go (tests/data/kernel_log/gpud_kmsg.txt): the three-line form, no Xid number.
            [
                f"NVRM: The NVIDIA GPU {pci(1)}.0",
                "NVRM: (PCI ID: 10de:2901) installed in this system has",
                "NVRM: fallen off the bus and is not responding to commands.",
            ],
            1,
            1,
            FALLEN.format(n=1),
            id="three-line-fallen-kmsg",
        ),
        pytest.param(
            # NVSentinel gpufallen_handler_test.go: dmesg form, continuation lines indented, no time on them.
            [
                f"[ 1843.308145] NVRM: The NVIDIA GPU {pci(4)}.0",
                "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
                "               NVRM: fallen off the bus and is not responding to commands.",
            ],
            4,
            1,
            FALLEN.format(n=4),
            id="three-line-fallen-dmesg",
        ),
        pytest.param(
            # The same three lines as /dev/kmsg gives them: the driver prints them in one call, so they are
            # one record whose line breaks the kernel writes as \x0a (open-gpu-kernel-modules nv.c).
            [
                f"NVRM: The NVIDIA GPU {pci(2)}.0\\x0aNVRM: (PCI ID: 10de:2901) installed in this system has"
                "\\x0aNVRM: fallen off the bus and is not responding to commands."
            ],
            2,
            1,
            FALLEN.format(n=2),
            id="three-line-fallen-one-kmsg-record",
        ),
        pytest.param(
            # gpud kmsg_test.go: the one-line form.
            [f"NVRM: GPU {pci(6)}.0: GPU has fallen off the bus."],
            6,
            1,
            FALLEN.format(n=6),
            id="one-line-fallen",
        ),
        pytest.param(
            # gpud sxid/README.md: the Xid 79 line, then the same fault's bare line: one event.
            [
                f"[6781741.548779] NVRM: Xid (PCI:{pci(0)}): 79, pid='<unknown>', name=<unknown>, GPU has"
                " fallen off the bus.",
                f"[6781741.548783] NVRM: GPU {pci(0)}.0: GPU has fallen off the bus.",
            ],
            0,
            1,
            FALLEN.format(n=0),
            id="xid-79-and-its-bare-line",
        ),
        pytest.param(
            # gpud kmsg_test.go (GB200).
            [
                f"[171167.621162] NVRM: Xid (PCI:{pci(3)}): 154, GPU recovery action changed from 0x0 (None)"
                " to 0x4 (Drain and Reset)"
            ],
            3,
            1,
            "GPU3 needs draining, then a reset (Xid 154: GPU recovery action changed to Drain and Reset)",
            id="xid-154-drain-and-reset",
        ),
        pytest.param(
            # gpud kmsg_test.go (GB200); the double and triple spaces are the driver's.
            [
                f"[171167.620236] NVRM: Xid (PCI:{pci(4)}): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01"
                " (0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
            ],
            4,
            1,
            "GPU4 needs a reset (Xid 149: NVLink5 NETIR_LINK_EVT fatal error)",
            id="xid-149-fatal",
        ),
        pytest.param(
            # gpud kmsg_extended_test.go: with pid and name.
            [
                f"NVRM: Xid (PCI:{pci(5)}): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0"
                " Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
            ],
            5,
            0,
            "GPU5 Xid 145: NVLink5 RLW_RXPIPE non-fatal error; informational, the GPU is fit",
            id="xid-145-nonfatal",
        ),
        pytest.param(
            # The driver's own format (open-gpu-kernel-modules, _gpuGenerateErrorLog's comment).
            [f"NVRM: Xid (PCI:{pci(2)}): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No"],
            2,
            0,
            "GPU2 Xid 94: contained memory error; reset when convenient, the application that hit it must be"
            " restarted, the others can continue",
            id="xid-94-contained",
        ),
        pytest.param(
            # open-gpu-kernel-modules#1045 (tests/data/kernel_log/issue_threads.txt): IGNORE in the catalogue.
            [
                f"NVRM: Xid (PCI:{pci(1)}): 38, pid=326, name=modprobe, channel 0x00000003 0000c597 00000000"
                " 00000000"
            ],
            1,
            0,
            "GPU1 Xid 38: driver firmware error (watchdog timeout); informational, the GPU is fit",
            id="xid-38-ignore",
        ),
        pytest.param(
            # nccl#2241 (tests/data/kernel_log/issue_threads.txt; its PCI address was redacted there): IGNORE.
            [f"NVRM: Xid (PCI:{pci(3)}): 137, RLW_RXPIPE interrupt hit on link 11 on GPU0: PRIV Error"],
            3,
            0,
            "GPU3 Xid 137: NVLink privilege error; informational, the GPU is fit",
            id="xid-137-ignore",
        ),
        pytest.param(
            # chia-gigahorse#74 (tests/data/kernel_log/issue_threads.txt).
            [
                f"[10900.272611] NVRM: Xid (PCI:{pci(7)}): 109, pid=11263, name=Renderer, Ch 00000020,"
                " errorString CTX SWITCH TIMEOUT, Info 0xac00d"
            ],
            7,
            1,
            "GPU7 needs a reset (Xid 109: context switch timeout)",
            id="xid-109",
        ),
    ],
)
def test_kernel_log_lines_as_the_field_writes_them(
    fake_nvml: FakeNvml, kernel_log: KernelLog, lines: list[str], gpu: int, code: int, words: str
) -> None:
    for line in lines:
        if line.startswith(("[", " ")):  # dmesg's form, stamp and continuation indent as printed
            _dmesg(kernel_log, line)
        else:  # a /dev/kmsg record's text
            kernel_log.add(line, at_s=100.0)
    done = run_cli("check", fake_nvml)
    assert done.returncode == code, done.stdout + done.stderr
    host = snapshot_host(fake_nvml)
    xids = host["gpus"][gpu]["health"]["xids"]
    assert len(xids) == 1, xids
    assert all(not g["health"]["xids"] for i, g in enumerate(host["gpus"]) if i != gpu)
    assert host["kernel_log"]["unmatched"] == []
    if code == 1:
        says_not_ready(done.stdout, words)
        assert host["verdict"]["not_ready"] == [words]
    else:
        assert gpu_line(done.stdout, gpu) == f"GPU{gpu}  3 MiB  ✓"
        assert f"! xid: {words} (does not block the next launch)" in done.stdout.splitlines()
        assert host["gpus"][gpu]["health"]["notes"] == [words.split(" ", 1)[1]]
        assert host["verdict"]["clean"] is True
    if "fallen off the bus" in words:  # the Xid's own line where there is one, else the bare line's meaning
        has_xid = "): 79, " in lines[0]
        assert xids[0]["detail"] == (
            lines[0].split("): 79, ", 1)[1]
            if has_xid
            else "GPU has fallen off the bus (logged without an Xid number)"
        )


# gpud testdata/dmesg-with-xid-119.log and PR #46 (tests/data/kernel_log/gpud_kmsg.txt): an H100's GSP RPC
# timeout, and the three lines one Xid 13 fault writes.
XID_119 = (
    "NVRM: Xid (PCI:{pci}): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response"
    " from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4)."
)
XID_13_FAULT = tuple(
    "NVRM: Xid (PCI:{pci}): 13, pid='<unknown>', name=<unknown>, " + detail
    for detail in (
        "Graphics SM Warp Exception on (GPC {gpc}, TPC {tpc}, SM 0): Illegal Instruction Parameter",
        "Graphics SM Global Exception on (GPC {gpc}, TPC {tpc}, SM 0): Multiple Warp Errors",
        "Graphics Exception: ESR 0x57c730=0xc04000b 0x57c734=0x24 0x57c728=0x1f81fb60 0x57c72c=0x1174",
    )
)


def test_a_flood_of_advisory_xids_never_pushes_out_the_one_that_blocks(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    """An application faulting hundreds of times after a GPU's GSP timed out: the host's and the GPU's Xid
    history are bounded, and what they keep still holds the Xid that asks for a reset."""
    kernel_log.add(XID_119.format(pci=pci(1)), at_s=100.0)
    at = 101.0
    for fault in range(120):  # 360 lines on GPU0, past what the host keeps
        for line in XID_13_FAULT:
            kernel_log.add(line.format(pci=pci(0), gpc=fault % 8, tpc=fault % 9), at_s=at)
            at += 0.001
    for fault in range(15):  # 45 lines on GPU1 itself, past what one GPU keeps
        for line in XID_13_FAULT:
            kernel_log.add(line.format(pci=pci(1), gpc=fault % 8, tpc=fault % 9), at_s=at)
            at += 0.001
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1, done.stdout + done.stderr
    says_not_ready(done.stdout, "GPU1 needs a reset (Xid 119: GSP RPC timeout)")
    assert gpu_line(done.stdout, 0) == "GPU0  3 MiB  ✓"
    host = snapshot_host(fake_nvml)
    for index in (0, 1):
        xids = [x["xid"] for x in host["gpus"][index]["health"]["xids"]]
        assert 13 in xids
        assert len(xids) <= 32
    assert 119 in [x["xid"] for x in host["gpus"][1]["health"]["xids"]]


# -- 6. a verified gputui reset clears the GPU's reset-class Xids ------------------------------------------


@pytest.fixture
def reset_host(tmp_path: Path, fake_nvml_lib: Path, kernel_log: KernelLog) -> ResetHost:
    host = make_reset_host(tmp_path / "host", fake_nvml_lib)
    host.env["GPUTUI_TEST_KERNEL_LOG"] = str(kernel_log.path)
    return host


def test_a_verified_reset_clears_the_gpus_xids_for_later_checks_in_this_boot(
    reset_host: ResetHost, kernel_log: KernelLog
) -> None:
    kernel_log.add(XID_48.format(pci=pci(0)), at_s=XID_48_AT_S)
    before = run_cli("check", None, env=reset_host.env)
    assert before.returncode == 1, before.stdout + before.stderr
    says_not_ready(before.stdout, "GPU0 needs a reset (Xid 48: double-bit ECC error)")
    done = reset_host.run("local", "0", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "local: reset done, verified clean after"
    assert ["-r", "-i", uuid_of(0)] in reset_host.smi_calls()
    record = Path(reset_host.env["XDG_STATE_HOME"]) / "gputui" / RESET_RECORD_FILE
    document = json.loads(record.read_text())
    assert list(document["resets"]) == [uuid_of(0)]
    assert document["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    # A fresh check, a collector of its own: the reset's record clears the Xid from before it.
    after = run_cli("check", None, env=reset_host.env)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "CLEAN: 2/2 GPUs at baseline (3 MiB + 2)" in after.stdout
    host = snapshot_host(None, env=reset_host.env)
    assert [(x["xid"], x["cleared"]) for x in host["gpus"][0]["health"]["xids"]] == [(48, "GPU reset since")]
    # The same Xid after the reset counts again, and says it came back.
    kernel_log.add(XID_48.format(pci=pci(0)), at_s=time.monotonic() + 1.0)
    again = run_cli("check", None, env=reset_host.env)
    assert again.returncode == 1
    says_not_ready(
        again.stdout, "GPU0 needs a reset (Xid 48: double-bit ECC error; recurred after a reset: investigate)"
    )


def test_a_reset_record_of_another_boot_or_a_planted_one_clears_nothing(
    reset_host: ResetHost, kernel_log: KernelLog
) -> None:
    kernel_log.add(XID_48.format(pci=pci(0)), at_s=XID_48_AT_S)
    folder = Path(reset_host.env["XDG_STATE_HOME"]) / "gputui"
    folder.mkdir(parents=True, mode=0o700)
    record = folder / RESET_RECORD_FILE
    other = {"version": 1, "boot_id": "another-boot", "resets": {uuid_of(0): time.time()}}
    record.write_text(json.dumps(other))
    record.chmod(0o600)
    done = run_cli("check", None, env=reset_host.env)
    assert done.returncode == 1, done.stdout
    says_not_ready(done.stdout, "GPU0 needs a reset (Xid 48: double-bit ECC error)")
    # A link planted in its place is not followed, and not believed.
    record.unlink()
    planted = folder.parent / "planted.json"
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    planted.write_text(json.dumps(dict(other, boot_id=boot_id)))
    record.symlink_to(planted)
    done = run_cli("check", None, env=reset_host.env)
    assert done.returncode == 1, done.stdout
    says_not_ready(done.stdout, "GPU0 needs a reset (Xid 48: double-bit ECC error)")


def test_the_collector_that_ran_the_reset_clears_the_xids_at_once(
    reset_host: ResetHost, kernel_log: KernelLog
) -> None:
    kernel_log.add(XID_48.format(pci=pci(0)), at_s=XID_48_AT_S)
    with agent_process("--interval", "0.2", "--no-discover", env=reset_host.env) as agent:
        first = agent.sample()
        assert [(x["xid"], x["cleared"]) for x in first["gpus"][0]["health"]["xids"]] == [(48, None)]
        plan = agent.result({"cmd": "reset_plan", "gpus": ["0"]})["plan"]
        steps = [step["argv"] for step in plan["steps"]]
        result = agent.result({"cmd": "reset_run", "gpus": ["0"], "steps": steps}, timeout_s=60)
        assert result["verified"] is True, result
        after = agent.sample()
    assert [(x["xid"], x["cleared"]) for x in after["gpus"][0]["health"]["xids"]] == [(48, "GPU reset since")]
    judged = analyze(HostSnapshot.from_dict(after), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.not_ready == ()


def test_a_failed_reset_clears_nothing(reset_host: ResetHost, kernel_log: KernelLog) -> None:
    kernel_log.add(XID_48.format(pci=pci(0)), at_s=XID_48_AT_S)
    done = reset_host.run("local", "0", "--yes", env=dict(reset_host.env, FAKE_SMI_FAIL="-r"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert not (Path(reset_host.env["XDG_STATE_HOME"]) / "gputui" / RESET_RECORD_FILE).exists()
    after = run_cli("check", None, env=reset_host.env)
    assert after.returncode == 1
    says_not_ready(after.stdout, "GPU0 needs a reset (Xid 48: double-bit ECC error)")


# -- 7. the collector on Python 3.8 -------------------------------------------------------------------------


def test_the_collector_reads_the_recovery_action_and_the_fabric_on_python38(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    kernel_log.add(XID_48.format(pci=pci(2)), at_s=XID_48_AT_S)
    fake_nvml.state.gpus[2].recovery_action = 1
    fake_nvml.state.gpus[5].fabric_state = 2
    fake_nvml.state.gpus[6].fabric_state = 3
    fake_nvml.write()
    with agent_process(*STREAM, python=python38(), env=fake_nvml.env()) as agent:
        assert agent.hello["python"].startswith("3.8.")
        snapshot = agent.sample()
        fake_nvml.state.recoveries.append((3, 4))
        fake_nvml.state.gpus[3].recovery_action = 4
        fake_nvml.write()
        evented = _first(agent, 5.0, lambda s: s["gpus"][3]["health"]["recovery_action"] == 4)
    gpus = snapshot["gpus"]
    assert gpus[2]["health"]["recovery_action"] == 1
    manager = _manager_here()
    assert (gpus[5]["health"]["fabric_state"], gpus[5]["health"]["fabric_manager"]) == (2, manager)
    assert (gpus[6]["health"]["fabric_state"], gpus[6]["health"]["fabric_status"]) == (3, 0)
    assert "fabric_state" not in gpus[0]["health"]  # no fabric: the collector sends no fabric figures
    at = clock_time(gpus[2]["health"]["xids"][0]["time"])
    judged = analyze(HostSnapshot.from_dict(evented), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.not_ready == (
        f"GPU2 needs a reset (Xid 48: double-bit ECC error at {at}; the driver asks for GPU Reset)",
        "GPU3 needs draining, then a reset (the driver asks for Drain and Reset)",
        "GPU5 is not registered with the NVLink fabric"
        f" (NVLink fabric registration in progress (fabric manager {manager}))",
    )
