"""Stuck in the driver: real kernel stacks parsed into a place, the collector's bookkeeping of threads that
run in the kernel without returning (over a /proc of files), what a finding says of them, and when the GPU
is NOT READY with the reboot action."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.agent.proc.procfs import ProcStat
from gputui.agent.proc.waits import ThreadWaits, exiting, parse_stack, parse_wchan, place_of, sigkill_pending
from gputui.core.model import FindingFacts, Gpu, GpuProcess, HostSnapshot, Proc, ThreadWait, replace
from gputui.core.verdict import Baselines, judge, place_text, threads_text, word_finding
from gputui.core.verdict.stuck import STUCK_WINDOW_S

STACKS = Path(__file__).resolve().parents[1] / "data" / "kernel_stacks.txt"
NOW_S = 1_800_000_000.0


def stack_samples() -> dict[str, tuple[bytes, tuple[str, str | None]]]:
    """name -> (the stack as printed, the expected place), from ``tests/data/kernel_stacks.txt``."""
    samples: dict[str, tuple[list[str], tuple[str, str | None]]] = {}
    name = ""
    for line in STACKS.read_text().splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            samples[name] = ([], ("", None))
        elif line.startswith("# expect: "):
            symbol, module = line[len("# expect: ") :].split()
            samples[name] = (samples[name][0], (symbol, None if module == "-" else module))
        elif name and line.startswith("[<"):
            samples[name][0].append(line)
    return {k: ("\n".join(lines).encode() + b"\n", place) for k, (lines, place) in samples.items()}


@pytest.mark.parametrize("name", sorted(stack_samples()))
def test_real_stacks_name_the_place(name: str) -> None:
    data, expected = stack_samples()[name]
    frames = parse_stack(data)
    assert len(frames) == data.count(b"\n")  # every published line is a frame
    assert place_of(frames) == expected


def test_what_is_not_a_frame_is_skipped_and_a_wait_channel_of_0_is_unknown() -> None:
    data = (
        b"[<0>] 0xffffffffffffffff\n"  # an old kernel's end marker: an address, not a name
        b"[<0>] evil[bold]+0x1/0x2 [nvidia]\n"
        b"[<0>] os_acquire_mutex+0x1/0x2 [nvidia module]\n"
        b"garbage\n"
        b"[<0>] __schedule+0x1/0x2\n"
        b"[<0>] schedule+0x1/0x2\n"
        b"[<0>] rwsem_down_read_slowpath+0x1/0x2\n"
    )
    assert parse_stack(data) == [
        ("__schedule", None),
        ("schedule", None),
        ("rwsem_down_read_slowpath", None),
    ]
    assert place_of(parse_stack(data)) == ("rwsem_down_read_slowpath", None)
    assert place_of([]) is None
    assert parse_wchan(b"0") is None  # runs, or the kernel will not say
    assert parse_wchan(None) is None
    assert parse_wchan(b"\x1b[2Jx") is None
    assert parse_wchan(b"kernel_clone") == "kernel_clone"


def test_killed_is_sigkill_pending_or_exiting() -> None:
    status = b"Name:\tpython3\nSigQ:\t0/1\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n"
    assert sigkill_pending(status) is True
    assert sigkill_pending(status.replace(b"0100", b"0000")) is False
    assert sigkill_pending(b"Name:\tx\n") is None  # no masks: not known
    assert sigkill_pending(None) is None
    line = b"7 (a b) R 1 1 1 0 -1 4194372 0 0 0 0 5 9 0 0 20 0 1 0 100 0 10 0"
    assert exiting(line) is True  # 0x400044: PF_EXITING among the flags
    assert exiting(line.replace(b"4194372", b"4194368")) is False
    assert exiting(b"garbage") is None


def _stat_line(tid: int, state: str, user: int = 0, system: int = 0, flags: int = 0) -> str:
    return f"{tid} (worker) {state} 1 1 1 0 -1 {flags} 0 0 0 0 {user} {system} 0 0 20 0 2 0 500 0 10 0\n"


def _fake_proc(root: Path, pid: int, threads: dict[int, str], stack: bytes | None, wchan: str = "0") -> None:
    for tid, state in threads.items():
        task = root / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "stat").write_text(_stat_line(tid, state))
        (task / "wchan").write_text(wchan)
        (task / "status").write_text("SigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n")
        if stack is not None:
            (task / "stack").write_bytes(stack)


def _process(pid: int, state: str, user: int, total: int) -> ProcStat:
    return ProcStat(pid, "worker", state, 1, pid, pid, 500, 10, total, user)


def test_a_thread_running_in_the_kernel_is_stuck_once_its_user_time_stands_still(tmp_path: Path) -> None:
    spin = stack_samples()["unsloth-3331"][0]
    _fake_proc(tmp_path, 100, {100: "S", 101: "R"}, spin)
    waits = ThreadWaits(str(tmp_path))
    assert waits.waits(_process(100, "S", 50, 100), NOW_S, in_job=True) is None  # a first look: no history
    (found,) = waits.waits(_process(100, "S", 50, 180), NOW_S + 2, in_job=True) or []
    assert found == {
        "tid": 101,
        "state": "R",
        "symbol": "uvm_spin_loop",
        "module": "nvidia_uvm",
        "stack": True,
        "since": NOW_S,
        "killed": True,
    }
    assert waits.waits(_process(100, "S", 50, 260), NOW_S + 4, in_job=False) is None  # not a job's
    assert waits.waits(_process(100, "S", 50, 260), NOW_S + 6, in_job=True) is None  # no system time: idle
    assert waits.waits(_process(100, "S", 51, 340), NOW_S + 8, in_job=True) is None  # back in its program
    assert waits.waits(_process(100, "S", 51, 420), NOW_S + 10, in_job=True) == [dict(found, since=NOW_S + 8)]
    waits.forget_except([])
    assert waits.waits(_process(100, "S", 51, 500), NOW_S + 12, in_job=True) is None


def test_a_d_thread_without_a_stack_is_named_by_its_wait_channel_since_first_seen(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 200, {200: "D", 201: "S", 202: "D"}, None, wchan="os_acquire_mutex")
    waits = ThreadWaits(str(tmp_path))
    first = waits.waits(_process(200, "D", 0, 0), NOW_S, in_job=False) or []
    assert [(w["tid"], w["symbol"], w["module"], w["stack"]) for w in first] == [
        (200, "os_acquire_mutex", None, False),
        (202, "os_acquire_mutex", None, False),
    ]
    later = waits.waits(_process(200, "D", 0, 0), NOW_S + 30, in_job=False) or []
    assert [w["since"] for w in later] == [NOW_S, NOW_S]


def test_bad_waits_from_a_collector_are_dropped_or_unknown() -> None:
    assert ThreadWait.from_dict({"tid": 5, "state": "Z"}) is None
    assert ThreadWait.from_dict({"tid": -1, "state": "D"}) is None
    wait = ThreadWait.from_dict(
        {"tid": 5, "state": "D", "symbol": "[bold]x[/]", "module": "a" * 500, "since": "nan", "killed": "yes"}
    )
    assert wait == ThreadWait(tid=5, state="D")
    assert place_text(wait) == "where unknown (wait channel unreadable)"
    assert place_text(ThreadWait(tid=5, state="R")) == (
        "where unknown (no wait channel while it runs; its kernel stack needs root)"
    )
    # A wait channel names no module: only a stack puts a thread in NVIDIA's.
    assert not ThreadWait(tid=5, state="D", symbol="uvm_spin_loop", module="nvidia_uvm").in_nvidia


def _spin(since: float, killed: bool | None = None, stack: bool = True) -> ThreadWait:
    module = "nvidia_uvm" if stack else None
    return ThreadWait(101, "R", "uvm_spin_loop", module, stack, since, killed)


def _host(worker: Proc) -> HostSnapshot:
    gpu = Gpu(index=0, memory_used_mib=49155, processes=(GpuProcess(pid=100, used_mib=49152),))
    launcher = Proc(pid=10, ppid=1, state="S", name="launcher", start_ticks=4, state_since=NOW_S - 9000)
    return HostSnapshot(target="h", time=NOW_S, gpus=(gpu,), processes=(launcher, worker))


def _worker(*waits: ThreadWait, state: str = "R") -> Proc:
    return Proc(
        pid=100,
        ppid=10,
        state=state,
        name="VLLM::EngineCore",
        start_ticks=5,
        gpu_memory_mib={0: 49152},
        state_since=NOW_S - 9000,
        waits=waits,
    )


def test_a_worker_spinning_in_the_driver_is_named_and_a_reboot_is_the_likely_end() -> None:
    judged = judge(_host(_worker(_spin(NOW_S - 360))), Baselines())
    (finding,) = [f for f in judged.findings if f.kind == "stuck_thread"]
    assert finding.detail == (
        "pid 100 (VLLM::EngineCore) runs in the kernel without returning to its program: thread 101 (R) in "
        "uvm_spin_loop (nvidia_uvm), holding 49152 MiB on GPU0; in an NVIDIA kernel function for over 5 "
        "minutes: a reboot is the likely end"
    )
    assert (
        finding.action
        == "kill 100; if it is still there, reboot the host: a GPU reset does not recover from this"
    )
    assert finding.since == NOW_S - 360  # every view says "for 6 min" beside it
    assert finding == word_finding("stuck_thread", "h", finding.facts or FindingFacts())  # the one table
    assert judged.verdict is not None
    assert not judged.verdict.not_ready


def test_killed_and_still_in_the_driver_is_not_ready_with_the_reboot_action() -> None:
    judged = judge(_host(_worker(_spin(NOW_S - 360, killed=True))), Baselines())
    verdict = judged.verdict
    assert verdict is not None
    assert verdict.level == "NOT READY"
    assert verdict.not_ready == (
        "GPU0 needs a reboot of the host: pid 100 (VLLM::EngineCore) was killed and its thread 101 is still "
        "in uvm_spin_loop (nvidia_uvm) after 6 min",
    )
    (finding,) = [f for f in judged.findings if f.kind == "stuck_thread"]
    assert (
        finding.action
        == "it was killed and is still there: reboot the host: a GPU reset does not recover from this"
    )


def test_no_reboot_before_the_window_or_without_the_module() -> None:
    early = judge(_host(_worker(_spin(NOW_S - STUCK_WINDOW_S + 10, killed=True))), Baselines())
    assert not [f for f in early.findings if f.kind == "stuck_thread"]  # not stuck long enough to say
    assert early.verdict is not None
    assert not early.verdict.not_ready
    unknown = judge(_host(_worker(_spin(NOW_S - 3600, killed=True, stack=False))), Baselines())
    (finding,) = [f for f in unknown.findings if f.kind == "stuck_thread"]
    assert "thread 101 (R) in uvm_spin_loop," in finding.detail  # its wait channel: no module said
    assert "reboot" not in finding.detail
    assert unknown.verdict is not None
    assert not unknown.verdict.not_ready


def test_a_d_state_finding_says_where_and_its_reason_is_its_sentence() -> None:
    waits = (
        ThreadWait(100, "D", "os_acquire_mutex", "nvidia", True, NOW_S - 900, True),
        ThreadWait(102, "D", "os_acquire_mutex", "nvidia", True, NOW_S - 900, True),
    )
    worker = replace(_worker(*waits, state="D"), state_since=NOW_S - 900)
    judged = judge(_host(worker), Baselines())
    (finding,) = [f for f in judged.findings if f.kind == "uninterruptible"]
    assert (
        "; threads 100, 102 (D) in os_acquire_mutex (nvidia); in an NVIDIA kernel function" in finding.detail
    )
    assert finding.action.startswith("it was killed and is still there: reboot the host")
    assert finding == word_finding("uninterruptible", "h", finding.facts or FindingFacts())
    verdict = judged.verdict
    assert verdict is not None
    assert verdict.not_ready[0].startswith("GPU0 needs a reboot of the host: pid 100")
    assert threads_text(waits) == "threads 100, 102 (D) in os_acquire_mutex (nvidia)"
