"""The monitor: one host's GPUs, health, findings and processes, its clean slate, and every host in a bar.

``MonitorView`` (``screens.monitor_view``) lays the panels out and draws them; this screen adds the keys
(``keymap.MONITOR``) and answers the widgets' messages. Every key answers: one that does nothing now
(read-only, one host, no fleet) says why in one line.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import replace

from textual.css.query import NoMatches
from textual.widgets import Footer, Input

from gputui.core.text import visible
from gputui.ui import keymap
from gputui.ui.screens.monitor_view import MonitorView
from gputui.ui.session.cleancheck import CleanChecks
from gputui.ui.session.context import Session
from gputui.ui.session.hosts import HostState
from gputui.ui.session.killflow import KillFlow
from gputui.ui.widgets.endpoint_panel import EndpointPanel
from gputui.ui.widgets.filter_bar import FilterBar
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.process_table import SORT_MODES, ProcessTable, fold_refusal

_KEYS_BY_ACTION = {key.action.split("(")[0]: key for key in keymap.keys_of(keymap.MONITOR)}
_KEYS_BY_FULL_ACTION = {key.action: key for key in keymap.keys_of(keymap.MONITOR)}
"""k (``kill('TERM')``) and K (``kill('KILL')``) share an action name: each finds its own row by the whole."""
_DESTRUCTIVE_ACTIONS = frozenset(key.action for key in keymap.keys_of(keymap.MONITOR) if key.destructive)
NARROW_FOOTER_ACTIONS = frozenset({"help", "kill('TERM')", "kill_all", "check"})
"""The keys a side pane's footer keeps (with the app's ``q``): the rest are in the help (``?``)."""
FLAT_SORT_DEFAULT = "gpu"
"""What ``t`` switches the tree view to the first time: most GPU memory first."""


class MonitorScreen(MonitorView):
    """The host view of the app (``GpuTuiApp`` pushes it first and feeds it)."""

    BINDINGS = keymap.bindings(keymap.MONITOR)

    def __init__(self, session: Session, checks: CleanChecks, kills: KillFlow) -> None:
        super().__init__(session)
        self._checks = checks
        self._kills = kills
        if session.settings.read_only:
            # The kill keys leave the footer; they stay bound, to say why they do nothing.
            for key, made in self._bindings.key_to_bindings.items():
                self._bindings.key_to_bindings[key] = [
                    replace(b, show=False) if b.action in _DESTRUCTIVE_ACTIONS else b for b in made
                ]
        self._footer_shows = {
            (key, b.action): b.show for key, made in self._bindings.key_to_bindings.items() for b in made
        }
        """Each binding's place in the footer at full width (a side pane shows ``NARROW_FOOTER_ACTIONS``)."""
        self._flat_sort = FLAT_SORT_DEFAULT
        """The order ``t`` goes back to when it turns the tree view off."""

    def watch_narrow(self, narrow: bool) -> None:
        super().watch_narrow(narrow)
        # A side pane's footer has room for a few keys only: those, whole, rather than all of them cut.
        bindings = self._bindings.key_to_bindings
        for key, made in bindings.items():
            bindings[key] = [
                replace(
                    b,
                    show=self._footer_shows.get((key, b.action), b.show)
                    and (not narrow or b.action in NARROW_FOOTER_ACTIONS),
                )
                for b in made
            ]
        with suppress(NoMatches):
            self.query_one(Footer).show_command_palette = not narrow
        self.refresh_bindings()

    # -- keys ------------------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":
            # Esc clears the filter first, then the tags, then goes back to the fleet; with none of them it is
            # not this screen's.
            host = self.active
            tagged = host is not None and bool(host.tagged)
            return bool(self.filter_text) or tagged or self.session.has_fleet
        # Every other key answers: one that does nothing now says why (``_refused``).
        return True

    def _refused(self, action: str) -> bool:
        """Whether the key of ``action`` does nothing now; if so, the user is told why in one line."""
        key = _KEYS_BY_FULL_ACTION.get(action) or _KEYS_BY_ACTION.get(action)
        if key is None:
            return False
        session = self.session
        why = keymap.why_off(
            key,
            read_only=session.settings.read_only,
            hosts=len(session.hosts),
            fleet=session.has_fleet,
            replay=session.settings.replay,
        )
        if why is not None:
            session.say(why, severity="warning", title="refused" if key.destructive else "")
        return why is not None

    def _selected_pids(self, host: HostState) -> list[int]:
        if host.tagged:
            return sorted(host.tagged)
        pid = self.query_one(ProcessTable).selected_pid
        return [] if pid is None else [pid]

    def _kill(self, signal: str, tree: bool = False, all_gpu: bool = False) -> None:
        host = self.active
        if host is None:
            return
        pids = [] if all_gpu else self._selected_pids(host)
        procs = self.query_one(ProcessTable)
        if not pids and not all_gpu and procs.row_count == 0:
            self.session.say("no GPU process is listed: nothing to signal", severity="warning")
            return
        fold = None if pids or all_gpu else procs.selected_fold
        if fold is not None:  # one row for many processes: a signal takes the ones picked, never a guess
            self.session.say(fold_refusal(fold), severity="warning")
            return
        self._kills.request(host, self.shown_snapshot(host), pids, signal, tree=tree, all_gpu=all_gpu)

    def action_kill(self, signal: str = "TERM") -> None:
        """Signal the tagged processes (or the selected one)."""
        if self._refused(f"kill('{signal}')"):
            return
        self._kill(signal if signal in ("TERM", "KILL", "INT") else "TERM")

    def action_kill_tree(self) -> None:
        """TERM the selected trees, children first, then KILL what is left after the escalation delay."""
        if self._refused("kill_tree"):
            return
        self._kill("TERM", tree=True)

    def action_kill_all(self) -> None:
        """Kill every GPU process tree on the shown host, then watch for the clean slate."""
        if self._refused("kill_all"):
            return
        self._kill("TERM", tree=True, all_gpu=True)

    def action_reset_gpu(self) -> None:
        """Plan a reset of the GPU under the GPU list's cursor and confirm it (``ui.session.resetflow``)."""
        from gputui.ui.session.resetflow import request_reset

        if self.session.settings.replay and self._refused("reset_gpu"):
            return
        host = self.active
        panel = self.query_one(GpuPanel)
        if host is None or not 0 <= panel.cursor < len(panel.gpus):
            self.session.say("no GPU to reset", severity="warning")
            return
        request_reset(self.session, host, panel.gpus[panel.cursor].index)

    def action_tag(self) -> None:
        host = self.active
        procs = self.query_one(ProcessTable)
        pids = set(procs.selected_pids)  # a fold's: every member
        if host is None:
            return
        if not pids:
            self.session.say("no process selected: nothing to tag", severity="warning")
            return
        if pids <= host.tagged:
            host.tagged.difference_update(pids)
        else:
            host.tagged.update(pids)
        self.refresh_bindings()  # Esc clears tags now, or no longer
        self._show_active()
        procs.action_cursor_down()

    def action_check(self) -> None:
        """Sample fast until every GPU is back at its baseline (or the deadline), then show a receipt."""
        if self._refused("check"):
            return
        if self.active is not None:
            self._checks.start(self.active)

    def action_probe(self) -> None:
        """Prove each GPU of the shown host takes work: a context, a buffer written and read back."""
        if self._refused("probe"):
            return
        if self.active is not None:
            self.session.probe(self.active)

    def action_filter(self) -> None:
        self.query_one("#body").add_class("-filtering")
        self.query_one(FilterBar).focus()

    def action_sort(self) -> None:
        self.sort_mode = SORT_MODES[(SORT_MODES.index(self.sort_mode) + 1) % len(SORT_MODES)]

    def action_tree(self) -> None:
        """The tree view on or off (nvitop's and htop's ``t``): off goes back to the last flat order."""
        if self.sort_mode == "tree":
            self.sort_mode = self._flat_sort
        else:
            self._flat_sort = self.sort_mode
            self.sort_mode = "tree"

    def action_refresh(self) -> None:
        """Take a sample now; on a host that stopped retrying, try to connect once more."""
        host = self.active
        if host is None:
            return
        session = self.session
        if host.halted:
            session.say(f"{visible(host.target, 40)}: trying again", title="reconnect")
            session.hosts.retry(host)
            self._show_active()
            return
        session.hosts.sample_now(host)

    def action_pause(self) -> None:
        self.paused = not self.paused

    def action_next_host(self) -> None:
        if self._refused("next_host"):
            return
        hosts = len(self.session.hosts)
        if hosts:
            self.active_index = (self.active_index + 1) % hosts

    def action_host(self, index: int) -> None:
        if self._refused("host"):
            return
        hosts = len(self.session.hosts)
        if 0 <= index < hosts:
            self.active_index = index
        else:
            self.session.say(f"{index + 1}: no such host ({hosts} are open: 1–{hosts})", severity="warning")

    def action_focus_findings(self) -> None:
        self.query_one(FindingsList).focus()

    def action_focus_gpus(self) -> None:
        self.query_one(GpuPanel).focus()

    def action_back(self) -> None:
        """Esc: clear the filter first, then the tags; without either, back to the fleet view (closing the
        host it opened)."""
        if self.filter_text:
            self.filter_text = ""
            self.query_one(FilterBar).value = ""
            return
        host = self.active
        if host is not None and host.tagged:
            count = len(host.tagged)
            host.tagged.clear()
            self.refresh_bindings()
            self._show_active()
            self.session.say(f"{count} tag{'s' if count != 1 else ''} cleared", title="tags")
            return
        self.session.show_fleet()

    def action_help(self) -> None:
        session = self.session
        rows = keymap.help_rows(
            keymap.MONITOR_HELP_SCOPES + keymap.RECORDING_HELP_SCOPES,
            read_only=session.settings.read_only,
            hosts=len(session.hosts),
            fleet=session.has_fleet,
            escalate_s=session.settings.escalate_s,
            replay=session.settings.replay,
        )
        # Loaded when first shown, as the GPU view is: the first screen has no use for either.
        from gputui.ui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen(rows, session.settings.read_only))

    # -- messages from the widgets ---------------------------------------------------------------------

    def on_findings_list_jump_to_process(self, message: FindingsList.JumpToProcess) -> None:
        procs = self.query_one(ProcessTable)
        if not procs.select_pid(message.pid) and self.filter_text:
            self.filter_text = ""
            self.query_one(FilterBar).value = ""
        if procs.select_pid(message.pid):
            procs.focus()
        else:
            self.session.say(f"pid {message.pid} is not listed any more", severity="warning")

    def on_process_table_refused(self, message: ProcessTable.Refused) -> None:
        self.session.say(message.text, severity="warning")

    def on_findings_list_left(self, _message: FindingsList.Left) -> None:
        self.query_one(ProcessTable).focus()

    def on_gpu_panel_left(self, _message: GpuPanel.Left) -> None:
        self.query_one(ProcessTable).focus()

    def on_gpu_panel_opened(self, message: GpuPanel.Opened) -> None:
        host = self.active
        if host is not None:
            from gputui.ui.screens.gpu_detail import GpuDetailScreen

            self.app.push_screen(GpuDetailScreen(self.session, host.target, message.index))

    def on_health_panel_rows_changed(self, _message: EndpointPanel.RowsChanged) -> None:
        self._size_top()

    def on_findings_list_lines_changed(self, _message: FindingsList.LinesChanged) -> None:
        self._size_top()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.filter_text = event.value

    def on_filter_bar_closed(self, _message: FilterBar.Closed) -> None:
        self.query_one("#body").remove_class("-filtering")
        self.query_one(ProcessTable).focus()
