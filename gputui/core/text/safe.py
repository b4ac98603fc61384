"""Making machine-supplied strings safe to put on a terminal: the client's face of the one text policy.

Process names, command lines, user names, host names and HTTP bodies come from machines we do not control.
Printed raw they can move the cursor, retitle the terminal, clear the screen or reverse the text that follows
(``\\x1b]0;t\\x07``, ``\\x1b[2J``, ``\\x9b``, U+202E), or hide text behind zero-width characters. The policy
itself (which code points, and how each is shown) lives in the collector (``gputui.agent.textpolicy``),
which applies the same rules to what it reports on remote hosts; this module is the client's way to it, plus
the JSON form. It only makes text *visible*: markup safety in the UI is separate (render as ``Text``, never
as markup).

Text is made visible once, where it enters the client: the readers of what a collector, an exporter, an HTTP
server or an ssh client sent (``from_dict``, the Prometheus parser, the link's errors) put ``SafeText`` into
the model, and every view shows the model's text as it is (cut to width by ``gputui.core.text.display.fit``).
``visible`` is called elsewhere only on text that does not come through the model: an OS error's message,
a word the user typed, a path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from gputui.agent.textpolicy import TEXT_ELLIPSIS, TEXT_INVISIBLE, visible_text

TYPE_CHECKING = False
if not TYPE_CHECKING:  # typing is a type checker's: at run time the text itself, the last definition

    def overload(function: object) -> object:
        return function

    SafeText = str
else:
    from typing import Any, NewType, overload

    SafeText = NewType("SafeText", str)
    """Text that ``visible`` made safe to write to a terminal: what the model's text fields hold."""

ELLIPSIS = TEXT_ELLIPSIS


@overload
def visible(text: object) -> SafeText: ...
@overload
def visible(text: object, max_len: int | None) -> str: ...


def visible(text: object, max_len: int | None = None) -> str:
    """Return ``text`` with every terminal-active or invisible character replaced by a visible escape.

    C0 controls, DEL and C1 controls become ``\\xNN`` (tab, newline and carriage return become ``\\t``,
    ``\\n``, ``\\r``); bidirectional controls, direction marks, zero-width and other invisible characters
    become ``\\uNNNN``; lone surrogates become escapes too. Everything else, backslashes included, is left as
    it is.

    Args:
        text: The untrusted string. Anything that is not a ``str`` is converted with ``str()`` first.
        max_len: Longest result in characters; a longer result is cut at a character or escape boundary and
            ends with "…". None: no limit. Values below 1 give "". New code cuts text to a width with
            ``gputui.core.text.display.fit`` instead, which takes the model's visible text as well.

    Returns:
        A string that is safe to write to a terminal as plain text. Visible text comes back unchanged, so
        making text visible twice does no harm.
    """
    # Nearly every string is printable already (every code point the policy escapes is not printable), and
    # str.isprintable is much cheaper than the translation.
    if max_len is None and isinstance(text, str) and text.isprintable():
        return SafeText(text)
    return SafeText(visible_text(text, max_len))


def visible_cmdline(argv: Iterable[str], max_len: int | None = None) -> str:
    """A command line (argv list) as one visible line: arguments joined by spaces, then ``visible()``.

    Arguments are not shell-quoted: this is for reading, never for running.
    """
    return visible(" ".join(argv), max_len)


def visible_tree(value: Any) -> Any:
    """``value`` (a collector's JSON answer) with every string in it made visible, dict keys included."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible_tree(key): visible_tree(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [visible_tree(item) for item in value]
    return value


def _json_escape(code: int) -> str:
    if code > 0xFFFF:  # JSON spells a character beyond the BMP as a UTF-16 surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


_JSON_TABLE: dict[int, str] = {}
"""What json.dumps(ensure_ascii=False) leaves raw but the policy escapes (it already escapes C0 itself); built
the first time a document holds text beyond ASCII."""


def json_visible(document: Any, **dumps_kwargs: Any) -> str:
    """``json.dumps(document)`` that is safe to print on a terminal, still valid JSON of the same value.

    JSON output is often piped straight to a terminal (``gputui snapshot --json | less -R``), so every
    character the text policy escapes is written as a ``\\uNNNN`` escape instead of raw: DEL, C1 controls
    (``\\u009b``), bidi and zero-width characters (``\\u202e``, ``\\u200b``). Other non-ASCII text stays
    readable. Such characters can only occur inside JSON strings, so escaping them everywhere is exact.
    """
    text = json.dumps(document, ensure_ascii=False, **dumps_kwargs)
    if text.isascii():  # the common case: of what the table escapes, ASCII holds DEL alone
        return text.replace("\x7f", "\\u007f") if "\x7f" in text else text
    if not _JSON_TABLE:
        escaped = [0x7F, *range(0x80, 0xA0), *range(0xD800, 0xE000), *TEXT_INVISIBLE]
        _JSON_TABLE.update({code: _json_escape(code) for code in escaped})
    return text.translate(_JSON_TABLE)
