"""pynvml for the collector: the bindings, readable errors, and the fallbacks of NVML's versioned calls.

The bindings are the host's own pynvml (nvidia-ml-py) when it has one, else the copy shipped with the
collector: either way ``import pynvml``, which loads nothing yet (the library is loaded by ``nvmlInit``).
A driver from before R510 lacks the ``_v3`` process queries and v2 memory info, older ones the ``_v2`` calls
too: ``NvmlVersions`` is the one place where a versioned call falls back.
"""

from __future__ import annotations

from gputui.agent.calls import CallTimeout
from gputui.agent.proc.procfs import json_safe, text_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

try:  # NVIDIA's bindings (nvidia-ml-py); the library itself is only loaded by nvmlInit.
    import pynvml
except Exception:  # pragma: no cover - depends on the host
    pynvml = None


def bindings_origin() -> str | None:
    """Where the bindings come from: "installed" on the host, "bundled" with the collector, None: none."""
    if pynvml is None:
        return None
    loader = getattr(getattr(pynvml, "__spec__", None), "loader", None)
    return "bundled" if getattr(loader, "bundled", False) else "installed"


def nvml_error_text(exc: BaseException) -> str:
    """A readable one-line description of an NVML failure."""
    if pynvml is not None and isinstance(exc, pynvml.NVMLError):
        code = getattr(exc, "value", None)
        known = {
            getattr(pynvml, "NVML_ERROR_GPU_IS_LOST", -1): "GPU is lost",
            getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1): "NVIDIA driver not loaded",
            getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1): "libnvidia-ml.so.1 not found",
            getattr(pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", -1): "NVML function not found (driver too old?)",
            getattr(pynvml, "NVML_ERROR_NO_PERMISSION", -1): "no permission to use NVML",
            getattr(pynvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", -1): (
                "NVML library and kernel driver versions do not match (reboot or reload the driver)"
            ),
            getattr(pynvml, "NVML_ERROR_TIMEOUT", -1): "NVML call timed out",
        }
        if code in known:
            return known[code]
        try:
            return f"NVML error: {exc}"
        except Exception:
            return f"NVML error {code}"
    if isinstance(exc, CallTimeout):
        return "NVML call timed out"
    return f"{type(exc).__name__}: {exc}"


def _as_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return text_of(value)
    return json_safe(str(value))


def _nvml_code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None) if pynvml is not None and isinstance(exc, pynvml.NVMLError) else None


def nvml_is_lost(exc: BaseException) -> bool:
    """Whether an NVML failure says the GPU itself is gone (never a reason to try another call)."""
    return _nvml_code(exc) == getattr(pynvml, "NVML_ERROR_GPU_IS_LOST", -1)


def nvml_unreachable(exc: BaseException) -> str | None:
    """What a GPU's failed read says as a fact (``protocol.UNREACHABLE_STATES``): lost, RESET_REQUIRED, timed
    out; None for any other failure."""
    from gputui.agent.protocol import UNREACHABLE_LOST, UNREACHABLE_RESET_REQUIRED, UNREACHABLE_TIMED_OUT

    if isinstance(exc, CallTimeout):
        return UNREACHABLE_TIMED_OUT
    code = _nvml_code(exc)
    if code is None:
        return None
    known = {
        getattr(pynvml, "NVML_ERROR_GPU_IS_LOST", 15): UNREACHABLE_LOST,
        getattr(pynvml, "NVML_ERROR_RESET_REQUIRED", 16): UNREACHABLE_RESET_REQUIRED,
        getattr(pynvml, "NVML_ERROR_TIMEOUT", 10): UNREACHABLE_TIMED_OUT,
    }
    return known.get(code)


def nvml_library_missing(exc: BaseException) -> bool:
    """Whether an NVML failure says the library itself (libnvidia-ml.so.1) cannot be loaded on this host."""
    return _nvml_code(exc) == getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1)


