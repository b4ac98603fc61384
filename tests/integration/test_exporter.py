"""``gputui exporter`` end to end: a real exporter process (the collector inside it reads real /proc and the
fake NVML) scraped by a real Prometheus on loopback, beside a DCGM-format exporter for the same host, while
real processes make a defunct leader holding GPU memory and a true zombie. The fleet reads both back, joined
by host; ``check --prometheus`` fails, then passes once the processes are killed.

Also: listening beyond loopback is refused without TLS or ``--insecure`` (said first in the log), TLS with
prometheus_client's own options, the textfile mode, a hung device that never holds a scrape, and no kill
path (nothing but GET answers).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputui.core.fleet import FleetHost, analyze_fleet, summarize
from gputui.core.verdict import Baselines
from gputui.transports.prometheus import FleetSettings, PrometheusSource
from tests.fakenvml import FakeGpu, FakeNvmlState
from tests.integration.dcgm_exporter import Exporters, gpu_uuid
from tests.integration.defunct import build_defunct_leader, defunct_leader
from tests.integration.exporter_proc import ExporterProcess, free_port
from tests.integration.procs import REPO, gputui_env, state_of, wait_for
from tests.integration.prometheus import PrometheusServer

pytestmark = pytest.mark.timeout(240)

HELD_MIB = 2048
GHOST_MIB = 4096
NODE = os.uname().nodename
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_defunct_leader(tmp_path_factory.mktemp("defunct"))


@pytest.fixture
def env(fake_nvml: Any, tmp_path: Path) -> dict[str, str]:
    # Two GPUs with the UUIDs the DCGM stand-in gives this host's, so the two exporters' GPUs join.
    fake_nvml.state = FakeNvmlState(gpus=[FakeGpu(uuid=gpu_uuid(NODE, i), total_mib=81920) for i in range(2)])
    fake_nvml.write()
    environment = gputui_env(fake_nvml, tmp_path / "state")
    environment["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return environment


@pytest.fixture
def exporter(env: dict[str, str], tmp_path: Path) -> Iterator[ExporterProcess]:
    process = ExporterProcess(env, tmp_path / "exporter.log")
    try:
        yield process.start()
    finally:
        process.stop()


def _gputui(env: dict[str, str], *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        env=env,
    )


def _fleet_until(source: PrometheusSource, condition: Any, what: str) -> FleetHost:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        sample = analyze_fleet(source.sample(), Baselines())
        host = next((h for h in sample.hosts if h.name == NODE), None)
        if host is not None and condition(host):
            return host
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {sample.hosts}")
        time.sleep(0.25)


def _kinds(host: FleetHost) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for finding in host.snapshot.findings:
        out.setdefault(finding.kind, []).append(finding)
    return out


def test_the_fleet_shows_the_exported_findings_and_check_follows_the_kill(
    program: Path, fake_nvml: Any, env: dict[str, str], exporter: ExporterProcess, tmp_path: Path
) -> None:
    dcgm = Exporters([{"name": NODE, "gpus": 2}])
    prometheus = PrometheusServer(
        tmp_path / "prometheus",
        {"dcgm": [(dcgm.address(NODE), {})], "gputui": [(exporter.address, {})]},
    )
    try:
        prometheus.start()
        with defunct_leader(program) as running:
            leader, zombie = running.pids["leader"], running.pids["zombie"]
            wait_for(lambda: state_of(leader) == "Z", "the leader to be defunct")
            wait_for(lambda: state_of(zombie) == "Z", "the child to be a zombie")
            fake_nvml.state.add_holder(0, leader, HELD_MIB, "compute")
            # GPU1 holds memory no process is listed for: a ghost.
            fake_nvml.state.gpus[1].baseline_mib = GHOST_MIB + 3
            fake_nvml.write()
            dcgm.set(NODE, 0, used=HELD_MIB + 3)
            dcgm.set(NODE, 1, used=GHOST_MIB + 3)
            source = PrometheusSource(FleetSettings(url=prometheus.url))
            host = _fleet_until(
                source,
                lambda h: (
                    {"defunct_leader", "zombie", "ghost_memory"} <= set(_kinds(h)) and len(h.instances) == 2
                ),
                "the exported findings beside DCGM's series",
            )
            # Joined by host and GPU UUID: two GPUs, not four; DCGM's figures beside gputui's findings.
            assert len(host.snapshot.gpus) == 2
            assert host.snapshot.gpus[0].memory_used_mib == HELD_MIB + 3
            kinds = _kinds(host)
            (defunct,) = kinds["defunct_leader"]
            assert defunct.pid == leader
            assert f"holding {HELD_MIB} MiB on GPU0" in defunct.detail
            assert "thread lives on" in defunct.detail or "threads live on" in defunct.detail
            (true_zombie,) = kinds["zombie"]
            assert true_zombie.pid == zombie
            assert f"its parent {leader} (" in true_zombie.detail
            # The fleet words each finding from the exported facts with the monitor's own function: the
            # same sentence and the same action as this host's own snapshot says.
            local = json.loads(_gputui(env, "snapshot", "--json", "--no-discover").stdout)
            (mine,) = local["hosts"]
            monitor = {(f["kind"], f["pid"], f["gpu_index"]): f for f in mine["findings"]}
            fleet = {(f.kind, f.pid, f.gpu_index): f for f in host.snapshot.findings}
            for key in [k for k in monitor if k[0] in ("defunct_leader", "zombie", "ghost_memory")]:
                assert key in fleet, (key, sorted(fleet))
                assert fleet[key].detail == monitor[key]["detail"]
                assert fleet[key].action == monitor[key]["action"]
            assert {k[0] for k in monitor} >= {"defunct_leader", "zombie", "ghost_memory"}
            verdict = host.snapshot.verdict
            assert verdict is not None
            assert verdict.known
            assert not verdict.clean
            row = summarize(host)
            assert not row.memory_only
            assert row.dead_held_mib == HELD_MIB + GHOST_MIB  # the ghost is memory no one live holds

            done = _gputui(env, "snapshot", "--prometheus", prometheus.url, "--json")
            assert done.returncode == 0, done.stderr
            document = json.loads(done.stdout)
            (entry,) = [h for h in document["hosts"] if h["target"] == NODE]
            assert document["source"]["exporter_hosts"] == [NODE]
            assert {"defunct_leader", "zombie"} <= {f["kind"] for f in entry["findings"]}
            assert document["source"]["memory_only_hosts"] == []

            check = _gputui(env, "check", "--prometheus", prometheus.url)
            assert check.returncode == 1, (check.stdout, check.stderr)
            assert f"{NODE}  NOT CLEAN" in check.stdout
            assert "every host runs the gputui exporter" in check.stdout
            running.kill()
        wait_for(lambda: state_of(leader) is None, "the defunct process to be gone")
        dcgm.set(NODE, 0, used=3)
        dcgm.set(NODE, 1, used=3)
        fake_nvml.state.gpus[1].baseline_mib = 3
        fake_nvml.write()
        check = _gputui(env, "check", "--prometheus", prometheus.url, "--wait", "60")
        assert check.returncode == 0, (check.stdout, check.stderr)
        assert "✓ CLEAN: 1/1 hosts, 2/2 GPUs at baseline" in check.stdout
    finally:
        prometheus.stop()
        dcgm.close()
    assert exporter.stop() == 0
    log = exporter.log()
    assert "serving http://127.0.0.1:" in log
    assert "no kill path" in log
    assert "Traceback" not in log


def _exported(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (
            sample.name,
            tuple(sorted((k, v) for k, v in sample.labels.items() if k != "Hostname")),
        ): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def unfit_exporter(fake_nvml: Any, env: dict[str, str], tmp_path: Path) -> Iterator[ExporterProcess]:
    """The exporter over GPUs whose own fitness is not: GPU0's driver asks for a reset (recovery action 1),
    GPU1's NVLink fabric registration is in progress. Set before it starts: the collector reads fitness every
    ``FITNESS_INTERVAL_S`` (30 s)."""
    fake_nvml.state.gpus[0].recovery_action = 1
    fake_nvml.state.gpus[1].fabric_state = 2
    fake_nvml.write()
    process = ExporterProcess(env, tmp_path / "unfit.log")
    try:
        yield process.start()
    finally:
        process.stop()


def test_a_gpu_s_own_fitness_is_exported_and_the_fleet_says_not_ready_as_check_does(
    env: dict[str, str], unfit_exporter: ExporterProcess, tmp_path: Path
) -> None:
    """The exporter serves GPU0's recovery action and GPU1's fabric state, their actions and
    ``check="gpu_health"`` 1; the fleet, through a real Prometheus and beside DCGM's series, says NOT READY
    with ``gputui check``'s own sentences."""
    exporter = unfit_exporter
    uuid0, uuid1 = (("UUID", gpu_uuid(NODE, 0)), ("gpu", "0")), (("UUID", gpu_uuid(NODE, 1)), ("gpu", "1"))
    recovery = ("gputui_gpu_recovery_action", (uuid0[0], uuid0[1], ("name", "GPU Reset")))

    def served() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return _exported(exporter.scrape())

    wait_for(lambda: served().get(recovery) == 1.0, "the recovery action in the exporter's series")
    values = served()
    assert values[("gputui_check_available", (("check", "gpu_health"),))] == 1.0
    fabric = [
        (dict(labels), value) for (name, labels), value in values.items() if name == "gputui_gpu_fabric_state"
    ]
    assert [(labels["gpu"], labels["state"], value) for labels, value in fabric] == [
        ("1", "in_progress", 2.0)
    ]
    assert fabric[0][0]["fabric_manager"] in ("running", "not running")
    assert values[("gputui_gpu_fitness_action", (uuid0[0], ("action", "reset"), uuid0[1]))] == 1.0
    assert (
        values[("gputui_gpu_fitness_action", (uuid1[0], ("action", "restart_fabric_manager"), uuid1[1]))]
        == 1.0
    )
    assert values[("gputui_gpu_fitness_action", (uuid1[0], ("action", "none"), uuid1[1]))] == 0.0
    reasons = {dict(k)["gpu"]: dict(k)["reason"] for name, k in values if name == "gputui_clean_slate"}
    assert reasons == {"0": "gpu_health", "1": "gpu_health", "": "gpu"}  # not ghost memory

    local = json.loads(_gputui(env, "snapshot", "--json", "--no-discover").stdout)["hosts"][0]
    not_ready = local["verdict"]["not_ready"]
    assert not_ready[0] == "GPU0 needs a reset (the driver asks for GPU Reset)"
    assert not_ready[1].startswith(
        "GPU1 is not registered with the NVLink fabric (NVLink fabric registration "
    )
    check = _gputui(env, "check", "--no-discover")
    assert check.returncode == 1
    assert f"GPUs:    ✗ {not_ready[0]}" in check.stdout

    dcgm = Exporters([{"name": NODE, "gpus": 2}])
    prometheus = PrometheusServer(
        tmp_path / "prometheus",
        {"dcgm": [(dcgm.address(NODE), {})], "gputui": [(exporter.address, {})]},
    )
    try:
        prometheus.start()
        source = PrometheusSource(FleetSettings(url=prometheus.url))
        host = _fleet_until(
            source,
            lambda h: len(h.instances) == 2 and bool(h.snapshot.verdict and h.snapshot.verdict.not_ready),
            "NOT READY from the exported fitness",
        )
        verdict = host.snapshot.verdict
        assert verdict is not None
        assert list(verdict.not_ready) == not_ready
        assert verdict.level == "NOT READY"
        monitor = {
            (f["gpu_index"], f["detail"], f["action"]) for f in local["findings"] if f["kind"] == "gpu_health"
        }
        fleet = {(f.gpu_index, f.detail, f.action) for f in _kinds(host)["gpu_health"]}
        assert fleet == monitor
        assert host.exported is not None
        assert "gpu_health" not in host.exported.cannot_check

        done = _gputui(env, "check", "--prometheus", prometheus.url)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert f"{NODE}  NOT READY: {not_ready[0]}; {not_ready[1]}" in done.stdout
        assert "ghost memory" not in done.stdout
    finally:
        prometheus.stop()
        dcgm.close()


def test_nothing_but_get_is_answered(exporter: ExporterProcess) -> None:
    body = json.dumps({"cmd": "kill", "pids": [1], "signal": "KILL"}).encode()
    for method in ("POST", "PUT", "DELETE"):
        request = urllib.request.Request(exporter.url, data=body, method=method)  # noqa: S310 - loopback
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)  # noqa: S310 - loopback
        assert refused.value.code == 405
    assert "gputui_clean_slate" in exporter.scrape()


def test_a_hung_device_never_holds_a_scrape(fake_nvml: Any, exporter: ExporterProcess) -> None:
    for gpu in fake_nvml.state.gpus:
        gpu.hang_ms = 8000
    fake_nvml.write()
    ages: list[float] = []
    unreadable = 0
    deadline = time.monotonic() + 6.0
    while time.monotonic() < deadline:
        started = time.monotonic()
        text = exporter.scrape(timeout_s=5)
        assert time.monotonic() - started < 1.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "gputui_sample_age_seconds":
                    ages.append(sample.value)
                elif sample.name == "gputui_gpu_readable" and sample.value == 0:
                    unreadable += 1
        time.sleep(0.3)
    # The newest sample ages while the devices hang, or its GPUs say they timed out: never served as new.
    assert max(ages) > 1.5 or unreadable, (ages, unreadable)


