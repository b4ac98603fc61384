"""The README's test command is the one CI runs, word for word."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _readme_command() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## Test\n") :]
    found = re.search(r"```sh\n(.+?)\n```", section, re.S)
    assert found is not None
    return found.group(1).strip()


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    command = _readme_command()
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines
    for step in (
        "tests/setup-system.sh",
        "ruff check",
        "ruff format --check",
        "mypy",
        "lint-imports",
        "pytest",
    ):
        assert step in command
