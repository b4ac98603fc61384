"""End to end over a real sshd: the real collector shipped as a bundle, real pynvml over the fake NVML."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gputui.core.link import LinkOptions
from gputui.core.model import Gpu, HostSnapshot, replace
from gputui.core.text import visible
from gputui.transports.ssh import SshLink
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import CHAIN, script
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


def test_gpus_over_ssh_equal_a_local_collector_run_on_the_same_state(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    fake_nvml.state.gpus[5].error = "GPU_IS_LOST"
    fake_nvml.state.gpus[2].util_pct = 87
    fake_nvml.state.gpus[2].temp_c = 71
    fake_nvml.write()
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    local = subprocess.run(
        [sys.executable, "-m", "gputui.agent", "--once"],
        capture_output=True,
        env=fake_nvml.env(),
        timeout=60,
        check=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    expected = HostSnapshot.from_json(local.stdout.decode())
    link = SshLink("host-a", FAST)
    link.open()
    try:
        remote = HostSnapshot.from_dict(link.request({"cmd": "sample"}, 30.0)["snapshot"])
    finally:
        link.close()
    assert remote.target == "host-a"
    assert remote.driver_version == expected.driver_version == "570.124.06"
    assert remote.boot_id == expected.boot_id
    assert _unread(remote.gpus) == _unread(expected.gpus)  # the same figures, each read at its own moment
    assert all(g.fitness is None or g.fitness.read_time for g in remote.gpus if g.error is None)
    assert remote.gpus[5].error is not None
    assert remote.gpus[2].utilization_pct == 87


def _unread(gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """The GPUs without the moment their fitness was read."""
    return tuple(
        g if g.fitness is None else replace(g, fitness=replace(g.fitness, read_time=None)) for g in gpus
    )


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)


def _until(link: SshLink, wanted: Callable[[HostSnapshot], bool], deadline_s: float = 30.0) -> HostSnapshot:
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        snapshot = link.next_snapshot(1.0)
        if snapshot is None:
            continue
        last = snapshot
        if wanted(snapshot):
            return snapshot
    raise AssertionError(f"condition not met; last snapshot: {last}")


def _reap(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


TREE_PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def test_kill_of_a_remote_process_tree_returns_the_gpus_to_baseline(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    parent = _spawn([sys.executable, "-c", TREE_PARENT])
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    fake_nvml.state.add_holder(0, parent.pid, 20000)
    fake_nvml.state.add_holder(1, child_pid, 30000)
    fake_nvml.write()
    link = SshLink("host-a", FAST)
    link.open()
    try:
        busy = _until(link, lambda s: s.process(parent.pid) is not None and s.process(child_pid) is not None)
        assert busy.gpus[0].memory_used_mib == 3 + 20000
        assert busy.gpus[1].memory_used_mib == 3 + 30000
        root = busy.process(parent.pid)
        assert root is not None
        result = link.request(
            {
                "cmd": "kill",
                "boot_id": link.boot_id,
                "targets": [{"pid": parent.pid, "start_ticks": root.start_ticks}],
                "signal": "TERM",
                "tree": True,
                "escalate_s": 5.0,
            },
            30.0,
        )
        outcomes = {o["pid"]: o["result"] for o in result["outcomes"]}
        assert set(outcomes) >= {parent.pid, child_pid}
        assert set(outcomes.values()) <= {"sent", "exited", "killed"}
        parent.wait(timeout=30)  # reap it here: the driver (and the fake) ignore zombies anyway
        clean = _until(link, lambda s: all(g.memory_used_mib == 3 for g in s.gpus))
        assert clean.process(parent.pid) is None
        # The orphaned child is reaped by whatever pid 1 is; a container's pid 1 may leave it a zombie.
        leftover = clean.process(child_pid)
        assert leftover is None or (leftover.is_zombie and not leftover.gpu_memory_mib)
    finally:
        link.close()
        _reap(parent)


def test_hostile_process_names_are_data_never_commands(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    """RELIABILITY 23: shell syntax in process argv travels as JSON and is never run, on either side."""
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    canary = tmp_path / "canary"
    hostile = [
        f";touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"'\"; touch {canary}; echo \"'",
        f"line\ntouch {canary}\n",
        f"|| touch {canary} &",
        "\x1b]0;title\x07[bold]x[/]",
    ]
    victim = _spawn([sys.executable, "-c", "import time; time.sleep(600)", *hostile])
    fake_nvml.state.add_holder(2, victim.pid, 1000)
    fake_nvml.write()
    link = SshLink("host-a", FAST)
    link.open()
    try:
        seen = _until(link, lambda s: s.process(victim.pid) is not None)
        proc = seen.process(victim.pid)
        assert proc is not None
        assert list(proc.cmdline[-len(hostile) :]) == [visible(word) for word in hostile]  # the model's form
        result = link.request(
            {
                "cmd": "kill",
                "boot_id": link.boot_id,
                "targets": [{"pid": victim.pid, "start_ticks": proc.start_ticks}],
                "signal": "TERM",
                "tree": False,
                "escalate_s": None,
            },
            30.0,
        )
        assert [o["pid"] for o in result["outcomes"]] == [victim.pid]
        assert result["outcomes"][0]["result"] in ("sent", "exited")
        victim.wait(timeout=30)
        _until(link, lambda s: s.process(victim.pid) is None and s.gpus[2].memory_used_mib == 3)
    finally:
        link.close()
        _reap(victim)
    assert not canary.exists()


def test_read_only_link_cannot_kill(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    victim = _spawn([sys.executable, "-c", "import time; time.sleep(600)"])
    fake_nvml.state.add_holder(0, victim.pid, 500)
    fake_nvml.write()
    link = SshLink("host-a", replace(FAST, read_only=True))
    link.open()
    try:
        proc = _until(link, lambda s: s.process(victim.pid) is not None).process(victim.pid)
        assert proc is not None
        result = link.request(
            {
                "cmd": "kill",
                "boot_id": link.boot_id,
                "targets": [{"pid": victim.pid, "start_ticks": proc.start_ticks}],
                "signal": "KILL",
            },
            30.0,
        )
        assert [o["result"] for o in result["outcomes"]] == ["refused"]
        assert victim.poll() is None
    finally:
        link.close()
        _reap(victim)


def test_a_python_without_pynvml_and_no_nvidia_smi_gets_full_nvml_over_ssh(
    sshd_factory: SshdFactory, ssh_client: ClientHome, fake_nvml: FakeNvml, bare_python: str
) -> None:
    """The common remote: the driver, and a system python3 with nothing installed (no pynvml, no psutil, no
    nvidia-smi on PATH). The collector's own pynvml reads every GPU and its processes through NVML."""
    server = sshd_factory(python="bare")
    assert shutil.which("nvidia-smi", path=server.env["PATH"]) is None
    bare = subprocess.run([bare_python, "-c", "import pynvml"], capture_output=True, timeout=60)
    assert bare.returncode != 0  # the session's python3 has no bindings of its own
    ssh_client.add_host("bare-host", server)
    ssh_client.trust(server)
    with script(CHAIN, ["root", "holder", "leaf"]) as chain:
        holder = chain.pids["holder"]
        fake_nvml.state.add_holder(6, holder, 30000)
        fake_nvml.state.gpus[2].util_pct = 87
        fake_nvml.write()
        link = SshLink("bare-host", FAST)
        link.open()
        try:
            assert link.hello is not None
            assert (link.mode, link.hello["pynvml"], link.hello["error"]) == ("nvml", "bundled", None)
            assert link.hello["psutil"] is False
            snapshot = _until(link, lambda s: bool(s.processes))
        finally:
            link.close()
    assert snapshot.mode_label == "NVML"
    assert snapshot.error is None
    assert len(snapshot.gpus) == 8
    assert [g.memory_total_mib for g in snapshot.gpus] == [49152] * 8
    assert snapshot.gpus[6].memory_used_mib == 30003
    assert snapshot.gpus[2].utilization_pct == 87
    assert all(g.temperature_c is not None and g.power_w is not None for g in snapshot.gpus)
    assert [(p.pid, p.used_mib) for p in snapshot.gpus[6].processes] == [(holder, 30000)]
    listed = {p.pid: p for p in snapshot.processes}
    assert {chain.pids["root"], holder, chain.pids["leaf"]} <= set(listed)
    assert listed[holder].gpu_memory_mib == {6: 30000}


def test_health_urls_travel_as_json_and_are_probed_remotely(
    sshd_factory: SshdFactory, ssh_client: ClientHome, tmp_path: Path
) -> None:
    server = sshd_factory()
    ssh_client.add_host("host-a", server)
    ssh_client.trust(server)
    canary = tmp_path / "canary"
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}/health?x=$(touch%20{canary})"
    link = SshLink("host-a", replace(FAST, health_urls=(url,), discover_health=False))
    link.open()
    try:
        probed = _until(link, lambda s: any(h.url == url and h.state is not None for h in s.endpoints))
        assert [h.url for h in probed.endpoints] == [url]
        assert probed.endpoints[0].state not in (None, "UP")  # nothing listens there
    finally:
        link.close()
    assert not canary.exists()
