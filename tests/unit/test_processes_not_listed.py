"""``processes_not_listed`` counts what was left out of a list, and is null where there was no list."""

from __future__ import annotations

from gputui.commands.output.snapshot_document import PROCESSES_NOT_LISTED, host_entry
from gputui.core.model import HostSnapshot, Proc


def test_an_unreachable_host_has_no_count() -> None:
    down = HostSnapshot(target="gpu-9", error="gpu-9: connection refused")
    assert host_entry(down)[PROCESSES_NOT_LISTED] is None


def test_a_host_with_a_list_counts_what_it_left_out() -> None:
    up = HostSnapshot(target="gpu-1", processes=(Proc(pid=1, name="init", state="S"),))
    assert host_entry(up)[PROCESSES_NOT_LISTED] == {"count": 1, "states": {"S": 1}}
