"""Remote hosts over SSH: the collector is shipped to the remote ``python3`` and streams back JSON lines.

Nothing of gputui is installed on the remote host. ``SshLink.open()`` resolves the target as OpenSSH would
(``config``), logs in with paramiko (``paramiko/``: ``connect``, TCP or ProxyJump hops as ``direct-tcpip``
channels, each hop resolved, host-key checked (``hostkeys/``) and authenticated (``auth``) on
its own) or has the system ssh client do all of that (``openssh/``: the child ``process``, its
``failures``, the session ``link``), then runs
``python3 -u -c <loader>`` and writes the collector's bundle to its stdin (``payload``, over
``gputui.transports.ssh.bundle``). The command line holds only fixed text and validated numbers; nothing from
process data or user strings ever becomes part of it (health URLs travel as JSON in a ``configure`` command).
After the bundle, stdin carries JSON-line commands and stdout JSON-line messages (``stream``). A host without
python3 gets a fixed POSIX sh loop around nvidia-smi and ps instead (``reduced``: monitoring only).

Every remote read has a deadline: connect, banner, key exchange, auth, channel open and the collector's
hello are bounded by the connect timeout; after that, a link that delivers no data for
``3 × memory_interval_s`` is broken (``next_snapshot`` raises "no data for 3.2 s"). The caller shows the
host stale and opens it again with ``reconnect.Backoff`` between attempts. ``close()`` returns within 2 s
even when the host hangs.

Only ``paramiko/`` uses paramiko (and ``config``'s fallback parser): over the system ``ssh`` client the link
runs the same command and reads the same stream over a child process's pipes, and loads no paramiko. This
package loads its modules on first use of a name, so importing the others does not load paramiko either.
paramiko itself is loaded without invoke (``noinvoke``).

Boot identity: each hello and snapshot carries the remote ``/proc/sys/kernel/random/boot_id``. A client that
remembers pids compares the boot ids of consecutive snapshots (the TUI forgets tagged processes on a new
one), and the collector refuses a kill that carries another boot's id.
"""

from __future__ import annotations

import importlib

from gputui.transports.ssh.noinvoke import block_invoke

block_invoke()  # before any module of this package imports paramiko

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers see; __getattr__ serves the same names at run time
    from typing import Any

    from gputui.transports.ssh.errors import AuthFailed as AuthFailed
    from gputui.transports.ssh.errors import SetupFailed as SetupFailed
    from gputui.transports.ssh.hostkeys.trust import accept_host_key as accept_host_key
    from gputui.transports.ssh.link import SshLink as SshLink
    from gputui.transports.ssh.payload import AgentPayload as AgentPayload
    from gputui.transports.ssh.payload import agent_loader as agent_loader
    from gputui.transports.ssh.payload import agent_payload as agent_payload
    from gputui.transports.ssh.payload import remote_command_line as remote_command_line
    from gputui.transports.ssh.reduced import reduced_command as reduced_command
    from gputui.transports.ssh.stream import LINE_CAP_BYTES as LINE_CAP_BYTES

_HOMES = {
    "AgentPayload": "payload",
    "AuthFailed": "errors",
    "LINE_CAP_BYTES": "stream",
    "SetupFailed": "errors",
    "SshLink": "link",
    "accept_host_key": "hostkeys.trust",
    "remote_command_line": "payload",
    "agent_loader": "payload",
    "agent_payload": "payload",
    "reduced_command": "reduced",
}
"""The names other modules import from this package, and the module of each (loaded on first use)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
