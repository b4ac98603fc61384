"""What the analysis says of a host: its findings and its clean-slate verdict, per GPU and as a whole, with
the verdict's four levels and their exit codes (``gputui.core.verdict.headline`` says each)."""

from __future__ import annotations

from gputui.core.model.record import Record, field
from gputui.core.model.wire import opt_float, opt_int, plain, safe, safe_list
from gputui.core.text import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


CLEAN = "CLEAN"
NOT_CLEAN = "NOT CLEAN"
NOT_READY = "NOT READY"
CANNOT_TELL = "CANNOT TELL"
LEVELS = (CLEAN, NOT_CLEAN, NOT_READY, CANNOT_TELL)
"""Least severe first: a headline names the most severe level that applies."""
EXIT_CODES = {CLEAN: 0, NOT_CLEAN: 1, NOT_READY: 1, CANNOT_TELL: 2}


def level_of(clean: bool, known: bool, not_ready: bool) -> str:
    """The level of a verdict from its three facts (the most severe that applies)."""
    if not known:
        return CANNOT_TELL
    if not_ready:
        return NOT_READY
    return CLEAN if clean else NOT_CLEAN


class Finding(Record):
    """Something stuck, dead or unaccounted for.

    Attributes:
        kind: One of ``gputui.core.analysis.FINDING_KINDS``: zombie, defunct_leader, orphan, uninterruptible,
            ghost_memory, invisible_pid, survivor (a process that escaped a killed job and still holds a GPU).
        target: The host target the finding belongs to.
        detail: One human line.
        action: The suggested action, one human line.
        action_pid: The pid the suggested action applies to (a zombie's parent), if any.
        since: Epoch seconds (the host's clock) at which the state the finding is about began, as far as the
            collector saw it; None: not known. The sentence carries no age: every view renders it from this
            (``display.age_since``), so a ticking age is one cell, not a new finding.
    """

    kind: str
    target: str
    detail: str
    action: str = ""
    pid: int | None = None
    gpu_index: int | None = None
    action_pid: int | None = None
    since: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            kind=safe(data["kind"]),
            target=safe(data.get("target")),
            detail=safe(data.get("detail")),
            action=safe(data.get("action")),
            pid=opt_int(data.get("pid")),
            gpu_index=opt_int(data.get("gpu_index")),
            action_pid=opt_int(data.get("action_pid")),
            since=opt_float(data.get("since")),
        )


class GpuVerdict(Record):
    """One GPU's part of the clean-slate verdict."""

    index: int
    used_mib: int | None
    baseline_mib: int
    clean: bool
    reasons: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuVerdict:
        return cls(
            index=int(data["index"]),
            used_mib=opt_int(data.get("used_mib")),
            baseline_mib=int(data.get("baseline_mib") or 0),
            clean=bool(data.get("clean")),
            reasons=safe_list(data.get("reasons")),
        )


class Verdict(Record):
    """Is every GPU back at its idle baseline?

    Attributes:
        clean: True only when every GPU is at or below its baseline (plus tolerance), no GPU process is listed
            and no zombie/D-state process remains from a GPU process tree.
        reasons: Human lines saying why not, most important first.
        baseline_mib: GPU key (UUID, else "index:N") -> the baseline used for it.
        gpus: Per-GPU detail.
        known: False when it could not be told (no driver, no data); then ``clean`` is False too.
        not_ready: The reasons (also in ``reasons``, first) that a GPU needs a reset, reboot or drain
            (``gputui.core.verdict.readiness``): the verdict is NOT READY; ``clean`` is False too.
    """

    clean: bool
    reasons: tuple[str, ...] = ()
    baseline_mib: dict[str, int] = field(default_factory=dict)
    tolerance_mib: int = 0
    gpus: tuple[GpuVerdict, ...] = ()
    known: bool = True
    not_ready: tuple[str, ...] = ()

    @property
    def gpus_at_baseline(self) -> int:
        return sum(1 for g in self.gpus if g.clean)

    @property
    def level(self) -> str:
        """CLEAN, NOT CLEAN, NOT READY or CANNOT TELL (``gputui.core.verdict.headline``)."""
        return level_of(self.clean, self.known, bool(self.not_ready))

    def to_dict(self) -> dict[str, Any]:
        return dict(plain(self), level=self.level)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        return cls(
            clean=bool(data.get("clean")),
            reasons=safe_list(data.get("reasons")),
            baseline_mib={visible(k): int(v) for k, v in (data.get("baseline_mib") or {}).items()},
            tolerance_mib=opt_int(data.get("tolerance_mib")) or 0,
            gpus=tuple(GpuVerdict.from_dict(g) for g in data.get("gpus") or ()),
            known=bool(data.get("known", True)),
            not_ready=safe_list(data.get("not_ready")),
        )
