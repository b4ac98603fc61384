"""Records: the value classes of the data layer, declared like frozen dataclasses, built without their cost.

A one-shot command imports a few dozen model classes before it reads a single GPU, and ``dataclasses``
compiles five or six methods for each of them at import (and pulls in ``inspect``). A ``Record`` is declared
the same way, annotated fields with defaults and ``field(default_factory=...)``, and type checkers read it as
a frozen dataclass (``dataclass_transform``). At class creation the metaclass reads the annotations and gives
the class ``__slots__``. Its first ``COMPILE_AFTER`` instances are built by one shared ``__init__`` that reads
the fields; then the class compiles an ``__init__`` of its own, so a process pays compiling for the classes
it builds many of, not for every class it imports or builds once. Equality, hashing, ``repr``, pickling
and ``replace`` are shared by every record.
(``msgspec.Struct`` builds instances faster still, but importing it costs a one-shot more than all of its
records together: ``tests/bench/model_bench.py``.)

``class Node(Record, frozen=False)`` makes a record whose fields may be assigned (and which is not hashable,
as with dataclasses). ``__post_init__``, where a class defines one, runs at the end of ``__init__``.
Records do not inherit from one another: a shape is declared once, whole.

Below ``ui`` the project uses records, never ``dataclasses`` (``tests/unit/test_layout.py`` holds that);
Textual's own widgets are dataclass-based, so the UI layer may use either.
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeVar

    from typing_extensions import dataclass_transform

    R = TypeVar("R", bound="Record")
else:

    def dataclass_transform(**_kwargs: object) -> Callable[[type], type]:
        return lambda cls: cls


__all__ = ["Record", "field", "fields", "is_record", "replace"]

_set = object.__setattr__


class _Factory:
    """A field's default made fresh for every instance (a list, a dict)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], Any]) -> Any:
    """A field whose default is ``default_factory()``, called once per instance."""
    return _Factory(default_factory)


def _is_classvar(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return isinstance(text, str) and text.replace("typing.", "").startswith("ClassVar")


def _compile_init(name: str, names: tuple[str, ...], defaults: dict[str, Any], post_init: bool) -> Any:
    """The class's ``__init__``: one positional-or-keyword parameter per field, in declared order."""
    scope: dict[str, Any] = {"_set": _set}
    params, body = [], []
    for field_name in names:
        default = defaults.get(field_name, _compile_init)
        if default is _compile_init:
            params.append(field_name)
        elif isinstance(default, _Factory):
            scope[f"_f_{field_name}"] = default.make
            params.append(f"{field_name}=_FACTORY")
            body.append(f"    if {field_name} is _FACTORY: {field_name} = _f_{field_name}()")
        else:
            scope[f"_d_{field_name}"] = default
            params.append(f"{field_name}=_d_{field_name}")
        body.append(f"    _set(self, {field_name!r}, {field_name})")
    scope["_FACTORY"] = _Factory
    if post_init:
        body.append("    self.__post_init__()")
    source = f"def __init__({', '.join(['self', *params])}):\n" + "\n".join(body or ["    pass"])
    exec(compile(source, f"<record {name}>", "exec"), scope)  # noqa: S102 - source built from identifiers
    return scope["__init__"]


COMPILE_AFTER = 32
"""Instances a record class builds through the shared ``__init__`` before it compiles one of its own: a
one-shot command builds a handful of most of its classes, where compiling costs more than it saves, and
thousands of a few (processes), where it pays."""

_built: dict[type, int] = {}
"""Record class -> instances built so far through the shared ``__init__``."""


def _shared_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """Every record class's ``__init__`` until it has built ``COMPILE_AFTER`` instances: it reads the class's
    fields and defaults and takes the same arguments, with the same errors, as the compiled one that then
    replaces it."""
    cls = type(self)
    count = _built.get(cls, 0)
    if count >= COMPILE_AFTER:
        init = _compile_init(cls.__name__, cls._fields, cls._defaults, hasattr(cls, "__post_init__"))
        type.__setattr__(cls, "__init__", init)
        init(self, *args, **kwargs)
        return
    _built[cls] = count + 1
    names = cls._fields
    given = len(args)
    if given > len(names):
        raise TypeError(f"{cls.__qualname__}() takes {len(names)} arguments but {given} were given")
    defaults = cls._defaults
    for position, name in enumerate(names):
        if position < given:
            if name in kwargs:
                raise TypeError(f"{cls.__qualname__}() got multiple values for argument {name!r}")
            value = args[position]
        elif name in kwargs:
            value = kwargs.pop(name)
        elif name in defaults:
            value = defaults[name]
            if value.__class__ is _Factory:
                value = value.make()
        else:
            raise TypeError(f"{cls.__qualname__}() missing required argument: {name!r}")
        _set(self, name, value)
    if kwargs:
        raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if hasattr(cls, "__post_init__"):
        self.__post_init__()


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class RecordMeta(type):
    """Turns a class body of annotated fields into a slotted record (see the module's docstring)."""

    def __new__(
        mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], frozen: bool = True
    ) -> RecordMeta:
        if any(getattr(base, "_fields", ()) for base in bases):
            raise TypeError(f"record {name}: records do not inherit fields; declare the shape whole")
        annotations = namespace.get("__annotations__", {})
        names = tuple(n for n, a in annotations.items() if not _is_classvar(a))
        defaults: dict[str, Any] = {}
        for field_name in names:
            if field_name in namespace:
                defaults[field_name] = namespace.pop(field_name)
            elif defaults:
                raise TypeError(f"record {name}: field {field_name} has no default but follows one that has")
            value = defaults.get(field_name)
            if isinstance(value, (list, dict, set)):
                raise ValueError(
                    f"record {name}: {field_name} has a mutable default; use field(default_factory=...)"
                )
        namespace["__slots__"] = names
        namespace["_fields"] = names
        namespace["_defaults"] = defaults
        namespace["__match_args__"] = names
        if not frozen:
            namespace["__setattr__"] = object.__setattr__
            namespace["__delattr__"] = object.__delattr__
            namespace["__hash__"] = None
        if "__init__" not in namespace:
            namespace["__init__"] = _shared_init
        return super().__new__(mcls, name, bases, namespace)


class Record(metaclass=RecordMeta):
    """The base of every record: shared equality, hashing, ``repr`` and pickling over the fields."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    """Field name -> its default (a ``field(default_factory=...)`` marker for a fresh one)."""
    JSON_KEYS: ClassVar[dict[str, str] | None] = None
    """Field name -> its key in the record's JSON form, where the two differ (a field renamed inside the code
    keeps the key scripts read); ``wire.plain`` reads it."""

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {self.__class__.__qualname__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {self.__class__.__qualname__} is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.__class__, self._values()))


def _rebuild(cls: type[Record], values: tuple[Any, ...]) -> Record:
    """A record from its field values as they were, without running ``__post_init__`` again."""
    record = object.__new__(cls)
    for field_name, value in zip(cls._fields, values, strict=True):
        _set(record, field_name, value)
    return record


def replace(record: R, **changes: Any) -> R:
    """A copy of ``record`` with ``changes`` applied, built through its ``__init__`` (so checks run)."""
    values = {n: getattr(record, n) for n in record._fields}
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"{record.__class__.__qualname__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return record.__class__(**values)


def fields(record: Record | type[Record]) -> tuple[str, ...]:
    """The field names of a record or record class, in declared order."""
    return record._fields


def is_record(value: object) -> bool:
    """Whether ``value`` is a record instance (not a record class)."""
    return isinstance(value, Record)
