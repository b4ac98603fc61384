"""A stream's processes read once: an entry equal to the one its pid had in the sample before is that same
``Proc``; anything else is read again, and a bad entry fails as ``Proc.from_dict`` fails."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.core.model import HostSnapshot, Proc, ProcMemo


def _entry(pid: int, **changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pid": pid,
        "ppid": 1,
        "user": "alice",
        "uid": 1000,
        "state": "S",
        "name": "python3",
        "cmdline": ["python3", "-m", "loader", f"--rank={pid}"],
        "start_ticks": 1000 + pid,
        "rss_kib": 20480,
        "gpu_memory_mib": {},
        "owner": {"user": "alice", "unit": "job.service"},
    }
    entry.update(changes)
    return entry


def test_an_unchanged_entry_is_the_same_proc_and_a_changed_one_is_read_again() -> None:
    memo = ProcMemo()
    first = memo.decode([_entry(10), _entry(11), _entry(12)])
    # What the wire gives again: new objects with the same content (a JSON line decoded afresh).
    again = memo.decode(json.loads(json.dumps([_entry(10), _entry(11, state="D"), _entry(12)])))
    assert again[0] is first[0]
    assert again[2] is first[2]
    assert again[1] is not first[1]
    assert again[1].state == "D"
    assert again == [Proc.from_dict(e) for e in [_entry(10), _entry(11, state="D"), _entry(12)]]
    # Only the sample before counts: a pid gone for a sample is read afresh when it comes back.
    memo.decode([_entry(11, state="D")])
    assert memo.decode([_entry(10)])[0] is not first[0]


def test_a_reused_pid_with_another_process_is_another_proc() -> None:
    memo = ProcMemo()
    old = memo.decode([_entry(10)])[0]
    new = memo.decode([_entry(10, start_ticks=99999, name="bash")])[0]
    assert new is not old
    assert (new.name, new.start_ticks) == ("bash", 99999)


@pytest.mark.parametrize(
    "entry",
    [None, [], "x", {"pid": "ten"}, {"pid": [1]}, {}, {"pid": True, "gpu_memory_mib": {"x": 1}}],
)
def test_a_bad_entry_fails_as_reading_it_alone_fails(entry: Any) -> None:
    memo = ProcMemo()
    memo.decode([_entry(10)])
    try:
        Proc.from_dict(entry)
    except Exception as alone:  # noqa: BLE001 - whatever it raises, the memo raises the same
        with pytest.raises(type(alone)):
            memo.decode([_entry(10), entry])
    else:
        assert memo.decode([entry])[0] == Proc.from_dict(entry)


FIELDS = st.sampled_from(["state", "rss_kib", "name", "cmdline", "cpu_pct", "owner", "gpu_memory_mib"])
VALUES = {
    "state": st.sampled_from(["S", "D", "Z", "R"]),
    "rss_kib": st.integers(0, 10**7),
    "name": st.text(max_size=6),
    "cmdline": st.lists(st.text(max_size=5), max_size=3),
    "cpu_pct": st.floats(0, 800),
    "owner": st.fixed_dictionaries({"user": st.sampled_from(["alice", "bob"])}),
    "gpu_memory_mib": st.dictionaries(st.sampled_from(["0", "3"]), st.integers(0, 80000), max_size=2),
}


@settings(max_examples=150, deadline=None)
@given(data=st.data(), samples=st.integers(2, 6))
def test_a_stream_read_with_the_memo_reads_as_without_it(data: st.DataObject, samples: int) -> None:
    memo = ProcMemo()
    entries = [_entry(pid) for pid in range(20, 26)]
    for _ in range(samples):
        entries = copy.deepcopy(entries)
        for entry in entries:
            if data.draw(st.booleans()):
                name = data.draw(FIELDS)
                entry[name] = data.draw(VALUES[name])
        wire = json.loads(json.dumps(entries))
        with_memo = HostSnapshot.from_dict({"target": "h", "processes": wire}, memo=memo).processes
        without = HostSnapshot.from_dict({"target": "h", "processes": wire}).processes
        assert with_memo == without
