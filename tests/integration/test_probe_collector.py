"""The ``probe`` command as a client sends it to a collector started as SSH starts it (fake NVML, fake
``libcuda.so.1``): a deadline or buffer outside its range is one line, answered before anything runs; a
second probe asked of a collector while its first runs is told so at once, never run beside it."""

from __future__ import annotations

import json
import time

from gputui.agent.protocol import PROBE_BUFFER_MAX_MIB, PROBE_DEADLINE_MAX_S
from tests.fakecuda.plugin import FakeCuda
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import agent_process

DEADLINE_WORDS = "deadline_s must be a number of seconds from 1 to 300"
BUFFER_WORDS = f"buffer_mib must be a whole number of MiB from 1 to {PROBE_BUFFER_MAX_MIB}"


def _probe(**fields: object) -> dict[str, object]:
    return dict({"cmd": "probe", "gpus": None, "deadline_s": 5.0, "buffer_mib": 8, "force": False}, **fields)


def test_settings_out_of_range_are_one_line(fake_nvml: FakeNvml, fake_cuda: FakeCuda) -> None:
    with agent_process(env=fake_cuda.env(fake_nvml.env())) as agent:
        for fields, said in (
            ({"deadline_s": 0.5}, DEADLINE_WORDS),
            ({"deadline_s": PROBE_DEADLINE_MAX_S * 10}, DEADLINE_WORDS),
            ({"deadline_s": "nan"}, DEADLINE_WORDS),
            ({"buffer_mib": 0}, BUFFER_WORDS),
            ({"buffer_mib": PROBE_BUFFER_MAX_MIB + 1}, BUFFER_WORDS),
            ({"buffer_mib": True}, BUFFER_WORDS),
            ({"force": "yes"}, "force must be true or false"),
            ({"gpus": "0"}, "gpus must be a list of GPU indexes or UUIDs"),
        ):
            reply = agent.send(_probe(**fields))
            assert reply["ok"] is False, (fields, reply)
            assert said in reply["error"], (fields, reply)
            assert "\n" not in reply["error"]


def test_a_second_probe_of_a_collector_while_one_runs_is_told_at_once(
    fake_nvml: FakeNvml, fake_cuda: FakeCuda
) -> None:
    fake_cuda.state.gpus[0].hang = "memcpy"  # the first probe runs until its deadline
    fake_cuda.write()
    with agent_process(env=fake_cuda.env(fake_nvml.env())) as agent:
        assert agent.proc.stdin is not None
        agent.proc.stdin.write((json.dumps(dict(_probe(deadline_s=4.0), id=9000)) + "\n").encode())
        agent.proc.stdin.flush()
        time.sleep(1.0)  # its children have started
        started = time.monotonic()
        second = agent.send(_probe())
        assert time.monotonic() - started < 3.0
        assert (second["ok"], second["error"]) == (False, "another probe is running on this host")
        first = agent._next("reply", 30.0, 9000)
        assert first["ok"] is True, first
        results = [p["result"] for p in first["result"]["probes"]]
        assert results == ["hung"] + ["ok"] * 7
        # Once it is over, a probe runs again.
        fake_cuda.state.gpus[0].hang = None
        fake_cuda.write()
        again = agent.result(_probe(deadline_s=10.0), 30.0)
        assert [p["result"] for p in again["probes"]] == ["ok"] * 8
