"""Leftovers of killed jobs: /dev/shm segments and POSIX semaphores, MPS control daemons that outlived them,
and the reports their profilers left unfinished (a raw ``.qdstrm`` stream without its ``.nsys-rep``).

``gputui kill`` records, per host and boot, what the job's processes had open or mapped in /dev/shm and the
MPS control daemons of their users (``agent.proc.leftovers.scan``), in ``leftovers.json`` of the state
directory. The kill's receipt, ``gputui check`` and ``gputui leftovers`` ask the collector which still
exist (``agent.proc.leftovers.check``) and word them here, once, as findings of kind ``leftover``.

The rule: a leftover is a finding and a reason line, and residue (one of the clean slate's three facts,
``gputui.core.verdict.facts``): the host is NOT clean until it is gone. A /dev/shm at ``SHM_FULL_PCT`` or
fuller makes the host NOT clean too, leftovers or not: the next launch will crash on it (sglang's
``sgl_shm_*`` segments crash-loop a pod that way).
"""

from __future__ import annotations

import json
import os
import time

from gputui.agent.protocol import LEFTOVERS_SCAN_COMMAND
from gputui.core.link import HostLink, LinkError
from gputui.core.model import Finding, HostSnapshot, replace
from gputui.core.store import saved
from gputui.core.text import visible

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.agent.safefile import PathText

LEFTOVERS_FILE = "leftovers.json"
LEFTOVERS_KEPT_S = 86400.0
"""A killed job's leftovers are looked for this long at most."""
SHM_DIR_NAME = "/dev/shm"  # noqa: S108 - a name to show, never a place to write
SHM_FULL_PCT = 95.0
"""The shared-memory folder this full (or fuller) makes the host NOT clean."""
KIND = "leftover"
MAX_RECORDED = 512
SCAN_TIMEOUT_S = 30.0


def _mib(size_bytes: Any) -> str:
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool):
        return "–"
    return f"{size_bytes / (1 << 20):.1f} MiB"


def shm_pct(usage: Any) -> float | None:
    if not isinstance(usage, dict):
        return None
    total, used = usage.get("total_bytes"), usage.get("used_bytes")
    if not isinstance(total, int) or not isinstance(used, int) or total <= 0 or not 0 <= used <= total:
        return None
    return 100.0 * used / total


def shm_line(usage: Any) -> str:
    """``/dev/shm: 61.2 of 64.0 GiB used (96%)``; "" when not known."""
    pct = shm_pct(usage)
    if pct is None:
        return ""
    gib = 1 << 30
    where = visible(str(usage.get("dir") or SHM_DIR_NAME), 80)
    return (
        f"{where}: {usage['used_bytes'] / gib:.1f} of {usage['total_bytes'] / gib:.1f} GiB used ({pct:.0f}%)"
    )


def shm_full(usage: Any) -> bool:
    pct = shm_pct(usage)
    return pct is not None and pct >= SHM_FULL_PCT


def segment_name(segment: dict[str, Any]) -> str:
    """``segment /dev/shm/sgl_shm_1``: how a leftover's sentence starts, and what names it."""
    kind = "semaphore" if segment.get("kind") == "semaphore" else "segment"
    return f"{kind} {visible(str(segment.get('path')), 200)}"


def segment_detail(segment: dict[str, Any], usage: Any) -> str:
    """``/dev/shm/sgl_shm_1 (12.0 MiB, owner alice) outlived its killed job; /dev/shm: … (61%)``."""
    owner = visible(str(segment.get("user") or segment.get("uid") or "?"), 32)
    text = f"{segment_name(segment)} ({_mib(segment.get('size_bytes'))}, owner {owner})"
    text += " outlived its killed job"
    holders = segment.get("open_by") or []
    if holders:
        text += "; open or mapped by " + ", ".join(str(p) for p in holders[:8])
    line = shm_line(usage)
    return f"{text}; {line}" if line else text


def report_name(report: dict[str, Any]) -> str:
    """``report /tmp/glm5_decode.nsys-rep``: how an unfinished report's sentence starts, and what names it."""
    path = str(report.get("path"))
    return f"report {visible(str(report.get('report') or path), 200)}"


def report_detail(report: dict[str, Any]) -> str:
    """``report /tmp/x.nsys-rep left unfinished: only its raw stream /tmp/x.qdstrm (12.0 MiB) is there``."""
    text = (
        f"{report_name(report)} left unfinished: only its raw stream {visible(str(report.get('path')), 200)} "
        f"({_mib(report.get('size_bytes'))}) is there, its profiler was stopped before it wrote the report"
    )
    holders = report.get("open_by") or []
    if holders:
        text += "; open by " + ", ".join(str(p) for p in holders[:8])
    return text


def findings(target: str, checked: dict[str, Any]) -> list[Finding]:
    """One ``leftover`` finding per unfinished report (first: what the user may still want), per segment and
    per MPS daemon still there."""
    usage = checked.get("shm")
    found = []
    for report in checked.get("reports") or ():
        if isinstance(report, dict):
            stream = visible(str(report.get("path")), 200)
            action = (
                f"convert it (Nsight Systems' QdstrmImporter -i {stream}), or remove it: "
                f"gputui leftovers {target} --remove"
            )
            found.append(Finding(KIND, target, report_detail(report), action))
    for segment in checked.get("segments") or ():
        if isinstance(segment, dict):
            busy = bool(segment.get("open_by"))
            action = "" if busy else f"gputui leftovers {target} --remove"
            found.append(Finding(KIND, target, segment_detail(segment, usage), action))
    for daemon in checked.get("mps") or ():
        if isinstance(daemon, dict):
            user = visible(str(daemon.get("user") or daemon.get("uid")), 32)
            found.append(
                Finding(
                    KIND,
                    target,
                    f"MPS control daemon pid {daemon.get('pid')} (user {user}) outlived its killed job",
                    f"as {user}, once it has no client: echo quit | nvidia-cuda-mps-control",
                    pid=daemon.get("pid") if isinstance(daemon.get("pid"), int) else None,
                )
            )
    return found


