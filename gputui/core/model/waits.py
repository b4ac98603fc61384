"""Where a stuck thread waits in the kernel (``protocol.PROCESS_WAITS``), read off the wire.

Every field is checked and bounded on the way in (the collector may not be gputui's): a kernel function or
module name is kept only when it is one (letters, digits, ``_``, ``.``, ``$``; a module also ``-``), else it
is unknown (None), never shown as sent.
"""

from __future__ import annotations

import math

from gputui.core.model.record import Record
from gputui.core.model.wire import opt_float, opt_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WAITS_MAX = 8
"""At most this many stuck threads of one process are taken from a collector."""
NAME_CHARS = 128
NVIDIA_MODULE_PREFIX = "nvidia"
"""nvidia, nvidia_uvm, nvidia_modeset, nvidia_drm, nvidia_peermem: the driver's kernel modules."""
STUCK_STATES = ("D", "R")

_SYMBOL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.$")
_MODULE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _name(value: Any, allowed: frozenset[str]) -> str | None:
    """A kernel name as sent when it is one, else None (unknown)."""
    if not isinstance(value, str) or not 0 < len(value) <= NAME_CHARS or not set(value) <= allowed:
        return None
    return value


class ThreadWait(Record):
    """One stuck thread of a process and where it waits in the kernel.

    Attributes:
        tid: The thread.
        state: ``D`` (uninterruptible sleep) or ``R`` (runs in the kernel and has not returned to its program
            since ``since``).
        symbol: The kernel function it is in; None: unknown (no wait channel, no readable stack).
        module: The kernel module of that function (``nvidia_uvm``); None: the kernel itself where ``stack``,
            else unknown.
        stack: The place was read from its kernel stack (root), else from its wait channel (no module).
        since: Epoch seconds (the host's clock) since when the collector has seen it so; None: not known.
        killed: A SIGKILL waits for it: it was killed and is still there; None: not known.
    """

    tid: int
    state: str
    symbol: str | None = None
    module: str | None = None
    stack: bool = False
    since: float | None = None
    killed: bool | None = None

    @property
    def in_nvidia(self) -> bool:
        """Whether its stack puts it in a function of an NVIDIA kernel module (known, never guessed from a
        name)."""
        return self.stack and self.module is not None and self.module.startswith(NVIDIA_MODULE_PREFIX)

    @classmethod
    def from_dict(cls, data: Any) -> ThreadWait | None:
        if not isinstance(data, dict):
            return None
        tid, state = opt_int(data.get("tid")), data.get("state")
        if tid is None or tid <= 0 or state not in STUCK_STATES:
            return None
        killed, since = data.get("killed"), opt_float(data.get("since"))
        return cls(
            tid=tid,
            state=state,
            symbol=_name(data.get("symbol"), _SYMBOL_CHARS),
            module=_name(data.get("module"), _MODULE_CHARS),
            stack=data.get("stack") is True,
            since=since if since is not None and math.isfinite(since) else None,
            killed=killed if isinstance(killed, bool) else None,
        )


def thread_waits(value: Any) -> tuple[ThreadWait, ...]:
    """The stuck threads a collector sent for one process (at most ``WAITS_MAX``; malformed ones dropped)."""
    if not isinstance(value, list):
        return ()
    found = (ThreadWait.from_dict(item) for item in value[:WAITS_MAX])
    return tuple(wait for wait in found if wait is not None)
