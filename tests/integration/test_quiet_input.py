"""The TUI's input thread sleeps until a key comes (``ui.quiet_input``): on a real pty, no wake-ups while
nothing is typed, every key and a lone Esc still arrive, and setting the exit flag ends it at once."""

from __future__ import annotations

import os
import pty
import signal
import threading
import time
import tty
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from textual import events

from gputui.ui.quiet_input import INPUT_SETTLE_S, QuietLinuxDriver


def _wakeups(native_id: int) -> int:
    """Voluntary context switches of one thread of this process: each is a sleep it woke from."""
    for line in Path(f"/proc/self/task/{native_id}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


def _wait(predicate: Any, what: str, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out: {what}")


async def test_the_input_thread_sleeps_while_idle_and_every_key_still_arrives() -> None:
    master, terminal = pty.openpty()
    tty.setraw(terminal)  # as the app sets it: each byte readable as it comes
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
    keys: list[str] = []

    class Collecting(QuietLinuxDriver):
        def process_message(self, message: Any) -> None:
            if isinstance(message, events.Key):
                keys.append(message.key)

    driver = Collecting(SimpleNamespace())  # type: ignore[arg-type]
    driver.fileno = terminal
    thread = threading.Thread(target=driver.run_input_thread, daemon=True)
    try:
        thread.start()
        time.sleep(0.3)
        assert thread.native_id is not None
        before = _wakeups(thread.native_id)
        time.sleep(2.0)
        assert _wakeups(thread.native_id) - before <= 2  # Textual's own loop: about twenty

        os.write(master, b"a")
        _wait(lambda: keys == ["a"], "the key a")
        os.write(master, b"\x1b")  # a lone Esc: told apart from a sequence's start only by a timeout
        _wait(lambda: keys == ["a", "escape"], "the Esc key")

        time.sleep(INPUT_SETTLE_S + 0.3)
        before = _wakeups(thread.native_id)
        time.sleep(1.5)
        assert _wakeups(thread.native_id) - before <= 2  # asleep again once the input settled

        driver.exit_event.set()
        thread.join(timeout=2.0)
        assert not thread.is_alive()
    finally:
        driver.exit_event.set()
        thread.join(timeout=2.0)
        driver.close()
        os.close(master)
        os.close(terminal)
        for sig, handler in saved.items():
            signal.signal(sig, handler)
