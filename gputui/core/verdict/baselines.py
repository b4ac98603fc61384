"""Idle baselines: how much memory a GPU holds when nothing runs on it, and how far above it is still clean.

``Baselines.tolerance_mib`` (default ``DEFAULT_TOLERANCE_MIB`` = 2 MiB) is how far above its idle baseline a
GPU may be and still count as clean. The idle figure is the driver's own bookkeeping and does not drift by
more than a MiB or two between samples or driver restarts, while the smallest thing that can really be left
behind, a CUDA context, takes well over 100 MiB. 2 MiB absorbs rounding and jitter without ever hiding a
leftover context. The "3 MiB" idle figure itself is ``DEFAULT_BASELINE_MIB``.
"""

from __future__ import annotations

from gputui.core.model import Gpu, Record, field

DEFAULT_BASELINE_MIB = 3
"""Idle memory of a GPU with no CUDA context: what ``nvidia-smi --query-gpu=memory.used`` shows when free."""
DEFAULT_TOLERANCE_MIB = 2
"""Allowed excess over the idle baseline for the clean-slate verdict (see the module docstring)."""


class Baselines(Record):
    """What a host is judged against: idle memory per GPU for the clean-slate verdict, and the Xids the site
    accepts.

    Attributes:
        default_mib: Baseline of a GPU that has no calibrated value, in MiB.
        tolerance_mib: Allowed excess over the baseline, in MiB.
        per_gpu_mib: GPU key (UUID, else "index:N") -> calibrated idle MiB.
        accepted_xids: Xids the site accepts (``accepted_xids`` in the config): shown, never blocking.
    """

    default_mib: int = DEFAULT_BASELINE_MIB
    tolerance_mib: int = DEFAULT_TOLERANCE_MIB
    per_gpu_mib: dict[str, int] = field(default_factory=dict)
    accepted_xids: frozenset[int] = frozenset()

    def for_gpu(self, gpu: Gpu) -> int:
        """The baseline in MiB for this GPU: its calibrated value, else the default."""
        value = self.per_gpu_mib.get(gpu.key)
        if value is None and gpu.uuid is None:
            value = self.per_gpu_mib.get(f"index:{gpu.index}")
        return self.default_mib if value is None else value
