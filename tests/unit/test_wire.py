"""The collector's caps on what host content costs on the wire: counted in bytes of the JSON line."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gputui.agent.wire import (
    PROCESS_KEYS_LEFT_OUT_WHEN_EMPTY,
    WIRE_CMDLINE_BUDGET_BYTES,
    WIRE_CMDLINE_BYTES,
    WIRE_CMDLINE_TIGHT_BYTES,
    WireBudget,
    argv_json_bytes,
    wire_cmdline,
)
from gputui.core.model import Proc, fields


def wire_bytes(argv: list[str]) -> int:
    """What the collector's writer puts on the line for this argv."""
    text = json.dumps(argv, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "backslashreplace"))


@given(
    st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",))), max_size=6),
    st.integers(min_value=2, max_value=300),
)
def test_cut_argv_fits_and_its_cost_is_exact(argv: list[str], max_bytes: int) -> None:
    cut, truncated, cost = wire_cmdline(argv, max_bytes)
    assert cost == wire_bytes(cut)
    assert cost <= max_bytes
    assert truncated == (cut != argv)
    # A prefix: whole arguments, then at most one argument cut short.
    for i, arg in enumerate(cut):
        assert argv[i] == arg or (i == len(cut) - 1 and argv[i].startswith(arg))


def test_control_bytes_count_six_times() -> None:
    argv = ["\x01" * 10_000]
    cut, truncated, cost = wire_cmdline(argv, WIRE_CMDLINE_BYTES)
    assert truncated
    assert cost <= WIRE_CMDLINE_BYTES
    assert len(cut[0]) == (WIRE_CMDLINE_BYTES - 4) // 6  # ["…"]: 4 bytes of brackets and quotes


def test_undecodable_bytes_count_as_their_escapes() -> None:
    raw = b"\xff" * 5000
    argv = [raw.decode("utf-8", "backslashreplace")]  # how the collector reads argv from /proc
    cut, _truncated, cost = wire_cmdline(argv, 1000)
    assert cost == wire_bytes(cut) <= 1000


def test_budget_cuts_later_command_lines_tighter() -> None:
    budget = WireBudget()
    argv = ["y" * 4000]
    sent_full = 0
    for _ in range(WIRE_CMDLINE_BUDGET_BYTES // 4000 + 10):
        cut, truncated = budget.take(*wire_cmdline(argv, WIRE_CMDLINE_BYTES)[:2], wire_bytes(argv))
        if not truncated:
            sent_full += 1
        else:
            assert wire_bytes(cut) <= WIRE_CMDLINE_TIGHT_BYTES
    assert WIRE_CMDLINE_BUDGET_BYTES // 4010 <= sent_full <= WIRE_CMDLINE_BUDGET_BYTES // 4000 + 1


def test_the_model_carries_the_mark() -> None:
    proc = Proc.from_dict({"pid": 7, "cmdline": ["a"], "cmdline_truncated": True})
    assert proc.cmdline_truncated
    assert Proc.from_dict(proc.to_dict()) == proc
    assert not Proc.from_dict({"pid": 7, "cmdline_truncated": "yes"}).cmdline_truncated


@given(st.lists(st.text(), max_size=6))
def test_argv_bytes_are_counted_as_the_writer_writes_them(argv: list[str]) -> None:
    assert argv_json_bytes(argv) == wire_bytes(argv)


def test_an_entry_without_the_keys_left_out_reads_as_null_and_empty() -> None:
    assert set(PROCESS_KEYS_LEFT_OUT_WHEN_EMPTY) <= set(fields(Proc))
    bare = Proc.from_dict({"pid": 42, "ppid": 1, "state": "S", "name": "sleep", "cmdline": ["sleep", "9"]})
    assert (bare.live_threads, bare.cpu_pct, bare.profiler) == (None, None, None)
    assert bare.waits == ()
    assert (bare.gpu_sm_pct, bare.gpu_mem_bw_pct, bare.gpu_enc_pct, bare.gpu_dec_pct) == ({}, {}, {}, {})
