"""A fake ``libnvidia-ml.so.1`` for tests on machines without an NVIDIA GPU.

The C library in ``fakenvml.c`` implements part of the NVML C API with the
real ABI, so any NVML client (pynvml, gpustat, nvitop) can load it through
``LD_LIBRARY_PATH``. Its only input is the state file named by the
``FAKE_NVML_STATE`` environment variable, which it re-reads whenever the file
changes. This module builds the library and renders state files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tests.cbuild import build_library, library_cflags, write_state

__all__ = [
    "LIB_NAME",
    "OMIT_GROUPS",
    "SOURCE",
    "FakeGpu",
    "FakeHolder",
    "FakeMig",
    "FakeNvmlState",
    "build",
    "env_for",
]

LIB_NAME = "libnvidia-ml.so.1"
SOURCE = Path(__file__).with_name("fakenvml.c")
CFLAGS = library_cflags(LIB_NAME)

HOLDER_KINDS = ("compute", "graphics", "invisible", "ghost")


OMIT_GROUPS = {
    "v3": "FAKENVML_NO_V3",
    "v2": "FAKENVML_NO_V2",
    "power": "FAKENVML_NO_POWER",
    "health": "FAKENVML_NO_HEALTH",
    "fabric": "FAKENVML_NO_FABRIC",
}
"""Symbol groups a build can leave out, as older drivers lack them (see the top of ``fakenvml.c``):
``v3`` a driver before R510 (no ``*RunningProcesses_v3``, no ``nvmlDeviceGetMemoryInfo_v2``), ``v2`` an
older one (no ``_v2`` process lists, PCI info, count or handle calls), ``power`` no power queries,
``health`` no row-remap, page-retirement or event calls, ``fabric`` a driver before R525 (no
``nvmlDeviceGetGpuFabricInfo``, ``nvmlDeviceGetGpuFabricInfoV``). ``nvmlDeviceGetFieldValues`` is always
there; a driver before R565 is modelled per GPU instead: no ``recovery_action`` (field 230 answers
NOT_SUPPORTED) or ``unsupported="recovery"``."""


def build(out_dir: Path, omit: tuple[str, ...] = ()) -> Path:
    """Compile the fake library into ``out_dir/libnvidia-ml.so.1``, without the symbol groups in ``omit``.

    Raises RuntimeError when no C compiler is available or compilation fails;
    callers should let that fail the run rather than skip tests.
    """
    return build_library("fakenvml", SOURCE, LIB_NAME, out_dir, omit, OMIT_GROUPS)


def _check_value(value: str) -> str:
    if any(c in value for c in '"\n\r#') or value == "":
        raise ValueError(f"fakenvml: value {value!r} cannot be written to a state file")
    return value


def _quote(value: str | bytes) -> str:
    if isinstance(value, bytes):
        # Any bytes (invalid UTF-8 included) as the library reads them back: \xHH for all but plain ASCII.
        return "".join(chr(b) if 0x21 <= b < 0x7F and b not in b'"#\\' else f"\\x{b:02x}" for b in value)
    _check_value(value)
    if any(c.isspace() for c in value):
        return f'"{value}"'
    return value


_HEALTH_KEYS = (
    "remap_corr",
    "remap_unc",
    "remap_pending",
    "remap_failure",
    "retired_pending",
    "ecc_mode",
    "ecc_unc_volatile",
    "ecc_corr_volatile",
    "ecc_unc_aggregate",
    "ecc_corr_aggregate",
    "clock_reasons",
    "persistence",
    "health_error",
    "unsupported",
    "recovery_action",
    "fabric_state",
    "fabric_status",
    "fabric_health_mask",
    "fabric_clique",
    "fabric_cluster_uuid",
    "fabric_health_summary",
)


@dataclass
class FakeMig:
    """One MIG device of a GPU in MIG mode (a ``mig`` line after its GPU's): a GPU instance with its compute
    instance, at MIG device index ``slot``. ``None`` leaves a key to the library's default (see
    ``fakenvml.c``)."""

    slot: int
    uuid: str | None = None
    profile: str | None = None
    name: str | None = None
    total_mib: int | None = None
    gi: int | None = None
    ci: int | None = None

    def render(self, gpu: int) -> str:
        parts = [f"mig {int(gpu)} {int(self.slot)}"]
        for key in ("uuid", "profile", "name", "total_mib", "gi", "ci"):
            value = getattr(self, key)
            if value is not None:
                parts.append(f"{key}={_quote(str(value))}")
        return " ".join(parts)


@dataclass
class FakeGpu:
    """One GPU line. ``None`` leaves a key to the library's default; ``name`` may be bytes (any bytes)."""

    name: str | bytes = "NVIDIA RTX PRO 6000 Blackwell"
    total_mib: int = 49152
    baseline_mib: int = 3
    reserved_mib: int = 0
    uuid: str | None = None
    pci: str | None = None
    serial: str | None = None
    util_pct: int = 0
    mem_util_pct: int = 0
    temp_c: int = 40
    power_mw: int = 60000
    power_limit_mw: int = 600000
    fan_pct: int | None = None
    error: str | None = None  # e.g. "GPU_IS_LOST", "NOT_SUPPORTED", "UNKNOWN"
    hang_ms: int = 0
    # Health (None: the library's default: nothing remapped or pending, no ECC error, ECC and persistence on).
    remap_corr: int | None = None
    remap_unc: int | None = None
    remap_pending: int | None = None
    remap_failure: int | None = None
    retired_pending: int | None = None
    ecc_mode: int | None = None
    ecc_unc_volatile: int | None = None
    ecc_corr_volatile: int | None = None
    ecc_unc_aggregate: int | None = None
    ecc_corr_aggregate: int | None = None
    clock_reasons: int | None = None  # a bit mask (0x8 HW slowdown, 0x40 HW thermal, 0x80 power brake)
    persistence: int | None = None
    health_error: str | None = None  # e.g. "RESET_REQUIRED": every health query returns it
    unsupported: str | None = None
    """Comma list of remap,retired,ecc,clocks,persistence,events,recovery,fabric,memory: those queries answer
    NOT_SUPPORTED ("recovery": nvmlDeviceGetFieldValues as a whole, and no nvmlEventTypeGpuRecoveryAction
    among the supported event types; "memory": both memory info calls, as on a unified-memory GB10)."""
    recovery_action: int | None = None
    """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (field 230): 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P,
    4 drain and reset. None: that field answers NOT_SUPPORTED, as a driver before R565."""
    fabric_state: int | str | None = None
    """nvmlGpuFabricInfo state: 0 NOT_SUPPORTED, 1 NOT_STARTED, 2 IN_PROGRESS, 3 COMPLETED (or the name).
    None: no NVSwitch fabric, the fabric-info calls answer NOT_SUPPORTED; the other fabric_* need it."""
    fabric_status: str | int | None = None  # an nvmlReturn_t name or number; None: SUCCESS
    fabric_health_mask: int | None = None  # healthMask (v2 on), NVML_GPU_FABRIC_HEALTH_MASK_* fields
    fabric_clique: int | None = None  # cliqueId
    fabric_cluster_uuid: str | None = None  # clusterUuid as 32 hex digits, dashes allowed
    fabric_health_summary: int | None = None  # healthSummary (v3): NVML_GPU_FABRIC_HEALTH_SUMMARY_*
    display_active: bool | None = None
    mig_current: bool | None = None
    mig_pending: bool | None = None
    mig_max: int | None = None
    """What nvmlDeviceGetMaxMigDeviceCount answers in MIG mode (the library's default: 7)."""
    migs: list[FakeMig] = field(default_factory=list)
    """Its MIG devices (seen only while ``mig_current``)."""
    proc_util_error: str | None = None  # what nvmlDeviceGetProcessUtilization alone returns

    def render(self, index: int) -> str:
        parts = [f"gpu {index}"]
        for key in (
            "name",
            "total_mib",
            "baseline_mib",
            "reserved_mib",
            "uuid",
            "pci",
            "serial",
            "util_pct",
            "mem_util_pct",
            "temp_c",
            "power_mw",
            "power_limit_mw",
            "fan_pct",
            "error",
            "hang_ms",
            *_HEALTH_KEYS,
            "display_active",
            "mig_current",
            "mig_pending",
            "mig_max",
            "proc_util_error",
        ):
            value = getattr(self, key)
            if value is None or (key == "hang_ms" and not value):
                continue
            if isinstance(value, bool):
                value = int(value)
            parts.append(f"{key}={_quote(value if isinstance(value, bytes) else str(value))}")
        return " ".join(parts)


