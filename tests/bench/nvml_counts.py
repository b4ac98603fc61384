"""NVML calls counted in the library: the benchmark's build of the fake ``libnvidia-ml.so.1``.

The fake library is compiled with ``-finstrument-functions`` and linked with ``nvmlcount.c``, which counts
every call that comes from outside the library, per exported function, into a per-process file mapped
shared (``$FAKE_NVML_COUNT_DIR/<pid>``). A benchmark reads a live process's counts at the start and at the
end of a window; the difference is what the process asked NVML for in that window, whichever binding
(pynvml, nvitop's wrapper) made the calls.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

SLOTS = 512
NAME_LEN = 48
RECORD = struct.Struct(f"<QQ{NAME_LEN}s")
COUNTER_SOURCE = Path(__file__).with_name("nvmlcount.c")

PROCESS_LIST_MARK = "RunningProcesses"
"""The process-list queries: ``nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses[_v2|_v3]``."""


def build_counting_lib(out_dir: Path) -> Path:
    """Build the counting fake library into ``out_dir`` (rebuilt when a source is newer); the directory."""
    from tests.fakenvml import CFLAGS, LIB_NAME, SOURCE

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIB_NAME
    newest = max(SOURCE.stat().st_mtime, COUNTER_SOURCE.stat().st_mtime)
    if target.exists() and target.stat().st_mtime >= newest:
        return out_dir
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc or cc) for the counting fake NVML")
    tmp = out_dir / (LIB_NAME + ".tmp")
    cmd = [
        cc,
        *CFLAGS,
        "-finstrument-functions",
        "-o",
        str(tmp),
        str(SOURCE),
        str(COUNTER_SOURCE),
        "-lpthread",
        "-ldl",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603
    if done.returncode != 0:
        raise RuntimeError(f"building the counting fake NVML failed: {done.stderr.strip()[-400:]}")
    os.replace(tmp, target)
    return out_dir


def read_counts(count_dir: Path, pid: int) -> dict[str, int]:
    """Calls per NVML function made so far by ``pid`` ({} when it made none)."""
    try:
        data = (count_dir / str(pid)).read_bytes()
    except OSError:
        return {}
    counts: dict[str, int] = {}
    for offset in range(0, min(len(data), SLOTS * RECORD.size), RECORD.size):
        fn, calls, raw = RECORD.unpack_from(data, offset)
        if fn:
            name = raw.split(b"\0", 1)[0].decode("ascii", "replace") or "?"
            counts[name] = counts.get(name, 0) + calls
    return counts


def difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: calls - before.get(name, 0) for name, calls in after.items() if calls - before.get(name, 0)}


def process_list_calls(counts: dict[str, int]) -> int:
    return sum(calls for name, calls in counts.items() if PROCESS_LIST_MARK in name)