def judge(snapshot: HostSnapshot, checked: dict[str, Any] | None) -> HostSnapshot:
    """The snapshot with the leftovers as findings and reasons: NOT clean while one is left or /dev/shm is
    full."""
    if checked is None:
        return snapshot
    extra = findings(snapshot.target, checked)
    # The collector's record of its jobs may have named the same leftovers: the checked sentence (its holders,
    # how full /dev/shm is) takes their place, once.
    names = [segment_name(s) + " (" for s in checked.get("segments") or () if isinstance(s, dict)]
    names += [report_name(r) + " " for r in checked.get("reports") or () if isinstance(r, dict)]
    named = {f.detail for f in extra}

    def replaced(finding: Finding) -> bool:
        return finding.kind == KIND and (finding.detail in named or finding.detail.startswith(tuple(names)))

    gone = {f"leftover: {f.detail}" for f in snapshot.findings if replaced(f)}
    kept = tuple(f for f in snapshot.findings if not replaced(f))
    verdict = snapshot.verdict
    if verdict is not None and verdict.known:
        reasons = tuple(f"leftover: {f.detail}" for f in extra)
        full = shm_full(checked.get("shm"))
        if full:
            reasons += (f"{SHM_DIR_NAME} is full: {shm_line(checked.get('shm'))}",)
        before = tuple(r for r in verdict.reasons if r not in gone)
        clean = verdict.clean and not full and not reasons
        verdict = replace(verdict, clean=clean, reasons=before + reasons)
    return replace(snapshot, findings=kept + tuple(extra), verdict=verdict)


# -- the record ------------------------------------------------------------------------------------------


def _path(path: PathText | None) -> str:
    return os.path.join(saved.state_dir(), LEFTOVERS_FILE) if path is None else os.fspath(path)


def _document(path: str) -> dict[str, Any]:
    """The record file's document ({} when there is none or it is not one).

    Raises:
        saved.StoreError: The file is planted (a link, FIFO or device, another user's) or cannot be read.
    """
    raw = saved.read_store_file(path)
    try:
        document = json.loads(raw.decode("utf-8")) if raw is not None else {}
    except (UnicodeDecodeError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def load(target: str, boot_id: str | None, path: PathText | None = None) -> dict[str, list[dict[str, Any]]]:
    """The recorded leftovers of ``target`` in this boot: ``{"segments": [...], "mps": [...]}`` (empty
    lists when none, the file is not a record, or the record is too old).

    Raises:
        saved.StoreError: The file must not be read (``saved.read_store_file``): one line.
    """
    entry = _document(_path(path)).get(target)
    empty: dict[str, list[dict[str, Any]]] = {"segments": [], "mps": []}
    if not isinstance(entry, dict) or boot_id is None or entry.get("boot_id") != boot_id:
        return empty
    when = entry.get("time")
    if not isinstance(when, (int, float)) or not -LEFTOVERS_KEPT_S <= time.time() - when <= LEFTOVERS_KEPT_S:
        return empty
    return {key: [item for item in entry.get(key) or () if isinstance(item, dict)] for key in empty}


def save(
    target: str,
    boot_id: str | None,
    found: dict[str, Any],
    path: PathText | None = None,
    replace_all: bool = False,
) -> None:
    """Add (or with ``replace_all``, set) what a kill found to ``target``'s record; an empty record is
    forgotten. Raises saved.StoreError (one line) when the file cannot be written."""
    file_path = _path(path)
    saved.ensure_state_dir(os.path.dirname(file_path))
    document = _document(file_path)
    known = {"segments": [], "mps": []} if replace_all else load(target, boot_id, file_path)
    for key in ("segments", "mps"):
        seen = {json.dumps(item, sort_keys=True) for item in known[key]}
        for item in found.get(key) or ():
            if isinstance(item, dict) and json.dumps(item, sort_keys=True) not in seen:
                known[key].append({k: v for k, v in item.items() if k != "open_by"})
        known[key] = known[key][-MAX_RECORDED:]
    if boot_id is None or not (known["segments"] or known["mps"]):
        if document.pop(target, None) is None:
            return
    else:
        document[target] = {"boot_id": boot_id, "time": time.time(), **known}
    saved.atomic_write_text(file_path, json.dumps(document, indent=1, ensure_ascii=False) + "\n", mode=0o600)


def scan_job(link: HostLink, pids: list[int]) -> dict[str, Any] | None:
    """What a job about to be killed has in /dev/shm, read by its host's collector (None where it cannot
    say: a simulated host, an older collector, a broken link)."""
    try:
        return link.request({"cmd": LEFTOVERS_SCAN_COMMAND, "pids": pids}, SCAN_TIMEOUT_S)
    except LinkError:
        return None


def record(target: str, boot_id: str | None, found: dict[str, Any] | None) -> str | None:
    """Record what ``scan_job`` found once the kill's signals are out; returns a warning line when the record
    cannot be written (the kill goes on: only the later naming of its leftovers is lost)."""
    if not found or not (found.get("segments") or found.get("mps")):
        return None
    try:
        save(target, boot_id, found)
    except saved.StoreError as exc:
        return f"the job's /dev/shm leftovers are not recorded: {visible(str(exc), 300)}"
    return None
