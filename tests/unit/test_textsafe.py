"""visible(): terminal-active characters made visible, printable text untouched, bounded length."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputui.textsafe import ELLIPSIS, visible, visible_cmdline

BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]


def _is_dangerous(char: str) -> bool:
    code = ord(char)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F
        or 0x202A <= code <= 0x202E
        or 0x2066 <= code <= 0x2069
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
        ("bad\udcffbyte", "bad\ufffdbyte"),
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


@given(st.lists(st.sampled_from(["\x1b", "\x9b", "\x07", "\x00", "\x7f", *BIDI]), min_size=1))
def test_visible_every_dangerous_character_becomes_an_escape(chars: list[str]) -> None:
    shown = visible("".join(chars))
    assert shown.count("\\") == len(chars)
    assert all(unicodedata.category(c) != "Cc" for c in shown)
