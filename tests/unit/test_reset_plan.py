"""The reset rule (``agent.reset.plan.build_plan``) and its one wording (``core.actions.reset_plan``), on
plain facts."""

from __future__ import annotations

from typing import Any

import pytest

from gputui.agent.reset.plan import build_plan
from gputui.core.actions import PlanShapeError, ResetPlan, format_plan, run_exit

PREFIX = "/dev/nvidia"
SMI = "/usr/bin/nvidia-smi"
SYSTEMCTL = "/usr/bin/systemctl"


def gpu(index: int, **modes: Any) -> dict[str, Any]:
    facts = {"index": index, "uuid": f"GPU-{index}", "minor": index, "error": None, "persistence": False}
    facts.update(mig_current=False, mig_pending=False, display_active=False)
    facts.update(modes)
    return facts


def holder(pid: int, kind: str, devices: list[str], **facts: Any) -> dict[str, Any]:
    base = {"pid": pid, "name": "x", "state": "S", "user": "root", "cmdline": ["x"], "devices": devices}
    base.update(kind=kind, unit=facts.pop("unit", None), **facts)
    return base


def plan(gpus: list[dict[str, Any]] | None, holders: list[dict[str, Any]] = (), **kwargs: Any) -> dict:  # type: ignore[assignment]
    options: dict[str, Any] = {"unreadable": 0, "nvswitch": False, "smi": SMI, "systemctl": SYSTEMCTL}
    options.update(kwargs)
    words = options.pop("words", None)
    return build_plan(
        words,
        gpus,
        list(holders),
        options["unreadable"],
        options["nvswitch"],
        options["smi"],
        options["systemctl"],
        PREFIX,
        options.get("read_only", False),
    )


def test_services_are_stopped_in_order_and_started_again_in_reverse() -> None:
    holders = [
        holder(10, "service", ["/dev/nvidiactl"], unit="nvidia-persistenced.service"),
        holder(11, "service", ["/dev/nvidia0"], unit="nvidia-fabricmanager.service"),
        holder(12, "service", ["/dev/nvidia0"], unit="dcgm-exporter.service"),
        holder(13, "service", ["/dev/nvidia0"], unit="nvidia-dcgm.service"),
    ]
    result = plan([gpu(0, persistence=True)], holders)
    assert result["verdict"] == "go"
    argvs = [step["argv"] for step in result["steps"]]
    assert argvs == [
        [SYSTEMCTL, "stop", "dcgm-exporter.service"],
        [SYSTEMCTL, "stop", "nvidia-dcgm.service"],
        [SYSTEMCTL, "stop", "nvidia-fabricmanager.service"],
        [SYSTEMCTL, "stop", "nvidia-persistenced.service"],
        [SMI, "-pm", "0", "-i", "GPU-0"],
        [SMI, "-r", "-i", "GPU-0"],
        [SMI, "-pm", "1", "-i", "GPU-0"],
        [SYSTEMCTL, "start", "nvidia-persistenced.service"],
        [SYSTEMCTL, "start", "nvidia-fabricmanager.service"],
        [SYSTEMCTL, "start", "nvidia-dcgm.service"],
        [SYSTEMCTL, "start", "dcgm-exporter.service"],
    ]


def test_a_service_without_systemctl_blocks() -> None:
    result = plan(
        [gpu(0)], [holder(10, "service", ["/dev/nvidia0"], unit="nv-hostengine.service")], systemctl=None
    )
    assert result["verdict"] == "blocked"
    lines = format_plan(ResetPlan.from_dict("h", result))
    assert any("systemctl is not on PATH" in line for line in lines)


@pytest.mark.parametrize(
    ("facts", "verdict"),
    [
        ({"holders": [holder(9, "stuck", ["/dev/nvidia0"], state="D")]}, "reboot"),
        ({"holders": [holder(9, "process", ["/dev/nvidia-uvm"])]}, "blocked"),
        ({"holders": [holder(9, "gputui", ["/dev/nvidiactl"])]}, "blocked"),
        ({"holders": [holder(9, "own", ["/dev/nvidiactl"])]}, "go"),
        ({"holders": [holder(9, "process", ["/dev/nvidia1"])]}, "go"),
        ({"unreadable": 3}, "unknown"),
        ({"gpus": None}, "unknown"),
        ({"gpus": [gpu(0, error="GPU is lost")]}, "reboot"),
        ({"gpus": [gpu(0, persistence=None)]}, "unknown"),
        ({"gpus": [gpu(0, display_active=True)]}, "reboot"),
        ({"gpus": [gpu(0, mig_current=True)]}, "blocked"),
        ({"smi": None}, "blocked"),
        ({"read_only": True}, "blocked"),
        ({"nvswitch": True, "gpus": [gpu(0), gpu(1)], "words": ["0"]}, "blocked"),
        ({"nvswitch": True, "gpus": [gpu(0), gpu(1)]}, "go"),
    ],
)
def test_verdicts(facts: dict[str, Any], verdict: str) -> None:
    gpus = facts.pop("gpus", [gpu(0), gpu(1)])
    holders = facts.pop("holders", [])
    words = facts.pop("words", ["0"] if gpus and len(gpus) > 1 and not facts.get("nvswitch") else None)
    result = plan(gpus, holders, words=words, **facts)
    assert result["verdict"] == verdict, result["blockers"]
    checked = ResetPlan.from_dict("h", result)
    expected = {"go": 0, "blocked": 1, "reboot": 1, "unknown": 2}[verdict]
    assert checked.exit_status == expected
    if verdict == "reboot":
        assert any(line.startswith("a reset cannot work here: reboot (") for line in format_plan(checked))


