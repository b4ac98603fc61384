"""GPU reset plans: what holds the device files, which modes block ``nvidia-smi -r``, and the steps.

Read on the GPU host by the collector (stdlib only, Python 3.8). A plan is facts and one rule
(``build_plan``): every process holding a ``/dev/nvidia*`` node (fds and mappings), persistence, MIG and
display modes of each GPU, whether NVSwitches tie the GPUs into one baseboard, which tools are there. The
client words it (``gputui.core.actions.reset_plan``); the collector runs it (``reset_run``), planning again
first.
Nothing here signals anything, and no command line is ever built from a string of the host's: the only
commands are the full paths of ``systemctl`` and ``nvidia-smi`` with fixed options, a GPU's UUID as read
from the driver and a unit name that matched ``UNIT_NAME``.
"""

from __future__ import annotations

import functools
import os
import re

from gputui.agent.args import select_gpus
from gputui.agent.calls import CallTimeout, Worker
from gputui.agent.gpu.tools import which
from gputui.agent.proc.procfs import (
    fd_links,
    mapped_paths,
    read_cgroup,
    read_cmdline,
    read_real_uid,
    read_stat,
)
from gputui.agent.protocol import (
    BLOCK_DISPLAY,
    BLOCK_GPU_ERROR,
    BLOCK_HOLDER,
    BLOCK_MIG,
    BLOCK_MODES_UNKNOWN,
    BLOCK_NO_SMI,
    BLOCK_NVSWITCH,
    BLOCK_PERSISTENCE,
    BLOCK_READ_ONLY,
    BLOCK_UNREADABLE,
    HOLDER_GPU_SERVICE,
    HOLDER_GPUTUI,
    HOLDER_OWN,
    HOLDER_PROCESS,
    HOLDER_SERVICE,
    HOLDER_STUCK,
    RESET_BLOCKED,
    RESET_GO,
    RESET_REBOOT,
    RESET_UNKNOWN,
    STEP_PERSISTENCE_OFF,
    STEP_PERSISTENCE_ON,
    STEP_RESET,
    STEP_START_SERVICE,
    STEP_STOP_SERVICE,
    UNIT_NAME,
    gpu_stack_service,
    is_gputui_command,
)
from gputui.agent.wire import wire_cmdline, wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

DEVICE_PREFIX = "/dev/nvidia"
TEST_PREFIX_ENV = "GPUTUI_TEST_DEVICE_PREFIX"
"""Tests only: where the device nodes are looked for instead of /dev/nvidia (a file a test process holds)."""
MODES_DEADLINE_S = 5.0
"""How long reading every GPU's persistence, MIG and display modes through NVML may take."""
SMI_QUERY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 60.0
"""``systemctl stop``: the fabric manager and DCGM may take tens of seconds to let go."""
PERSISTENCE_TIMEOUT_S = 30.0
RESET_TIMEOUT_S = 120.0
HOLDER_CMDLINE_BYTES = 2048
_SERVICE_CGROUP = re.compile(r"/system\.slice/(?:[^/]+\.slice/)*([^/]+\.service)(?:/.*)?$")
SERVICE_ORDER = (
    "dcgm-exporter",
    "gputui",
    "nvidia-dcgm",
    "nv-hostengine",
    "dcgm",
    "nvidia-fabricmanager",
    "nvidia-persistenced",
)
"""Units are stopped monitors first, the device daemons last (persistenced, which keeps the driver loaded, at
the very end) and started again in the reverse order; a unit matching none of these goes first."""


def device_prefix() -> str:
    return os.environ.get(TEST_PREFIX_ENV) or DEVICE_PREFIX


# ----------------------------------------------------------------------------------------------------------
# Who holds the device nodes


def _unit_of(cgroup: str | None) -> str | None:
    match = _SERVICE_CGROUP.search(cgroup or "")
    if match is None or not UNIT_NAME.fullmatch(match.group(1)):
        return None
    return match.group(1)


def _user_name(uid: int | None) -> str | None:
    if uid is None:
        return None
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _kind(
    pid: int, own_pid: int, state: str, cmdline: list[str], unit: str | None, service: str | None
) -> str:
    if pid == own_pid:
        return HOLDER_OWN
    if state == "D" or state == "Z":  # a holder that is a zombie still has threads inside the driver
        return HOLDER_STUCK
    if unit is not None:
        return HOLDER_SERVICE
    if service is not None:
        return HOLDER_GPU_SERVICE
    if is_gputui_command(cmdline):
        return HOLDER_GPUTUI
    return HOLDER_PROCESS


