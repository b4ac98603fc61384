"""nvidia-smi's CSV output, parsed without trust.

Unreadable values ([N/A], [Not Supported], ERR!, empty) become None, names with commas are put back
together, a lost GPU ("Unable to determine the device handle for GPU…") becomes an error row of its own, and
nothing here ever raises on what nvidia-smi prints. Used by the collector's nvidia-smi backend and by the
client's reduced mode (no python3 on the host).
"""

from __future__ import annotations

import math
import re

from gputui.agent.protocol import GPU_UNREACHABLE, UNREACHABLE_LOST

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SMI_QUERY_GPU = (
    "index,name,uuid,pci.bus_id,memory.used,memory.total,"
    "utilization.gpu,temperature.gpu,power.draw,power.limit"
)
SMI_QUERY_APPS = "gpu_uuid,pid,used_memory"
SMI_MISSING = ("N/A", "ERR!", "")
SMI_GPU_FIELDS = 10
SMI_LOST = "[GPU is lost]"
SMI_LOST_REASON = "GPU is lost"
"""How nvidia-smi says the driver lost a GPU: in a figure, and as the reason it could not open one."""
SMI_BAD_MEMORY = ("[Unknown Error]", "ERR!", SMI_LOST)
_PCI_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_HANDLE_ERROR = re.compile(
    r"device handle for GPU ?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:?\s*(.*)"
)


def _split_csv(line: str) -> list[str]:
    """Fields of one nvidia-smi CSV line (honours double quotes; strips blanks around fields)."""
    fields: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(line):
        char = line[i]
        if quoted:
            if char == '"':
                if i + 1 < len(line) and line[i + 1] == '"':
                    current.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                current.append(char)
        elif char == '"' and not "".join(current).strip():
            current = []
            quoted = True
        elif char == ",":
            fields.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        i += 1
    fields.append("".join(current).strip())
    return fields


def smi_value(text: str) -> str | None:
    """A field's text, or None for nvidia-smi's "no value" forms ([N/A], [Not Supported], ERR!, "")."""
    text = text.strip()
    if text in SMI_MISSING or (text.startswith("[") and text.endswith("]")):
        return None
    return text


def _smi_number(text: str) -> float | None:
    value = smi_value(text)
    if value is None:
        return None
    for suffix in ("MiB", "%", "W", "C"):  # units, should nvidia-smi print them despite nounits
        if value.endswith(suffix):
            value = value[: -len(suffix)].strip()
            break
    try:
        number = float(value)
    except ValueError:
        return None
    if math.isnan(number) or math.isinf(number):
        return None
    return number


def _smi_int(text: str) -> int | None:
    number = _smi_number(text)
    if number is None or abs(number) > 2**53:
        return None
    return int(number)


def _smi_float(text: str) -> float | None:
    return _smi_number(text)


def _regroup_name(fields: list[str]) -> list[str]:
    """Undo the split of an unquoted name containing commas: find where the uuid/PCI fields start again."""
    for start in range(3, len(fields) - 1):
        uuid, pci = fields[start], fields[start + 1]
        if uuid.startswith(("GPU-", "MIG-")) or _PCI_BUS_ID.match(pci):
            if len(fields) - start + 2 >= SMI_GPU_FIELDS:
                return [fields[0], ", ".join(fields[1:start])] + fields[start:]
    return fields


def parse_smi_gpu_line(line: str) -> dict[str, Any] | None:
    """One line of ``nvidia-smi --query-gpu=<SMI_QUERY_GPU> --format=csv,noheader,nounits``.

    Unreadable values ([N/A], [Not Supported], ERR!, empty) become None; a name containing commas is put
    back together; extra trailing columns are ignored; a GPU whose memory figures cannot be read carries an
    ``error``. Never raises.

    Returns:
        A Gpu dict, or None for a header, blank or otherwise unusable line (no index).
    """
    line = line.strip("\r\n")
    if not line.strip():
        return None
    fields = _split_csv(line)
    index = _smi_int(fields[0]) if fields else None
    if index is None or index < 0 or index > 4095 or not fields[0].strip().isdigit():
        return None
    gpu: dict[str, Any] = {"index": index}
    if len(fields) < SMI_GPU_FIELDS:
        gpu["error"] = f"nvidia-smi printed {len(fields)} of {SMI_GPU_FIELDS} fields"
        return gpu
    if len(fields) > SMI_GPU_FIELDS:
        fields = _regroup_name(fields)[:SMI_GPU_FIELDS]
    gpu["name"] = smi_value(fields[1])
    gpu["uuid"] = smi_value(fields[2])
    gpu["pci_bus_id"] = smi_value(fields[3])
    gpu["memory_used_mib"] = _smi_int(fields[4])
    gpu["memory_total_mib"] = _smi_int(fields[5])
    gpu["memory_reserved_mib"] = None
    gpu["utilization_pct"] = _smi_int(fields[6])
    gpu["temperature_c"] = _smi_int(fields[7])
    gpu["power_w"] = _smi_float(fields[8])
    gpu["power_limit_w"] = _smi_float(fields[9])
    if gpu["memory_used_mib"] is None:
        raw = fields[4].strip()
        if raw in SMI_BAD_MEMORY or raw == "":
            gpu["error"] = "nvidia-smi: memory.used is %s" % (raw or "empty")
            if raw == SMI_LOST:
                gpu[GPU_UNREACHABLE] = UNREACHABLE_LOST
        else:
            gpu["error"] = f"nvidia-smi: memory.used not available ({raw[:40]})"
    return gpu


