"""The data model's JSON form: everything survives a round trip, None stays None, hostile text stays text and
enters the model made visible."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputui.agent.servers import messages as endpoint_messages
from gputui.core.model import (
    DeviceHolder,
    EndpointSample,
    Finding,
    Gpu,
    GpuFitness,
    GpuProcess,
    GpuVerdict,
    HostSnapshot,
    LiveThreads,
    Owner,
    Proc,
    ProfilerMark,
    ThreadWait,
    Verdict,
    snapshots_document,
)
from gputui.core.text import visible

HOSTILE = (
    "[/]",
    "[@click=app.quit]x[/]",
    "[Bold]",
    "[$x]",
    "\x1b]0;t\x07",
    "\x1b[2J",
    "\x9b",
    "\u202e",
    ";rm -rf ~",
    "$(reboot)",
    "`id`",
    "'\"",
    "line\nbreak",
    "\x00nul",
    b"\xff\xfe".decode("utf-8", "backslashreplace"),
    "x" * 100_000,
)

# The model holds visible text (its readers make it so); a round trip must keep such text exactly.
text = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40)).map(visible)
opt_text = st.none() | text
opt_int = st.none() | st.integers(min_value=0, max_value=2**40)
# Short non-empty text: what an owner's fields hold (the reader cuts them and takes "" as absent).
short_text = st.text(min_size=1, max_size=12).map(visible)
opt_float = st.none() | st.floats(allow_nan=False, allow_infinity=False, width=64)

gpu_processes = st.builds(
    GpuProcess,
    pid=st.integers(min_value=1, max_value=2**22),
    used_mib=opt_int,
    type=st.sampled_from(["compute", "graphics"]),
    visible=st.booleans(),
)
gpus = st.builds(
    Gpu,
    index=st.integers(min_value=0, max_value=63),
    name=opt_text,
    uuid=opt_text,
    pci_bus_id=opt_text,
    memory_used_mib=opt_int,
    memory_total_mib=opt_int,
    memory_reserved_mib=opt_int,
    utilization_pct=opt_int,
    memory_utilization_pct=opt_int,
    temperature_c=opt_int,
    power_w=opt_float,
    power_limit_w=opt_float,
    error=opt_text,
    processes=st.lists(gpu_processes, max_size=3).map(tuple),
)
procs = st.builds(
    Proc,
    pid=st.integers(min_value=1, max_value=2**22),
    ppid=opt_int,
    user=opt_text,
    uid=opt_int,
    state=st.none() | st.sampled_from(["R", "S", "D", "Z", "T"]),
    name=opt_text,
    cmdline=st.lists(text, max_size=4).map(tuple),
    start_ticks=opt_int,
    create_time=opt_float,
    state_since=opt_float,
    rss_kib=opt_int,
    gpu_memory_mib=st.dictionaries(st.integers(0, 63), st.integers(0, 2**20), max_size=3),
    pgid=opt_int,
    sid=opt_int,
    cgroup=opt_text,
    live_threads=st.none()
    | st.builds(
        LiveThreads, live=st.integers(0, 9), states=st.dictionaries(text, st.integers(0, 9), max_size=2)
    ),
    listen_ports=st.lists(st.integers(1, 65535), max_size=3, unique=True).map(lambda p: tuple(sorted(p))),
    owner=st.none()
    | st.builds(
        Owner,
        kind=st.sampled_from(["user", "pod", "slurm"]),
        id=st.none() | short_text,
        name=st.none() | short_text,
        details=st.sampled_from([(), (("job", "4242"),), (("job", "7"), ("namespace", "default"))]),
    ),
    cpu_pct=st.none() | st.floats(0, 1000),
    gpu_sm_pct=st.dictionaries(st.integers(0, 63), st.integers(0, 100), max_size=2).map(
        lambda d: dict(sorted(d.items()))
    ),
    gpu_dec_pct=st.dictionaries(st.integers(0, 63), st.integers(0, 100), max_size=2).map(
        lambda d: dict(sorted(d.items()))
    ),
    waits=st.lists(
        st.builds(
            ThreadWait,
            tid=st.integers(1, 2**22),
            state=st.sampled_from(["D", "R"]),
            symbol=st.none() | st.sampled_from(["uvm_gpu_fault", "nv_wait"]),
        ),
        max_size=2,
    ).map(tuple),
    profiler=st.none()
    | st.builds(ProfilerMark, tool=st.just("nsys"), keys=st.sampled_from([(), ("CUDA_INJECTION64_PATH",)])),
)
findings = st.builds(
    Finding,
    kind=text,
    target=text,
    detail=text,
    action=text,
    pid=opt_int,
    gpu_index=opt_int,
    action_pid=opt_int,
)
health = st.builds(
    EndpointSample,
    url=text,
    state=opt_text,
    code=opt_int,
    latency_ms=opt_float,
    since=opt_float,
    last_ok=opt_float,
    consecutive_failures=st.integers(0, 1000),
    detail=opt_text,
    discovered=st.booleans(),
    checked_at=opt_float,
)
verdicts = st.none() | st.builds(
    Verdict,
    clean=st.booleans(),
    reasons=st.lists(text, max_size=3).map(tuple),
    baseline_mib=st.dictionaries(text, st.integers(0, 1000), max_size=3),
    tolerance_mib=st.integers(0, 100),
    gpus=st.lists(
        st.builds(
            GpuVerdict,
            index=st.integers(0, 63),
            used_mib=opt_int,
            baseline_mib=st.integers(0, 100),
            clean=st.booleans(),
            reasons=st.lists(text, max_size=2).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
    known=st.booleans(),
)
snapshots = st.builds(
    HostSnapshot,
    target=text,
    hostname=opt_text,
    boot_id=opt_text,
    time=opt_float,
    error=opt_text,
    driver_version=opt_text,
    cuda_driver_version=opt_text,
    mode=opt_text,
    agent_version=opt_text,
    agent_pid=opt_int,
    processes_time=opt_float,
    gpus=st.lists(gpus, max_size=3).map(tuple),
    processes=st.lists(procs, max_size=3).map(tuple),
    device_holders=st.none()
    | st.lists(
        st.builds(DeviceHolder, pid=st.integers(1, 2**22), name=opt_text, device=opt_text), max_size=2
    ).map(tuple),
    findings=st.lists(findings, max_size=2).map(tuple),
    endpoints=st.lists(health, max_size=2).map(tuple),
    verdict=verdicts,
)


@settings(max_examples=60, deadline=None)
@given(snapshots)
def test_snapshot_round_trips_through_json(snapshot: HostSnapshot) -> None:
    assert HostSnapshot.from_json(snapshot.to_json()) == snapshot
    assert HostSnapshot.from_dict(json.loads(json.dumps(snapshot.to_dict()))) == snapshot


@settings(max_examples=40, deadline=None)
@given(snapshots)
def test_the_json_form_is_every_field_of_every_record(snapshot: HostSnapshot) -> None:
    """``to_dict`` walks the fields itself; the document is a plain deep conversion of every record, each
    field under its JSON key (``JSON_KEYS``: the field's name unless the record says otherwise)."""
    from gputui.core.model import fields, is_record

    def deep(value: Any) -> Any:
        if is_record(value):
            keys = value.JSON_KEYS or {}
            return {keys.get(name, name): deep(getattr(value, name)) for name in fields(value)}
        if isinstance(value, (list, tuple)):
            return [deep(item) for item in value]
        if isinstance(value, dict):
            return {key: deep(item) for key, item in value.items()}
        return value

    reference = deep(snapshot)
    for data, proc in zip(reference["processes"], snapshot.processes, strict=True):
        # A process's GPU-keyed fields are keyed by strings; its owner is written flat (``Owner.to_dict``).
        for key in ("gpu_memory_mib", "gpu_sm_pct", "gpu_mem_bw_pct", "gpu_enc_pct", "gpu_dec_pct"):
            data[key] = {str(k): v for k, v in getattr(proc, key).items()}
        data["owner"] = None if proc.owner is None else proc.owner.to_dict()
    if snapshot.verdict is not None:
        reference["verdict"]["level"] = snapshot.verdict.level  # the one key not a field: said with the facts
    assert json.loads(json.dumps(snapshot.to_dict())) == json.loads(json.dumps(reference))
    document = snapshot.to_dict()
    # Processes are written field by field (a job lists hundreds): JSON's own types, lists not tuples.
    assert document["processes"] == reference["processes"]
    if snapshot.endpoints and snapshot.endpoints[0].metrics is not None:
        assert document["health"][0]["metrics"] is not snapshot.endpoints[0].metrics  # a new container


def test_all_none_gpu_stays_none() -> None:
    gpu = Gpu(index=3)
    data = json.loads(HostSnapshot(target="h", gpus=(gpu,)).to_json())["gpus"][0]
    assert data["memory_used_mib"] is None
    assert data["power_w"] is None
    back = Gpu.from_dict(data)
    assert back == gpu
    assert back.memory_used_mib is None  # never a fake zero
    assert back.key == "index:3"


def test_hostile_strings_enter_the_model_visible() -> None:
    proc = Proc(pid=7, user=HOSTILE[1], name=HOSTILE[4], cmdline=HOSTILE)
    snapshot = HostSnapshot(target=HOSTILE[0], hostname=HOSTILE[5], processes=(proc,), error=HOSTILE[12])
    back = HostSnapshot.from_json(snapshot.to_json())
    assert back.processes[0].cmdline == tuple(visible(arg) for arg in HOSTILE)
    assert back.processes[0].cmdline[1] == "[@click=app.quit]x[/]"  # markup-like text stays text
    assert back.processes[0].name == "\\x1b]0;t\\x07"
    assert back.target == "[/]"
    assert back.error == "line\\nbreak"
    assert HostSnapshot.from_json(back.to_json()) == back  # visible text survives unchanged
    # One JSON line on the wire even with newlines inside the values.
    assert "\n" not in snapshot.to_json()


def test_proc_gpu_keys_are_strings_on_the_wire_and_ints_in_the_model() -> None:
    proc = Proc(pid=1, gpu_memory_mib={0: 10, 7: 20})
    data = proc.to_dict()
    assert data["gpu_memory_mib"] == {"0": 10, "7": 20}
    assert Proc.from_dict(json.loads(json.dumps(data))).gpu_memory_mib == {0: 10, 7: 20}
    assert Proc.from_dict(data).gpu_total_mib == 30


def test_bad_numbers_from_the_wire_become_none() -> None:
    gpu = Gpu.from_dict({"index": 0, "memory_used_mib": "lots", "power_w": "hot", "temperature_c": True})
    assert gpu.memory_used_mib is None
    assert gpu.power_w is None
    assert gpu.temperature_c is None


def test_unknown_fields_are_ignored_and_missing_ones_default() -> None:
    snapshot = HostSnapshot.from_dict({"target": "x", "new_field": 1, "gpus": [{"index": 1, "extra": 2}]})
    assert snapshot.gpus == (Gpu(index=1),)
    assert snapshot.device_holders is None
    assert snapshot.verdict is None


def test_snapshots_document_lists_hosts() -> None:
    document = snapshots_document([HostSnapshot(target="a"), HostSnapshot(target="b")])
    assert [h["target"] for h in document["hosts"]] == ["a", "b"]
    assert json.loads(json.dumps(document)) == document


def test_proc_group_and_session_travel_under_their_wire_names() -> None:
    proc = Proc(pid=4242, ppid=1, pgid=4200, sid=4100)
    data = proc.to_dict()
    assert (data["pgid"], data["sid"]) == (4200, 4100)
    assert Proc.from_dict(json.loads(json.dumps(data))) == proc
    # An older collector says nothing about them: unknown, not zero.
    old = Proc.from_dict({"pid": 7, "ppid": 1})
    assert (old.pgid, old.sid) == (None, None)
    assert Proc.from_dict({"pid": 7, "pgid": "x", "sid": True}).pgid is None


def _listed_snapshot(processes_time: float | None = 100.5) -> HostSnapshot:
    return HostSnapshot(
        target="gpu-node-07",
        time=101.0,
        processes_time=processes_time,
        gpus=(
            Gpu(
                index=0,
                uuid="GPU-a",
                memory_used_mib=41000,
                processes=(GpuProcess(pid=4242, used_mib=40997),),
            ),
            Gpu(index=1, uuid="GPU-b", memory_used_mib=3),
        ),
        processes=(Proc(pid=4242, ppid=4200, name="python3", state="S", gpu_memory_mib={0: 40997}),),
    )


def test_a_line_without_unchanged_process_lists_takes_them_from_the_previous_snapshot() -> None:
    from gputui.agent.remote.serve import elide_unchanged_processes

    full = _listed_snapshot()
    data = json.loads(json.dumps(full.to_dict()))
    data["gpus"][0]["memory_used_mib"] = 20000  # memory moved; the lists are the same
    elided = elide_unchanged_processes(data)
    assert "processes" not in elided
    assert all("processes" not in gpu for gpu in elided["gpus"])
    assert len(json.dumps(elided)) < len(json.dumps(data))
    again = HostSnapshot.from_dict(json.loads(json.dumps(elided)), previous=full)
    assert again.processes is full.processes
    assert again.gpus[0].processes is full.gpus[0].processes
    assert again.gpus[0].memory_used_mib == 20000
    assert again == HostSnapshot.from_dict(data)


def test_unchanged_process_lists_without_the_earlier_list_are_a_malformed_line() -> None:
    from gputui.agent.remote.serve import elide_unchanged_processes

    elided = elide_unchanged_processes(_listed_snapshot().to_dict())
    for previous in (None, _listed_snapshot(processes_time=99.0), _listed_snapshot(processes_time=None)):
        with pytest.raises(ValueError, match="no earlier list"):
            HostSnapshot.from_dict(elided, previous=previous)


def test_the_model_has_the_protocols_fields_and_names_its_modes() -> None:
    """The client's model and the collector's message builders describe one shape."""
    from gputui.agent import protocol
    from gputui.core.model import EndpointSample, HostSnapshot, fields

    keys = HostSnapshot.JSON_KEYS or {}
    assert tuple(keys.get(name, name) for name in fields(HostSnapshot)) == protocol.SNAPSHOT_FIELDS
    assert fields(EndpointSample) == endpoint_messages.ENDPOINT_SAMPLE_FIELDS
    health = [endpoint_messages.endpoint_sample("u", None)]
    built = protocol.snapshot("h", "host", "boot", 1.0, protocol.MODE_SMI, health=health)
    assert HostSnapshot.from_dict(built).to_dict() == built
    modes = ("nvml", "smi", "ps", "sim", None)
    labels = {mode: HostSnapshot(target="h", mode=mode).mode_label for mode in modes}
    assert labels == {"nvml": "NVML", "smi": "nvidia-smi", "ps": "reduced", "sim": None, None: None}


def test_renamed_fields_keep_the_keys_scripts_read() -> None:
    """A GPU's fitness and a host's endpoints are named for what they hold in the code; their JSON keys are
    the ones dashboards and scripts already read."""
    gpu = Gpu(index=0, fitness=GpuFitness(remap_pending=True))
    sample = endpoint_messages.endpoint_sample("http://127.0.0.1:30000/health", None)
    snapshot = HostSnapshot(target="h", gpus=(gpu,), endpoints=(EndpointSample.from_dict(sample),))
    document = json.loads(snapshot.to_json())
    assert document["health"][0]["url"] == "http://127.0.0.1:30000/health"
    assert document["gpus"][0]["health"]["remap_pending"] is True
    assert "fitness" not in document["gpus"][0]
    assert "endpoints" not in document
    assert HostSnapshot.from_json(snapshot.to_json()) == snapshot
