"""The GPU's own health end to end: real pynvml on the fake NVML, a kernel log of the test's own, the CLI.

Every blocking state (pending row remap, row-remap failure, pending page retirement, uncorrected ECC, NVML's
RESET_REQUIRED, an Xid that asks for a reset or reboot) makes ``gputui check`` exit 1 naming the GPU, the
cause and the action; application Xids and Xids for PCI addresses no GPU has are listed and do not block; a
kernel log that cannot be read is said, and is not "no Xid".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.gpu.xid import TEST_SOURCE_ENV
from gputui.core.link import LinkOptions
from gputui.core.model import HostSnapshot
from gputui.core.verdict import Baselines, analyze
from gputui.transports.ssh import SshLink
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO, agent_process
from tests.integration.sshd import ClientHome, SshdFactory
from tests.interpreters import python38
from tests.kernellog import KernelLog


def _says_not_ready(out: str, words: str) -> None:
    """``check``'s headline is NOT READY and the GPU's own line gives the reason (``GPU2 needs …``)."""
    gpu, rest = words.split(" ", 1)
    assert re.search(r"^NOT READY: \d+/\d+ GPUs at baseline", out, re.M), out
    assert re.search(rf"^{gpu}  \d+ MiB  ✗ {re.escape(rest)}", out, re.M), out


def run_cli(command: str, fake: FakeNvml, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as state:  # no calibration recorded by whoever runs the tests
        return subprocess.run(
            [sys.executable, "-m", "gputui.cli", command, *args],
            cwd=REPO,
            env=dict(fake.env(), XDG_STATE_HOME=state),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def snapshot_host(fake: FakeNvml) -> dict[str, Any]:
    done = run_cli("snapshot", fake, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["hosts"][0]


def test_a_healthy_host_with_ecc_on_is_clean(fake_nvml: FakeNvml, kernel_log: KernelLog) -> None:
    kernel_log.add("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06", at_s=3.0)
    done = run_cli("check", fake_nvml)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CLEAN: 8/8 GPUs at baseline" in done.stdout
    assert "NOT READY" not in done.stdout
    assert "Xid history unavailable" not in done.stdout
    host = snapshot_host(fake_nvml)
    assert host["kernel_log"]["source"].startswith("test:")
    assert host["kernel_log"]["error"] is None
    health = host["gpus"][0]["health"]
    assert health["ecc_enabled"] is True
    assert health["ecc_uncorrected_volatile"] == 0
    assert health["remap_pending"] is False
    assert health["retired_pages_pending"] is False
    assert health["persistence_mode"] is True
    assert health["action"] == "none"
    assert health["needs_reset"] is False
    assert health["xids"] == []
    assert host["verdict"]["clean"] is True
    assert host["verdict"]["not_ready"] == []


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ({"remap_pending": 1, "remap_corr": 2}, "GPU2 needs a reset (row remap pending)"),
        (
            {"retired_pending": 1},
            "GPU2 needs a reboot of the host"
            " (retired pages pending: a driver reload or a reboot retires them)",
        ),
        ({"ecc_unc_volatile": 4}, "GPU2 needs a reset (4 uncorrected ECC errors since the last reset)"),
        (
            {"remap_failure": 1, "remap_unc": 9},
            "GPU2 needs the node drained and the GPU serviced"
            " (row remapping failed: NVIDIA's RMA policy counts it)",
        ),
        ({"health_error": "RESET_REQUIRED"}, "GPU2 needs a reset (NVML says a reset is required)"),
    ],
)
def test_each_blocking_state_is_not_ready_naming_gpu_cause_and_action(
    fake_nvml: FakeNvml, kernel_log: KernelLog, state: dict[str, Any], words: str
) -> None:
    for key, value in state.items():
        setattr(fake_nvml.state.gpus[2], key, value)
    fake_nvml.write()
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1, done.stdout + done.stderr
    _says_not_ready(done.stdout, words)
    # "At baseline" is said of memory alone: the GPU's fitness is its own reason.
    assert "NOT READY: 8/8 GPUs at baseline (3 MiB + 2)" in done.stdout.splitlines(), done.stdout
    assert "Traceback" not in done.stderr
    host = snapshot_host(fake_nvml)
    assert host["verdict"]["not_ready"] == [words]
    assert host["verdict"]["known"] is True
    health = host["gpus"][2]["health"]
    assert health["action"] in ("reset", "drain", "reboot")
    assert health["needs_reset"] is (health["action"] == "reset")
    # The memory is at its baseline all along: only the GPU's own health blocks.
    assert all(g["memory_used_mib"] == 3 for g in host["gpus"])
    assert [g["health"]["action"] for i, g in enumerate(host["gpus"]) if i != 2] == ["none"] * 7
    text = run_cli("snapshot", fake_nvml).stdout
    assert "CLEAN SLATE\n" in text
    _says_not_ready(text, words)  # snapshot ends with the verdict block check prints


def test_xid_79_and_xid_13_on_different_gpus(fake_nvml: FakeNvml, kernel_log: KernelLog) -> None:
    kernel_log.add("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06", at_s=3.0)
    # GPU3 is 0000:1a:00, GPU5 0000:1c:00 (the fake's bus numbers start at 0x17); one written in capitals.
    kernel_log.xid("0000:1A:00", 79, "pid=4242, name=python, GPU has fallen off the bus.", at_s=50.0)
    kernel_log.xid("0000:1c:00", 13, "Graphics SM Warp Exception on (GPC 0, TPC 0)", at_s=60.0)
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1, done.stdout + done.stderr
    _says_not_ready(done.stdout, "GPU3 needs a reboot of the host (Xid 79: GPU has fallen off the bus)")
    assert (
        "GPU5 Xid 13: graphics engine exception; the application that hit it must be restarted,"
        " the GPU is fit (does not block the next launch)"
    ) in done.stdout
    assert "GPU5  3 MiB  ✓" in done.stdout or "GPU5  3 MiB  ok" in done.stdout
    host = snapshot_host(fake_nvml)
    gpu3, gpu5 = host["gpus"][3]["health"], host["gpus"][5]["health"]
    assert gpu3["action"] == "reboot"
    assert [(x["xid"], x["source"], x["cleared"]) for x in gpu3["xids"]] == [(79, "kernel log", None)]
    assert "fallen off the bus" in gpu3["xids"][0]["detail"]
    assert gpu5["action"] == "none"
    assert gpu5["notes"] == [
        "Xid 13: graphics engine exception; the application that hit it must be restarted, the GPU is fit"
    ]
    assert [x["xid"] for x in gpu5["xids"]] == [13]
    assert all(not host["gpus"][i]["health"]["xids"] for i in (0, 1, 2, 4, 6, 7))
    assert host["verdict"]["not_ready"] == [
        "GPU3 needs a reboot of the host (Xid 79: GPU has fallen off the bus)"
    ]


def test_foreign_malformed_and_unknown_pci_xids_do_not_block(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    kernel_log.xid("0000:99:00", 48, "DBE (double bit error) ECC error", at_s=20.0)
    kernel_log.add("NVRM: Xid (PCI:zzzz:17:00): 79, not a PCI address", at_s=21.0)
    kernel_log.add("NVRM: Xid (PCI:0000:17:00): seventy-nine", at_s=22.0)
    kernel_log.add("usb 1-1: Xid (PCI:0000:17:00): 79, someone else's line", at_s=23.0)
    kernel_log.add("garbage \x1b[2J without a record header")
    done = run_cli("check", fake_nvml)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Xid 48: double-bit ECC error logged for PCI 0000:99:00, which no GPU has" in done.stdout
    host = snapshot_host(fake_nvml)
    assert all(not g["health"]["xids"] for g in host["gpus"])
    assert [(x["pci"], x["xid"]) for x in host["kernel_log"]["unmatched"]] == [("0000:99:00", 48)]


def test_an_unreadable_kernel_log_is_said_once_never_no_xid(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUTUI_TEST_KERNEL_LOG", str(tmp_path / "no-such-log"))
    done = run_cli("check", fake_nvml)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("Xid history unavailable: ") == 1
    assert "no-such-log: No such file or directory" in done.stdout
    host = snapshot_host(fake_nvml)
    assert host["kernel_log"]["source"] is None
    assert "No such file or directory" in host["kernel_log"]["error"]
    assert [f["kind"] for f in host["findings"]].count("xid_history") == 1
    assert "Xid history unavailable" in run_cli("snapshot", fake_nvml).stdout


def test_an_xid_stops_counting_after_a_driver_reload_or_a_recovery(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    kernel_log.xid("0000:17:00", 79, "GPU has fallen off the bus.", at_s=10.0)
    kernel_log.add("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.124.06", at_s=20.0)
    kernel_log.xid("0000:18:00", 95, "Uncontained: FBHUB. RST: Yes", at_s=30.0)
    kernel_log.xid(
        "0000:18:00",
        154,
        "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
        at_s=40.0,
    )
    done = run_cli("check", fake_nvml)
    assert done.returncode == 0, done.stdout + done.stderr
    host = snapshot_host(fake_nvml)
    assert [(x["xid"], x["cleared"]) for x in host["gpus"][0]["health"]["xids"]] == [
        (79, "driver reloaded since")
    ]
    assert [(x["xid"], x["cleared"]) for x in host["gpus"][1]["health"]["xids"]] == [
        (95, "GPU reset since"),
        (154, None),
    ]
    # A contained error is advice; a later uncontained one counts again, and says it came back after a reset.
    kernel_log.xid("0000:18:00", 94, "Contained: SM (0x1). RST: No", at_s=50.0)
    done = run_cli("check", fake_nvml)
    assert done.returncode == 0, done.stdout
    assert "GPU1 Xid 94: contained memory error; reset when convenient" in done.stdout
    kernel_log.xid("0000:18:00", 95, "Uncontained: FBHUB. RST: Yes", at_s=60.0)
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1
    _says_not_ready(
        done.stdout,
        "GPU1 needs a reset (Xid 95: uncontained memory error; recurred after a reset: investigate)",
    )


def test_xid_154_names_its_own_action(fake_nvml: FakeNvml, kernel_log: KernelLog) -> None:
    kernel_log.xid(
        "0000:1e:00", 154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    )
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1
    _says_not_ready(
        done.stdout, "GPU7 needs a reboot of the host (Xid 154: GPU recovery action changed to Node Reboot)"
    )


def test_live_xid_events_from_nvml_and_the_health_cadence(fake_nvml: FakeNvml, kernel_log: KernelLog) -> None:
    """Xid events are read from NVML without waiting; the health figures at their own cadence, on every
    forced sample (``sample``) and after a kill."""
    with agent_process("--interval", "0.1", "--no-discover", env=fake_nvml.env()) as agent:
        first = agent.sample()
        assert first["gpus"][4]["health"]["xids"] == []
        fake_nvml.state.xids.append((4, 79))
        fake_nvml.state.gpus[6].remap_pending = 1
        fake_nvml.write()
        # A stream sample before the health interval is over keeps the last figures.
        streamed = agent.next_snapshot()
        assert streamed["gpus"][6]["health"]["remap_pending"] is False
        forced = agent.sample()
        assert forced["gpus"][6]["health"]["remap_pending"] is True
        assert [(x["xid"], x["source"]) for x in forced["gpus"][4]["health"]["xids"]] == [(79, "NVML event")]
        # Delivered once: the next forced read does not list it twice.
        again = agent.sample()
        assert [x["xid"] for x in again["gpus"][4]["health"]["xids"]] == [79]
    judged = analyze(HostSnapshot.from_dict(again), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.not_ready == (
        "GPU4 needs a reboot of the host (Xid 79: GPU has fallen off the bus)",
        "GPU6 needs a reset (row remap pending)",
    )
    assert judged.verdict.not_ready
    assert judged.verdict.known
    assert not judged.verdict.clean


def test_health_queries_a_gpu_or_driver_cannot_answer_are_blanks(
    fake_nvml: FakeNvml, fake_nvml_older: Callable[..., Path], kernel_log: KernelLog
) -> None:
    fake_nvml.state.gpus[0].unsupported = "remap,retired,ecc,clocks,persistence,events"
    fake_nvml.state.gpus[1].health_error = "NO_PERMISSION"
    fake_nvml.write()
    host = snapshot_host(fake_nvml)
    for index in (0, 1):
        health = host["gpus"][index]["health"]
        assert health["remap_pending"] is None
        assert health["retired_pages_pending"] is None
        assert health["ecc_uncorrected_volatile"] is None
        assert health["action"] == "none"
        assert host["gpus"][index]["error"] is None
    assert host["gpus"][0]["health"]["clock_event_reasons"] is None
    assert host["verdict"]["clean"] is True
    # A driver from before the health queries: every GPU still reads, the figures blank.
    old = FakeNvml(lib_dir=fake_nvml_older("health"), state_path=fake_nvml.state_path, state=fake_nvml.state)
    done = run_cli("check", old)
    assert done.returncode == 0, done.stdout + done.stderr
    host = snapshot_host(old)
    assert all(g["health"]["remap_pending"] is None for g in host["gpus"])
    assert host["gpus"][2]["health"]["ecc_enabled"] is True


def test_hardware_clock_events_and_persistence_off_are_shown_not_blocking(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    fake_nvml.state.gpus[3].clock_reasons = 0x8 | 0x80
    fake_nvml.state.gpus[3].persistence = 0
    fake_nvml.state.gpus[4].ecc_mode = 0
    fake_nvml.write()
    done = run_cli("check", fake_nvml)
    assert done.returncode == 0, done.stdout + done.stderr
    host = snapshot_host(fake_nvml)
    assert host["gpus"][3]["health"]["notes"] == [
        "clocks held down: HW slowdown",
        "clocks held down: HW power brake slowdown",
        "persistence mode off",
    ]
    assert host["gpus"][4]["health"]["ecc_enabled"] is False
    assert host["gpus"][4]["health"]["ecc_uncorrected_volatile"] is None


def test_the_collector_reads_fitness_and_xids_on_python38(fake_nvml: FakeNvml, kernel_log: KernelLog) -> None:
    kernel_log.xid("0000:17:00", 79, "GPU has fallen off the bus.")
    fake_nvml.state.gpus[1].retired_pending = 1
    fake_nvml.write()
    with agent_process("--interval", "0.2", "--no-discover", python=python38(), env=fake_nvml.env()) as agent:
        assert agent.hello["python"].startswith("3.8.")
        snapshot = agent.sample()
    assert [x["xid"] for x in snapshot["gpus"][0]["health"]["xids"]] == [79]
    assert snapshot["gpus"][1]["health"]["retired_pages_pending"] is True
    judged = analyze(HostSnapshot.from_dict(snapshot), Baselines(), now=time.time())
    assert judged.verdict is not None
    assert judged.verdict.not_ready


def test_health_over_ssh_in_every_stream_line_and_the_suite_s_kernel_log(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    """A shipped collector reads the suite's kernel log (passed by sshd), never the machine's; its health
    reaches the client on stream lines whose process lists (and so health) are elided too."""
    fake_nvml.state.gpus[2].remap_pending = 1
    fake_nvml.write()
    server = sshd_factory()
    ssh_client.add_host("host-h", server)
    ssh_client.trust(server)
    link = SshLink(
        "host-h", LinkOptions(memory_interval_s=0.1, process_interval_s=5.0, connect_timeout_s=10.0)
    )
    link.open()
    try:
        seen: list[HostSnapshot] = []
        end = time.monotonic() + 30.0
        while len(seen) < 8 and time.monotonic() < end:
            snapshot = link.next_snapshot(1.0)
            if snapshot is not None:
                seen.append(snapshot)
        assert len(seen) == 8
        for snapshot in seen:
            health = snapshot.gpus[2].fitness
            assert health is not None
            assert health.remap_pending is True
            assert snapshot.kernel_log is not None
            assert snapshot.kernel_log.source == "test:" + os.environ[TEST_SOURCE_ENV]
        judged = analyze(seen[-1], Baselines())
        assert judged.verdict is not None
        assert judged.verdict.not_ready == ("GPU2 needs a reset (row remap pending)",)
    finally:
        link.close()


def test_a_kill_reads_the_health_again_before_its_interval(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    """Between health rounds the stream keeps the last figures; a kill (here one of a pid that is gone:
    nothing is signalled) makes the next process sample read them again."""
    from gputui.agent.kill.messages import kill_command

    args = ("--interval", "0.1", "--process-interval", "0.2", "--no-discover")
    ended = subprocess.Popen(["true"])  # noqa: S607 - a pid that is gone, with a start time none has
    ended.wait()
    with agent_process(*args, env=fake_nvml.env()) as agent:
        boot_id = agent.hello["boot_id"]
        assert agent.sample()["gpus"][1]["health"]["remap_pending"] is False
        pid = ended.pid
        fake_nvml.state.gpus[1].remap_pending = 1
        fake_nvml.write()
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            assert agent.next_snapshot()["gpus"][1]["health"]["remap_pending"] is False
        agent.send(kill_command([(pid, 1)], [], boot_id, "TERM", False, None, None, False))
        end = time.monotonic() + 10.0
        while True:
            if agent.next_snapshot()["gpus"][1]["health"]["remap_pending"] is True:
                break
            assert time.monotonic() < end, "the kill did not bring a health read"


def test_a_gpu_fallen_off_the_bus_and_no_longer_listed_blocks(
    fake_nvml: FakeNvml, kernel_log: KernelLog
) -> None:
    # A lost GPU drops out of NVML's list: its Xid 79 names a PCI address no listed GPU has.
    kernel_log.xid("0000:99:00", 79, "pid=4242, name=python, GPU has fallen off the bus.", at_s=50.0)
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1, done.stdout + done.stderr
    reason = (
        "Xid 79: GPU has fallen off the bus logged for PCI 0000:99:00, which no GPU has now: "
        "needs a reboot of the host"
    )
    assert re.search(r"^NOT READY: 8/8 GPUs at baseline", done.stdout, re.M), done.stdout
    assert f"  GPUs:    ✗ {reason}" in done.stdout.splitlines()
    host = snapshot_host(fake_nvml)
    assert host["verdict"]["not_ready"] == [reason]
    assert host["verdict"]["facts"]["gpus"]["reasons"] == [reason]
    (finding,) = [f for f in host["findings"] if f["kind"] == "xid"]
    assert finding["detail"] == reason
    assert finding["action"] == "reboot the host: a GPU reset does not recover from this"


def test_an_unclassified_xid_blocks_until_the_site_accepts_it(
    fake_nvml: FakeNvml, kernel_log: KernelLog, tmp_path: Path
) -> None:
    """An Xid the catalogue does not name is NOT READY naming it; listed in the config's ``accepted_xids``
    it is shown beside a clean verdict. A config that is wrong is one line, exit 2."""
    kernel_log.xid("0000:19:00", 4242, "something new", at_s=30.0)
    done = run_cli("check", fake_nvml)
    assert done.returncode == 1, done.stdout + done.stderr
    _says_not_ready(
        done.stdout,
        "GPU2 needs a look before the next launch (unclassified Xid 4242 since boot; see NVIDIA's Xid"
        " Catalog (https://docs.nvidia.com/deploy/xid-errors/))",
    )
    config = tmp_path / "config.toml"
    config.write_text("accepted_xids = [4242]\n")
    done = run_cli("check", fake_nvml, "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    host = json.loads(run_cli("check", fake_nvml, "--config", str(config), "--json").stdout)["hosts"][0]
    assert host["gpus"][2]["health"]["notes"] == [
        "unclassified Xid 4242 since boot; accepted by the site's config"
    ]
    config.write_text("accepted_xids = 4242\n")
    done = run_cli("check", fake_nvml, "--config", str(config))
    assert done.returncode == 2
    assert done.stderr == (f"gputui: {config}: accepted_xids must be a list of Xid numbers (1 to 65535)\n")
