"""The question an unknown SSH host key asks: accept and remember it, or refuse (the default).

Only an *unknown* key gets here. A changed or revoked key is an error with no way to accept it from the app:
someone may be in the middle, and the fix (removing a known_hosts line) must be a deliberate act.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from gputui.ui import keymap
from gputui.ui.widgets.fmt import safe_text

if TYPE_CHECKING:
    from gputui.transports.ssh.hostkeys.knownhosts import UnknownHostKey

KEYS_HINT = "a: accept and remember · Esc: refuse"
RISK_TEXT = (
    "Nothing has been sent to it yet. If this is a new or reinstalled host, compare the fingerprint with one "
    "read on the host itself (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub). If you did not expect a new key, "
    "someone may be between you and the host: accepting would let them see and answer everything gputui "
    "sends, kill commands included."
)


def host_key_details(target: str, error: UnknownHostKey) -> Table:
    """Host, known_hosts name, jump host (when the key is a hop's), key type and fingerprint; all literal."""
    table = Table(box=None, show_header=False, padding=(0, 1), expand=False)
    table.add_column(style="dim", no_wrap=True, min_width=11)
    # Folded, never cut: on a narrow pane the whole fingerprint must still be there to compare.
    table.add_column(overflow="fold")
    table.add_row(Text("host"), safe_text(target, 80, style="bold"))
    table.add_row(Text("known as"), safe_text(error.lookup_name, 80))
    if error.hop != target:
        table.add_row(Text("jump host"), safe_text(error.hop, 80, style="bold"))
    table.add_row(Text("key type"), safe_text(error.key_type, 40))
    table.add_row(Text("fingerprint"), safe_text(error.fingerprint, 80, style="bold yellow"))
    return table


class HostKeyScreen(ModalScreen[bool]):
    """Shows an unknown host key. ``a`` accepts (dismisses True), Esc refuses (False).

    Args:
        target: The target whose connection met the key.
        error: The refusal, carrying the hop, the key and its SHA256 fingerprint.
    """

    BINDINGS = keymap.bindings(keymap.HOST_KEY)

    def __init__(self, target: str, error: UnknownHostKey) -> None:
        super().__init__()
        self.target = target
        """The target this question is about."""
        self.error = error
        """The unknown key; the caller records ``error.key`` for ``error.hop`` when accepted."""

    def compose(self) -> ComposeResult:
        with Vertical(id="hostkey-dialog") as dialog:
            dialog.border_title = "Unknown host key"
            dialog.border_subtitle = KEYS_HINT
            title = Text("This host is not in known_hosts: ", style="bold")
            title.append_text(safe_text(self.error.hop, 60, style="bold"))
            yield Static(title, id="hostkey-title")
            yield Static(host_key_details(self.target, self.error), id="hostkey-details")
            yield Static(
                Text(RISK_TEXT),
                id="hostkey-risk",
            )
            yield Static(Text(KEYS_HINT, style="bold"), id="hostkey-hint")

    def action_accept(self) -> None:
        self.dismiss(True)

    def action_refuse(self) -> None:
        self.dismiss(False)
