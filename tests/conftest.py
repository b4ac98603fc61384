"""Shared fixtures and suite-wide rules.

A skipped test is a failed run: every dependency the suite needs is installed by `.ci/run`, so a skip can only
mean something is missing that should not be. A process left behind fails the run too (`tests/leakcheck.py`),
and so does a change to the user's own gputui files or `.ssh`: HOME and the XDG directories point into a
temporary tree for the whole run and every subprocess (`tests/homeguard.py`), and each test gets a state
folder of its own.
"""

import os
import tempfile

import pytest

pytest_plugins = [
    "tests.homeguard",
    "tests.leakcheck",
    "tests.kernellog",
    "tests.fakenvml.plugin",
    "tests.fakecuda.plugin",
    "tests.integration.sshd",
    "tests.integration.prometheus",
    "pytester",
]

SLOW_FOLDERS = ("integration", "bench", "snapshot")
"""Tests that start real peers (sshd, Prometheus, HTTP servers, process trees, Python interpreters), run the
bench, or render the app to SVG: ``pytest -m "not slow"`` leaves them out, for a run of a few minutes."""

_skipped: list[str] = []


@pytest.fixture(autouse=True)
def _own_state_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test keeps gputui's state (baselines, audit log, the collector's record of the jobs it saw) in a
    folder of its own inside the run's temporary one: a job one test leaves in the record is not another
    test's to judge."""
    monkeypatch.setenv("XDG_STATE_HOME", tempfile.mkdtemp(prefix="test-", dir=os.environ["XDG_STATE_HOME"]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        if "tests" in parts and any(folder in parts[parts.index("tests") :] for folder in SLOW_FOLDERS):
            item.add_marker(pytest.mark.slow)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if _skipped:
        terminalreporter.write_line(
            f"FAILED: {len(_skipped)} test(s) skipped; the suite does not allow skips: "
            + ", ".join(_skipped),
            red=True,
        )
