"""``SimLink``: a simulated host behind the ``HostLink`` interface, driven by the collector's commands."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from gputui.agent import protocol
from gputui.agent.args import CommandError, optional_seconds
from gputui.agent.proc.owners import OWNER_USER
from gputui.agent.servers import ENDPOINT_DEFAULT_DEADLINE_S, ENDPOINT_GENERATE_MIN_INTERVAL_S
from gputui.agent.servers import messages as endpoint_messages
from gputui.core.link import HostLink, LinkError, LinkOptions
from gputui.core.model import (
    EndpointSample,
    Gpu,
    GpuFitness,
    GpuProcess,
    HostSnapshot,
    LiveThreads,
    Owner,
    Proc,
    ProfilerMark,
    opt_safe,
    replace,
    safe,
    safe_list,
)
from gputui.transports.sim import shared
from gputui.transports.sim.kills import SimKill, SimKills
from gputui.transports.sim.resets import SimResets
from gputui.transports.sim.scenario import (
    BOOT_EPOCH_S,
    BUSY_FROM_S,
    BUSY_UNTIL_S,
    D_RELEASE_S,
    DRAIN_S,
    ENDPOINT_PROBE_S,
    FAULTED_GPU,
    GPU_COUNT,
    GPU_NAME,
    GPU_TOTAL_MIB,
    HEALTHY_TARGET,
    IDLE_MIB,
    LAUNCHER_PID,
    PORT_LINGER_S,
    POWER_LIMIT_W,
    SCHEDULER_PID_BASE,
    SGLANG_SERVING,
    SHARED_TARGET,
    SPIN_POWER_W,
    STUCK_THREADS,
    VLLM_PID,
    VLLM_SERVING,
    WAITING_THREADS,
    WEDGED,
    Clock,
    SimProc,
    drain_s,
    healthy_processes,
    metrics_text,
    wedge_processes,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


SIM_PROBE_STEP_MS = (1.2, 180.0, 0.4, 210.0, 3.1, 9.8, 10.4, 21.0, 1.6, 12.5)
"""What each step of a probe takes on the simulated GPUs (``protocol.PROBE_STEPS``): the first context
dominates, as on real ones."""


class SimLink(SimKills, SimResets, HostLink):
    """A simulated host, driven by the same commands as a real agent.

    Args:
        target: The host's name; ``gpu-node-08`` is the healthy host, ``gpu-node-09`` the shared one,
            anything else replays the wedge.
        options: Intervals and read-only mode, as for any link.
        clock: Epoch seconds source for every time in the snapshots (default ``time.time``).
        wedged_at_s: Scenario seconds of serving before the schedulers wedge (0: wedged from the start).
        gpu_fault: The wedge starts with GPU ``FAULTED_GPU``'s contained ECC error, which only a reset
            clears (the demo's story); without it every GPU stays fit.
    """

    def __init__(
        self,
        target: str,
        options: LinkOptions | None = None,
        clock: Clock | None = None,
        wedged_at_s: float = 0.0,
        gpu_fault: bool = False,
    ) -> None:
        self.target = target
        self._options = options or LinkOptions()
        self._clock: Clock = clock or time.time
        self._wedged_at_s = wedged_at_s
        self._gpu_fault = gpu_fault
        self._memory_interval_s = self._options.memory_interval_s
        self._process_interval_s = self._options.process_interval_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._opened = False
        self._next_due_monotonic = 0.0
        self._start_s = self._clock()
        self._healthy = target == HEALTHY_TARGET
        self._shared = target == SHARED_TARGET
        self._wedging = not self._healthy and not self._shared
        procs = (
            healthy_processes()
            if self._healthy
            else shared.shared_processes()
            if self._shared
            else wedge_processes()
        )
        self._procs: dict[int, SimProc] = {p.pid: p for p in procs}
        self._fault_s: float | None = None
        self._reset_s: dict[int, float] = {}
        self._draining: list[tuple[int, int, float]] = []
        """(gpu index, MiB, epoch seconds the holder died): memory on its way back to the driver."""
        self._closing_ports: list[tuple[int, float]] = []
        """(port, epoch seconds its last holder died): in LISTEN for ``PORT_LINGER_S`` more."""
        self._server_pid = VLLM_PID if self._healthy else LAUNCHER_PID
        self._server_dead_at: float | None = None
        """When the process serving the host's /health died: from then on it is DOWN."""
        self._ops: dict[int, SimKill] = {}
        self._next_op = 0
        self.boot_id = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"boot.{target}.gputui.transports.sim"))
        self.agent_pid = 5999 if self._healthy else 6999 if self._shared else 4999

    # -- HostLink ---------------------------------------------------------------------------------------

    def open(self) -> None:
        if self._closed.is_set():
            raise LinkError(f"{self.target}: link closed")
        self._opened = True

    def next_snapshot(self, timeout_s: float) -> HostSnapshot | None:
        if not self._opened:
            raise LinkError(f"{self.target}: link not open")
        deadline = time.monotonic() + timeout_s
        while True:
            if self._closed.is_set():
                raise LinkError(f"{self.target}: link closed")
            now = time.monotonic()
            if now >= self._next_due_monotonic:
                with self._lock:
                    self._next_due_monotonic = now + self._memory_interval_s
                    return self._snapshot()
            if now >= deadline:
                return None
            # A configure command sets _wake so a shorter interval takes effect at once.
            self._wake.wait(min(self._next_due_monotonic, deadline) - now)
            self._wake.clear()

    @contextmanager
    def processes(self) -> Iterator[dict[int, SimProc]]:
        """The simulated host's process table by pid, held still while the caller reads or changes it (a
        scenario's turn of events: a pid reused, a survivor of the kill, a zombie never reaped)."""
        with self._lock:
            yield self._procs

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._closed.is_set():
            raise LinkError(f"{self.target}: link closed")
        try:
            return self._answer(command)
        except CommandError as exc:  # refused by the collector's own argument rules, worded as a collector's
            raise LinkError(f"{self.target}: {command.get('cmd')} failed: {exc}") from None

    def _answer(self, command: dict[str, Any]) -> dict[str, Any]:
        name = command.get("cmd")
        if name == protocol.CMD_CONFIGURE:
            with self._lock:
                if command.get("memory_interval_s") is not None:
                    self._memory_interval_s = float(command["memory_interval_s"])
                if command.get("process_interval_s") is not None:
                    self._process_interval_s = float(command["process_interval_s"])
                self._next_due_monotonic = min(
                    self._next_due_monotonic, time.monotonic() + self._memory_interval_s
                )
            self._wake.set()
            return {}
        if name == protocol.CMD_SAMPLE:
            with self._lock:
                return {"snapshot": self._snapshot().to_dict()}
        if name == protocol.CMD_CALIBRATE:
            with self._lock:
                snap = self._snapshot()
            return {"memory_used_mib": {g.key: g.memory_used_mib for g in snap.gpus}}
        if name == protocol.KILL_COMMAND:
            return self._kill(command)
        if name == protocol.KILL_WAIT_COMMAND:
            op = self._op(command)
            self._wait_op(op, optional_seconds(command, "timeout_s"))
            return self._reply(op, command.get("since"))
        if name == protocol.KILL_ABANDON_COMMAND:
            op = self._op(command)
            with self._lock:
                self._settle()
                if not op.done:
                    self._finish(op, self._clock(), abandoned=True)
            return self._reply(op, command.get("since"))
        if name == protocol.CMD_HEALTH:
            with self._lock:
                samples = [sample.to_dict() for sample in self._endpoints(self._clock())]
            found = [sample["url"] for sample in samples if sample["discovered"]]
            config = endpoint_messages.endpoint_config(
                [],
                found,
                False,
                True,
                ENDPOINT_PROBE_S,
                ENDPOINT_DEFAULT_DEADLINE_S,
                ENDPOINT_GENERATE_MIN_INTERVAL_S,
            )
            return {"config": config, "samples": samples}
        if name == protocol.PROBE_COMMAND:
            return self._probe(command)
        if name == protocol.RESET_PLAN_COMMAND:
            return self._reset_plan(command)
        if name == protocol.RESET_RUN_COMMAND:
            return self._reset_run(command)
        if name == protocol.CMD_QUIT:
            return {}
        raise LinkError(f"{self.target}: unknown command {name!r}")

    def _probe(self, command: dict[str, Any]) -> dict[str, Any]:
        """The readiness probe as a healthy driver answers it: every GPU that lists no process takes work
        (the wedged host's GPUs held by its stuck schedulers are not probed, as a collector leaves them)."""
        with self._lock:
            snapshot = self._snapshot()
        buffer_mib = command.get("buffer_mib") or protocol.PROBE_BUFFER_MIB
        probes = []
        for gpu in snapshot.gpus:
            entry: dict[str, Any] = {"index": gpu.index, "uuid": gpu.uuid, "pci_bus_id": gpu.pci_bus_id}
            if gpu.processes and not command.get("force"):
                entry.update(
                    result=protocol.PROBE_SKIPPED,
                    steps=[],
                    ms=0.0,
                    skip="it lists a process (--force probes it anyway)",
                )
            else:
                steps = [
                    {"step": step, "ms": ms}
                    for step, ms in zip(protocol.PROBE_STEPS, SIM_PROBE_STEP_MS, strict=True)
                ]
                entry.update(result=protocol.PROBE_OK, steps=steps, ms=sum(SIM_PROBE_STEP_MS), visible=True)
            probes.append(entry)
        deadline = command.get("deadline_s") or protocol.PROBE_DEADLINE_S
        return {"probes": probes, "deadline_s": deadline, "buffer_mib": buffer_mib, "time": self._clock()}

    def close(self) -> None:
        self._closed.set()
        self._wake.set()

    # -- the scenario ----------------------------------------------------------------------------------

    @property
    def memory_interval_s(self) -> float:
        """Seconds between snapshots now (changed by ``configure``)."""
        return self._memory_interval_s

    def _advance(self, now_s: float) -> None:
        """Apply the story's scheduled events up to ``now_s``. Called with the lock held."""
        if not self._wedging:
            return
        wedge_s = self._start_s + self._wedged_at_s
        if now_s >= wedge_s and self._gpu_fault:
            self._fault_s = wedge_s
        if now_s >= wedge_s:
            for proc in self._procs.values():
                if proc.defunct_on_wedge and proc.state != "Z":
                    proc.state = "Z"
                    proc.state_since = wedge_s
                    proc.rss_kib = 0
                    proc.live_threads = dict(proc.threads_on_wedge)
                    if not proc.live_threads:
                        # Its last thread exited: its device files closed, the driver frees its memory (long
                        # since, for a host wedged before the demo began).
                        freed_s = wedge_s if self._wedged_at_s > 0 else wedge_s - DRAIN_S
                        self._draining.extend((gpu, mib, freed_s) for gpu, mib in proc.gpu_mib.items())
                        proc.gpu_mib = {}
        if now_s >= wedge_s + D_RELEASE_S:
            for proc in self._procs.values():
                stuck = proc.state == "Z" and proc.live_threads == STUCK_THREADS
                if stuck and proc.pid != SCHEDULER_PID_BASE + FAULTED_GPU:
                    proc.live_threads = dict(WAITING_THREADS)

    def _gpu_used_mib(self, index: int, now_s: float) -> int:
        used = float(IDLE_MIB)
        for proc in self._procs.values():
            used += proc.gpu_mib.get(index, 0)
        for gpu, mib, died_s in self._draining:
            if gpu == index:
                used += mib * max(0.0, 1.0 - (now_s - died_s) / drain_s(gpu))
        return int(round(used))

    def _uuid(self, index: int) -> str:
        return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"gpu{index}.{self.target}.gputui.sim"))

    def _bus_id(self, index: int) -> str:
        return f"00000000:{0x18 + index * 0x10:02X}:00.0"

    def _gpu(self, index: int, now_s: float) -> Gpu:
        used_mib = self._gpu_used_mib(index, now_s)
        holders = tuple(
            GpuProcess(pid=p.pid, used_mib=p.gpu_mib[index])
            for p in sorted(self._procs.values(), key=lambda p: p.pid)
            if index in p.gpu_mib
        )
        invisible = shared.INVISIBLE.get(index) if self._shared else None
        if invisible is not None:
            holders += (GpuProcess(pid=invisible[0], used_mib=invisible[1], visible=False),)
            used_mib += invisible[1]
        on_gpu = [p for p in self._procs.values() if index in p.gpu_mib]
        busy = invisible is not None or any(p.state != "Z" for p in on_gpu)
        # A defunct rank's collective kernel keeps polling for its peers: 100 % busy at idle power.
        spinning = any(p.state == "Z" and p.live_threads for p in on_gpu)
        scenario_s = int(now_s - self._start_s)
        if busy:
            util_pct = 78 + (index * 7 + scenario_s * 3) % 19
            power_w = 310.0 + (index * 13 + scenario_s * 5) % 70
            temp_c = 66 + (index * 3 + scenario_s) % 9
        elif spinning:
            util_pct, power_w, temp_c = 100, SPIN_POWER_W + index % 3, 52 + index % 3
        elif used_mib > IDLE_MIB + 64:
            util_pct, power_w, temp_c = 0, 96.0 + index, 51 + index % 3
        else:
            util_pct, power_w, temp_c = 0, 21.0 + index % 4, 34 + index % 4
        return Gpu(
            index=index,
            name=safe(GPU_NAME),
            uuid=self._uuid(index),
            pci_bus_id=self._bus_id(index),
            memory_used_mib=used_mib,
            memory_total_mib=GPU_TOTAL_MIB,
            memory_reserved_mib=476,
            utilization_pct=util_pct,
            memory_utilization_pct=util_pct // 2 if busy else 0,
            temperature_c=temp_c,
            power_w=power_w,
            power_limit_w=POWER_LIMIT_W,
            processes=holders,
            fitness=self._gpu_fitness(index, now_s),
        )

    def _gpu_fitness(self, index: int, now_s: float) -> GpuFitness:
        fitness = self._fitness(index, now_s)
        if self._shared:
            fitness = replace(fitness, xids=shared.xids(index, self._start_s))
        return fitness

    def _endpoints(self, now_s: float) -> tuple[EndpointSample, ...]:
        if self._shared:
            return ()  # no inference server there
        # The agent probes every few seconds, not on every sample: checked_at says which probe this is.
        probed_s = self._start_s + ENDPOINT_PROBE_S * ((now_s - self._start_s) // ENDPOINT_PROBE_S)
        samples = self._health_at(now_s)
        metrics = self._metrics_at(probed_s)
        return tuple(replace(sample, checked_at=probed_s, **metrics) for sample in samples)

    def _metrics_at(self, probed_s: float) -> dict[str, Any]:
        """The server's metrics as the collector read them beside the probe at ``probed_s``."""
        origin = "http://127.0.0.1:8000" if self._healthy else "http://127.0.0.1:30000"
        server = self._procs.get(self._server_pid)
        if self._server_dead_at is not None or server is None:
            return {"metrics_url": origin + "/metrics", "metrics_error": "connection refused"}
        started_s = BOOT_EPOCH_S + server.start_offset_s
        load = VLLM_SERVING if self._healthy else SGLANG_SERVING
        rate = load.generation_tokens_per_s
        wedge_s = self._start_s + self._wedged_at_s
        if not self._healthy and probed_s >= wedge_s:
            text = metrics_text(WEDGED, rate * (wedge_s - started_s), rate)
        else:
            text = metrics_text(load, rate * (probed_s - started_s), rate)
        return {
            "metrics_url": origin + "/metrics",
            "metrics_text": text,
            "metrics_at": probed_s,
            "launcher_age_s": probed_s - started_s,
        }

    def _health_at(self, now_s: float) -> tuple[EndpointSample, ...]:
        url = "http://127.0.0.1:8000/health" if self._healthy else "http://127.0.0.1:30000/health"
        wedge_s = now_s if self._healthy else self._start_s + self._wedged_at_s
        if self._server_dead_at is not None:
            # Nothing listens on the port any more, whichever way the server went.
            return (
                EndpointSample(
                    url=safe(url),
                    state=safe(protocol.ENDPOINT_STATE_DOWN),
                    since=self._server_dead_at,
                    last_ok=min(wedge_s, self._server_dead_at),
                    consecutive_failures=1,
                    detail=safe("connection refused"),
                    discovered=True,
                    checked_at=now_s,
                ),
            )
        busy_s = self._start_s + BUSY_FROM_S
        if self._healthy and busy_s <= now_s < self._start_s + BUSY_UNTIL_S:
            return (
                EndpointSample(
                    url=safe(url),
                    state=safe(protocol.ENDPOINT_STATE_TIMEOUT),
                    latency_ms=ENDPOINT_DEFAULT_DEADLINE_S * 1000,
                    since=busy_s,
                    last_ok=busy_s,
                    consecutive_failures=1 + int((now_s - busy_s) // ENDPOINT_PROBE_S),
                    detail=safe(f"no response within {ENDPOINT_DEFAULT_DEADLINE_S:g}s"),
                    discovered=True,
                    checked_at=now_s,
                ),
            )
        if not self._healthy and now_s >= wedge_s:
            return (
                EndpointSample(
                    url=safe(url),
                    state=safe(protocol.ENDPOINT_STATE_UNHEALTHY),
                    code=503,
                    latency_ms=20_004.0,
                    since=wedge_s,
                    last_ok=wedge_s,
                    consecutive_failures=1 + int((now_s - wedge_s) // 5),
                    detail=safe("503 Service Unavailable"),
                    discovered=True,
                    checked_at=now_s,
                ),
            )
        return (
            EndpointSample(
                url=safe(url),
                state=safe(protocol.ENDPOINT_STATE_UP),
                code=200,
                latency_ms=3.1 if self._healthy else 4.2,
                since=self._start_s,
                last_ok=now_s,
                discovered=True,
                checked_at=now_s,
            ),
        )

    def _snapshot(self) -> HostSnapshot:
        """The host as it is now. Called with the lock held."""
        now_s = self._clock()
        self._advance(now_s)
        self._settle()
        self._draining = [d for d in self._draining if now_s - d[2] < DRAIN_S]
        self._closing_ports = [c for c in self._closing_ports if now_s - c[1] < PORT_LINGER_S]
        listening = {port for p in self._procs.values() for port in p.listen_ports}
        listening.update(port for port, _died_s in self._closing_ports)
        procs = tuple(
            Proc(
                pid=p.pid,
                ppid=p.ppid,
                # The simulated host is a machine like any other: its text enters the model made visible.
                user=opt_safe(p.user),
                uid=p.uid,
                state=opt_safe(p.state),
                name=opt_safe(p.name),
                cmdline=() if p.state == "Z" else safe_list(p.cmdline),
                start_ticks=p.start_ticks,
                create_time=BOOT_EPOCH_S + p.start_offset_s,
                state_since=p.state_since if not self._shared else shared.state_since(p.pid, self._start_s),
                rss_kib=p.rss_kib,
                gpu_memory_mib=dict(p.gpu_mib),
                live_threads=(
                    None
                    if p.state != "Z" or p.live_threads is None
                    else LiveThreads(sum(p.live_threads.values()), dict(p.live_threads))
                ),
                listen_ports=p.listen_ports,
                owner=Owner(OWNER_USER, opt_safe(p.user), opt_safe(p.user)),
                profiler=None if p.state == "Z" else ProfilerMark.from_dict(p.profiler),
                waits=shared.waits(p.pid, self._start_s) if self._shared else (),
            )
            for p in sorted(self._procs.values(), key=lambda p: p.pid)
        )
        return HostSnapshot(
            target=self.target,
            hostname=safe(self.target),
            boot_id=self.boot_id,
            time=now_s,
            driver_version="580.82.07",
            cuda_driver_version="13.0",
            mode=protocol.MODE_SIM,
            agent_version="sim",
            agent_pid=self.agent_pid,
            processes_time=now_s,
            gpus=tuple(self._gpu(i, now_s) for i in range(GPU_COUNT)),
            processes=procs,
            listening_ports=tuple(sorted(listening)),
            endpoints=self._endpoints(now_s),
            kernel_log=shared.kernel_log() if self._shared else None,
            remembered=shared.remembered(self._start_s) if self._shared else None,
        )
