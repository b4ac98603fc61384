"""The map and the rules hold the tree as it is: README's Layout names every folder that
``ls gputui/*/ gputui/core/*/`` shows and no other, each on a line of its own at its depth, and the
import-linter contracts give every package of ``core/`` and every subcommand of ``commands/`` its layer (a
package a ``layers`` contract does not list is free to import anything, so a new one would go unchecked)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the project's own fallback on Python 3.10 (core/store/config.py)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gputui"


def _packages(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file())


def _layout_block() -> list[str]:
    """The lines of the fenced block under README's ``## Layout``."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    return block.splitlines()


def _named_at(lines: list[str], indent: int) -> list[str]:
    """The folders the block names at the start of a line indented by ``indent`` spaces (``name/``)."""
    pattern = re.compile(rf"^ {{{indent}}}([a-z_]+)/(?:\s|$)")
    return sorted(m.group(1) for line in lines if (m := pattern.match(line)))


def test_the_layout_names_every_top_level_package_and_no_other() -> None:
    lines = _layout_block()
    assert lines[1] == "gputui/"
    assert _named_at(lines, 2) == _packages(PACKAGE)


def test_the_layout_names_every_package_of_core_and_no_other() -> None:
    assert _named_at(_layout_block(), 4) == sorted(
        set(_packages(PACKAGE / "core")) | set(_packages(PACKAGE / "commands"))
    )


def test_the_layout_names_every_folder_deeper_down() -> None:
    """Sub-packages below the second level (``transports/ssh/hostkeys``, ``ui/session``…) are named in the
    block as ``name/`` somewhere."""
    block = "\n".join(_layout_block())
    deeper = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("__init__.py")
        if len(p.relative_to(PACKAGE).parts) >= 3 and p.parent.parent.name != "core"
    )
    assert len(deeper) > 10  # the walk found the package
    missing = [path for path in deeper if f"{Path(path).parent.name}/" not in block]
    assert missing == []


def _contract(container: str) -> list[str]:
    """The names a ``layers`` contract over ``container`` gives a layer (``a | b``, ``a : b``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [
        c for c in config["tool"]["importlinter"]["contracts"] if c.get("containers") == [container]
    ]
    return sorted(name for layer in contract["layers"] for name in re.split(r"\s*[|:]\s*", layer.strip()))


def test_every_package_of_core_has_its_layer() -> None:
    assert _contract("gputui.core") == _packages(PACKAGE / "core")


def test_every_subcommand_and_package_of_commands_has_its_layer() -> None:
    modules = sorted(p.stem for p in (PACKAGE / "commands").glob("*.py") if p.stem != "__init__")
    assert _contract("gputui.commands") == sorted(modules + _packages(PACKAGE / "commands"))


def test_the_layout_says_core_s_order_with_every_package() -> None:
    """The sentence after the block says the order of core's layers, naming each package."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    (sentence,) = [p for p in section.split("\n\n") if p.startswith("Inside core/")]
    said = set(re.findall(r"[a-z]+", sentence.split(":", 1)[1].split(".", 1)[0]))
    assert set(_packages(PACKAGE / "core")) <= said


_DOTTED = re.compile(
    r"``(?:gputui\.)?((?:core|agent|ui|transports|commands)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?``"
)
"""A module or a name in one, as a docstring or comment names it: ``core.verdict.judge``,
``gputui.agent.proc.leftovers.scan`` (a file such as ``ui.json`` is not one)."""
_FILE_SUFFIXES = (".json", ".tcss", ".py", ".toml", ".md", ".txt", ".sh")


def _defined(module: Path) -> set[str]:
    """The names a module defines or imports, and those its ``__all__`` lists (a face's lazy names)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)  # the names of ``__all__``
    return names


def _names_something(dotted: str) -> bool:
    """Whether ``dotted`` (below ``gputui``) is a package, a module, or a name defined in the last of them."""
    here = PACKAGE
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if (here / part / "__init__.py").is_file():
            here = here / part
        elif (here / f"{part}.py").is_file():
            return len(parts) == i + 1 or parts[i + 1] in _defined(here / f"{part}.py")
        else:
            return part in _defined(here / "__init__.py")
    return True


def test_docstrings_name_modules_where_they_live() -> None:
    """A name left from before ``core/`` became concept packages (core.cleanslate, gputui.core.owner.Owner)
    sends a reader to a file that is not there: every dotted name of the package in double backticks, in the
    code and the tests, names a package, a module or a name it defines."""
    stale = []
    named = 0
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in _DOTTED.finditer(line):
                named += 1
                if not match.group(1).endswith(_FILE_SUFFIXES) and not _names_something(match.group(1)):
                    stale.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}")
    assert named > 100  # the walk found the references
    assert stale == []
