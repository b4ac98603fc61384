"""DCGM 4.x series names in a Prometheus answer, made from the recorded ``fleet.json`` (no real sample).

dcgm-exporter names each series exactly as the field is named in its counters file, and its default file
still lists the pre-4.6 names: no recording of a real dcgm-exporter with the new names is at hand, and the
answers in this folder come from the loopback stand-in (``tests/integration/dcgm_exporter.py``) scraped by a
real Prometheus (``record.py``). So these answers are the recorded one with series *renamed* per NVIDIA's
``dcgm_fields.h`` (DCGM 4.6.0), each new series a copy of a recorded ``DCGM_FI_DEV_XID_ERRORS`` series of
the same GPU (its labels, its sample time) under the new name, with the value set:

* 230: ``DCGM_FI_DEV_XID_ERRORS`` -> ``DCGM_FI_DEV_XID_ERROR``;
* 392: ``DCGM_FI_DEV_RETIRED_PENDING`` -> ``DCGM_FI_DEV_PAGE_RETIRED_PENDING``;
* 393: ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`` -> ``DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL``;
* 394: ``DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS`` -> ``DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL``;
* 395: ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` -> ``DCGM_FI_DEV_ROW_REMAP_FAILED``;
* 1523 (new in 4.5.0 as ``DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION``) -> ``DCGM_FI_DEV_GPU_RECOVERY_ACTION``.

The old names stay as deprecated aliases in 4.6; ``DCGM_FI_DEV_ROW_REMAP_PENDING`` (396) kept its name.
Field 1523's value is NVML's ``nvmlDeviceGpuRecoveryAction_t`` (0 None, 1 GPU Reset, 2 Node Reboot, ...).
"""

from __future__ import annotations

import copy
from typing import Any

from tests.data.prometheus import load_answer

OLD_XID = "DCGM_FI_DEV_XID_ERRORS"
RENAMED = {
    "DCGM_FI_DEV_XID_ERRORS": "DCGM_FI_DEV_XID_ERROR",
    "DCGM_FI_DEV_RETIRED_PENDING": "DCGM_FI_DEV_PAGE_RETIRED_PENDING",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "DCGM_FI_DEV_ROW_REMAP_FAILED",
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": "DCGM_FI_DEV_GPU_RECOVERY_ACTION",
}
"""Old name -> new name (``dcgm_fields.h``)."""


def _xid_series(document: dict[str, Any], host: str, gpu: int) -> dict[str, Any]:
    return next(
        item
        for item in document["data"]["result"]
        if item["metric"].get("__name__") == OLD_XID
        and item["metric"].get("Hostname") == host
        and item["metric"].get("gpu") == str(gpu)
    )


def with_series(document: dict[str, Any], host: str, gpu: int, name: str, value: float) -> dict[str, Any]:
    """``document`` with one more series of ``host``'s GPU ``gpu``: the recorded Xid series' labels and time
    under ``name``, with ``value``."""
    item = copy.deepcopy(_xid_series(document, host, gpu))
    item["metric"]["__name__"] = name
    item["value"] = [item["value"][0], repr(float(value))]
    document["data"]["result"].append(item)
    return document


def renamed_answer(host: str = "gpu-a") -> dict[str, Any]:
    """The recorded answer with ``host``'s Xid series under DCGM 4.6's name only (as an exporter whose
    counters file was moved to the new names sends them)."""
    document = load_answer()
    for item in document["data"]["result"]:
        metric = item["metric"]
        if metric.get("Hostname") == host and metric.get("__name__") in RENAMED:
            metric["__name__"] = RENAMED[metric["__name__"]]
    return document


def renamed_body(values: dict[str, float], gpus: int = 2, hostname: str = "gpu-n") -> str:
    """A dcgm-exporter ``/metrics`` body of ``gpus`` idle GPUs with the new names (memory as the recorded
    ``fleet.json``'s idle GPUs), each fitness field of GPU1 set from ``values`` (new name -> value), 0 on
    the others. Labels as dcgm-exporter sets them (``gpu``, ``UUID``, ``device``, ``modelName``,
    ``Hostname``, ``DCGM_FI_DRIVER_VERSION``)."""
    document = load_answer()
    recorded = _xid_series(document, "gpu-a", 0)["metric"]
    names = {
        "DCGM_FI_DEV_FB_USED": (3, 3),
        "DCGM_FI_DEV_FB_FREE": (81405, 81405),
        "DCGM_FI_DEV_FB_RESERVED": (512, 512),
        "DCGM_FI_DEV_ROW_REMAP_PENDING": (0, values.get("DCGM_FI_DEV_ROW_REMAP_PENDING", 0)),
        **{new: (0, values.get(new, 0)) for new in RENAMED.values()},
    }
    lines: list[str] = []
    for name, (idle, set_value) in names.items():
        lines.append(f"# HELP {name} {name}.")
        lines.append(f"# TYPE {name} gauge")
        for gpu in range(gpus):
            labels = {
                "gpu": str(gpu),
                "UUID": f"GPU-{hostname}-{gpu:04d}",
                "device": f"nvidia{gpu}",
                "modelName": recorded["modelName"],
                "Hostname": hostname,
                "DCGM_FI_DRIVER_VERSION": recorded["DCGM_FI_DRIVER_VERSION"],
            }
            body = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(f"{name}{{{body}}} {set_value if gpu == 1 else idle}")
    return "\n".join(lines) + "\n"
