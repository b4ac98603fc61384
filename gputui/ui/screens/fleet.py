"""The fleet view: every GPU host Prometheus knows, one line each, sortable and filterable.

A ``FleetPoller`` asks Prometheus on a thread of its own and hands each answer over as ``Updated``, its rows
already summarised on that thread; only the newest waiting answer is applied, so a slow screen never queues
more than one. A new order or filter reuses the rows on screen: a key costs the table's work, not 500
summaries. Rows are updated in place by
host name. Enter asks the app to open the host under the cursor over SSH (``OpenHost``); while another screen
is shown the poller asks nothing. When Prometheus is down, slow or erroring the last answer stays on screen,
its data ageing, with one line saying why, and every key keeps working.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Input

from gputui.core.fleet import SORT_MODES, FleetHost, FleetRow, FleetSample, matches, sort_key, summarize
from gputui.core.link import BadTarget
from gputui.core.text import fit, visible
from gputui.transports.freshness import LatestInbox
from gputui.transports.pacing import freeze_settled
from gputui.ui import keymap
from gputui.ui.screens.help import HelpScreen
from gputui.ui.session.fleet_poller import FleetPoller, FleetUpdate
from gputui.ui.widgets.border import set_border_title
from gputui.ui.widgets.filter_bar import FilterBar
from gputui.ui.widgets.fleet_notes import FleetNotes, notes_text
from gputui.ui.widgets.fleet_summary import FleetSummary, summary_text
from gputui.ui.widgets.fleet_table import FleetTable
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.key_footer import KeyFooter

FILTER_PLACEHOLDER = "filter: host, GPU model, server or state (Enter keeps, Esc clears)"
TICK_S = 1.0
"""Ages are redrawn this often while no fresh answer comes (Prometheus down or slow)."""


FLEET_KEY = "fleet"
"""The one key of the screen's inbox: only the newest answer of the poller waits."""


