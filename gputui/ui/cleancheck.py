"""The TUI's side of the clean-slate check: it feeds ``core.cleanslate`` and does what the machine asks.

``c`` (or ``X``, once its kill is confirmed) starts a check: the host samples fast while memory drains, every
applied snapshot goes to ``cleanslate.memory_sample``, a fresh full sample is taken when it asks for one, and
the check's end (the receipt, or the deadline) brings the normal intervals back. ``check --wait`` drives the
same machine from the CLI (``gputui.commands.check``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputui.core import cleanslate
from gputui.core.model import HostSnapshot
from gputui.core.textsafe import visible
from gputui.ui.hosts import Hosts, HostState
from gputui.ui.widgets.clean_slate import clock_time, receipt_times
from gputui.ui.widgets.fmt import duration

if TYPE_CHECKING:
    from gputui.ui.app import GpuTuiApp

FAST_MEMORY_INTERVAL_S = 0.2
FAST_PROCESS_INTERVAL_S = 0.5
"""Sampling while a check watches memory drain; the normal intervals come back after it."""


def check_operation(target: str) -> str:
    """The notification key of ``target``'s clean-slate check (``GpuTuiApp.say``)."""
    return f"check:{target}"


class CleanChecks:
    """Starts, feeds and ends the clean-slate checks of every host of ``app``."""

    def __init__(self, app: GpuTuiApp) -> None:
        self._app = app

    def start(self, host: HostState, trigger: str = "c") -> None:
        app = self._app
        host.check = cleanslate.start(
            app.clock(),
            app.settings.check_timeout_s,
            trigger,
            kill_pending=bool(host.kills),
            ports=host.watched_ports,
        )
        app.hosts.configure(host, FAST_MEMORY_INTERVAL_S, FAST_PROCESS_INTERVAL_S)
        app.host_changed(host)

    def memory_sample(self, host: HostState, snapshot: HostSnapshot) -> None:
        """A snapshot of ``host`` was applied."""
        if host.check is None:
            return
        host.check, ask = cleanslate.memory_sample(host.check, snapshot, host.baselines, self._app.clock())
        if ask:
            self._app.hosts.confirm_clean(host, host.check.started_s)

    def confirmed(self, message: Hosts.CleanConfirmed) -> None:
        """The fresh full sample a check asked for came back."""
        host = self._app.hosts.get(message.target)
        check = None if host is None else host.check
        if host is None or check is None or check.started_s != message.started_s:
            return  # an answer to a check that was replaced
        check = cleanslate.confirming_sample(check, message.snapshot, host.killed_members(), message.error)
        host.check = check
        verdict = None if message.snapshot is None else message.snapshot.verdict
        if check.clean and check.finished_s is not None and verdict is not None:
            self._end(host)
            self._app.say(
                f"{visible(host.target, 40)}: CLEAN ✓ {verdict.gpus_at_baseline}/{len(verdict.gpus)} GPUs at"
                f" baseline at {clock_time(check.finished_s)} (memory sample, confirmed by a full sample;"
                f" {receipt_times(check)})",
                title="clean slate",
                operation=check_operation(host.target),
            )
        self._app.host_changed(host)

    def tick(self) -> None:
        """Once a second: a check past its deadline ends, not clean."""
        now_s = self._app.clock()
        for host in self._app.hosts:
            check = host.check
            if check is None or not check.running:
                continue
            host.check = cleanslate.tick(check, now_s)
            if not host.check.running:
                self._end(host)
                self._app.say(
                    f"{visible(host.target, 40)}: not clean after {duration(now_s - check.started_s)}",
                    severity="error",
                    title="clean slate",
                    operation=check_operation(host.target),
                )
                self._app.host_changed(host)

    def cancel(self, host: HostState) -> None:
        """Drop ``host``'s check (the kill it came with never ran)."""
        host.check = None
        self._end(host)

    def _end(self, host: HostState) -> None:
        settings = self._app.settings
        self._app.hosts.configure(host, settings.memory_interval_s, settings.process_interval_s)
