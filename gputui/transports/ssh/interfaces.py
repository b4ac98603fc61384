"""What ``SshLink`` needs of an SSH client (``Session``) and of the commands it runs (``Pipe``): paramiko's
(``paramiko.connect``) and the system ssh's (``openssh.link``) implement them. Imported by type checkers
only."""

from __future__ import annotations

from typing import Protocol

from gputui.core.link import LinkError
from gputui.transports.ssh.config import SshSettings


class Pipe(Protocol):
    """The collector's stdin, stdout and stderr. Calls raise OSError or EOFError when the pipe broke."""

    def recv(self, max_bytes: int) -> bytes | None:
        """Up to ``max_bytes`` of stdout; b"" at its end; None when nothing came within about a second."""

    def send(self, data: memoryview) -> int | None:
        """Write a prefix of ``data`` to stdin and return its length; 0: stdin is closed; None: nothing was
        taken within about a second (the caller tries again until its own deadline)."""

    def stderr(self, tail_bytes: int) -> bytes:
        """The last ``tail_bytes`` (at most) of what arrived on stderr since the last call; never blocks."""

    def exit_status(self, wait_s: float) -> int | None:
        """The exit status, waiting up to ``wait_s`` for it; None: not known; -1: it ended without one."""

    def close(self) -> None:
        """Close every direction; never blocks for long."""


class Session(Protocol):
    """One login to a host and the commands run over it: what ``SshLink`` needs from an SSH client.

    ``close()`` and ``abort()`` may come from any thread at any step, and end everything the session started;
    a step that starts something after that fails with the reason (``ended``).
    """

    errors: tuple[type[BaseException], ...]
    """What its calls may raise besides LinkError; the link turns them into one line."""

    @property
    def ended(self) -> str | None:
        """Why the session was closed or aborted (one error line); None while it is not."""

    def login(self, settings: SshSettings) -> None:
        """Reach and log in to ``settings``' host (nothing, where each command logs in by itself)."""

    def start_timeout_s(self, timeout_s: float) -> float:
        """How long a command may take to say hello when each connecting step has ``timeout_s``."""

    def exec(self, command: str, timeout_s: float) -> Pipe:
        """Run ``command`` on the host; LinkError when it cannot start."""

    def can_exec_again(self) -> bool:
        """Whether another command can run after the first ended (the reduced collector)."""

    def explain(self, error: LinkError) -> LinkError:
        """The error to raise for ``error``, met while starting the last command (the client's own words)."""

    def collector_started(self) -> None:
        """The collector said hello; raises LinkError when the session must not go on after all."""

    def abort(self, reason: str) -> None:
        """End everything at once (a host that stopped answering)."""

    def close(self) -> None:
        """End everything, politely for a moment; returns within about 2 s."""
