"""Files gputui keeps between runs: calibrated GPU baselines, the kill audit log, and the ports of jobs
``gputui kill`` took down until a ``gputui check`` sees them free (``watched_ports.json``).

Everything lives under the XDG state directory (``$XDG_STATE_HOME/gputui``, else ``~/.local/state/gputui``).
``baselines.json`` maps a host target, then a GPU key (its UUID, else "index:N"), to the idle memory in MiB
recorded by ``gputui check --calibrate``. It is written atomically (temporary file + rename) so a crash never
leaves half a file; a file that cannot be read is reported in one warning line, the defaults are used, and it
is never overwritten (calibrating again refuses until the user moves it away).

Every file here is opened through ``safefile``: a link, FIFO, device or foreign-owned file, or a folder others
may write, is refused in one line, never followed or blocked on.
"""

from __future__ import annotations

import json
import os
import time

from gputui.agent import safefile
from gputui.agent.safefile import state_dir
from gputui.core.model import Record, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection
    from typing import Any

    from gputui.agent.safefile import PathText

BASELINES_FILE = "baselines.json"
AUDIT_FILE = "audit.jsonl"
STATE_FILE_MAX_BYTES = 4 << 20
"""Baselines, watched ports and ui.json: far larger than any gputui writes."""
BASELINES_FORMAT = 1
"""Version of the baselines file layout; a file with another version is reported, not guessed at."""


class StoreError(Exception):
    """A state file cannot be read or written. ``str()`` is one line naming the file and the cause."""


class WatchedPort(Record):
    """A TCP port a killed job served on, watched until it is no longer in LISTEN.

    Attributes:
        port: The port.
        killed_time: The host's epoch seconds of the sample the kill was planned from: a process listening
            on the port that started after it is the server restarted, not what the kill left; None: unknown.
    """

    port: int
    killed_time: float | None = None


def watched_ports(ports: Collection[int], killed_time: float | None) -> tuple[WatchedPort, ...]:
    """``ports`` (a kill plan's) as watched ports, by port."""
    return tuple(WatchedPort(port, killed_time) for port in sorted(set(ports)))


def ensure_state_dir(directory: PathText | None = None) -> str:
    """Create the state directory (owner-only, it holds an audit log), check it (``safefile``), return it."""
    path = state_dir() if directory is None else os.fspath(directory)
    try:
        os.close(safefile.open_folder(path, create=True))
    except safefile.UnsafeFile as exc:
        raise StoreError(str(exc)) from None
    return path


def read_store_file(path: PathText) -> bytes | None:
    """The bytes of a state file, None when it does not exist; StoreError (one line) when it is unsafe."""
    try:
        return safefile.read_bytes(path, STATE_FILE_MAX_BYTES)
    except safefile.UnsafeFile as exc:
        raise StoreError(str(exc)) from None


class LoadedBaselines(Record):
    """Calibrated baselines for one host target.

    Attributes:
        per_gpu_mib: GPU key (UUID, else "index:N") -> idle memory in MiB; empty when none recorded.
        warning: One line to show the user when the file could not be used (then ``per_gpu_mib`` is empty).
        calibrated_at: Epoch seconds of the calibration, when recorded.
    """

    per_gpu_mib: dict[str, int] = field(default_factory=dict)
    warning: str | None = None
    calibrated_at: float | None = None


def _read_document(path: str) -> dict[str, Any] | None:
    """The parsed baselines file, None when it does not exist. Raises StoreError when it is unusable."""
    raw = read_store_file(path)
    if raw is None:
        return None
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise StoreError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(document, dict) or not isinstance(document.get("hosts"), dict):
        raise StoreError(f'{path}: not a gputui baselines file (no "hosts" object)')
    if document.get("format", BASELINES_FORMAT) != BASELINES_FORMAT:
        raise StoreError(f"{path}: baselines format {document.get('format')!r} is not {BASELINES_FORMAT}")
    return document


