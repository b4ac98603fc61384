"""The replay clock, the replay link on it, ``--at`` times, and ``gputui replay --timeline / --at --json``."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from gputui.cli import main
from gputui.commands.replay import TimeError, parse_time
from gputui.core.link import LinkError
from gputui.core.model import HostSnapshot
from gputui.core.recording import Recording
from gputui.transports.replay import REPLAY_REFUSAL, ReplayClock, ReplayLink
from tests.unit.test_record_format import WEDGED, record_sim


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[HostSnapshot]]]:
    path = tmp_path_factory.mktemp("replay") / "demo.gtrec"
    return path, record_sim(path, 40, keyframe_every=7)


def test_the_clock_plays_pauses_seeks_and_stops_at_the_end() -> None:
    real = FakeMonotonic()
    clock = ReplayClock(1000.0, 1100.0, monotonic=real)
    real.now += 10
    assert clock.now() == 1010.0
    clock.set_speed(4.0)
    real.now += 5
    assert clock.now() == 1030.0
    clock.pause()
    real.now += 50
    assert clock.now() == 1030.0
    generation = clock.generation
    clock.seek(1090.0)
    assert clock.generation > generation
    clock.play()
    real.now += 100
    assert clock.now() == 1100.0
    assert clock.at_end
    assert not clock.playing
    clock.play()  # from the end: from the start again
    assert clock.now() == 1000.0
    assert clock.faster() == 8.0
    assert clock.faster(-2) == 2.0
    clock.seek(-5.0)
    assert clock.now() == 1000.0


def test_the_link_serves_the_recorded_sample_of_the_clock_s_moment(recorded) -> None:  # type: ignore[no-untyped-def]
    path, handed = recorded
    recording = Recording.load(path)
    clock = ReplayClock(recording.start_s, recording.end_s)
    clock.pause()
    link = ReplayLink(WEDGED, recording, clock)
    link.open()
    assert link.next_snapshot(0.1) == handed[WEDGED][0]
    assert link.next_snapshot(0.05) is None  # paused: nothing new
    times = recording.times(WEDGED)
    clock.seek(times[17])
    assert link.next_snapshot(0.1) == handed[WEDGED][17]
    sample = link.request({"cmd": "sample"}, 1.0)["snapshot"]
    assert HostSnapshot.from_dict(sample) == handed[WEDGED][17]
    clock.set_speed(256.0)
    clock.play()
    deadline = time.monotonic() + 5.0
    last = None
    while time.monotonic() < deadline and last != handed[WEDGED][-1]:
        last = link.next_snapshot(0.2) or last
    assert last == handed[WEDGED][-1]
    for command in ("kill", "kill_wait", "reset", "reset_plan", "probe", "calibrate", "leftovers_remove"):
        with pytest.raises(LinkError, match=f"^{WEDGED}: {REPLAY_REFUSAL}$"):
            link.request({"cmd": command}, 1.0)
    link.close()
    with pytest.raises(LinkError):
        link.next_snapshot(0.1)


def test_times_name_moments_of_the_recording(recorded) -> None:  # type: ignore[no-untyped-def]
    path, _handed = recorded
    recording = Recording.load(path)
    start, end = recording.start_s, recording.end_s
    assert parse_time("start", recording) == start
    assert parse_time("end", recording) == end
    assert parse_time("+10", recording) == start + 10
    assert parse_time("+10s", recording) == start + 10
    assert parse_time("+0.25m", recording) == start + 15
    assert parse_time(str(start + 3), recording) == start + 3
    clock = time.strftime("%H:%M:%S", time.localtime(start + 20))
    assert abs(parse_time(clock, recording) - (start + 20)) < 1.0
    for bad in ("+2h", "yesterday", "25:00", "1"):
        with pytest.raises(TimeError):
            parse_time(bad, recording)


def test_the_timeline_and_a_moment_as_json(recorded, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    path, handed = recorded
    assert main(["replay", str(path), "--timeline"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{path}: format 1, gputui ")
    assert any(" kill " in line and "4200 python3" in line for line in lines)
    assert any(" verdict " in line and "NOT CLEAN" in line for line in lines)
    assert main(["replay", str(path), "--at", "+10", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [host["target"] for host in document["hosts"]] == [WEDGED, "gpu-node-08"]
    recording = Recording.load(path)
    index = recording.index_at(WEDGED, recording.start_s + 10)
    assert index is not None
    assert document["hosts"][0]["time"] == handed[WEDGED][index].time
    assert document["hosts"][0]["verdict"] == handed[WEDGED][index].verdict.to_dict()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["replay", "/nonexistent/x.gtrec"], "gputui: /nonexistent/x.gtrec: no such file"),
        (["replay", "/dev/null", "--timeline"], "gputui: /dev/null: not a gputui recording"),
        (["replay", "RECORDING", "--at", "+9h", "--json"], "is not in the recording"),
        (["replay", "RECORDING", "--speed", "1000"], "gputui: --speed must be from 0.25 to 256"),
    ],
)
def test_bad_input_is_one_line(recorded, args, said, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    path, _handed = recorded
    args = [str(path) if word == "RECORDING" else word for word in args]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert said in line


def test_the_recording_of_a_foreign_file_in_the_tui_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.gtrec"
    path.write_bytes(b"\x1b]0;owned\x07 not a recording")
    err = io.StringIO()
    from gputui.commands import replay
    from gputui.commands.grammar.parser import parse_words

    assert replay.run(parse_words("replay", [str(path)]), io.StringIO(), err) == 2
    assert err.getvalue() == f"gputui: {path}: not a gputui recording\n"
