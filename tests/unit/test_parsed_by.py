"""One parse per distinct /proc text: a job's members that share their cgroup and environment give each
member its own owner, as parsing each text alone does, and the kept texts stay bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputui.agent.proc.owners import OwnerReader, cgroup_facts, owner_of, parse_environ
from gputui.agent.proc.procfs import ParsedBy
from tests.unit.test_field_cgroups import EXPECTED, cgroup_text


def test_a_job_sharing_texts_gets_each_members_owner_as_parsing_alone_does(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    names = sorted(EXPECTED)
    environs = [b"SLURM_JOB_ID=4242\0PATH=/bin\0", b"PATH=/bin\0HOME=/root\0", b"POD_NAME=infer-0\0"]
    members = {}
    for pid in range(100, 400):  # 300 members over a handful of distinct texts, interleaved
        name = names[pid % 4]
        environ = environs[pid % len(environs)]
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(cgroup_text(name))
        (proc / str(pid) / "environ").write_bytes(environ)
        members[pid] = (name, environ)
    reader = OwnerReader(proc_root=str(proc), host_root=str(tmp_path / "host"))
    for pid, (name, environ) in members.items():
        alone = owner_of(cgroup_facts(cgroup_text(name)), parse_environ(environ), "alice", 1000)
        assert reader.owner(pid, 1, "alice", 1000) == alone, pid


def test_kept_texts_are_bounded_and_a_failing_parse_is_not_kept() -> None:
    calls: list[bytes] = []

    def parse(data: bytes) -> int:
        calls.append(data)
        if data == b"bad":
            raise ValueError("bad text")
        return len(data)

    memo = ParsedBy(parse, limit=3, max_bytes=10)
    assert [memo(b"aa"), memo(b"aa"), memo(b"bbb")] == [2, 2, 3]
    assert calls == [b"aa", b"bbb"]
    for _ in range(2):
        with pytest.raises(ValueError, match="bad text"):
            memo(b"bad")
    assert calls.count(b"bad") == 2
    assert memo(b"x" * 11) == 11  # over the byte budget: parsed, never kept
    assert memo(b"x" * 11) == 11
    assert calls.count(b"x" * 11) == 2
    for text in (b"c", b"d", b"e", b"f"):
        memo(text)
    assert len(memo._results) <= 3
    assert sum(map(len, memo._results)) <= 10
