"""nvidia-smi's CSV output, parsed without trust.

Unreadable values ([N/A], [Not Supported], ERR!, empty) become None, names with commas are put back
together, a GPU nvidia-smi cannot open ("Unable to determine the device handle for GPU…: GPU is lost" or
"…: Unknown Error") becomes an error row of its own, and nothing here ever raises on what nvidia-smi prints.
Memory a GPU does not report (a unified-memory GPU such as the GB10 prints ``[N/A]``) is unknown, not an
error. Every GPU line counts whatever nvidia-smi's exit status (``smi_run``): one GPU in error never hides
the others. The columns are the collector's query (``SMI_QUERY_GPU``) unless a header line (``--format=csv``
without ``noheader``) names others. Used by the collector's nvidia-smi backend and by the client's reduced
mode (no python3 on the host).
"""

from __future__ import annotations

import math
import re

from gputui.agent.protocol import GPU_MEMORY_UNREPORTED, GPU_UNREACHABLE, UNREACHABLE_LOST

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SMI_QUERY_GPU = (
    "index,name,uuid,pci.bus_id,memory.used,memory.total,"
    "utilization.gpu,temperature.gpu,power.draw,power.limit"
)
SMI_QUERY_APPS = "gpu_uuid,pid,used_memory"
SMI_GPU_COLUMNS = tuple(SMI_QUERY_GPU.split(","))
SMI_MISSING = ("N/A", "ERR!", "")
SMI_LOST = "[GPU is lost]"
SMI_LOST_REASON = "GPU is lost"
"""How nvidia-smi says the driver lost a GPU: in a figure, and as the reason it could not open one."""
SMI_BAD_MEMORY = ("[Unknown Error]", "ERR!", SMI_LOST)
SMI_UNREPORTED = ("[N/A]", "[Not Supported]", "N/A")
"""How nvidia-smi prints memory the GPU does not report (unified memory: GB10): unknown, not an error."""
SMI_EXIT_NO_DRIVER = (9, 12, 18)
"""Exit statuses that say no GPU of the host can be read: the driver is not loaded, the NVML library cannot
be loaded, or driver and library differ. Any other status leaves the GPU lines it printed standing."""
_PCI_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
# nvidia-smi writes "for GPU0000:3B:00.0" and "for GPU 0000:0B:00.0"; ``-L`` "for gpu 0000:08:00.0".
_HANDLE_ERROR = re.compile(
    r"device handle for GPU ?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:?\s*(.*)",
    re.IGNORECASE,
)
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")


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


def _regroup_name(fields: list[str], columns: tuple[str, ...]) -> list[str]:
    """Undo the split of an unquoted name containing commas: find where the uuid/PCI fields start again.

    Only where the name is followed by the uuid or the PCI bus id, which tell where it ends; elsewhere the
    extra fields are taken for trailing columns.
    """
    if "name" not in columns:
        return fields
    at = columns.index("name")
    after = columns[at + 1 : at + 3]
    for start in range(at + 2, len(fields)):
        found = {column: fields[start + i] for i, column in enumerate(after) if start + i < len(fields)}
        pci = found.get("pci.bus_id", "")
        if found.get("uuid", "").startswith(("GPU-", "MIG-")) or _PCI_BUS_ID.match(pci):
            if len(fields) - start + at + 1 >= len(columns):
                return fields[:at] + [", ".join(fields[at:start])] + fields[start:]
    return fields


def smi_header(line: str) -> tuple[str, ...] | None:
    """The column names of an nvidia-smi CSV header line (``index, name, memory.used [MiB], …``), or None
    for a line that is not one (it must name ``index``)."""
    fields = _split_csv(line.strip("\r\n"))
    columns = tuple(_HEADER_UNIT.sub("", field).strip().lower() for field in fields)
    if "index" not in columns or any(not column or " " in column for column in columns):
        return None
    return columns


def _memory_figures(raw_used: str, raw_total: str) -> dict[str, Any]:
    """The memory fields of one GPU line: figures, or unknown (not reported), or an ``error``."""
    out: dict[str, Any] = {
        "memory_used_mib": _smi_int(raw_used),
        "memory_total_mib": _smi_int(raw_total),
        "memory_reserved_mib": None,
    }
    if out["memory_used_mib"] is not None:
        return out
    raw = raw_used.strip()
    if raw in SMI_UNREPORTED:
        # A GPU without memory of its own to report (unified memory): unknown, judged by its processes.
        out[GPU_MEMORY_UNREPORTED] = True
    elif raw in SMI_BAD_MEMORY or raw == "":
        out["error"] = "nvidia-smi: memory.used is %s" % (raw or "empty")
        if raw == SMI_LOST:
            out[GPU_UNREACHABLE] = UNREACHABLE_LOST
    else:
        out["error"] = f"nvidia-smi: memory.used not available ({raw[:40]})"
    return out


