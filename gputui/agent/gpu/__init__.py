"""The GPU backends behind one interface: NVML, nvidia-smi, or none.

NVML through pynvml whenever the bindings import (the host's own, else the copy shipped with the collector)
and the library loads; the driver's ``nvidia-smi`` only where the NVML library itself cannot be loaded;
nothing where neither works, the host error saying why. A backend's module is imported only when it is
chosen: a host in NVML mode never imports the nvidia-smi code, and the reverse.
"""

from __future__ import annotations

from gputui.agent.gpu.limits import NVML_DEADLINE_S as NVML_DEADLINE_S
from gputui.agent.gpu.limits import PROCESS_UTIL_INTERVAL_S as PROCESS_UTIL_INTERVAL_S
from gputui.agent.gpu.limits import TELEMETRY_INTERVAL_S as TELEMETRY_INTERVAL_S
from gputui.agent.gpu.tools import which

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gputui.agent.gpu.backend import Backend


def open_backend(
    use_pynvml: bool, smi_interval_s: float, nvml_deadline_s: float, telemetry_interval_s: float
) -> Backend:
    """The started backend for this host.

    Args:
        use_pynvml: Try NVML first (False: nvidia-smi, if present).
        smi_interval_s: Seconds between nvidia-smi's samples, in nvidia-smi mode.
        nvml_deadline_s: Seconds each device's NVML calls may take per sample.
        telemetry_interval_s: Seconds between NVML reads of utilisation, temperature and power.
    """
    nvml: Any = None
    if use_pynvml:
        from gputui.agent.gpu import nvmlapi

        if nvmlapi.pynvml is not None:
            from gputui.agent.gpu.nvml import NvmlBackend

            nvml = NvmlBackend(nvml_deadline_s, telemetry_interval_s)
            nvml.start()
            if not nvml.library_missing:
                return nvml
    smi = which("nvidia-smi")
    if smi is not None:
        if nvml is not None:
            nvml.close()
        from gputui.agent.gpu.smi import SmiBackend

        backend = SmiBackend(smi, smi_interval_s)
        backend.start()
        return backend
    if nvml is not None:
        return nvml  # its host error names the library it cannot load; it tries again every few seconds
    from gputui.agent.gpu.none import NoBackend

    if use_pynvml:
        return NoBackend("no NVML: pynvml cannot be imported and nvidia-smi is not on PATH")
    return NoBackend("nvidia-smi is not on PATH (NVML not used)")
