"""The recording file: every sample back exactly, a file cut or damaged read up to the damage in one line, a
newer version or a foreign, hostile or planted file refused in one line, and the ring kept in its bounds."""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from gputui.core.link import LinkOptions
from gputui.core.model import HostSnapshot, Proc, replace
from gputui.core.recording import EVENT_KILL, Recording, RecordingError, RecordingWriter
from gputui.core.recording import format as fmt
from gputui.core.recording import writer as writer_module
from gputui.core.servers import ServerWatch
from gputui.core.verdict import Baselines, judge
from gputui.transports.sim import HEALTHY_TARGET, HOSTILE_TEXTS, ManualClock, SimLink

WEDGED = "gpu-node-07"


def record_sim(path: Path, samples: int, step_s: float = 1.0, **kwargs: Any) -> dict[str, list[HostSnapshot]]:
    """Record both demo hosts for ``samples`` samples each (the first wedges after 5 s, a kill event at the
    middle); returns what was handed to the writer, by host."""
    clock = ManualClock()
    fast = LinkOptions(memory_interval_s=0.001)  # the sim paces samples on the real clock: no wait
    links = {
        WEDGED: SimLink(WEDGED, fast, clock=clock, wedged_at_s=5.0),
        HEALTHY_TARGET: SimLink(HEALTHY_TARGET, fast, clock=clock),
    }
    writer = RecordingWriter(str(path), list(links), interval_s=step_s, clock=clock, **kwargs)
    writer.start()
    servers = ServerWatch()
    handed: dict[str, list[HostSnapshot]] = {target: [] for target in links}
    for link in links.values():
        link.open()
    for index in range(samples):
        for target, link in links.items():
            snapshot = link.next_snapshot(5.0)
            assert snapshot is not None
            judged = judge(snapshot, Baselines(), servers=servers, now=snapshot.time)
            handed[target].append(judged)
            writer.sample(target, judged)
        if index == samples // 2:
            writer.event(EVENT_KILL, "kill finished: 4200 python3: killed", WEDGED, {"outcomes": []})
        clock.advance(step_s)
    writer.close(30.0)
    return handed


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[HostSnapshot]]]:
    path = tmp_path_factory.mktemp("rec") / "demo.gtrec"
    return path, record_sim(path, 90, keyframe_every=20)


def test_every_sample_reads_back_exactly(recorded: tuple[Path, dict[str, list[HostSnapshot]]]) -> None:
    path, handed = recorded
    recording = Recording.load(path)
    assert recording.closed
    assert recording.damage is None
    assert recording.targets == [WEDGED, HEALTHY_TARGET]
    for target, snapshots in handed.items():
        assert recording.samples(target) == snapshots
        # Seeking straight to one (from its whole sample, not from the start) gives the same.
        assert recording.snapshot(target, 57) == snapshots[57]
        assert recording.snapshot_at(target, recording.times(target)[33]) == snapshots[33]
    kinds = [m.kind for m in recording.moments]
    assert "kill" in kinds
    assert "verdict" in kinds
    assert "server" in kinds  # the wedge: UP → UNHEALTHY
    assert recording.meta["targets"] == [WEDGED, HEALTHY_TARGET]


