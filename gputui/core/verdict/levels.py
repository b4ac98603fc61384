"""The verdict's vocabulary: its four levels, their exit codes and the one way each is said.

Every view (the TUI's clean-slate line, ``snapshot``, ``check``, the fleet view, the receipt) names a verdict
with ``headline`` and exits with ``exit_code``; none has words of its own for it. Later checks extend the
reasons behind a level (a GPU's fitness makes it NOT READY), never the levels themselves.

=========== ==== ==========================================================================================
level       exit meaning
=========== ==== ==========================================================================================
CLEAN       0    every GPU at its idle baseline, nothing left of a GPU job, no watched port listening,
                 no server failing
NOT CLEAN   1    memory held, a GPU process listed, a zombie or D-state process left, a killed job's port
                 still listening, a server UNHEALTHY or STALLED
NOT READY   1    a GPU needs a reset, a reboot or a drain before it can be used (outranks NOT CLEAN)
CANNOT TELL 2    the host or a GPU could not be judged: no data, an error, a figure that cannot be read
                 (outranks both)
=========== ==== ==========================================================================================
"""

from __future__ import annotations

from gputui.core.model import CANNOT_TELL, EXIT_CODES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.model import Verdict

CANNOT_TELL_WORDS = "cannot tell"
"""How a verdict that cannot tell starts its line, in every view ("cannot tell: GPU2 lost")."""
NO_DATA = "no data"
"""How a host without data is said ("no data since 03:12:07: connection refused"), never "nothing stuck"."""


def exit_code(verdict: Verdict | None) -> int:
    """The exit status of ``check`` (and every command that judges) for one verdict; None: cannot tell."""
    return EXIT_CODES[CANNOT_TELL if verdict is None else verdict.level]


def worst_exit_code(codes: list[int]) -> int:
    """The exit status of a run over several hosts: cannot tell (2) outranks not clean (1) outranks 0."""
    return 2 if 2 in codes else 1 if 1 in codes else 0


def baseline_text(verdict: Verdict) -> str:
    """ "3 MiB + 2" (one baseline) or "3/5121 MiB + 2" (calibrated, several): what "at baseline" means."""
    values = sorted(set(verdict.baseline_mib.values()))
    return f"{'/'.join(str(b) for b in values) or '3'} MiB + {verdict.tolerance_mib}"


def headline(verdict: Verdict | None) -> str:
    """The verdict's one line, the same in every view.

    "CLEAN: 8/8 GPUs at baseline (3 MiB + 2)", "NOT CLEAN: 7/8 GPUs at baseline (3 MiB + 2)",
    "NOT READY: 8/8 GPUs at baseline (3 MiB + 2)" (the reasons, listed under it, say which GPU needs what)
    and "cannot tell: GPU2 lost"; for a host without a verdict yet "cannot tell: no data".
    """
    if verdict is None:
        return f"{CANNOT_TELL_WORDS}: {NO_DATA}"
    level = verdict.level
    if level == CANNOT_TELL:
        return f"{CANNOT_TELL_WORDS}: {'; '.join(verdict.reasons) or NO_DATA}"
    at = f"{verdict.gpus_at_baseline}/{len(verdict.gpus)} GPUs at baseline ({baseline_text(verdict)})"
    return f"{level}: {at}"
