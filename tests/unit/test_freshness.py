"""The newest-per-host inbox and the stale rule shared by the links and the TUI."""

from __future__ import annotations

import threading

from gputui.transports.freshness import (
    CONNECTING,
    ERROR,
    LIVE,
    STALE,
    LatestInbox,
    link_state,
    stale_after_s,
)


def test_the_inbox_keeps_the_newest_value_per_key_and_wakes_the_reader_once_per_batch() -> None:
    inbox: LatestInbox[str, int] = LatestInbox()
    assert inbox.put("a", 1) is True  # empty before: wake the reader
    assert inbox.put("b", 1) is False  # a wake-up is on its way
    assert inbox.put("a", 2) is False
    assert len(inbox) == 2
    assert inbox.take() == {"a": 2, "b": 1}
    assert inbox.take() == {}
    assert inbox.put("b", 3) is True


def test_merge_keeps_a_property_of_the_value_it_replaces() -> None:
    inbox: LatestInbox[str, tuple[int, bool]] = LatestInbox(merge=lambda old, new: (new[0], old[1] or new[1]))
    inbox.put("a", (1, True))
    inbox.put("a", (2, False))
    assert inbox.take() == {"a": (2, True)}


def test_many_producers_lose_nothing_newest_and_wake_once_per_empty_inbox() -> None:
    inbox: LatestInbox[int, int] = LatestInbox()
    wakes: list[int] = []
    start = threading.Barrier(8)

    def produce(key: int) -> None:
        start.wait()
        for value in range(1000):
            if inbox.put(key, value):
                wakes.append(key)

    threads = [threading.Thread(target=produce, args=(key,)) for key in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert inbox.take() == {key: 999 for key in range(8)}
    assert len(wakes) == 1  # nobody took in between: one wake-up for all of it


def test_stale_after_a_few_missed_intervals_never_below_the_floor() -> None:
    assert stale_after_s(1.0) == 3.0
    assert stale_after_s(0.05) == 1.0
    assert stale_after_s(0.05, floor_s=3.0) == 3.0
    assert stale_after_s(10.0, floor_s=3.0) == 30.0


def test_link_state() -> None:
    assert link_state(100.0, None, None, 3.0) == CONNECTING
    assert link_state(100.0, 99.0, None, 3.0) == LIVE
    assert link_state(100.0, 96.0, None, 3.0) == STALE
    assert link_state(100.0, None, 98.0, 3.0) == ERROR
    assert link_state(100.0, 99.0, 98.0, 3.0) == LIVE  # data came after the error
    assert link_state(100.0, 98.0, 99.0, 3.0) == ERROR
