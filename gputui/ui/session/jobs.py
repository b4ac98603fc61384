"""Short blocking jobs (a link request, a file write) on daemon threads of their own.

Nothing waits on them: a job stuck in a hung host's call is left behind when the app quits, and the event
loop's executor is never held by one. A job reports back by posting a message (``post_message`` is
thread-safe).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def spawn(name: str, job: Callable[[], None]) -> None:
    """Run ``job`` on a daemon thread named ``gputui-NAME``."""
    threading.Thread(target=job, name=f"gputui-{name}", daemon=True).start()
