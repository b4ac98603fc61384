"""Running a GPU reset plan on its host: step aside, run the steps with bounded time, restore, verify.

The collector plans again right before (``reset.make_plan``) and refuses unless the verdict is "go" and the
steps are exactly the ones the client showed and the user confirmed: a host that changed in between is
never reset on an old plan. Then it closes its own NVML (or stops its nvidia-smi loop): the collector steps
aside, and its snapshots say so until it comes back. Steps run one after another, each a child process with
a deadline (its whole process group is killed past it); after the first one that fails, the remaining
stopping and resetting steps are not run, and the restoring ones (persistence mode on again where it was on,
units started again that were stopped) run in every outcome. Then the collector opens the GPUs again and
plans once more: "verified" is true when every step succeeded, every GPU reads without an error, persistence
is what it was, and nothing but services and this collector holds a device node.
"""

from __future__ import annotations

import threading
import time

from gputui.agent.gpu.tools import run_bounded
from gputui.agent.protocol import (
    HOLDER_GPUTUI,
    HOLDER_PROCESS,
    HOLDER_STUCK,
    RESET_GO,
    STEP_FAILED,
    STEP_NOT_RUN,
    STEP_OK,
    STEP_PERSISTENCE_ON,
    STEP_START_SERVICE,
    STEP_TIMEOUT,
)
from gputui.agent.reset.plan import device_prefix, make_plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.agent.host import Agent

RELEASE_WAIT_S = 2.0
"""How long the collector waits for its own device fds to close after it stepped aside."""
RUN_SLACK_S = 30.0
STEPPED_ASIDE = "stepped aside for a GPU reset: this collector's NVML handles are closed"
_one_at_a_time = threading.Lock()


class ResetRefused(Exception):
    """The reset was not started; its text is one line saying why."""


def run_deadline_s(plan: dict[str, Any]) -> float:
    """The longest a run of ``plan`` may take: every step's bound, and slack for planning and verifying."""
    return sum(float(step["timeout_s"]) for step in plan["steps"]) + RUN_SLACK_S


def _own_nodes_closed(own_pid: int) -> bool:
    from gputui.agent.proc.procfs import fd_links

    prefix = device_prefix()
    deadline = time.monotonic() + RELEASE_WAIT_S
    while True:
        if not [link for link in fd_links(own_pid) if link.startswith(prefix)]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _outcome(
    step: dict[str, Any], result: str, rc: int | None, output: str, elapsed_s: float
) -> dict[str, Any]:
    return dict(step, result=result, rc=rc, output=output, elapsed_s=round(elapsed_s, 3))


def run_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each step in order; after a failure only the restoring steps run (a unit only if it was stopped)."""
    outcomes: list[dict[str, Any]] = []
    failed = False
    stopped: set[str] = set()
    for step in steps:
        restoring = step["kind"] in (STEP_PERSISTENCE_ON, STEP_START_SERVICE)
        if (failed and not restoring) or (step["kind"] == STEP_START_SERVICE and step["unit"] not in stopped):
            outcomes.append(_outcome(step, STEP_NOT_RUN, None, "", 0.0))
            continue
        started = time.monotonic()
        rc, output = run_bounded(list(step["argv"]), float(step["timeout_s"]))
        result = STEP_TIMEOUT if rc is None else STEP_OK if rc == 0 else STEP_FAILED
        outcomes.append(_outcome(step, result, rc, output, time.monotonic() - started))
        if result == STEP_OK and step.get("unit") and not restoring:
            stopped.add(step["unit"])
        if result != STEP_OK and not restoring:
            failed = True
    return outcomes


def verified(before: dict[str, Any], after: dict[str, Any], outcomes: list[dict[str, Any]]) -> bool | None:
    """Whether the GPUs are a clean slate after the run (None: the facts after cannot be read)."""
    if not after.get("all_gpus"):
        return None
    if any(o["result"] != STEP_OK for o in outcomes):
        return False
    by_uuid = {g.get("uuid"): g for g in after["all_gpus"]}
    for gpu in before["gpus"]:
        now = by_uuid.get(gpu.get("uuid"))
        if now is None or now.get("error"):
            return False
        if bool(now.get("persistence")) != bool(gpu.get("persistence")):
            return False
    for blocker in after["blockers"]:
        holder = blocker.get("holder")
        if holder and holder["kind"] in (HOLDER_PROCESS, HOLDER_STUCK, HOLDER_GPUTUI):
            return False
    return True


def run_reset(agent: Agent, command: dict[str, Any]) -> dict[str, Any]:
    """The ``reset_run`` command (see the module docstring). Raises ResetRefused with one line."""
    if agent.read_only:
        raise ResetRefused("read-only mode: reset refused, nothing was run")
    words = command.get("gpus")
    expected = command.get("steps")
    if words is not None and (not isinstance(words, list) or not all(isinstance(w, str) for w in words)):
        raise ResetRefused("gpus must be a list of indexes or UUIDs, or null")
    if not isinstance(expected, list):
        raise ResetRefused("steps must be the list of the confirmed plan's command lines")
    if not _one_at_a_time.acquire(False):
        raise ResetRefused("another reset is under way on this host")
    try:
        try:
            plan = make_plan(words, agent.pid, agent.read_only, agent.uses_nvml)
        except ValueError as exc:
            raise ResetRefused(str(exc)) from None
        if plan["verdict"] != RESET_GO:
            return {"refused": f"the plan's verdict is now {plan['verdict']}", "plan": plan}
        if [step["argv"] for step in plan["steps"]] != expected:
            return {"refused": "the plan changed since it was shown: nothing was run", "plan": plan}
        agent.step_aside(STEPPED_ASIDE)
        try:
            released = _own_nodes_closed(agent.pid)
            outcomes = run_steps(plan["steps"])
        finally:
            agent.come_back()
        reset_at = time.time()
        after = make_plan(words, agent.pid, False, agent.uses_nvml)
        done = verified(plan, after, outcomes)
        if done:  # what the reset cleared stops counting against these GPUs, here and for later collectors
            agent.fitness_monitor.note_resets([gpu.get("uuid") for gpu in plan["gpus"]], reset_at)
        return {
            "plan": plan,
            "stepped_aside": STEPPED_ASIDE,
            "released": released,
            "steps": outcomes,
            "after": after,
            "verified": done,
        }
    finally:
        _one_at_a_time.release()
