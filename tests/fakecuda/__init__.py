"""A fake ``libcuda.so.1`` (the CUDA driver API) for tests on machines without an NVIDIA GPU.

The C library in ``fakecuda.c`` implements the driver calls a readiness probe makes (``cuInit``, device
lookup by ordinal or PCI bus id, a context, one allocation written with ``cuMemsetD8_v2`` or
``cuMemcpyHtoD_v2`` and read back with ``cuMemcpyDtoH_v2``, ``cuGetErrorName``...) with the ABI of
NVIDIA's ``cuda.h``, so a ``ctypes`` client can load it through ``LD_LIBRARY_PATH``. Its only input is the
state file named by the ``FAKE_CUDA_STATE`` environment variable, which it re-reads whenever the file
changes (a hung call polls it). This module builds the library and renders state files; the syntax is at
the top of ``fakecuda.c``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tests.cbuild import build_library, library_cflags, write_state

__all__ = [
    "HANG_STEPS",
    "LIB_NAME",
    "LOCKS_VAR",
    "OMIT_GROUPS",
    "SOURCE",
    "STATE_VAR",
    "FakeCudaGpu",
    "FakeCudaState",
    "build",
    "env_for",
]

LIB_NAME = "libcuda.so.1"
STATE_VAR = "FAKE_CUDA_STATE"
SOURCE = Path(__file__).with_name("fakecuda.c")
CFLAGS = library_cflags(LIB_NAME)

HANG_STEPS = ("init", "ctx", "alloc", "memcpy", "sync", "free")

OMIT_GROUPS = {
    "v2": "FAKECUDA_NO_V2",
    "pci": "FAKECUDA_NO_PCI",
    "foreign": "FAKECUDA_ONLY_INIT",
}
"""Symbol groups a build can leave out (see the top of ``fakecuda.c``): ``v2`` every ``*_v2`` symbol
(``cuCtxCreate_v2``, ``cuCtxDestroy_v2``, ``cuDevicePrimaryCtxRelease_v2``, ``cuMemAlloc_v2``,
``cuMemFree_v2``, ``cuMemsetD8_v2``, ``cuMemcpyHtoD_v2``, ``cuMemcpyDtoH_v2``), ``pci``
``cuDeviceGetByPCIBusId`` and ``cuDeviceGetPCIBusId``: together an old or foreign libcuda a probe cannot
use; ``foreign`` everything but ``cuInit``: a library of that name that is not NVIDIA's."""


def build(out_dir: Path, omit: tuple[str, ...] = ()) -> Path:
    """Compile the fake library into ``out_dir/libcuda.so.1``, without the symbol groups in ``omit``.

    Raises RuntimeError when no C compiler is available or compilation fails; callers should let that
    fail the run rather than skip tests.
    """
    return build_library("fakecuda", SOURCE, LIB_NAME, out_dir, omit, OMIT_GROUPS)


def _value(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in '"\n\r#'):
        raise ValueError(f"fakecuda: value {text!r} cannot be written to a state file")
    if any(c.isspace() for c in text):
        return f'"{text}"'
    return text