def _valid_mib(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40


def _document_to_load(path: PathText | None) -> tuple[str, dict[str, Any] | None, LoadedBaselines]:
    """The baselines file, its document (None when absent or unusable), and what to load in that case:
    nothing, or a warning line and the defaults."""
    file_path = os.path.join(state_dir(), BASELINES_FILE) if path is None else os.fspath(path)
    try:
        return file_path, _read_document(file_path), LoadedBaselines()
    except StoreError as exc:
        return file_path, None, LoadedBaselines(warning=f"{exc}; using default baselines")


def _entry_gpus(entry: Any) -> dict[str, int] | None:
    """A host entry's GPU key -> MiB map, None when it is not one."""
    gpus = entry.get("gpus") if isinstance(entry, dict) else None
    if not isinstance(gpus, dict) or not all(isinstance(k, str) and _valid_mib(v) for k, v in gpus.items()):
        return None
    return gpus


def load_baselines(target: str, path: PathText | None = None) -> LoadedBaselines:
    """The calibrated baselines of ``target``; never raises.

    Args:
        target: The host target word the calibration was recorded under ("local", an ssh alias, ...).
        path: The baselines file; default ``state_dir()/baselines.json``.

    Returns:
        The values (empty when none were recorded), or empty values and a one-line warning when the file is
        corrupt or holds bad values for this target.
    """
    file_path, document, failed = _document_to_load(path)
    if document is None:
        return failed
    entry = document["hosts"].get(target)
    if entry is None:
        return LoadedBaselines()
    gpus = _entry_gpus(entry)
    if gpus is None:
        return LoadedBaselines(
            warning=f"{file_path}: bad baselines recorded for {target!r}; using default baselines"
        )
    calibrated_at = entry.get("calibrated_at")
    return LoadedBaselines(
        per_gpu_mib=dict(gpus),
        calibrated_at=float(calibrated_at) if isinstance(calibrated_at, int | float) else None,
    )


def load_calibrated_uuids(path: PathText | None = None) -> LoadedBaselines:
    """Every GPU calibrated on any host, by UUID; never raises.

    For the fleet view, whose hosts are named by a Prometheus label rather than by the target they were
    calibrated under: a UUID names one GPU wherever it is. ``index:N`` keys are left out (they mean something
    only on their own host), and so is a host entry with bad values.
    """
    _, document, failed = _document_to_load(path)
    if document is None:
        return failed
    per_gpu: dict[str, int] = {}
    for entry in document["hosts"].values():
        gpus = _entry_gpus(entry) or {}
        per_gpu.update((key, value) for key, value in gpus.items() if not key.startswith("index:"))
    return LoadedBaselines(per_gpu_mib=per_gpu)


def save_baselines(
    target: str,
    per_gpu_mib: dict[str, int],
    path: PathText | None = None,
    hostname: str | None = None,
    now: float | None = None,
) -> str:
    """Record ``per_gpu_mib`` as the calibrated baselines of ``target``, keeping other hosts' entries.

    The file is replaced atomically. An existing file that cannot be parsed is left exactly as it is and
    StoreError is raised: replacing it would silently throw away other hosts' calibrations.

    Args:
        target: Host target word.
        per_gpu_mib: GPU key (UUID, else "index:N") -> idle memory in MiB.
        path: The baselines file; default ``state_dir()/baselines.json``.
        hostname: The host's own name, stored for the reader's benefit.
        now: Calibration time in epoch seconds (default: now).

    Returns:
        The path written.
    """
    for key, value in per_gpu_mib.items():
        if not isinstance(key, str) or not _valid_mib(value):
            raise StoreError(f"bad baseline {key!r}: {value!r} (MiB must be a non-negative whole number)")
    file_path = os.path.join(state_dir(), BASELINES_FILE) if path is None else os.fspath(path)
    ensure_state_dir(os.path.dirname(file_path))
    try:
        document = _read_document(file_path)
    except StoreError as exc:
        raise StoreError(f"{exc}; not overwriting it: move it away to calibrate again") from None
    if document is None:
        document = {"format": BASELINES_FORMAT, "hosts": {}}
    document["format"] = BASELINES_FORMAT
    document["hosts"][target] = {
        "calibrated_at": time.time() if now is None else now,
        "hostname": hostname,
        "gpus": dict(sorted(per_gpu_mib.items())),
    }
    atomic_write_text(file_path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return file_path


def atomic_write_text(path: PathText, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` so that readers see either the old or the new file, never a mix
    (``safefile.write_atomic``).

    Raises StoreError (one line) when it cannot be written.
    """
    try:
        safefile.write_atomic(path, text.encode("utf-8"), mode)
    except safefile.UnsafeFile as exc:
        raise StoreError(str(exc)) from None


def append_line(path: PathText, line: str) -> None:
    """Append one line to ``path`` (owner-only) in a single write, so concurrent writers do not interleave.

    Raises StoreError (one line) when it cannot be written.
    """
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    try:
        safefile.append(path, data)
    except safefile.UnsafeFile as exc:
        raise StoreError(str(exc)) from None


WATCHED_PORTS_FILE = "watched_ports.json"
WATCHED_PORTS_KEPT_S = 3600.0
"""A killed job's ports are watched this long at most (a check that never ran must not hold a server
restarted much later to account)."""


def load_watched_ports(
    target: str, boot_id: str | None, path: PathText | None = None, warnings: list[str] | None = None
) -> tuple[WatchedPort, ...]:
    """The ports of jobs ``gputui kill`` took down on ``target`` in this boot that no check has seen free
    yet (``WatchedPort``); none when the file is absent or unusable (it only narrows a verdict).
    A file refused as unsafe adds its one line to ``warnings``."""
    file_path = os.path.join(state_dir(), WATCHED_PORTS_FILE) if path is None else os.fspath(path)
    try:
        raw = read_store_file(file_path)
        document = json.loads(raw.decode("utf-8")) if raw is not None else None
    except StoreError as exc:
        if warnings is not None:
            warnings.append(f"{exc}; not watching the ports of killed jobs")
        return ()
    except (UnicodeDecodeError, ValueError):
        return ()
    entry = document.get(target) if isinstance(document, dict) else None
    if not isinstance(entry, dict) or boot_id is None or entry.get("boot_id") != boot_id:
        return ()
    killed_time = entry.get("killed_time")
    if not isinstance(killed_time, (int, float)) or isinstance(killed_time, bool):
        return ()
    if not -WATCHED_PORTS_KEPT_S <= time.time() - killed_time <= WATCHED_PORTS_KEPT_S:
        return ()  # too old, or from a clock too far off (NaN too) to say
    ports = entry.get("ports")
    listed = ports if isinstance(ports, list) else []
    valid = {p for p in listed if isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536}
    return tuple(WatchedPort(port, float(killed_time)) for port in sorted(valid))


def save_watched_ports(
    target: str, boot_id: str | None, ports: tuple[WatchedPort, ...], path: PathText | None = None
) -> None:
    """Record (or, with no ports, forget) the watched ports of ``target``, keeping other hosts' entries.

    Raises StoreError (one line) when the file cannot be written.
    """
    file_path = os.path.join(state_dir(), WATCHED_PORTS_FILE) if path is None else os.fspath(path)
    ensure_state_dir(os.path.dirname(file_path))
    raw = read_store_file(file_path)  # an unsafe file is refused, not replaced
    try:
        document = json.loads(raw.decode("utf-8")) if raw is not None else {}
    except (UnicodeDecodeError, ValueError):
        document = {}
    if not isinstance(document, dict):
        document = {}
    times = [p.killed_time for p in ports if p.killed_time is not None]
    if ports and boot_id is not None:
        entry = {"boot_id": boot_id, "killed_time": max(times) if times else time.time()}
        document[target] = dict(entry, ports=sorted({p.port for p in ports}))
    elif document.pop(target, None) is None:
        return
    atomic_write_text(file_path, json.dumps(document, indent=1, ensure_ascii=False) + "\n", mode=0o600)
