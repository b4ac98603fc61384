"""The README's first screen is a way in: what gputui is, the two commands, the incident walked through with
one screenshot; then a contents list whose every entry is a top-level section; the legend is the legend's
own table."""

from __future__ import annotations

import re
from pathlib import Path

from gputui.ui import legend

REPO = Path(__file__).resolve().parents[2]
FIRST_SCREEN_LINES = 80
INSTALL_AND_DEMO = "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/gputui --demo"


def _readme() -> str:
    return (REPO / "README.md").read_text()


def _ci_test_command() -> str:
    """The command ``.ci/run`` runs: the line after its "verbatim" marker."""
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    marker = next(i for i, line in enumerate(lines) if "verbatim" in line)
    return lines[marker + 1]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_first_screen_has_both_commands_verbatim() -> None:
    first = "\n".join(_readme().splitlines()[:FIRST_SCREEN_LINES])
    assert f"```sh\n{INSTALL_AND_DEMO}\n```" in first
    assert f"```sh\n{_ci_test_command()}\n```" in first


def test_the_first_screen_walks_the_incident_to_its_three_facts() -> None:
    first = "\n".join(_readme().splitlines()[:FIRST_SCREEN_LINES])
    # The wedged server, as the operator met it.
    for fact in ("sglang", "Nsight Systems", "503", "<defunct>", "pkill -f nsys", "3 MiB"):
        assert fact in first, fact
    # The kill: gputui's own and the operator's.
    assert "`X`, then `y`" in first
    assert "kill it your way" in first
    # The three facts, in the words the check prints.
    for line in ("workers: ✓", "residue: ✓ none left", "GPUs:    ✓ 8/8 GPUs at baseline and fit"):
        assert line in first, line
    pictures = re.findall(r"!\[[^\]]+\]\((screenshots/[\w.-]+\.svg)\)", first)
    assert len(pictures) == 1
    assert (REPO / pictures[0]).is_file()


def test_the_contents_list_every_reference_section_and_nothing_is_nested_under_another() -> None:
    text = _readme()
    headings = re.findall(r"^(#{1,6}) (.+)$", text, re.M)
    assert [level for level, _ in headings if level != "##"] == ["#"]  # one title, every section top-level
    sections = [title for _, title in headings[1:]]
    start = text.index("\n## Contents\n")
    contents = text[start : text.index("\n## ", start + 1)]
    linked = re.findall(r"\]\(#([\w-]+)\)", contents)
    anchors = {_anchor(title) for title in sections}
    assert set(linked) <= anchors, set(linked) - anchors
    reference = sections[sections.index("Contents") + 1 :]
    assert [_anchor(title) for title in reference] == [a for a in dict.fromkeys(linked)]
    assert text.index("\n## Contents\n") < text.index("\n## Command line\n") < text.index("\n## Test\n")


def test_every_link_inside_the_readme_lands_on_a_section() -> None:
    text = _readme()
    anchors = {_anchor(title) for title in re.findall(r"^#{1,6} (.+)$", text, re.M)}
    for target in re.findall(r"\]\(#([\w-]+)\)", text):
        assert target in anchors, target


def test_the_legend_is_the_legend_table() -> None:
    assert legend.markdown_table() in _readme()