def scan_holders(prefix: str, own_pid: int) -> tuple[list[dict[str, Any]], int]:
    """Every process with a node under ``prefix`` open or mapped, and how many processes' files could not
    be read (another user's, without privilege): (holders, unreadable)."""
    holders: list[dict[str, Any]] = []
    unreadable = 0
    try:
        names = os.listdir("/proc")
    except OSError:
        return [], 1
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            os.listdir(f"/proc/{pid}/fd")
        except PermissionError:
            unreadable += 1
            continue
        except OSError:
            continue  # gone, or a kernel thread without a file table
        nodes = {link for link in fd_links(pid) if link.startswith(prefix)} | mapped_paths(pid, prefix)
        if not nodes:
            continue
        stat = read_stat(pid)
        if stat is None:
            continue
        argv = read_cmdline(pid) or []
        unit = _unit_of(read_cgroup(pid))
        service = gpu_stack_service(argv, stat.name)
        cmdline, _cut, _bytes = wire_cmdline(argv, HOLDER_CMDLINE_BYTES)
        uid = read_real_uid(pid)
        holders.append(
            {
                "pid": pid,
                "start_ticks": stat.start_ticks,
                "name": wire_text(stat.name, 64),
                "state": stat.state,
                "uid": uid,
                "user": wire_text(_user_name(uid), 64),
                "cmdline": cmdline,
                "devices": sorted(nodes),
                "unit": unit,
                "service": service,
                "kind": _kind(pid, own_pid, stat.state, argv, unit, service),
            }
        )
    holders.sort(key=lambda h: h["pid"])
    return holders, unreadable


def nvswitch_present(prefix: str) -> bool:
    """Whether the host has NVSwitch nodes (an HGX baseboard: its GPUs are reset together)."""
    folder, base = os.path.split(prefix)
    try:
        return any(entry.startswith(base + "-nvswitch") for entry in os.listdir(folder or "/"))
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------------------
# GPU modes


def _nvml_modes() -> list[dict[str, Any]] | None:
    """Every GPU's index, UUID, minor number and modes through NVML; None where NVML cannot be used."""
    from gputui.agent.gpu import nvmlapi

    nv = nvmlapi.pynvml
    if nv is None:
        return None

    def flag(call: Any, *args: Any) -> bool | None:
        try:
            return bool(call(*args))
        except Exception:
            return None

    def read() -> list[dict[str, Any]]:
        nv.nvmlInit()
        try:
            gpus = []
            for index in range(nv.nvmlDeviceGetCount()):
                gpu: dict[str, Any] = {"index": index, "uuid": None, "minor": None, "error": None}
                try:
                    handle = nv.nvmlDeviceGetHandleByIndex(index)
                    gpu["uuid"] = nvmlapi.nvml_text(functools.partial(nv.nvmlDeviceGetUUID, handle))
                    try:
                        gpu["minor"] = int(nv.nvmlDeviceGetMinorNumber(handle))
                    except Exception:
                        gpu["minor"] = None
                    gpu["persistence"] = flag(nv.nvmlDeviceGetPersistenceMode, handle)
                    gpu["display_active"] = flag(nv.nvmlDeviceGetDisplayActive, handle)
                    try:
                        current, pending = nv.nvmlDeviceGetMigMode(handle)
                        gpu["mig_current"], gpu["mig_pending"] = bool(current), bool(pending)
                    except Exception:  # not a MIG-capable GPU
                        gpu["mig_current"] = gpu["mig_pending"] = False
                except Exception as exc:
                    gpu["error"] = wire_text(nvmlapi.nvml_error_text(exc), 300)
                gpus.append(gpu)
            return gpus
        finally:
            nv.nvmlShutdown()

    worker = Worker("gputui-reset-modes")
    try:
        return worker.call(read, MODES_DEADLINE_S)
    except CallTimeout:
        return [{"index": None, "uuid": None, "error": "NVML calls timed out"}]
    except Exception:
        return None
    finally:
        worker.stop()


def _smi_flag(text: str) -> bool | None:
    word = text.strip().lower()
    if word in ("enabled", "yes", "1"):
        return True
    if word in ("disabled", "no", "0"):
        return False
    return None


