"""Text safety: the one policy of the whole project for strings that came from a machine.

Every such string is hostile. Shown raw, C0/C1 controls move the cursor, retitle or clear the terminal
(``\\x1b]0;t\\x07``, ``\\x1b[2J``, ``\\x9b``), bidi controls reverse what follows (U+202E) and zero-width
characters hide text or make two different names look the same. The policy is a fixed list of code points,
not ``unicodedata`` categories, so that a collector on Python 3.8 and a client on 3.13 agree on every
character. The collector applies it to what it reports; the client's ``gputui.core.text.safe`` is its face of
the same functions.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TEXT_ELLIPSIS = "\u2026"
_TEXT_SHORT_ESCAPES = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
TEXT_INVISIBLE = frozenset(
    [0x00AD, 0x061C, 0x180E, 0xFEFF, 0xE0001]
    + list(range(0x200B, 0x2010))  # zero-width space/non-joiner/joiner, direction marks
    + list(range(0x2028, 0x202F))  # line/paragraph separators, bidi embeddings and overrides
    + list(range(0x2060, 0x2065))  # word joiner, invisible operators
    + list(range(0x2066, 0x2070))  # bidi isolates, deprecated format characters
    + list(range(0xFFF9, 0xFFFC))  # interlinear annotation
    + list(range(0x1BCA0, 0x1BCA4))  # shorthand format controls
    + list(range(0x1D173, 0x1D17B))  # musical symbol formatting
    + list(range(0xE0020, 0xE0080))  # tag characters (invisible text)
)
"""Code points that are invisible, reorder the text around them, or break the line, beyond C0/C1/DEL."""


def text_escape(code: int) -> str | None:
    """The visible form of one code point, or None when it is shown as itself.

    C0 controls, DEL and C1 controls become ``\\xNN`` (tab, newline and carriage return ``\\t``, ``\\n``,
    ``\\r``); the code points of ``TEXT_INVISIBLE`` become ``\\uNNNN`` / ``\\UNNNNNNNN``; a lone surrogate
    of an undecodable byte (surrogateescape, U+DC80..U+DCFF) becomes that byte's ``\\xNN``, any other lone
    surrogate ``\\uNNNN``. Backslashes are left alone: the escapes are for reading, not for decoding.
    """
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return _TEXT_SHORT_ESCAPES.get(code) or f"\\x{code:02x}"
    if code in TEXT_INVISIBLE:
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    if 0xDC80 <= code <= 0xDCFF:
        return "\\x%02x" % (code - 0xDC00)
    if 0xD800 <= code <= 0xDFFF:
        return f"\\u{code:04x}"
    return None


class _TextTable(dict):
    """A ``str.translate`` table that works out (and keeps) each code point's visible form on first sight."""

    def __missing__(self, code: int) -> str:
        escaped = text_escape(code)
        value = chr(code) if escaped is None else escaped
        self[code] = value
        return value


_TEXT_TABLE = _TextTable()


def visible_text(text: Any, max_chars: int | None = None) -> str:
    """``text`` with every terminal-active or invisible character replaced by a visible escape.

    Args:
        text: The untrusted value; bytes are decoded as UTF-8 with invalid bytes as ``\\xNN``, anything
            else that is not a str goes through ``str()``.
        max_chars: Longest result in characters; a longer one is cut at a character or escape boundary and
            ends with an ellipsis (an escape is never cut in half). None: no limit; below 1: "".

    Returns:
        Text that is safe to write to a terminal as plain text (and always encodable as UTF-8).
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "backslashreplace")
    elif not isinstance(text, str):
        text = str(text)
    if max_chars is None:
        return text.translate(_TEXT_TABLE)
    if max_chars <= 0:
        return ""
    # Translate only what can be shown: a 2 MB argv shown in 40 columns costs 40 characters of work.
    head = text[: max_chars + 1].translate(_TEXT_TABLE)
    if len(head) <= max_chars and len(text) <= max_chars:
        return head
    pieces: list[str] = []
    used = 0
    budget = max_chars - 1  # room for the ellipsis
    for char in text:
        piece = _TEXT_TABLE[ord(char)]
        if used + len(piece) > budget:
            break
        pieces.append(piece)
        used += len(piece)
    return "".join(pieces) + TEXT_ELLIPSIS
