"""What the collector's commands need of the collector (``collector.Agent`` is the one implementation): the
commands and the reset run are typed against this, so they need not import the collector that imports them.
Imported by type checkers only."""

from __future__ import annotations

from typing import Any, Protocol


class Agent(Protocol):
    """What the commands need of the collector (``collector.Agent``)."""

    kills: Any
    discover_health: bool
    health_urls: tuple[str, ...]
    pid: int
    read_only: bool
    boot_id: str | None

    @property
    def use_psutil(self) -> bool: ...
    @property
    def probing(self) -> bool: ...
    @property
    def uses_nvml(self) -> bool: ...
    @property
    def health(self) -> Any: ...
    def sample(self, force_processes: bool) -> dict[str, Any]: ...
    def hello(self) -> dict[str, Any]: ...
    def discover_now(self) -> None: ...
    def set_intervals(
        self, memory_interval_s: Any, process_interval_s: Any, watch_exits: Any = None
    ) -> None: ...
    def step_aside(self, reason: str) -> None: ...
    def come_back(self) -> None: ...
