"""What a job whose GPU memory is gone left, judged from the collector's record (``core.verdict.remains``),
and the verdict's three facts (``core.verdict.facts``): pure rules over hand-made samples."""

from __future__ import annotations

from typing import Any

from gputui.core.model import HostSnapshot
from gputui.core.verdict import Baselines, judge

NOW = 1_800_000_000.0
JOB = {
    "root": 400,
    "root_start": 10,
    "name": "nsys",
    "first_seen": NOW - 600,
    "released": NOW - 60,
    "gpus": [[0, 40960]],
    "ports": [30000],
    "members_total": 4,
}


def proc(pid: int, ppid: int, state: str = "S", ticks: int = 10, **extra: Any) -> dict[str, Any]:
    return {"pid": pid, "ppid": ppid, "state": state, "name": f"p{pid}", "start_ticks": ticks, **extra}


def sample(processes: list[dict[str, Any]], remaining: list[list[int]], **job: Any) -> HostSnapshot:
    gpus = [{"index": 0, "uuid": "GPU-a", "memory_used_mib": 3, "memory_total_mib": 49152, "processes": []}]
    return HostSnapshot.from_dict(
        {
            "target": "node",
            "time": NOW,
            "gpus": gpus,
            "processes": processes,
            "listening_ports": sorted({p for proc in processes for p in proc.get("listen_ports", [])}),
            "remembered": {"jobs_seen": 1, "jobs": [dict(JOB, remaining=remaining, **job)], "gpus_gone": []},
        }
    )


def judged(snapshot: HostSnapshot) -> HostSnapshot:
    return judge(snapshot, Baselines(), one_shot=True)


def test_a_member_running_on_is_a_survivor_and_a_reused_pid_is_not() -> None:
    host = judged(sample([proc(401, 1)], [[401, 10]]))
    (survivor,) = host.findings
    assert survivor.kind == "survivor"
    assert survivor.action == "gputui kill node 401"
    assert host.verdict is not None
    assert host.verdict.level == "NOT CLEAN"
    assert host.verdict.facts is not None
    assert host.verdict.facts.workers.reasons == (survivor.detail,)
    # The same number with another start time is another process.
    again = judged(sample([proc(401, 1, ticks=99)], [[401, 10]]))
    assert again.findings == ()
    assert again.verdict is not None
    assert again.verdict.level == "CLEAN"


def test_a_zombie_of_the_hosts_init_is_given_time_one_of_another_init_is_not() -> None:
    young = judged(sample([proc(402, 1, "Z")], [[402, 10]], released=NOW - 1))
    assert young.verdict is not None
    assert young.verdict.level == "CLEAN"
    lingering = judged(sample([proc(402, 1, "Z")], [[402, 10]]))
    (zombie,) = lingering.findings
    assert zombie.action_pid is None  # never pid 1
    assert "of the job of pid 400 (nsys) is defunct" in zombie.detail
    shim = proc(300, 1, name="tini")
    contained = judged(sample([shim, proc(402, 300, "Z")], [[402, 10]], released=NOW - 1))
    (zombie,) = contained.findings
    assert zombie.action_pid == 300
    assert contained.verdict is not None
    assert contained.verdict.facts is not None
    assert contained.verdict.facts.residue.reasons == (zombie.detail,)


def test_a_zombie_in_a_container_is_stopped_with_its_container() -> None:
    owner = {"kind": "container", "id": "3f2a9c1b7d4e5f60", "name": "trainer"}
    host = judged(sample([proc(300, 1, name="tini"), proc(402, 300, "Z", owner=owner)], [[402, 10]]))
    (zombie,) = host.findings
    assert zombie.action == "stop the container trainer: its init does not reap (never signal its pid 1)"
    assert zombie.action_pid is None


def test_a_port_of_the_job_is_residue_only_when_held_by_one_that_inherited_it() -> None:
    heir = proc(500, 1, create_time=NOW - 120, listen_ports=[30000])
    host = judged(sample([heir], []))
    assert host.verdict is not None
    assert host.verdict.reasons == ("port 30000 still listening (pid 500 p500)",)
    assert host.verdict.facts is not None
    assert host.verdict.facts.residue.ok is False
    restarted = judged(sample([dict(heir, create_time=NOW - 5)], []))  # started after the job went
    assert restarted.verdict is not None
    assert restarted.verdict.level == "CLEAN"


def test_the_facts_of_a_clean_host_say_what_is_gone() -> None:
    host = judged(sample([], [], members_total=13, unseen=[]))
    assert host.verdict is not None
    facts = host.verdict.facts
    assert facts is not None
    assert facts.workers.line.startswith("13 of 13 processes of the job seen at ")
    assert (facts.residue.line, facts.gpus.line) == ("none left", "1/1 GPUs at baseline and fit")
    assert facts.workers.note is None
    unseen = judged(sample([], [], unseen=[777]))
    assert unseen.verdict is not None
    assert unseen.verdict.facts is not None
    assert unseen.verdict.facts.workers.line.endswith("; 1 cannot be seen (another user's?)")
    assert unseen.verdict.facts.workers.line.startswith("3 of 4 processes")


def test_an_mps_daemon_is_residue_only_while_no_job_of_its_user_holds_memory() -> None:
    daemon = {"pid": 77, "start_ticks": 3, "uid": 1000, "user": "alice"}
    host = judged(sample([], [], mps=[daemon]))
    (left,) = host.findings
    assert left.detail == "MPS control daemon pid 77 (user alice) outlived its killed job"
    assert host.verdict is not None
    assert host.verdict.facts is not None
    assert host.verdict.facts.residue.reasons == (f"leftover: {left.detail}",)
    launcher = proc(899, 1, uid=1000, name="python3")
    serving = proc(900, 899, uid=1000, gpu_memory_mib={"0": 2048})
    busy = judged(sample([launcher, serving], [], mps=[daemon]))
    assert [f.kind for f in busy.findings] == []
