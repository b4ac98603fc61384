"""Build a fake shared library (``libnvidia-ml.so.1``, ``libcuda.so.1``) from the suite's C source, and write
the state file that drives it: one compiler invocation, warnings as errors, the failure said in full (a
missing compiler fails the run, never skips it); each state write atomic and seen by the library."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path


def library_cflags(lib_name: str) -> list[str]:
    """The flags every fake is built with, its soname ``lib_name``."""
    return ["-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared", "-Wl,-soname," + lib_name]


def build_library(
    what: str, source: Path, lib_name: str, out_dir: Path, omit: tuple[str, ...], groups: dict[str, str]
) -> Path:
    """Compile ``source`` into ``out_dir/lib_name`` with the ``groups`` named in ``omit`` left out (each a
    ``-D`` define hiding a set of symbols, as an older or foreign library lacks them).

    Raises:
        ValueError: a group in ``omit`` that ``groups`` does not know.
        RuntimeError: no C compiler, or the compilation failed.
    """
    unknown = sorted(set(omit) - set(groups))
    if unknown:
        raise ValueError(f"{what}: unknown symbol groups {unknown} (known: {sorted(groups)})")
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise RuntimeError(
            f"{what}: no C compiler found (need gcc or cc on PATH, or $CC) to build the fake {lib_name}"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / lib_name
    defines = [f"-D{groups[group]}" for group in sorted(set(omit))]
    cmd = [cc, *library_cflags(lib_name), *defines, "-o", str(target), str(source), "-lpthread"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{what}: running {cmd[0]} failed: {exc}") from exc
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what}: compiling {source.name} failed (exit {proc.returncode}):\n"
            f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
        )
    return target


_mtime_lock = threading.Lock()
_last_mtime_ns: dict[str, int] = {}


def write_state(path: Path, text: str, prefix: str) -> None:
    """Atomically replace ``path`` with ``text``, with a strictly later mtime than the previous write to it,
    so the library (which re-reads its state when inode, size or mtime change) notices even two writes of
    one size within one timestamp tick."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        key = str(path.resolve())
        with _mtime_lock:
            floor = _last_mtime_ns.get(key, 0)
            try:
                floor = max(floor, path.stat().st_mtime_ns)
            except FileNotFoundError:
                pass
            mtime = max(os.stat(tmp).st_mtime_ns, floor + 1000)
            os.utime(tmp, ns=(mtime, mtime))
            os.replace(tmp, path)
            _last_mtime_ns[key] = mtime
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
