"""Textual's Linux driver, with an input thread that sleeps until a key comes.

Textual's input thread wakes ten times a second whether or not a key came: its ``select`` has a 0.1 s
timeout, so that it notices the exit flag and finishes a lone escape key (the parser's ``tick``). On a
monitor left open all day in a side pane that is six hundred wake-ups a minute, a tenth of what the whole
TUI costs at rest. ``QuietLinuxDriver`` keeps the 0.1 s cadence only while input is in flight (for
``INPUT_SETTLE_S`` after the last byte, which covers every escape timeout of the parser), and otherwise blocks
until the terminal has something to read or the exit flag is set: setting it (Textual's ``disable_input``,
the terminal watch) also writes a byte to a pipe the thread waits on.

Where Textual's private parser or helpers are not where this expects them, the thread is Textual's own.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from typing import Any

from textual.drivers.linux_driver import LinuxDriver

INPUT_SETTLE_S = 1.0
"""After the last byte read, the thread keeps waking every ``TICK_S`` this long (a pending escape ends)."""
TICK_S = 0.1
"""Textual's own cadence while input is in flight."""


class WakingEvent(threading.Event):
    """A ``threading.Event`` whose ``set`` also writes a byte to ``wake_fd`` (a sleeping ``select`` wakes)."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # a full pipe already wakes the reader; a closed one has none
            os.write(self._wake_fd, b"\0")


class QuietLinuxDriver(LinuxDriver):
    """``LinuxDriver`` whose input thread blocks while no input is in flight (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.exit_event = WakingEvent(self._wake_write)

    def close(self) -> None:
        super().close()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def run_input_thread(self) -> None:
        try:
            from textual._loop import loop_last
            from textual._xterm_parser import XTermParser

            parser = XTermParser(self._debug)
        except Exception:  # another Textual: its own loop, wake-ups and all
            super().run_input_thread()
            return
        fileno = self.fileno
        wake = self._wake_read
        decode = getincrementaldecoder("utf-8")().decode
        selector = selectors.SelectSelector()
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        last_input = -INPUT_SETTLE_S  # nothing in flight before the first byte

        def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> bool:
            """Feed what the terminal has to the parser; whether it had anything."""
            got = False
            terminal = [(key, mask) for key, mask in events if key.fd == fileno]
            for last, (_key, mask) in loop_last(terminal):
                if mask & selectors.EVENT_READ:
                    unicode_data = decode(os.read(fileno, 1024 * 4), final=final and last)
                    if not unicode_data:  # a piped stdin at its end
                        break
                    got = True
                    for event in parser.feed(unicode_data):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)
            return got

        try:
            while not self.exit_event.is_set():
                in_flight = time.monotonic() - last_input < INPUT_SETTLE_S
                events = selector.select(TICK_S if in_flight else None)
                if any(key.fd == wake for key, _mask in events):
                    with contextlib.suppress(OSError):
                        os.read(wake, 4096)
                if process(events):
                    last_input = time.monotonic()
            selector.unregister(fileno)
            process(selector.select(TICK_S), final=True)
        finally:
            selector.close()
            with contextlib.suppress(Exception):
                for _event in parser.feed(""):
                    pass