def _smi_modes(smi: str) -> list[dict[str, Any]] | None:
    """The same through ``nvidia-smi --query-gpu`` (where NVML cannot be loaded)."""
    from gputui.agent.gpu.tools import run_bounded

    fields = "index,uuid,persistence_mode,display_active,mig.mode.current,mig.mode.pending"
    rc, output = run_bounded([smi, "--query-gpu=" + fields, "--format=csv,noheader"], SMI_QUERY_TIMEOUT_S)
    if rc != 0:
        return None
    gpus = []
    for line in output.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 6 or not parts[0].isdigit():
            continue
        mig = _smi_flag(parts[4])
        gpus.append(
            {
                "index": int(parts[0]),
                "uuid": wire_text(parts[1], 80) if parts[1].startswith("GPU-") else None,
                "minor": None,
                "persistence": _smi_flag(parts[2]),
                "display_active": _smi_flag(parts[3]),
                "mig_current": False if parts[4].startswith("[N/A") else mig,
                "mig_pending": False if parts[5].startswith("[N/A") else _smi_flag(parts[5]),
                "error": None if parts[1].startswith("GPU-") else wire_text(line, 300),
            }
        )
    return gpus or None


def read_modes(smi: str | None, use_nvml: bool = True) -> list[dict[str, Any]] | None:
    modes = _nvml_modes() if use_nvml else None
    if modes is None and smi is not None:
        modes = _smi_modes(smi)
    return modes


# ----------------------------------------------------------------------------------------------------------
# The rule


def _gpu_nodes(holder: dict[str, Any], prefix: str) -> tuple[set[int], bool]:
    """The GPU minors a holder's nodes name, and whether it holds a node that names no GPU (nvidiactl)."""
    minors: set[int] = set()
    shared = False
    for device in holder["devices"]:
        rest = device[len(prefix) :]
        if rest.isdigit():
            minors.add(int(rest))
        else:
            shared = True
    return minors, shared


def _service_rank(unit: str) -> int:
    stem = unit[: -len(".service")]
    for rank, name in enumerate(SERVICE_ORDER):
        if stem == name or stem.startswith(name + "-") or stem.startswith(name + "@"):
            return rank + 1
    return 0


