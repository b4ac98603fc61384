"""The data layer imports without the UI toolkit, and the shipped agent stays Python 3.8 source."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.integration._procs import REPO

DATA_LAYER = (
    "gputui.core.model", "gputui.agent", "gputui.core.analysis", "gputui.core.actions", "gputui.core.config",
    "gputui.core.state",
    "gputui.core.fleet", "gputui.commands.fleet_options", "gputui.transports.prometheus",
)


SSH_SHARED = (
    "gputui.transports.ssh.stream", "gputui.transports.ssh.payload", "gputui.transports.ssh.reduced",
    "gputui.transports.ssh.link", "gputui.transports.ssh.hostkeys", "gputui.transports.openssh",
)
"""The SSH link as the system ssh client runs it: paramiko is loaded only by a link that logs in with it."""


def packages_loaded_by(modules: tuple[str, ...]) -> set[str]:
    """The top-level packages a fresh interpreter has loaded after importing ``modules``."""
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(','.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.strip().split(","))


def test_data_layer_imports_without_textual_or_rich() -> None:
    assert packages_loaded_by(DATA_LAYER) & {"textual", "rich"} == set()


def test_the_shared_parts_of_the_ssh_transport_import_without_paramiko() -> None:
    loaded = packages_loaded_by(SSH_SHARED)
    assert "gputui" in loaded
    assert loaded & {"paramiko", "textual", "rich"} == set()


def test_agent_is_python_38_source() -> None:
    source = (REPO / "gputui" / "agent.py").read_text()
    ast.parse(source, filename="gputui/agent.py", feature_version=(3, 8))


def test_agent_imports_only_the_standard_library_and_optional_extras() -> None:
    tree = ast.parse((REPO / "gputui" / "agent.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names)
    # pynvml and psutil are optional (guarded); nothing else may be needed on a remote host.
    assert third_party <= {"pynvml", "psutil"}, third_party
    assert "gputui" not in imported  # shipped as one file: no package imports
