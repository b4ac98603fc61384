"""What a script reads stays what it was when ``core/`` became concept packages: ``snapshot``/``check``
JSON and the exporter's exposition, on the simulated hosts at a frozen clock (``views_golden``), may only
gain keys and samples: a dict keys, a list items at its end (a finding added after the others), a human
sentence a clause after "; " (a server's reason naming its job's profiler). The file was written by the
code before the move (``tests/data/contract/``), and again only when the simulated hosts changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.contract.views_golden import views

BEFORE = Path(__file__).resolve().parents[1] / "data" / "contract" / "views_before_packages.json"


def _missing(before: Any, now: Any, where: str) -> list[str]:
    """Where ``now`` lost or changed something ``before`` had (a dict may gain keys)."""
    if isinstance(before, dict) and isinstance(now, dict):
        out = []
        for key, value in before.items():
            if key not in now:
                out.append(f"{where}.{key}: gone")
            else:
                out += _missing(value, now[key], f"{where}.{key}")
        return out
    if isinstance(before, list) and isinstance(now, list) and len(before) <= len(now):
        return [
            m
            for i, (b, n) in enumerate(zip(before, now[: len(before)], strict=True))
            for m in _missing(b, n, f"{where}[{i}]")
        ]
    if isinstance(before, str) and isinstance(now, str) and now.startswith(before + "; "):
        return []
    return [] if before == now else [f"{where}: {before!r} -> {now!r}"]


def test_json_and_exposition_only_gain() -> None:
    before = json.loads(BEFORE.read_text())
    now = json.loads(json.dumps(views()))
    assert sorted(now) == sorted(before)
    for key, kept in before.items():
        assert _missing(kept["json"], now[key]["json"], key) == []
        samples = {
            (name, json.dumps(labels, sort_keys=True)): value
            for name, labels, value in now[key]["exposition"]
        }
        lost = [
            row
            for row in kept["exposition"]
            if samples.get((row[0], json.dumps(row[1], sort_keys=True))) != row[2]
        ]
        assert lost == [], key
