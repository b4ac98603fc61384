"""Faults against real peers: silent ports, unresolvable names, bad keys, dead and hung hosts, runaway output.

The collector here is the stand-in from ``tests/integration/sshd.py`` (a test double that misbehaves on
request) unless a test says otherwise; deadlines below only stop a broken build from hanging the run.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.core.link import LinkError, LinkOptions
from gputui.transports.reconnect import Backoff, worth_retrying
from gputui.transports.ssh import AuthFailed, SshLink
from tests.integration.openssh_peers import ssh_children
from tests.integration.sshd import ClientHome, SshdFactory, SshdServer, host_without_python, stand_in_agent

FAST = LinkOptions(memory_interval_s=0.5, process_interval_s=0.5, connect_timeout_s=3.0)
HANG_GUARD_S = 30.0


@pytest.fixture(params=["paramiko", "openssh"])
def transport(request: pytest.FixtureRequest) -> str:
    """The SSH client of the links of a test that holds for both (the others pin one)."""
    return str(request.param)


@pytest.fixture
def host_a(sshd_factory: SshdFactory, ssh_client: ClientHome) -> SshdServer:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    return server


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


@pytest.fixture
def full_backlog_listener() -> Iterator[int]:
    """A port whose listener never accepts and whose backlog is full: new SYNs are dropped, connect hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    yield port
    for filler in fillers:
        filler.close()
    server.close()


def _open_error(link: SshLink) -> tuple[LinkError, float]:
    started = time.monotonic()
    with pytest.raises(LinkError) as caught:
        link.open()
    assert ssh_children() == []  # over the system client: its ssh ended with the failed open
    return caught.value, time.monotonic() - started


def _next(link: SshLink) -> object:
    end = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < end:
        snapshot = link.next_snapshot(1.0)
        if snapshot is not None:
            return snapshot
    raise AssertionError("no snapshot")


def _open_and_read(link: SshLink) -> object:
    link.open()
    return _next(link)


def test_port_without_banner_fails_at_the_banner_deadline(
    ssh_client: ClientHome, silent_listener: int, transport: str
) -> None:
    target = f"127.0.0.1:{silent_listener}"
    error, elapsed = _open_error(SshLink(target, LinkOptions(connect_timeout_s=1.0), client=transport))
    said = {
        "paramiko": f"{target}: no SSH handshake with 127.0.0.1 port {silent_listener} within 1.0 s",
        # ssh's own words: the failure, then its closing line.
        "openssh": f"{target}: Connection timed out during banner exchange (Connection to 127.0.0.1 port "
        f"{silent_listener} timed out)",
    }
    assert str(error).startswith(said[transport])
    assert worth_retrying(error)
    assert elapsed < HANG_GUARD_S


def test_unresolvable_name_fails_within_the_connect_deadline(ssh_client: ClientHome, transport: str) -> None:
    error, elapsed = _open_error(
        SshLink("gpu-node.invalid", LinkOptions(connect_timeout_s=2.0), client=transport)
    )
    said = {
        "paramiko": "gpu-node.invalid: cannot resolve gpu-node.invalid",
        "openssh": "gpu-node.invalid: ssh: Could not resolve hostname gpu-node.invalid",
    }
    assert str(error).startswith(said[transport])
    assert worth_retrying(error)
    assert elapsed < HANG_GUARD_S


def test_listener_that_never_accepts_fails_at_the_connect_deadline(
    ssh_client: ClientHome, full_backlog_listener: int, transport: str
) -> None:
    target = f"127.0.0.1:{full_backlog_listener}"
    error, elapsed = _open_error(SshLink(target, LinkOptions(connect_timeout_s=1.0), client=transport))
    assert str(error).startswith(f"{target}: ")
    if transport == "paramiko":
        assert "cannot connect" in str(error) or "no SSH handshake" in str(error)
    else:
        assert "timed out" in str(error)
    assert worth_retrying(error)
    assert elapsed < HANG_GUARD_S


def test_auth_failure_is_one_clear_line_after_one_connection(
    host_a: SshdServer, ssh_client: ClientHome, ssh_keys: dict[str, Path], transport: str
) -> None:
    ssh_client.add_host(
        "wrong-key", host_a, f"IdentityFile {ssh_keys['other']}", f"IdentityFile {ssh_keys['encrypted']}"
    )
    # Only the unauthorized and the encrypted key are offered; IdentitiesOnly keeps any agent out.
    ssh_client.use_key(ssh_keys["other"])
    error, _ = _open_error(SshLink("wrong-key", FAST, client=transport))
    message = str(error)
    assert isinstance(error, AuthFailed)
    assert not worth_retrying(error)
    assert "\n" not in message
    assert message.startswith("wrong-key: authentication failed")
    if transport == "paramiko":
        assert f"{ssh_keys['other']} (rejected)" in message
        assert f"{ssh_keys['encrypted']} (encrypted, not in ssh-agent: skipped)" in message
    else:
        assert message.endswith("Permission denied (publickey).")
    assert host_a.log().count("Connection from 127.0.0.1") == 2  # fixture's readiness probe + this one


