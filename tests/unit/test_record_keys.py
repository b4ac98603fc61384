"""The keys that record and replay: bound on the app, in the help where they work, refused where they do not,
with the one refusal line of a replay."""

from __future__ import annotations

from textual.binding import Binding

from gputui.transports.replay import REPLAY_REFUSAL
from gputui.ui import keymap
from gputui.ui.app import GpuTuiApp


def test_every_record_and_replay_key_is_bound_on_the_app_to_an_action_that_exists() -> None:
    bound = {
        name: b.action for b in GpuTuiApp.BINDINGS if isinstance(b, Binding) for name in b.key.split(",")
    }
    for scope in (keymap.RECORDING, keymap.REPLAY):
        for key in keymap.keys_of(scope):
            if key.builtin:
                continue
            assert bound.get(key.keys) == key.action, key
            assert hasattr(GpuTuiApp, f"action_{key.action.split('(')[0]}"), key


def test_a_replay_refuses_every_destructive_and_live_key_and_offers_its_own() -> None:
    scopes = keymap.MONITOR_HELP_SCOPES + keymap.RECORDING_HELP_SCOPES
    replaying = dict(
        keymap.help_rows(scopes, read_only=True, hosts=1, fleet=False, escalate_s=5.0, replay=True)
    )
    live = dict(keymap.help_rows(scopes, read_only=False, hosts=1, fleet=False, escalate_s=5.0))
    assert not {"k", "K", "T", "X", "R", "P", "c", "w"} & set(replaying)
    assert {">", "<", "[", "]", "+", "-", "p"} <= set(replaying)
    assert {"w", "c", "P", "k"} <= set(live)
    assert not {">", "<", "[", "]", "+", "-"} & set(live)
    for key in keymap.KEYS:
        why = keymap.why_off(key, read_only=True, hosts=1, fleet=False, replay=True)
        if key.destructive:
            assert why == REPLAY_REFUSAL, key
        elif key.live:
            assert why == f"replay: {key.display} asks the live host; a recording cannot be asked"
    titles = [
        t
        for t, _help, _action in keymap.palette_entries(
            read_only=True, hosts=1, fleet=False, escalate_s=5.0, replay=True
        )
    ]
    assert not any(t.startswith(("Kill", "Reset", "Probe", "Clean")) for t in titles)
