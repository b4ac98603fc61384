"""pytest fixtures for the fake CUDA driver library.

Enable with ``pytest_plugins = ["tests.fakecuda.plugin"]`` in a conftest, or ``-p tests.fakecuda.plugin``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fakecuda import FakeCudaState, build, env_for

DEFAULT_GPU_COUNT = 8


@pytest.fixture(scope="session")
def fake_cuda_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding a freshly built libcuda.so.1 (built once per session)."""
    lib_dir = tmp_path_factory.mktemp("fakecuda-lib")
    build(lib_dir)
    return lib_dir


@pytest.fixture(scope="session")
def fake_cuda_older(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``fake_cuda_older("v2", "pci")``: a directory with a build that lacks those symbol groups
    (``tests.fakecuda.OMIT_GROUPS``; ``"foreign"``: only ``cuInit``); built once per set and session."""
    built: dict[tuple[str, ...], Path] = {}

    def lib_dir(*omit: str) -> Path:
        key = tuple(sorted(set(omit)))
        if key not in built:
            directory = tmp_path_factory.mktemp("fakecuda-lib-no-" + "-".join(key))
            build(directory, omit=key)
            built[key] = directory
        return built[key]

    return lib_dir


@dataclass
class FakeCuda:
    lib_dir: Path
    state_path: Path
    state: FakeCudaState = field(default_factory=lambda: FakeCudaState.with_gpus(DEFAULT_GPU_COUNT))

    def write(self) -> None:
        """Render ``state`` to ``state_path``; running clients see it on their next call."""
        self.state.write(self.state_path)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for a subprocess that should load the fake library (on top of ``base``, e.g. a
        fakenvml ``env()``)."""
        return env_for(self.lib_dir, self.state_path, base, self.locks_dir)

    def probe_processes(self) -> dict[int, str]:
        """Pid -> state letter of every process running gputui's probe program on this fake library (a
        child, or the fake's tracer forked from one), wherever it was started. A zombie has no command line
        left to be known by."""
        from gputui.agent.proc.probechild import MARKER

        found = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                environ = Path(f"/proc/{entry}/environ").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if MARKER.encode() in cmdline and f"FAKE_CUDA_STATE={self.state_path}".encode() in environ:
                found[int(entry)] = state
        return found

    @property
    def locks_dir(self) -> Path:
        """The host-wide probe locks' folder of this test's gputui processes (made by the first probe),
        beside the state file: never the host's /dev/shm."""
        return self.state_path.with_name("probe-locks")


@pytest.fixture
def fake_cuda(fake_cuda_lib: Path, tmp_path: Path) -> FakeCuda:
    """8 healthy GPUs, ordinals 0-7 at PCI 0000:17:00.0 .. 0000:1E:00.0 (fakenvml's default GPUs), already
    written."""
    fake = FakeCuda(lib_dir=fake_cuda_lib, state_path=tmp_path / "fakecuda.state")
    fake.write()
    return fake