def build_plan(
    words: Iterable[str] | None,
    gpus: list[dict[str, Any]] | None,
    holders: list[dict[str, Any]],
    unreadable: int,
    nvswitch: bool,
    smi: str | None,
    systemctl: str | None,
    prefix: str = DEVICE_PREFIX,
    read_only: bool = False,
    root: bool = True,
) -> dict[str, Any]:
    """The plan: blockers (each with its ``effect``: a step of the plan, block, reboot, unknown), the steps
    in order, and the verdict. Raises ValueError for a GPU word that names no GPU."""
    blockers: list[dict[str, Any]] = []
    notes: list[str] = []

    def block(code: str, effect: str, **facts: Any) -> None:
        blockers.append(dict(code=code, effect=effect, **facts))

    if gpus is None:
        selected: list[dict[str, Any]] = []
        block(BLOCK_MODES_UNKNOWN, RESET_UNKNOWN)
    else:
        selected = select_gpus(gpus, words)
    if smi is None:
        block(BLOCK_NO_SMI, RESET_BLOCKED)
    if read_only:
        block(BLOCK_READ_ONLY, RESET_BLOCKED)
    minors = {g["minor"] if g.get("minor") is not None else g.get("index") for g in selected}
    relevant = []
    for holder in holders:
        held, shared = _gpu_nodes(holder, prefix)
        if shared or held & minors or (not held and not shared):
            relevant.append(holder)
    units: list[str] = []
    for holder in relevant:
        kind = holder["kind"]
        if kind == HOLDER_OWN:
            effect = "step"
        elif kind == HOLDER_SERVICE:
            unit = holder["unit"]
            if systemctl is None:  # worded as BLOCK_NO_SYSTEMCTL
                effect = RESET_BLOCKED
            else:
                effect = "step"
                if unit not in units:
                    units.append(unit)
        elif kind == HOLDER_STUCK:
            effect = RESET_REBOOT
        else:
            effect = RESET_BLOCKED
        block(BLOCK_HOLDER, effect, pid=holder["pid"], holder=holder)
    if unreadable:
        block(BLOCK_UNREADABLE, RESET_UNKNOWN, count=unreadable)
    persistence_on: list[str] = []
    for gpu in selected:
        uuid = gpu.get("uuid")
        if gpu.get("error") or not uuid:
            block(BLOCK_GPU_ERROR, RESET_REBOOT, gpu=gpu.get("index"), detail=gpu.get("error") or "no UUID")
            continue
        if gpu.get("persistence") is None or gpu.get("mig_current") is None:
            block(BLOCK_MODES_UNKNOWN, RESET_UNKNOWN, gpu=gpu["index"], uuid=uuid)
        if gpu.get("persistence"):
            persistence_on.append(uuid)
            block(BLOCK_PERSISTENCE, "step", gpu=gpu["index"], uuid=uuid)
        if gpu.get("mig_current"):
            block(BLOCK_MIG, RESET_BLOCKED, gpu=gpu["index"], uuid=uuid)
        elif gpu.get("mig_pending"):
            notes.append(f"GPU {gpu['index']}: the reset turns MIG mode on (pending)")
        if gpu.get("display_active"):
            block(BLOCK_DISPLAY, RESET_REBOOT, gpu=gpu["index"], uuid=uuid)
    if nvswitch and gpus is not None and len(selected) < len(gpus):
        block(BLOCK_NVSWITCH, RESET_BLOCKED, missing=[g["index"] for g in gpus if g not in selected])
    if not root:
        notes.append("not running as root: nvidia-smi -r and systemctl stop need root")
    units.sort(key=_service_rank)
    steps: list[dict[str, Any]] = []
    smi_path = smi or "nvidia-smi"
    for unit in units:
        steps.append(
            _step(STEP_STOP_SERVICE, [systemctl or "systemctl", "stop", unit], STOP_TIMEOUT_S, unit=unit)
        )
    for uuid in persistence_on:
        steps.append(
            _step(STEP_PERSISTENCE_OFF, [smi_path, "-pm", "0", "-i", uuid], PERSISTENCE_TIMEOUT_S, uuid)
        )
    resettable = [g["uuid"] for g in selected if g.get("uuid") and not g.get("error")]
    if nvswitch:
        steps.append(_step(STEP_RESET, [smi_path, "-r"], RESET_TIMEOUT_S))
    else:
        for uuid in resettable:
            steps.append(_step(STEP_RESET, [smi_path, "-r", "-i", uuid], RESET_TIMEOUT_S, uuid))
    for uuid in persistence_on:
        steps.append(
            _step(STEP_PERSISTENCE_ON, [smi_path, "-pm", "1", "-i", uuid], PERSISTENCE_TIMEOUT_S, uuid)
        )
    for unit in reversed(units):
        steps.append(
            _step(STEP_START_SERVICE, [systemctl or "systemctl", "start", unit], STOP_TIMEOUT_S, unit=unit)
        )
    effects = {b["effect"] for b in blockers}
    verdict = (
        RESET_REBOOT
        if RESET_REBOOT in effects
        else RESET_BLOCKED
        if RESET_BLOCKED in effects
        else RESET_UNKNOWN
        if RESET_UNKNOWN in effects or not selected
        else RESET_GO
    )
    return {
        "verdict": verdict,
        "gpus": selected,
        "all_gpus": [] if gpus is None else gpus,
        "blockers": blockers,
        "steps": steps,
        "notes": notes,
        "nvswitch": nvswitch,
        "smi": smi,
        "systemctl": systemctl,
        "persistence_on": persistence_on,
    }


def _step(
    kind: str, argv: list[str], timeout_s: float, uuid: str | None = None, unit: str | None = None
) -> dict[str, Any]:
    return {"kind": kind, "argv": argv, "timeout_s": timeout_s, "uuid": uuid, "unit": unit}


def make_plan(
    words: Iterable[str] | None, own_pid: int, read_only: bool = False, use_nvml: bool = True
) -> dict[str, Any]:
    """Read this host's facts now and build the plan (``build_plan``)."""
    prefix = device_prefix()
    smi = which("nvidia-smi")
    systemctl = which("systemctl")
    gpus = read_modes(smi, use_nvml)
    holders, unreadable = scan_holders(prefix, own_pid)
    plan = build_plan(
        None if words is None else list(words),
        gpus,
        holders,
        unreadable,
        nvswitch_present(prefix),
        smi,
        systemctl,
        prefix,
        read_only,
        os.geteuid() == 0,
    )
    plan["own_pid"] = own_pid
    return plan
