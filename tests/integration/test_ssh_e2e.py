"""End to end over a real sshd: the real collector shipped as source, real pynvml over the fake NVML."""

from __future__ import annotations

import time

from gputui.model import HostSnapshot
from gputui.transports.base import LinkOptions
from gputui.transports.ssh import SshLink
from tests.fakenvml.plugin import FakeNvml
from tests.integration.sshd import ClientHome, SshdFactory

FAST = LinkOptions(memory_interval_s=0.3, process_interval_s=0.3, connect_timeout_s=10.0)


def _next(link: SshLink, deadline_s: float = 20.0) -> HostSnapshot:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        snapshot = link.next_snapshot(1.0)
        if snapshot is not None:
            return snapshot
    raise AssertionError("no snapshot")


def test_snapshot_over_ssh_matches_the_fake_nvml_state(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    link = SshLink("host-a", FAST)
    link.open()
    try:
        assert link.mode == "nvml", link.hello
        assert link.boot_id
        snapshot = _next(link)
        assert snapshot.target == "host-a"
        assert snapshot.boot_id == link.boot_id
        assert len(snapshot.gpus) == 8
        assert {g.name for g in snapshot.gpus} == {"NVIDIA RTX PRO 6000 Blackwell"}
        assert [g.memory_used_mib for g in snapshot.gpus] == [3] * 8
        assert [g.memory_total_mib for g in snapshot.gpus] == [49152] * 8
    finally:
        link.close()
