"""The TUI's GPU reset: the key asks the host's collector for a plan, the modal shows it, a confirmed one
runs (audited first) on a thread that the app's exit waits for, and a notification says how it ended.

The same plan, wording, audit lines and exit rules as ``gputui reset`` (``commands.reset``): this module
only moves them between threads and screens.
"""

from __future__ import annotations

import threading

from gputui.agent.protocol import RESET_PLAN_COMMAND, RESET_RUN_COMMAND
from gputui.core.actions import (
    EXIT_OK,
    STAGE_RESET,
    PlanShapeError,
    ResetPlan,
    audit_lines,
    run_exit,
    unknown_command_said,
)
from gputui.core.link import LinkError
from gputui.core.store import StoreError
from gputui.core.text import visible
from gputui.ui.session.context import Session
from gputui.ui.session.hosts import REQUEST_TIMEOUT_S, HostState
from gputui.ui.session.tasks import spawn

RUN_SLACK_S = 60.0


def request_reset(session: Session, host: HostState, gpu_index: int) -> None:
    """Plan a reset of one GPU on ``host`` and open its confirmation (read-only mode refuses)."""
    if session.settings.read_only:
        session.say("read-only: no GPU is reset", severity="warning", title="refused")
        return
    link = host.link
    if link is None:
        session.say(f"{visible(host.target, 40)}: not connected", severity="warning")
        return
    target = host.target

    def plan_it() -> None:
        try:
            answer = link.request({"cmd": RESET_PLAN_COMMAND, "gpus": [str(gpu_index)]}, REQUEST_TIMEOUT_S)
            plan = ResetPlan.from_dict(target, answer.get("plan"), [str(gpu_index)])
        except (LinkError, PlanShapeError) as exc:
            said = unknown_command_said(exc)
            session.from_thread(session.say, visible(str(said), 300), severity="error", title="reset")
            return
        session.from_thread(session.confirm_reset, plan, lambda ok: _decided(session, host, plan, ok))

    spawn(f"reset-plan-{target[:20]}", plan_it)


def _decided(session: Session, host: HostState, plan: ResetPlan, confirmed: bool | None) -> None:
    if not confirmed:
        session.say("cancelled: no GPU was reset")
        return
    link = host.link
    if link is None:
        session.say(f"{visible(host.target, 40)}: not connected: nothing was run", severity="warning")
        return
    boot_id = plan.raw.get("boot_id")
    if session.audit is not None:
        try:
            session.audit.record(
                plan.target, boot_id, audit_lines(plan, "intent", None, "reset plan confirmed")
            )
        except StoreError as exc:
            session.say(
                f"reset refused, nothing was run: audit log: {visible(str(exc), 200)}", severity="error"
            )
            return
    session.say(
        f"{visible(plan.target, 40)}: the collector steps aside (closes its NVML handles) for the reset"
    )
    words = [str(g.get("index")) for g in plan.gpus]
    deadline_s = sum(float(s.get("timeout_s") or 0.0) for s in plan.steps) + RUN_SLACK_S

    def run_it() -> None:
        try:
            result = link.request(
                {"cmd": RESET_RUN_COMMAND, "gpus": words, "steps": plan.step_argvs}, deadline_s
            )
        except LinkError as exc:
            session.from_thread(
                session.say, visible(str(exc), 300), severity="error", title="reset: outcome unknown"
            )
            return
        steps = result.get("steps")
        if session.audit is not None and isinstance(steps, list):
            try:
                session.audit.record(plan.target, boot_id, audit_lines(plan, STAGE_RESET, steps, ""))
            except StoreError:
                pass  # said by the next line's severity: the reset itself has run
        status, line = run_exit(result)
        severity = "information" if status == EXIT_OK else "error"
        session.from_thread(
            session.say, f"{visible(plan.target, 40)}: {line}", severity=severity, title="reset"
        )

    # Not a daemon: quitting waits for a reset under way, which restores persistence mode at its end.
    threading.Thread(target=run_it, name=f"gputui-reset-{plan.target[:20]}", daemon=False).start()
