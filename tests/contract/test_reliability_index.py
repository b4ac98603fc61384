"""The reliability index (``tests/reliability.toml``): every case of the list of bad input and faults gputui
must survive, once, with the tests that assert it or what is missing.

The index is checked on its own in any clone: the case numbers run 1..N without a hole or a repeat, every
listed test is a function that exists (found by parsing its file with ``ast``; no test module is imported),
and a case without tests says in ``gap`` what is missing. The list itself (``RELIABILITY.md`` in the
``shared`` folder beside the repository) is not part of the repository: where it is on this machine, its
numbered cases must be exactly the index's. A clean clone (CI) has no such folder; there that comparison is
left out and the numbering is checked alone. It is left out inside the numbering test rather than skipped,
because a skipped test fails this suite's run (``tests/conftest.py``).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10: the project's dependencies bring tomli
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
INDEX = REPO / "tests" / "reliability.toml"
RELIABILITY_MD = Path(__file__).resolve().parents[3] / "shared" / "RELIABILITY.md"
TITLE_MAX_CHARS = 100
# A numbered case of the list: "12. What happens → what must follow." at the start of a line.
CASE_LINE = re.compile(r"^(\d+)\.\s+\S", re.MULTILINE)


@cache
def _index() -> dict[str, Any]:
    with INDEX.open("rb") as fh:
        loaded: dict[str, Any] = tomllib.load(fh)
    return loaded


def _cases() -> dict[int, dict[str, Any]]:
    raw = _index().get("case")
    assert isinstance(raw, dict), f"{INDEX}: no [case.N] tables"
    cases: dict[int, dict[str, Any]] = {}
    for key, table in raw.items():
        assert re.fullmatch(r"[1-9][0-9]*", key), f"[case.{key}]: not a case number"
        assert isinstance(table, dict), f"case.{key} is not a table"
        cases[int(key)] = table
    return cases


@cache
def _test_names(path: Path) -> frozenset[str]:
    """``name`` and ``Class::name`` of every test function a file defines (classes nested as pytest
    collects them)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}::")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(prefix + node.name)

    walk(tree.body, "")
    return frozenset(names)


def _numbers_of_the_list(text: str) -> list[int]:
    return [int(n) for n in CASE_LINE.findall(text)]


def test_every_case_is_listed_once_numbered_without_a_hole() -> None:
    """1..N, each once (TOML itself refuses a table defined twice); and, where ``RELIABILITY.md`` is on this
    machine, exactly its numbered cases. Without it (a clean clone) only the numbering is checked."""
    numbers = sorted(_cases())
    assert numbers, f"{INDEX}: no cases"
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    if not RELIABILITY_MD.is_file():
        return
    listed = _numbers_of_the_list(RELIABILITY_MD.read_text(encoding="utf-8"))
    assert listed, f"{RELIABILITY_MD}: no numbered cases"
    assert len(set(listed)) == len(listed), f"{RELIABILITY_MD}: a case number repeats"
    unindexed, unlisted = sorted(set(listed) - set(numbers)), sorted(set(numbers) - set(listed))
    assert not unindexed, f"cases of {RELIABILITY_MD} missing from {INDEX}: {unindexed}"
    assert not unlisted, f"cases of {INDEX} that {RELIABILITY_MD} does not have: {unlisted}"


def test_every_case_has_a_title_and_its_tests_or_a_gap() -> None:
    for number, case in sorted(_cases().items()):
        assert set(case) <= {"title", "tests", "gap"}, f"case {number}: unknown keys {set(case)}"
        title = case.get("title")
        assert isinstance(title, str), f"case {number}: no title"
        assert title.strip(), f"case {number}: empty title"
        assert len(title) <= TITLE_MAX_CHARS, f"case {number}: title over {TITLE_MAX_CHARS} characters"
        tests = case.get("tests")
        assert isinstance(tests, list), f"case {number}: no tests list"
        assert all(isinstance(t, str) for t in tests), f"case {number}: a test that is not a string"
        assert len(set(tests)) == len(tests), f"case {number}: a test listed twice"
        gap = case.get("gap")
        if gap is not None:
            assert isinstance(gap, str), f"case {number}: gap is not a string"
            assert gap.strip(), f"case {number}: empty gap"
        if not tests:
            assert gap is not None, f"case {number} has no test and says nothing of what is missing"


def test_every_listed_test_exists() -> None:
    missing = []
    for number, case in sorted(_cases().items()):
        for test in case["tests"]:
            path_text, sep, name = test.partition("::")
            path = REPO / path_text
            where = f"case {number}: {test}"
            if not sep or not name or "[" in name:
                missing.append(f"{where}: not 'tests/...py::test_function'")
            elif not path_text.startswith("tests/") or not path_text.endswith(".py"):
                missing.append(f"{where}: not a test file under tests/")
            elif not path.is_file():
                missing.append(f"{where}: no such file")
            elif not name.rpartition("::")[2].startswith("test"):
                missing.append(f"{where}: not a test function")
            elif name not in _test_names(path):
                missing.append(f"{where}: no such function in {path_text}")
    assert not missing, "\n".join(missing)


def test_the_list_s_case_lines_are_read_as_written() -> None:
    """The reading of ``RELIABILITY.md`` that the numbering test compares with: a numbered line is a case,
    a wrapped line or a number inside a sentence is not."""
    text = (
        "# Bad input\n\n## SSH\n1. Unknown host key → refused.\n2. Changed host key → refused\n"
        "    every time; 3. is no case here.\n10. Remote side hangs → deadline.\n3 no dot\n"
    )
    assert _numbers_of_the_list(text) == [1, 2, 10]
