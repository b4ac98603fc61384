"""The fleet source's unit layer: an answer recorded from a real Prometheus (``tests/data/prometheus``), and
the edge cases made from it: NaN, missing labels, duplicate series, MIG, stale and gone hosts, bad answers."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gputui.core.fleet import analyze_fleet
from gputui.core.verdict import Baselines
from gputui.transports.prometheus import (
    FB_USED,
    PART_LABEL,
    FleetSettings,
    PrometheusError,
    PrometheusSource,
    build_query,
    normalise_url,
    parse_answer,
    parse_matcher,
)
from gputui.transports.prometheus.query import TIME_ANCHORS
from tests.data.prometheus import eval_time, fetcher_of, load_answer, scaled_answer
from tests.data.prometheus.dcgm4 import RENAMED, renamed_answer, with_series
from tests.integration.dcgm_exporter import IDLE_MIB, RESERVED_MIB, TOTAL_MIB


def _hosts(document: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return {host.name: host for host in parse_answer(document, **kwargs).hosts}


def _series(
    document: dict[str, Any], host: str, name: str | None, gpu: str | None = None
) -> list[dict[str, Any]]:
    """The current series of ``host`` named ``name`` (None: its own sample times), optionally of one GPU."""
    part = None if name is not None else "time"
    return [
        item
        for item in document["data"]["result"]
        if item["metric"].get("Hostname") == host
        and item["metric"].get("__name__") == name
        and item["metric"].get(PART_LABEL) == part
        and (gpu is None or item["metric"].get("gpu") == gpu)
    ]


def test_recorded_fleet_is_read_whole() -> None:
    document = load_answer()
    hosts = _hosts(document)
    instance_keyed = [name for name in hosts if name.startswith("127.0.0.1:")]
    assert sorted(hosts) == sorted(["gpu-a", "gpu-b", "gpu-c", *instance_keyed])
    assert len(instance_keyed) == 1  # the exporter without a Hostname label: keyed by its instance
    a = hosts["gpu-a"]
    assert not a.stale
    assert a.exporter_up is True
    assert a.snapshot.mode == "prometheus"
    assert a.snapshot.error is None
    assert a.age_s is not None
    assert 0 <= a.age_s < 5
    gpu3 = a.snapshot.gpus[3]
    memory = (gpu3.memory_used_mib, gpu3.memory_total_mib, gpu3.memory_reserved_mib)
    assert memory == (41236, TOTAL_MIB, RESERVED_MIB)
    assert (gpu3.utilization_pct, gpu3.temperature_c, gpu3.power_w) == (97, 84, 612.4)
    assert gpu3.uuid
    assert gpu3.uuid.startswith("GPU-")
    assert gpu3.name == "NVIDIA H100 80GB HBM3"
    assert [g.index for g in a.snapshot.gpus] == list(range(8))
    assert all(g.memory_used_mib == IDLE_MIB for g in a.snapshot.gpus if g.index != 3)
    assert a.xid == {3: 79}
    assert [(f.kind, f.gpu_index) for f in a.snapshot.findings] == [("xid", 3)]
    # The vLLM scrape target labelled Hostname="gpu-a" is that host's server, with its own up.
    (server,) = a.snapshot.endpoints
    assert server.state == "UP"
    assert server.detail == "vllm: 3 running, 1 waiting"
    # What DCGM cannot know stays unknown, never a fake empty value.
    assert a.snapshot.processes_time is None
    assert a.snapshot.device_holders is None
    d = hosts[instance_keyed[0]]
    assert d.ssh_host == "127.0.0.1"
    assert len(d.snapshot.gpus) == 8


def test_mig_instances_belong_to_their_gpu() -> None:
    b = _hosts(load_answer())["gpu-b"]
    assert [g.index for g in b.snapshot.gpus] == [0, 1, 2, 3]
    (instances,) = b.mig.values()
    assert list(b.mig) == [0]
    assert [(i.instance_id, i.profile) for i in instances] == [("1", "3g.40gb"), ("2", "3g.40gb")]
    gpu0 = b.snapshot.gpus[0]
    # No GPU-level memory series in MIG mode: the GPU holds what its instances hold.
    assert gpu0.memory_used_mib == sum(i.memory_used_mib or 0 for i in instances)
    assert gpu0.memory_total_mib == sum(i.memory_total_mib or 0 for i in instances)
    assert gpu0.temperature_c is not None  # GPU-level telemetry still comes from the GPU series


def test_a_dead_exporter_shows_its_host_stale_with_the_age_of_its_data() -> None:
    document = load_answer()
    c = _hosts(document)["gpu-c"]
    assert c.stale
    assert c.exporter_up is False
    assert c.age_s is not None
    assert c.age_s >= 2.0
    assert c.snapshot.error is not None
    assert "up=0" in c.snapshot.error
    assert "old" in c.snapshot.error
    # No figure at all: old values are never shown as current.
    assert [g.memory_used_mib for g in c.snapshot.gpus] == [None, None]
    assert all(g.uuid for g in c.snapshot.gpus)
    assert c.snapshot.time is not None
    assert c.snapshot.time < eval_time(document) - 2.0


def test_without_the_time_a_target_was_last_up_the_age_is_not_made_up() -> None:
    document = load_answer()
    result = document["data"]["result"]
    document["data"]["result"] = [i for i in result if i["metric"].get(PART_LABEL) != "up_time"]
    c = _hosts(document)["gpu-c"]
    assert c.stale
    assert c.age_s is None
    assert c.snapshot.error == "no current data: its exporter is down (up=0)"


def _down_target(instance: str, job: str) -> dict[str, Any]:
    return {"metric": {"__name__": "up", "instance": instance, "job": job}, "value": [1.0, "0"]}


def test_a_dcgm_target_down_for_longer_than_the_lookback_is_listed_by_address() -> None:
    document = load_answer()
    document["data"]["result"] += [_down_target("10.9.9.9:9400", "dcgm"), _down_target("10.9.9.9:9100", "x")]
    hosts = _hosts(document)
    down = hosts["10.9.9.9:9400"]
    assert down.stale
    assert down.exporter_up is False
    assert down.ssh_host == "10.9.9.9"
    assert down.snapshot.gpus == ()
    assert down.snapshot.error == (
        "no current data: its exporter is down (up=0), and Prometheus has none of its GPU series in the last"
        " 5m"
    )
    assert "10.9.9.9:9100" not in hosts  # another job's target: not a GPU host
    # With a matcher it cannot be told whether the user wanted it: left out.
    assert "10.9.9.9:9400" not in _hosts(document, list_down_targets=False)
    # Asked again, it is still the same host, not one that left.
    source = PrometheusSource(FleetSettings(url="http://127.0.0.1:9"), fetcher=fetcher_of(document))
    for _ in range(2):
        again = {h.name: h for h in source.sample().hosts}["10.9.9.9:9400"]
        assert not again.gone
    # The exporter of a known host is that host, not a host of its own.
    c_instance = _hosts(load_answer())["gpu-c"].instances[0]
    assert c_instance not in _hosts(document)


def test_old_samples_that_prometheus_still_serves_are_stale() -> None:
    """No staleness marker (federation, a restart): the instant selector hands out minutes-old values."""
    document = load_answer()
    for item in _series(document, "gpu-a", None):
        item["value"][1] = str(float(item["value"][1]) - 200.0)
    a = _hosts(document)["gpu-a"]
    assert a.stale
    assert a.age_s is not None
    assert a.age_s > 200
    assert "went stale" in (a.snapshot.error or "")
    assert "min old" in (a.snapshot.error or "")
    assert all(g.memory_used_mib is None for g in a.snapshot.gpus)
    # The same answer with a longer threshold is current again.
    assert not _hosts(document, stale_after_s=600.0)["gpu-a"].stale


def test_nan_and_garbage_values_become_missing_not_zero() -> None:
    document = load_answer()
    (used,) = _series(document, "gpu-a", FB_USED, gpu="2")
    used["value"][1] = "NaN"
    (temp,) = _series(document, "gpu-a", "DCGM_FI_DEV_GPU_TEMP", gpu="1")
    temp["value"][1] = "+Inf"
    (power,) = _series(document, "gpu-a", "DCGM_FI_DEV_POWER_USAGE", gpu="1")
    power["value"][1] = "bogus"
    a = _hosts(document)["gpu-a"]
    gpu2 = a.snapshot.gpus[2]
    assert gpu2.memory_used_mib is None
    assert gpu2.memory_total_mib is None
    # Named, and that GPU cannot tell: a source that sends such figures is not believed about the rest.
    assert gpu2.error == "impossible figures: DCGM_FI_DEV_FB_USED NaN"
    gpu1 = a.snapshot.gpus[1]
    assert gpu1.temperature_c is None
    assert gpu1.power_w is None
    assert gpu1.memory_used_mib == IDLE_MIB
    assert gpu1.error == ("impossible figures: DCGM_FI_DEV_GPU_TEMP +Inf, DCGM_FI_DEV_POWER_USAGE bogus")


def test_series_without_host_or_gpu_labels_are_left_out() -> None:
    document = load_answer()
    result = document["data"]["result"]
    nameless = copy.deepcopy(_series(document, "gpu-a", FB_USED, gpu="0")[0])
    for label in ("Hostname", "instance"):
        nameless["metric"].pop(label)
    gpuless = copy.deepcopy(_series(document, "gpu-a", FB_USED, gpu="1")[0])
    for label in ("UUID", "gpu"):
        gpuless["metric"].pop(label)
    result += [nameless, gpuless, {"metric": "not a dict", "value": [1, "2"]}, "junk"]
    sample = parse_answer(document)
    assert sample.ignored_series == 4
    assert len(_hosts(document)["gpu-a"].snapshot.gpus) == 8


def test_a_gpu_without_uuid_is_keyed_by_its_index() -> None:
    document = load_answer()
    for item in document["data"]["result"]:
        if item["metric"].get("Hostname") == "gpu-b":
            item["metric"].pop("UUID", None)
    b = _hosts(document)["gpu-b"]
    assert [g.index for g in b.snapshot.gpus] == [0, 1, 2, 3]
    assert all(g.uuid is None for g in b.snapshot.gpus)
    assert not b.stale  # its timestamps still join up with its values


def test_duplicate_series_resolve_to_the_newest_sample() -> None:
    """A Kubernetes pod that finished leaves series with its pod label for the lookback; a second job may
    scrape the same exporter. The newest own sample wins, whatever the order of the answer."""
    document = load_answer()
    result = document["data"]["result"]
    for item in _series(document, "gpu-a", FB_USED, gpu="5") + _series(document, "gpu-a", None, gpu="5"):
        old = copy.deepcopy(item)
        old["metric"]["pod"] = "trainer-0"
        if old["metric"].get("__name__") == FB_USED:
            old["value"][1] = "70000"  # what the finished pod held
        else:
            old["value"][1] = str(float(old["value"][1]) - 30.0)
        result.insert(0, old)
    gpu5 = _hosts(document)["gpu-a"].snapshot.gpus[5]
    assert gpu5.memory_used_mib == IDLE_MIB
    result.reverse()
    assert _hosts(document)["gpu-a"].snapshot.gpus[5].memory_used_mib == IDLE_MIB


def test_hostile_label_values_enter_the_model_visible() -> None:
    document = load_answer()
    evil = "gpu-\x1b]0;pwned\x07[b]x[/b]\u202e"
    for item in document["data"]["result"]:
        if item["metric"].get("Hostname") == "gpu-b":
            item["metric"]["Hostname"] = evil
    hosts = _hosts(document)
    shown = (
        "gpu-\\x1b]0;pwned\\x07[b]x[/b]\\u202e"  # made visible where the answer is read, markup kept as text
    )
    assert evil not in hosts
    assert hosts[shown].snapshot.target == shown


def test_servers_on_a_shared_address_are_not_guessed() -> None:
    """Several hosts behind 127.0.0.1: a server without a host label cannot be placed, so it is left out."""
    document = load_answer()
    for item in document["data"]["result"]:
        if item["metric"].get("__name__", "").startswith("vllm:"):
            item["metric"].pop("Hostname")
    assert all(not h.snapshot.endpoints for h in _hosts(document).values())


def test_a_known_server_whose_gauges_vanished_is_shown_down() -> None:
    document = load_answer()
    source = PrometheusSource(FleetSettings(url="http://127.0.0.1:9"), fetcher=fetcher_of(document))
    (server,) = {h.name: h for h in source.sample().hosts}["gpu-a"].snapshot.endpoints
    result = document["data"]["result"]
    document["data"]["result"] = [
        i for i in result if not i["metric"].get("__name__", "").startswith("vllm:")
    ]
    for item in document["data"]["result"]:
        if item["metric"].get("__name__") == "up" and item["metric"]["instance"] == server.url:
            item["value"][1] = "0"
    (down,) = {h.name: h for h in source.sample().hosts}["gpu-a"].snapshot.endpoints
    assert down.url == server.url
    assert down.state == "DOWN"


def test_a_host_that_leaves_prometheus_stays_listed_as_gone() -> None:
    document = load_answer()
    fetched = [document]
    source = PrometheusSource(FleetSettings(url="http://127.0.0.1:9"), fetcher=lambda u, q, t: fetched[-1])
    before = {h.name: h for h in source.sample().hosts}["gpu-b"]
    later = copy.deepcopy(document)
    later["data"]["result"] = [i for i in later["data"]["result"] if i["metric"].get("Hostname") != "gpu-b"]
    for item in later["data"]["result"]:
        item["value"][0] += 600.0
        if item["metric"].get("__name__") == "up" and item["metric"]["instance"] in before.instances:
            item["value"][1] = "0"  # its exporter is down: the gone host, not a host of its own
    fetched.append(later)
    gone = {h.name: h for h in source.sample().hosts}["gpu-b"]
    assert gone.gone
    assert gone.stale
    assert gone.age_s is not None
    assert before.data_time is not None
    assert gone.age_s > 590
    assert "no series in Prometheus any more" in (gone.snapshot.error or "")
    assert [g.uuid for g in gone.snapshot.gpus] == [g.uuid for g in before.snapshot.gpus]
    assert all(g.memory_used_mib is None for g in gone.snapshot.gpus)
    assert not set(before.instances) & {h.name for h in source.sample().hosts}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "not an instant vector"),
        ({"status": "success"}, "not an instant vector"),
        (
            {
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [
                        {"metric": {"__name__": FB_USED, "Hostname": ["x"], "gpu": "0"}, "value": [1, "3"]}
                    ],
                },
            },
            "malformed answer",
        ),
    ],
)
def test_answers_that_are_not_a_fleet_are_one_line(document: dict[str, Any], expected: str) -> None:
    settings = FleetSettings(url="http://user:secret@127.0.0.1:9")
    source = PrometheusSource(settings, fetcher=fetcher_of(document))
    with pytest.raises(PrometheusError) as caught:
        source.sample()
    line = str(caught.value)
    assert expected in line
    assert "\n" not in line
    assert line.startswith("prometheus http://127.0.0.1:9: ")
    assert "secret" not in line


def test_scaled_answer_keeps_the_recorded_shape() -> None:
    sample = parse_answer(scaled_answer(50))
    assert len(sample.hosts) == 50
    assert all(len(h.snapshot.gpus) == 8 and not h.stale and h.exporter_up for h in sample.hosts)
    assert len({g.uuid for h in sample.hosts for g in h.snapshot.gpus}) == 400


def test_the_query_marks_its_timestamp_parts_and_narrows_only_gpu_series() -> None:
    query = build_query(parse_matcher('{instance=~"gpu-.*", job="dcgm"}'))
    # The values, the live timestamps (one per anchor) and the looked-back ones, of DCGM's series and of
    # gputui's.
    assert query.count('instance=~"gpu-.*", job="dcgm"') == 7 + len(TIME_ANCHORS)
    assert '{__name__=~"gputui_.+",instance=~"gpu-.*", job="dcgm"}' in query
    assert f'"{PART_LABEL}"' in query
    assert '{__name__=~"up|vllm:num_requests_running|' in query  # up and servers: read whole, attached later


@pytest.mark.parametrize(
    "text",
    ['instance=~"gpu-.*"', '{job="dcgm"}', 'Hostname!=\'a\', instance!~"b\\"c",', ""],
)
def test_label_matchers_that_are_accepted(text: str) -> None:
    parse_matcher(text)


@pytest.mark.parametrize(
    "text",
    ['instance=~"gpu-.*"} or up{', "up", 'job="a" or vector(1)', '__name__="up"', 'job="unterminated'],
)
def test_label_matchers_that_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--match") as caught:
        parse_matcher(text)
    assert "\n" not in str(caught.value)


def test_urls() -> None:
    assert normalise_url("http://prom:9090/") == "http://prom:9090"
    assert normalise_url("https://x/prometheus/api/v1/query") == "https://x/prometheus"
    for bad in ("prom:9090", "ftp://x", "http://", "http://x/?q=1"):
        with pytest.raises(ValueError, match="--prometheus"):
            normalise_url(bad)


def test_dcgm_4_names_are_read_as_the_old_ones() -> None:
    """DCGM 4.6 renamed the Xid, page-retirement and row-remap fields; dcgm-exporter names a series as its
    counters file names the field, so a host may send the new names (``tests/data/prometheus/dcgm4.py``)."""
    a = _hosts(renamed_answer())["gpu-a"]
    assert a.xid == {3: 79}
    assert [(f.kind, f.gpu_index) for f in a.snapshot.findings] == [("xid", 3)]
    document = load_answer()
    for name, value in (
        ("DCGM_FI_DEV_ROW_REMAP_FAILED", 1),
        ("DCGM_FI_DEV_PAGE_RETIRED_PENDING", 1),
        ("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", 2),
        ("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", 5),
        ("DCGM_FI_DEV_GPU_RECOVERY_ACTION", 4),
    ):
        with_series(document, "gpu-a", 5, name, value)
    fitness = _hosts(document)["gpu-a"].snapshot.gpus[5].fitness
    assert fitness is not None
    assert (fitness.remap_failure, fitness.retired_pages_pending) == (True, True)
    assert (fitness.remapped_rows_uncorrectable, fitness.remapped_rows_correctable) == (2, 5)
    assert fitness.recovery_action == 4


def test_dcgm_s_recovery_action_makes_the_fleet_not_ready_by_either_name() -> None:
    for name in ("DCGM_FI_DEV_GPU_RECOVERY_ACTION", "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"):
        document = with_series(load_answer(), "gpu-a", 5, name, 1)
        sample = analyze_fleet(parse_answer(document), Baselines())
        a = next(h for h in sample.hosts if h.name == "gpu-a")
        assert a.snapshot.gpus[5].fitness is not None
        assert a.snapshot.gpus[5].fitness.action == "reset"
        assert a.snapshot.verdict is not None
        assert "GPU5 needs a reset (the driver asks for GPU Reset)" in a.snapshot.verdict.not_ready
    # No recovery-action series (DCGM before 4.5, or a counters file without the field): none, not 0.
    plain = _hosts(load_answer())["gpu-a"].snapshot.gpus[5].fitness
    assert plain is None or plain.recovery_action is None


@pytest.mark.parametrize("new_first", [True, False])
def test_during_a_rollout_the_new_name_wins_for_one_gpu(new_first: bool) -> None:
    """Both spellings of a field for one GPU (two counters files, or a DCGM that sends both): the field's
    current name is read, whatever the order and the sample times."""
    document = load_answer()
    pairs = (
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1, "DCGM_FI_DEV_ROW_REMAP_FAILED", 0),
        ("DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", 2, "DCGM_FI_DEV_GPU_RECOVERY_ACTION", 1),
        ("DCGM_FI_DEV_RETIRED_PENDING", 1, "DCGM_FI_DEV_PAGE_RETIRED_PENDING", 0),
    )
    for old, old_value, new, new_value in pairs:
        order = [(new, new_value), (old, old_value)] if new_first else [(old, old_value), (new, new_value)]
        for name, value in order:
            with_series(document, "gpu-a", 6, name, value)
    xid_new = copy.deepcopy(_series(document, "gpu-a", "DCGM_FI_DEV_XID_ERRORS", "3")[0])
    xid_new["metric"]["__name__"] = "DCGM_FI_DEV_XID_ERROR"
    xid_new["value"] = [xid_new["value"][0], "48"]
    result = document["data"]["result"]
    if new_first:
        result.insert(0, xid_new)
    else:
        result.append(xid_new)
    a = _hosts(document)["gpu-a"]
    fitness = a.snapshot.gpus[6].fitness
    assert fitness is not None
    assert (fitness.remap_failure, fitness.recovery_action, fitness.retired_pages_pending) == (
        False,
        1,
        False,
    )
    assert a.xid == {3: 48}


def test_the_query_asks_for_both_names_of_a_renamed_field() -> None:
    query = build_query()
    for old, new in RENAMED.items():
        assert old in query
        assert new in query
