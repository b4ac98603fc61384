"""What the collector needs of a GPU backend (``nvml.NvmlBackend``, ``smi.SmiBackend``, ``none.NoBackend``):
imported by type checkers only."""

from __future__ import annotations

from typing import Any, Protocol


class Backend(Protocol):
    """What the collector needs of a GPU backend.

    Attributes:
        mode: How it reads the host (``protocol.MODE_NVML``, ``MODE_SMI``, ``MODE_NONE``).
        host_error: Why the host's GPUs cannot be read now (no driver, library not found), else None.
        driver_version: The driver's version, None while unknown.
        cuda_driver_version: The CUDA version the driver supports ("12.4"), None while unknown.
    """

    mode: str
    host_error: str | None
    driver_version: str | None
    cuda_driver_version: str | None

    def start(self) -> None:
        """Open the device access now (bounded), so that the hello says whether there is a driver."""

    def poll(self, want_processes: bool) -> list[dict[str, Any]]:
        """One sample of every GPU: Gpu dicts, with ``processes`` only when ``want_processes``."""

    def close(self) -> None:
        """Stop its threads and child processes; returns at once when a call is stuck."""
