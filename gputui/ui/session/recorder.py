"""The app's own recording (``--record FILE``, the ``w`` key): what it hands the writer, and where it goes.

The app gives every sample it applies, every notification, every kill's outcomes and every audit line to
``SessionRecorder``; each is one put in the writer's queue (``core.recording.writer``), so the event loop
never waits on the disk. A recording started with ``w`` goes to a new file in the state folder's
``recordings``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gputui.core.model import HostSnapshot
from gputui.core.recording import (
    EVENT_AUDIT,
    EVENT_ERROR,
    EVENT_KILL,
    EVENT_NOTE,
    RecordingWriter,
    new_recording_path,
)
from gputui.core.text import fit

OUTCOME_FIELDS = ("pid", "start_ticks", "name", "stage", "signal", "result", "detail", "gpu_mib")
"""What a kill event keeps of each outcome (its command line is in the audit line, redacted)."""


class SessionRecorder:
    """The app's recording, if one runs.

    Args:
        targets: The app's hosts now (the recording names them).
        interval_s: The sampling interval, for the record.
        clock: Epoch seconds.
    """

    def __init__(self, targets: Callable[[], Sequence[str]], interval_s: float, clock: Callable[[], float]):
        self._targets = targets
        self._interval_s = interval_s
        self._clock = clock
        self.writer: RecordingWriter | None = None

    @property
    def active(self) -> bool:
        return self.writer is not None

    def start(self, path: str | None = None) -> str:
        """Start recording to ``path`` (default: a new file in the recordings folder); returns what to say.

        Raises:
            RecordingError: The file exists or cannot be made (one line).
        """
        path = path or new_recording_path(self._clock())
        writer = RecordingWriter(path, list(self._targets()), interval_s=self._interval_s, clock=self._clock)
        writer.start()
        self.writer = writer
        return f"recording to {fit(path, 200)} (w stops)"

    def stop(self, wait_s: float = 0.0) -> str | None:
        """Stop recording; returns the line to say (None: none ran). The file is finished on the writer's
        thread (``wait_s``: wait that long for it, as when the app quits)."""
        writer, self.writer = self.writer, None
        if writer is None:
            return None
        if wait_s > 0:
            writer.close(wait_s)
        else:
            import threading

            threading.Thread(target=writer.close, name="gputui-recording-close", daemon=True).start()
        line = f"recording stopped: {fit(writer.path, 200)}, {writer.samples} samples, {size_text_of(writer)}"
        if writer.dropped:
            line += f" ({writer.dropped} not written: the disk was behind)"
        return line

    def problem(self) -> str | None:
        """Why the writer stopped on its own (the size cap, a failed write), once; the recording ends."""
        writer = self.writer
        if writer is None or writer.stopped is None:
            return None
        self.writer = None
        writer.close(0.5)
        return writer.stopped

    # -- what the app hands it -----------------------------------------------------------------------------

    def sample(self, target: str, snapshot: HostSnapshot) -> None:
        if self.writer is not None:
            self.writer.sample(target, snapshot)

    def note(self, message: str, severity: str, title: str) -> None:
        if self.writer is not None:
            self.writer.event(EVENT_NOTE, message, data={"severity": severity, "title": title})

    def error(self, target: str, message: str) -> None:
        if self.writer is not None:
            self.writer.event(EVENT_ERROR, message, target)

    def kill(self, target: str, stage: str, outcomes: Sequence[Any], error: str | None = None) -> None:
        """A kill's outcomes as they came (``stage``: started or finished)."""
        if self.writer is None:
            return
        kept = [{name: getattr(o, name, None) for name in OUTCOME_FIELDS} for o in outcomes]
        said = "; ".join(f"{o['pid']} {o['name'] or '?'}: {o['result']}" for o in kept)
        text = f"kill {stage}: {error or said or 'no outcome'}"
        self.writer.event(
            EVENT_KILL, fit(text, 300), target, {"stage": stage, "outcomes": kept, "error": error}
        )

    def audit(self, line: dict[str, Any]) -> None:
        """An audit-log line as written (any thread: the kill's own)."""
        if self.writer is None:
            return
        text = f"{line.get('stage')} {line.get('signal') or ''} pid {line.get('pid')}: {line.get('result')}"
        host = line.get("host")
        self.writer.event(EVENT_AUDIT, text, host if isinstance(host, str) else None, dict(line))


def size_text_of(writer: RecordingWriter) -> str:
    """The file's size now: "3.2 MiB"."""
    return f"{writer.size_bytes / (1 << 20):.1f} MiB"
