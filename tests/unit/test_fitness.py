"""GPU health: the kernel-log reader, the Xid and state table, NOT READY, the model, DCGM's series."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from gputui.agent.gpu import xid as xidmod
from gputui.agent.gpu.xid import KernelLog
from gputui.agent.pci import pci_key
from gputui.core.model import CANNOT_TELL, Gpu, GpuFitness, HostSnapshot, XidEvent, replace
from gputui.core.verdict import (
    ACTION_DRAIN,
    ACTION_NONE,
    ACTION_REBOOT,
    ACTION_RESET,
    Baselines,
    analyze,
    assess,
    cleanslate,
    needs_reset,
)
from gputui.transports.prometheus.parse import dcgm_fitness
from gputui.transports.prometheus.series import Series


def test_pci_ids_compare_as_integers() -> None:
    assert pci_key("00000000:1A:00.0") == pci_key("0000:1a:00") == pci_key("1a:00.0") == (0, 0x1A, 0)
    assert pci_key("00000001:17:00.0") == (1, 0x17, 0)
    for bad in ("", "zz:00.0", "0000:100:00", "00:20", None, 17, "0000:17:00:00"):
        assert pci_key(bad) is None


def test_kernel_log_lines_in_both_formats(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text(
        "6,1,3000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06\n"
        "4,2,9500000,-;NVRM: Xid (PCI:0000:17:00): 79, pid=1, GPU has fallen off the bus.\n"
        "[   12.250000] NVRM: Xid (0000:18:00): 13, Graphics Exception\n"
        "NVRM: Xid (PCI:0000:19:00.0): 48, no timestamp\n"
        "4,3,9600000,-;NVRM: Xid (PCI:0000:17:00): 79\n"
        "4,4,9700000,-;NVRM: Xid (PCI:0000:17:00): \x1b[2J, not a number\n"
        "4,5,9800000,-;audit: NVRM would be here\n"
    )
    log = KernelLog(str(path))
    log.read()
    assert log.error is None
    assert log.source == f"test:{path}"
    assert [(e["pci"], e["xid"]) for e in log.events] == [
        ((0, 0x17, 0), 79),
        ((0, 0x18, 0), 13),
        ((0, 0x19, 0), 48),
        ((0, 0x17, 0), 79),
    ]
    boot = log.driver_load_time
    assert boot is not None
    assert log.events[0]["time"] == pytest.approx(boot + 6.5, abs=0.01)
    assert log.events[1]["time"] == pytest.approx(boot + 9.25, abs=0.01)
    assert log.events[2]["time"] is None
    assert log.events[0]["detail"] == "pid=1, GPU has fallen off the bus."


def test_kernel_log_text_is_made_safe_and_capped(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("NVRM: Xid (PCI:0000:17:00): 31, \x1b]0;pwned\x07\u202e" + "x" * 5000 + "\n")
    log = KernelLog(str(path))
    log.read()
    detail = log.events[0]["detail"]
    assert "\x1b" not in detail
    assert "\u202e" not in detail
    assert len(detail) <= xidmod.DETAIL_MAX


def test_a_planted_test_source_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text("NVRM: Xid (PCI:0000:17:00): 79, x\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    log = KernelLog(str(link))
    log.read()
    assert log.events == []
    assert log.error is not None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    log = KernelLog(str(fifo))
    log.read()  # never blocks on a FIFO
    assert log.error == f"{fifo}: not a regular file"


def _fake_dmesg(folder: Path, body: str) -> None:
    folder.mkdir()
    script = folder / "dmesg"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


def test_dmesg_is_the_fallback_when_kmsg_cannot_be_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(xidmod, "KMSG_PATH", str(tmp_path / "no-kmsg"))
    _fake_dmesg(tmp_path / "bin", "echo '[  5.000000] NVRM: Xid (PCI:0000:17:00): 119, Timeout'\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    log = KernelLog(test_path=None)
    log.test_path = None
    log.read()
    assert log.error is None
    assert log.source == "dmesg"
    assert [e["xid"] for e in log.events] == [119]
    log.read()  # read again whole: not listed twice
    assert [e["xid"] for e in log.events] == [119]


def test_a_restricted_kernel_log_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xidmod, "KMSG_PATH", str(tmp_path / "no-kmsg"))
    _fake_dmesg(
        tmp_path / "bin", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n"
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    log = KernelLog(test_path=None)
    log.test_path = None
    log.read()
    assert log.source is None
    assert log.error == (
        f"{tmp_path / 'no-kmsg'}: No such file or directory; dmesg: read kernel buffer failed: "
        "Operation not permitted"
    )


def test_assess_orders_causes_by_severity_and_ignores_cleared_xids() -> None:
    health = GpuFitness(
        remap_pending=True,
        remap_failure=True,
        xids=(
            XidEvent(79, 1.0, "kernel log", cleared="driver reloaded since"),
            XidEvent(13, 2.0, "kernel log"),
            XidEvent(4242, 3.0, "kernel log"),
        ),
    )
    judged = assess(health)
    assert judged.action == ACTION_DRAIN
    assert judged.causes == (
        "row remapping failed: NVIDIA's RMA policy counts it",
        "row remap pending",
        "unclassified Xid 4242 since boot; see NVIDIA's Xid Catalog (https://docs.nvidia.com/deploy/xid-errors/)",
    )
    assert judged.notes == (
        "Xid 13: graphics engine exception; the application that hit it must be restarted, the GPU is fit",
    )
    assert not judged.needs_reset
    assert assess(None).action == ACTION_NONE
    assert needs_reset(Gpu(index=0, fitness=GpuFitness(remap_pending=True)))
    assert not needs_reset(
        Gpu(index=0, fitness=GpuFitness(retired_pages_pending=True))
    )  # a reload or a reboot
    assert not needs_reset(Gpu(index=0))


def _snapshot(*gpus: Gpu) -> HostSnapshot:
    return HostSnapshot(target="h", hostname="h", time=100.0, processes_time=100.0, gpus=gpus)


def test_not_ready_beats_memory_at_baseline_and_is_kept_beside_a_gpu_that_cannot_be_read() -> None:
    """GPU0 at its baseline needs a reset: not clean, and its reason is kept; GPU1 lost makes the host's
    level CANNOT TELL, which outranks NOT READY (``core.verdict.levels``)."""
    snapshot = _snapshot(
        Gpu(index=0, memory_used_mib=3, memory_total_mib=100, fitness=GpuFitness(ecc_uncorrected_volatile=2)),
        Gpu(index=1, error="GPU is lost"),
    )
    verdict = analyze(snapshot, Baselines()).verdict
    assert verdict is not None
    assert verdict.not_ready
    assert not verdict.known
    assert verdict.level == CANNOT_TELL
    assert not verdict.clean
    assert verdict.not_ready == ("GPU0 needs a reset (2 uncorrected ECC errors since the last reset)",)
    assert verdict.reasons[0] == verdict.not_ready[0]
    assert verdict.gpus[0].reasons[0] == verdict.not_ready[0]
    back = HostSnapshot.from_json(analyze(snapshot, Baselines()).to_json())
    assert back.verdict is not None
    assert back.verdict.not_ready == verdict.not_ready
    assert back.gpus[0].fitness is not None
    assert back.gpus[0].fitness.action == ACTION_RESET
    assert back.gpus[0].fitness.needs_reset


def test_a_healthy_gpu_stays_clean() -> None:
    snapshot = _snapshot(
        Gpu(index=0, memory_used_mib=3, fitness=GpuFitness(ecc_enabled=True, remap_pending=False))
    )
    verdict = analyze(snapshot, Baselines()).verdict
    assert verdict is not None
    assert verdict.clean
    assert not verdict.not_ready


def test_the_clean_check_ends_not_ready_once_memory_is_back() -> None:
    snapshot = analyze(
        _snapshot(Gpu(index=0, memory_used_mib=3, fitness=GpuFitness(remap_pending=True))), Baselines()
    )
    streamed = replace(snapshot, processes_time=(snapshot.time or 0.0) - 1.0)  # an older list, reused
    check = cleanslate.start(90.0, timeout_s=60.0)
    check, ask = cleanslate.memory_sample(check, streamed, Baselines(), 100.0)
    assert ask
    done = cleanslate.confirming_sample(check, snapshot)
    assert done.finished_s is not None
    assert done.clean is False
    assert done.note == "GPU0 needs a reset (row remap pending)"
    # Listed with its memory, the sample is its own confirming sample: the same end.
    itself, ask = cleanslate.memory_sample(cleanslate.start(90.0, 60.0), snapshot, Baselines(), 100.0)
    assert not ask
    assert (itself.clean, itself.note) == (False, "GPU0 needs a reset (row remap pending)")


def test_hostile_health_dicts_are_blanks() -> None:
    health = GpuFitness.from_dict(
        {
            "remap_pending": "yes",
            "ecc_uncorrected_volatile": -5,
            "clock_event_reasons": float("nan"),
            "xids": [{"xid": "79"}, {"xid": None}, "x", {"xid": 13, "time": math.inf, "detail": 7}],
        }
    )
    assert health is not None
    assert health.remap_pending is None
    assert health.ecc_uncorrected_volatile is None
    assert health.clock_event_reasons is None
    assert [(e.xid, e.time, e.detail) for e in health.xids] == [(79, None, ""), (13, None, "")]
    assert GpuFitness.from_dict("nope") is None


def _series(value: float) -> Series:
    return Series(labels={}, value=value)


def test_dcgm_series_are_judged_by_the_same_table() -> None:
    health = dcgm_fitness({"remap_pending": _series(1.0), "ecc_unc_volatile": _series(0.0)}, 79)
    assert health is not None
    judged = assess(health)
    assert judged.action == ACTION_REBOOT
    assert judged.causes == ("Xid 79: GPU has fallen off the bus", "row remap pending")
    assert dcgm_fitness({}, None) is None
    # Figures no card can have are blanks: none left, no health at all.
    impossible = {"remap_pending": _series(float("nan")), "retired_pending": _series(-1.0)}
    assert dcgm_fitness(impossible, None) is None
    odd = dcgm_fitness({"remap_pending": _series(float("nan")), "remap_failure": _series(0.0)}, None)
    assert odd is not None
    assert odd.remap_pending is None
    assert odd.remap_failure is False
    assert assess(odd).action == ACTION_NONE


def test_a_line_with_elided_lists_keeps_the_previous_health() -> None:
    from gputui.agent.remote.serve import elide_unchanged_processes

    full = {
        "target": "h",
        "time": 1.0,
        "processes_time": 1.0,
        "gpus": [{"index": 0, "memory_used_mib": 3, "processes": [], "health": {"remap_pending": True}}],
        "processes": [],
        "listening_ports": [],
        "kernel_log": {"source": "/dev/kmsg", "error": None, "unmatched": []},
    }
    first = HostSnapshot.from_dict(full)
    line = elide_unchanged_processes(dict(full, time=2.0))
    assert "health" not in line["gpus"][0]
    assert "kernel_log" not in line
    second = HostSnapshot.from_dict(line, first)
    assert second.gpus[0].fitness == first.gpus[0].fitness
    assert second.kernel_log == first.kernel_log
    assert second.time == 2.0


@pytest.mark.parametrize(("remap_pending", "fit"), [(False, True), (True, False)])
def test_an_xid_that_does_not_block_calls_the_gpu_fit_only_when_it_is(remap_pending: bool, fit: bool) -> None:
    """Xid 94 (contained, applications continue) never blocks; its finding says the GPU is fit only when no
    other cause makes it unfit (a pending row remap), never beside a finding that it needs a reset."""
    xid = XidEvent(94, 90.0, "kernel log", "Contained: CE User Channel (0x9)")
    snapshot = _snapshot(
        Gpu(
            index=1,
            memory_used_mib=3,
            memory_total_mib=100,
            fitness=GpuFitness(ecc_enabled=True, remap_pending=remap_pending, xids=(xid,)),
        )
    )
    findings = analyze(snapshot, Baselines()).findings
    (said,) = [f for f in findings if f.kind == "xid"]
    assert said.detail.startswith("GPU1 Xid 94")
    assert ("the GPU itself is fit" in said.action) is fit
    assert any(f.kind == "gpu_health" for f in findings) is not fit
