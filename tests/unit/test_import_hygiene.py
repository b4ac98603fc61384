"""The data layer imports without the UI toolkit; the collector package stays Python 3.8 source, imports
nothing of the client, and loads only what a host uses.

The start-up budget of a one-shot (``gputui snapshot --json``, ``gputui check``: what scripts, Slurm prologs
and ``watch`` run, often every few seconds on every node) is what its output needs and nothing more. Each
import below is kept out of that path, with the reason and its cost (cumulative import time in a bare Python
3.11, ``python -S -X importtime -c "import NAME"``, best of five; the third-party ones with site-packages):

==============  =======  ===============================================================================
import          cost     kept out because
==============  =======  ===============================================================================
typing          8.5 ms   annotations are for type checkers: ``TYPE_CHECKING = False`` / ``if TYPE_CHECKING``
dataclasses     12.9 ms  the model is records (``core/model/record.py``): no code generated per class
pathlib         8.8 ms   state, config and cache paths are text (``os.path``)
inspect         12.0 ms  nothing asks a function for its signature on this path
psutil          13.6 ms  the kill path's (identity checks), not a sample's: ``/proc`` is read directly
socket, ssl     6.8, 13.4 ms  no endpoint probed without a launcher; no TLS without a link that needs it
tomllib         12.5 ms  no config file to read (loaded when one exists)
difflib         6.0 ms   only a mistyped subcommand needs a suggestion
secrets, hmac   10.1, 2.7 ms  a temporary file's name needs only ``os.urandom``
paramiko        ~100 ms  loaded by a link that logs in with it, never by a local one-shot
textual, rich   ~80, 3 ms  the TUI's; the data layer never imports them (import-linter holds it too)
==============  =======  ===============================================================================

A package face of ``core/`` (its ``__init__``) loads nothing until a name is used, so importing one module
of a package costs that module only. Adding an import to this path needs its line here.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakenvml.plugin import FakeNvml
from tests.integration._procs import REPO, run_main

DATA_LAYER = (
    "gputui.core.model.snapshot",
    "gputui.agent",
    "gputui.core.verdict.analysis",
    "gputui.core.actions",
    "gputui.core.store.config",
    "gputui.core.store.saved",
    "gputui.core.servers",
    "gputui.core.verdict.cleanslate",
    "gputui.core.model.history",
    "gputui.core.text.cmdline",
    "gputui.transports.freshness",
    "gputui.commands.check",
    "gputui.core.fleet.rows",
    "gputui.commands.grammar.fleet",
    "gputui.transports.prometheus",
)


SSH_SHARED = (
    "gputui.transports.ssh.stream",
    "gputui.transports.ssh.payload",
    "gputui.transports.ssh.reduced",
    "gputui.transports.ssh.link",
    "gputui.transports.ssh.hostkeys.trust",
    "gputui.transports.ssh.openssh.link",
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


AGENT = REPO / "gputui" / "agent"


def _agent_modules() -> list[tuple[str, ast.Module]]:
    """(module name, parsed source) of every module of the collector package."""
    found = []
    for path in sorted(AGENT.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append((name, ast.parse(path.read_text(), filename=str(path))))
    return found


def _absolute_imports(name: str, tree: ast.Module, is_package: bool) -> set[str]:
    """Every module ``tree`` imports, relative imports resolved against ``name``."""
    package = name if is_package else name.rpartition(".")[0]
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                imported.add(node.module or "")
            else:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                if len(package.split(".")) < node.level:
                    base = ""  # above the top-level package
                imported.add(f"{base}.{node.module}" if node.module else base)
    return imported


def test_every_collector_module_is_python_38_source() -> None:
    for path in sorted(AGENT.rglob("*.py")):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def test_the_collector_imports_nothing_from_the_client_and_no_third_party_module() -> None:
    """The shipped package may import the standard library, itself, and the optional pynvml and psutil."""
    allowed_third_party = {"pynvml", "psutil"}
    for name, tree in _agent_modules():
        is_package = (AGENT / Path(*name.split(".")[2:]) / "__init__.py").exists() or name == "gputui.agent"
        for module in _absolute_imports(name, tree, is_package):
            top = module.split(".")[0]
            if top == "gputui":
                assert module == "gputui.agent" or module.startswith("gputui.agent."), (name, module)
            else:
                assert top in sys.stdlib_module_names or top in allowed_third_party, (name, module)


def test_the_import_rule_sees_a_client_import() -> None:
    """The rule above is not vacuous: a relative import that climbs out of the package, and an absolute one
    of the client, are both seen as client imports."""
    climbs = ast.parse("from ...core import model\nfrom gputui.core.model.snapshot import Proc\n")
    assert _absolute_imports("gputui.agent.gpu.nvml", climbs, False) == {
        "gputui.core",
        "gputui.core.model.snapshot",
    }
    inside = ast.parse("from ..calls import Worker\nfrom . import nvmlapi\n")
    resolved = _absolute_imports("gputui.agent.gpu.nvml", inside, False)
    assert resolved == {"gputui.agent.calls", "gputui.agent.gpu"}


def test_what_a_host_does_not_use_is_not_imported() -> None:
    """The collector's start, sample and command modules leave the HTTP client, TLS, the nvidia-smi backend
    and the kill path unloaded: a host loads them only when it probes an endpoint, has no NVML or is asked
    to kill."""
    code = (
        "import sys\n"
        "from gputui.agent import collector\nfrom gputui.agent.remote import serve\n"
        "agent = collector.Agent(use_pynvml=True, discover_health=False)\n"
        "agent.sample(force_processes=True)\n"
        "agent.close()\n"
        "shown = (m for m in sys.modules if m.startswith('gputui') or m in ('ssl', 'typing'))\n"
        "print(' '.join(sorted(shown)))\n"
    )
    env = {"PATH": "/nonexistent", "LD_LIBRARY_PATH": "/nonexistent"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "gputui.agent.collector" in loaded
    assert "gputui.agent.gpu.nvml" in loaded
    unused = {
        "ssl",
        "typing",  # imported by type checkers only
        "gputui.agent.servers.http",
        "gputui.agent.servers.probe",
        "gputui.agent.servers.prober",
        "gputui.agent.gpu.smi",
        "gputui.agent.gpu.smiparse",
        "gputui.agent.kill.operation",  # loaded by the first kill command
        "gputui.agent.kill.operations",
    }
    assert not loaded & unused, sorted(loaded & unused)
    client = {m for m in loaded if m.startswith("gputui.") and not m.startswith("gputui.agent")}
    assert client == set(), client


ONE_SHOT_UNUSED = (
    "psutil",  # the kill path's, not a sample's
    "socket",
    "ssl",
    "gputui.agent.servers.prober",
    "gputui.agent.servers.http",
    "gputui.agent.servers.probe",
    "tomllib",
    "tomli",  # no config file to read
    "difflib",  # no mistyped command to name
    "secrets",
    "hmac",  # a temporary file's name needs only os.urandom
    "dataclasses",  # the model is records (core/model/record.py): no methods compiled per class at import
    "typing",  # imported by type checkers only (under TYPE_CHECKING) below the UI
    "pathlib",  # state, config and cache paths are text (with urllib.parse and ipaddress behind it)
    "inspect",
    "paramiko",
    "cryptography",
    "textual",
    "rich",
)
"""What ``gputui snapshot --json`` and ``gputui check`` of the local host, with no config file and no launcher
running, must not load: each is an import its output does not need."""


@pytest.mark.parametrize("words", [["snapshot", "--json"], ["check"]])
def test_a_local_one_shot_loads_only_what_it_uses(
    fake_nvml: FakeNvml, tmp_path: Path, words: list[str]
) -> None:
    run = run_main(words, dict(fake_nvml.env(), XDG_CONFIG_HOME=str(tmp_path / "no-config")), timeout_s=60)
    assert run.status == 0, run.stderr
    if words[0] == "snapshot":
        assert json.loads(run.stdout)["hosts"][0]["gpus"], run.stdout[:200]
    else:
        assert "CLEAN" in run.stdout, run.stdout[:200]
    loaded = run.modules
    assert "pynvml" in loaded
    assert "gputui.agent.collector" in loaded
    unused = {name for name in ONE_SHOT_UNUSED if name in loaded}
    assert unused == set(), sorted(unused)
