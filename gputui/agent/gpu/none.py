"""The backend of a host with no way to read its GPUs."""

from __future__ import annotations

from gputui.agent.protocol import MODE_NONE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class NoBackend:
    """No way to read the GPUs: every sample has none, and the host error says why."""

    mode = MODE_NONE
    driver_version: str | None = None
    cuda_driver_version: str | None = None

    def __init__(self, error: str) -> None:
        self.host_error: str | None = error

    def start(self) -> None:
        pass

    def poll(self, want_processes: bool) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass
