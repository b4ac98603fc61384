"""How a command line reads: the program's name and the arguments that say what the process is."""

from __future__ import annotations

import pytest

from gputui.core.text import command_words, program_name


@pytest.mark.parametrize(
    ("argv", "name", "words"),
    [
        (
            (
                "/root/.pyenv/versions/3.11.7/bin/python3",
                "-u",
                "-X",
                "dev",
                "-m",
                "sglang.srt.managers.scheduler",
                "--tp-rank",
                "3",
            ),
            "python3",
            ["python3", "-m", "sglang.srt.managers.scheduler", "--tp-rank", "3"],
        ),
        (("python3.11", "-B", "train.py", "--lr", "3e-4"), None, ["python3.11", "train.py", "--lr", "3e-4"]),
        (("/usr/bin/nsys", "profile", "-o", "/tmp/x"), None, ["nsys", "profile", "-o", "/tmp/x"]),
        (("sglang::scheduler_TP3", "", ""), "sglang::schedul", ["sglang::scheduler_TP3"]),  # a title it set
        (("nginx: worker process",), "nginx", ["nginx: worker process"]),  # a title with spaces
        (("/opt/app/bin/server",), "server", ["server"]),
        ((), "sglang::detokenizer", ["[sglang::detokenizer]"]),  # no command line (a zombie)
        ((), None, ["[?]"]),
        (("/usr/bin/env", "python3", "-u", "x.py"), None, ["env", "python3", "-u", "x.py"]),
    ],
)
def test_command_words(argv: tuple[str, ...], name: str | None, words: list[str]) -> None:
    assert command_words(argv, name) == words


def test_program_name_keeps_what_is_not_a_path() -> None:
    assert program_name("/usr/bin/python3") == "python3"
    assert program_name("python3") == "python3"
    assert program_name("/") == "/"
    assert program_name("[bold]x[/]") == "[bold]x[/]"  # hostile text stays text (made visible later)
