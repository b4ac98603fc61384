"""The one text policy: terminal-active and invisible characters made visible, printable text untouched,
bounded length; the same function for the client, the collector and JSON output."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.agent import textpolicy
from gputui.core.text import ELLIPSIS, json_visible, visible, visible_cmdline

BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]


def _is_dangerous(char: str) -> bool:
    code = ord(char)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F
        or 0x202A <= code <= 0x202E
        or 0x2066 <= code <= 0x2069
        or 0x200B <= code <= 0x200F
        or code in (0x2060, 0xFEFF, 0x2028, 0x2029)
        or 0xD800 <= code <= 0xDFFF
    )


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;t\x07", "\\x1b]0;t\\x07"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\x9bb", "a\\x9bb"),
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),
        ("x\u2066y\u2069", "x\\u2066y\\u2069"),
        ("del\x7f", "del\\x7f"),
        ("nul\x00", "nul\\x00"),
        ("tab\tnl\ncr\r", "tab\\tnl\\ncr\\r"),
        ("[@click=app.quit]x[/]", "[@click=app.quit]x[/]"),
        ("héllo wörld 日本", "héllo wörld 日本"),
        # An undecodable byte (surrogateescape) shows as that byte, like backslashreplace does.
        ("bad\udcffbyte", "bad\\xffbyte"),
        ("lone\ud800", "lone\\ud800"),
        ("zero\u200bwidth\u200c\u200d\u2060", "zero\\u200bwidth\\u200c\\u200d\\u2060"),
        ("bom\ufeff", "bom\\ufeff"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("", ""),
    ],
)
def test_visible_escapes_terminal_active_characters(raw: str, shown: str) -> None:
    assert visible(raw) == shown


def test_visible_truncates_with_ellipsis_at_escape_boundary() -> None:
    assert visible("abcdef", 4) == "abc" + ELLIPSIS
    assert visible("abcd", 4) == "abcd"
    # "\x1b" is 4 characters once visible: it does not fit in the 2 left before the ellipsis, so it is dropped
    # whole rather than cut in half.
    assert visible("ab\x1bcdef", 4) == "ab" + ELLIPSIS
    assert visible("abc", 0) == ""
    assert visible("abc", 1) == ELLIPSIS


def test_visible_bounds_huge_argv() -> None:
    argv = ["python", "-c", "x" * 100_000, "\x1b[2J"]
    shown = visible_cmdline(argv, 80)
    assert len(shown) == 80
    assert shown.startswith("python -c xxx")
    assert shown.endswith(ELLIPSIS)
    assert "\x1b" not in visible_cmdline(argv)


def test_visible_accepts_non_strings() -> None:
    assert visible(4242) == "4242"  # type: ignore[arg-type]


@given(st.text())
def test_visible_output_has_nothing_terminal_active(text: str) -> None:
    shown = visible(text)
    assert not any(_is_dangerous(c) for c in shown)
    # The result must always be encodable (no lone surrogates survive).
    shown.encode("utf-8")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Cf", "Zl", "Zp"))))
def test_visible_leaves_printable_text_alone(text: str) -> None:
    assert visible(text) == text


@given(st.text(), st.integers(min_value=0, max_value=60))
def test_visible_respects_max_len_and_is_a_prefix(text: str, max_len: int) -> None:
    full = visible(text)
    cut = visible(text, max_len)
    assert len(cut) <= max_len
    if len(full) <= max_len:
        assert cut == full
    elif max_len == 0:
        assert cut == ""
    else:
        assert cut.endswith(ELLIPSIS)
        assert full.startswith(cut[: -len(ELLIPSIS)])


@given(st.lists(st.sampled_from(["\x1b", "\x9b", "\x07", "\x00", "\x7f", *BIDI, *ZERO_WIDTH]), min_size=1))
def test_visible_every_dangerous_character_becomes_an_escape(chars: list[str]) -> None:
    shown = visible("".join(chars))
    assert shown.count("\\") == len(chars)
    assert all(unicodedata.category(c) != "Cc" for c in shown)


def test_one_policy_for_client_and_collector() -> None:
    """The collector (shipped to remote hosts as it is) and the client show every string the same way."""
    hostile = "a\x1b[2J\x9b\u202e\u200b\u2060\x7f\udcfe" + "x" * 50
    assert visible(hostile) == textpolicy.visible_text(hostile)
    assert visible(hostile, 20) == textpolicy.visible_text(hostile, 20)
    assert textpolicy.visible_text(b"bytes \xff\x1b") == "bytes \\xff\\x1b"


def test_json_output_escapes_what_the_policy_escapes_and_stays_valid() -> None:
    value = {"cmdline": ["\x9b2J", "evil\u202etxt", "zero\u200bwidth", "del\x7f", "tag\U000e0041", "héllo"]}
    text = json_visible(value, indent=1)
    assert json.loads(text) == value
    for raw in ("\x9b", "\u202e", "\u200b", "\x7f", "\U000e0041"):
        assert raw not in text
    assert "\\u009b" in text
    assert "\\u202e" in text
    assert "\\udb40\\udc41" in text
    assert "héllo" in text  # other text stays readable


@given(st.text())
def test_json_output_never_carries_a_character_the_policy_escapes(text: str) -> None:
    out = json_visible({"k": text})
    assert json.loads(out) == {"k": text}
    assert not any(_is_dangerous(c) for c in out)
