"""Kill requests: what will be signalled, the commands that do it, their outcomes, the audit log.

* ``plan``: a kill plan from one snapshot (identities, trees children first, zombies routed to their parent,
  refusals) and the ``kill`` command that carries it;
* ``replies``: the collector's answers (outcomes, what is pending, done or not);
* ``audit``: the audit log, written before anything is sent and after each outcome;
* ``run``: one confirmed plan driven through a link (``KillRun``), and what a finished kill took down.

Nothing here signals anything; the collector does (``gputui.agent.kill.operation``). The names of commands,
stages and
results are the protocol's (``gputui.agent.protocol``). The names below are the package's interface.
"""

from gputui.core.actions.audit import AuditLog
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
from gputui.core.actions.run import REQUEST_TIMEOUT_S, KillRun, killed_jobs

__all__ = [
    "DEFAULT_ESCALATE_S",
    "PROTECTED_PIDS",
    "REQUEST_TIMEOUT_S",
    "SIGNALS",
    "AuditLog",
    "KillOutcome",
    "KillPlan",
    "KillReply",
    "KillRun",
    "KillTarget",
    "Pending",
    "PlanError",
    "OwnersError",
    "ReadOnlyError",
    "ZombieNote",
    "all_gone",
    "final_outcomes",
    "kill_command",
    "killed_jobs",
    "parse_outcomes",
    "parse_reply",
    "plan_kill",
]
