"""Owners from /proc/<pid>/cgroup as the field writes it: real texts from runtimes' and agents' tests, issue
threads and documentation, each in ``tests/data/cgroups`` with its source in its leading ``#`` lines,
through the real reader (a planted /proc) and the real rules.

A few are hand-adapted where only a directory listing or a tree was published (``adapted_*``, marked so in
the file); every other one is the text as recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.agent.proc.owners import OwnerReader, RuntimeNames, cgroup_facts, owner_of
from gputui.core.model import Owner

DATA = Path(__file__).resolve().parent.parent / "data" / "cgroups"

USER = ("user", "alice", None)
# Sample -> (owner kind, owner id, container id): the pod's UID with its innermost container, the container,
# the unit, or the user (a process in a login session, a tmux pane, a terminal tab, an app's scope).
EXPECTED: dict[str, tuple[str, str, str | None]] = {
    # Docker
    "neuvector_docker_debian_v1_bare_id": (
        "container",
        "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970",
        None,
    ),
    "neuvector_docker_centos_v1_scope": (
        "container",
        "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d",
        None,
    ),
    "neuvector_docker_ubuntu_v1": (
        "container",
        "31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30",
        None,
    ),
    "neuvector_docker_in_docker_rancheros_v1": (
        "container",
        "ec08435e04266c5ba381fccbb829f626d11d8ddf5f8f547263c7a2d79ab4787a",
        None,
    ),
    "neuvector_docker_v2_namespaced": (
        "container",
        "1f1d6e2d4940ddac13abd421a2617992bf89f0e0f9a902ed58278c5f843e9ae7",
        None,
    ),
    # Kubernetes: docker, containerd, CRI-O; systemd and cgroupfs drivers; v1, hybrid, v2
    "neuvector_kubepods_cgroupfs_v1": (
        "pod",
        "74ba62da-1a3d-11e7-bb11-080027cb0e22",
        "cb1eadb7abe3a6545e9856411207073277838e1bdc003337c2f8685faeedc32c",
    ),
    "neuvector_kubepods_systemd_docker_v1": (
        "pod",
        "045b1e35-7f13-11e7-ac42-0050568ffca0",
        "b5b6f2da8008be266864f896f93789762b2ce50792114a5c5f2cc3315af0bc70",
    ),
    "neuvector_kubepods_cgroupfs_v1_rdma": (
        "pod",
        "1fe19bf5-e8ef-11e8-900c-52daee5a874d",
        "da31e536c8d61304a6d5998d163d12400a7a9a1003e1d86369e8fadb022fc17d",
    ),
    "neuvector_kube_proxy_v1": (
        "pod",
        "f8a694f2-7c08-11e9-98da-000c29077430",
        "c04e0a88a1de067f25bece337d4dbb897396e0b623c2a65330850fc9823f1903",
    ),
    "neuvector_containerd_bottlerocket_hybrid": (
        "pod",
        "dd1bf9d1-241d-47f5-8e25-12de83135812",
        "f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830",
    ),
    "neuvector_containerd_1_2_13_cgroupfs_v1": (
        "pod",
        "a36d0c1d-0b26-4451-8d80-9c195e004afa",
        "5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61",
    ),
    "neuvector_containerd_1_4_4_colon_v1": (
        "pod",
        "2105e389-7471-476e-a50f-6074cef29bbd",
        "d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e",
    ),
    "neuvector_containerd_1_6_v2": (
        "pod",
        "9493223b-520e-4a97-a45f-359dcf967006",
        "25d057a4c6c9555f2a0eb106e8896968c28f1c44aca4754174851aca7f89ad26",
    ),
    "neuvector_crio_1_19_v1": (
        "pod",
        "8ca306fa-3c03-47fa-97dd-19979c345572",
        "d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607",
    ),
    "neuvector_crio_1_17_static_pod_v1": (
        "pod",
        "487a0dc6dccaeefbcfedba7a7ce1ca18",
        "7a1fd6fe8cdfbd44dc78c4cc85dad7031eaab4365801684cad0aabdeaf863f9e",
    ),
    "neuvector_crio_v2": (
        "pod",
        "042efd86-1f3b-4f2f-8736-f31c58e95bbc",
        "f33f47b0db740bb647cb3e7ac62d96c74966dbb99cbfaf4563bfd42d387e8b44",
    ),
    "neuvector_docker_kubepods_v2_namespaced": (
        "pod",
        "fd698699-eabf-4c23-92ef-cf0bbdb78261",
        "2cc65c162ca1388b6b8d5ccfb701d22fc96675ccf8b2f1590c490c2c4039547f",
    ),
    "elastic_apm_crio_underscores_v1": (
        "pod",
        "90d81341-92de-11e7-8cf2-507b9d4141fa",
        "2227daf62df6694645fee5df53c1f91271546a9560e8600a525690ae252b7f63",
    ),
    "elastic_apm_openshift_docker_v1": (
        "pod",
        "22949dce-fd8b-11ea-8ede-98f2b32c645c",
        "b15a5bdedd2e7645c3be271364324321b908314e4c77857bbfd32a041148c07f",
    ),
    "datadog_kubepods_cgroupfs_v1": (
        "pod",
        "fd52ef25-a87d-11e9-9423-0800271a638e",
        "8c046cb0b72cd4c99f51b5591cd5b095967f58ee003710a45280c28ee1a9c7fa",
    ),
    "adapted_crio_811_cgroupfs_no_prefix_v1": (
        "pod",
        "58662905-8ccc-11e7-a695-c85b76cda386",
        "1659f887a192f3515dd9b91a41d274abf29ca49de3d2330869131b2d93b45b94",
    ),
    "adapted_crio_811_cgroupfs_prefix_v1": (
        "pod",
        "58662905-8ccc-11e7-a695-c85b76cda386",
        "1659f887a192f3515dd9b91a41d274abf29ca49de3d2330869131b2d93b45b94",
    ),
    "adapted_minikube_11280_crio_in_docker_v2": (
        "pod",
        "2ca4a155-3599-498d-bb9d-4446693fa3ea",
        "358607a37e7ada357032e7f5729c9ae6a3efdb7962acbcbe47ff6a3c5506cb1c",
    ),
    # The user: login sessions, the host's root, and what the user manager starts for a process run by hand
    "neuvector_host_process_v1": USER,
    "neuvector_nsenter_session_v1": USER,
    "neuvector_host_init_v2": USER,
    "neuvector_host_init_v2_namespaced": USER,
    "otel_semconv_session_v1": USER,
    "systemd_4602_hybrid_session": USER,
    "otel_semconv_tmux_spawn_v2": USER,
    "elastic_apm_vte_spawn_v1": USER,
    "unonweb_gnome_terminal_vte_spawn_v2": USER,
    "crun_376_podman_unshare_v2": USER,
    "adapted_cosmic_app_scope_v2": USER,
    "adapted_cosmic_autostart_service_v2": USER,
}
RUNTIME = {
    "neuvector_docker_centos_v1_scope": "docker",
    "neuvector_docker_ubuntu_v1": "docker",
    "neuvector_docker_in_docker_rancheros_v1": "docker",
    "neuvector_docker_v2_namespaced": "docker",
    "neuvector_docker_debian_v1_bare_id": None,  # a bare id names no runtime
}


def cgroup_text(name: str) -> str:
    """A sample's /proc/<pid>/cgroup text: its lines without the leading ``#`` lines that name the source."""
    lines = (DATA / f"{name}.txt").read_text().splitlines(True)
    return "".join(line for line in lines if not line.startswith("#"))


