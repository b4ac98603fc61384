"""The forests kept between samples are bounded per host: a TUI watching a job of hundreds of members for an
hour holds the newest forest and the one before, not one per process sample it has seen."""

from __future__ import annotations

from gputui.core.jobs import build_forest, forest
from gputui.core.model import HostSnapshot, Proc, replace
from gputui.transports.sim import ManualClock, SimLink


def _sample(target: str = "gpu-node-07") -> HostSnapshot:
    link = SimLink(target, clock=ManualClock())
    link.open()
    try:
        return HostSnapshot.from_dict(link.request({"cmd": "sample"}, 1.0)["snapshot"])
    finally:
        link.close()


def _live_forests_of(processes: tuple[Proc, ...]) -> bool:
    return any(entry[1][0] is processes for kept in forest._forests.values() for entry in kept)


def test_a_host_keeps_its_two_latest_forests() -> None:
    first = _sample()
    samples = [replace(first, processes=tuple(list(first.processes))) for _ in range(20)]
    for sample in samples:
        assert build_forest(sample)
    kept = forest._forests[(first.target, first.boot_id)]
    assert len(kept) == 2
    assert not _live_forests_of(samples[0].processes)
    assert _live_forests_of(samples[-1].processes)
    assert _live_forests_of(samples[-2].processes)
    # The newest is still built once: asking again for it reads what is kept.
    assert build_forest(samples[-1])[0] is build_forest(samples[-1])[0]


def test_each_host_keeps_its_own() -> None:
    one, two = _sample("host-a"), _sample("host-b")
    for _ in range(5):
        build_forest(replace(one, processes=tuple(list(one.processes))))
    latest_b = replace(two, processes=tuple(list(two.processes)))
    built = build_forest(latest_b)
    for _ in range(5):
        build_forest(replace(one, processes=tuple(list(one.processes))))
    assert build_forest(latest_b)[0] is built[0]
