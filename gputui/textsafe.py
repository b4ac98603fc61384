"""Making machine-supplied strings safe to put on a terminal.

Process names, command lines, user names, host names and HTTP bodies come from machines we do not control.
Printed raw they can move the cursor, retitle the terminal, clear the screen or reverse the text that follows
(``\\x1b]0;t\\x07``, ``\\x1b[2J``, ``\\x9b``, U+202E). ``visible()`` turns every such character into a
readable escape so the string is shown literally, and optionally shortens it. It only makes text *visible*:
markup safety in the UI is separate (render as ``Text``, never as markup).
"""

from __future__ import annotations

from collections.abc import Iterable

ELLIPSIS = "…"

_BIDI_CONTROLS = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))
"""Embedding/override (U+202A–U+202E) and isolate (U+2066–U+2069) controls: they reorder what follows."""

_OTHER_INVISIBLE = frozenset((0x200E, 0x200F, 0x061C, 0x2028, 0x2029, 0xFEFF))
"""Direction marks, line/paragraph separators (some terminals break the line) and the BOM."""

_SHORT_ESCAPES = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape_for(code: int) -> str | None:
    """The visible form of one code point, or None when it is shown as itself."""
    if code < 0x20 or code == 0x7F or 0x80 <= code <= 0x9F:
        return _SHORT_ESCAPES.get(code, f"\\x{code:02x}")
    if code in _BIDI_CONTROLS or code in _OTHER_INVISIBLE:
        return f"\\u{code:04x}"
    if 0xD800 <= code <= 0xDFFF:
        # A lone surrogate (e.g. undecodable bytes under surrogateescape): not text, cannot even be encoded.
        return "\ufffd"
    return None


class _EscapeTable(dict[int, str]):
    """A ``str.translate`` table that computes (and caches) each code point's escape on first sight."""

    def __missing__(self, code: int) -> str:
        escaped = _escape_for(code)
        value = chr(code) if escaped is None else escaped
        self[code] = value
        return value


_TABLE = _EscapeTable()


def visible(text: str, max_len: int | None = None) -> str:
    """Return ``text`` with every terminal-active or invisible character replaced by a visible escape.

    C0 controls, DEL and C1 controls become ``\\xNN`` (tab, newline and carriage return become ``\\t``,
    ``\\n``, ``\\r``); bidirectional overrides/isolates and direction marks become ``\\uNNNN``; lone
    surrogates become U+FFFD. Everything else, backslashes included, is left as it is.

    Args:
        text: The untrusted string. Anything that is not a ``str`` is converted with ``str()`` first.
        max_len: Longest result in characters; a longer result is cut at a character or escape boundary and
            ends with "…". None: no limit. Values below 1 give "".

    Returns:
        A string that is safe to write to a terminal as plain text.
    """
    if not isinstance(text, str):
        text = str(text)
    if max_len is None:
        return text.translate(_TABLE)
    if max_len <= 0:
        return ""
    # Translate only as much as can be shown: a 100 KB argv shown in 40 columns costs 40 characters of work.
    head = text[: max_len + 1].translate(_TABLE)
    if len(head) <= max_len and len(text) <= max_len:
        return head
    pieces: list[str] = []
    used = 0
    budget = max_len - 1  # room left for the ellipsis
    for char in text:
        piece = _TABLE[ord(char)]
        if used + len(piece) > budget:
            break
        pieces.append(piece)
        used += len(piece)
    return "".join(pieces) + ELLIPSIS


def visible_cmdline(argv: Iterable[str], max_len: int | None = None) -> str:
    """A command line (argv list) as one visible line: arguments joined by spaces, then ``visible()``.

    Arguments are not shell-quoted: this is for reading, never for running.
    """
    return visible(" ".join(argv), max_len)
