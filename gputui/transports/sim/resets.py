"""The simulated GPUs' fitness and the reset commands: ``reset_plan`` and ``reset_run`` as the collector
answers them, with nothing real ever run.

Each simulated GPU reports the fitness figures a healthy RTX PRO 6000 gives through NVML (ECC on, no row
remapped, the driver's recovery action NONE, persistence mode on). The wedged host's GPU ``FAULTED_GPU``
takes a contained ECC error at the wedge: Xid 94 in the kernel log, a row remap pending and the driver's
recovery action "GPU Reset", so it is NOT READY until it is reset, whatever its memory says.

The plan is the collector's own rule (``agent.reset.plan.build_plan``) over the simulated host's facts: every
process holding a GPU holds its ``/dev/nvidiaN``, ``/dev/nvidiactl`` and ``/dev/nvidia-uvm`` (so any GPU
process blocks, as on a real host, and a defunct one makes it a reboot), the collector itself holds every
node and steps aside, and each GPU's modes are those its fitness says. ``reset_run`` plans again and refuses
unless the plan is "go" with the confirmed steps, like the collector's; then every step "succeeds" with the
line nvidia-smi prints, and what the reset clears stops counting: the recovery action back to NONE, the
pending remap done, the Xid marked cleared.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gputui.agent import protocol
from gputui.agent.reset.plan import build_plan
from gputui.agent.reset.run import STEPPED_ASIDE, verified
from gputui.core.link import LinkError, LinkOptions
from gputui.core.model import GpuFitness, XidEvent, replace, safe
from gputui.transports.sim.scenario import (
    FAULT_XID,
    FAULT_XID_DETAIL,
    FAULTED_GPU,
    GPU_COUNT,
    RECOVERY_GPU_RESET,
    SimProc,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SMI_PATH = "/usr/bin/nvidia-smi"
SYSTEMCTL_PATH = "/usr/bin/systemctl"
RESET_CLEARED = "GPU reset since"
"""What the collector says of an Xid a later reset of its GPU cleared."""


def healthy_fitness(read_s: float) -> GpuFitness:
    """A fit GPU's figures, read at ``read_s``."""
    return GpuFitness(
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        remap_pending=False,
        remap_failure=False,
        ecc_enabled=True,
        ecc_uncorrected_volatile=0,
        ecc_uncorrected_aggregate=0,
        clock_event_reasons=0,
        persistence_mode=True,
        recovery_action=0,
        read_time=read_s,
    )


def faulted_fitness(read_s: float, fault_s: float) -> GpuFitness:
    """``FAULTED_GPU``'s figures after its contained ECC error at ``fault_s``."""
    return replace(
        healthy_fitness(read_s),
        remapped_rows_uncorrectable=1,
        remap_pending=True,
        ecc_uncorrected_volatile=1,
        ecc_uncorrected_aggregate=1,
        recovery_action=RECOVERY_GPU_RESET,
        xids=(XidEvent(FAULT_XID, fault_s, "kernel log", safe(FAULT_XID_DETAIL)),),
    )


def reset_fitness(read_s: float, fault_s: float, reset_s: float) -> GpuFitness:
    """The faulted GPU once reset at ``reset_s``: the remap done, the driver asks for nothing, the Xid kept
    as history that no longer counts."""
    return replace(
        healthy_fitness(read_s),
        remapped_rows_uncorrectable=1,
        ecc_uncorrected_aggregate=1,
        xids=(XidEvent(FAULT_XID, fault_s, "kernel log", safe(FAULT_XID_DETAIL), cleared=RESET_CLEARED),),
    )


def _step_output(step: dict[str, Any], bus_id: str) -> str:
    """What nvidia-smi and systemctl print for a step that worked."""
    argv = step["argv"]
    if step["kind"] == protocol.STEP_PERSISTENCE_OFF:
        return f"Disabled persistence mode for GPU {bus_id}.\nAll done."
    if step["kind"] == protocol.STEP_PERSISTENCE_ON:
        return f"Enabled persistence mode for GPU {bus_id}.\nAll done."
    if step["kind"] == protocol.STEP_RESET and "-i" in argv:
        return f"GPU {bus_id} was successfully reset.\nAll done."
    if step["kind"] == protocol.STEP_RESET:
        return "All done."
    return ""


