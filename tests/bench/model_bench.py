"""Section 11: the client model's value classes, three ways (records, frozen dataclasses, msgspec.Struct).

Every value class below ``ui`` is rebuilt as a twin of each kind, with the same fields and defaults, in a
fresh process per kind (``python -X importtime`` is not used: the figure is CPU time). Two questions:

* import: the CPU to load the mechanism (``dataclasses``, ``msgspec``; records are part of gputui) and to
  create every class of ``gputui.core`` and ``gputui.commands`` the way it would be declared;
* decoding a 64-host stream: 64 collector samples (one real sample of the fake 8-GPU host, the target
  renamed) read by the real readers (``json.loads`` and ``HostSnapshot.from_dict``, which also make every
  string visible); then every record instance those readers built is built again from its field values
  with each kind's class, which is the part of decoding that differs between the three.

msgspec goes into the peers virtualenv (it is not a project dependency). Its typed decoder
(``msgspec.json.decode(type=...)``) is not measured as a reader: it would put the collector's raw text into
the model, which holds visible text only (``core/text/safe.py``), so it would need a second pass over every
string anyway.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
HOSTS = 64
ROUNDS = 9
KINDS = ("record", "dataclass", "msgspec")
MSGSPEC = "msgspec==0.23.0"


def _record_classes() -> list[type]:
    """Every record class of the data layer (core and commands), imported the way a one-shot imports them."""
    import importlib
    import pkgutil

    from gputui.core.model import Record

    for package in ("gputui.core", "gputui.commands"):
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            importlib.import_module(info.name)
    seen: list[type] = []
    stack = list(Record.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls.__module__.startswith(("gputui.core", "gputui.commands")) and cls not in seen:
            seen.append(cls)
        stack.extend(cls.__subclasses__())
    return sorted(seen, key=lambda c: (c.__module__, c.__qualname__))


def _shapes() -> list[tuple[str, list[tuple[str, bool]]]]:
    """(class name, [(field, has a default)]) of every record class."""
    shapes = []
    for cls in _record_classes():
        shapes.append(
            (f"{cls.__module__}.{cls.__qualname__}", [(f, f in cls._defaults) for f in cls._fields])
        )
    return shapes


def _twins(kind: str, shapes: list[tuple[str, list[tuple[str, bool]]]]) -> dict[str, type]:
    """A class of ``kind`` per shape (fields annotated ``Any``; defaulted fields default to None)."""
    made: dict[str, type] = {}
    for name, fields in shapes:
        short = name.rsplit(".", 1)[1]
        annotations = {f: Any for f, _ in fields}
        namespace: dict[str, Any] = {"__annotations__": annotations, "__module__": __name__}
        namespace.update({f: None for f, has_default in fields if has_default})
        if kind == "record":
            from gputui.core.model import Record

            made[name] = type(short, (Record,), namespace)
        elif kind == "dataclass":
            import dataclasses

            made[name] = dataclasses.dataclass(frozen=True)(type(short, (), namespace))
        else:
            import msgspec

            made[name] = type(short, (msgspec.Struct,), namespace, frozen=True)
    return made


def _stream() -> list[bytes]:
    """64 collector samples of this (fake) host as JSON lines, one per target."""
    from gputui.agent.collector import Agent

    agent = Agent(target="local", read_only=True, discover_health=False)
    try:
        agent.hello()
        sample = agent.sample(force_processes=True)
    finally:
        agent.close()
    return [json.dumps(dict(sample, target=f"gpu-{i:02d}")).encode() for i in range(HOSTS)]


def _instances(value: Any, found: list[Any]) -> None:
    from gputui.core.model import fields, is_record

    if is_record(value):
        found.append(value)
        for name in fields(value):
            _instances(getattr(value, name), found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _instances(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _instances(item, found)


def work(kind: str, shapes_path: str, stream_path: str) -> dict[str, float]:
    """In a fresh process: the import figure and the decode figures for one kind (CPU ms)."""
    import time

    start = time.process_time()
    import typing  # noqa: F401 - every kind pays these; not part of the figure

    import gputui.agent.protocol  # noqa: F401

    typed = time.process_time()
    shapes = json.loads(Path(shapes_path).read_text())
    loaded = time.process_time()
    twins = _twins(kind, shapes)
    made = time.process_time()
    result = {"import_ms": (made - loaded) * 1000, "typing_ms": (typed - start) * 1000, "classes": len(twins)}

    from gputui.core.model import HostSnapshot

    lines = Path(stream_path).read_bytes().splitlines()
    readers, constructs = [], []
    for _ in range(ROUNDS):
        t0 = time.process_time()
        snapshots = [HostSnapshot.from_dict(json.loads(line)) for line in lines]
        t1 = time.process_time()
        readers.append((t1 - t0) * 1000)
        found: list[Any] = []
        _instances(snapshots, found)
        jobs = [(twins[f"{type(r).__module__}.{type(r).__qualname__}"], r._values()) for r in found]
        t2 = time.process_time()
        for cls, values in jobs:
            cls(*values)
        constructs.append((time.process_time() - t2) * 1000)
    readers.sort()
    constructs.sort()
    result.update(
        reader_ms=readers[len(readers) // 2],
        construct_ms=constructs[len(constructs) // 2],
        instances=len(jobs),
    )
    return result


def run(python: str, tmp: Path, env: dict[str, str]) -> dict[str, dict[str, float]]:
    """Each kind in its own process with ``python``; the shapes and the stream are written under ``tmp``."""
    sys.path.insert(0, str(REPO_ROOT))
    shapes_path, stream_path = tmp / "shapes.json", tmp / "stream.jsonl"
    shapes_path.write_text(json.dumps(_shapes()))
    made = subprocess.run(  # in a process of its own: the fake NVML is loaded from the environment at start
        [sys.executable, str(Path(__file__)), "--stream", str(stream_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    if made.returncode != 0:
        raise RuntimeError(f"the stream: {made.stderr.strip()[-300:]}")
    figures = {}
    for kind in KINDS:
        done = subprocess.run(
            [python, str(Path(__file__)), kind, str(shapes_path), str(stream_path)],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(env, PYTHONPATH=str(REPO_ROOT)),
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{kind}: {done.stderr.strip()[-300:]}")
        figures[kind] = json.loads(done.stdout)
    return figures


def bench(report: Any, sec: int, peer_python: str | None, env: dict[str, str]) -> None:
    """Section 11's rows: per kind, class creation and the construction part of a 64-host decode."""
    if peer_python is None:
        report.na(sec, "model classes, three kinds", "--no-peers (msgspec lives in the peers virtualenv)")
        return
    probe = subprocess.run([peer_python, "-c", "import msgspec"], capture_output=True, check=False)
    if probe.returncode != 0:
        subprocess.run([peer_python, "-m", "pip", "install", "-q", MSGSPEC], capture_output=True, check=False)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gputui-bench-model-") as tmp_name:
        try:
            figures = run(peer_python, Path(tmp_name), env)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            report.na(sec, "model classes, three kinds", str(exc)[:200])
            return
    mechanism = {"record": "gputui.core.model.record", "dataclass": "dataclasses", "msgspec": MSGSPEC}
    for kind, got in figures.items():
        report.add(
            sec,
            f"{kind}: import + {got['classes']:.0f} classes",
            got["import_ms"],
            "ms CPU",
            compare=mechanism[kind],
        )
    for kind, got in figures.items():
        report.add(
            sec,
            f"{kind}: build the {got['instances']:.0f} instances of a {HOSTS}-host stream",
            got["construct_ms"],
            "ms CPU",
            compare=f"the readers (json + from_dict + visible text, records): {got['reader_ms']:.1f} ms",
        )
    report.note(
        sec, "model classes: every value class below ui rebuilt as each kind's twin, a fresh process each"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stream"]:
        sys.path.insert(0, str(REPO_ROOT))
        Path(sys.argv[2]).write_bytes(b"\n".join(_stream()))
    elif len(sys.argv) == 4:  # a worker
        print(json.dumps(work(*sys.argv[1:])))
    else:  # by hand: model_bench.py PYTHON_WITH_MSGSPEC, run by the project's interpreter
        import tempfile

        with tempfile.TemporaryDirectory() as tmp_name:
            print(json.dumps(run(sys.argv[1], Path(tmp_name), dict(os.environ)), indent=1))
