"""PCI addresses compared as numbers: NVML says ``00000000:17:00.0``, the kernel log ``0000:17:00``, an older
driver ``17:00.0``; the same GPU is the same (domain, bus, device) in each."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def pci_key(text: Any) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address: ``00000000:17:00.0``, ``0000:17:00``, ``17:00.0``; None when
    it is not one."""
    if not isinstance(text, str):
        return None
    parts = text.strip().split(".", 1)[0].split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3:
        return None
    try:
        domain, bus, device = (int(part, 16) for part in parts)
    except ValueError:
        return None
    if not (0 <= domain <= 0xFFFFFFFF and 0 <= bus <= 0xFF and 0 <= device <= 0x1F):
        return None
    return domain, bus, device


def pci_text(key: tuple[int, int, int]) -> str:
    """The log's spelling of a PCI address: ``0000:17:00``."""
    return f"{key[0]:04x}:{key[1]:02x}:{key[2]:02x}"