def test_nvswitch_resets_the_whole_baseboard_once() -> None:
    result = plan([gpu(0), gpu(1)], nvswitch=True)
    assert [step["argv"] for step in result["steps"] if step["kind"] == "reset"] == [[SMI, "-r"]]


def test_a_pending_mig_change_is_a_note() -> None:
    result = plan([gpu(0, mig_pending=True)])
    assert result["verdict"] == "go"
    assert result["notes"] == ["GPU 0: the reset turns MIG mode on (pending)"]


def test_a_gpu_word_that_names_none_is_refused() -> None:
    with pytest.raises(ValueError, match="no GPU 'GPU-9' on this host"):
        plan([gpu(0)], words=["GPU-9"])


def test_hostile_holder_text_is_made_visible() -> None:
    evil = holder(
        9, "process", ["/dev/nvidia0"], cmdline=["\x1b]0;t\x07[bold]x", "\u202e;rm -rf ~"], user="\x1b[2J"
    )
    lines = format_plan(ResetPlan.from_dict("h", plan([gpu(0)], [evil])))
    text = "\n".join(lines)
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert "\x07" not in text


def test_a_malformed_answer_is_one_error() -> None:
    with pytest.raises(PlanShapeError):
        ResetPlan.from_dict("h", {"verdict": "go"})
    with pytest.raises(PlanShapeError):
        ResetPlan.from_dict("h", ["x"])


@pytest.mark.parametrize(
    ("result", "status"),
    [
        ({"steps": [{"result": "ok", "argv": ["a"]}], "verified": True}, 0),
        ({"steps": [{"result": "ok", "argv": ["a"]}], "verified": False}, 1),
        ({"steps": [{"result": "timeout", "argv": ["a"]}], "verified": True}, 1),
        ({"steps": [{"result": "ok", "argv": ["a"]}], "verified": None}, 2),
        ({"refused": "the plan changed"}, 1),
        ({}, 2),
    ],
)
def test_run_exit(result: dict[str, Any], status: int) -> None:
    assert run_exit(result)[0] == status


def test_after_a_failed_step_only_the_restoring_ones_run() -> None:
    from gputui.agent.reset.run import run_steps

    def step(kind: str, argv: list[str], unit: str | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
        return {"kind": kind, "argv": argv, "timeout_s": timeout_s, "uuid": None, "unit": unit}

    steps = [
        step("stop_service", ["true"], unit="a.service"),
        step("stop_service", ["false"], unit="b.service"),
        step("reset", ["true"]),
        step("persistence_on", ["true"]),
        step("start_service", ["true"], unit="b.service"),
        step("start_service", ["true"], unit="a.service"),
    ]
    assert [o["result"] for o in run_steps(steps)] == ["ok", "failed", "not_run", "ok", "not_run", "ok"]
    slow = run_steps([step("reset", ["sleep", "30"], timeout_s=0.3), step("persistence_on", ["true"])])
    assert [o["result"] for o in slow] == ["timeout", "ok"]
    assert slow[0]["elapsed_s"] < 10


@pytest.mark.parametrize(
    ("cgroup", "unit"),
    [
        ("/system.slice/nvidia-persistenced.service", "nvidia-persistenced.service"),
        ("/system.slice/dcgm.slice/nv-hostengine.service/payload", "nv-hostengine.service"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/x.service", None),
        ("/system.slice/evil;rm -rf ~.service", None),
        ("/system.slice/docker-abc.scope", None),
        (None, None),
    ],
)
def test_a_service_is_a_system_unit_with_a_plain_name(cgroup: str | None, unit: str | None) -> None:
    from gputui.agent.reset.plan import _unit_of

    assert _unit_of(cgroup) == unit