def test_every_sample_is_checked_and_names_its_source() -> None:
    names = sorted(path.stem for path in DATA.glob("*.txt"))
    assert names == sorted(EXPECTED)
    for name in names:
        head = (DATA / f"{name}.txt").read_text().splitlines()[0]
        if name.startswith("adapted_"):
            assert head.startswith("# HAND-ADAPTED from https://github.com/"), name
        else:
            assert head.startswith("# Source: "), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_cgroup_texts_give_their_owner(name: str) -> None:
    owner = owner_of(cgroup_facts(cgroup_text(name)), {}, "alice", 1000)
    assert (owner["kind"], owner["id"], owner.get("container")) == EXPECTED[name]
    if name in RUNTIME:
        assert owner["runtime"] == RUNTIME[name]


def test_the_reader_over_a_planted_proc_gives_the_same_owners(tmp_path: Path) -> None:
    """The collector's own path: /proc/<pid>/cgroup read from disk, then the runtimes' names looked up."""
    proc = tmp_path / "proc"
    names = sorted(EXPECTED)
    for pid, name in enumerate(names, start=100):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(cgroup_text(name))
    reader = OwnerReader(proc_root=str(proc), host_root=str(tmp_path / "host"))
    for pid, name in enumerate(names, start=100):
        owner = reader.owner(pid, 1, "alice", 1000)
        assert (owner["kind"], owner["id"], owner.get("container")) == EXPECTED[name], name
        record = Owner.from_dict(owner)
        assert record is not None
        assert record.kind == EXPECTED[name][0]


