"""What gputui does to a host: kills and GPU resets, planned here, carried out by the collector.

* ``plan``: a kill plan from one sample (identities, trees children first, zombies routed to their parent,
  refusals) and the ``kill`` command that carries it; ``owner_scope``: a kill never crosses an owner;
* ``replies``: the collector's answers; ``audit``: the audit log, written before and after each signal;
* ``run``: one confirmed plan driven through a link, and what a finished kill took down;
* ``reset_plan``: GPU reset plans as the client reads them.

Nothing here signals anything; the collector does (``gputui.agent.kill.operation``).
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.actions.audit import AuditLog
    from gputui.core.actions.owner_scope import OWNER_ALL
    from gputui.core.actions.plan import (
        DEFAULT_ESCALATE_S,
        PROTECTED_PIDS,
        SIGNALS,
        KillPlan,
        KillTarget,
        OwnersError,
        PlanError,
        ReadOnlyError,
        ZombieNote,
        kill_command,
        plan_kill,
    )
    from gputui.core.actions.replies import (
        KillOutcome,
        KillReply,
        Pending,
        all_gone,
        final_outcomes,
        parse_outcomes,
        parse_reply,
    )
    from gputui.core.actions.reset_plan import (
        EXIT_BLOCKED,
        EXIT_CANNOT_TELL,
        EXIT_OK,
        STAGE_RESET,
        PlanShapeError,
        ResetPlan,
        audit_lines,
        blocker_line,
        format_plan,
        outcome_line,
        run_exit,
        unknown_command_said,
    )
    from gputui.core.actions.run import REQUEST_TIMEOUT_S, KillRun, killed_jobs

__all__ = [
    "AuditLog",
    "DEFAULT_ESCALATE_S",
    "EXIT_BLOCKED",
    "EXIT_CANNOT_TELL",
    "EXIT_OK",
    "KillOutcome",
    "KillPlan",
    "KillReply",
    "KillRun",
    "KillTarget",
    "OWNER_ALL",
    "OwnersError",
    "PROTECTED_PIDS",
    "Pending",
    "PlanError",
    "PlanShapeError",
    "REQUEST_TIMEOUT_S",
    "ReadOnlyError",
    "ResetPlan",
    "SIGNALS",
    "STAGE_RESET",
    "ZombieNote",
    "all_gone",
    "audit_lines",
    "blocker_line",
    "final_outcomes",
    "format_plan",
    "kill_command",
    "killed_jobs",
    "outcome_line",
    "parse_outcomes",
    "parse_reply",
    "plan_kill",
    "run_exit",
    "unknown_command_said",
]

_HOMES = {
    "AuditLog": "audit",
    "DEFAULT_ESCALATE_S": "plan",
    "EXIT_BLOCKED": "reset_plan",
    "EXIT_CANNOT_TELL": "reset_plan",
    "EXIT_OK": "reset_plan",
    "KillOutcome": "replies",
    "KillPlan": "plan",
    "KillReply": "replies",
    "KillRun": "run",
    "KillTarget": "plan",
    "OWNER_ALL": "owner_scope",
    "OwnersError": "plan",
    "PROTECTED_PIDS": "plan",
    "Pending": "replies",
    "PlanError": "plan",
    "PlanShapeError": "reset_plan",
    "REQUEST_TIMEOUT_S": "run",
    "ReadOnlyError": "plan",
    "ResetPlan": "reset_plan",
    "SIGNALS": "plan",
    "STAGE_RESET": "reset_plan",
    "ZombieNote": "plan",
    "all_gone": "replies",
    "audit_lines": "reset_plan",
    "blocker_line": "reset_plan",
    "final_outcomes": "replies",
    "format_plan": "reset_plan",
    "kill_command": "plan",
    "killed_jobs": "run",
    "outcome_line": "reset_plan",
    "parse_outcomes": "replies",
    "parse_reply": "replies",
    "plan_kill": "plan",
    "run_exit": "reset_plan",
    "unknown_command_said": "reset_plan",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
