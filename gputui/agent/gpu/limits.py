"""How long and how often the GPU backends may ask the device."""

NVML_DEADLINE_S = 2.0
"""Seconds every device's NVML calls of one sample may take before that device is reported as timed out."""
TELEMETRY_INTERVAL_S = 1.0
"""Utilisation, temperature and power are read at most this often (and with every process list); memory,
what a clean-slate check watches at up to 10 Hz, on every sample."""
PROCESS_UTIL_INTERVAL_S = 5.0
"""Per-process utilisation (nvmlDeviceGetProcessUtilization: the driver's samples since the last call) is read
with a process list at most this often per GPU: the driver keeps a short buffer, and the call walks it."""
