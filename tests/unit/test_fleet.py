"""The fleet's data side: memory-only verdicts, overview rows, sorting and filtering, SSH targets from
Prometheus labels, the check's exit status, and the poller's thread."""

from __future__ import annotations

import threading
import time

import pytest

from gputui.commands.fleet_report import fleet_status, format_fleet_check, format_fleet_table, host_status
from gputui.core.fleet import (
    SORT_MODES,
    FleetSample,
    analyze_fleet,
    check_template,
    matches,
    memory_text,
    sort_key,
    ssh_target_for,
    summarize,
)
from gputui.core.link import BadTarget
from gputui.core.model import Gpu, HostSnapshot, replace
from gputui.core.text import size_text
from gputui.core.verdict import Baselines, memory_verdict
from gputui.transports.prometheus import PrometheusError, parse_answer
from gputui.ui.session.fleet_poller import FleetPoller
from tests.data.prometheus import load_answer


def _fleet() -> dict[str, object]:
    sample = analyze_fleet(parse_answer(load_answer()), Baselines())
    return {host.name: host for host in sample.hosts}


def test_memory_verdict_judges_memory_alone_and_says_so() -> None:
    snapshot = HostSnapshot(
        target="h",
        mode="prometheus",
        gpus=(Gpu(index=0, memory_used_mib=3), Gpu(index=1, memory_used_mib=41236), Gpu(index=2)),
    )
    verdict = memory_verdict(snapshot, Baselines())
    assert not verdict.known  # GPU2 has no figure: cannot tell, never clean
    assert not verdict.clean
    assert [g.clean for g in verdict.gpus] == [True, False, False]
    assert verdict.reasons[0] == "GPU1 41236 MiB, 41233 MiB over its 3 MiB baseline (memory only)"
    assert verdict.reasons[1] == "GPU2 memory could not be read"
    readable = replace(snapshot, gpus=snapshot.gpus[:2])
    assert memory_verdict(readable, Baselines()).known
    clean = replace(snapshot, gpus=snapshot.gpus[:1])
    assert memory_verdict(clean, Baselines()).clean
    stale = replace(snapshot, error="no current data")
    assert not memory_verdict(stale, Baselines()).known


def test_rows_of_the_recorded_fleet() -> None:
    hosts = _fleet()
    a = summarize(hosts["gpu-a"])  # type: ignore[arg-type]
    assert a.state == "live"
    assert a.gpus == 8
    assert a.at_baseline == 7
    assert a.used_mib == 41236 + 7 * 3
    assert a.total_mib == 8 * 81920
    assert a.hottest == (3, 84)
    assert a.hottest_power_w == 612.4
    assert a.xid == ((3, 79),)
    assert a.server == "vllm: 3 running, 1 waiting"
    assert a.server_state == "UP"
    assert memory_text(a) == "40G/640G"
    c = summarize(hosts["gpu-c"])  # type: ignore[arg-type]
    assert c.state == "stale"
    assert c.at_baseline is None
    assert c.used_mib is None
    assert c.hottest is None
    assert c.xid == ()
    assert c.error
    assert "up=0" in c.error


def test_a_row_turns_stale_as_the_answer_ages() -> None:
    host = _fleet()["gpu-a"]
    assert summarize(host, since_s=5.0, stale_after_s=90.0).state == "live"  # type: ignore[arg-type]
    old = summarize(host, since_s=120.0, stale_after_s=90.0)  # type: ignore[arg-type]
    assert old.state == "stale"
    assert old.used_mib is None
    assert old.at_baseline is None
    assert old.age_s is not None
    assert old.age_s >= 120.0


def test_sorting_and_filtering() -> None:
    hosts = _fleet()
    rows = [summarize(h) for h in hosts.values()]  # type: ignore[arg-type]
    by = {mode: [r.name for r in sorted(rows, key=sort_key(mode))] for mode in SORT_MODES}
    assert by["host"] == sorted(by["host"])
    assert by["memory"][0] == "gpu-a"
    assert by["memory"][-1] == "gpu-c"
    assert by["temp"][0] == "gpu-a"
    assert by["age"][0] == "gpu-c"  # the oldest data first
    row = {r.name: r for r in rows}
    assert matches(row["gpu-a"], hosts["gpu-a"], "vllm")  # type: ignore[arg-type]
    assert matches(row["gpu-b"], hosts["gpu-b"], "h100")  # type: ignore[arg-type]
    assert matches(row["gpu-c"], hosts["gpu-c"], "stale")  # type: ignore[arg-type]
    assert not matches(row["gpu-b"], hosts["gpu-b"], "vllm")  # type: ignore[arg-type]


