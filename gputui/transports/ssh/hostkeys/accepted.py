"""Host keys the user accepted for the system ssh client to record, and who may record an unknown key.

Apart from ``trust`` (which reads and writes known_hosts through ``knownhosts``) so that a connection through
the system ssh, which checks host keys itself, loads neither.
"""

from __future__ import annotations

import threading

from gputui.core.link import LinkOptions
from gputui.core.model import Record
from gputui.transports.ssh.config import SshSettings


def records_unknown_keys(options: LinkOptions, settings: SshSettings) -> bool:
    """Whether a connection may record an unknown host key instead of refusing it: ``--accept-new``, or the
    user's own ``StrictHostKeyChecking accept-new`` for that host. A changed or revoked key, never."""
    return options.accept_new or settings.accepts_new_host_keys


# -- keys the user accepted for the system ssh client to record ----------------------------------------


class OfferedHostKey(Record):
    """An unknown host key the system ssh client refused, as the user is shown it (``UnknownHostKey.key``).

    ``accept()`` lets the next connection to ``target`` run with ``StrictHostKeyChecking=accept-new``: ssh
    records the key itself (in the file, the form and under the names its config says), and the link then
    checks that the key recorded for ``lookup_name`` is this one before it sends anything more.
    """

    target: str
    lookup_name: str
    key_type: str
    fingerprint: str

    def accept(self) -> str:
        """Have the next connection to ``target`` record this key; returns "" (ssh writes the line)."""
        with _accepted_lock:
            _accepted[self.target] = self
        return ""


_accepted: dict[str, OfferedHostKey] = {}
_accepted_lock = threading.Lock()


def take_accepted(target: str) -> OfferedHostKey | None:
    with _accepted_lock:
        return _accepted.pop(target, None)
