"""A JSON value as what changed since the one before it: the deltas of a recording.

``diff(old, new)`` returns a patch that ``patch(old, that)`` turns back into ``new`` exactly (``True`` stays
``True`` and never becomes ``1``; ``1.0`` stays a float), or ``SAME`` when nothing changed. A patch is a JSON
object of one of three shapes:

* ``{"=": VALUE}``: the value replaced whole;
* ``{"o": {KEY: PATCH, ...}, "x": [KEY, ...]}``: an object with some members patched or added (``o``) and
  some removed (``x``);
* ``{"l": [OP, ...]}``: a list rebuilt from the old one: ``["c", I, N]`` copies N old items from index I,
  ``["p", I, PATCH]`` is old item I patched, ``["v", VALUE]`` a new item.

Items of a list are matched by what names them (a process by ``pid`` and ``start_ticks``, a GPU by
``index``, an endpoint by ``url``), so a process list of thousands where one process changed is one ``p`` op
between two runs of copies; lists of anything else are matched by position when their length stays, and
replaced whole otherwise.

``patch`` checks every step (a hostile file reaches it): a shape it does not know, an index out of range or
a patch nested deeper than ``DEPTH_MAX`` raise ``PatchError``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SAME: Any = object()
"""``diff``'s answer when nothing changed."""
DEPTH_MAX = 64
"""How deep a patch may nest: a sample is a few levels deep, a hostile file may be thousands."""
_IDENTITY_KEYS = (("pid", "start_ticks"), ("index",), ("url",), ("gpu",), ("kind", "pid"))
"""What names a list item, tried in order: the first whose keys every item of both lists has."""


class PatchError(ValueError):
    """A patch that does not fit the value it was written against."""


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values, type for type (``True`` is not ``1``, ``1`` is not ``1.0``)."""
    if a is b:
        return True  # the same list or dict again: a process list that was not read anew
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            if key not in b or not same(value, b[key]):
                return False
        return True
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def diff(old: Any, new: Any) -> Any:
    """The patch from ``old`` to ``new`` (``SAME`` when they are equal)."""
    if same(old, new):
        return SAME
    if isinstance(old, dict) and isinstance(new, dict):
        changed = {}
        for key, value in new.items():
            if key in old:
                part = diff(old[key], value)
                if part is not SAME:
                    changed[key] = part
            else:
                changed[key] = {"=": value}
        removed = [key for key in old if key not in new]
        if len(changed) + len(removed) >= len(new) > 1:
            return {"=": new}  # everything changed: the value itself is shorter
        out: dict[str, Any] = {"o": changed}
        if removed:
            out["x"] = removed
        return out
    if isinstance(old, list) and isinstance(new, list):
        ops = _list_ops(old, new)
        if ops is not None:
            return {"l": ops}
    return {"=": new}


def _identity(items: list[Any]) -> tuple[str, ...] | None:
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    for keys in _IDENTITY_KEYS:
        if all(all(key in item for key in keys) for item in items):
            return keys
    return None


def _list_ops(old: list[Any], new: list[Any]) -> list[Any] | None:
    keys = _identity(old + new)
    pairs: list[tuple[int | None, Any]]
    if keys is None:
        if len(old) != len(new):
            return None
        pairs = list(enumerate(new))
    else:
        where: dict[tuple[Any, ...], int] = {}
        for position, item in enumerate(old):
            name = tuple(_hashable(item[key]) for key in keys)
            if name in where:
                return None  # two items of one name: matched by nothing
            where[name] = position
        pairs = [(where.get(tuple(_hashable(item[key]) for key in keys)), item) for item in new]
    ops: list[Any] = []
    for index, item in pairs:
        if index is None:
            ops.append(["v", item])
            continue
        part = diff(old[index], item)
        if part is not SAME:
            ops.append(["p", index, part])
        elif ops and ops[-1][0] == "c" and ops[-1][1] + ops[-1][2] == index:
            ops[-1][2] += 1
        else:
            ops.append(["c", index, 1])
    return ops


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def patch(old: Any, change: Any, depth: int = 0) -> Any:
    """``old`` with ``change`` (a ``diff`` of it) applied; ``old`` itself is left as it is.

    Raises:
        PatchError: ``change`` is no patch, or not one of ``old``.
    """
    if depth > DEPTH_MAX:
        raise PatchError("a patch nested too deep")
    if not isinstance(change, dict) or len(change) not in (1, 2):
        raise PatchError("not a patch")
    if "=" in change and len(change) == 1:
        return change["="]
    if "o" in change and change.keys() <= {"o", "x"}:
        members, removed = change["o"], change.get("x", [])
        if not isinstance(old, dict) or not isinstance(members, dict) or not isinstance(removed, list):
            raise PatchError("an object patch of something else")
        out = {key: value for key, value in old.items() if key not in removed}
        for key, part in members.items():
            out[key] = patch(old.get(key), part, depth + 1)
        return out
    if "l" in change and len(change) == 1:
        if not isinstance(old, list) or not isinstance(change["l"], list):
            raise PatchError("a list patch of something else")
        return _rebuild(old, change["l"], depth)
    raise PatchError("not a patch")


def _rebuild(old: list[Any], ops: list[Any], depth: int) -> list[Any]:
    out: list[Any] = []
    for op in ops:
        if not isinstance(op, list) or not op:
            raise PatchError("a list op that is none")
        kind = op[0]
        if kind == "v" and len(op) == 2:
            out.append(op[1])
        elif kind == "c" and len(op) == 3 and _index(op[1], old) and isinstance(op[2], int):
            if op[2] < 1 or op[1] + op[2] > len(old):
                raise PatchError("a copy out of range")
            out.extend(old[op[1] : op[1] + op[2]])
        elif kind == "p" and len(op) == 3 and _index(op[1], old):
            out.append(patch(old[op[1]], op[2], depth + 1))
        else:
            raise PatchError("a list op that is none")
    return out


def _index(value: Any, items: list[Any]) -> bool:
    return type(value) is int and 0 <= value < len(items)
