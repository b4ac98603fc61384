"""The verdict block ``check`` prints and ``snapshot`` prints after its table: the same lines for the same
sample, from the one verdict the engine (``gputui.core.verdict.engine``) computed.

One line per GPU (its figure and ✓, or ✗ and its reasons), the headline (``core.verdict.headline``), its three
facts (workers, residue, GPUs: ``facts.fact_rows``), every other reason, then the findings with their
actions. A reason that is word for word a finding listed below is not
printed twice (eight defunct workers would take sixteen lines to say eight things); JSON keeps every reason.
"""

from __future__ import annotations

from gputui.commands.output.streams import marks
from gputui.core.model import CANNOT_TELL, HostSnapshot
from gputui.core.text import DASH, age_since, fit
from gputui.core.verdict import fact_rows, headline

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

MAX_FINDINGS_SHOWN = 20


def _gpu_reason_text(index: int, used: int | None, reason: str) -> str:
    """A per-GPU reason without the "GPU3 41236 MiB " its line already shows."""
    prefix = f"GPU{index} "
    if reason.startswith(prefix):
        reason = reason[len(prefix) :]
    if used is not None and reason.startswith(f"{used} MiB "):
        reason = reason[len(f"{used} MiB ") :]
    return reason


def verdict_lines(snapshot: HostSnapshot, stream: TextIO) -> list[str]:
    """The verdict block of one host (see the module docstring)."""
    good, bad = marks(stream)
    lines: list[str] = []
    verdict = snapshot.verdict
    shown: set[str] = set()
    if verdict is not None:
        for gpu_verdict in verdict.gpus:
            used = DASH if gpu_verdict.used_mib is None else str(gpu_verdict.used_mib)
            # How the GPU was judged where not by its memory (unified memory: by its processes).
            note = (
                ""
                if gpu_verdict.note is None
                else "  " + fit(_gpu_reason_text(gpu_verdict.index, None, gpu_verdict.note), 200)
            )
            if gpu_verdict.clean:
                lines.append(f"GPU{gpu_verdict.index}  {used} MiB  {good}{note}")
                continue
            texts = [
                _gpu_reason_text(gpu_verdict.index, gpu_verdict.used_mib, r) for r in gpu_verdict.reasons
            ]
            lines.append(f"GPU{gpu_verdict.index}  {used} MiB  {bad} {fit('; '.join(texts), 400)}")
            shown.update(gpu_verdict.reasons)
    lines.append(fit(headline(verdict), 600))
    if verdict is not None and verdict.facts is not None:
        for label, holds, line in fact_rows(verdict.facts):
            lines.append(f"  {label + ':':<8} {good if holds else bad} {fit(line, 400)}")
        if verdict.facts.workers.note:
            lines.append(f"  note: {fit(verdict.facts.workers.note, 300)}")
    if verdict is not None and verdict.level != CANNOT_TELL:
        findings = {f.detail for f in snapshot.findings}
        for reason in verdict.reasons:
            if reason not in shown and reason not in findings:
                lines.append(f"  - {fit(reason, 400)}")
    for finding in snapshot.findings[:MAX_FINDINGS_SHOWN]:
        age = "" if snapshot.time is None else age_since(finding.since, snapshot.time)
        lines.append(f"! {fit(finding.kind, 20)}: {fit(finding.detail, 400)}{f' ({age})' if age else ''}")
        if finding.action:
            lines.append(f"    -> {fit(finding.action, 300)}")
    if len(snapshot.findings) > MAX_FINDINGS_SHOWN:
        lines.append(f"! and {len(snapshot.findings) - MAX_FINDINGS_SHOWN} more findings")
    return lines
