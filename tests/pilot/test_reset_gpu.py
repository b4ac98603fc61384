"""The TUI's reset key: the host's plan in a modal, a confirmed plan sent as shown and audited, read-only
mode without the key. The plan comes from the real rule (``agent.reset.plan.build_plan``) over facts the test
sets; the run's outcomes are the link's (no GPU here is ever reset)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gputui.agent.reset.plan import build_plan
from gputui.ui.screens.confirm_reset import ConfirmResetScreen
from gputui.ui.widgets.gpu_panel import GpuPanel

from .conftest import CountingSimLink, SimFactory, wait_for

WIDE = (120, 40)
SMI = "/usr/bin/nvidia-smi"
HOLDER = {
    "pid": 4242,
    "name": "python",
    "state": "S",
    "user": "alice",
    "cmdline": ["python", "serve.py", "[bold]x\x1b[2J"],
    "devices": ["/dev/nvidia0"],
    "kind": "process",
    "unit": None,
}


class ResetSimLink(CountingSimLink):
    """A simulated host that answers the reset commands: ``holders`` hold its devices."""

    holders: list[dict[str, Any]] = []

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        name = command.get("cmd")
        if name not in ("reset_plan", "reset_run"):
            return super().request(command, timeout_s)
        self.commands.append(dict(command))
        gpus = [
            {"index": i, "uuid": f"GPU-{i}", "minor": i, "error": None, "persistence": True}
            | {"mig_current": False, "mig_pending": False, "display_active": False}
            for i in range(2)
        ]
        plan = build_plan(command.get("gpus"), gpus, list(self.holders), 0, False, SMI, None)
        plan["boot_id"] = "boot-1"
        if name == "reset_plan":
            return {"plan": plan}
        steps = [dict(step, result="ok", rc=0, output="", elapsed_s=0.1) for step in plan["steps"]]
        return {
            "plan": plan,
            "steps": steps,
            "verified": True,
            "after": plan,
            "stepped_aside": "stepped aside",
        }


class ResetFactory(SimFactory):
    def __call__(self, target: str) -> Any:
        link = ResetSimLink(target, self.options, clock=self.clock)
        self.links[target] = link
        return link


async def _open_modal(app: Any, pilot: Any) -> ConfirmResetScreen:
    await wait_for(pilot, lambda: len(app.query_one(GpuPanel).gpus) > 0, "GPU rows")
    await pilot.press("g")
    await pilot.press("down")
    await pilot.press("R")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmResetScreen), "the reset confirmation")
    return app.screen


async def test_a_blocked_plan_is_shown_and_cannot_be_confirmed(make_app) -> None:
    ResetSimLink.holders = [dict(HOLDER, devices=["/dev/nvidiactl"])]
    app = make_app(factory_type=ResetFactory)
    async with app.run_test(size=WIDE) as pilot:
        screen = await _open_modal(app, pilot)
        link = app.factory.links["gpu-node-07"]
        assert link.commands[-1] == {"cmd": "reset_plan", "gpus": ["1"]}
        assert screen.plan.verdict == "blocked"
        text = "\n".join(str(w.render()) for w in screen.query("Static"))
        assert "kill it first (gputui kill gpu-node-07 4242)" in text
        assert "\x1b" not in text
        await pilot.press("y")
        await pilot.pause()
        assert app.screen is screen  # nothing to confirm
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmResetScreen)
        assert not [c for c in link.commands if c["cmd"] == "reset_run"]


async def test_a_confirmed_plan_is_sent_as_shown_and_audited(make_app, tmp_path: Path) -> None:
    ResetSimLink.holders = []
    app = make_app(factory_type=ResetFactory)
    async with app.run_test(size=WIDE) as pilot:
        screen = await _open_modal(app, pilot)
        assert screen.plan.verdict == "go"
        shown = screen.plan.step_argvs
        await pilot.press("y")
        link = app.factory.links["gpu-node-07"]
        await wait_for(pilot, lambda: any(c["cmd"] == "reset_run" for c in link.commands), "the run")
        run = [c for c in link.commands if c["cmd"] == "reset_run"][0]
        assert (
            run["steps"]
            == shown
            == [
                [SMI, "-pm", "0", "-i", "GPU-1"],
                [SMI, "-r", "-i", "GPU-1"],
                [SMI, "-pm", "1", "-i", "GPU-1"],
            ]
        )
        audit = tmp_path / "audit" / "audit.jsonl"
        await wait_for(
            pilot, lambda: audit.exists() and len(audit.read_text().splitlines()) == 6, "audit lines"
        )
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [line["stage"] for line in lines] == ["intent"] * 3 + ["reset"] * 3
    assert lines[1]["command"] == [SMI, "-r", "-i", "GPU-1"]


async def test_read_only_has_no_reset_key(make_app) -> None:
    ResetSimLink.holders = []
    app = make_app(factory_type=ResetFactory, read_only=True)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: len(app.query_one(GpuPanel).gpus) > 0, "GPU rows")
        await pilot.press("R")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, ConfirmResetScreen)
        assert not [c for c in app.factory.links["gpu-node-07"].commands if str(c["cmd"]).startswith("reset")]
