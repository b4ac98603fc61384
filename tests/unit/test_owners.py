"""Owners from recorded /proc/<pid>/cgroup texts of each runtime (v1 and v2), named environment variables and
the runtimes' metadata on a planted host root; the client's owner record, its labels and the filter words."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gputui.agent.proc.owners import (
    ENVIRON_MAX_BYTES,
    OWNER_TEXT_MAX_CHARS,
    OwnerReader,
    RuntimeNames,
    cgroup_facts,
    owner_of,
    parse_environ,
    same_owner,
)
from gputui.core.model import Owner, Proc, ProcFilter, owner_matches, parse_owner_option, split_owner_word

CID = "4f1d3c2b" * 8
"""A 64-hex container id."""
POD = "1234abcd-1111-2222-3333-444455556666"
POD_SYSTEMD = POD.replace("-", "_")

RECORDED = {
    "docker v2 (systemd driver)": (
        f"0::/system.slice/docker-{CID}.scope\n",
        {"container": CID, "runtime": "docker"},
    ),
    "docker v1 (cgroupfs driver)": (
        f"12:pids:/docker/{CID}\n11:memory:/docker/{CID}\n4:cpu,cpuacct:/docker/{CID}\n1:name=systemd:/docker/{CID}\n",
        {"container": CID, "runtime": "docker"},
    ),
    "podman v2 rootful": (
        f"0::/machine.slice/libpod-{CID}.scope/container\n",
        {"container": CID, "runtime": "podman"},
    ),
    "podman v2 rootless": (
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container\n",
        {"container": CID, "runtime": "podman"},
    ),
    "podman v1 cgroupfs": (
        f"3:memory:/libpod_parent/libpod-{CID}\n",
        {"container": CID, "runtime": "podman"},
    ),
    "podman's conmon is no container": (f"0::/machine.slice/libpod-conmon-{CID}.scope\n", {}),
    "cri-o v2": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_SYSTEMD}.slice/crio-{CID}.scope\n",
        {"pod_uid": POD, "container": CID, "runtime": "cri-o"},
    ),
    "containerd v2 (systemd driver)": (
        f"0::/kubepods.slice/kubepods-pod{POD_SYSTEMD}.slice/cri-containerd-{CID}.scope\n",
        {"pod_uid": POD, "container": CID, "runtime": "containerd"},
    ),
    "kubernetes v1 (cgroupfs driver)": (
        f"11:memory:/kubepods/besteffort/pod{POD}/{CID}\n1:name=systemd:/kubepods/besteffort/pod{POD}/{CID}\n",
        {"pod_uid": POD, "container": CID},
    ),
    "slurm v2 step": (
        "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
        {"slurm_job": "4242", "slurm_step": "0"},
    ),
    "slurm v2 multiple slurmd": (
        "0::/system.slice/node7_slurmstepd.scope/job_9/step_batch/user/task_0\n",
        {"slurm_job": "9", "slurm_step": "batch"},
    ),
    "slurm v1 (memory, freezer)": (
        "10:freezer:/slurm/uid_1000/job_77/step_extern\n4:memory:/slurm/uid_1000/job_77/step_extern/task_0\n"
        "1:name=systemd:/system.slice/slurmd.service\n",
        {"slurm_job": "77", "slurm_step": "extern", "unit": "slurmd.service"},
    ),
    "a service unit": ("0::/system.slice/cron.service\n", {"unit": "cron.service"}),
    "a user service": (
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n",
        {"unit": "jupyter.service"},
    ),
    "a login session is no owner": ("0::/user.slice/user-1000.slice/session-3.scope\n", {}),
    "the user manager is no owner": ("0::/user.slice/user-1000.slice/user@1000.service/init.scope\n", {}),
    "v1 login session": (
        "12:pids:/user.slice/user-1000.slice/session-7.scope\n1:name=systemd:/user.slice/user-1000.slice/session-7.scope\n",
        {},
    ),
    "root cgroup": ("0::/\n", {}),
    "job_ without slurm above it": ("0::/batch/job_12\n", {}),
}


@pytest.mark.parametrize(("text", "facts"), list(RECORDED.values()), ids=list(RECORDED))
def test_recorded_cgroup_texts(text: str, facts: dict[str, str]) -> None:
    assert cgroup_facts(text) == facts


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "::\n",
        "0::relative/path",
        "0:\n:",
        "x" * 100_000,
        "0::/docker/" + "g" * 64,
        "\x00\xff::/",
    ],
)
def test_malformed_cgroup_texts_say_nothing(text: str) -> None:
    assert cgroup_facts(text) == {}


def test_the_most_specific_owner_wins() -> None:
    slurm_in_pod = {"slurm_job": "5", "slurm_step": "0", "pod_uid": POD, "container": CID}
    assert owner_of(slurm_in_pod, {}, "alice", 1000)["kind"] == "slurm"
    pod = owner_of({"pod_uid": POD, "container": CID, "unit": "x.service"}, {}, "alice", 1000)
    assert (pod["kind"], pod["id"], pod["container"]) == ("pod", POD, CID)
    container = owner_of({"container": CID, "runtime": "docker", "unit": "x.service"}, {}, "alice", 1000)
    assert (container["kind"], container["id"], container["runtime"]) == ("container", CID, "docker")
    assert owner_of({"unit": "cron.service"}, {}, "alice", 1000)["kind"] == "unit"
    user = owner_of({}, {}, "alice", 1000)
    assert user == {"kind": "user", "id": "alice", "name": "alice", "uid": 1000}
    assert owner_of({}, {}, None, 1234)["id"] == "1234"
    assert owner_of({}, {}, None, None)["id"] is None


def test_the_environment_names_a_slurm_job_that_escaped_its_cgroup_and_a_pod() -> None:
    env = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3", "SLURM_JOB_NAME": "train"}
    escaped = owner_of({"unit": "x.service"}, env, "bob", 1001)
    assert escaped == {
        "kind": "slurm",
        "id": "4242.3",
        "name": "train",
        "job": "4242",
        "step": "3",
        "source": "environment",
    }
    assert owner_of({}, {"SLURM_JOB_ID": "$(rm -rf ~)"}, "bob", 1001)["kind"] == "user"
    pod = owner_of({"pod_uid": POD}, {"HOSTNAME": "web-0-abc", "POD_NAMESPACE": "prod"}, None, 0)
    assert (pod["name"], pod["namespace"]) == ("web-0-abc", "prod")
    pod = owner_of({"pod_uid": POD}, {"HOSTNAME": "h", "POD_NAME": "web-0"}, None, 0)
    assert pod["name"] == "web-0"


def test_only_the_named_variables_are_kept_and_capped() -> None:
    block = b"\0".join(
        [
            b"PATH=/usr/bin",
            b"AWS_SECRET_ACCESS_KEY=hunter2",
            b"POD_NAME=" + b"p" * 5000,
            b"SLURM_JOB_ID=7",
            b"junk",
            b"SLURM_JOB_ID=8",
            b"POD_NAMESPACE=\xff\x1b[2J",
        ]
    )
    env = parse_environ(block)
    assert set(env) == {"POD_NAME", "SLURM_JOB_ID", "POD_NAMESPACE"}
    assert env["SLURM_JOB_ID"] == "7"  # the first one, as getenv reads it
    assert len(env["POD_NAME"]) == OWNER_TEXT_MAX_CHARS
    assert "hunter2" not in json.dumps(env)
    assert env["POD_NAMESPACE"].startswith("\\xff")


def _plant_proc(root: Path, pid: int, cgroup: str | None, environ: bytes | None) -> None:
    folder = root / str(pid)
    folder.mkdir(parents=True)
    if cgroup is not None:
        (folder / "cgroup").write_text(cgroup)
    if environ is not None:
        (folder / "environ").write_bytes(environ)


def test_reader_over_a_planted_proc_root(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _plant_proc(
        proc, 10, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n", b"SLURM_JOB_NAME=train\0"
    )
    _plant_proc(proc, 11, f"0::/system.slice/docker-{CID}.scope\n", None)
    _plant_proc(proc, 12, None, None)
    reader = OwnerReader(proc_root=str(proc), host_root=str(tmp_path / "host"))
    slurm = reader.owner(10, 1, "alice", 1000)
    assert (slurm["kind"], slurm["id"], slurm["name"]) == ("slurm", "4242.0", "train")
    assert reader.owner(11, 1, "root", 0)["kind"] == "container"
    assert reader.owner(12, 1, "carol", 1002) == {"kind": "user", "id": "carol", "name": "carol", "uid": 1002}
    assert reader.owner(99, 1, None, None)["kind"] == "user"  # gone: nothing to read


def test_planted_environ_files_are_not_followed_or_blocked_on(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    secret = tmp_path / "secret"
    secret.write_bytes(b"SLURM_JOB_ID=66\0")
    (proc / "20").mkdir(parents=True)
    (proc / "20" / "environ").symlink_to(secret)
    (proc / "21").mkdir()
    os.mkfifo(proc / "21" / "environ")
    (proc / "22").mkdir()
    (proc / "22" / "environ").write_bytes(b"X=" + b"y" * (2 * ENVIRON_MAX_BYTES) + b"\0SLURM_JOB_ID=5\0")
    reader = OwnerReader(proc_root=str(proc), host_root=str(tmp_path))
    for pid in (20, 21, 22):
        assert reader.owner(pid, 1, "u", 1)["kind"] == "user"


def test_runtime_names_from_a_planted_host_root(tmp_path: Path) -> None:
    host = tmp_path / "host"
    pods = host / "var/log/pods"
    pods.mkdir(parents=True)
    (pods / f"prod_web-0_{POD}").mkdir()
    (pods / "not-a-pod-dir").mkdir()
    containers = host / "var/log/containers"
    containers.mkdir(parents=True)
    (containers / f"web-0_prod_server-{CID}.log").write_text("")
    other = "ab" * 32
    docker = host / "var/lib/docker/containers" / other
    docker.mkdir(parents=True)
    (docker / "config.v2.json").write_text(json.dumps({"Name": "/trainer", "Config": {"Env": ["SECRET=1"]}}))
    podman_id = "cd" * 32
    storage = host / "var/lib/containers/storage/overlay-containers"
    storage.mkdir(parents=True)
    (storage / "containers.json").write_text(json.dumps([{"id": podman_id, "names": ["notebook"]}, "junk"]))
    names = RuntimeNames(str(host))
    pod = owner_of({"pod_uid": POD, "container": CID}, {}, None, 0, names)
    assert (pod["name"], pod["namespace"], pod["container_name"]) == ("web-0", "prod", "server")
    assert owner_of({"container": other, "runtime": "docker"}, {}, None, 0, names)["name"] == "trainer"
    assert owner_of({"container": podman_id, "runtime": "podman"}, {}, None, 0, names)["name"] == "notebook"
    assert owner_of({"container": "ef" * 32}, {}, None, 0, names)["name"] is None


def test_planted_runtime_metadata_is_not_trusted(tmp_path: Path) -> None:
    host = tmp_path / "host"
    base = host / "var/lib/docker/containers"
    ids = ["01" * 32, "02" * 32, "03" * 32]
    for ident in ids:
        (base / ident).mkdir(parents=True)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"Name": "/planted"}))
    (base / ids[0] / "config.v2.json").symlink_to(target)
    os.mkfifo(base / ids[1] / "config.v2.json")
    (base / ids[2] / "config.v2.json").write_text("{not json")
    storage = host / "var/lib/containers/storage/overlay-containers"
    storage.mkdir(parents=True)
    (storage / "containers.json").write_text("[" * 100_000)
    names = RuntimeNames(str(host))
    for ident in ids:
        assert owner_of({"container": ident, "runtime": "docker"}, {}, None, 0, names)["name"] is None
    assert names("container", "../../etc") == {}


def test_same_owner_is_the_kill_boundary() -> None:
    alice = {"kind": "user", "id": "alice"}
    root = {"kind": "user", "id": "root"}
    step0 = {"kind": "slurm", "id": "42.0"}
    step1 = {"kind": "slurm", "id": "42.1"}
    pod = {"kind": "pod", "id": POD}
    assert same_owner(alice, root)
    assert same_owner(step0, dict(step0))
    assert not same_owner(step0, step1)
    assert not same_owner(alice, pod)
    assert same_owner(None, pod)


# -- the client's record, labels, filter words and --owner ---------------------------------------------------


def test_owner_record_round_trip_and_labels() -> None:
    wire = owner_of(
        {"pod_uid": POD, "container": CID}, {"POD_NAME": "web-0", "POD_NAMESPACE": "prod"}, None, 0
    )
    owner = Owner.from_dict(wire)
    assert owner is not None
    assert owner.label == "pod:prod/web-0"
    assert Owner.from_dict(owner.to_dict()) == owner
    assert Owner.from_dict({"kind": "container", "id": CID}).label == f"container:{CID[:12]}"  # type: ignore[union-attr]
    assert Owner.from_dict({"kind": "slurm", "id": "4242.0", "job": "4242"}).label == "slurm:4242.0"  # type: ignore[union-attr]
    user = Owner.from_dict({"kind": "user", "id": "alice", "name": "alice", "uid": 1000})
    assert user is not None
    assert user.to_dict()["uid"] == 1000


def test_a_jobs_members_share_one_owner_read_once_and_alike_values_are_not_conflated() -> None:
    entry = {"kind": "slurm", "id": "4242.0", "name": "train", "job": "4242", "uid": 1000}
    first, second = Owner.from_dict(dict(entry)), Owner.from_dict(dict(entry))
    assert first is second
    # 1 == 1.0 == True as keys; each reads differently (a bool or a float is no uid text).
    as_int = Owner.from_dict({"kind": "user", "id": "a", "uid": 1})
    as_bool = Owner.from_dict({"kind": "user", "id": "a", "uid": True})
    as_float = Owner.from_dict({"kind": "user", "id": "a", "uid": 1.0})
    assert as_int is not None
    assert as_bool is not None
    assert as_float is not None
    assert (as_int.detail("uid"), as_bool.detail("uid"), as_float.detail("uid")) == ("1", None, "1.0")
    # An unhashable value is read, never kept.
    assert Owner.from_dict({"kind": "pod", "id": ["x"]}) == Owner(kind="pod")


@pytest.mark.parametrize(
    "bad", [None, 7, "pod", [], {}, {"kind": "root"}, {"kind": ["user"]}, {"kind": "pod", "id": {"x": 1}}]
)
def test_bad_owner_records_are_none_or_blank(bad: object) -> None:
    owner = Owner.from_dict(bad)
    assert owner is None or owner.id is None
    proc = Proc.from_dict(
        {"pid": 5, "owner": bad, "cpu_pct": "NaN", "gpu_sm_pct": {"0": 250, "x": 3, "1": 40}}
    )
    assert proc.cpu_pct is None
    assert proc.gpu_sm_pct == {1: 40}


def test_owner_matches_by_id_name_prefix_and_job() -> None:
    step = Owner.from_dict({"kind": "slurm", "id": "4242.0", "job": "4242", "step": "0"})
    pod = Owner.from_dict({"kind": "pod", "id": POD, "name": "web-0", "namespace": "prod", "container": CID})
    box = Owner.from_dict({"kind": "container", "id": CID, "name": "trainer"})
    unit = Owner.from_dict({"kind": "unit", "id": "cron.service", "name": "cron.service"})
    user = Owner.from_dict({"kind": "user", "id": "alice", "name": "alice", "uid": 1000})
    assert owner_matches(step, "slurm", "4242")
    assert owner_matches(step, "slurm", "4242.0")
    assert not owner_matches(step, "slurm", "424")
    assert not owner_matches(step, "slurm", "4242.1")
    assert owner_matches(pod, "pod", "web-0")
    assert owner_matches(pod, "pod", "prod/web-0")
    assert owner_matches(pod, "pod", POD[:8])
    assert not owner_matches(pod, "pod", "web")
    assert owner_matches(box, "container", "trainer")
    assert owner_matches(box, "container", CID[:12])
    assert owner_matches(unit, "unit", "cron")
    assert owner_matches(unit, "unit", "cron.service")
    assert owner_matches(user, "user", "alice")
    assert owner_matches(user, "user", "1000")
    assert not owner_matches(user, "pod", "alice")
    assert not owner_matches(None, "user", "alice")


def test_owner_words_and_the_filter() -> None:
    assert split_owner_word("SLURM:4242") == ("slurm", "4242")
    assert split_owner_word("http://x") is None
    assert split_owner_word("4242") is None
    alice = Proc(pid=10, user="alice", owner=Owner("user", "alice", "alice"))
    job = Proc(pid=11, user="bob", owner=Owner("slurm", "7.0", None, (("job", "7"),)))
    haystacks = {10: "10 alice python train.py", 11: "11 bob python serve.py"}
    kept = lambda text: [p.pid for p in (alice, job) if ProcFilter.parse(text).matches(p, haystacks[p.pid])]  # noqa: E731
    assert kept("") == [10, 11]
    assert kept("slurm:7") == [11]
    assert kept("user:alice") == [10]
    assert kept("user:alice slurm:7") == [10, 11]
    assert kept("slurm:7 train") == []
    assert kept("python serve") == [11]  # plain words are one piece of text
    assert kept("serve python") == []
    assert kept("PYTHON") == [10, 11]


@pytest.mark.parametrize("value", ["", "pod", "pod:", "nope:1", ":x", "-oProxyCommand=x"])
def test_bad_owner_options_are_one_line(value: str) -> None:
    with pytest.raises(ValueError, match="--owner") as caught:
        parse_owner_option(value)
    assert "\n" not in str(caught.value)


def test_owner_options() -> None:
    assert parse_owner_option("all") == ("all", "")
    assert parse_owner_option("pod:Web-0") == ("pod", "web-0")
