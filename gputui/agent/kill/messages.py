"""The kill messages' shapes: the ``kill``, ``kill_wait`` and ``kill_abandon`` commands, each step's outcome,
what a kill still waits for, and the reply (names from ``gputui.agent.protocol``)."""

from __future__ import annotations

from gputui.agent.protocol import (
    KILL_ABANDON_COMMAND,
    KILL_COMMAND,
    KILL_WAIT_COMMAND,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

OUTCOME_FIELDS = (
    "pid",
    "start_ticks",
    "name",
    "user",
    "cmdline",
    "cmdline_truncated",
    "gpu_mib",
    "stage",
    "signal",
    "result",
    "detail",
    "time",
)


def outcome(
    pid: int,
    start_ticks: int | None,
    stage: str,
    signal: str | None,
    result: str,
    detail: str = "",
    name: str | None = None,
    user: str | None = None,
    cmdline: Iterable[str] = (),
    cmdline_truncated: bool = False,
    gpu_mib: int | None = None,
    time: float | None = None,
) -> dict[str, Any]:
    """One stage of what a kill did to one process (``stage`` from ``KILL_STAGES``, ``result`` from
    ``KILL_RESULTS``; ``signal`` the one that stage sent or concerns, None for checks and waits); ``time``:
    when the collector saw it (epoch seconds, the host's clock), so that a receipt measures the events, not
    how long the client took to ask."""
    return {
        "pid": pid,
        "start_ticks": start_ticks,
        "name": name,
        "user": user,
        "cmdline": list(cmdline),
        "cmdline_truncated": cmdline_truncated,
        "gpu_mib": gpu_mib,
        "stage": stage,
        "signal": signal,
        "result": result,
        "detail": detail,
        "time": time,
    }


def pending(
    pid: int, start_ticks: int | None, name: str | None, signal: str | None, due_in_s: float | None
) -> dict[str, Any]:
    """A signalled process a kill operation still watches: what it gets next (KILL; None: a look) and when."""
    return {"pid": pid, "start_ticks": start_ticks, "name": name, "signal": signal, "due_in_s": due_in_s}


KILL_REPLY_FIELDS = ("op", "outcomes", "count", "done", "pending", "escalate_s", "wait_s", "elapsed_s")


def kill_reply(
    op: int,
    outcomes: list[dict[str, Any]],
    count: int,
    done: bool,
    pending: list[dict[str, Any]],
    escalate_s: float | None,
    wait_s: float | None,
    elapsed_s: float,
) -> dict[str, Any]:
    """The result of ``kill``, ``kill_wait`` and ``kill_abandon``: outcomes from the asked index on, how many
    there are in all (the next ``since``), whether the operation is done, and what it still watches."""
    return {
        "op": op,
        "outcomes": outcomes,
        "count": count,
        "done": done,
        "pending": pending,
        "escalate_s": escalate_s,
        "wait_s": wait_s,
        "elapsed_s": elapsed_s,
    }


def kill_command(
    targets: Iterable[tuple[int, int | None]],
    members: Iterable[tuple[int, int | None]],
    boot_id: str | None,
    signal: str,
    tree: bool,
    escalate_s: float | None,
    wait_s: float | None,
    detach: bool,
    owners: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``kill`` command for (pid, start_ticks) targets and, for a tree kill, the members listed with
    them; ``owners``: each pid's owner as listed (``kind``, ``id``), which the collector holds it to when it
    signals."""
    owned = owners or {}

    def entry(pid: int, ticks: int | None) -> dict[str, Any]:
        item: dict[str, Any] = {"pid": pid, "start_ticks": ticks}
        if pid in owned:
            item["owner"] = owned[pid]
        return item

    return {
        "cmd": KILL_COMMAND,
        "boot_id": boot_id,
        "targets": [entry(pid, ticks) for pid, ticks in targets],
        "members": [entry(pid, ticks) for pid, ticks in members],
        "signal": signal,
        "tree": tree,
        "escalate_s": escalate_s,
        "wait_s": wait_s,
        "detach": detach,
    }


def kill_wait_command(op: int, since: int, timeout_s: float) -> dict[str, Any]:
    return {"cmd": KILL_WAIT_COMMAND, "op": op, "since": since, "timeout_s": timeout_s}


def kill_abandon_command(op: int, since: int) -> dict[str, Any]:
    return {"cmd": KILL_ABANDON_COMMAND, "op": op, "since": since}
