"""GPU reset plans as the client reads them: one wording for every blocker, step and verdict, the exit rules.

The collector reads the facts and applies the rule (``gputui.agent.reset.plan``); this module checks the shape
of what came back and words it, once, for the CLI, JSON and the TUI's confirmation alike. Every string in a
plan came from the host: ``ResetPlan.from_dict`` makes it visible (``core.text.safe``) as it is read, and it
is never trusted as markup or a command. The steps sent back to be run are those visible words: a step whose
words had to be escaped no longer matches the collector's own plan, so it is refused, never run changed.
"""

from __future__ import annotations

import shlex

from gputui.agent.protocol import (
    BLOCK_DISPLAY,
    BLOCK_GPU_ERROR,
    BLOCK_HOLDER,
    BLOCK_MIG,
    BLOCK_MODES_UNKNOWN,
    BLOCK_NO_SMI,
    BLOCK_NO_SYSTEMCTL,
    BLOCK_NVSWITCH,
    BLOCK_PERSISTENCE,
    BLOCK_READ_ONLY,
    BLOCK_UNREADABLE,
    GPU_STACK_SERVICES,
    HOLDER_GPU_SERVICE,
    HOLDER_GPUTUI,
    HOLDER_OWN,
    HOLDER_PROCESS,
    HOLDER_SERVICE,
    HOLDER_STUCK,
    RESET_BLOCKED,
    RESET_GO,
    RESET_REBOOT,
    RESET_UNKNOWN,
    RESET_VERDICTS,
    RESULT_REQUESTED,
    RESULT_UNKNOWN,
    STAGE_INTENT,
    STEP_OK,
    STEP_PERSISTENCE_OFF,
    STEP_PERSISTENCE_ON,
    STEP_RESET,
    STEP_START_SERVICE,
    STEP_STOP_SERVICE,
    UNIT_NAME,
)
from gputui.core.model import Record
from gputui.core.text import fit, visible, visible_tree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STAGE_RESET = "reset"
"""Audit lines of a reset's steps carry this stage after their intent (``STAGE_INTENT``)."""
EXIT_OK = 0
EXIT_BLOCKED = 1
EXIT_CANNOT_TELL = 2
PLAN_EXIT = {RESET_GO: EXIT_OK, RESET_BLOCKED: EXIT_BLOCKED, RESET_REBOOT: EXIT_BLOCKED, RESET_UNKNOWN: 2}
"""Without ``--yes``: 0 the reset can go ahead, 1 something blocks it (a reboot included), 2 cannot tell."""

VERDICT_WORDS = {
    RESET_GO: "the reset can go ahead",
    RESET_BLOCKED: "the reset is blocked",
    RESET_REBOOT: "a reset cannot work here: reboot",
    RESET_UNKNOWN: "cannot tell whether a reset can work",
}
HOLDER_WORDS = {
    HOLDER_OWN: "gputui's own collector (this one): it steps aside before the reset",
    HOLDER_GPUTUI: "gputui (a TUI's collector, its NVML event set, or an exporter): quit it first",
    HOLDER_SERVICE: "service {unit}: stopped by the plan, started again after",
    HOLDER_GPU_SERVICE: "{service}, {what}, outside a systemd unit (a pod or a container): never signalled; "
    "stop it where it runs first",
    HOLDER_PROCESS: "kill it first (gputui kill {target} {pid})",
    HOLDER_STUCK: "stuck in the driver (state {state}): it may never let go",
}
BLOCKER_WORDS = {
    BLOCK_PERSISTENCE: "GPU {gpu}: persistence mode is on (turned off for the reset, on again after)",
    BLOCK_MIG: "GPU {gpu}: MIG mode is on: destroy its instances and turn it off (nvidia-smi -mig 0) first",
    BLOCK_DISPLAY: "GPU {gpu}: a display is attached",
    BLOCK_NVSWITCH: "NVSwitch baseboard: all its GPUs must be free and reset together (missing: {missing})",
    BLOCK_NO_SMI: "nvidia-smi is not on PATH on this host: the reset cannot be performed",
    BLOCK_NO_SYSTEMCTL: "service {unit}: systemctl is not on PATH to stop it",
    BLOCK_UNREADABLE: "the open files of {count} processes cannot be read (run as root to see every holder)",
    BLOCK_GPU_ERROR: "GPU {gpu} cannot be read: {detail}",
    BLOCK_MODES_UNKNOWN: "the GPUs' persistence and MIG modes cannot be read",
    BLOCK_READ_ONLY: "read-only mode: nothing will be run",
}
EFFECT_WORDS = {
    "step": "handled by the plan",
    RESET_BLOCKED: "blocks",
    RESET_REBOOT: "reboot",
    RESET_UNKNOWN: "?",
}