@dataclass
class FakeHolder:
    """Memory held on a GPU by a pid.

    kind: "compute" (default) or "graphics" count only while the pid is alive
    and not a zombie; "invisible" counts and is listed even without
    /proc/<pid>; "ghost" counts in used memory but is never listed.
    """

    gpu: int
    pid: int
    mib: int
    kind: str = "compute"
    sm_pct: int | None = None
    """With any of the four figures set, nvmlDeviceGetProcessUtilization reports a sample for it."""
    mem_pct: int | None = None
    enc_pct: int | None = None
    dec_pct: int | None = None
    mig: int | None = None
    """The MIG device (its slot) of ``gpu`` the process runs on: listed there as well as on the GPU."""

    def render(self) -> str:
        if self.kind not in HOLDER_KINDS:
            raise ValueError(f"fakenvml: unknown holder kind {self.kind!r}")
        line = f"holder {int(self.gpu)} {int(self.pid)} {int(self.mib)}"
        if self.kind != "compute":
            line = f"{line} {self.kind}"
        for key, value in (
            ("sm", self.sm_pct),
            ("mem", self.mem_pct),
            ("enc", self.enc_pct),
            ("dec", self.dec_pct),
            ("mig", self.mig),
        ):
            if value is not None:
                line = f"{line} {key}={int(value)}"
        return line