def test_stale_within_three_intervals_then_reconnect_when_sshd_returns(
    host_a: SshdServer, ssh_client: ClientHome, transport: str
) -> None:
    link = SshLink("host-a", FAST, source=stand_in_agent(), client=transport)
    link.open()
    try:
        boot_id = link.boot_id
        _next(link)
        host_a.stop()
        with pytest.raises(LinkError) as caught:
            _next(link)
        assert caught.value.args[0].startswith("host-a: ")
        host_a.start()
        backoff = Backoff(base_s=0.2, cap_s=1.0)
        end = time.monotonic() + HANG_GUARD_S
        while True:
            try:
                link.open()
                break
            except LinkError:
                if time.monotonic() > end:
                    raise
                time.sleep(backoff.next_delay_s())
        assert link.boot_id == boot_id
        assert _next(link) is not None
    finally:
        link.close()


def test_hung_host_goes_stale_and_close_returns_quickly(
    host_a: SshdServer, ssh_client: ClientHome, transport: str
) -> None:
    link = SshLink("host-a", FAST, source=stand_in_agent(), client=transport)
    link.open()
    try:
        _next(link)
        assert host_a.signal_sessions(signal.SIGSTOP) > 0
        with pytest.raises(LinkError, match=r"^host-a: no data for \d+\.\d s$") as stale:
            _next(link)
        assert worth_retrying(stale.value)
        assert link.stale_after_s == 1.5
        started = time.monotonic()
        link.close()
        # Quitting while the host hangs: the spec is 2 s; allow scheduling noise on a loaded machine.
        assert time.monotonic() - started < 2.5
        assert ssh_children() == []  # over the system client: its ssh ended with the link
    finally:
        host_a.signal_sessions(signal.SIGCONT)
        link.close()


def test_close_while_open_hangs_after_login(
    host_a: SshdServer, ssh_client: ClientHome, transport: str
) -> None:
    link = SshLink(
        "host-a",
        LinkOptions(connect_timeout_s=20.0),
        source=stand_in_agent("hang_before_hello"),
        client=transport,
    )
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            link.open()
        except LinkError as exc:
            errors.append(exc)

    thread = threading.Thread(target=opener, daemon=True)
    thread.start()
    end = time.monotonic() + HANG_GUARD_S
    while not host_a.session_processes() or "Starting session" not in host_a.log():
        assert time.monotonic() < end
        time.sleep(0.05)
    started = time.monotonic()
    link.close()
    assert time.monotonic() - started < 2.5
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
    assert errors
    assert ssh_children() == []


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        # Over the system ssh, the deadline holds its connecting too: twice the connect timeout.
        ("hang_before_hello", r"^host-a: no hello from the collector within [24]\.0 s$"),
        ("hang_after_hello", r"^host-a: no data for \d+\.\d s$"),
        ("flood_no_newline", r"^host-a: the collector sent a line over 16 MiB$"),
        ("not_json", r"^host-a: the collector sent a line that is not a JSON object: .*x1b"),
    ],
)
def test_runaway_or_silent_collector_breaks_the_link_cleanly(
    host_a: SshdServer, ssh_client: ClientHome, behaviour: str, expected: str, transport: str
) -> None:
    options = LinkOptions(memory_interval_s=0.5, connect_timeout_s=2.0)
    link = SshLink("host-a", options, source=stand_in_agent(behaviour), client=transport)
    try:
        with pytest.raises(LinkError, match=expected):
            _open_and_read(link)
    finally:
        started = time.monotonic()
        link.close()
        assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("behaviour", ["flood_lines", "flood_stderr", "banner_then_hello"])
def test_heavy_output_and_login_banners_do_not_deadlock(
    host_a: SshdServer, ssh_client: ClientHome, behaviour: str, transport: str
) -> None:
    link = SshLink("host-a", FAST, source=stand_in_agent(behaviour), client=transport)
    link.open()
    try:
        first = _next(link)
        second = _next(link)
        assert first is not None
        assert second is not None
        # Requests still get through while the stream is busy.
        assert link.request({"cmd": "echo", "payload": "é;$(x)`y`"}, 10.0) == {"echo": "é;$(x)`y`"}
    finally:
        link.close()


def test_request_to_a_collector_that_ignores_commands_times_out(
    host_a: SshdServer, ssh_client: ClientHome, transport: str
) -> None:
    link = SshLink("host-a", FAST, source=stand_in_agent("ignore_commands"), client=transport)
    link.open()
    try:
        with pytest.raises(LinkError, match=r"^host-a: no reply to echo within 1\.0 s$"):
            link.request({"cmd": "echo"}, 1.0)
        assert _next(link) is not None  # the stream itself is fine
    finally:
        link.close()


def test_agent_error_reply_is_a_link_error(
    host_a: SshdServer, ssh_client: ClientHome, transport: str
) -> None:
    link = SshLink("host-a", FAST, source=stand_in_agent(), client=transport)
    link.open()
    try:
        with pytest.raises(LinkError, match=r"^host-a: frobnicate failed: stand-in: unknown command$"):
            link.request({"cmd": "frobnicate"}, 10.0)
    finally:
        link.close()


