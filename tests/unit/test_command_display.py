"""One way to show a command: the TUI's tables, ``gputui snapshot`` and ``gputui kill`` read it alike."""

from __future__ import annotations

from gputui.commands.kill import format_plan
from gputui.commands.snapshot import format_table
from gputui.core.actions import plan_kill
from gputui.core.model import Gpu, GpuProcess, HostSnapshot, Proc
from gputui.core.text import command_display
from gputui.ui.widgets import fmt

INTERPRETER = "/root/.pyenv/versions/3.11.7/bin/python3"
ARGV = (INTERPRETER, "-u", "-m", "sglang.srt.managers.scheduler", "--tp-rank", "3")
SHOWN = "python3 -m sglang.srt.managers.scheduler --tp-rank 3"


def _snapshot() -> HostSnapshot:
    worker = Proc(
        pid=4243,
        ppid=1,
        user="root",
        state="S",
        name="python3",
        cmdline=ARGV,
        start_ticks=7,
        gpu_memory_mib={0: 41236},
    )
    gpu = Gpu(index=0, memory_used_mib=41239, memory_total_mib=49152, processes=(GpuProcess(4243, 41236),))
    return HostSnapshot(target="node7", gpus=(gpu,), processes=(worker,))


def test_the_widgets_use_the_one_function() -> None:
    assert fmt.command_text is command_display
    assert command_display(ARGV, "python3", 200) == SHOWN


def test_snapshot_table_shows_the_program_name_not_the_interpreter_path() -> None:
    text = "\n".join(format_table(_snapshot()))
    assert SHOWN in text
    assert "versions/3.11.7" not in text


def test_kill_table_shows_the_program_name_not_the_interpreter_path() -> None:
    plan = plan_kill(_snapshot(), [4243])
    text = "\n".join(format_plan(plan))
    assert SHOWN in text
    assert "versions/3.11.7" not in text


def test_a_process_without_a_command_line_reads_as_ps_shows_it() -> None:
    assert command_display((), "sglang::scheduler_TP1", 80) == "[sglang::scheduler_TP1]"


def test_a_cut_command_line_always_ends_with_the_ellipsis() -> None:
    assert command_display(("python3", "-m", "x"), None, 80, truncated=True).endswith("…")