class PlanShapeError(ValueError):
    """The collector's answer is not a reset plan."""


NOT_OUR_PLAN = "the collector answered with a reset plan gputui never makes (not gputui's collector?)"
_STEP_TOOLS = {
    STEP_STOP_SERVICE: "systemctl",
    STEP_START_SERVICE: "systemctl",
    STEP_PERSISTENCE_OFF: "nvidia-smi",
    STEP_PERSISTENCE_ON: "nvidia-smi",
    STEP_RESET: "nvidia-smi",
}
"""The tool each kind of step runs: the collector's plan (``agent.reset.plan``) has no other."""


def _step_fits(step: dict[str, Any], uuids: set[str], units: set[str]) -> bool:
    """Whether a step is one of the five that gputui plans, for a GPU of the plan or a unit it names."""
    kind = step.get("kind")
    argv = step["argv"]
    tool = _STEP_TOOLS.get(str(kind))
    if tool is None or not argv or (not argv[0].startswith("/") and argv[0] != tool):
        return False
    if argv[0].rsplit("/", 1)[-1] != tool:
        return False
    words = argv[1:]
    if kind in (STEP_STOP_SERVICE, STEP_START_SERVICE):
        verb = "stop" if kind == STEP_STOP_SERVICE else "start"
        return (
            len(words) == 2 and words[0] == verb and words[1] in units and bool(UNIT_NAME.fullmatch(words[1]))
        )
    if kind in (STEP_PERSISTENCE_OFF, STEP_PERSISTENCE_ON):
        mode = "0" if kind == STEP_PERSISTENCE_OFF else "1"
        return words[:3] == ["-pm", mode, "-i"] and len(words) == 4 and words[3] in uuids
    return words == ["-r"] or (len(words) == 3 and words[:2] == ["-r", "-i"] and words[2] in uuids)


def check_steps(plan: ResetPlan, asked: list[str] | None) -> None:
    """Refuse a plan whose steps gputui's collector never plans (another tool, other words, a GPU outside
    the plan, a unit no holder runs in) or whose GPUs are not those asked for. Raises PlanShapeError."""
    uuids = {str(g.get("uuid")) for g in plan.gpus if g.get("uuid")}
    units = {str(h.get("unit")) for h in plan.holders if h.get("kind") == HOLDER_SERVICE and h.get("unit")}
    for step in plan.steps:
        if not _step_fits(step, uuids, units):
            raise PlanShapeError(f"{plan.target}: {NOT_OUR_PLAN}: {fit(step_line(step), 120)}")
    if asked is None:
        return
    words = set(asked)
    for gpu in plan.gpus:
        if str(gpu.get("index")) not in words and str(gpu.get("uuid")) not in words:
            raise PlanShapeError(
                f"{plan.target}: {NOT_OUR_PLAN}: it resets GPU {fit(str(gpu.get('index')), 8)}, "
                "which was not asked"
            )


