"""The leftovers rule (``core.store.leftovers``) and the collector's checks before it removes anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputui.agent.proc import leftovers as agent_leftovers
from gputui.core.model import HostSnapshot, Verdict
from gputui.core.store import leftovers

GIB = 1 << 30


def snapshot() -> HostSnapshot:
    return HostSnapshot(target="h", boot_id="b", verdict=Verdict(clean=True))


def test_a_leftover_is_a_finding_and_residue_and_a_full_shm_is_said() -> None:
    segment = {"path": "/dev/shm/sgl_shm_1", "kind": "segment", "user": "alice", "size_bytes": 12 << 20}
    roomy = {
        "segments": [segment],
        "mps": [],
        "shm": {"dir": "/dev/shm", "total_bytes": 64 * GIB, "used_bytes": GIB},
    }
    judged = leftovers.judge(snapshot(), roomy)
    assert judged.verdict is not None
    assert not judged.verdict.clean  # residue
    assert [f.kind for f in judged.findings] == ["leftover"]
    assert leftovers.judge(snapshot(), {"segments": [], "mps": [], "shm": roomy["shm"]}).verdict == Verdict(
        clean=True
    )
    assert judged.findings[0].detail.startswith("segment /dev/shm/sgl_shm_1 (12.0 MiB, owner alice)")
    full = dict(roomy, shm={"dir": "/dev/shm", "total_bytes": 64 * GIB, "used_bytes": 63 * GIB})
    judged = leftovers.judge(snapshot(), full)
    assert judged.verdict is not None
    assert not judged.verdict.clean
    assert judged.verdict.reasons[-1] == "/dev/shm is full: /dev/shm: 63.0 of 64.0 GiB used (98%)"
    mps = {"segments": [], "mps": [{"pid": 77, "user": "bob"}], "shm": None}
    (finding,) = leftovers.findings("h", mps)
    assert finding.detail == "MPS control daemon pid 77 (user bob) outlived its killed job"
    assert "echo quit | nvidia-cuda-mps-control" in finding.action


@pytest.mark.parametrize(
    "usage", [None, {"total_bytes": 0, "used_bytes": 0}, {"total_bytes": 1, "used_bytes": 5}]
)
def test_usage_that_cannot_be_right_is_not_full(usage: object) -> None:
    assert not leftovers.shm_full(usage)
    assert leftovers.shm_line(usage) == ""


def test_remove_refuses_a_symlink_another_folder_and_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(agent_leftovers.TEST_SHM_ENV, str(tmp_path))
    target = tmp_path / "victim"
    target.write_bytes(b"keep me")
    real = tmp_path / "seg"
    real.write_bytes(b"x")
    recorded = agent_leftovers.check([agent_leftovers._describe(str(real))], [])["segments"][0]
    real.unlink()
    os.symlink(target, real)  # planted where the segment was
    outside = dict(recorded, path=str(target.parent.parent / "elsewhere"))
    results = agent_leftovers.remove([recorded, outside], read_only=False)
    assert [r["result"] for r in results] == ["changed", "gone"]
    assert target.read_bytes() == b"keep me"
    assert real.is_symlink()
    with pytest.raises(PermissionError):
        agent_leftovers.remove([recorded], read_only=True)


def test_the_record_is_per_host_and_boot(tmp_path: Path) -> None:
    path = tmp_path / "leftovers.json"
    found = {"segments": [{"path": "/dev/shm/a", "inode": 1, "dev": 2, "uid": 0, "open_by": [3]}], "mps": []}
    leftovers.save("h", "boot-1", found, path)
    assert leftovers.load("h", "boot-1", path)["segments"] == [
        {"path": "/dev/shm/a", "inode": 1, "dev": 2, "uid": 0}
    ]
    assert leftovers.load("h", "boot-2", path) == {"segments": [], "mps": []}
    assert leftovers.load("other", "boot-1", path) == {"segments": [], "mps": []}
    path.write_text("[not json")
    assert leftovers.load("h", "boot-1", path) == {"segments": [], "mps": []}
