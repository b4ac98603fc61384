"""A recording's last minutes as a recording of its own (what an incident bundle carries).

Each host's first sample in the excerpt is written whole, the rest as deltas again, with the events of the
same span between them in time order; the samples are the recorded ones, read back exactly, and pass through
the redaction once more on the way out.
"""

from __future__ import annotations

from gputui.core.recording.reader import Recording
from gputui.core.recording.writer import RecordingWriter


def write_excerpt(recording: Recording, path: str, targets: list[str], since_s: float) -> int:
    """Write ``targets``' samples and events from ``since_s`` on to the new file ``path``; returns how many
    samples.

    Raises:
        RecordingError: ``path`` exists or cannot be written (one line).
    """
    items: list[tuple[float, int, str, int]] = []
    for target in targets:
        for index, t in enumerate(recording.times(target)):
            if t >= since_s:
                items.append((t, 1, target, index))
    items.sort()
    writer = RecordingWriter(
        path,
        targets,
        interval_s=recording.meta.get("interval_s"),
        clock=lambda: since_s,
        blocking=True,
    )
    writer.start()
    events = [e for e in recording.events if e.t >= since_s and (e.target is None or e.target in targets)]
    pending = iter(sorted(events, key=lambda e: e.t))
    event = next(pending, None)
    try:
        for t, _order, target, index in items:
            while event is not None and event.t <= t:
                writer.event(event.kind, event.text, event.target, event.data, at_s=event.t)
                event = next(pending, None)
            writer.sample(target, recording.snapshot(target, index), at_s=t)
        while event is not None:
            writer.event(event.kind, event.text, event.target, event.data, at_s=event.t)
            event = next(pending, None)
    finally:
        writer.close(timeout_s=60.0)
    return writer.samples
