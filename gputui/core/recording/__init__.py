"""Recordings: every host sample as gputui received it, the kills, audit lines and notes beside them, in a
compact, crash-safe, versioned file; read back for ``gputui replay`` and the incident bundle. No UI here.

* ``format``: the file format (its docstring is the specification), framing and its one-line errors;
* ``delta``: a sample as the change from the one before it;
* ``writer``: appending on a thread of its own, bounded by size or age (a ring when asked);
* ``reader``: samples by host and time, events, and the timeline's moments;
* ``excerpt``: a recording's last minutes as a recording of their own (the incident bundle's);
* ``memory``: what each process held on each GPU over a whole recording or session.
"""

from gputui.core import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gputui.core.recording.excerpt import write_excerpt
    from gputui.core.recording.format import (
        EVENT_AUDIT,
        EVENT_ERROR,
        EVENT_KILL,
        EVENT_NOTE,
        VERSION,
        RecordingError,
    )
    from gputui.core.recording.memory import MemorySeries, ProcessMemory
    from gputui.core.recording.reader import Event, Moment, Recording
    from gputui.core.recording.writer import (
        RecordingWriter,
        new_recording_path,
        recordings_folder,
        redact_line,
        redact_sample,
    )

__all__ = [
    "EVENT_AUDIT",
    "EVENT_ERROR",
    "EVENT_KILL",
    "EVENT_NOTE",
    "Event",
    "MemorySeries",
    "Moment",
    "ProcessMemory",
    "Recording",
    "RecordingError",
    "RecordingWriter",
    "VERSION",
    "new_recording_path",
    "recordings_folder",
    "redact_line",
    "redact_sample",
    "write_excerpt",
]

_HOMES = {
    "EVENT_AUDIT": "format",
    "EVENT_ERROR": "format",
    "EVENT_KILL": "format",
    "EVENT_NOTE": "format",
    "Event": "reader",
    "MemorySeries": "memory",
    "Moment": "reader",
    "ProcessMemory": "memory",
    "Recording": "reader",
    "RecordingError": "format",
    "RecordingWriter": "writer",
    "VERSION": "format",
    "new_recording_path": "writer",
    "recordings_folder": "writer",
    "redact_line": "writer",
    "redact_sample": "writer",
    "write_excerpt": "excerpt",
}
"""Each name of the face -> the module of this package that defines it (loaded on first use)."""

__getattr__ = lazy_face(__name__, _HOMES)
