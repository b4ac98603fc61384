"""The recording file format, version 1: what ``gputui record`` and ``--record`` write and ``replay`` reads.

A recording is a header and a sequence of records, each whole on its own::

    file    = MAGIC (16 bytes) VERSION (2 bytes, big-endian) record*
    record  = MARK (4 bytes, "GRc1") LENGTH (4 bytes, big-endian) CRC32 (4 bytes, big-endian) PAYLOAD
    PAYLOAD = zlib(JSON object, UTF-8), LENGTH bytes, CRC32 of those bytes

Every record is compressed on its own (stdlib ``zlib``), carries its length and its checksum, and is written
in one ``write``; the writer syncs the file every few seconds. A file cut by a power loss or a full disk
therefore reads up to its last whole record, and a record damaged in the middle ends the reading there: what
came before it is replayed, and one line says where the rest was lost.

The JSON object's ``k`` says what the record is; ``t`` is the recorder's epoch seconds when it got it:

* ``start``: the recording begins: ``gputui`` (its version), ``python``, ``targets``, ``interval_s``,
  ``keyframe_every``; a ring recording cut at its head says ``cut: true``.
* ``key``: a host sample whole: ``h`` the target, ``s`` the sample as ``HostSnapshot.to_dict`` writes it
  (GPUs, processes, fitness, health endpoints with their server states, findings, the verdict and its facts).
* ``delta``: a host sample as the change from that host's sample before it: ``h``, ``p`` a patch
  (``record.delta``: only what changed, lists matched by pid, GPU index or URL). Every
  ``keyframe_every``-th sample of a host is a ``key``, so a reader seeks without reading from the start.
* ``event``: something that happened beside the samples: ``h`` (the target, or null), ``e`` its kind
  (``kill``: a kill's outcomes, ``audit``: one audit-log line of a kill or reset, ``note``: what the app said,
  ``error``: a host's link failed), ``text`` one line, ``data`` the details.
* ``end``: the recording was closed cleanly (a file without one was cut).

Command lines in samples and audit lines are passed through the collector's redaction
(``gputui.agent.argv_secrets``) on the way in. A reader of version 1 refuses a file of a later version in one
line; records of a kind it does not know are skipped.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAGIC = b"\x89GPUTUI-REC\r\n\x1a\n\x00"
"""The first bytes of every recording (a newline or zero mangled in transfer shows at once)."""
VERSION = 1
"""The format this gputui writes and the newest it reads."""
MARK = b"GRc1"
HEADER = struct.Struct(">4sII")
"""A record's head: MARK, the payload's length, its CRC32."""
RECORD_MAX_BYTES = 16 << 20
"""A compressed record larger than this is damage (a sample of thousands of processes is a few MiB)."""
RECORD_MAX_JSON_BYTES = 64 << 20
"""A record that inflates past this is damage (a zlib bomb)."""
COMPRESS_LEVEL = 6

KIND_START = "start"
KIND_KEY = "key"
KIND_DELTA = "delta"
KIND_EVENT = "event"
KIND_END = "end"

EVENT_KILL = "kill"
EVENT_AUDIT = "audit"
EVENT_NOTE = "note"
EVENT_ERROR = "error"


class RecordingError(Exception):
    """A file that is no recording this gputui reads. ``str()`` is one line naming the file and the cause."""


def header() -> bytes:
    return MAGIC + struct.pack(">H", VERSION)


def encode(record: dict[str, Any]) -> bytes:
    """One record, framed: head and compressed payload."""
    data = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    payload = zlib.compress(data, COMPRESS_LEVEL)
    return HEADER.pack(MARK, len(payload), zlib.crc32(payload)) + payload


def check_header(data: bytes, name: str) -> int:
    """The offset of the first record; RecordingError when ``data`` is no recording of a version read here."""
    size = len(MAGIC) + 2
    if len(data) < size or not data.startswith(MAGIC):
        if data[:1] == b"\x1f" and data[1:2] == b"\x8b":
            raise RecordingError(f"{name}: a gzip file, not a gputui recording (a bundle? unpack it first)")
        raise RecordingError(f"{name}: not a gputui recording")
    (version,) = struct.unpack(">H", data[len(MAGIC) : size])
    if version > VERSION:
        raise RecordingError(
            f"{name}: recording format version {version} is newer than this gputui reads ({VERSION}):"
            " upgrade gputui to replay it"
        )
    if version < 1:
        raise RecordingError(f"{name}: not a gputui recording (format version {version})")
    return size


def frames(data: bytes, offset: int) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """Each record from ``offset`` on as (its offset, the JSON object); the last item is (offset, one line)
    instead when the data ends in the middle of a record or a record is damaged. Never raises."""
    end = len(data)
    while offset < end:
        if end - offset < HEADER.size:
            yield offset, "cut in the middle of a record (the recorder stopped while writing it)"
            return
        mark, length, crc = HEADER.unpack_from(data, offset)
        if mark != MARK or length > RECORD_MAX_BYTES:
            yield offset, "a damaged record"
            return
        start = offset + HEADER.size
        if start + length > end:
            yield offset, "cut in the middle of a record (the recorder stopped while writing it)"
            return
        payload = data[start : start + length]
        if zlib.crc32(payload) != crc:
            yield offset, "a record whose checksum does not match"
            return
        record = _inflate(payload)
        if record is None:
            yield offset, "a record that is no JSON object"
            return
        yield offset, record
        offset = start + length


def _inflate(payload: bytes) -> dict[str, Any] | None:
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(payload, RECORD_MAX_JSON_BYTES)
        if inflater.unconsumed_tail:
            return None
        record = json.loads(data)
    except (zlib.error, ValueError, RecursionError, MemoryError):
        return None
    return record if isinstance(record, dict) else None
