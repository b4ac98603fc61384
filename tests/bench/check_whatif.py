"""``gputui check`` with one proposed change applied in memory, to measure it before anyone edits check.py.

The change: while waiting, a streamed sample "looks clean" when every GPU's memory is at its baseline plus
tolerance, judged on memory alone. Today ``_looks_clean`` runs the full verdict, which also requires that no
GPU process is listed, and a memory-only sample carries the process list of the last process sample (up to
``WAIT_PROCESS_INTERVAL_S`` = 0.5 s old): the killed holder stays listed until the next list, so the check
cannot confirm earlier. The confirming full sample (fresh process list) is unchanged, so a clean verdict still
needs a fresh list. Usage: ``python tests/bench/check_whatif.py CHECK-ARGS...``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gputui.analysis import Baselines  # noqa: E402
from gputui.cli import main  # noqa: E402
from gputui.commands import check  # noqa: E402
from gputui.model import HostSnapshot  # noqa: E402


def memory_looks_clean(snapshot: HostSnapshot, baselines: Baselines) -> bool:
    if snapshot.error is not None or not snapshot.gpus:
        return False
    return all(
        gpu.error is None
        and gpu.memory_used_mib is not None
        and gpu.memory_used_mib <= baselines.for_gpu(gpu) + baselines.tolerance_mib
        for gpu in snapshot.gpus
    )


check._looks_clean = memory_looks_clean  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(main(["check", *sys.argv[1:]]))
