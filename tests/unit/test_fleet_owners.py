"""DCGM's pod, namespace and container labels in the fleet view: the host's owners, its row, its filter."""

from __future__ import annotations

from typing import Any

from gputui.core.fleet import dcgm_owner, matches, summarize
from gputui.transports.prometheus import parse_answer
from tests.data.prometheus import load_answer


def _with_pod(document: dict[str, Any], host: str, gpu: str, labels: dict[str, str]) -> dict[str, Any]:
    for item in document["data"]["result"]:
        metric = item["metric"]
        if metric.get("Hostname") == host and metric.get("gpu") == gpu:
            metric.update(labels)
    return document


def test_dcgm_owner_prefers_the_exported_labels() -> None:
    own = {"pod": "dcgm-exporter-x7", "namespace": "gpu-operator"}
    job = {"exported_pod": "train-0", "exported_namespace": "ml", "exported_container": "trainer"}
    owner = dcgm_owner({**own, **job})
    assert owner is not None
    assert owner.label == "pod:ml/train-0"
    assert owner.detail("container_name") == "trainer"
    plain = dcgm_owner({"pod": "infer-1", "namespace": "prod", "container": "server"})
    assert plain is not None
    assert plain.label == "pod:prod/infer-1"
    assert dcgm_owner({"namespace": "prod"}) is None
    assert dcgm_owner({}) is None


def test_a_host_whose_gpu_is_a_pods_names_it_in_its_row_and_filter() -> None:
    document = _with_pod(load_answer(), "gpu-a", "3", {"pod": "train-0", "namespace": "ml", "container": "c"})
    hosts = {host.name: host for host in parse_answer(document).hosts}
    a = hosts["gpu-a"]
    assert set(a.owners) == {3}
    assert [o.label for o in a.owners[3]] == ["pod:ml/train-0"]
    row = summarize(a)
    assert row.owners == ("pod:ml/train-0",)
    assert matches(row, a, "pod:train-0")
    assert matches(row, a, "ml/train")
    b = hosts["gpu-b"]
    assert b.owners == {}
    assert not matches(summarize(b), b, "pod:train-0")


def test_the_pods_column_appears_only_with_pods_and_room() -> None:
    from gputui.ui.widgets.fleet_table import _columns

    assert "owners" not in [key for key, _, _ in _columns(160)]
    assert "owners" in [key for key, _, _ in _columns(160, owners=True)]
    assert "owners" not in [key for key, _, _ in _columns(60, owners=True)]
