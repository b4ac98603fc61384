"""Listening TCP ports: which are in LISTEN on the host, and which of them the GPU jobs' processes hold.

A killed server is not gone for its operator until its ports are free: the restart binds the same port. The
kernel lists every TCP socket in /proc/net/tcp and /proc/net/tcp6 (state ``0A`` is LISTEN) with its inode;
a process holds a socket when one of its fds links to ``socket:[inode]``. Both reads are bounded: a host
with many connections has megabytes there, and only the listeners matter (the kernel lists them first).

Those text tables cost the kernel a walk of its whole connection hash however few sockets there are (that
hash is sized by the host's memory: milliseconds of CPU per read on a large host), so the listeners are
asked for over netlink first (``sock_diag``, the interface ``ss -l`` uses): a dump filtered to LISTEN walks
the listening sockets alone. A kernel or sandbox that refuses it gets the text tables.
"""

from __future__ import annotations

import os
import struct

from gputui.agent.proc.procfs import fd_links, open_readonly
from gputui.agent.protocol import PROCESS_LISTEN_PORTS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

NET_TCP_FILES = ("/proc/net/tcp", "/proc/net/tcp6")
NET_TCP_READ_BYTES = 4 * 1024 * 1024
"""Bytes read from each table at most. The kernel prints the listening sockets before the connections, so
a cut falls on connections unless the host has tens of thousands of listeners."""
MAX_LISTENING_SOCKETS = 16384
"""Listening sockets taken from both tables together; past it the host's list is unknown (None)."""
MAX_FDS_PER_PROCESS = 16384
"""Fds of one process looked at for sockets (a GPU worker has hundreds)."""
LISTEN_STATE = "0A"
_SOCKET_PREFIX = "socket:["


def parse_listening(data: bytes, limit: int = MAX_LISTENING_SOCKETS) -> tuple[dict[int, int], bool]:
    """The LISTEN sockets of one /proc/net/tcp{,6} text.

    Args:
        data: The table's bytes (the header line and a cut last line are skipped like any malformed line).
        limit: Sockets to take at most.

    Returns:
        Socket inode -> local port, and whether ``limit`` cut the list.
    """
    found: dict[int, int] = {}
    for line in data.split(b"\n"):
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN_STATE.encode():
            continue
        address, _, port_hex = fields[1].rpartition(b":")
        if not address or not 1 <= len(port_hex) <= 4:
            continue
        try:
            port = int(port_hex, 16)
            inode = int(fields[9])
        except ValueError:
            continue
        if not 0 < port <= 0xFFFF or inode <= 0:
            continue  # an unbound listener's port 0, or a socket already gone (inode 0)
        if len(found) >= limit:
            return found, True
        found[inode] = port
    return found, False