@dataclass
class FakeCudaGpu:
    """One ``gpu`` line; the devices' ordinals follow the list's order. ``None`` leaves a key to the
    library's default. Errors are CUresult names (``"SYSTEM_NOT_READY"``, ``"CUDA_ERROR_UNKNOWN"``) or
    numbers."""

    index: int | None = None
    """The GPU's own number (its default PCI id ``0000:XX:00.0`` with XX = 0x17 + index, as fakenvml's,
    and its default ``nvml_gpu``); None: its position in the list."""
    pci: str | None = None
    ctx_error: str | int | None = None
    alloc_error: str | int | None = None
    memcpy_error: str | int | None = None
    sync_error: str | int | None = None
    free_error: str | int | None = None
    hang: str | None = None
    """A step (``HANG_STEPS``) or a comma list: that call does not return while the state says so."""
    slow_ms: int = 0
    corrupt: bool = False
    stuck: bool = False
    """With ``hang``: the hung process cannot be reaped after SIGKILL while this says so (a tracer of its
    own holds its exit), as one stuck in the driver cannot exit; a test writes False to let it go."""
    compute_mode: int | None = None
    """CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: 0 default, 2 prohibited, 3 exclusive-process."""
    total_mib: int | None = None
    ctx_mib: int | None = None
    nvml_state: Path | str | None = None
    """A fakenvml state file: a live allocation (or context with ``ctx_mib``) appears there as a
    ``holder <nvml_gpu> <pid> <MiB>`` line, removed again on free or a normal exit."""
    nvml_gpu: int | None = None
    mig: str | None = None
    """``MIG-<uuid>``: this line is a MIG device, not a GPU: no ordinal, no PCI id; a device only where
    ``CUDA_VISIBLE_DEVICES`` names that UUID (as the driver makes one compute instance a device)."""
    nvml_mig: int | None = None
    """With ``nvml_state``: the holder line says ``mig=<n>``, so fakenvml lists it on that MIG device of
    ``nvml_gpu`` (and on the GPU itself)."""

    def render(self, position: int) -> str:
        index = position if self.index is None else self.index
        parts = [f"gpu {int(index)}"]
        for key in (
            "pci",
            "ctx_error",
            "alloc_error",
            "memcpy_error",
            "sync_error",
            "free_error",
            "hang",
            "slow_ms",
            "corrupt",
            "stuck",
            "compute_mode",
            "total_mib",
            "ctx_mib",
            "nvml_state",
            "nvml_gpu",
            "mig",
            "nvml_mig",
        ):
            value = getattr(self, key)
            if value is None or (key in ("slow_ms", "corrupt", "stuck") and not value):
                continue
            if isinstance(value, bool):
                value = int(value)
            parts.append(f"{key}={_value(value)}")
        return " ".join(parts)


@dataclass
class FakeCudaState:
    driver_version: int = 12080
    init_error: str | int | None = None
    gpus: list[FakeCudaGpu] = field(default_factory=list)

    @classmethod
    def with_gpus(cls, count: int = 8, **gpu_kwargs: object) -> FakeCudaState:
        return cls(gpus=[FakeCudaGpu(**gpu_kwargs) for _ in range(count)])  # type: ignore[arg-type]

    def show_in_nvml(self, nvml_state: Path) -> None:
        """Every GPU's allocations appear as holders in that fakenvml state file (``nvml_state``)."""
        for gpu in self.gpus:
            gpu.nvml_state = nvml_state

    def render(self) -> str:
        lines = [f"driver_version {int(self.driver_version)}"]
        if self.init_error is not None:
            lines.append(f"init_error {_value(self.init_error)}")
        lines.extend(gpu.render(i) for i, gpu in enumerate(self.gpus))
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        """Atomically replace ``path`` with the rendered state, with a strictly later mtime than the
        previous write to it, so the library notices even two writes within one timestamp tick."""
        path = Path(path)
        text = self.render()
        write_state(path, text, ".fakecuda-")


LOCKS_VAR = "GPUTUI_TEST_PROBE_LOCKS"
"""The folder gputui takes for its host-wide probe locks (``agent.gpu.probelock``) instead of /dev/shm's."""


def env_for(
    lib_dir: Path, state_path: Path, base: dict[str, str] | None = None, locks_dir: Path | None = None
) -> dict[str, str]:
    """A copy of ``base`` (default os.environ) that makes a subprocess load the fake libcuda.so.1; pass
    a fakenvml ``env()`` as ``base`` to load both fakes. ``locks_dir``: where its probes keep their
    host-wide locks (every gputui of one test shares it, as every gputui of a host shares /dev/shm's)."""
    env = dict(os.environ if base is None else base)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(lib_dir) + (os.pathsep + old if old else "")
    env[STATE_VAR] = str(state_path)
    if locks_dir is not None:
        env[LOCKS_VAR] = str(locks_dir)
    return env