class ResetPlan(Record):
    """One host's reset plan (``agent.reset.plan.build_plan``'s dict, checked).

    Attributes:
        target: The host.
        verdict: One of ``RESET_VERDICTS``.
        gpus: The GPUs the plan resets (index, uuid, modes).
        blockers: Each with ``code``, ``effect`` and its facts.
        steps: Each with ``kind``, ``argv`` and ``timeout_s``, in order.
        notes: Lines that do not change the verdict.
    """

    target: str
    verdict: str
    gpus: tuple[dict[str, Any], ...]
    blockers: tuple[dict[str, Any], ...]
    steps: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]
    raw: dict[str, Any]

    @classmethod
    def from_dict(cls, target: str, data: Any, asked: list[str] | None = None) -> ResetPlan:
        """The plan as read, checked: every step one that gputui plans (``check_steps``), and the GPUs it
        resets those ``asked`` (indexes or UUIDs; None: every GPU). Raises PlanShapeError with one line."""
        if not isinstance(data, dict) or data.get("verdict") not in RESET_VERDICTS:
            raise PlanShapeError(f"{target}: the collector answered without a reset plan")
        raw = data
        try:
            data = visible_tree(data)
            gpus = tuple(g for g in data["gpus"] if isinstance(g, dict))
            blockers = tuple(b for b in data["blockers"] if isinstance(b, dict) and "code" in b)
            steps = tuple(
                s
                for s in data["steps"]
                if isinstance(s, dict)
                and isinstance(s.get("argv"), list)
                and all(isinstance(a, str) for a in s["argv"])
            )
            notes = tuple(str(n) for n in data.get("notes") or ())  # visible already
        except (KeyError, TypeError) as exc:
            raise PlanShapeError(f"{target}: malformed reset plan from the collector ({exc})") from None
        except RecursionError:  # nested deeper than any plan gputui makes
            raise PlanShapeError(f"{target}: {NOT_OUR_PLAN}: nested too deep") from None
        if len(steps) != len(data["steps"]):
            raise PlanShapeError(f"{target}: {NOT_OUR_PLAN}: a step that is not a command line")
        plan = cls(target, data["verdict"], gpus, blockers, steps, notes, raw)
        check_steps(plan, asked)
        return plan

    @property
    def exit_status(self) -> int:
        return PLAN_EXIT[self.verdict]

    @property
    def step_argvs(self) -> list[list[str]]:
        """The command lines as the collector sent them: what ``reset_run`` must find again to run them."""
        return [list(step["argv"]) for step in self.steps]

    @property
    def holders(self) -> list[dict[str, Any]]:
        return [
            b["holder"]
            for b in self.blockers
            if b["code"] == BLOCK_HOLDER and isinstance(b.get("holder"), dict)
        ]


def holder_line(target: str, holder: dict[str, Any], effect: str = "step") -> str:
    """``  4242  alice   python serve.py  [/dev/nvidia0, /dev/nvidiactl]: kill it first (...)``."""
    kind = str(holder.get("kind"))
    words = HOLDER_WORDS.get(kind, "?")
    if kind == HOLDER_SERVICE and effect != "step":
        words = BLOCKER_WORDS[BLOCK_NO_SYSTEMCTL]
    service = holder.get("service")
    if service not in GPU_STACK_SERVICES:  # a collector's word, checked against the one list
        service = None
    why = words.format(
        service=service or "a GPU-stack service",
        what=GPU_STACK_SERVICES.get(service or "", "of the GPU stack"),
        unit=fit(str(holder.get("unit") or "?"), 80),
        target=fit(target, 60) if " " not in target else shlex.quote(target),
        pid=holder.get("pid"),
        state=fit(str(holder.get("state") or "?"), 2),
    )
    argv = holder.get("cmdline") or []
    command = fit(" ".join(str(a) for a in argv), 60) or fit(str(holder.get("name") or "–"), 30)
    devices = ", ".join(fit(str(d), 120) for d in holder.get("devices") or [])
    user = fit(str(holder.get("user") or "–"), 12)
    return f"{holder.get('pid'):>8}  {user:<12} {command}  [{devices}]: {why}"


def blocker_line(target: str, blocker: dict[str, Any]) -> str:
    """One blocker in words (a holder by ``holder_line``)."""
    if blocker.get("code") == BLOCK_HOLDER and isinstance(blocker.get("holder"), dict):
        return holder_line(target, blocker["holder"], str(blocker.get("effect")))
    template = BLOCKER_WORDS.get(str(blocker.get("code")), "{code}")
    missing = blocker.get("missing")
    return template.format(
        gpu=blocker.get("gpu", "?"),
        unit=fit(str(blocker.get("unit") or "?"), 80),
        count=blocker.get("count", "?"),
        detail=fit(str(blocker.get("detail") or "?"), 200),
        missing=", ".join(str(m) for m in missing) if isinstance(missing, list) else "?",
        code=fit(str(blocker.get("code")), 40),
    )


def step_line(step: dict[str, Any]) -> str:
    """The command a step runs, quoted as a shell would need it (for reading, never for running)."""
    return " ".join(shlex.quote(fit(str(arg), 200)) for arg in step.get("argv") or [])


def reason_line(plan: ResetPlan) -> str:
    """Why the verdict is what it is: the first blocker with that effect, in words."""
    for blocker in plan.blockers:
        if blocker.get("effect") == plan.verdict:
            return blocker_line(plan.target, blocker).strip()
    return ""