def _read_bounded(path: str, max_bytes: int) -> bytes | None:
    """Up to ``max_bytes`` of ``path``, cut at the last whole line; None when it cannot be read."""
    try:
        fd = open_readonly(path)
    except OSError:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        while size < max_bytes:
            chunk = os.read(fd, min(65536, max_bytes - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data[: data.rfind(b"\n") + 1]


def read_listening(paths: Iterable[str] = NET_TCP_FILES) -> dict[int, int] | None:
    """Socket inode -> port of every TCP socket in LISTEN on the host (IPv4 and IPv6); None when no table
    could be read or there were more than ``MAX_LISTENING_SOCKETS`` (an incomplete list says nothing about
    whether a port is free)."""
    found: dict[int, int] = {}
    read_any = False
    for path in paths:
        data = _read_bounded(path, NET_TCP_READ_BYTES)
        if data is None:
            continue
        read_any = True
        sockets, cut = parse_listening(data, MAX_LISTENING_SOCKETS - len(found))
        if cut:
            return None
        found.update(sockets)
    return found if read_any else None


_NETLINK_INET_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST_DUMP = 0x301
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_TCP_LISTEN = 10
_NLMSG_HEADER = struct.Struct("=IHHII")
_DIAG_REQUEST = struct.Struct("=BBBBI48x")
"""``inet_diag_req_v2``: family, protocol, extensions, pad, the states wanted; an empty socket id."""
_DIAG_PORT_OFFSET = 4
"""In ``inet_diag_msg``: family, state, timer, retrans (one byte each), then the id's big-endian sport."""
_DIAG_INODE_OFFSET = 4 + 48 + 16
"""After the 48-byte socket id: expires, rqueue, wqueue, uid (4 bytes each), then the inode."""
_DIAG_RECV_BYTES = 1 << 17
_DIAG_TIMEOUT_S = 2.0


def _diag_dump(sock: Any, family: int, limit: int) -> tuple[dict[int, int], bool]:
    """The LISTEN TCP sockets of one address family from an open ``NETLINK_INET_DIAG`` socket: inode ->
    port, and whether ``limit`` cut the list. Raises OSError when the kernel answers with an error."""
    request = _DIAG_REQUEST.pack(family, 6, 0, 0, 1 << _TCP_LISTEN)  # 6: IPPROTO_TCP
    sock.send(
        _NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST_DUMP, 1, 0)
        + request
    )
    found: dict[int, int] = {}
    while True:
        data = sock.recv(_DIAG_RECV_BYTES)
        if not data:
            raise OSError("sock_diag: the dump ended without its last message")
        offset = 0
        while offset + _NLMSG_HEADER.size <= len(data):
            length, kind = _NLMSG_HEADER.unpack_from(data, offset)[:2]
            if kind == _NLMSG_DONE:
                return found, False
            if kind == _NLMSG_ERROR or length < _NLMSG_HEADER.size:
                raise OSError("sock_diag: the kernel refused the dump")
            body = offset + _NLMSG_HEADER.size
            if body + _DIAG_INODE_OFFSET + 4 <= min(len(data), offset + length):
                port = struct.unpack_from(">H", data, body + _DIAG_PORT_OFFSET)[0]
                inode = struct.unpack_from("=I", data, body + _DIAG_INODE_OFFSET)[0]
                if port > 0 and inode > 0:  # as in the text tables: an unbound listener, a socket gone
                    if len(found) >= limit:
                        return found, True
                    found[inode] = port
            offset += (length + 3) & ~3


def read_listening_diag() -> dict[int, int] | None:
    """Socket inode -> port of every TCP socket in LISTEN on the host, asked of the kernel over netlink;
    None when netlink cannot answer (no such socket family, refused, cut by ``MAX_LISTENING_SOCKETS``).

    The C ``_socket`` module is enough for one datagram socket; ``socket`` adds nothing used here."""
    try:
        import _socket
    except ImportError:
        return None
    found: dict[int, int] = {}
    try:
        sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_DGRAM, _NETLINK_INET_DIAG)
    except (AttributeError, OSError):
        return None
    try:
        sock.settimeout(_DIAG_TIMEOUT_S)
        for family in (_socket.AF_INET, _socket.AF_INET6):
            sockets, cut = _diag_dump(sock, family, MAX_LISTENING_SOCKETS - len(found))
            if cut:
                return None
            found.update(sockets)
    except (OSError, struct.error):
        return None
    finally:
        sock.close()
    return found


def listening_sockets() -> dict[int, int] | None:
    """Socket inode -> port of every TCP socket in LISTEN on the host: over netlink, else from the text
    tables; None when neither can say."""
    found = read_listening_diag()
    return found if found is not None else read_listening()


def socket_inodes(pid: int) -> set[int]:
    """The socket inodes ``pid`` has open (at most ``MAX_FDS_PER_PROCESS`` fds looked at; empty when its fds
    cannot be read)."""
    inodes: set[int] = set()
    for link in fd_links(pid, MAX_FDS_PER_PROCESS):
        if link.startswith(_SOCKET_PREFIX) and link.endswith("]"):
            try:
                inodes.add(int(link[len(_SOCKET_PREFIX) : -1]))
            except ValueError:
                continue
    return inodes


class Listeners:
    """Which of the GPU jobs' processes listen on which ports, kept from one process sample to the next.

    A process's fds are read when it is first seen, and again for every job process when a listening socket
    appears on the host that was not there before (a new listener may be any of theirs). In between, each
    sample costs the two table reads alone: a closed listener just leaves the tables.

    Not thread-safe: one owner (the collector's sampling, under its lock).
    """

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._sockets: dict[tuple[int, Any], set[int]] = {}
        """(pid, start ticks) -> the listening socket inodes it held when its fds were last read."""

    def note(self, processes: list[dict[str, Any]], job_pids: Iterable[int]) -> list[int] | None:
        """Mark each listed process of a GPU job with the ports it listens on; returns the host's listening
        ports (sorted, distinct), None when they cannot be read.

        Only the jobs' processes (``job_pids``) have their fds read: they are what a kill takes down and
        what the clean slate waits on; every other listed process gets an empty list.
        """
        listening = listening_sockets()
        known = listening or {}
        wanted = set(job_pids)
        reread = bool(set(known) - self._seen)
        sockets: dict[tuple[int, Any], set[int]] = {}
        for proc in processes:
            pid = proc["pid"]
            held: set[int] = set()
            if known and pid in wanted:
                key = (pid, proc.get("start_ticks"))
                before = self._sockets.get(key)
                held = {i for i in socket_inodes(pid) if i in known} if reread or before is None else before
                sockets[key] = held
            proc[PROCESS_LISTEN_PORTS] = sorted({known[i] for i in held if i in known})
        self._sockets = sockets
        self._seen = set(known)
        return None if listening is None else sorted(set(known.values()))
