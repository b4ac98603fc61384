"""A probe asked for while a kill is still under way on the host: it waits for the kill up to its deadline,
then runs, and says so (the report's ``kill_pending``, the GPUs fact's line). The collector is started as
SSH starts it, on the fake NVML and the fake ``libcuda.so.1``; the kill's target is a real process that
ignores SIGTERM."""

from __future__ import annotations

import time

from gputui.core.model import ProbeReport
from gputui.core.verdict.probing import probe_line
from tests.fakecuda.plugin import FakeCuda
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import TERM_IGNORER, agent_process, script, start_ticks


def test_a_probe_that_waited_its_deadline_for_a_kill_says_the_kill_was_still_under_way(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda
) -> None:
    with (
        script(TERM_IGNORER, ["ignorer"]) as ignorer,
        agent_process(env=fake_cuda.env(fake_nvml.env())) as agent,
    ):
        pid = ignorer.pids["ignorer"]
        kill = {
            "cmd": "kill",
            "boot_id": agent.hello["boot_id"],
            "signal": "TERM",
            "tree": False,
            "escalate_s": 4.0,
            "detach": True,
            "targets": [{"pid": pid, "start_ticks": start_ticks(pid)}],
        }
        op = agent.result(kill)["op"]
        started = time.monotonic()
        answer = agent.result(
            {"cmd": "probe", "gpus": None, "deadline_s": 1.0, "buffer_mib": 8, "force": False}
        )
        assert time.monotonic() - started >= 1.0  # it waited for the kill, its deadline long
        assert answer["kill_pending"] is True
        report = ProbeReport.from_dict(answer)
        assert report is not None
        assert [p.result for p in report.gpus] == ["ok"] * 8
        line = probe_line(report)
        assert line is not None
        assert line.startswith("8 of 8 took work (context + 8 MiB write/read, slowest ")
        assert line.endswith("; probed while a kill was still under way")
        # Once the kill is over, a probe says nothing of it.
        agent.result({"cmd": "kill_wait", "op": op, "since": 0, "timeout_s": 20.0}, 30.0)
        answer = agent.result(
            {"cmd": "probe", "gpus": None, "deadline_s": 1.0, "buffer_mib": 8, "force": False}
        )
        assert answer["kill_pending"] is False
        assert "kill" not in (probe_line(ProbeReport.from_dict(answer)) or "")