def verdict_line(plan: ResetPlan) -> str:
    words = VERDICT_WORDS[plan.verdict]
    reason = reason_line(plan) if plan.verdict != RESET_GO else ""
    return f"{fit(plan.target, 100)}: {words}" + (f" ({reason})" if reason else "")


def format_plan(plan: ResetPlan) -> list[str]:
    """The plan as lines: GPUs, blockers, steps (or the reboot), notes, the verdict."""
    gpus = ", ".join(f"{g.get('index')} {fit(str(g.get('uuid') or '–'), 48)}" for g in plan.gpus) or "none"
    lines = [f"{fit(plan.target, 100)}: reset of GPU {gpus}"]
    if plan.blockers:
        lines.append("blockers:")
        for blocker in plan.blockers:
            effect = EFFECT_WORDS.get(str(blocker.get("effect")), "?")
            lines.append(f"  [{effect}] {blocker_line(plan.target, blocker)}")
    else:
        lines.append("blockers: none")
    if plan.verdict == RESET_REBOOT:
        lines.append(f"a reset cannot work here: reboot ({reason_line(plan)})")
    elif plan.steps:
        lines.append("steps:")
        for number, step in enumerate(plan.steps, 1):
            lines.append(f"  {number}. {step_line(step)}")
    for note in plan.notes:
        lines.append(f"note: {fit(note, 300)}")
    lines.append(verdict_line(plan))
    return lines


def outcome_line(outcome: dict[str, Any]) -> str:
    # A step's outcome is read from the collector's answer to the run, not from the plan: made visible here.
    result = visible(outcome.get("result"), 12)
    rc = outcome.get("rc")
    output = visible(str(outcome.get("output") or "").replace("\n", " | "), 200)
    tail = f"  {output}" if output and result != STEP_OK else ""
    status = "" if rc is None else f" (exit {rc})"
    return f"  {result:<8} {step_line(outcome)}{status}{tail}"


def run_exit(result: dict[str, Any]) -> tuple[int, str]:
    """With ``--yes``: (0 verified clean after, 1 a step failed or not clean, 2 cannot tell; its line)."""
    if result.get("refused"):
        return EXIT_BLOCKED, f"not run: {visible(result['refused'], 200)}"
    steps = result.get("steps")
    if not isinstance(steps, list):
        return EXIT_CANNOT_TELL, "cannot tell: the collector answered without the steps' outcomes"
    if any(isinstance(s, dict) and s.get("result") != STEP_OK for s in steps):
        return EXIT_BLOCKED, "a step failed: the GPUs are not verified clean"
    verified = result.get("verified")
    if verified is True:
        return EXIT_OK, "reset done, verified clean after"
    if verified is False:
        return EXIT_BLOCKED, "reset done, but not clean after (see the plan after it)"
    return EXIT_CANNOT_TELL, "reset done, cannot tell whether the GPUs are clean after"


def audit_lines(plan: ResetPlan, stage: str, results: list[dict[str, Any]] | None, detail: str) -> list[dict]:
    lines = []
    for index, step in enumerate(plan.steps):
        outcome = results[index] if results is not None and index < len(results) else {}
        lines.append(
            {
                "stage": stage,
                "action": "gpu_reset",
                "step": index + 1,
                "kind": step.get("kind"),
                "command": list(step["argv"]),
                "gpu": step.get("uuid"),
                "unit": step.get("unit"),
                "result": outcome.get(
                    "result", RESULT_REQUESTED if stage == STAGE_INTENT else RESULT_UNKNOWN
                ),
                "rc": outcome.get("rc"),
                "detail": outcome.get("output") or detail,
            }
        )
    return lines


def unknown_command_said(exc: Exception) -> Exception:
    """A collector that does not know the reset commands (a simulated host, an older collector) in words."""
    if "unknown command 'reset_plan'" in str(exc):
        return PlanShapeError(
            "the collector there cannot plan GPU resets (a simulated host, or an older collector)"
        )
    return exc


__all__ = [
    "EXIT_BLOCKED",
    "EXIT_CANNOT_TELL",
    "EXIT_OK",
    "HOLDER_GPUTUI",
    "HOLDER_OWN",
    "HOLDER_PROCESS",
    "HOLDER_SERVICE",
    "HOLDER_STUCK",
    "PlanShapeError",
    "STAGE_RESET",
    "ResetPlan",
    "audit_lines",
    "blocker_line",
    "format_plan",
    "outcome_line",
    "run_exit",
    "step_line",
    "verdict_line",
]
