"""What the screens and the flows share: the session's settings, clock, hosts, audit log and notifications,
and the signal the screens above the monitor subscribe to for new data.

The App makes one ``Session`` and hands it to what it creates (the clean checks, the kill flow, the
screens): nothing below the App reaches up to it, and no screen is found by walking the screen stack.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.dom import DOMNode
from textual.message import Message
from textual.screen import Screen
from textual.signal import Signal

from gputui.agent.protocol import MEMORY_INTERVAL_S
from gputui.core.actions import DEFAULT_ESCALATE_S, AuditLog, KillPlan, ResetPlan
from gputui.core.model import HostSnapshot, Owner, Proc
from gputui.core.text import visible
from gputui.ui.session.hosts import Hosts, HostState
from gputui.ui.widgets.host_bar import HostStatus

Clock = Callable[[], float]
TextFetcher = Callable[[Proc], Proc]
"""Reads a process's whole command line (``core.link.process_text`` over the host's link)."""

Changed = list[tuple[HostState, bool]]
"""Hosts whose data changed, each with whether the change was a forced (full) sample."""


@dataclass(frozen=True)
class Settings:
    """What the user chose for this session.

    Attributes:
        read_only: Remove every destructive key and refuse kills.
        memory_interval_s: The normal sampling interval (restored after a clean-slate check).
        process_interval_s: The normal process-list interval (restored after a clean-slate check).
        escalate_s: Seconds between TERM and KILL for tree kills; after a single TERM or KILL, the agent
            says after this long whether the process is gone.
        check_timeout_s: A clean-slate check gives up after this many seconds.
        notify_timeout_s: Seconds a notification stays.
        probe_after_check: After a clean-slate check ends clean, prove the GPUs take work (``P``): the
            config's ``probe_after_check``.
        replay: The hosts are a recording's (``gputui replay``): nothing is signalled or asked of a host.
    """

    read_only: bool = False
    memory_interval_s: float = MEMORY_INTERVAL_S
    process_interval_s: float = 3.0
    escalate_s: float = DEFAULT_ESCALATE_S
    check_timeout_s: float = 60.0
    notify_timeout_s: float = 8.0
    probe_after_check: bool = False
    replay: bool = False


@dataclass(frozen=True)
class Surface:
    """What the session asks of the App that shows it (the App passes its own methods)."""

    notify: Callable[[str, str, str, str | None], None]
    """Show a notification: (message, severity, title, operation); the message is never parsed as markup, and
    one with an operation replaces the one said before for it."""
    post: Callable[[Message], bool]
    """Post a message to the App (thread-safe)."""
    push: Callable[..., object]
    """Push a screen, with an optional callback for its result."""
    leave: Callable[[Text | None], None]
    """Stop every host and exit, printing the text after the app has left."""
    show_fleet: Callable[[], None]
    """Back to the fleet view, closing the hosts opened from it (does nothing without one)."""
    shows: Callable[[HostState], bool]
    """Whether the monitor shows the host now (its clean-slate line is on screen)."""
    redraw: Callable[[HostState], None]
    """Something but data changed about a host: the views showing it redraw."""
    confirm_kill: Callable[[KillPlan, HostSnapshot, TextFetcher, Callable[[bool | None], None]], None]
    """Ask the user to confirm a kill plan (made from that snapshot); the callback gets the answer."""
    choose_owner: Callable[[str, Sequence[Owner], Callable[[tuple[str, str] | None], None]], None]
    """Ask whose GPU jobs on a host a kill-all takes; the callback gets (kind, id), ("all", "") or None."""
    confirm_reset: Callable[[ResetPlan, Callable[[bool | None], None]], None]
    """Ask the user to confirm a GPU reset plan; the callback gets the answer."""
    from_thread: Callable[..., object]
    """Call a function on the event loop from another thread, and wait for it."""
    later: Callable[[float, Callable[[], None]], object]
    """Call a function on the event loop after a delay in seconds."""


class Session:
    """One run of the TUI: settings, clock, hosts, audit log, notifications, and the data signal.

    Args:
        owner: The node that owns the signal (the App).
        settings: What the user chose.
        clock: Epoch seconds source (tests freeze it).
        hosts: The watched hosts.
        audit: The kill audit log (None: kills are not audited).
        surface: What the session asks of the App.
        has_fleet: The session has a fleet view.
    """

    def __init__(
        self,
        owner: DOMNode,
        settings: Settings,
        clock: Clock,
        hosts: Hosts,
        audit: AuditLog | None,
        surface: Surface,
        has_fleet: bool,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.hosts = hosts
        self.audit = audit
        self.has_fleet = has_fleet
        self._surface = surface
        self.data_changed: Signal[Changed] = Signal(owner, "data-changed")
        """Published with the hosts whose data changed; views above the monitor subscribe to it."""
        self.notices: deque[tuple[str, str, str]] = deque(maxlen=100)
        """The latest notifications as (severity, title, message), newest last."""

    def say(
        self, message: str, *, severity: str = "information", title: str = "", operation: str | None = None
    ) -> None:
        """A notification; ``message`` may carry machine text (already visible): never parsed as markup.

        ``operation``: it replaces the notification said before for the same operation (a kill from sent to
        gone, then its clean slate), so one operation is one notification.
        """
        self.notices.append((severity, title, message))
        self._surface.notify(message, severity, title, operation)

    def shows(self, host: HostState) -> bool:
        """Whether the monitor shows ``host`` now."""
        return self._surface.shows(host)

    def host_status(self, host: HostState) -> HostStatus:
        """What the host bar says about ``host`` now."""
        return host.status(self.clock(), self.settings.memory_interval_s)

    def probe(self, host: HostState) -> None:
        """Prove each GPU of ``host`` takes work (``P``; after a clean check with ``probe_after_check``); the
        App gets ``Hosts.Probed``. One probe per host at a time."""
        if host.probing:
            self.say(f"{visible(host.target, 40)}: a probe is already running", severity="warning")
            return
        host.probing = True
        self.hosts.probe(host)
        self.host_changed(host)

    def host_changed(self, host: HostState) -> None:
        """Something but data changed about ``host``: the views showing it redraw."""
        self._surface.redraw(host)

    def post_message(self, message: Message) -> bool:
        """Post ``message`` to the App (thread-safe)."""
        return self._surface.post(message)

    def push_screen(self, screen: Screen[Any], callback: Callable[..., object] | None = None) -> None:
        """Show ``screen`` on top; ``callback`` gets its result."""
        self._surface.push(screen, callback)

    def confirm_kill(
        self,
        plan: KillPlan,
        snapshot: HostSnapshot,
        fetch_text: TextFetcher,
        decided: Callable[[bool | None], None],
    ) -> None:
        """Ask the user to confirm ``plan``; ``decided`` gets True to send it."""
        self._surface.confirm_kill(plan, snapshot, fetch_text, decided)

    def choose_owner(
        self, target: str, owners: Sequence[Owner], picked: Callable[[tuple[str, str] | None], None]
    ) -> None:
        """Ask whose GPU jobs on ``target`` a kill-all takes; ``picked`` gets the answer."""
        self._surface.choose_owner(target, owners, picked)

    def confirm_reset(self, plan: ResetPlan, decided: Callable[[bool | None], None]) -> None:
        """Ask the user to confirm the reset ``plan``; ``decided`` gets True to run it."""
        self._surface.confirm_reset(plan, decided)

    def from_thread(self, call: Callable[..., object], *args: object, **kwargs: object) -> None:
        """Run ``call`` on the event loop (from a worker thread)."""
        self._surface.from_thread(call, *args, **kwargs)

    def set_timer(self, delay_s: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the event loop ``delay_s`` seconds from now."""
        self._surface.later(delay_s, callback)

    def leave(self, message: Text | None = None) -> None:
        """Stop every host and exit, printing ``message`` after the app has left."""
        self._surface.leave(message)

    def show_fleet(self) -> None:
        """Back to the fleet view, closing the hosts opened from it."""
        self._surface.show_fleet()
