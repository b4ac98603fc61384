"""What one kill operation says: its outcomes in the order they happened, handed out from any index."""

from __future__ import annotations

import threading
import time

from gputui.agent.kill.messages import outcome
from gputui.agent.proc.details import ProcDetails
from gputui.agent.proc.procfs import ProcStat
from gputui.agent.wire import WireBudget

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


class OutcomeLog:
    """The outcomes of one kill operation (``messages.outcome`` dicts), safe to add to from several threads.

    Each names its process as it was before any signal (a dead process has no command line left to report),
    and their command lines together stay within one reply's wire budget.

    Args:
        use_psutil: Read who a process is through psutil.
        gpu_mib_of: pid -> the GPU memory the collector's last list says it holds.
    """

    def __init__(self, use_psutil: bool, gpu_mib_of: Callable[[int], int | None]) -> None:
        # Its own detail reader: the sampling thread changes the collector's caches meanwhile.
        self._details = ProcDetails(use_psutil)
        self._gpu_mib_of = gpu_mib_of
        self._info: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._outcomes: list[dict[str, Any]] = []
        self._budget = WireBudget()

    def say(
        self,
        pid: int,
        ticks: int | None,
        stat: ProcStat | None,
        stage: str,
        signal_name: str | None,
        result: str,
        detail: str = "",
    ) -> None:
        details = self._info.get(pid) or {}
        if not details and stat is not None:
            details = self._details.details(stat, time.time())
            self._info[pid] = details
        name = stat.name if stat is not None else details.get("name")
        cmdline, truncated = self._budget.take(
            details.get("cmdline") or [],
            bool(details.get("cmdline_truncated")),
            details.get("cmdline_bytes") or 0,
        )
        said = outcome(
            pid,
            ticks,
            stage,
            signal_name,
            result,
            detail,
            name=name,
            user=details.get("user"),
            cmdline=cmdline,
            cmdline_truncated=truncated,
            gpu_mib=self._gpu_mib_of(pid),
            time=round(time.time(), 3),
        )
        with self._lock:
            self._outcomes.append(said)

    def remember(self, stat: ProcStat) -> None:
        """Read who a process is before it is signalled (a dead one has no cmdline left)."""
        if stat.pid not in self._info:
            details = self._details.details(stat, time.time())
            details["name"] = stat.name
            self._info[stat.pid] = details

    def name_of(self, pid: int) -> str | None:
        """The name a process had when it was first looked at."""
        return (self._info.get(pid) or {}).get("name")

    def all(self) -> list[dict[str, Any]]:
        """Every outcome so far, in order (a copy)."""
        with self._lock:
            return list(self._outcomes)