class SimResets:
    """The reset half of ``SimLink``: the GPUs' fitness, and the reset commands against the simulated
    host."""

    target: str
    boot_id: str
    agent_pid: int
    _options: LinkOptions
    _clock: Callable[[], float]
    _lock: threading.Lock
    _procs: dict[int, SimProc]
    _fault_s: float | None
    """When ``FAULTED_GPU`` took its error (None: it has not, or this host has no fault)."""
    _reset_s: dict[int, float]
    """GPU index -> when the simulated collector last reset it."""

    def _advance(self, now_s: float) -> None:
        raise NotImplementedError

    def _settle(self) -> None:
        raise NotImplementedError

    def _uuid(self, index: int) -> str:
        raise NotImplementedError

    def _bus_id(self, index: int) -> str:
        raise NotImplementedError

    def _fitness(self, index: int, now_s: float) -> GpuFitness:
        """GPU ``index``'s fitness as the collector reads it now (with the lock held)."""
        fault_s = self._fault_s
        if index != FAULTED_GPU or fault_s is None or fault_s > now_s:
            return healthy_fitness(now_s)
        reset_s = self._reset_s.get(index)
        if reset_s is not None and reset_s > fault_s:
            return reset_fitness(now_s, fault_s, reset_s)
        return faulted_fitness(now_s, fault_s)

    def _holders(self) -> list[dict[str, Any]]:
        """Who holds the device nodes, as the collector's scan says it (with the lock held)."""
        holders = [
            {
                "pid": self.agent_pid,
                "start_ticks": 1,
                "name": "python3",
                "state": "S",
                "uid": 0,
                "user": "root",
                "cmdline": ["python3", "-c", "gputui collector"],
                "devices": sorted(
                    [f"/dev/nvidia{i}" for i in range(GPU_COUNT)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
                ),
                "unit": None,
                "service": None,
                "kind": protocol.HOLDER_OWN,
            }
        ]
        for proc in sorted(self._procs.values(), key=lambda p: p.pid):
            if not proc.gpu_mib or (proc.state == "Z" and not proc.live_threads):
                continue
            stuck = proc.state in ("D", "Z")
            holders.append(
                {
                    "pid": proc.pid,
                    "start_ticks": proc.start_ticks,
                    "name": proc.name[:64],
                    "state": proc.state,
                    "uid": proc.uid,
                    "user": proc.user[:64],
                    "cmdline": list(proc.cmdline[:8]),
                    "devices": sorted(
                        [f"/dev/nvidia{i}" for i in proc.gpu_mib] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
                    ),
                    "unit": None,
                    "service": None,
                    "kind": protocol.HOLDER_STUCK if stuck else protocol.HOLDER_PROCESS,
                }
            )
        return holders

    def _plan(self, words: Any) -> dict[str, Any]:
        """The plan for the GPUs ``words`` names (None: every GPU), as ``agent.reset.plan.make_plan`` builds
        it on a real host. Called with the lock held."""
        if words is not None and (not isinstance(words, list) or not all(isinstance(w, str) for w in words)):
            raise LinkError(
                f"{self.target}: reset failed: gpus must be a list of GPU indexes or UUIDs, or null"
            )
        now_s = self._clock()
        self._advance(now_s)
        self._settle()
        gpus = [
            {
                "index": index,
                "uuid": self._uuid(index),
                "minor": index,
                "error": None,
                "persistence": self._fitness(index, now_s).persistence_mode,
                "display_active": False,
                "mig_current": False,
                "mig_pending": False,
            }
            for index in range(GPU_COUNT)
        ]
        try:
            plan = build_plan(
                words,
                gpus,
                self._holders(),
                0,
                False,
                SMI_PATH,
                SYSTEMCTL_PATH,
                read_only=self._options.read_only,
            )
        except ValueError as exc:
            raise LinkError(f"{self.target}: {protocol.RESET_PLAN_COMMAND} failed: {exc}") from None
        plan["own_pid"] = self.agent_pid
        return plan

    def _reset_plan(self, command: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return {"plan": dict(self._plan(command.get("gpus")), boot_id=self.boot_id)}

    def _reset_run(self, command: dict[str, Any]) -> dict[str, Any]:
        """Plan again, refuse what the collector refuses, then "run" the steps: nothing real is run."""
        if self._options.read_only:
            raise LinkError(
                f"{self.target}: reset_run failed: read-only mode: reset refused, nothing was run"
            )
        expected = command.get("steps")
        if not isinstance(expected, list):
            raise LinkError(
                f"{self.target}: reset_run failed: "
                "steps must be the list of the confirmed plan's command lines"
            )
        with self._lock:
            plan = self._plan(command.get("gpus"))
            if plan["verdict"] != protocol.RESET_GO:
                return {"refused": f"the plan's verdict is now {plan['verdict']}", "plan": plan}
            if [step["argv"] for step in plan["steps"]] != expected:
                return {"refused": "the plan changed since it was shown: nothing was run", "plan": plan}
            by_uuid = {gpu["uuid"]: gpu["index"] for gpu in plan["gpus"]}
            outcomes = []
            for step in plan["steps"]:
                index = by_uuid.get(step.get("uuid"))
                bus_id = self._bus_id(index) if index is not None else ""
                outcomes.append(dict(step, result=protocol.STEP_OK, rc=0, output=_step_output(step, bus_id)))
                outcomes[-1]["elapsed_s"] = 0.9 if step["kind"] == protocol.STEP_RESET else 0.1
            reset_s = self._clock()
            for gpu in plan["gpus"]:
                self._reset_s[gpu["index"]] = reset_s
            after = self._plan(command.get("gpus"))
        return {
            "plan": plan,
            "stepped_aside": STEPPED_ASIDE,
            "released": True,
            "steps": outcomes,
            "after": after,
            "verified": verified(plan, after, outcomes),
        }