@dataclass
class FakeNvmlState:
    driver: str = "570.124.06"
    cuda: int = 12080
    init_error: str | None = None
    gpus: list[FakeGpu] = field(default_factory=list)
    holders: list[FakeHolder] = field(default_factory=list)
    xids: list[tuple[int, int]] = field(default_factory=list)
    """(GPU index, Xid) critical Xid events, in order: an NVML event set delivers those added after it was
    made, once each."""
    recoveries: list[tuple[int, int]] = field(default_factory=list)
    """(GPU index, action) nvmlEventTypeGpuRecoveryAction events (eventData = the action), in order, the
    same way: a set delivers those added after it was made, once each, to sets that registered the type.
    The library counts each kind on its own, so appending to either list at any time is safe; xid lines are
    written before recovery lines, and a set that finds both kinds waiting gets them in that order."""

    @classmethod
    def with_gpus(cls, count: int = 8, **gpu_kwargs: object) -> FakeNvmlState:
        return cls(gpus=[FakeGpu(**gpu_kwargs) for _ in range(count)])  # type: ignore[arg-type]

    def add_holder(
        self, gpu: int, pid: int, mib: int, kind: str = "compute", **util_pct: int | None
    ) -> FakeHolder:
        """``util_pct``: sm_pct, mem_pct, enc_pct, dec_pct (``FakeHolder``)."""
        holder = FakeHolder(gpu, pid, mib, kind, **util_pct)
        self.holders.append(holder)
        return holder

    def render(self) -> str:
        lines = [f"driver {_check_value(self.driver)}", f"cuda {int(self.cuda)}"]
        if self.init_error:
            lines.append(f"init_error {_check_value(self.init_error)}")
        lines.extend(gpu.render(i) for i, gpu in enumerate(self.gpus))
        lines.extend(mig.render(i) for i, gpu in enumerate(self.gpus) for mig in gpu.migs)
        lines.extend(h.render() for h in self.holders)
        lines.extend(f"xid {int(gpu)} {int(code)}" for gpu, code in self.xids)
        lines.extend(f"recovery {int(gpu)} {int(action)}" for gpu, action in self.recoveries)
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        """Atomically replace ``path`` with the rendered state.

        Each write gets a strictly later mtime than the previous one for the
        same path, so the library notices it even when two writes land within
        one filesystem timestamp tick with the same size.
        """
        path = Path(path)
        text = self.render()
        write_state(path, text, ".fakenvml-")


def env_for(lib_dir: Path, state_path: Path) -> dict[str, str]:
    """A copy of os.environ that makes a subprocess load the fake library."""
    env = dict(os.environ)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(lib_dir) + (os.pathsep + old if old else "")
    env["FAKE_NVML_STATE"] = str(state_path)
    return env
