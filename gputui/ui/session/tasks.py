"""Short blocking tasks (a link request, a file write) on daemon threads of their own.

Nothing waits on them: a task stuck in a hung host's call is left behind when the app quits, and the event
loop's executor is never held by one. A task reports back by posting a message (``post_message`` is
thread-safe). ("Job" is a GPU job, a process tree; these are the UI's own errands.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def spawn(name: str, task: Callable[[], None]) -> None:
    """Run ``task`` on a daemon thread named ``gputui-NAME``."""
    threading.Thread(target=task, name=f"gputui-{name}", daemon=True).start()
