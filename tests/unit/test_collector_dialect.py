"""Collector-side modules kept in the collector's dialect (stdlib, Python 3.8); the server modules UI-free.

The filter and the threads probe run on the GPU host; they live in ``gputui/core`` until they move into the
collector, and must be movable as they are. Their behaviour on a real Python 3.8 is checked in the
integration tests that use them (``test_server_states.py``, ``test_defunct_leader.py``).
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.integration._procs import REPO

COLLECTOR_SIDE = ("gputui/core/metrics_filter.py", "gputui/core/threads_probe.py")


@pytest.mark.parametrize("path", COLLECTOR_SIDE)
def test_collector_side_modules_are_python_38_stdlib_only_source(path: str) -> None:
    tree = ast.parse((REPO / path).read_text(), filename=path, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports: the module moves into another package"
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def test_server_modules_import_without_textual_or_rich() -> None:
    code = (
        "import sys\n"
        "import gputui.core.servers, gputui.core.metrics_filter, gputui.core.threads_probe\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
