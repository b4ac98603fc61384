"""Whose job a process is, on the client: the owner a collector reports, its one-word label, and the filter.

The collector works the owner out (``gputui.agent.proc.owners``); this module reads it off the wire, names it
in one way for every view (``Owner.label``: ``slurm:4242.0``, ``pod:default/web-0``, ``container:trainer``,
``unit:cron.service``, ``user:alice``) and matches the ``/`` filter's ``KIND:TEXT`` words and ``gputui kill
--owner KIND:ID`` against it. Imports nothing outside the standard library and the collector's names.
"""

from __future__ import annotations

from gputui.agent.proc.owners import (
    OWNER_CONTAINER,
    OWNER_KINDS,
    OWNER_POD,
    OWNER_SLURM,
    OWNER_UNIT,
    OWNER_USER,
)
from gputui.core.model.record import Record
from gputui.core.text import SafeText, visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OWNER_DETAIL_KEYS = ("job", "step", "source", "namespace", "container", "container_name", "runtime", "uid")
"""The owner fields kept besides kind, id and name (``gputui.agent.proc.owners.owner_of``)."""
OWNER_TEXT_MAX_CHARS = 253
SHORT_ID_CHARS = 12
"""Container ids are shown by their first 12 hex digits, as ``docker ps`` shows them."""


def _text(value: Any) -> SafeText | None:
    if value is None or isinstance(value, (dict, list, bool)):
        return None
    text = str(value)[:OWNER_TEXT_MAX_CHARS]
    return visible(text) if text else None


class Owner(Record):
    """The owner of a process: its most specific job (``kind`` from ``OWNER_KINDS``).

    Attributes:
        kind: slurm, pod, container, unit or user.
        id: The job's identity within its kind: the Slurm job id (``4242``, or ``4242.0`` with a step), the
            pod's UID, the container id, the unit's name, the user's name. None when it could not be told.
        name: A name for people where one is known (job name, pod name, container name, user name).
        details: The other fields (``OWNER_DETAIL_KEYS``) as (key, text) pairs.
    """

    kind: str
    id: SafeText | None = None
    name: SafeText | None = None
    details: tuple[tuple[str, SafeText], ...] = ()

    def detail(self, key: str) -> str | None:
        for name, value in self.details:
            if name == key:
                return value
        return None

    @property
    def key(self) -> tuple[str, str | None]:
        """What tells two owners apart."""
        return (self.kind, self.id)

    @property
    def label(self) -> str:
        """The owner in one word, the way every view and the filter say it (untrusted text: made safe where
        shown)."""
        return f"{self.kind}:{self.short}"

    @property
    def short(self) -> str:
        """The part after ``kind:`` in ``label``."""
        if self.kind == OWNER_POD:
            namespace = self.detail("namespace")
            if self.name:
                return f"{namespace}/{self.name}" if namespace else self.name
            return (self.id or "?")[:SHORT_ID_CHARS]
        if self.kind == OWNER_CONTAINER:
            return self.name or (self.id or "?")[:SHORT_ID_CHARS]
        return self.id or self.name or "?"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "id": self.id, "name": self.name}
        for key, value in self.details:
            data[key] = int(value) if key == "uid" and value.isdigit() else value
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Owner | None:
        """The owner of a process entry; None when the entry has none (or not a valid one).

        A job's members share one owner: an entry whose fields are the same plain texts and numbers as one
        read before is that same ``Owner`` (``_OWNERS_READ``), not read again."""
        if not isinstance(data, dict) or data.get("kind") not in OWNER_KINDS:
            return None
        key = tuple(data.get(name) for name in _OWNER_WIRE_KEYS)
        # Only str, int and None are keys: equal values of those classes read to equal owners, where
        # 1 == 1.0 == True would not (``_text`` words each differently).
        if all(value is None or value.__class__ is str or value.__class__ is int for value in key):
            known = _OWNERS_READ.get(key)
            if known is None:
                known = cls._read(data)
                if len(_OWNERS_READ) >= OWNERS_READ_KEPT:
                    _OWNERS_READ.clear()
                _OWNERS_READ[key] = known
            return known
        return cls._read(data)

    @classmethod
    def _read(cls, data: dict[str, Any]) -> Owner:
        details = tuple(
            (key, text) for key in OWNER_DETAIL_KEYS for text in (_text(data.get(key)),) if text is not None
        )
        kind = str(data["kind"])  # one of OWNER_KINDS
        return cls(kind=kind, id=_text(data.get("id")), name=_text(data.get("name")), details=details)

    def words(self) -> tuple[str, ...]:
        """What a ``KIND:TEXT`` filter or ``--owner`` may name this owner by (lower case)."""
        found = [self.id, self.name, self.short]
        if self.kind == OWNER_SLURM:
            found.append(self.detail("job"))
        if self.kind == OWNER_POD:
            found += [self.detail("namespace"), self.detail("container"), self.detail("container_name")]
        if self.kind == OWNER_UNIT and self.id:
            found.append(self.id.rsplit(".", 1)[0])
        if self.kind == OWNER_USER:
            found.append(self.detail("uid"))
        return tuple(word.lower() for word in found if word)


_OWNER_WIRE_KEYS = ("kind", "id", "name", *OWNER_DETAIL_KEYS)
OWNERS_READ_KEPT = 256
"""Distinct owner entries kept read (``Owner.from_dict``): a host runs a few dozen jobs at once."""
_OWNERS_READ: dict[tuple[Any, ...], Owner] = {}


OWNER_FILTER_KINDS = OWNER_KINDS
"""The words before ``:`` that make a filter word an owner filter."""


def split_owner_word(word: str) -> tuple[str, str] | None:
    """``("slurm", "4242")`` for the filter word ``slurm:4242``; None for a word that names no owner kind."""
    kind, sep, text = word.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in OWNER_FILTER_KINDS:
        return None
    return kind, text.strip().lower()


def owner_matches(owner: Owner | None, kind: str, text: str) -> bool:
    """Whether ``owner`` is of ``kind`` and ``text`` names it.

    An id or name matches whole, a container id or pod UID also by a prefix of at least 4 characters (as
    ``docker`` takes them), a Slurm job without a step every step of it (``slurm:4242`` takes ``4242.0``
    and ``4242.batch``); an empty text matches every owner of the kind.
    """
    if owner is None or owner.kind != kind:
        return False
    if not text:
        return True
    words = owner.words()
    if text in words:
        return True
    if kind in (OWNER_CONTAINER, OWNER_POD) and len(text) >= 4:
        ids = [owner.id or "", owner.detail("container") or ""]
        return any(i.lower().startswith(text) for i in ids if i)
    return False


def parse_owner_option(value: str) -> tuple[str, str] | None:
    """``--owner KIND:ID`` as (kind, text); ("all", "") for ``all``; raises ValueError with one line."""
    word = value.strip()
    if word.lower() == "all":
        return ("all", "")
    parsed = split_owner_word(word)
    if parsed is None or not parsed[1]:
        kinds = ", ".join(OWNER_KINDS)
        raise ValueError(f"--owner {word[:60]!r}: use KIND:ID with KIND one of {kinds}, or all")
    return parsed
