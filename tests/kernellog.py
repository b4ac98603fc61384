"""The suite's kernel log: every collector it starts reads a test-only source, never the machine's.

At the start of the run ``GPUTUI_TEST_KERNEL_LOG`` names an empty file of the run's own (children inherit it,
the test sshd passes it on with ``SetEnv``), so a collector started anywhere in the suite reads no real
``/dev/kmsg`` or ``dmesg`` and the suite writes nothing to the real kernel log. ``kernel_log`` gives a test a
file of its own, named in the environment for the processes it starts after asking for it.

A pytest plugin: ``pytest_plugins`` in ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from gputui.agent.gpu.xid import TEST_SOURCE_ENV

_run_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _run_dir
    _run_dir = tempfile.mkdtemp(prefix="gputui-kernel-log-")
    path = Path(_run_dir) / "kmsg"
    path.write_text("")
    os.environ[TEST_SOURCE_ENV] = str(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _run_dir is not None:
        shutil.rmtree(_run_dir, ignore_errors=True)


@dataclass
class KernelLog:
    """A test's own kernel log (``/dev/kmsg`` record lines), named by ``GPUTUI_TEST_KERNEL_LOG``."""

    path: Path
    sequence: int = 0

    def add(self, text: str, at_s: float = 10.0, priority: int = 4) -> None:
        """Append one record, logged ``at_s`` seconds after boot."""
        self.sequence += 1
        with self.path.open("a") as fh:
            fh.write(f"{priority},{self.sequence},{int(at_s * 1e6)},-;{text}\n")

    def xid(self, pci: str, xid: int, detail: str = "", at_s: float = 10.0) -> None:
        """Append an Xid line as the NVIDIA driver logs it: ``NVRM: Xid (PCI:0000:17:00): 79, ...``."""
        self.add(f"NVRM: Xid (PCI:{pci}): {xid}, {detail}", at_s)


@pytest.fixture
def kernel_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KernelLog:
    """An empty kernel log of this test's own, read by the collectors it starts (in-process or children)."""
    path = tmp_path / "kmsg"
    path.write_text("")
    monkeypatch.setenv(TEST_SOURCE_ENV, str(path))
    return KernelLog(path)
