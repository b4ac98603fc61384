"""The agent lists whole GPU process trees, so the kill confirmation can name everything a tree kill hits.

Real processes (tests/integration/procs.py: a daemonised launcher with worker children), real pynvml over the
fake NVML, the agent in a subprocess as SSH runs it. Nothing here sends a signal except the launcher
fixture's own cleanup of the processes it started.
"""

from __future__ import annotations

from typing import Any

from gputui.core.actions import plan_kill
from gputui.core.jobs import build_forest, flatten
from gputui.core.model import HostSnapshot, Proc
from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import agent_process
from tests.integration.procs import Worker, launcher, ppid_of


def procs_by_pid(snapshot: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["pid"]: p for p in snapshot["processes"]}


def test_a_launchers_non_gpu_child_is_listed_under_it(fake_nvml: FakeNvml) -> None:
    workers = [Worker("scheduler_TP0", gpu=0), Worker("detokenizer")]
    with launcher(workers, fake_nvml) as running, agent_process(env=fake_nvml.env()) as agent:
        snapshot = agent.sample()
        worker, detokenizer = running["scheduler_TP0"], running["detokenizer"]
        procs = procs_by_pid(snapshot)
        assert procs[worker]["gpu_memory_mib"] == {"0": 40960}
        assert detokenizer in procs, "the non-GPU child of the launcher is missing"
        assert procs[detokenizer]["gpu_memory_mib"] == {}
        for pid in (running.pid, worker, detokenizer):
            assert procs[pid]["pgid"] == running.pid  # the launcher setsid()s: it leads group and session
            assert procs[pid]["sid"] == running.pid

        model = HostSnapshot.from_dict(snapshot)
        (tree,) = [n for n in build_forest(model) if n.proc.pid == running.pid]
        assert sorted(child.proc.pid for child in tree.children) == sorted([worker, detokenizer])
        assert tree.subtree_gpu_mib == {0: 40960}
        assert model.process(detokenizer) == Proc.from_dict(procs[detokenizer])
        assert model.process(detokenizer).pgid == running.pid  # type: ignore[union-attr]

        plan = plan_kill(model, [running.pid], tree=True)
        listed = {t.pid: t for t in plan.targets}
        assert set(listed) == {running.pid, worker, detokenizer}
        assert listed[detokenizer].descendant_of == running.pid
        assert listed[detokenizer].gpu_mib == 0
        assert plan.targets[-1].pid == running.pid  # children first, the root last


def test_double_forked_group_members_appear_in_the_kill_confirmation(fake_nvml: FakeNvml) -> None:
    """Middle parents gone: only the launcher's process group ties these two to its tree."""
    workers = [
        Worker("scheduler_TP0", gpu=0),
        Worker("scheduler_TP1", gpu=1, orphan=True),
        Worker("detokenizer", orphan=True),
    ]
    with launcher(workers, fake_nvml) as running, agent_process(env=fake_nvml.env()) as agent:
        orphan_holder, orphan_plain = running["scheduler_TP1"], running["detokenizer"]
        for pid in (orphan_holder, orphan_plain):
            assert ppid_of(pid) != running.pid  # reparented away from the launcher
        snapshot = agent.sample()
        procs = procs_by_pid(snapshot)
        assert orphan_plain in procs, "a non-GPU group member of the launcher is missing"
        assert procs[orphan_plain]["pgid"] == running.pid
        assert procs[orphan_holder]["pgid"] == running.pid

        model = HostSnapshot.from_dict(snapshot)
        plan = plan_kill(model, [running.pid], tree=True)
        listed = {t.pid: t for t in plan.targets}
        assert set(listed) == {running.pid, running["scheduler_TP0"], orphan_holder, orphan_plain}
        assert listed[orphan_holder].descendant_of == running.pid
        assert listed[orphan_holder].gpu_mib == 40960
        assert listed[orphan_plain].descendant_of == running.pid
        # The same processes the agent's tree kill would expand to (it re-reads /proc; nothing is sent here).
        assert {n.proc.pid for n in flatten(build_forest(model))} >= {running.pid, orphan_holder}


def test_an_older_snapshot_without_groups_still_plans(fake_nvml: FakeNvml) -> None:
    """A collector that does not report pgid: the listing falls back to ppid alone, no error."""
    workers = [Worker("scheduler_TP0", gpu=0), Worker("detokenizer", orphan=True)]
    with launcher(workers, fake_nvml) as running, agent_process(env=fake_nvml.env()) as agent:
        snapshot = agent.sample()
        for proc in snapshot["processes"]:
            proc.pop("pgid")
            proc.pop("sid")
        plan = plan_kill(HostSnapshot.from_dict(snapshot), [running.pid], tree=True)
        assert {t.pid for t in plan.targets} == {running.pid, running["scheduler_TP0"]}


def test_a_child_in_a_session_of_its_own_is_not_part_of_the_job(fake_nvml: FakeNvml) -> None:
    """A child that setsid()s left the job (a daemon it started): not listed, not in the tree, not killed."""
    workers = [Worker("scheduler_TP0", gpu=0), Worker("detokenizer"), Worker("own_session", mode="setsid")]
    with launcher(workers, fake_nvml) as running, agent_process(env=fake_nvml.env()) as agent:
        apart, detokenizer = running["own_session"], running["detokenizer"]
        assert ppid_of(apart) == running.pid  # still the launcher's child, in a session of its own
        snapshot = agent.sample()
        procs = procs_by_pid(snapshot)
        assert detokenizer in procs
        assert apart not in procs, "a child in a session of its own was listed as part of the GPU job"

        # The client draws and plans with the same rule when such a child is listed anyway (a zombie, say).
        listed = dict(procs[detokenizer], pid=apart, name="own_session", sid=apart, pgid=apart)
        model = HostSnapshot.from_dict(dict(snapshot, processes=[*snapshot["processes"], listed]))
        (tree,) = [n for n in build_forest(model) if n.proc.pid == running.pid]
        assert apart not in {n.proc.pid for n in flatten([tree])}
        plan = plan_kill(model, [running.pid], tree=True)
        assert {t.pid for t in plan.targets} == {running.pid, running["scheduler_TP0"], detokenizer}