def parse_smi_gpu_line(line: str, columns: tuple[str, ...] = SMI_GPU_COLUMNS) -> dict[str, Any] | None:
    """One line of ``nvidia-smi --query-gpu=<columns> --format=csv[,noheader][,nounits]``.

    ``columns``: the query's field names, ``SMI_GPU_COLUMNS`` by default (the collector's own query); a
    column the query lacks is None. Unreadable values ([N/A], [Not Supported], ERR!, empty) become None;
    memory the GPU does not report ([N/A], [Not Supported]: unified memory) is unknown with
    ``GPU_MEMORY_UNREPORTED``; a name containing commas is put back together; extra trailing columns are
    ignored; a GPU whose memory figures cannot be read ([Unknown Error], ERR!, [GPU is lost]) carries an
    ``error``. Never raises.

    Returns:
        A Gpu dict, or None for a header, blank or otherwise unusable line (no index).
    """
    line = line.strip("\r\n")
    if not line.strip() or "index" not in columns:
        return None
    fields = _split_csv(line)
    at_index = columns.index("index")
    raw_index = fields[at_index] if at_index < len(fields) else ""
    index = _smi_int(raw_index)
    if index is None or index < 0 or index > 4095 or not raw_index.strip().isdigit():
        return None
    gpu: dict[str, Any] = {"index": index}
    if len(fields) < len(columns):
        gpu["error"] = f"nvidia-smi printed {len(fields)} of {len(columns)} fields"
        return gpu
    if len(fields) > len(columns):
        fields = _regroup_name(fields, columns)[: len(columns)]
    value = dict(zip(columns, fields))

    def text(column: str) -> str | None:
        return smi_value(value.get(column, ""))

    gpu["name"] = text("name")
    gpu["uuid"] = text("uuid")
    gpu["pci_bus_id"] = text("pci.bus_id")
    if "memory.used" in value:
        gpu.update(_memory_figures(value["memory.used"], value.get("memory.total", "")))
    else:
        gpu.update(memory_used_mib=None, memory_total_mib=_smi_int(value.get("memory.total", "")))
        gpu["memory_reserved_mib"] = None
    gpu["utilization_pct"] = _smi_int(value.get("utilization.gpu", ""))
    gpu["temperature_c"] = _smi_int(value.get("temperature.gpu", ""))
    gpu["power_w"] = _smi_float(value.get("power.draw", ""))
    gpu["power_limit_w"] = _smi_float(value.get("power.limit", ""))
    error = gpu.pop("error", None)  # after the figures, as the wire has always ordered it
    if error is not None:
        gpu["error"] = error
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
    if "is lost" in reason.lower():
        reason = SMI_LOST_REASON
    return pci_key(match.group(1)), reason[:200]


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


def parse_smi_gpu_output(text: str, columns: tuple[str, ...] = SMI_GPU_COLUMNS) -> list[dict[str, Any]]:
    """Every GPU of one block of ``--query-gpu`` output (junk lines are skipped; a header line sets the
    columns of the lines after it).

    A GPU nvidia-smi reports as unreachable ("Unable to determine the device handle for GPU…: GPU is lost",
    "…: Unknown Error") is an error row of its own (``with_lost_gpus``), never dropped: dropped, the host
    looks smaller and clean.
    """
    gpus: list[dict[str, Any]] = []
    lost: dict[str, str] = {}
    for line in text.splitlines():
        gpu = parse_smi_gpu_line(line, columns)
        if gpu is not None:
            gpus.append(gpu)
            continue
        header = smi_header(line)
        if header is not None:
            columns = header
            continue
        handle_error = parse_smi_handle_error(line)
        if handle_error is not None:
            lost[handle_error[0]] = handle_error[1]
    return with_lost_gpus(gpus, lost)


def smi_run(returncode: int, text: str) -> tuple[list[dict[str, Any]], str | None]:
    """The GPUs and the host error of one finished ``--query-gpu`` run, whatever its exit status.

    nvidia-smi prints the GPUs it can read and the handle errors of those it cannot, then exits non-zero
    (15 for a lost GPU, 255 for "Unknown Error"): every GPU line stands, and each error is that GPU's row.
    The run is a host error only where it printed no GPU at all, or where its status says the driver or
    library is missing; a failure that no GPU row explains is said as well, beside the GPUs it printed.

    Returns:
        (GPU dicts, host error or None).
    """
    if returncode in SMI_EXIT_NO_DRIVER:
        return [], smi_exit_error(returncode, text)
    gpus = parse_smi_gpu_output(text)
    if returncode == 0:
        return gpus, None
    if not gpus:
        return [], smi_exit_error(returncode, text)
    explained = any(gpu.get("error") for gpu in gpus)
    return gpus, None if explained else smi_exit_error(returncode, text)


def parse_smi_apps_output(
    text: str, columns: tuple[str, ...] = tuple(SMI_QUERY_APPS.split(","))
) -> dict[str, list[dict[str, Any]]]:
    """``--query-compute-apps=gpu_uuid,pid,used_memory`` output: GPU uuid -> process dicts.

    ``columns``: the query's field names where it asked for others (``process_name`` may hold commas: it is
    read from both ends). A unified-memory GPU lists its processes' memory here though it reports none of
    its own.
    """
    apps: dict[str, list[dict[str, Any]]] = {}
    wanted = ("gpu_uuid", "pid", "used_memory")
    if any(name not in columns for name in wanted):
        return apps
    at = {name: columns.index(name) for name in wanted}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = _split_csv(line)
        if len(fields) < len(columns):
            continue
        if len(fields) > len(columns) and "process_name" in columns:
            named = columns.index("process_name")
            extra = len(fields) - len(columns)
            fields = (
                fields[:named] + [", ".join(fields[named : named + extra + 1])] + fields[named + extra + 1 :]
            )
        uuid = smi_value(fields[at["gpu_uuid"]])
        raw_pid = fields[at["pid"]]
        pid = _smi_int(raw_pid)
        if uuid is None or pid is None or pid <= 0 or not raw_pid.strip().isdigit():
            continue
        used = _smi_int(fields[at["used_memory"]])
        apps.setdefault(uuid, []).append({"pid": pid, "used_mib": used, "type": "compute"})
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
