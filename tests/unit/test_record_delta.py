"""A sample as the change from the one before: ``patch(old, diff(old, new)) == new`` exactly, lists matched by
what names their items, and a patch that does not fit refused."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from gputui.core.recording.delta import DEPTH_MAX, SAME, PatchError, diff, patch, same


def _exact(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and same(a, b)


def test_types_survive_a_round_trip() -> None:
    old = {"a": 1, "b": True, "c": 1.0, "d": None, "e": [1, 2]}
    new = {"a": True, "b": 1, "c": 1, "d": 0, "e": [1.0, 2]}
    assert _exact(patch(old, diff(old, new)), new)
    assert diff(new, new) is SAME
    assert not same(1, True)
    assert not same(1, 1.0)


def test_one_process_of_thousands_is_one_op_between_copies() -> None:
    procs = [
        {"pid": pid, "start_ticks": pid * 10, "cpu_pct": 1.0, "cmdline": ["w", str(pid)]}
        for pid in range(3000)
    ]
    changed = [dict(p) for p in procs]
    changed[1500]["cpu_pct"] = 99.5
    del changed[10]
    changed.append({"pid": 99999, "start_ticks": 1, "cpu_pct": 0.0, "cmdline": []})
    change = diff({"processes": procs}, {"processes": changed})
    ops = change["o"]["processes"]["l"]
    assert [op[0] for op in ops] == ["c", "c", "p", "c", "v"]
    assert len(json.dumps(change)) < 300
    assert _exact(patch({"processes": procs}, change), {"processes": changed})


def test_a_reused_pid_is_a_new_item_not_a_patch_of_the_old_one() -> None:
    old = [{"pid": 7, "start_ticks": 100, "name": "a"}]
    new = [{"pid": 7, "start_ticks": 200, "name": "b"}]
    ops = diff(old, new)["l"]
    assert ops == [["v", new[0]]]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.randint(-5, 5)
    if kind == 1:
        return rng.choice([True, False, None])
    if kind == 2:
        return rng.choice([0.5, 1.0, -2.25, 1e300])
    if kind in (3, 4):
        return rng.choice(["", "x", "\x1b[2J", "é", "[bold]"])
    if kind == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 6:
        return [
            {"pid": rng.randrange(6), "start_ticks": 1, "v": _random_value(rng, depth + 1)} for _ in range(3)
        ]
    return {rng.choice("abcd"): _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _mutate(rng: random.Random, value: Any, depth: int = 0) -> Any:
    if rng.random() < 0.3 or depth > 4:
        return _random_value(rng, depth)
    if isinstance(value, dict):
        out = dict(value)
        for key in list(out):
            if rng.random() < 0.3:
                del out[key]
            elif rng.random() < 0.5:
                out[key] = _mutate(rng, out[key], depth + 1)
        if rng.random() < 0.3:
            out[rng.choice("efg")] = _random_value(rng, depth + 1)
        return out
    if isinstance(value, list):
        out = [_mutate(rng, item, depth + 1) if rng.random() < 0.5 else item for item in value]
        rng.shuffle(out)
        return out[: rng.randrange(len(out) + 1)] + (
            [_random_value(rng, depth)] if rng.random() < 0.3 else []
        )
    return value


@pytest.mark.parametrize("seed", range(40))
def test_any_change_round_trips_exactly(seed: int) -> None:
    rng = random.Random(seed)
    old = _random_value(rng)
    for _ in range(20):
        new = _mutate(rng, old)
        change = diff(old, new)
        if change is SAME:
            assert _exact(old, new)
        else:
            json.dumps(change)  # a patch is JSON
            assert _exact(patch(old, json.loads(json.dumps(change))), new)
        old = new


@pytest.mark.parametrize(
    "bad",
    [
        None,
        {},
        {"q": 1},
        {"=": 1, "o": {}},
        {"o": []},
        {"o": {"a": {"l": [["c", 0, 5]]}}},
        {"o": {"a": {"l": [["c", -1, 1]]}}},
        {"o": {"a": {"l": [["p", 9, {"=": 1}]]}}},
        {"o": {"a": {"l": [["z"]]}}},
        {"o": {"a": {"l": [["c", True, 1]]}}},
        {"o": {"b": {"o": {}}}},
    ],
)
def test_a_patch_that_does_not_fit_is_refused(bad: Any) -> None:
    with pytest.raises(PatchError):
        patch({"a": [1, 2], "b": 3}, bad)


def test_a_patch_nested_deeper_than_any_sample_is_refused() -> None:
    deep: Any = {"=": 1}
    value: Any = 0
    for _ in range(DEPTH_MAX + 5):
        deep = {"o": {"k": deep}}
        value = {"k": value}
    with pytest.raises(PatchError):
        patch(value, deep)