def pci_key(bus_id: str) -> str:
    """A PCI bus id in one spelling: nvidia-smi writes the domain with 8 digits in CSV, 4 in messages."""
    domain, _, rest = bus_id.partition(":")
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}"
    except ValueError:
        return bus_id.upper()


def parse_smi_handle_error(line: str) -> tuple[str, str] | None:
    """``Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost...`` -> (bus id, reason)."""
    match = _HANDLE_ERROR.search(line)
    if match is None:
        return None
    reason = match.group(2).strip().rstrip(".") or "unreachable"
    if "is lost" in reason:
        reason = SMI_LOST_REASON
    return pci_key(match.group(1)), reason


def with_lost_gpus(gpus: list[dict[str, Any]], lost: dict[str, str]) -> list[dict[str, Any]]:
    """``gpus`` plus an error row for each GPU nvidia-smi could not open (bus id -> reason), by index.

    A lost GPU has no line of its own, only its PCI bus id. NVML numbers GPUs in PCI bus order, so the lost
    one takes the index its bus id has among all of them (the first free index if a listed GPU holds that).
    A bus id that a listed GPU also has is that GPU, already shown.
    """
    listed = set(pci_key(str(g["pci_bus_id"])) for g in gpus if g.get("pci_bus_id"))
    missing = sorted(bus for bus in lost if bus not in listed)
    if not missing:
        return gpus
    order = sorted(listed | set(missing))
    used = set(g["index"] for g in gpus)
    rows = list(gpus)
    for bus in missing:
        index = order.index(bus)
        if index in used:
            index = min(set(range(len(order) + len(used) + 1)) - used)
        used.add(index)
        row = {"index": index, "pci_bus_id": bus, "error": lost[bus]}
        if lost[bus] == SMI_LOST_REASON:
            row[GPU_UNREACHABLE] = UNREACHABLE_LOST
        rows.append(row)
    return sorted(rows, key=lambda g: g["index"])


def parse_smi_gpu_output(text: str) -> list[dict[str, Any]]:
    """Every GPU of one block of ``--query-gpu`` output (headers and junk lines are skipped).

    A GPU nvidia-smi reports as unreachable ("Unable to determine the device handle for GPU…: GPU is lost")
    is an error row of its own (``with_lost_gpus``), never dropped: dropped, the host looks smaller and clean.
    """
    gpus: list[dict[str, Any]] = []
    lost: dict[str, str] = {}
    for line in text.splitlines():
        gpu = parse_smi_gpu_line(line)
        if gpu is not None:
            gpus.append(gpu)
            continue
        handle_error = parse_smi_handle_error(line)
        if handle_error is not None:
            lost[handle_error[0]] = handle_error[1]
    return with_lost_gpus(gpus, lost)


def parse_smi_apps_output(text: str) -> dict[str, list[dict[str, Any]]]:
    """``--query-compute-apps=gpu_uuid,pid,used_memory`` output: GPU uuid -> process dicts."""
    apps: dict[str, list[dict[str, Any]]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = _split_csv(line)
        if len(fields) < 3:
            continue
        uuid = smi_value(fields[0])
        pid = _smi_int(fields[1])
        if uuid is None or pid is None or pid <= 0 or not fields[1].strip().isdigit():
            continue
        apps.setdefault(uuid, []).append({"pid": pid, "used_mib": _smi_int(fields[2]), "type": "compute"})
    return apps


SMI_EXIT_GPU_LOST = 15


def smi_exit_error(returncode: int, output: str) -> str:
    """One readable line for a failed nvidia-smi run (exit 9: the driver is not loaded; 15: a GPU is lost).

    Quotes the first line that is not one of nvidia-smi's CSV lines (a GPU's figures say nothing about why).
    """
    first = ""
    for line in output.splitlines():
        if line.strip() and parse_smi_gpu_line(line) is None:
            first = line.strip()[:200]
            break
    if returncode == 9:
        return "NVIDIA driver not loaded (nvidia-smi exit 9)" + (": " + first if first else "")
    if returncode == SMI_EXIT_GPU_LOST:
        return "a GPU is lost (nvidia-smi exit 15)" + (": " + first if first else "")
    return f"nvidia-smi exited with status {returncode}" + (": " + first if first else "")