def test_a_recording_cut_mid_record_reads_up_to_its_last_whole_record(
    recorded: tuple[Path, dict[str, list[HostSnapshot]]], tmp_path: Path
) -> None:
    path, handed = recorded
    data = path.read_bytes()
    offsets = [at for at, record in fmt.frames(data, len(fmt.header())) if isinstance(record, dict)]
    # Cut inside the head of a record, inside its payload, and a byte short of its end.
    for at in offsets[len(offsets) // 2 : len(offsets) // 2 + 3]:
        length = fmt.HEADER.unpack_from(data, at)[1]
        for cut in (at + 3, at + fmt.HEADER.size + length // 2, at + fmt.HEADER.size + length - 1):
            cut_path = tmp_path / f"cut-{cut}.gtrec"
            cut_path.write_bytes(data[:cut])
            recording = Recording.load(cut_path)
            assert not recording.closed
            assert recording.damage is not None
            assert "cut in the middle of a record" in recording.damage
            assert f"at byte {at}" in recording.damage
            for target in handed:
                count = recording.count(target)
                assert recording.samples(target) == handed[target][:count]


def test_a_damaged_record_ends_the_reading_there(
    recorded: tuple[Path, dict[str, list[HostSnapshot]]], tmp_path: Path
):
    path, handed = recorded
    data = bytearray(path.read_bytes())
    offsets = [at for at, record in fmt.frames(bytes(data), len(fmt.header())) if isinstance(record, dict)]
    at = offsets[40]
    data[at + fmt.HEADER.size + 5] ^= 0xFF
    damaged = tmp_path / "damaged.gtrec"
    damaged.write_bytes(bytes(data))
    recording = Recording.load(damaged)
    assert (
        recording.damage == f"{damaged}: a record whose checksum does not match at byte {at}: read up to it"
    )
    assert sum(recording.count(t) for t in handed) > 10
    for target in handed:
        assert recording.samples(target) == handed[target][: recording.count(target)]


def _file(tmp_path: Path, records: list[bytes], version: int = fmt.VERSION) -> Path:
    path = tmp_path / "x.gtrec"
    path.write_bytes(fmt.MAGIC + struct.pack(">H", version) + b"".join(records))
    return path


def _framed(payload: bytes) -> bytes:
    return fmt.HEADER.pack(fmt.MARK, len(payload), zlib.crc32(payload)) + payload


def _sample_record(target: str = "h", **changes: Any) -> dict[str, Any]:
    snapshot = replace(HostSnapshot(target, time=1.0e9), **changes)
    return {"k": "key", "t": 1.0e9, "h": target, "s": snapshot.to_dict()}


def test_a_newer_version_says_so_in_one_line(tmp_path: Path) -> None:
    path = _file(tmp_path, [fmt.encode(_sample_record())], version=fmt.VERSION + 1)
    with pytest.raises(RecordingError) as caught:
        Recording.load(path)
    assert str(caught.value) == (
        f"{path}: recording format version {fmt.VERSION + 1} is newer than this gputui reads ({fmt.VERSION}):"
        " upgrade gputui to replay it"
    )


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"", "not a gputui recording"),
        (b"hello world\n" * 10, "not a gputui recording"),
        (
            b"\x1f\x8b\x08\x00" + b"\x00" * 40,
            "a gzip file, not a gputui recording (a bundle? unpack it first)",
        ),
        (fmt.MAGIC[:-1], "not a gputui recording"),
    ],
)
def test_a_foreign_file_is_refused_in_one_line(tmp_path: Path, data: bytes, said: str) -> None:
    path = tmp_path / "foreign"
    path.write_bytes(data)
    with pytest.raises(RecordingError) as caught:
        Recording.load(path)
    assert str(caught.value) == f"{path}: {said}"


def test_a_recording_with_no_sample_says_so(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="holds no sample"):
        Recording.load(_file(tmp_path, [fmt.encode({"k": "start", "t": 1.0})]))


def test_a_planted_fifo_or_device_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.gtrec"
    os.mkfifo(fifo)
    done: list[str] = []

    def load(path: str) -> None:
        try:
            Recording.load(path)
        except RecordingError as exc:
            done.append(str(exc))

    for path in (str(fifo), "/dev/zero", str(tmp_path)):
        thread = threading.Thread(target=load, args=(path,), daemon=True)
        thread.start()
        thread.join(5.0)
        assert not thread.is_alive(), path
    assert done == [
        f"{fifo}: a FIFO, not a regular file",
        "/dev/zero: a character device, not a regular file",
        f"{tmp_path}: a directory, not a regular file",
    ]


