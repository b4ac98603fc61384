"""pytest fixtures for the fake NVML library.

Enable with ``pytest_plugins = ["tests.fakenvml.plugin"]`` in a conftest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fakenvml import FakeNvmlState, build, env_for

DEFAULT_GPU_COUNT = 8


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding a freshly built libnvidia-ml.so.1 (built once per session)."""
    lib_dir = tmp_path_factory.mktemp("fakenvml-lib")
    build(lib_dir)
    return lib_dir


@pytest.fixture(scope="session")
def fake_nvml_older(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``fake_nvml_older("v3", ...)``: a directory with a build that lacks those symbol groups, like an older
    driver (``tests.fakenvml.OMIT_GROUPS``); built once per set of groups and session."""
    built: dict[tuple[str, ...], Path] = {}

    def lib_dir(*omit: str) -> Path:
        key = tuple(sorted(set(omit)))
        if key not in built:
            directory = tmp_path_factory.mktemp("fakenvml-lib-no-" + "-".join(key))
            build(directory, omit=key)
            built[key] = directory
        return built[key]

    return lib_dir


@dataclass
class FakeNvml:
    lib_dir: Path
    state_path: Path
    state: FakeNvmlState = field(default_factory=lambda: FakeNvmlState.with_gpus(DEFAULT_GPU_COUNT))

    def write(self) -> None:
        """Render ``state`` to ``state_path``; running clients see it on their next call."""
        self.state.write(self.state_path)

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that should load the fake library."""
        return env_for(self.lib_dir, self.state_path)


@pytest.fixture
def fake_nvml(fake_nvml_lib: Path, tmp_path: Path) -> FakeNvml:
    """8 idle "NVIDIA RTX PRO 6000 Blackwell" GPUs (49152 MiB, 3 MiB baseline), already written."""
    fake = FakeNvml(lib_dir=fake_nvml_lib, state_path=tmp_path / "fakenvml.state")
    fake.write()
    return fake
