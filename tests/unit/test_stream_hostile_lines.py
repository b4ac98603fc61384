"""Lines a collector that is not gputui's may send: each ends the stream with one line, never a traceback
in the reader thread."""

from __future__ import annotations

import json

import pytest

from gputui.core.link import LinkError
from gputui.transports.ssh.stream import CollectorStream


class _NoPipe:
    def recv(self, max_bytes: int) -> bytes | None:
        return None


def _stream() -> CollectorStream:
    stream = CollectorStream("hostile", _NoPipe(), stale_after_s=1.0, first_grace_s=1.0)  # type: ignore[arg-type]
    stream._hello = {"t": "hello"}  # past the hello: every line now counts
    return stream


def _snapshot_line(**gpu: object) -> bytes:
    snapshot = {"gpus": [{"index": 0, **gpu}], "processes": [{"pid": 1e999, "ppid": 1}]}
    return json.dumps({"t": "snapshot", "snapshot": snapshot}).encode().replace(b"1e+999", b"1e999")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            b'{"t": "snapshot", "snapshot": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
            "line that is not a JSON object",
        ),
        (b"[" * 200_000 + b"]" * 200_000, "line that is not a JSON object"),
        (b'{"t": "snapshot", "snapshot": {"gpus": [{"index": 1e999}]}}', "malformed snapshot"),
        (_snapshot_line(memory_used_mib=1e400), "malformed snapshot"),
    ],
)
def test_a_hostile_line_is_one_error_line(line: bytes, said: str) -> None:
    with pytest.raises(LinkError, match=f"^hostile: the collector sent a {said}: [^\\n]*$"):
        _stream().decode(line)