def test_sizes() -> None:
    assert [size_text(v) for v in (None, 24, 9728, 655360)] == ["–", "24M", "9.5G", "640G"]


def test_ssh_targets_from_labels() -> None:
    hosts = _fleet()
    assert ssh_target_for("{host}", hosts["gpu-a"]) == "gpu-a"  # type: ignore[arg-type]
    assert ssh_target_for("root@{host}.cluster:2222", hosts["gpu-a"]) == "root@gpu-a.cluster:2222"  # type: ignore[arg-type]
    by_instance = next(h for name, h in hosts.items() if name.startswith("127.0.0.1:"))
    assert ssh_target_for("{host}", by_instance) == "127.0.0.1"  # type: ignore[arg-type]  # the port is the exporter's


@pytest.mark.parametrize(
    "label",
    [
        "-oProxyCommand=touch /tmp/x",
        "gpu a",
        "gpu;rm -rf ~",
        "$(id)",
        "gpu-\x1b]0;x\x07",
        "root@gpu",
        "gpu:22",
        "",
    ],
)
def test_hostile_host_labels_never_become_ssh_targets(label: str) -> None:
    host = replace(_fleet()["gpu-a"], ssh_host=label)  # type: ignore[type-var]
    with pytest.raises(BadTarget) as caught:
        ssh_target_for("{host}", host)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("template", ["", "gpu", "{host}{host}", "-o{host}", "{host} x"])
def test_bad_templates(template: str) -> None:
    with pytest.raises(ValueError, match="ssh_target"):
        check_template(template)


def test_check_statuses_and_lines() -> None:
    sample = analyze_fleet(parse_answer(load_answer()), Baselines())
    statuses = {h.name: host_status(h.snapshot) for h in sample.hosts}
    assert statuses["gpu-a"] == 1
    assert statuses["gpu-b"] == 0
    assert statuses["gpu-c"] == 2
    assert fleet_status(sample) == 2  # cannot tell anywhere wins, as in gputui check
    assert fleet_status(FleetSample(hosts=())) == 2
    assert fleet_status(None) == 2
    lines = format_fleet_check(sample, ("ok", "X"))
    assert lines[-1].startswith("X NOT CLEAN: 2/4 hosts, 19/22 GPUs at baseline (memory only")
    # GPU3's last Xid (DCGM_FI_DEV_XID_ERRORS) is 79: the table asks for a reboot, whatever its memory.
    assert any(
        line.startswith(
            "X gpu-a  NOT READY: GPU3 needs a reboot of the host (Xid 79: GPU has fallen off the bus)"
        )
        for line in lines
    )
    assert any("GPU3 41236 MiB" in line for line in lines)
    assert any(line.startswith("X gpu-c  cannot tell: no current data") for line in lines)
    clean = FleetSample(hosts=tuple(h for h in sample.hosts if h.name != "gpu-a" and h.name != "gpu-c"))
    assert fleet_status(clean) == 0
    assert format_fleet_check(clean, ("ok", "X"))[-1].startswith("ok CLEAN: 2/2 hosts")


def test_the_table_shows_mig_instances_and_errors() -> None:
    lines = format_fleet_table(analyze_fleet(parse_answer(load_answer()), Baselines()))
    assert lines[0].split()[:4] == ["HOST", "GPUS", "BASE", "MEMORY"]
    text = "\n".join(lines)
    assert "GPU0 MIG 1 (3g.40gb)" in text
    assert "GPU0 MIG 2 (3g.40gb)" in text
    assert "79@GPU3" in text
    assert "vllm: 3 running, 1 waiting" in text
    assert "  ! no current data: its exporter is down (up=0)" in text