def nvml_function_missing(exc: BaseException) -> bool:
    """Whether an NVML failure says this driver (or these bindings) lack the function that was called.

    pynvml says it three ways: ``NVMLError`` FUNCTION_NOT_FOUND from a versioned call, its own
    ``NVMLLibraryMismatchError`` (not an ``NVMLError``) from an unversioned wrapper whose newest version the
    driver lacks, and ``AttributeError`` for a wrapper an older pynvml does not have.
    """
    if isinstance(exc, AttributeError):
        return True
    mismatch = getattr(pynvml, "NVMLLibraryMismatchError", None)
    if mismatch is not None and isinstance(exc, mismatch):
        return True
    return _nvml_code(exc) == getattr(pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", -1)


class NvmlVersions:
    """One NVML query in all its versions, newest first: the one place where a versioned call falls back.

    Each version is a callable; a version this driver lacks (``nvml_function_missing``) is remembered and not
    tried again. Any other failure, but a lost GPU, falls back to the next version for this call only (a
    version may be present and still refuse a device, or a struct version). The failure of the oldest version
    is the caller's.
    """

    def __init__(self, name: str, *versions: Callable[..., Any], sticky: bool = False) -> None:
        """``sticky``: a version that failed once is not tried again either (one device's calls)."""
        self.name = name
        self.versions = versions
        self.sticky = sticky
        self.missing: set[int] = set()

    def __call__(self, *args: Any) -> Any:
        failure: BaseException | None = None
        for number, version in enumerate(self.versions):
            if number in self.missing:
                continue
            try:
                return version(*args)
            except Exception as exc:
                if nvml_is_lost(exc):
                    raise
                if nvml_function_missing(exc) or (self.sticky and number < len(self.versions) - 1):
                    self.missing.add(number)
                failure = exc
        if failure is None:  # every version is missing from this driver
            failure = RuntimeError(f"{self.name}: no version of it in this NVML")
        raise failure


def _nvml_raw(symbol: str) -> Any:
    """A C function of the loaded libnvidia-ml by name (raises NVMLError FUNCTION_NOT_FOUND when absent)."""
    return pynvml._nvmlGetFunctionPointer(symbol)


def _nvml_check(ret: int) -> None:
    if ret != 0:
        raise pynvml.NVMLError(ret)


def nvml_count_v1() -> int:
    import ctypes

    count = ctypes.c_uint(0)
    _nvml_check(_nvml_raw("nvmlDeviceGetCount")(ctypes.byref(count)))
    return count.value


def nvml_handle_v1(index: int) -> Any:
    import ctypes

    handle = pynvml.c_nvmlDevice_t()
    _nvml_check(_nvml_raw("nvmlDeviceGetHandleByIndex")(ctypes.c_uint(index), ctypes.byref(handle)))
    return handle


def nvml_pci_bus_id(symbol: str) -> Callable[[Any], Any]:
    """The bus id from ``nvmlDeviceGetPciInfo`` (v1) or ``_v2``: both structs start with its 16 chars."""

    def call(handle: Any) -> Any:
        import ctypes

        buffer = ctypes.create_string_buffer(256)  # larger than every version of nvmlPciInfo_t
        _nvml_check(_nvml_raw(symbol)(handle, buffer))
        return buffer.raw[:16].split(b"\0", 1)[0]

    return call


class _NvmlProcessInfoV1:
    __slots__ = ("pid", "usedGpuMemory")

    def __init__(self, pid: int, used: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used


def nvml_processes_v1(symbol: str) -> Callable[[Any], list[Any]]:
    """The process list of a driver from before the ``_v2`` calls (``nvmlProcessInfo_v1_t``: pid, bytes)."""

    def call(handle: Any) -> list[Any]:
        import ctypes

        class Info(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

        fn = _nvml_raw(symbol)
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret == 0:
            return []
        if ret != getattr(pynvml, "NVML_ERROR_INSUFFICIENT_SIZE", 7):
            _nvml_check(ret)
        count.value = count.value * 2 + 5  # room for processes started meanwhile
        infos = (Info * count.value)()
        _nvml_check(fn(handle, ctypes.byref(count), infos))
        unavailable = (1 << 64) - 1
        return [
            _NvmlProcessInfoV1(info.pid, None if info.usedGpuMemory == unavailable else info.usedGpuMemory)
            for info in infos[: count.value]
        ]

    return call


def pynvml_call(attribute: str) -> Callable[..., Any]:
    """pynvml's wrapper ``attribute``, looked up at call time (AttributeError when these bindings lack it)."""
    return lambda *args: getattr(pynvml, attribute)(*args)


def nvml_text(call: Callable[[], Any]) -> str | None:
    """A string an NVML call returns, as text; invalid UTF-8 (a corrupt name) is kept visible as ``\\xNN``.

    pynvml decodes C strings strictly and raises UnicodeDecodeError, which still holds the bytes.
    """
    try:
        return _as_str(call())
    except UnicodeDecodeError as exc:
        return text_of(exc.object) if isinstance(exc.object, bytes) else None


def nvml_memory_v2(handle: Any) -> tuple[int, int, int | None]:
    """(used, total, reserved) bytes; v2 reports the driver's reservation apart from used (R510 and later)."""
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    return memory.used, memory.total, memory.reserved


def nvml_memory_v1(handle: Any) -> tuple[int, int, int | None]:
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return memory.used, memory.total, None


MIG_DEVICES_MAX = 16
"""The most MIG device indexes read per GPU, whatever ``nvmlDeviceGetMaxMigDeviceCount`` says (7 on an
A100 or H100): an answer past it is the driver's error, not a GPU cut into more."""


def _mig_profile(name: str | None) -> str | None:
    """``1g.10gb`` from a MIG device's name (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``); None without one."""
    if not name or " MIG " not in name:
        return None
    profile = name.rsplit(" MIG ", 1)[1].strip()
    return profile[:40] or None


def nvml_mig_devices(
    handle: Any, processes: Callable[[Any], list[int]] | None = None
) -> list[dict[str, Any]] | None:
    """The MIG devices of a GPU in MIG mode (one per compute instance, as CUDA sees them); None when MIG mode
    is off or not supported (``nvmlDeviceGetMigMode``).

    Each: ``slot`` (its MIG device index), ``uuid`` (``MIG-…``, what ``CUDA_VISIBLE_DEVICES`` takes),
    ``name``, ``profile`` (``1g.10gb``), ``memory_total_mib``, ``gi`` and ``ci`` (its GPU and compute instance
    ids), ``pids`` (the processes NVML lists on it, through ``processes``; None: not read). A MIG device
    index without one answers NOT_FOUND (``nvmlDeviceGetMigDeviceHandleByIndex``) and is passed over.
    Raises NVMLError when the devices cannot be listed (the lost GPU included).
    """
    nv = pynvml
    try:
        current, _pending = nv.nvmlDeviceGetMigMode(handle)
    except Exception as exc:
        if nvml_is_lost(exc):
            raise
        return None  # not a MIG-capable GPU (NOT_SUPPORTED), or a driver or pynvml without MIG
    if not current:
        return None
    count = min(int(nv.nvmlDeviceGetMaxMigDeviceCount(handle)), MIG_DEVICES_MAX)
    not_found = getattr(nv, "NVML_ERROR_NOT_FOUND", 6)
    found: list[dict[str, Any]] = []
    for slot in range(count):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception as exc:
            if _nvml_code(exc) == not_found:
                continue
            raise
        device = _mig_device(nv, slot, mig, processes)
        if device is not None:
            found.append(device)
    return found


def _mig_device(
    nv: Any, slot: int, mig: Any, processes: Callable[[Any], list[int]] | None
) -> dict[str, Any] | None:
    """One MIG device's entry (``nvml_mig_devices``); None for one without a UUID (nothing can name it)."""
    uuid = nvml_text(lambda: nv.nvmlDeviceGetUUID(mig))
    if not uuid:
        return None
    name = _optional(lambda: nvml_text(lambda: nv.nvmlDeviceGetName(mig)))
    memory = _optional(lambda: nv.nvmlDeviceGetMemoryInfo(mig))
    return {
        "slot": slot,
        "uuid": uuid[:80],
        "name": None if name is None else name[:96],
        "profile": _mig_profile(name),
        "memory_total_mib": None if memory is None else int(memory.total) >> 20,
        "gi": _optional(lambda: int(nv.nvmlDeviceGetGpuInstanceId(mig))),
        "ci": _optional(lambda: int(nv.nvmlDeviceGetComputeInstanceId(mig))),
        "pids": None if processes is None else _optional(lambda: processes(mig)),
    }


def _optional(call: Callable[[], Any]) -> Any:
    """A figure a MIG device (or this driver) may not give: None instead of an error, but for a lost GPU."""
    try:
        return call()
    except Exception as exc:
        if nvml_is_lost(exc):
            raise
        return None
