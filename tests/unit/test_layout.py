"""The layout's rules: every folder a package, every package of core/ a face, and a generous size ceiling (no
module over 800 lines, no class over 600) that catches a heap, not one that drives cuts: a module holds one
concept, cut by what changes together. The import rules are import-linter's, in the test command."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gputui"
MODULE_MAX_LINES = 800
CLASS_MAX_LINES = 600
OVER_TODAY: dict[str, int] = {}
"""Modules and classes let over the rule, each held to a size: none, and none may join."""


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules: dict[str, int] = {}
    classes: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        name = str(path.relative_to(PACKAGE.parent))
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                classes[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return modules, classes


def test_no_module_or_class_is_too_big() -> None:
    modules, classes = _sizes()
    assert len(modules) > 100  # the walk found the package
    over = {m: n for m, n in modules.items() if n > MODULE_MAX_LINES}
    over.update({c: n for c, n in classes.items() if n > CLASS_MAX_LINES})
    assert {name: n for name, n in over.items() if n > OVER_TODAY.get(name, 0)} == {}


def test_below_the_ui_value_classes_are_records() -> None:
    """``dataclasses`` is for the UI layer, whose widgets are Textual's; everything a one-shot imports uses
    ``core/model/record.py`` instead, whose classes cost no generated code at import."""
    users = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "ui":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name.split(".")[0] == "dataclasses" for name in names):
                users.append(str(path.relative_to(PACKAGE.parent)))
    assert len(list(PACKAGE.rglob("*.py"))) > 100  # the walk found the package
    assert users == []


def test_every_package_folder_is_a_package() -> None:
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        if any(folder.glob("*.py")):
            assert (folder / "__init__.py").is_file(), folder


def test_every_core_package_has_a_face() -> None:
    """Each concept package of core/ says what it owns (a docstring) and names what others may use
    (``__all__``), and every name it names loads from the module it says."""
    import importlib

    core = PACKAGE / "core"
    packages = sorted(p.name for p in core.iterdir() if (p / "__init__.py").is_file())
    assert len(packages) >= 8
    assert sorted(p.stem for p in core.glob("*.py")) == ["__init__"]  # no module beside the packages
    for name in packages:
        face = importlib.import_module(f"gputui.core.{name}")
        assert len(face.__doc__ or "") > 80, name
        assert isinstance(face.__all__, list), name
        assert face.__all__, name
        # A submodule named like an exported name would replace it on the package once imported.
        modules = {m.stem for m in (core / name).glob("*.py")}
        modules |= {m.name for m in (core / name).iterdir() if m.is_dir()}
        assert not modules & set(face.__all__), f"{name}: a module shares a name of the face"
        for exported in face.__all__:
            assert getattr(face, exported) is not None, f"{name}.{exported}"
