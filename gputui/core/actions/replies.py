"""What the collector answers about a kill: outcomes, what it still watches, and whether it is done."""

from __future__ import annotations

from collections.abc import Iterable

from gputui.agent.protocol import RESULTS_GONE
from gputui.core.model import Record, opt_float, opt_int, opt_safe, safe, safe_list

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class KillOutcome(Record):
    """One stage of what happened to one process.

    Attributes:
        stage: One of the agent's ``KILL_STAGES``.
        signal: The signal that stage sent (``SIGNALLING_STAGES``) or concerns; None for checks and waits.
        result: One of the agent's ``KILL_RESULTS``.
        detail: One human line (untrusted text from the agent).
        time: When the collector saw it (epoch seconds, the host's clock); None from a collector that does
            not say.
    """

    pid: int
    start_ticks: int | None
    name: str | None
    stage: str
    signal: str | None
    result: str
    detail: str = ""
    user: str | None = None
    cmdline: tuple[str, ...] = ()
    gpu_mib: int | None = None
    time: float | None = None


def parse_outcomes(result: dict[str, Any]) -> list[KillOutcome]:
    """The outcomes of a ``kill`` reply's result, in the agent's order.

    Raises:
        ValueError: The result has no outcome list, or an outcome has no pid (one-line message).
    """
    raw = result.get("outcomes") if isinstance(result, dict) else None
    if not isinstance(raw, list):
        raise ValueError("the agent's kill reply has no outcome list")
    outcomes = []
    for item in raw:
        if not isinstance(item, dict) or opt_int(item.get("pid")) is None:
            raise ValueError("the agent's kill reply has an outcome without a pid")
        cmdline = item.get("cmdline")
        outcomes.append(
            KillOutcome(
                pid=int(item["pid"]),
                start_ticks=opt_int(item.get("start_ticks")),
                name=opt_safe(item.get("name")),
                stage=safe(item.get("stage")),
                signal=opt_safe(item.get("signal")),
                result=safe(item.get("result"), "error"),
                detail=safe(item.get("detail")),
                user=opt_safe(item.get("user")),
                cmdline=safe_list(cmdline),
                gpu_mib=opt_int(item.get("gpu_mib")),
                time=opt_float(item.get("time")),
            )
        )
    return outcomes


def final_outcomes(outcomes: Iterable[KillOutcome]) -> dict[int, KillOutcome]:
    """pid -> the last stage reported for it (what finally happened)."""
    last: dict[int, KillOutcome] = {}
    for outcome in outcomes:
        last[outcome.pid] = outcome
    return last


def all_gone(outcomes: Iterable[KillOutcome]) -> bool:
    """Whether every process ended gone (exited, killed, reaped, or already gone before its signal)."""
    final = final_outcomes(outcomes)
    return bool(final) and all(o.result in RESULTS_GONE for o in final.values())


class Pending(Record):
    """A signalled process the agent is still watching.

    Attributes:
        pid: Process id.
        start_ticks: Its start time in clock ticks.
        name: Its name (untrusted text).
        signal: What it gets when the delay is up ("KILL"), None when the agent only looks then.
        due_in_s: Seconds until then, None when not known.
    """

    pid: int
    start_ticks: int | None
    name: str | None
    signal: str | None
    due_in_s: float | None


class KillReply(Record):
    """One answer about a kill operation.

    Attributes:
        op: The agent's operation id (for ``kill_wait`` and ``kill_abandon``).
        outcomes: The outcomes this answer adds.
        count: How many outcomes the operation has reported so far (the next ``since``).
        done: Nothing is pending any more.
        pending: What the agent still watches or will KILL.
        elapsed_s: Seconds since the operation started (to its end once done).
    """

    op: int | None
    outcomes: tuple[KillOutcome, ...]
    count: int
    done: bool
    pending: tuple[Pending, ...] = ()
    elapsed_s: float | None = None


def parse_reply(result: dict[str, Any]) -> KillReply:
    """A ``kill`` / ``kill_wait`` / ``kill_abandon`` result.

    Raises:
        ValueError: No outcome list, or an outcome without a pid (one-line message).
    """
    outcomes = tuple(parse_outcomes(result))
    pending = []
    for item in result.get("pending") or ():
        if isinstance(item, dict) and opt_int(item.get("pid")) is not None:
            due = item.get("due_in_s")
            pending.append(
                Pending(
                    pid=int(item["pid"]),
                    start_ticks=opt_int(item.get("start_ticks")),
                    name=opt_safe(item.get("name")),
                    signal=opt_safe(item.get("signal")),
                    due_in_s=opt_float(due),
                )
            )
    count = opt_int(result.get("count"))
    elapsed = result.get("elapsed_s")
    return KillReply(
        op=opt_int(result.get("op")),
        outcomes=outcomes,
        count=len(outcomes) if count is None else count,
        # An agent that does not say is one that answered at the end (the kill command without detach).
        done=bool(result.get("done", True)),
        pending=tuple(pending),
        elapsed_s=opt_float(elapsed),
    )
