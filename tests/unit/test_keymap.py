"""One key table: every binding it makes runs an action that exists, and the README's key tables are made
from it."""

from __future__ import annotations

import pytest
from textual.binding import Binding
from textual.dom import DOMNode

from gputui.ui import keymap
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.choose_owner import ChooseOwnerScreen
from gputui.ui.screens.confirm_kill import ConfirmKillScreen
from gputui.ui.screens.fleet import FleetScreen
from gputui.ui.screens.gpu_detail import GpuDetailScreen
from gputui.ui.screens.help import HelpScreen
from gputui.ui.screens.host_key import HostKeyScreen
from gputui.ui.screens.monitor import MonitorScreen
from gputui.ui.widgets.filter_bar import FilterBar
from gputui.ui.widgets.findings_list import FindingsList
from gputui.ui.widgets.gpu_panel import GpuPanel
from gputui.ui.widgets.process_table import ProcessTable
from tests.integration._procs import REPO

OWNERS: dict[str, type[DOMNode]] = {
    keymap.APP: GpuTuiApp,
    keymap.MONITOR: MonitorScreen,
    keymap.PROCESSES: ProcessTable,
    keymap.FILTER: FilterBar,
    keymap.GPUS: GpuPanel,
    keymap.FINDINGS: FindingsList,
    keymap.GPU_VIEW: GpuDetailScreen,
    keymap.CONFIRM: ConfirmKillScreen,
    keymap.OWNER_CHOICE: ChooseOwnerScreen,
    keymap.HOST_KEY: HostKeyScreen,
    keymap.HELP: HelpScreen,
    keymap.FLEET: FleetScreen,
}


@pytest.mark.parametrize("scope", sorted(OWNERS))
def test_every_key_of_a_scope_is_bound_where_it_works_and_runs_an_action_that_exists(scope: str) -> None:
    owner = OWNERS[scope]
    bound = {name: b.action for b in owner.BINDINGS if isinstance(b, Binding) for name in b.key.split(",")}
    for key in keymap.keys_of(scope):
        if key.builtin:
            continue
        for name in key.keys.split(","):
            action = key.action if key.action != "host" else f"host({int(name) - 1})"
            action = action if action != "pick" else f"pick({int(name)})"
            assert bound.get(name) == action, (scope, name)
        assert hasattr(owner, f"action_{key.action.split('(')[0]}"), (owner, key.action)


def test_every_key_is_documented_once_per_scope() -> None:
    seen = set()
    for key in keymap.KEYS:
        for name in key.keys.split(","):
            assert (key.scope, name) not in seen, (key.scope, name)
            seen.add((key.scope, name))


@pytest.mark.parametrize(
    "scopes", [keymap.MONITOR_HELP_SCOPES, keymap.FLEET_HELP_SCOPES, keymap.RECORDING_HELP_SCOPES]
)
def test_the_readme_key_tables_are_the_key_table(scopes: tuple[str, ...]) -> None:
    readme = (REPO / "README.md").read_text()
    assert keymap.markdown_table(scopes) in readme


def test_the_sort_keys_name_every_order() -> None:
    from gputui.core.fleet import SORT_MODES as FLEET_SORT_MODES
    from gputui.ui.widgets.process_table import SORT_MODES

    (process_sort,) = [k for k in keymap.keys_of(keymap.MONITOR) if k.action == "sort"]
    (fleet_sort,) = [k for k in keymap.keys_of(keymap.FLEET) if k.action == "sort"]
    assert all(mode in process_sort.help for mode in SORT_MODES)
    assert all(mode in fleet_sort.help for mode in FLEET_SORT_MODES)


def test_read_only_and_one_host_leave_out_what_does_not_work() -> None:
    rows = dict(
        keymap.help_rows(keymap.MONITOR_HELP_SCOPES, read_only=True, hosts=1, fleet=False, escalate_s=2.0)
    )
    assert not {"k", "K", "T", "X", "Tab", "1–9"} & set(rows)
    assert "c" in rows
    listed = keymap.help_rows(
        keymap.MONITOR_HELP_SCOPES, read_only=False, hosts=2, fleet=True, escalate_s=2.0
    )
    assert ("T", "kill the selected tree: TERM, then KILL after 2 s") in listed
    assert ("t", "tree view on / off (as in nvitop and htop)") in listed
    assert {"Tab", "1–9"} <= {key for key, _ in listed}
    assert (
        "Esc",
        "clear the filter, then the tags; then, from the fleet view, back to it (closing the host opened "
        "from it)",
    ) in listed


def test_no_key_that_changes_the_view_in_nvitop_kills_here() -> None:
    """nvitop's and htop's view keys (t: tree, s: sort, /: filter, arrows, Home/End) never signal."""
    view_keys = {"t", "s", "slash", "up", "down", "home", "end", "left", "right", "question_mark", "f", "p"}
    for key in keymap.KEYS:
        if key.destructive:
            assert not view_keys & set(key.keys.split(",")), key


def test_a_key_that_does_nothing_says_why() -> None:
    (tree_kill,) = [k for k in keymap.keys_of(keymap.MONITOR) if k.action == "kill_tree"]
    (next_host,) = [k for k in keymap.keys_of(keymap.MONITOR) if k.action == "next_host"]
    why = keymap.why_off(tree_kill, read_only=True, hosts=1, fleet=False)
    assert why is not None
    assert why.startswith("read-only: T signals nothing")
    assert keymap.why_off(tree_kill, read_only=False, hosts=1, fleet=False) is None
    assert keymap.why_off(next_host, read_only=False, hosts=1, fleet=False) == "Tab: only one host is open"
