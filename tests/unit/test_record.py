"""Records behave as the frozen dataclasses they replace: construction, immutability, equality, copies."""

from __future__ import annotations

import copy
import pickle
from typing import ClassVar

import pytest

from gputui.core.model import Record, field, fields, is_record, replace


class Sample(Record):
    LIMIT: ClassVar[int] = 10
    pid: int
    name: str = "worker"
    memory_mib: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pid > self.LIMIT:
            object.__setattr__(self, "name", "big")


class Node(Record, frozen=False):
    pid: int
    children: list[int] = field(default_factory=list)


def test_fields_defaults_and_factories_are_per_instance() -> None:
    one, two = Sample(1), Sample(pid=2, name="w")
    assert fields(Sample) == fields(one) == ("pid", "name", "memory_mib")
    assert (one.pid, one.name, one.memory_mib) == (1, "worker", {})
    assert two.name == "w"
    assert one.memory_mib is not two.memory_mib
    assert Sample.LIMIT == 10
    assert "LIMIT" not in fields(Sample)
    assert not hasattr(one, "__dict__")


def test_post_init_runs_and_missing_or_unknown_arguments_are_type_errors() -> None:
    assert Sample(11).name == "big"
    with pytest.raises(TypeError):
        Sample()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Sample(1, bogus=2)  # type: ignore[call-arg]


def test_a_frozen_record_refuses_assignment_and_deletion() -> None:
    sample = Sample(1)
    with pytest.raises(AttributeError, match="immutable"):
        sample.pid = 2  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del sample.name  # type: ignore[misc]
    with pytest.raises(AttributeError):
        sample.other = 1  # type: ignore[attr-defined]


def test_equality_and_hash_follow_the_fields_and_the_class() -> None:
    class Other(Record):
        pid: int
        name: str = "worker"

    assert Sample(1, "a") == Sample(1, "a") != Sample(1, "b")
    assert Sample(1) != Other(1)
    assert hash(Other(1)) == hash(Other(1))
    assert len({Other(1), Other(1), Other(2)}) == 2
    assert repr(Sample(1)) == "Sample(pid=1, name='worker', memory_mib={})"


def test_replace_builds_through_init_and_names_an_unknown_field() -> None:
    sample = Sample(1, memory_mib={0: 5})
    assert replace(sample, name="x") == Sample(1, "x", {0: 5})
    assert replace(sample, pid=20).name == "big"  # checks run again
    with pytest.raises(TypeError, match="no field 'size'"):
        replace(sample, size=3)


def test_pickle_and_copies_keep_the_class_and_the_values() -> None:
    sample = Sample(1, "x", {0: 5})
    again_pickled = pickle.loads(pickle.dumps(sample))  # noqa: S301 - our own bytes
    for again in (again_pickled, copy.copy(sample), copy.deepcopy(sample)):
        assert again == sample
        assert type(again) is Sample


def test_a_mutable_record_may_be_assigned_and_is_not_hashable() -> None:
    node = Node(1)
    node.children.append(2)
    node.pid = 3
    assert node == Node(3, [2])
    assert Node(1).children == []
    with pytest.raises(TypeError):
        hash(node)
    assert is_record(node)
    assert not is_record(Node)


def test_declaration_mistakes_are_refused_at_class_creation() -> None:
    with pytest.raises(TypeError, match="has no default"):

        class Order(Record):
            a: int = 0
            b: int

    with pytest.raises(ValueError, match="mutable default"):

        class Shared(Record):
            items: list[int] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="do not inherit"):

        class Wider(Sample):  # type: ignore[misc]
            extra: int = 0


def _calls(cls: type) -> list[object]:
    """What a set of good and bad constructions gives: the records, or the errors' types."""
    results: list[object] = []
    for args, kwargs in [
        ((1,), {}),
        ((), {"pid": 2, "name": "n"}),
        ((3, "m", {0: 1}), {}),
        ((11,), {}),
        ((), {}),
        ((1, "a", {}, "extra"), {}),
        ((1,), {"pid": 2}),
        ((1,), {"bogus": 2}),
    ]:
        try:
            record = cls(*args, **kwargs)
        except TypeError as exc:
            results.append(type(exc))
        else:
            results.append((record.pid, record.name, record.memory_mib))
    return results


def test_the_shared_init_and_the_compiled_one_take_the_same_arguments() -> None:
    """A class builds its first instances through the shared ``__init__`` and then compiles its own; both
    take the same arguments, fill the same defaults, run ``__post_init__`` and refuse the same mistakes."""
    from gputui.core.model import COMPILE_AFTER

    class Fresh(Record):
        pid: int
        name: str = "worker"
        memory_mib: dict[int, int] = field(default_factory=dict)

        def __post_init__(self) -> None:
            if self.pid > 10:
                object.__setattr__(self, "name", "big")

    shared_init = Fresh.__init__
    before = _calls(Fresh)
    assert Fresh.__init__ is shared_init
    assert before[:4] == [(1, "worker", {}), (2, "n", {}), (3, "m", {0: 1}), (11, "big", {})]
    assert before[4:] == [TypeError] * 4
    for pid in range(COMPILE_AFTER):
        Fresh(pid)
    assert Fresh.__init__ is not shared_init  # compiled once the class built enough
    assert _calls(Fresh) == before
    one, two = Fresh(1), Fresh(1)
    assert one.memory_mib is not two.memory_mib
