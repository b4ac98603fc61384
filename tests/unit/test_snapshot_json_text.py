"""``snapshot --json``'s text: the same value as the document, safe on a terminal, one process a line."""

from __future__ import annotations

import json

from gputui.commands.snapshot import document_text


def _doc() -> dict[str, object]:
    procs = [
        {
            "pid": 7,
            "cmdline": ["python", "x\u202ey", "\x9b2J", "\x7f"],
            "name": "py\u200b",
            "gpu_memory_mib": {"0": 5},
        },
        {"pid": 8, "cmdline": [], "name": "\0processes 1\0", "live_threads": None},
    ]
    return {
        "hosts": [
            {"target": "a", "processes": procs, "gpus": [{"index": 0, "processes": [{"pid": 7}]}]},
            {"target": "b", "processes": [], "error": "down"},
            {"target": "c", "processes": None},
            {"target": "d", "processes": [{"pid": 9, "name": "last"}]},
        ]
    }


def test_the_text_is_the_document_and_each_process_is_one_line() -> None:
    doc = _doc()
    text = document_text(doc)
    assert json.loads(text) == doc
    lines = text.splitlines()
    assert sum(1 for line in lines if line.lstrip().startswith('{"pid": ')) == 3
    assert '"processes": []' in text


def test_what_the_terminal_would_act_on_is_escaped() -> None:
    text = document_text(_doc())
    for raw in ("\u202e", "\x9b", "\x7f", "\u200b", "\0"):
        assert raw not in text
    for escaped in ("\\u202e", "\\u009b", "\\u007f"):
        assert escaped in text
