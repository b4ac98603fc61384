"""The simulated collector's GPU fitness and reset commands: plans by the collector's own rule that the
client's checks accept, runs refused as the collector refuses them, and a reset that clears what it clears."""

from __future__ import annotations

import pytest

from gputui.agent.protocol import RESET_GO, RESET_REBOOT
from gputui.core.actions import ResetPlan, run_exit
from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import HostSnapshot
from gputui.core.verdict import Baselines, judge
from gputui.transports.sim import DRAIN_S, LAUNCHER_PID, ManualClock, SimLink

TARGET = "gpu-node-07"


def _link(**kwargs) -> tuple[SimLink, ManualClock]:  # type: ignore[no-untyped-def]
    clock = ManualClock()
    link = SimLink(TARGET, LinkOptions(memory_interval_s=0.01, **kwargs), clock=clock, gpu_fault=True)
    link.open()
    return link, clock


def _snap(link: SimLink) -> HostSnapshot:
    return HostSnapshot.from_dict(link.request({"cmd": "sample"}, 5.0)["snapshot"])


def _plan(link: SimLink, gpu: str) -> ResetPlan:
    answer = link.request({"cmd": "reset_plan", "gpus": [gpu]}, 5.0)
    assert answer["plan"]["boot_id"] == link.boot_id
    return ResetPlan.from_dict(TARGET, answer["plan"], [gpu])


def _kill_the_job(link: SimLink, clock: ManualClock) -> None:
    snapshot = _snap(link)
    targets = [{"pid": p.pid, "start_ticks": p.start_ticks} for p in snapshot.processes]
    link.request({"cmd": "kill", "boot_id": link.boot_id, "targets": targets, "signal": "KILL"}, 5.0)
    clock.advance(DRAIN_S + 1)


def test_the_faulted_gpu_reports_what_nvml_and_the_kernel_log_say() -> None:
    link, _clock = _link()
    gpus = {gpu.index: gpu for gpu in _snap(link).gpus}
    faulted = gpus[1].fitness
    assert faulted is not None
    assert (faulted.recovery_action, faulted.remap_pending, [x.xid for x in faulted.xids]) == (1, True, [94])
    assert all(
        g.fitness is not None and g.fitness.recovery_action == 0 and not g.fitness.xids
        for i, g in gpus.items()
        if i != 1
    )
    judged = judge(_snap(link), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.not_ready[0].startswith("GPU1 needs a reset (")


def test_without_the_fault_every_gpu_is_fit() -> None:
    link = SimLink(TARGET, LinkOptions(memory_interval_s=0.01), clock=ManualClock())
    link.open()
    assert all(g.fitness is not None and g.fitness.recovery_action == 0 for g in _snap(link).gpus)


def test_a_plan_with_stuck_holders_is_a_reboot_and_its_run_is_refused() -> None:
    link, _clock = _link()
    plan = _plan(link, "1")
    assert plan.verdict == RESET_REBOOT
    answer = link.request({"cmd": "reset_run", "gpus": ["1"], "steps": plan.step_argvs}, 5.0)
    assert answer["refused"] == "the plan's verdict is now reboot"
    assert run_exit(answer)[0] == 1


def test_after_the_kill_the_reset_runs_the_confirmed_steps_and_clears_the_fault() -> None:
    link, clock = _link()
    _kill_the_job(link, clock)
    assert _snap(link).process(LAUNCHER_PID) is None
    plan = _plan(link, "1")
    assert plan.verdict == RESET_GO
    uuid = plan.gpus[0]["uuid"]
    assert [s["argv"] for s in plan.steps] == [
        ["/usr/bin/nvidia-smi", "-pm", "0", "-i", uuid],
        ["/usr/bin/nvidia-smi", "-r", "-i", uuid],
        ["/usr/bin/nvidia-smi", "-pm", "1", "-i", uuid],
    ]
    changed = [*plan.step_argvs[:1], ["/usr/bin/nvidia-smi", "-r"], *plan.step_argvs[2:]]
    refused = link.request({"cmd": "reset_run", "gpus": ["1"], "steps": changed}, 5.0)
    assert refused["refused"] == "the plan changed since it was shown: nothing was run"
    assert _snap(link).gpus[1].fitness.recovery_action == 1  # type: ignore[union-attr]
    result = link.request({"cmd": "reset_run", "gpus": ["1"], "steps": plan.step_argvs}, 5.0)
    assert run_exit(result) == (0, "reset done, verified clean after")
    assert "was successfully reset" in result["steps"][1]["output"]
    clock.advance(0.5)
    judged = judge(_snap(link), Baselines())
    assert judged.verdict is not None
    assert judged.verdict.clean
    fitness = judged.gpus[1].fitness
    assert fitness is not None
    assert fitness.xids[0].cleared == "GPU reset since"


def test_read_only_and_bad_words_are_refused_as_the_collector_refuses_them() -> None:
    link, _clock = _link(read_only=True)
    assert _plan(link, "1").blockers[0]["code"] == "read_only"
    with pytest.raises(LinkError, match="read-only mode"):
        link.request({"cmd": "reset_run", "gpus": ["1"], "steps": []}, 5.0)
    with pytest.raises(LinkError, match="reset_plan failed"):
        link.request({"cmd": "reset_plan", "gpus": ["99"]}, 5.0)
