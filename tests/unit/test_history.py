"""A host's GPU history: one point a second, ten minutes, bounded whatever the sampling interval."""

from __future__ import annotations

from gputui.core.model import POINTS_MAX, STEP_S, WINDOW_S, Gpu, GpuHistory, HostSnapshot

START_S = 1_800_000_000.0


def _snapshot(at_s: float | None, used_mib: int | None, error: str | None = None) -> HostSnapshot:
    gpu = Gpu(
        index=0,
        memory_used_mib=used_mib,
        memory_total_mib=1000,
        utilization_pct=50,
        power_w=None,
        temperature_c=40,
        error=error,
    )
    return HostSnapshot(target="h", time=at_s, gpus=(gpu,))


def test_samples_within_one_second_replace_its_point() -> None:
    history = GpuHistory()
    for tenth in range(10):
        history.record(_snapshot(START_S + tenth / 10, 100 + tenth))
    (point,) = history.points(0)
    assert point.memory_used_mib == 109
    assert point.power_w is None  # not said by the driver: no fake zero
    history.record(_snapshot(START_S + STEP_S, 200))
    assert history.memory_mib(0) == [109, 200]


def test_it_keeps_ten_minutes_and_never_more_points_than_that() -> None:
    history = GpuHistory()
    for second in range(3 * POINTS_MAX):
        history.record(_snapshot(START_S + second * 0.5, second))  # two samples a second for 15 minutes
    points = history.points(0)
    assert len(points) <= POINTS_MAX
    assert points[-1].at_s - points[0].at_s <= WINDOW_S
    for second in range(3 * POINTS_MAX):
        history.record(_snapshot(START_S + 900 + second * 3.0, second))  # one every three seconds
    points = history.points(0)
    assert points[-1].at_s - points[0].at_s <= WINDOW_S
    assert len(points) == int(WINDOW_S // 3) + 1


def test_a_gpu_in_error_or_a_snapshot_without_time_adds_nothing() -> None:
    history = GpuHistory()
    history.record(_snapshot(None, 5))
    history.record(_snapshot(START_S, None, error="GPU is lost"))
    assert history.points(0) == ()
    history.record(_snapshot(START_S + 1, None))
    assert history.memory_mib(0) == []  # a point without a memory figure
    assert len(history.points(0)) == 1