def test_a_file_over_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.core.recording import reader

    monkeypatch.setattr(reader, "READ_MAX_BYTES", 1 << 20)
    path = tmp_path / "huge.gtrec"
    with path.open("wb") as out:
        out.truncate(2 << 20)
    with pytest.raises(RecordingError, match="larger than 1 MiB"):
        Recording.load(path)


def test_hostile_records_read_as_far_as_they_are_whole(tmp_path: Path) -> None:
    good = fmt.encode(_sample_record())
    deep = zlib.compress(b'{"k":"key","t":1,"h":"h","s":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    bomb = zlib.compress(b'{"k":"note","pad":"' + b"A" * (fmt.RECORD_MAX_JSON_BYTES + 10) + b'"}')
    huge_head = fmt.HEADER.pack(fmt.MARK, fmt.RECORD_MAX_BYTES + 1, 0) + b"x" * 64
    not_object = _framed(zlib.compress(b"[1, 2, 3]"))
    bad_patch = fmt.encode({"k": "delta", "t": 2.0e9, "h": "h", "p": {"o": {"gpus": {"l": [["c", 5, 9]]}}}})
    no_time = fmt.encode({"k": "key", "h": "h", "s": {}})
    cases = {
        "deep": (_framed(deep), "a record that is no JSON object"),
        "bomb": (_framed(bomb), "a record that is no JSON object"),
        "huge": (huge_head, "a damaged record"),
        "list": (not_object, "a record that is no JSON object"),
        "patch": (bad_patch, "a delta that does not fit its sample"),
        "time": (no_time, "a record without a time"),
    }
    for name, (record, said) in cases.items():
        path = _file(tmp_path, [good, record, good])
        recording = Recording.load(path)
        assert recording.count("h") == 1, name
        assert recording.damage == f"{path}: {said} at byte {len(fmt.header()) + len(good)}: read up to it"


def test_machine_text_in_a_recording_is_made_visible(tmp_path: Path) -> None:
    escape = "\x1b]0;owned\x07\x1b[2J"
    hostile_proc = Proc(pid=42, name=escape, cmdline=(escape, *HOSTILE_TEXTS[:3]), user=escape)
    record = _sample_record("h", processes=(hostile_proc,), hostname=escape)
    event = {"k": "event", "t": 1.0e9, "h": escape, "e": "note", "text": escape, "data": {escape: [escape]}}
    path = _file(tmp_path, [fmt.encode(record), fmt.encode(event)])
    recording = Recording.load(path)
    snapshot = recording.snapshot("h", 0)
    shown = json.dumps(snapshot.to_dict()) + repr(recording.events) + repr(recording.moments)
    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "\\x1b]0;owned" in shown


def test_the_ring_keeps_the_newest_within_its_size(tmp_path: Path) -> None:
    path = tmp_path / "ring.gtrec"
    handed = record_sim(path, 400, max_bytes=64 << 10, keyframe_every=10)
    assert os.path.getsize(path) <= 64 << 10
    recording = Recording.load(path)
    assert recording.damage is None
    assert recording.meta["cut"] is True
    for target, snapshots in handed.items():
        count = recording.count(target)
        assert 20 < count < len(snapshots)
        assert recording.samples(target) == snapshots[-count:]  # the newest, each host from a whole sample


def test_the_ring_keeps_the_newest_by_age(tmp_path: Path) -> None:
    path = tmp_path / "age.gtrec"
    handed = record_sim(path, 300, step_s=1.0, max_age_s=100.0, keyframe_every=10)
    recording = Recording.load(path)
    span = recording.end_s - recording.start_s
    assert 100.0 - 10 <= span <= 100.0 + writer_module.AGE_SLACK_S + 1
    for target, snapshots in handed.items():
        count = recording.count(target)
        assert recording.samples(target) == snapshots[-count:]


def test_without_a_ring_the_recording_stops_at_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "capped.gtrec"
    writer = RecordingWriter(str(path), ["h"], clock=lambda: 1.0e9)
    writer.max_bytes = 8 << 10
    writer.start()
    for index in range(200):
        writer.sample("h", _big_sample(index))
    writer.close(30.0)
    assert writer.stopped == f"{path}: reached 0 MiB: recording stopped"
    assert os.path.getsize(path) <= 8 << 10
    assert Recording.load(path).count("h") >= 1


def _big_sample(index: int) -> HostSnapshot:
    procs = tuple(Proc(pid=100 + i, name=f"w{i}", cpu_pct=float((i * index) % 97)) for i in range(50))
    return HostSnapshot("h", time=1.0e9 + index, processes=procs)


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "there.gtrec"
    path.write_text("keep me")
    with pytest.raises(RecordingError, match="exists already"):
        RecordingWriter(str(path), ["h"]).start()
    assert path.read_text() == "keep me"


def test_a_slow_disk_never_holds_the_sampler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's thread stuck on the disk: ``sample`` still returns at once, and what does not fit in the
    queue is counted, not waited for."""
    stuck = threading.Event()
    real_write = os.write

    def slow_write(fd: int, data: bytes) -> int:
        if threading.current_thread().name == "recording":
            stuck.wait(10.0)
        return real_write(fd, data)

    monkeypatch.setattr(writer_module.os, "write", slow_write)
    monkeypatch.setattr(writer_module, "QUEUE_MAX", 50)
    writer = RecordingWriter(str(tmp_path / "slow.gtrec"), ["h"], clock=lambda: 1.0e9)
    writer.start()
    sample = _big_sample(1)
    slowest = 0.0
    for _ in range(500):
        started = time.perf_counter()
        writer.sample("h", sample)
        slowest = max(slowest, time.perf_counter() - started)
    assert slowest < 0.05
    assert writer.dropped >= 400
    stuck.set()
    writer.close(30.0)


def test_a_host_with_a_thousand_processes_stays_small(tmp_path: Path) -> None:
    """Ten minutes of an 8-GPU host at the default interval, listing 1 000 processes of which a tenth change
    at every process-list read: what changed is written, not the list (about 1.4 MiB an hour)."""
    from gputui.agent.protocol import MEMORY_INTERVAL_S, PROCESS_INTERVAL_S

    clock = ManualClock()
    link = SimLink(WEDGED, LinkOptions(memory_interval_s=0.001), clock=clock, wedged_at_s=300.0)
    link.open()
    path = tmp_path / "big.gtrec"
    writer = RecordingWriter(str(path), [WEDGED], interval_s=MEMORY_INTERVAL_S, clock=clock, blocking=True)
    writer.start()
    procs = [
        Proc(
            pid=10_000 + i,
            ppid=4200,
            name=f"loader{i % 16}",
            cmdline=("python3", "-m", "loader", str(i)),
            start_ticks=1000 + i,
            rss_kib=100_000,
            cpu_pct=1.0,
        )
        for i in range(1000)
    ]
    listed: tuple[Proc, ...] = ()
    samples = int(600 / MEMORY_INTERVAL_S)
    every = max(1, round(PROCESS_INTERVAL_S / MEMORY_INTERVAL_S))
    for index in range(samples):
        if index % every == 0:
            for k in range(index % 10, 1000, 10):
                procs[k] = replace(procs[k], cpu_pct=float((index + k) % 100), rss_kib=100_000 + index)
            listed = tuple(procs)
        snapshot = link.next_snapshot(5.0)
        assert snapshot is not None
        writer.sample(WEDGED, replace(snapshot, processes=snapshot.processes + listed))
        clock.advance(MEMORY_INTERVAL_S)
    writer.close(60.0)
    size = os.path.getsize(path)
    assert writer.samples == samples
    assert size < 512 << 10, size
    assert Recording.load(path).count(WEDGED) == samples
