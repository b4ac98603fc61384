"""The Textual app: it holds the settings and the hosts, shows the monitor (and the fleet view), and routes
what the hosts' threads report to the screens.

The parts live beside it: ``hosts`` (each host's state, its poller thread, the requests to its link),
``cleancheck`` (the clean-slate check, over ``core.verdict.cleanslate``), ``killflow`` (plan → confirm → send
→ audit → results), ``keymap`` (every key), ``screens.monitor`` (the host view). Every string that came from a
machine is shown as ``Text`` (never markup) with control characters visible.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import events
from textual.app import App, SystemCommand
from textual.driver import Driver
from textual.notifications import Notification
from textual.screen import Screen

from gputui.agent.protocol import MEMORY_INTERVAL_S
from gputui.core.actions import DEFAULT_ESCALATE_S, AuditLog, KillPlan, ResetPlan
from gputui.core.link import HostLink
from gputui.core.model import HostSnapshot, Owner
from gputui.core.servers import ServerWatch
from gputui.core.text import fit, visible
from gputui.core.verdict import Baselines
from gputui.transports.replay import ReplayControl
from gputui.transports.ssh.hostkeys import trust as ssh_hostkeys
from gputui.transports.ssh.hostkeys.knownhosts import UnknownHostKey
from gputui.ui import keymap
from gputui.ui.recording_actions import RecordingActions
from gputui.ui.screens.monitor import MonitorScreen
from gputui.ui.session.cleancheck import CleanChecks
from gputui.ui.session.context import Session, Settings, Surface, TextFetcher
from gputui.ui.session.hosts import HostKeyAcceptor, Hosts, HostState
from gputui.ui.session.killflow import KillFlow
from gputui.ui.session.recorder import SessionRecorder
from gputui.ui.theme import ThemeStore

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.ui.screens.fleet import FleetScreen

# The dialogs are imported when one is first shown, the fleet view by whoever builds it: the first screen
# needs none of them, and each module loaded is resident for the whole run.

Clock = Callable[[], float]
FLEET_SCREEN = "fleet"
"""Name the fleet screen is installed under (kept while a host is shown, with its cursor, sort and filter)."""
FLEET_HOSTS_MAX = 32
"""Hosts that can be opened from the fleet view in one session: each keeps a link and a thread."""
TICK_S = 1.0
NOTIFICATIONS_SHOWN = 3
"""Notifications on screen at once (each of another kind): more would reach below the GPU panel."""


class GpuTuiApp(RecordingActions, App[int]):
    """gputui: one screen for GPU memory, the processes holding it, what is stuck, and the clean slate.

    Args:
        targets: Host targets, shown in this order (number keys select them).
        link_factory: Makes a fresh, unopened link for a target (called again on every reconnect).
        baselines_for: The clean-slate baselines of a target.
        read_only, memory_interval_s, process_interval_s, escalate_s, check_timeout_s, notify_timeout_s:
            See ``Settings``.
        clock: Epoch seconds source for ages, check durations and receipts (tests freeze it).
        audit_dir: Where the audit log goes (None: the XDG state directory).
        audit: Write the audit log (False: ``--no-audit``, and the demo, whose kills are simulated).
        accept_host_key: Records a host key the user accepted, called with ``UnknownHostKey.hop`` and
            ``.key`` on a thread (default ``gputui.transports.ssh.hostkeys.trust.accept_host_key``).
        retry_base_s: Upper bound of the first reconnect delay after a transient error, seconds.
        retry_cap_s: Largest reconnect delay, seconds.
        fleet: The fleet view, shown first; ``targets`` may then be empty, and hosts opened from it are
            added as they are opened.
        theme: The Textual theme to start with (None: the one last chosen, else Textual's default).
        theme_store: Where the chosen theme is kept between runs (None: nowhere).
        servers: The inference servers' state machines, with their stall windows (default: 30 s everywhere).
        replay: A recording to replay (``gputui replay``): the links are its ``ReplayLink``s, their samples
            are shown as recorded, nothing is signalled or asked of a host, and a time bar moves through it.
        record: Record the session to this new file from the start (``--record``).
    """

    CSS_PATH = "app.tcss"
    TITLE = "gputui"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        *keymap.bindings(keymap.APP),
        *keymap.bindings(keymap.RECORDING),
        *keymap.bindings(keymap.REPLAY),
    ]

    def __init__(
        self,
        targets: Sequence[str],
        link_factory: Callable[[str], HostLink],
        baselines_for: Callable[[str], Baselines] | None = None,
        *,
        read_only: bool = False,
        clock: Clock | None = None,
        memory_interval_s: float = MEMORY_INTERVAL_S,
        process_interval_s: float = 3.0,
        escalate_s: float = DEFAULT_ESCALATE_S,
        check_timeout_s: float = 60.0,
        notify_timeout_s: float = 8.0,
        audit_dir: Path | None = None,
        audit: bool = True,
        accept_host_key: HostKeyAcceptor | None = None,
        retry_base_s: float = 1.0,
        retry_cap_s: float = 30.0,
        fleet: FleetScreen | None = None,
        theme: str | None = None,
        theme_store: ThemeStore | None = None,
        servers: ServerWatch | None = None,
        probe_after_check: bool = False,
        replay: ReplayControl | None = None,
        record: str | None = None,
    ) -> None:
        super().__init__()
        if not targets and fleet is None:
            raise ValueError("at least one target is needed")
        self.settings = Settings(
            read_only or replay is not None,
            memory_interval_s,
            process_interval_s,
            escalate_s,
            check_timeout_s,
            notify_timeout_s,
            probe_after_check,
            replay=replay is not None,
        )
        self.replay = replay
        self._record_path = record
        self.clock: Clock = clock or time.time
        self.fleet = fleet
        self.audit = AuditLog(audit_dir, self.clock) if audit and replay is None else None
        """The kill audit log; None: kills are not audited (``--no-audit``, the demo, a replay)."""
        self.hosts = Hosts(
            link_factory,
            baselines_for or (lambda _target: Baselines()),
            self.post_message,
            accept_host_key or ssh_hostkeys.accept_host_key,
            retry_base_s=retry_base_s,
            retry_cap_s=retry_cap_s,
            servers=servers,
            judged=replay is not None,
        )
        self.recorder = SessionRecorder(
            lambda: [host.target for host in self.hosts], memory_interval_s, self.clock
        )
        """The session's recording (``--record``, ``w``)."""
        if self.audit is not None:
            self.audit.observer = self.recorder.audit
        for target in targets:
            self.hosts.add(target)
        surface = Surface(
            notify=self._notify,
            post=self.post_message,
            push=self.push_screen,
            leave=self.leave,
            show_fleet=self.back_to_fleet,
            shows=self.shows,
            redraw=self.host_changed,
            confirm_kill=self._confirm_kill,
            choose_owner=self._choose_owner,
            confirm_reset=self._confirm_reset,
            from_thread=self.call_from_thread,
            later=self.set_timer,
        )
        self.session = Session(
            self, self.settings, self.clock, self.hosts, self.audit, surface, fleet is not None
        )
        self.notices = self.session.notices
        """The latest notifications as (severity, title, message), newest last."""
        self.checks = CleanChecks(self.session)
        self.kills = KillFlow(self.session, self.checks)
        self.monitor = MonitorScreen(self.session, self.checks, self.kills)
        self._operations: dict[str, Notification] = {}
        """The notification of each kind (an operation such as a kill or a check, else a title and severity),
        replaced as the operation goes on or the same kind is said again."""
        self._opened_from_fleet: set[str] = set()
        """Targets the fleet view opened: Esc back to it closes them."""
        self._asking_host_key: set[str] = set()
        """Targets whose unknown host key the user is being asked about now."""
        self._theme_store = theme_store
        self._theme = theme or (theme_store.load() if theme_store is not None else None)

    # -- life ------------------------------------------------------------------------------------------

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, its Linux one with an input thread that sleeps until a key comes
        (``quiet_input``)."""
        driver_class = super().get_driver_class()
        from textual.drivers.linux_driver import LinuxDriver

        if driver_class is LinuxDriver:
            from gputui.ui.quiet_input import QuietLinuxDriver

            return QuietLinuxDriver
        return driver_class

    def on_mount(self) -> None:
        if self._theme is not None and self._theme in self.available_themes:
            self.theme = self._theme
        if self._theme_store is not None:
            self.theme_changed_signal.subscribe(self, lambda theme: self._keep_theme(theme.name))
            if self._theme_store.warning:
                self.say(visible(self._theme_store.warning, 300), severity="warning")
        for host in self.hosts:
            self.hosts.start(host)
        self.start_recording_or_replay(self._record_path)
        self.set_interval(TICK_S, self._tick)
        if self.fleet is not None:
            self.install_screen(self.fleet, FLEET_SCREEN)
            self.show_fleet()

    last_input_s: float = 0.0
    """Monotonic time of the user's last key or mouse press: background work paces itself by it."""

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown)) and not event.is_forwarded:
            self.last_input_s = time.monotonic()
        await super().on_event(event)

    def get_default_screen(self) -> MonitorScreen:
        """The monitor is the first screen; the fleet view, the GPU view and the dialogs go on top of it."""
        return self.monitor

    def _tick(self) -> None:
        if self.hosts.stopping.is_set():
            return
        self.checks.tick()
        self.monitor.tick()

    def _keep_theme(self, name: str) -> None:
        if self._theme_store is not None:
            self._theme_store.save(name)

    async def action_quit(self) -> None:
        """Leave; with kills under way, first let them finish (``q`` again abandons them)."""
        if self.kills.quit():
            self.leave()

    def leave(self, message: Text | None = None) -> None:
        """Stop every host and exit, printing ``message`` after the app has left."""
        self.hosts.stop()
        self.recorder.stop(wait_s=2.0)
        self.exit(0, message=message)

    def on_unmount(self) -> None:
        self.hosts.stop()
        self.recorder.stop(wait_s=2.0)

    # -- what the screens and the flows use ------------------------------------------------------------

    def say(
        self, message: str, *, severity: str = "information", title: str = "", operation: str | None = None
    ) -> None:
        """A notification; ``message`` may carry machine text (already visible): never parsed as markup.

        ``operation``: the notification replaces the one said before for the same operation (a kill from
        sent to escalated to gone, then its clean slate), so one operation is one notification.
        """
        self.session.say(message, severity=severity, title=title, operation=operation)

    def _confirm_kill(
        self,
        plan: KillPlan,
        snapshot: HostSnapshot,
        fetch_text: TextFetcher,
        decided: Callable[[bool | None], None],
    ) -> None:
        from gputui.ui.screens.confirm_kill import ConfirmKillScreen

        self.push_screen(ConfirmKillScreen(plan, snapshot, fetch_text), decided)

    def _choose_owner(
        self, target: str, owners: Sequence[Owner], picked: Callable[[tuple[str, str] | None], None]
    ) -> None:
        from gputui.ui.screens.choose_owner import ChooseOwnerScreen

        self.push_screen(ChooseOwnerScreen(target, owners), picked)

    def _confirm_reset(self, plan: ResetPlan, decided: Callable[[bool | None], None]) -> None:
        from gputui.ui.screens.confirm_reset import ConfirmResetScreen

        self.push_screen(ConfirmResetScreen(plan), decided)

    def _notify(self, message: str, severity: str, title: str, operation: str | None) -> None:
        notification = Notification(
            message,
            title,
            severity,  # type: ignore[arg-type]
            self.settings.notify_timeout_s,
            markup=False,
        )
        self.recorder.note(message, severity, title)
        # One notification per kind on screen: an operation's own, else one per title and severity (five
        # refused keys read as one "refused", the latest), so that they never stack over the panels.
        kind = operation if operation is not None else f"{severity}\x00{title}"
        previous = self._operations.pop(kind, None)
        if previous is not None:
            # Textual has no update for a toast: the old one goes, the new one takes its place.
            self._unnotify(previous, refresh=False)
        self._operations = {k: n for k, n in self._operations.items() if not n.has_expired}
        self._operations[kind] = notification
        for oldest in list(self._notifications)[: max(0, len(self._notifications) - NOTIFICATIONS_SHOWN + 1)]:
            self._unnotify(oldest, refresh=False)  # still in ``notices``; the newest stay over the GPUs
        # Added at once rather than through a Notify message (``App.notify``): an update said right after
        # (the kill's outcome in the same batch as its start) must find this one to replace it.
        self._notifications.add(notification)
        self._refresh_notifications()

    def shows(self, host: HostState) -> bool:
        """Whether the monitor shows ``host`` now (its clean-slate line is on screen)."""
        return self.screen is self.monitor and self.monitor.active is host

    def host_changed(self, host: HostState) -> None:
        """Something but data changed about ``host``: the screens showing it redraw."""
        self.monitor.host_changed(host)

    def _data_changed(self, changed: list[tuple[HostState, bool]]) -> None:
        self.monitor.hosts_changed(changed)
        self.session.data_changed.publish(changed)

    # -- what the hosts' threads report ----------------------------------------------------------------

    def on_hosts_sampled(self, message: Hosts.Sampled) -> None:
        now_s = self.clock()
        changed: list[tuple[HostState, bool]] = []
        for target, (snapshot, forced) in self.hosts.take(message).items():
            host = self.hosts.get(target)
            if host is None:
                continue
            self.recorder.sample(target, snapshot)
            waiting = host.fitness_due_s
            for severity, title, text in host.apply(snapshot, now_s):
                self.say(text, severity=severity, title=title)
            if host.fitness_due_s is not None and waiting is None:
                self.hosts.sample_now(host)  # a forced sample reads the GPUs' fitness
            self.checks.memory_sample(host, snapshot)
            changed.append((host, forced))
        if changed:
            self._data_changed(changed)
        self.recording_problem()

    def on_hosts_failed(self, message: Hosts.Failed) -> None:
        host = self.hosts.get(message.target)
        if host is None or self.hosts.stopping.is_set():
            return
        first = host.failed(message.error, message.retrying, self.clock())
        if first:
            self.recorder.error(host.target, message.error)
        cause = message.cause
        if host.halted and isinstance(cause, UnknownHostKey):
            self._ask_host_key(host.target, cause)  # the question says it all; a toast would cover it
        elif first:
            suffix = " · not retrying: press r to try again" if host.halted else ""
            self.say(fit(message.error, 300) + suffix, severity="error", title="host error")
        self.host_changed(host)

    def on_hosts_clean_confirmed(self, message: Hosts.CleanConfirmed) -> None:
        self.checks.confirmed(message)

    def on_hosts_probed(self, message: Hosts.Probed) -> None:
        """A readiness probe ended: keep its report for the host's verdicts, show the sample taken after it,
        and say what it proved (the GPUs fact's line, or the first GPU that did not take work)."""
        host = self.hosts.get(message.target)
        if host is None:
            return
        host.probing = False
        name = visible(host.target, 40)
        if message.report is None or message.snapshot is None:
            self.say(f"{name}: probe failed: {fit(message.error, 200)}", severity="error", title="probe")
            self.host_changed(host)
            return
        host.probe = message.report
        self.recorder.sample(host.target, message.snapshot)
        for severity, title, text in host.apply(message.snapshot, self.clock()):
            self.say(text, severity=severity, title=title)
        self._data_changed([(host, True)])
        verdict = message.snapshot.verdict
        facts = None if verdict is None else verdict.facts
        if facts is not None:
            line = facts.gpus.line
        else:
            line = verdict.reasons[0] if verdict is not None and verdict.reasons else "no verdict"
        severity = "information" if facts is not None and facts.gpus.ok else "error"
        self.say(f"{name}: {fit(line, 300)}", severity=severity, title="probe")

    def _ask_host_key(self, target: str, error: UnknownHostKey) -> None:
        """Offer to accept an unknown host key; a changed or revoked key never gets here."""
        if target in self._asking_host_key:
            return
        self._asking_host_key.add(target)

        def decided(accepted: bool | None) -> None:
            self._asking_host_key.discard(target)
            if accepted:
                self.hosts.record_host_key(target, error)
            else:
                self.say(
                    f"{visible(target, 40)}: host key refused; not connecting (r asks again)",
                    severity="warning",
                    title="host key",
                )

        from gputui.ui.screens.host_key import HostKeyScreen

        self.push_screen(HostKeyScreen(target, error), decided)

    def on_hosts_host_key_recorded(self, message: Hosts.HostKeyRecorded) -> None:
        if message.failure is not None:
            self.say(
                f"{visible(message.target, 40)}: host key not recorded: {visible(message.failure, 300)}",
                severity="error",
                title="host key",
            )
            return
        error = message.error
        self.say(
            f"{visible(message.target, 40)}: {visible(error.key_type, 40)} {error.fingerprint} "
            "recorded for "
            f"{visible(error.lookup_name, 80)}; connecting",
            title="host key",
        )
        host = self.hosts.get(message.target)
        if host is not None:
            self.hosts.retry(host)
            self.host_changed(host)

    def on_kill_flow_started(self, message: KillFlow.Started) -> None:
        self.recorder.kill(message.target, "started", message.outcomes)
        self.kills.started(message)

    def on_kill_flow_finished(self, message: KillFlow.Finished) -> None:
        self.recorder.kill(message.target, "finished", message.outcomes, message.error)
        self.kills.finished(message)

    # -- the fleet view --------------------------------------------------------------------------------

    def show_fleet(self) -> None:
        """Show the fleet view on top of the monitor (the hosts opened from it keep streaming)."""
        if self.fleet is not None and self.screen is not self.fleet:
            self.push_screen(FLEET_SCREEN)

    def open_host(self, target: str) -> None:
        """Show ``target`` in the monitor, connecting to it first if it is not open yet."""
        host = self.hosts.get(target)
        if host is None:
            if len(self.hosts) >= FLEET_HOSTS_MAX:
                self.say(
                    f"{FLEET_HOSTS_MAX} hosts are open already: switch to one with Tab", severity="warning"
                )
                return
            host = self.hosts.add(target)
            self.hosts.start(host)
            if self.fleet is not None:
                self._opened_from_fleet.add(target)
        if self.fleet is not None and self.screen is self.fleet:
            self.pop_screen()
        self.monitor.active_index = self.hosts.index(host)
        self.host_changed(host)

    def back_to_fleet(self) -> None:
        """Back to the fleet view, closing the hosts opened from it (their pollers stop, their links close);
        a host with a kill under way stays open until it is done."""
        if self.fleet is None:
            return
        for target in sorted(self._opened_from_fleet):
            host = self.hosts.get(target)
            if host is not None and host.kills:
                self.say(
                    f"{visible(target, 40)}: a kill is under way: the host stays open until it is done",
                    severity="warning",
                )
                continue
            self._opened_from_fleet.discard(target)
            if host is not None:
                self.hosts.remove(host)
        self.monitor.active_index = 0
        self.show_fleet()

    def on_fleet_screen_open_host(self, message: FleetScreen.OpenHost) -> None:
        self.open_host(message.target)

    # -- the command palette ---------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is not self.monitor or not len(self.hosts):
            return  # the monitor's commands act on the shown host: none is shown
        for title, help_text, action in keymap.palette_entries(
            read_only=self.settings.read_only,
            hosts=len(self.hosts),
            fleet=self.fleet is not None,
            escalate_s=self.settings.escalate_s,
            replay=self.settings.replay,
        ):
            yield SystemCommand(title, help_text, partial(self.monitor.run_action, action))
        if len(self.hosts) > 1:
            for index, host in enumerate(self.hosts):
                yield SystemCommand(
                    f"Host {index + 1}: {visible(host.target, 40)}",
                    "Show this host",
                    partial(self.monitor.run_action, f"host({index})"),
                )