def test_protocol_mismatch_is_refused(host_a: SshdServer, ssh_client: ClientHome, transport: str) -> None:
    link = SshLink("host-a", FAST, source=stand_in_agent(protocol=99), client=transport)
    with pytest.raises(
        LinkError, match=r"^host-a: the collector speaks protocol 99, this gputui speaks 1$"
    ) as caught:
        link.open()
    assert not worth_retrying(caught.value)
    link.close()


def test_new_boot_id_on_reconnect_is_visible(
    host_a: SshdServer, ssh_client: ClientHome, tmp_path: Path, transport: str
) -> None:
    boot_file = tmp_path / "boot_id"
    boot_file.write_text("boot-one\n")
    link = SshLink("host-a", FAST, source=stand_in_agent(boot_id_file=str(boot_file)), client=transport)
    link.open()
    try:
        assert link.boot_id == "boot-one"
        snapshot = _next(link)
        assert snapshot.boot_id == "boot-one"  # type: ignore[attr-defined]
        link.close()
        boot_file.write_text("boot-two\n")
        link.open()
        assert link.boot_id == "boot-two"
        assert _next(link).boot_id == "boot-two"  # type: ignore[attr-defined]
    finally:
        link.close()


GPU_CSV = (
    "0, NVIDIA H200, GPU-aaaa-0000, 00000000:17:00.0, 20483, 143771, 97, 61, 512.30, 700.00\n"
    "1, NVIDIA H200, GPU-bbbb-1111, 00000000:2A:00.0, 3, 143771, 0, 35, 70.10, 700.00\n"
)


def test_no_python3_falls_back_to_the_reduced_sh_collector(
    sshd_factory: SshdFactory, ssh_client: ClientHome, transport: str
) -> None:
    server = host_without_python(sshd_factory, ssh_client, "no-python", GPU_CSV)
    assert server.smi_dir is not None
    (server.smi_dir / "apps.csv").write_text(f"GPU-aaaa-0000, {os.getpid()}, 20480\n")
    link = SshLink("no-python", FAST, client=transport)
    link.open()
    try:
        assert link.reduced is True
        assert link.mode == "ps"
        assert link.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        snapshot = _next(link)
        assert snapshot.mode == "ps"
        assert snapshot.target == "no-python"
        assert snapshot.error is None
        assert [(g.index, g.name, g.memory_used_mib, g.memory_total_mib) for g in snapshot.gpus] == [
            (0, "NVIDIA H200", 20483, 143771),
            (1, "NVIDIA H200", 3, 143771),
        ]
        assert [p.pid for p in snapshot.gpus[0].processes] == [os.getpid()]
        me = snapshot.process(os.getpid())
        assert me is not None
        assert me.gpu_memory_mib == {0: 20480}
        sampled = link.request({"cmd": "sample"}, 10.0)["snapshot"]
        assert sampled["target"] == "no-python"
        with pytest.raises(LinkError, match=r"^no-python: kill needs python3 on the host \(reduced mode"):
            link.request({"cmd": "kill", "targets": [{"pid": os.getpid(), "start_ticks": 1}]}, 10.0)
    finally:
        link.close()


def test_no_python3_and_no_driver_reports_the_driver(
    sshd_factory: SshdFactory, ssh_client: ClientHome, transport: str
) -> None:
    host_without_python(sshd_factory, ssh_client, "no-python")
    link = SshLink("no-python", FAST, client=transport)
    link.open()
    try:
        snapshot = _next(link)
        assert snapshot.gpus == ()
        assert snapshot.error is not None
        assert "NVIDIA driver not loaded" in snapshot.error
    finally:
        link.close()


def test_no_python3_and_no_shell_tools_is_one_lasting_error(
    sshd_factory: SshdFactory, ssh_client: ClientHome, transport: str
) -> None:
    server = sshd_factory(python="empty")
    ssh_client.add_host("bare-metal", server)
    ssh_client.trust(server)
    link = SshLink("bare-metal", FAST, client=transport)
    with pytest.raises(
        LinkError, match=r"^bare-metal: no python3 on host, and the reduced collector \(sh\) failed: "
    ) as caught:
        link.open()
    assert "\n" not in str(caught.value)
    assert not worth_retrying(caught.value)
    link.close()


def test_many_hosts_open_in_parallel(
    sshd_factory: SshdFactory, ssh_client: ClientHome, transport: str
) -> None:
    servers = [sshd_factory(), sshd_factory()]
    for i, server in enumerate(servers):
        ssh_client.add_host(f"node-{i}", server)
        ssh_client.trust(server)
    targets = ["node-0", "node-1", "node-0", "node-1"]
    links = [SshLink(t, FAST, source=stand_in_agent(), client=transport) for t in targets]
    errors: list[BaseException] = []

    def run(link: SshLink) -> None:
        try:
            link.open()
            _next(link)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(link,), daemon=True) for link in links]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD_S)
    try:
        assert errors == []
        assert all(link.boot_id for link in links)
    finally:
        for link in links:
            link.close()