def test_a_static_pod_is_found_by_its_name_in_the_kubelet_logs(tmp_path: Path) -> None:
    """Static pods' log directories carry the 32-hex UID the cgroup does."""
    host = tmp_path / "host"
    (host / "var/log/pods" / "kube-system_etcd-master0_487a0dc6dccaeefbcfedba7a7ce1ca18").mkdir(parents=True)
    owner = owner_of(
        cgroup_facts(cgroup_text("neuvector_crio_1_17_static_pod_v1")), {}, None, 0, RuntimeNames(str(host))
    )
    assert (owner["kind"], owner["name"], owner["namespace"]) == ("pod", "etcd-master0", "kube-system")


def test_a_user_service_stays_a_unit_and_a_system_scope_too() -> None:
    """Only what the user manager made for a process run by hand is the user's: a service the user wrote is a
    unit of its own, and so is a scope the system manager runs (``systemd-run --scope``)."""
    service = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n"
    assert owner_of(cgroup_facts(service), {}, "alice", 1000)["id"] == "jupyter.service"
    system_scope = "0::/system.slice/run-u42.scope\n"
    assert owner_of(cgroup_facts(system_scope), {}, "root", 0)["id"] == "run-u42.scope"


PARTS = [
    "kubepods.slice",
    "kubepods-besteffort-pod2105e389_7471_476e_a50f_6074cef29bbd.slice:cri-containerd:" + "d3" * 32,
    "pod" + "48" * 16,
    "crio-" + "7a" * 32,
    "crio-conmon-" + "7a" * 32,
    "docker",
    "ab" * 32,
    "user@1000.service",
    "tmux-spawn-0267755b.scope",
    "app-x.service",
    "x.service",
    "a:b:c",
    "::",
    "..",
    "slurm",
    "job_7",
    "step_0",
]


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from(["0:", "1:name=systemd", "4:net_prio", "x"]),
            st.lists(st.sampled_from(PARTS), max_size=8),
        )
    )
)
def test_any_mix_of_the_field_forms_gives_one_owner(lines: list[tuple[str, list[str]]]) -> None:
    text = "".join(f"{head}:/{'/'.join(parts)}\n" for head, parts in lines)
    owner = owner_of(cgroup_facts(text), {}, "alice", 1000)
    assert owner["kind"] in ("slurm", "pod", "container", "unit", "user")
    container = (
        owner.get("container")
        if owner["kind"] == "pod"
        else owner["id"]
        if owner["kind"] == "container"
        else None
    )
    assert container is None or all(c in "0123456789abcdef" for c in container)
