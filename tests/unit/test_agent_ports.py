"""The collector's reader of listening TCP ports: /proc/net/tcp{,6} parsed with hostile lines, and the real
tables of this machine read (by the test's interpreter and by Python 3.8) against real loopback listeners."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from gputui.agent.proc import ports
from gputui.agent.protocol import PROCESS_LISTEN_PORTS
from tests.interpreters import python38

REPO = Path(__file__).resolve().parents[2]
HEADER = b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def _line(slot: int, local: str, state: str, inode: str, remote: str = "00000000:0000") -> bytes:
    return (
        f"{slot:4}: {local} {remote} {state} 00000000:00000000 00:00000000 00000000  1000        0 {inode} 1 "
        "0000000000000000 100 0 0 10 0\n"
    ).encode()


def test_listeners_of_both_families_are_read_and_everything_else_is_skipped() -> None:
    v6_any = "00000000000000000000000000000000"
    data = (
        HEADER
        + _line(0, "0100007F:7530", "0A", "4242")  # 127.0.0.1:30000 LISTEN
        + _line(1, f"{v6_any}:1F40", "0A", "4343")  # [::]:8000 LISTEN
        + _line(2, "0100007F:7530", "01", "4444", remote="0100007F:D431")  # an ESTABLISHED connection
        + _line(3, "0100007F:0016", "06", "0")  # TIME_WAIT: no inode
    )
    found, cut = ports.parse_listening(data)
    assert found == {4242: 30000, 4343: 8000}
    assert cut is False


def test_hostile_and_malformed_lines_are_skipped_not_fatal() -> None:
    hostile = [
        b"",
        b"\x00\xff\xfe garbage",
        b"   0: 0100007F:7530 00000000:0000 0A",  # cut short
        _line(1, "0100007F:ZZZZ", "0A", "11"),  # port not hex
        _line(2, "0100007F:7530", "0A", "-5"),  # negative inode
        _line(3, "0100007F:7530", "0A", "0"),  # inode 0: the socket is gone
        _line(4, "0100007F:0000", "0A", "12"),  # port 0
        _line(5, "0100007F:123456", "0A", "13"),  # six hex digits: not a port
        _line(6, "7530", "0A", "14"),  # no address
        _line(7, "0100007F:7530", "0a", "15"),  # state in lower case is not the kernel's
        _line(8, "0100007F:7530", "0A", "9" * 400),  # a huge inode still parses as a number
        b"x" * 100_000,  # one endless line
        _line(9, "0100007F:1F90", "0A", "16")[:-1],  # the last line without its newline
    ]
    found, cut = ports.parse_listening(b"\n".join(hostile))
    assert found == {int("9" * 400): 30000, 16: 8080}
    assert cut is False


def test_the_socket_cap_says_the_list_was_cut() -> None:
    data = HEADER + b"".join(_listeners(10))
    found, cut = ports.parse_listening(data, limit=4)
    assert len(found) == 4
    assert cut is True


def _listeners(count: int) -> list[bytes]:
    return [_line(i, f"0100007F:{1000 + i:04X}", "0A", str(100 + i)) for i in range(count)]


def test_tables_beyond_the_cap_are_unknown_not_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "tcp"
    table.write_bytes(HEADER + b"".join(_listeners(5)))
    assert ports.read_listening([str(table)]) == {100 + i: 1000 + i for i in range(5)}
    assert ports.read_listening([str(tmp_path / "missing")]) is None
    monkeypatch.setattr(ports, "MAX_LISTENING_SOCKETS", 3)
    assert ports.read_listening([str(table)]) is None


def test_a_table_is_read_up_to_its_byte_cap_and_cut_at_a_whole_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "tcp"
    lines = _listeners(50)
    table.write_bytes(HEADER + b"".join(lines))
    monkeypatch.setattr(ports, "NET_TCP_READ_BYTES", len(HEADER) + len(lines[0]) * 3 + 10)
    assert ports.read_listening([str(table)]) == {100: 1000, 101: 1001, 102: 1002}


def test_real_listeners_of_this_process_are_found_with_their_ports() -> None:
    with socket.socket() as v4, socket.socket(socket.AF_INET6) as v6:
        v4.bind(("127.0.0.1", 0))
        v4.listen()
        v6.bind(("::1", 0))
        v6.listen()
        mine = {v4.getsockname()[1], v6.getsockname()[1]}
        with socket.create_connection(v4.getsockname()[:2]) as client:  # a connection is not a listener
            processes = [{"pid": os.getpid()}, {"pid": 1}]
            listening = ports.Listeners().note(processes, [os.getpid()])
            outgoing = client.getsockname()[1]
    assert listening is not None
    assert mine <= set(listening)
    assert outgoing not in listening
    assert mine <= set(processes[0][PROCESS_LISTEN_PORTS])
    assert processes[1][PROCESS_LISTEN_PORTS] == []  # not a job's process: its fds are not read


def test_netlink_and_the_text_tables_see_the_same_listeners() -> None:
    with socket.socket() as v4, socket.socket(socket.AF_INET6) as v6:
        v4.bind(("127.0.0.1", 0))
        v4.listen()
        v6.bind(("::1", 0))
        v6.listen()
        mine = {v4.getsockname()[1], v6.getsockname()[1]}
        with socket.create_connection(v4.getsockname()[:2]) as client:
            over_netlink = ports.read_listening_diag()
            from_text = ports.read_listening()
            outgoing = client.getsockname()[1]
    assert over_netlink is not None, "this kernel answers sock_diag"
    assert mine <= set(over_netlink.values())
    assert outgoing not in over_netlink.values()
    # Other tests' listeners come and go on a shared machine: compare this test's own sockets.
    assert {i: p for i, p in over_netlink.items() if p in mine} == {
        i: p for i, p in (from_text or {}).items() if p in mine
    }


def test_without_netlink_the_text_tables_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    import _socket

    monkeypatch.delattr(_socket, "AF_NETLINK")
    assert ports.read_listening_diag() is None
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        listening = ports.listening_sockets()
        assert listening is not None
        assert server.getsockname()[1] in listening.values()


def test_a_netlink_list_beyond_the_cap_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as one, socket.socket() as two:
        for server in (one, two):
            server.bind(("127.0.0.1", 0))
            server.listen()
        monkeypatch.setattr(ports, "MAX_LISTENING_SOCKETS", 1)
        assert ports.read_listening_diag() is None


def test_fds_are_read_again_only_for_new_processes_and_new_listeners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The host's tables and a process's sockets as the test sets them (other listeners come and go on a
    # shared machine, which would make the count of reads depend on them).
    table = {11: 30000}
    held = {100: {11, 99}}
    reads: list[int] = []

    def sockets_of(pid: int) -> set[int]:
        reads.append(pid)
        return set(held.get(pid, ()))

    monkeypatch.setattr(ports, "listening_sockets", lambda: dict(table))
    monkeypatch.setattr(ports, "socket_inodes", sockets_of)
    listeners = ports.Listeners()

    def note(start_ticks: int = 1) -> list[int]:
        processes = [{"pid": 100, "start_ticks": start_ticks}, {"pid": 200, "start_ticks": 5}]
        listeners.note(processes, [100])
        assert processes[1][PROCESS_LISTEN_PORTS] == []  # not a job's process
        return processes[0][PROCESS_LISTEN_PORTS]

    assert note() == [30000]
    assert reads == [100]
    assert note() == [30000]
    assert reads == [100]  # nothing new on the host: the last reading stands
    table[12] = 30001
    held[100].add(12)
    assert note() == [30000, 30001]
    assert reads == [100, 100]  # a new listener on the host: the jobs' fds are read again
    del table[12]
    assert note() == [30000]  # closed: gone from the tables, no read needed
    assert reads == [100, 100]
    assert note(start_ticks=2) == [30000]  # the pid reused by another process: read
    assert reads == [100, 100, 100]


SCRIPT = r"""
import json, os, socket, sys
sys.path.insert(0, sys.argv[1])
from gputui.agent.proc import ports
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
processes = [{"pid": os.getpid()}]
listening = ports.Listeners().note(processes, [os.getpid()])
print(json.dumps({"port": server.getsockname()[1], "listening": listening, "processes": processes,
                  "netlink": ports.read_listening_diag() is not None}))
"""


def test_the_reader_runs_on_python38() -> None:
    done = subprocess.run(
        [python38(), "-S", "-c", SCRIPT, str(REPO)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["port"] in result["listening"]
    assert result["processes"][0][PROCESS_LISTEN_PORTS] == [result["port"]]
    assert result["netlink"] is True
