"""Long work on a background thread, done in slices that let the UI thread have the interpreter.

CPython runs one thread at a time: a thread decoding and parsing a 500-host Prometheus answer (half a second
of CPU) takes turns with the UI thread every few milliseconds, so a key pressed meanwhile is answered at half
speed, and one long C call (``json.loads`` of 15 MB) holds the interpreter for its whole length. Work that
may run beside a UI calls ``pace()`` between slices of a few milliseconds; the thread that runs it names,
with ``paced_by``, what a pause does there (the fleet view's poller waits while keys are being pressed). On
any other thread, and in one-shot commands, ``pace()`` does nothing.

``loads`` is ``json.loads`` for large answers: the first levels of objects and arrays are walked here and
every element below them is decoded by the C decoder on its own, with a ``pace()`` between slices.

The cyclic garbage collector cannot be sliced: a full collection walks every object of the process, the UI's
included, in one go while it holds the interpreter. A large answer's containers, alive until it is parsed,
fill the young generations and set off such collections over and over while it is read; ``collector_paused``
keeps the collector out of that work, and ``freeze_settled`` takes what a long-running process keeps until
exit out of the full collections that still come.
"""

from __future__ import annotations

import gc
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_local = threading.local()

SLICE_ITEMS = 128
"""Elements decoded (or series parsed) between two pauses: well under a millisecond of work each."""


def pace() -> None:
    """A point where the work of this thread may pause (see the module docstring)."""
    hook = getattr(_local, "hook", None)
    if hook is not None:
        hook()


def paced_by(hook: Callable[[], None] | None) -> None:
    """Make ``pace()`` on this thread call ``hook`` (None: do nothing again)."""
    _local.hook = hook


_collector_lock = threading.Lock()
_collector_pauses = 0
_collector_was_on = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the block runs, then as it was.

    For work that makes many objects that form no reference cycles (a Prometheus answer and what is parsed
    from it): reference counting frees each of them when its last reference goes, so the collector has
    nothing to find there, and paused it cannot run full collections over the whole process meanwhile.
    There is one collector per process: the pause holds on every thread, pauses may overlap (on one thread
    or several) and the collector comes back when the last one ends, unless it was off before the first.
    Garbage that other threads make in cycles meanwhile waits for the next collection.
    """
    global _collector_pauses, _collector_was_on
    with _collector_lock:
        if _collector_pauses == 0:
            _collector_was_on = gc.isenabled()
            gc.disable()
        _collector_pauses += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            if _collector_pauses == 0 and _collector_was_on:
                gc.enable()


_frozen = False


def freeze_settled() -> None:
    """Collect once, then take every object the process has left out of all later collections (once per
    process; ``gc.freeze``).

    For a process that has built what it keeps until exit (modules, classes, an app and its screens): a full
    collection walks every tracked object while it holds the interpreter, and most of them are those, so
    without this each one costs the UI as much as all of them. Frozen objects are still freed by reference
    counting; only a cycle among them that becomes garbage later is never collected.
    """
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()
    gc.freeze()


# --- JSON in slices ----------------------------------------------------------------------------------

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
"""What JSON calls whitespace (``json.decoder.WHITESPACE``)."""
_HAND_LEVELS = 3
"""Levels of objects and arrays walked here: a Prometheus answer's ``{"data": {"result": [...]}}``."""


def loads(raw: bytes | str) -> Any:
    """``json.loads(raw)``, the same value and the same errors (``ValueError``), decoded in slices.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``) or not text (``UnicodeDecodeError``).
    """
    text = raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw), "surrogatepass")
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    value, end = _value(text, _skip(text, 0), _HAND_LEVELS)
    end = _skip(text, end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _skip(text: str, at: int) -> int:
    """Where the whitespace from ``at`` ends."""
    found = _SPACE.match(text, at)
    return at if found is None else found.end()


def _value(text: str, at: int, levels: int) -> tuple[Any, int]:
    if levels > 0:
        if text.startswith("{", at):
            return _object(text, at + 1, levels - 1)
        if text.startswith("[", at):
            return _array(text, at + 1, levels - 1)
    return _DECODER.raw_decode(text, at)


def _object(text: str, at: int, levels: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    at = _skip(text, at)
    if text.startswith("}", at):
        return out, at + 1
    while True:
        if not text.startswith('"', at):
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
        key, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if not text.startswith(":", at):
            raise json.JSONDecodeError("Expecting ':' delimiter", text, at)
        value, at = _value(text, _skip(text, at + 1), levels)
        out[key] = value
        at = _skip(text, at)
        if text.startswith("}", at):
            return out, at + 1
        if not text.startswith(",", at):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
        at = _skip(text, at + 1)


def _array(text: str, at: int, levels: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    at = _skip(text, at)
    if text.startswith("]", at):
        return out, at + 1
    if levels == 0:
        at = _object_runs(text, at, out)
    while True:
        value, at = _value(text, at, levels)
        out.append(value)
        if len(out) % SLICE_ITEMS == 0:
            pace()
        at = _skip(text, at)
        if text.startswith("]", at):
            return out, at + 1
        if not text.startswith(",", at):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
        at = _skip(text, at + 1)


_BETWEEN_OBJECTS = "},{"


def _object_runs(text: str, at: int, out: list[Any]) -> int:
    """Decode the array's elements from ``at`` in runs of ``SLICE_ITEMS``, one C call per run, appending them
    to ``out``; return where the elements not decoded yet begin.

    A run ends where the text reads ``},{``, which between two objects of a compact array is the boundary.
    The same text can stand inside an element (in a string, or between nested objects): a run cut there is
    not a list of whole values, so it does not decode, and the rest is left to the decoding of one element
    at a time. A run that decodes is exactly those elements: the grammar reads the same characters the same
    way wherever they stand. Runs share the key strings of their objects, as one ``json.loads`` does.
    """
    while True:
        end = at
        for _ in range(SLICE_ITEMS):
            end = text.find(_BETWEEN_OBJECTS, end + 1)
            if end < 0:
                return at
        try:
            run = _DECODER.decode("[" + text[at : end + 1] + "]")
        except ValueError:
            return at
        out.extend(run)
        at = end + 2
        pace()