class FleetScreen(Screen[None]):
    """The fleet overview.

    Args:
        read: One query to Prometheus, analysed (blocks; called on the poller's thread).
        source_name: Where the data comes from, for the status line ("prometheus http://…").
        ssh_target: The SSH target of a host (raises ``BadTarget`` when its name cannot be one).
        refresh_s: Seconds between queries.
        stale_after_s: Data older than this is not shown as current.
        clock: Epoch seconds (tests freeze it).
    """

    BINDINGS = keymap.bindings(keymap.FLEET)

    sort_mode: reactive[str] = reactive(SORT_MODES[0])
    """The order of the rows, one of ``SORT_MODES``."""
    filter_text: reactive[str] = reactive("")
    """Only hosts whose name, GPU model, server or state contain this (case-insensitive) are shown."""

    class Updated(Message):
        """A new answer (or failure) of the poller is waiting in the screen's inbox."""

    @dataclass
    class OpenHost(Message):
        """The user asked to open ``host`` over SSH as ``target``."""

        target: str
        host: str

    def __init__(
        self,
        read: Callable[[], FleetSample],
        *,
        source_name: str,
        ssh_target: Callable[[FleetHost], str],
        refresh_s: float,
        stale_after_s: float,
        clock: Callable[[], float] = time.time,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        self._source_name = source_name
        self._ssh_target = ssh_target
        self._stale_after_s = stale_after_s
        self._clock = clock
        self._poller = FleetPoller(read, self._deliver, refresh_s, clock=clock)
        self._inbox: LatestInbox[str, tuple[FleetUpdate, dict[str, FleetRow]]] = LatestInbox()
        self._sample: FleetSample | None = None
        self._sample_received_s: float | None = None
        self._error: str | None = None
        self._hosts: dict[str, FleetHost] = {}
        self._rows: dict[str, FleetRow] = {}
        self.answers = 0
        """Answers applied so far (failures included), for tests and the benchmark."""

    @property
    def poller(self) -> FleetPoller:
        return self._poller

    @property
    def error(self) -> str | None:
        """The last query's failure, None when it answered."""
        return self._error

    def compose(self) -> ComposeResult:
        with Vertical(id="fleet-body"):
            yield FleetSummary(id="fleet-summary")
            yield FleetTable(id="fleet-table")
            with Vertical(id="fleet-detail"):
                yield GpuPanel(id="fleet-gpus")
                yield FleetNotes(id="fleet-notes")
            yield FilterBar(id="fleet-filter", placeholder=FILTER_PLACEHOLDER)
        yield KeyFooter()

    def on_mount(self) -> None:
        app = self.app
        self._poller.input_at = lambda: float(getattr(app, "last_input_s", 0.0))
        self.query_one(FleetTable).focus()
        self._show()
        self.set_interval(TICK_S, self._tick)
        self._poller.start()

    def on_unmount(self) -> None:
        self._poller.stop()

    def on_screen_suspend(self) -> None:
        self._poller.pause()

    def on_screen_resume(self) -> None:
        self._poller.resume()

    # -- data ------------------------------------------------------------------------------------------

    def _deliver(self, update: FleetUpdate) -> None:
        """The poller's callback (its thread): summarise the answer's hosts as they are when it arrives, keep
        the newest answer, post only when none was waiting."""
        rows: dict[str, FleetRow] = {}
        if update.sample is not None:
            rows = {host.name: summarize(host, 0.0, self._stale_after_s) for host in update.sample.hosts}
        if self._inbox.put(FLEET_KEY, (update, rows)):
            self.post_message(self.Updated())

    def on_fleet_screen_updated(self, message: Updated) -> None:
        message.stop()
        delivered = self._inbox.take().get(FLEET_KEY)
        if delivered is None:
            return
        update, rows = delivered
        self.answers += 1
        self._error = update.error
        if update.sample is None:
            self._show()
            return
        first = self._sample is None
        self._sample = update.sample
        self._sample_received_s = update.received_s
        self._hosts = {host.name: host for host in update.sample.hosts}
        if self._clock() - update.received_s < 1.0:
            self._rows = rows  # still what summarize would say: ages are whole seconds
            self._show(resummarize=False)
        else:
            self._show()
        if first:
            # The app is up and the fleet drawn: what exists now lives on, and the collector's full
            # collections, which stop every key while they run, need only walk what changes after it.
            self.call_after_refresh(freeze_settled)

    def _tick(self) -> None:
        received = self._sample_received_s
        late = received is None or self._clock() - received > 2 * self._poller.interval_s
        if self._error is not None or late:
            self._show()  # nothing fresh is coming: the data on screen ages, and may turn stale

    # -- drawing ---------------------------------------------------------------------------------------

    def _show(self, resummarize: bool = True) -> None:
        """Draw the rows; ``resummarize``: make them again from the hosts, their data aged to now."""
        since = 0.0 if self._sample_received_s is None else self._clock() - self._sample_received_s
        if resummarize or self._rows.keys() != self._hosts.keys():
            self._rows = {
                name: summarize(host, since, self._stale_after_s) for name, host in self._hosts.items()
            }
        needle = self.filter_text.strip().lower()
        shown = [row for name, row in self._rows.items() if matches(row, self._hosts[name], needle)]
        shown.sort(key=sort_key(self.sort_mode))
        table = self.query_one(FleetTable)
        with self.app.batch_update():
            table.show(shown)
            answer_age = None if self._sample_received_s is None else since
            summary = summary_text(
                self._source_name,
                list(self._rows.values()),
                len(shown),
                self.sort_mode,
                self.filter_text,
                self._error,
                answer_age,
            )
            self.query_one(FleetSummary).show(summary)
            self._show_detail(table.selected_host)

    def _show_detail(self, name: str | None) -> None:
        host = None if name is None else self._hosts.get(name)
        row = None if name is None else self._rows.get(name)
        gpus = self.query_one("#fleet-gpus", GpuPanel)
        notes = self.query_one(FleetNotes)
        if host is None or row is None:
            set_border_title(gpus, "GPUs")
            gpus.show((), {}, {}, message="no host selected" if self._hosts else "no hosts yet")
            notes.show(Text(""))
            return
        set_border_title(gpus, f"GPUs · {fit(host.name, 40)}")
        live = row.state == "live"
        verdict = host.snapshot.verdict
        baselines = {}
        if verdict is not None:
            baselines = {g.index: g.baseline_mib + verdict.tolerance_mib for g in verdict.gpus}
        message = fit(row.error or "no GPU reported", 200)
        gpus.show(host.snapshot.gpus if live else (), {}, baselines, message=message)
        notes.show(notes_text(host, row, self._target_or_none(host)))

    def _target_or_none(self, host: FleetHost) -> str | None:
        try:
            return self._ssh_target(host)
        except BadTarget:
            return None

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        message.stop()
        self._show_detail(message.row_key.value)

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        message.stop()
        self.action_open_host()

    def watch_sort_mode(self) -> None:
        if self.is_mounted:
            self._show(resummarize=False)

    def watch_filter_text(self) -> None:
        if self.is_mounted:
            self._show(resummarize=False)

    # -- actions ---------------------------------------------------------------------------------------

    def action_open_host(self) -> None:
        """Open the host under the cursor over SSH, in the same app."""
        name = self.query_one(FleetTable).selected_host
        host = None if name is None else self._hosts.get(name)
        if host is None:
            self.notify("no host to open", severity="warning", markup=False)
            return
        try:
            target = self._ssh_target(host)
        except BadTarget as exc:
            self.notify(visible(str(exc), 300), severity="error", title="cannot open", markup=False)
            return
        self.post_message(self.OpenHost(target, host.name))

    def action_filter(self) -> None:
        self.query_one("#fleet-body").add_class("-filtering")
        self.query_one(FilterBar).focus()

    def action_clear_filter(self) -> None:
        self.query_one(FilterBar).value = ""
        self.filter_text = ""

    def action_sort(self) -> None:
        self.sort_mode = SORT_MODES[(SORT_MODES.index(self.sort_mode) + 1) % len(SORT_MODES)]

    def action_refresh(self) -> None:
        self._poller.refresh_now()

    def action_help(self) -> None:
        rows = keymap.help_rows(
            keymap.FLEET_HELP_SCOPES, read_only=False, hosts=0, fleet=True, escalate_s=0.0
        )
        self.app.push_screen(HelpScreen(rows, read_only=False))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if event.input.id == "fleet-filter":
            self.filter_text = event.value

    def on_filter_bar_closed(self, message: FilterBar.Closed) -> None:
        message.stop()
        self.query_one("#fleet-body").remove_class("-filtering")
        self.query_one(FleetTable).focus()