def test_the_poller_asks_again_after_each_answer_and_stops() -> None:
    calls: list[float] = []
    answers: list[object] = []
    answered = threading.Event()

    def read() -> FleetSample:
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise PrometheusError("prometheus http://x: cannot connect: Connection refused")
        return FleetSample(hosts=())

    def deliver(update: object) -> None:
        answers.append(update)
        if len(answers) >= 3:
            answered.set()

    poller = FleetPoller(read, deliver, interval_s=0.05)
    poller.start()
    assert answered.wait(20)
    poller.stop()
    errors = [getattr(a, "error", None) for a in answers[:3]]
    assert errors == [None, "prometheus http://x: cannot connect: Connection refused", None]
    count = len(calls)
    time.sleep(0.3)
    assert len(calls) <= count + 1  # stopped: at most the query in flight finishes


def test_a_paused_poller_asks_nothing_until_resumed() -> None:
    calls: list[int] = []
    resumed = threading.Event()

    def read() -> FleetSample:
        calls.append(1)
        if len(calls) > 1:
            resumed.set()
        return FleetSample(hosts=())

    poller = FleetPoller(read, lambda update: None, interval_s=0.02)
    poller.pause()
    poller.start()
    time.sleep(0.3)
    assert calls == []
    poller.resume()
    assert resumed.wait(20)
    poller.stop()


def test_resuming_a_running_poller_does_not_ask_twice() -> None:
    calls: list[int] = []

    def read() -> FleetSample:
        calls.append(1)
        return FleetSample(hosts=())

    poller = FleetPoller(read, lambda update: None, interval_s=3600.0)
    poller.start()
    deadline = time.monotonic() + 20
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    poller.resume()  # the view is shown for the first time: it is asking already
    time.sleep(0.3)
    poller.stop()
    assert calls == [1]


def test_fleet_baselines_find_calibrations_by_uuid(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from gputui.core.fleet import fleet_baselines
    from gputui.core.store import save_baselines

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    sample = parse_answer(load_answer())
    gpu3 = {h.name: h for h in sample.hosts}["gpu-a"].snapshot.gpus[3]
    assert gpu3.uuid is not None
    # Calibrated over SSH under another name than the fleet's label: the UUID still finds it.
    save_baselines("root@10.0.0.7", {gpu3.uuid: 41236, "index:3": 1})
    baselines, warning = fleet_baselines(None, None)
    assert warning is None
    assert baselines.per_gpu_mib == {gpu3.uuid: 41236}  # index keys mean nothing on another host
    a = {h.name: h for h in analyze_fleet(sample, baselines).hosts}["gpu-a"]
    assert a.snapshot.verdict is not None
    # Every GPU at its baseline; GPU3's Xid 79 alone keeps the host from its clean slate.
    assert all(g.clean for g in a.snapshot.verdict.gpus if g.index != 3)
    assert a.snapshot.verdict.not_ready == (
        "GPU3 needs a reboot of the host (Xid 79: GPU has fallen off the bus)",
    )
    assert fleet_baselines(5, 0)[0].per_gpu_mib == {}  # --baseline-mib wins
    (tmp_path / "gputui" / "baselines.json").write_text("{not json")
    baselines, warning = fleet_baselines(None, None)
    assert baselines.per_gpu_mib == {}
    assert warning is not None
    assert "not valid JSON" in warning


def test_each_fleet_host_line_says_the_level_its_exit_code_means() -> None:
    """Words and exit code from the one verdict: a host that cannot be told is never "NOT CLEAN"."""
    sample = analyze_fleet(parse_answer(load_answer()), Baselines())
    unreadable = replace(
        sample.hosts[0],
        name="gpu-nan",
        snapshot=HostSnapshot(target="gpu-nan", gpus=(Gpu(index=0, error="DCGM sent no memory figure"),)),
    )
    sample = analyze_fleet(replace(sample, hosts=(*sample.hosts, unreadable)), Baselines())
    lines = format_fleet_check(sample, ("ok", "X"))
    words = {0: ("CLEAN",), 1: ("NOT CLEAN", "NOT READY"), 2: ("cannot tell",)}
    for host in sample.hosts:
        status = host_status(host.snapshot)
        line = [text for text in lines if text.startswith(f"X {host.name}  ")]
        if status == 0:
            assert not line
        else:
            said = line[0][len(f"X {host.name}  ") :]
            assert any(said.startswith(f"{word}: ") for word in words[status]), (line, status)
            assert (
                host.snapshot.verdict is None or status == 2 or said.startswith(host.snapshot.verdict.level)
            )
    assert host_status(sample.hosts[-1].snapshot) == 2