def test_beyond_loopback_needs_tls_or_insecure(env: dict[str, str], tmp_path: Path) -> None:
    refused = _gputui(env, "exporter", "--listen", f"0.0.0.0:{free_port()}", timeout_s=30)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0
    assert "give --certfile and --keyfile, or --insecure" in refused.stderr
    for bad in ("gpu-a:1", "127.0.0.1:0", "127.0.0.1:http", "[::1]"):
        done = _gputui(env, "exporter", "--listen", bad, timeout_s=30)
        assert done.returncode == 2
        assert "--listen" in done.stderr
        assert "Traceback" not in done.stderr
    insecure = ExporterProcess(env, tmp_path / "insecure.log", "--insecure")
    insecure.args[insecure.args.index("--listen") + 1] = f"0.0.0.0:{insecure.port}"
    try:
        insecure.start()
    finally:
        assert insecure.stop() == 0
    first = insecure.log().splitlines()[0]
    assert "insecure: plain HTTP on 0.0.0.0" in first


def test_tls_with_prometheus_client_s_own_options(env: dict[str, str], tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    served = ExporterProcess(env, tmp_path / "tls.log", "--certfile", str(cert), "--keyfile", str(key))
    served.scrape = lambda timeout_s=5.0: _tls_get(served, cert, timeout_s)  # type: ignore[method-assign]
    try:
        served.start()
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(served.url, timeout=5)  # noqa: S310 - plain HTTP to a TLS port fails
    finally:
        assert served.stop() == 0
    assert "serving https://127.0.0.1:" in served.log()
    half = _gputui(env, "exporter", "--certfile", str(cert), timeout_s=30)
    assert half.returncode == 2
    assert "go together" in half.stderr


def _tls_get(served: ExporterProcess, cert: Path, timeout_s: float) -> str:
    context = ssl.create_default_context(cafile=str(cert))
    url = served.url.replace("http://", "https://")
    with urllib.request.urlopen(url, timeout=timeout_s, context=context) as answer:  # noqa: S310
        return answer.read().decode()


def test_once_writes_one_textfile_atomically(env: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "textfile" / "gputui.prom"
    target.parent.mkdir()
    target.write_text("old\n")
    done = _gputui(env, "exporter", "--once", str(target), "--no-discover")
    assert done.returncode == 0, done.stderr
    text = target.read_text()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"gputui_clean_slate", "gputui_findings", "gputui_gpu_memory_used_bytes"} <= names
    assert [p.name for p in target.parent.iterdir()] == ["gputui.prom"]  # no temporary file left
    # A directory where the file should go: one line, nothing written, no traceback.
    (tmp_path / "dir.prom").mkdir()
    failed = _gputui(env, "exporter", "--once", str(tmp_path / "dir.prom"), "--no-discover")
    assert failed.returncode == 2
    assert failed.stderr.count("\n") == 1
    assert "Traceback" not in failed.stderr


@pytest.mark.parametrize("planted", ["certfile", "keyfile"])
def test_a_fifo_as_a_tls_file_is_one_line_not_a_hang(
    env: dict[str, str], tmp_path: Path, planted: str
) -> None:
    files = {"certfile": tmp_path / "cert.pem", "keyfile": tmp_path / "key.pem"}
    for name, path in files.items():
        if name == planted:
            os.mkfifo(path)  # the TLS library would block for ever opening it
        else:
            path.write_text("-----BEGIN X-----\n")
    started = time.monotonic()
    done = _gputui(
        env,
        "exporter",
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--certfile",
        str(files["certfile"]),
        "--keyfile",
        str(files["keyfile"]),
        timeout_s=30,
    )
    assert time.monotonic() - started < 20
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.endswith(f"--{planted}: {files[planted]}: a FIFO, not a regular file"), line


def test_silent_connections_neither_hold_threads_for_ever_nor_block_a_scrape(
    exporter: ExporterProcess,
) -> None:
    import socket

    from gputui.commands import exporter as exporter_module

    assert exporter.process is not None
    silent = []
    try:
        for _ in range(3 * exporter_module.MAX_CONNECTIONS):
            silent.append(socket.create_connection(("127.0.0.1", exporter.port), timeout=5))
        time.sleep(1.0)
        with urllib.request.urlopen(exporter.url, timeout=10) as answer:  # noqa: S310 - loopback
            assert b"gputui_" in answer.read()
        threads = int(
            next(
                line.split()[1]
                for line in Path(f"/proc/{exporter.process.pid}/status").read_text().splitlines()
                if line.startswith("Threads:")
            )
        )
        assert threads < exporter_module.MAX_CONNECTIONS + 16, threads
        # A connection that says nothing is closed after the idle deadline, never held.
        deadline = time.monotonic() + exporter_module.IDLE_TIMEOUT_S + 10
        first = silent[0]
        first.settimeout(max(0.1, deadline - time.monotonic()))
        assert first.recv(1) == b""
    finally:
        for connection in silent:
            connection.close()


def _key_pair(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        + ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    key.chmod(0o600)
    return cert, key


def _plant(case: str, tmp_path: Path) -> tuple[Path, Path, str]:
    """A certificate and key with one thing wrong, and what the refusal says."""
    if case == "key readable by others":
        cert, key = _key_pair(tmp_path / "tls")
        key.chmod(0o644)
        return cert, key, "a private key that others may read (mode 0644"
    if case == "key of another user":
        cert, key = _key_pair(tmp_path / "tls")
        os.chown(key, 65534, 65534)
        return cert, key, "owned by uid 65534"
    cert, real = _key_pair(tmp_path / "tls")
    _cert, key = _key_pair(tmp_path / "open")
    (tmp_path / "open").chmod(0o777)
    said = f"folder {tmp_path / 'open'}: writable by group or others (mode 0777)"
    if case == "key in a folder anyone may write":
        return cert, key, said
    # A link to a key that lives in a folder anyone may write: the file it leads to is what is checked.
    link = tmp_path / "tls" / "link.pem"
    link.symlink_to(key)
    return cert, link, said


@pytest.mark.parametrize(
    "case",
    [
        "key readable by others",
        "key of another user",
        "key in a folder anyone may write",
        "link to a key in a folder anyone may write",
    ],
)
def test_a_tls_key_is_checked_like_a_state_file(env: dict[str, str], tmp_path: Path, case: str) -> None:
    """RELIABILITY 56: a key others may read or replace is refused in one line, before anything listens."""
    cert, key, said = _plant(case, tmp_path)
    port = free_port()
    done = _gputui(
        env,
        "exporter",
        "--listen",
        f"127.0.0.1:{port}",
        "--certfile",
        str(cert),
        "--keyfile",
        str(key),
        timeout_s=30,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "--keyfile: " in line
    assert said in line, line


def test_a_tls_key_behind_a_link_as_kubernetes_mounts_secrets_is_served(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A secret volume: ``tls.key -> ..data/key.pem``, ``..data -> ..2026_12_01``, files 0600."""
    cert, key = _key_pair(tmp_path / "secret" / "..2026_12_01")
    (tmp_path / "secret" / "..data").symlink_to("..2026_12_01")
    (tmp_path / "secret" / "tls.key").symlink_to("..data/key.pem")
    (tmp_path / "secret" / "tls.crt").symlink_to("..data/cert.pem")
    served = ExporterProcess(
        env,
        tmp_path / "tls.log",
        "--certfile",
        str(tmp_path / "secret" / "tls.crt"),
        "--keyfile",
        str(tmp_path / "secret" / "tls.key"),
    )
    served.scrape = lambda timeout_s=5.0: _tls_get(served, cert, timeout_s)  # type: ignore[method-assign]
    try:
        served.start()
    finally:
        assert served.stop() == 0
    assert "serving https://127.0.0.1:" in served.log()
