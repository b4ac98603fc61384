"""One readiness probe of a GPU at a time on the host, whichever gputui runs it: the TUI's collector, a Slurm
prolog's ``gputui check --probe``, another user's gputui.

Each GPU has a lock file named by its PCI bus id in ``/dev/shm/gputui-probe``: a tmpfs every Linux host has,
emptied at boot, shared by every user and every container that mounts the host's /dev/shm. The first gputui
that probes makes the folder sticky and writable by all, as /tmp is: each user's gputui can make lock files
there, and nobody but a file's owner (and the folder's) can remove or rename one. ``safefile`` opens both
(``open_shared_folder``, ``open_shared_file``): a link, a FIFO or a device planted there is refused, never
opened or followed, and nothing there is ever read or written, only locked (``flock``).

A probe holds the lock of each GPU it probes, and its child inherits the descriptor, so the lock lasts as
long as the child: one stuck in the driver keeps its GPU locked even after its collector ended. A second
caller waits for the lock up to its deadline, then leaves that GPU out ("another gputui is probing it").

Where the folder cannot be used (planted as something else, not sticky, a folder above it writable by
others), the probe goes on with its own collector's lock only and says why (``problem``). A user who holds a
lock file open for good can keep the others' probes of that GPU from running; each is said, never waited
on past its deadline.
"""

from __future__ import annotations

import fcntl
import os
import re
import time

from gputui.agent.safefile import UnsafeFile, open_shared_file, open_shared_folder

LOCK_FOLDER = "/dev/shm/gputui-probe"  # noqa: S108 - shared on purpose, opened by safefile's rules
TEST_FOLDER_ENV = "GPUTUI_TEST_PROBE_LOCKS"
"""Tests only: the folder taken for ``LOCK_FOLDER`` (so that a test writes nothing outside its temp dir)."""
POLL_S = 0.05
_BUS_ID_RE = re.compile(
    r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])(?:/(gi[0-9]{1,4}ci[0-9]{1,4}|mig[0-9]{1,2}))?"
)


def lock_folder() -> str:
    return os.environ.get(TEST_FOLDER_ENV) or LOCK_FOLDER


def lock_name(bus_id: str) -> str | None:
    """``00000000:17:00.0`` and ``0000:17:00.0`` alike as ``gpu-00000000-17-00.0.lock``; a MIG device, by its
    GPU's bus id and instance (``00000000:17:00.0/gi1ci0``), as ``gpu-00000000-17-00.0-gi1ci0.lock``; None for
    text that is neither."""
    match = _BUS_ID_RE.fullmatch(bus_id)
    if match is None:
        return None
    domain, bus, device, function, instance = match.groups()
    suffix = f"-{instance}" if instance else ""
    return f"gpu-{domain.lower().zfill(8)}-{bus.lower()}-{device.lower()}.{function}{suffix}.lock"


class ProbeLocks:
    """The host-wide locks of one probe's GPUs: ``acquire`` them, hand ``fd`` to each child, ``release``."""

    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder or lock_folder()
        self.problem: str | None = None
        """Why the probe runs without the host-wide locks (the folder or a lock file cannot be used)."""
        self._held: dict[str, int] = {}

    def acquire(self, bus_ids: list[str], until: float) -> set[str]:
        """Lock each GPU of ``bus_ids``, waiting for those another gputui holds until ``until`` (monotonic).

        Returns:
            The bus ids still locked by another gputui at ``until`` (not to be probed). A GPU whose lock
            cannot be used (``problem`` says why) is probed unlocked.
        """
        try:
            folder_fd = open_shared_folder(self.folder)
        except UnsafeFile as exc:
            self.problem = str(exc)[:200]
            return set()
        waiting: dict[str, int] = {}
        try:
            for bus_id in dict.fromkeys(bus_ids):
                name = lock_name(bus_id)
                if name is None:
                    self.problem = f"no lock for a PCI bus id like {bus_id[:40]!r}"
                    continue
                try:
                    waiting[bus_id] = open_shared_file(folder_fd, name, os.path.join(self.folder, name))
                except UnsafeFile as exc:
                    self.problem = str(exc)[:200]
        finally:
            os.close(folder_fd)
        while True:
            for bus_id, fd in list(waiting.items()):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    self.problem = f"{self.folder}: cannot lock ({exc.strerror or exc})"
                    os.close(fd)
                else:
                    self._held[bus_id] = fd
                del waiting[bus_id]
            left = until - time.monotonic()
            if not waiting or left <= 0:
                break
            time.sleep(min(POLL_S, left))
        for fd in waiting.values():
            os.close(fd)
        return set(waiting)

    def fd(self, bus_id: str) -> int | None:
        """The descriptor that holds ``bus_id``'s lock, for its child to inherit; None: not locked here."""
        return self._held.get(bus_id)

    def release_one(self, bus_id: str) -> None:
        """Close this collector's descriptor of ``bus_id``'s lock (its child ended, or closed its output)."""
        fd = self._held.pop(bus_id, None)
        if fd is not None:
            os.close(fd)

    def release(self) -> None:
        """Close this collector's descriptors: a lock is free once every child that inherited it ended too."""
        held, self._held = self._held, {}
        for fd in held.values():
            try:
                os.close(fd)
            except OSError:
                pass
