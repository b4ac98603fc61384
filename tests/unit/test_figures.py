"""Figures no card can have make that GPU "cannot tell" through the verdict engine's own path."""

from __future__ import annotations

import math

import pytest

from gputui.core.model import Gpu, GpuProcess, HostSnapshot, replace
from gputui.core.verdict import Baselines, clean_slate, memory_verdict


@pytest.mark.parametrize(
    ("figures", "named"),
    [
        ({"memory_used_mib": -5, "memory_total_mib": 81920}, "memory used -5 MiB"),
        ({"memory_used_mib": 90000, "memory_total_mib": 81920}, "memory used 90000 MiB > total 81920 MiB"),
        ({"memory_used_mib": 3, "memory_total_mib": -1}, "memory total -1 MiB"),
        ({"memory_used_mib": 0, "memory_total_mib": 0}, "memory total 0 MiB"),
        ({"memory_used_mib": 3, "memory_total_mib": 0}, "memory total 0 MiB"),
        (
            {"memory_used_mib": 3, "memory_total_mib": 81920, "memory_reserved_mib": -2},
            "memory reserved -2 MiB",
        ),
        ({"memory_used_mib": 3, "memory_total_mib": 81920, "power_w": math.nan}, "power NaN W"),
        ({"memory_used_mib": 3, "memory_total_mib": 81920, "power_w": -4.0}, "power -4 W"),
        ({"memory_used_mib": 3, "memory_total_mib": 81920, "utilization_pct": 140}, "utilization 140 %"),
        ({"memory_used_mib": 3, "memory_total_mib": 81920, "power_w": 70.5, "utilization_pct": 100}, None),
    ],
)
def test_an_impossible_figure_is_named_dropped_and_cannot_tell(
    figures: dict[str, object], named: str | None
) -> None:
    gpu = Gpu(index=0, **figures)  # type: ignore[arg-type]
    snapshot = HostSnapshot(
        target="h", time=1.0, gpus=(gpu, Gpu(index=1, memory_used_mib=3, memory_total_mib=10))
    )
    for verdict in (clean_slate(snapshot, Baselines()), memory_verdict(snapshot, Baselines())):
        if named is None:
            assert verdict.known
            assert verdict.clean
            continue
        assert not verdict.known
        assert not verdict.clean
        assert verdict.reasons == (f"GPU0 error: impossible figures: {named}",)
    if named is not None:
        assert gpu.error == f"impossible figures: {named}"
        shown = [gpu.memory_used_mib, gpu.power_w, gpu.utilization_pct]
        assert not any(
            isinstance(v, int | float) and (v < 0 or v != v or v > 100) for v in shown if v is not None
        )


def test_a_process_listed_with_negative_memory_is_named() -> None:
    gpu = Gpu(index=0, memory_used_mib=3, memory_total_mib=10, processes=(GpuProcess(pid=7, used_mib=-1),))
    assert gpu.error == "impossible figures: pid 7 using -1 MiB"
    assert gpu.processes[0].used_mib is None


def test_an_error_already_there_is_kept_and_replace_does_not_bring_the_figure_back() -> None:
    gpu = Gpu(index=0, memory_used_mib=-5, memory_total_mib=10, error="GPU is lost")
    assert (gpu.error, gpu.memory_used_mib) == ("GPU is lost", None)
    again = replace(Gpu(index=0, memory_used_mib=-5), name="x")
    assert again.memory_used_mib is None
    assert again.error == "impossible figures: memory used -5 MiB"


def test_the_wire_form_of_an_impossible_figure_is_cannot_tell() -> None:
    snapshot = HostSnapshot.from_dict(
        {"target": "h", "time": 1.0, "gpus": [{"index": 0, "memory_used_mib": -10, "memory_total_mib": 100}]}
    )
    assert snapshot.gpus[0].memory_used_mib is None
    assert not clean_slate(snapshot, Baselines()).known


def test_a_pid_below_one_or_a_negative_process_figure_never_reaches_a_finding() -> None:
    from gputui.core.verdict import find_problems

    data = {
        "target": "hostile",
        "time": 1000.0,
        "gpus": [{"index": 0, "memory_used_mib": 3, "memory_total_mib": 81920, "processes": []}],
        "processes": [
            {"pid": -1, "ppid": 1, "state": "Z", "name": "x"},
            {"pid": 0, "ppid": 1, "state": "D", "name": "y"},
            {"pid": 77, "ppid": 1, "state": "S", "name": "z", "gpu_memory_mib": {"0": -20480, "1": 512}},
        ],
        "device_holders": [{"pid": -1, "name": "h", "device": "/dev/nvidia0"}],
    }
    snapshot = HostSnapshot.from_dict(data)
    assert [p.pid for p in snapshot.processes] == [77]
    assert snapshot.processes[0].gpu_memory_mib == {1: 512}
    assert snapshot.device_holders == ()
    findings = find_problems(snapshot, Baselines(), 1000.0)
    assert not any("-1" in f.detail + f.action or "-20480" in f.detail for f in findings)
