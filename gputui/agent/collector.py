"""The collector for one host: GPU figures, the process trees that hold GPU memory, health, kills.

It runs in-process for the local host (``gputui.transports.local``) and in the remote ``python3`` for SSH
hosts (``serve``). Errors are data: a missing driver, a lost GPU or a hung NVML call become an ``error``
string on the host or on that GPU; nothing here ever builds a shell command line.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from gputui.agent import answers
from gputui.agent.gpu import NVML_DEADLINE_S, TELEMETRY_INTERVAL_S, open_backend
from gputui.agent.gpu.fitness import FitnessMonitor
from gputui.agent.proc.details import psutil_installed
from gputui.agent.proc.exits import ExitWatch
from gputui.agent.proc.jobmemory import MAX_SEGMENTS, JobMemory
from gputui.agent.proc.leftovers import LiveLooks, still_left
from gputui.agent.proc.ports import Listeners
from gputui.agent.proc.processes import FULL_SWEEP_EVERY, ProcessSampler
from gputui.agent.proc.procfs import in_child_pid_namespace, json_safe, read_boot_id
from gputui.agent.protocol import (
    KILL_COMMANDS,
    MEMORY_INTERVAL_S,
    MODE_SMI,
    PROCESS_INTERVAL_S,
    VERSION,
    hello,
    snapshot,
)
from gputui.agent.servers.discovery import health_launcher_like_name
from gputui.agent.wire import wire_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

    from gputui.agent.kill.operations import KillOperations
    from gputui.agent.servers.prober import EndpointProber

DRAIN_DROP_MIB = 8
"""A GPU whose used memory fell by more than this since the last sample is draining."""
DRAIN_WINDOW_S = 5.0
"""After the last drop, how long process lists stay on the draining cadence."""
DRAIN_PROCESS_INTERVAL_S = 0.5
"""Seconds between process lists while a GPU drains (unless the configured interval is already shorter)."""
CHANGED_PROCESS_INTERVAL_S = 2.0
"""Seconds between process lists while some GPU's used memory keeps changing (a job starting, a job that
allocates): the list is read on the first memory sample that differs, then at most this often."""


PROBE_DRAIN_MAX_S = 5.0
"""How long a probe waits for its children's GPU memory to be freed before it answers."""


class Agent:
    """The collector for one host.

    Args:
        target: The name the client uses for this host (echoed in every snapshot).
        read_only: Refuse every kill.
        memory_interval_s: Seconds between memory samples (the cheap part).
        process_interval_s: Seconds between process samples (NVML process lists + the /proc walk) while
            no GPU's used memory changes; when one's differs from the last list's, the list is read again
            on that sample (then at most every ``CHANGED_PROCESS_INTERVAL_S``), and while a GPU drains (its
            used memory fell within ``DRAIN_WINDOW_S``) at most every ``DRAIN_PROCESS_INTERVAL_S`` (never
            below the memory interval).
        health_urls: Health endpoints to probe from this host (at most ``ENDPOINT_MAX_URLS``).
        discover_health: Also probe the /health URLs of sglang/vLLM launchers found in the process list.
        health_generate: Probe generating endpoints (``/health_generate``) too, at most every
            ``ENDPOINT_GENERATE_MIN_INTERVAL_S``.
        metrics_urls: Servers' metrics endpoints, each read beside the health URL of its origin.
        use_psutil: Use psutil, where installed, to read who a process is in the kill path (False: /proc
            only). Samples always read /proc.
        use_pynvml: Use NVML when the bindings import and the library loads (False: nvidia-smi, if present).
        nvml_deadline_s: Seconds each device's NVML calls may take per sample.
        full_sweep_every: Read every pid's stat on every Nth process sample (1: always); forced samples
            always do.
        telemetry_interval_s: Seconds between reads of utilisation, temperature and power (0: every
            sample); memory is read on every sample.
        backend: The GPU backend to read (``gpu.Backend``), already started; None: the one this host
            offers (``gpu.open_backend``).

    A bad health setting is an ERROR row of the health list (``EndpointProber``), never a collector that does
    not start: the host's GPUs are shown whatever the health URLs are. The prober and its modules are loaded
    once something is to be probed or discovered.
    """

    def __init__(
        self,
        target: str = "local",
        read_only: bool = False,
        memory_interval_s: float = MEMORY_INTERVAL_S,
        process_interval_s: float = PROCESS_INTERVAL_S,
        health_urls: Iterable[str] = (),
        discover_health: bool = True,
        health_generate: bool = False,
        metrics_urls: Iterable[str] = (),
        use_psutil: bool = True,
        use_pynvml: bool = True,
        nvml_deadline_s: float = NVML_DEADLINE_S,
        full_sweep_every: int = FULL_SWEEP_EVERY,
        telemetry_interval_s: float = TELEMETRY_INTERVAL_S,
        backend: Any = None,
        kill_keeper: bool = False,
    ) -> None:
        self.target = target
        self.read_only = bool(read_only)
        self.kill_keeper = bool(kill_keeper)
        """Hand kills that go on after their signals to a keeper process (``kill.keeper``): set where this
        collector runs in the client's own process, whose end must not end a confirmed escalation."""
        self.memory_interval_s = float(memory_interval_s)
        self.process_interval_s = float(process_interval_s)
        self.discover_health = bool(discover_health)
        self.health_urls: tuple[str, ...] = ()
        self._health_settings = (
            list(health_urls),
            self.discover_health,
            bool(health_generate),
            list(metrics_urls),
        )
        self._endpoints: EndpointProber | None = None
        self._endpoints_lock = threading.Lock()
        if self._health_settings[0] or health_generate:
            self.endpoints  # noqa: B018 - configured endpoints are probed from the start
        self.hostname = json_safe(os.uname().nodename)  # gethostname() without the socket module
        self.boot_id = read_boot_id()
        self.pid = os.getpid()
        self.child_pid_namespace = in_child_pid_namespace()
        self._lock = threading.RLock()
        self._use_psutil = bool(use_psutil) and psutil_installed()
        self.processes = ProcessSampler(self.child_pid_namespace, full_sweep_every, health_launcher_like_name)
        self._looks = LiveLooks()
        """What live jobs may leave behind, looked at every ``jobmemory.SEGMENT_SCAN_S``."""
        self._processes_time: float | None = None
        self._processes_mono = -1e18
        self.last_sample_mono: float | None = None
        self._last_used_mib: dict[Any, int] = {}
        self._listed_used_mib: dict[Any, Any] = {}
        self._draining_until_mono = -1e18
        self._listeners = Listeners()
        self._listening_ports: list[int] | None = None
        self.job_memory = JobMemory(self.boot_id)
        self._remembered: dict[str, Any] | None = None
        self._kills: KillOperations | None = None
        self._kills_lock = threading.Lock()
        # Started here, so that the hello already says whether there is a driver.
        self._backend_args = (bool(use_pynvml), nvml_deadline_s, telemetry_interval_s)
        self._backend: Any = backend or open_backend(
            use_pynvml, self.memory_interval_s, nvml_deadline_s, telemetry_interval_s
        )
        self.fitness_monitor = FitnessMonitor()
        """Per-GPU fitness and Xids, read at a slow cadence, on forced samples and after kills."""
        self._kills_were_pending = False
        self.watch_exits = False
        """Wait on the GPU holders' exits between samples (``pause``): a clean-slate check is watching."""
        self._exits = ExitWatch()

    @property
    def backend(self) -> Any:
        """The GPU backend this collector reads (``gpu.Backend``)."""
        return self._backend

    @property
    def mode(self) -> str:
        return self._backend.mode

    @property
    def use_psutil(self) -> bool:
        """Whether the kill path reads who a process is through psutil (imported on its first use)."""
        return self._use_psutil

    @property
    def endpoints(self) -> EndpointProber:
        """The endpoint prober, made on first use with the settings the collector was started with."""
        with self._endpoints_lock:
            if self._endpoints is None:
                from gputui.agent.servers.prober import EndpointProber

                urls, discover, generate, metrics_urls = self._health_settings
                self._endpoints = EndpointProber(
                    urls, discover=discover, generate=generate, metrics_urls=metrics_urls
                )
                self._endpoints.read_processes = self.launcher_processes
                self.health_urls = tuple(self._endpoints.config()["urls"])
            return self._endpoints

    @property
    def probing(self) -> bool:
        """Whether the endpoint prober is running (something configured or a launcher found)."""
        return self._endpoints is not None

    def launcher_processes(self) -> list[dict[str, Any]]:
        """The processes that may be inference-server launchers, with their command lines (discovery's
        input): read from the last whole-host sweep, never every process's cmdline."""
        with self._lock:
            return self.processes.launcher_cmdlines()

    def _discover(self, processes: list[dict[str, Any]]) -> None:
        """Add (and retire) discovered health URLs. The prober, its thread and the HTTP modules are loaded
        once a launcher is found (or something is configured), not for a host that runs none."""
        if self._endpoints is None:
            from gputui.agent.servers.discovery import discover_health_urls

            if not discover_health_urls(processes):
                return
        self.endpoints.update_discovered(processes)

    def discover_now(self) -> None:
        """Look for launchers now (a one-shot client's ``discover_now``), in the caller's thread."""
        if self.discover_health or self._endpoints is not None:
            self._discover(self.launcher_processes())

    def _health_samples(self) -> list[dict[str, Any]]:
        prober = self._endpoints
        return [] if prober is None else prober.samples()

    def hello(self) -> dict[str, Any]:
        return hello(
            self.mode,
            self.boot_id,
            self.hostname,
            agent_version=VERSION,
            error=self._backend.host_error,
            python=".".join(str(part) for part in sys.version_info[:3]),
            psutil=self.use_psutil,
            pynvml=getattr(self._backend, "bindings", None),
            pid=self.pid,
            pid_namespace="child" if self.child_pid_namespace else "host",
        )

    # -- sampling ------------------------------------------------------------------------------------------

    def sample(self, force_processes: bool = False) -> dict[str, Any]:
        """One host snapshot as a dict (``protocol.snapshot``, the ``model.HostSnapshot`` shape).

        Memory figures are read every time; the process part (NVML process lists and the /proc walk) only
        when ``process_interval_s`` has passed or ``force_processes`` is set, else the last one is reused.
        """
        with self._lock:
            now_mono = time.monotonic()
            due = self._process_interval_now(now_mono)
            # While a probe's children live (this collector's or another gputui's) every sample lists
            # processes: their memory is left out of a figure only together with their list.
            probing = bool(self.processes.probe_pids or self.processes.hidden_pids)
            want_processes = force_processes or probing or now_mono - self._processes_mono >= due
            gpus = self._poll_gpus(want_processes, force_processes)
            if not want_processes and self._memory_moved(gpus, now_mono):
                want_processes = True
                gpus = self._poll_gpus(True, force_processes)
            self._note_drain(gpus, now_mono)
            now = time.time()
            self.last_sample_mono = time.monotonic()
            sampler = self.processes
            if want_processes:
                self._processes_mono = now_mono
                self._processes_time = now
                self._listed_used_mib = {
                    gpu.get("uuid") or gpu.get("index"): gpu.get("memory_used_mib") for gpu in gpus
                }
                # While watching, every list is a whole-host sweep: a sample whose list was read with it may
                # be a clean-slate check's confirming sample (``core.verdict.cleanslate``).
                memory = self.job_memory
                sampler.sample(
                    gpus, now, full=force_processes or self.watching, remembered=memory.remembered_pids()
                )
                self._listening_ports = self._listeners.note(
                    sampler.processes, sampler.job_pids | set(sampler.remembered)
                )
                listed = None if self._backend.host_error is not None else gpus
                if listed is not None:
                    memory.note(sampler.jobs, sampler.processes, gpus, now)
                    looks_due = memory.scans_due(now)
                    if looks_due:
                        stats, uids, host = sampler.stats_read(), sampler.uids_listed(), sampler.host_table()
                    for key, pids in looks_due:
                        memory.add_leftovers(key, self._looks.look(pids, MAX_SEGMENTS, stats, uids, host))
                self._remembered = memory.wire(sampler.remembered, listed, still_left)
                if sampler.last_sweep_full and (self.discover_health or self._endpoints is not None):
                    # With the whole-host sweeps only: a new launcher is found within full_sweep_every
                    # process intervals.
                    self._discover(sampler.launcher_cmdlines())
            for gpu in gpus:
                if "processes" not in gpu:
                    gpu["processes"] = [dict(p) for p in sampler.gpu_processes.get(gpu["index"], [])]
            holders = sampler.device_holders
            return snapshot(
                self.target,
                self.hostname,
                self.boot_id,
                now,
                self.mode,
                gpus=gpus,
                processes=[dict(p) for p in sampler.processes],
                error=self._backend.host_error,
                driver_version=self._backend.driver_version,
                cuda_driver_version=self._backend.cuda_driver_version,
                agent_version=VERSION,
                agent_pid=self.pid,
                processes_time=self._processes_time,
                processes_omitted=sampler.omitted,
                device_holders=None if holders is None else list(holders),
                health=self._health_samples(),
                listening_ports=self._listening_ports,
                kernel_log=self.fitness_monitor.kernel_log_note(),
                remembered=self._remembered,
            )

    def _poll_gpus(self, want_processes: bool, forced: bool) -> list[dict[str, Any]]:
        """This sample's GPU dicts, with the health read when it is due (``FitnessMonitor.due``)."""
        pending = self.escalations_pending()
        if self._kills_were_pending and not pending:
            self.fitness_monitor.request()  # a kill just finished: the GPU may be left unfit
        self._kills_were_pending = pending
        monitor = self.fitness_monitor
        reads = getattr(self._backend, "reads_fitness", False)
        # At rest fitness is read with a process list only, when due: a memory sample costs no more than
        # its memory. While a clean-slate check waits (``watch_exits``) it is read with every memory sample,
        # the first one at once, so a GPU that turns unfit is seen within one memory interval; a stream line
        # whose process lists are elided keeps a fitness read with it (``serve.elide_unchanged_processes``).
        watching = self.watch_exits
        if (want_processes or watching) and reads:
            monitor.add_events(self._backend.take_events())  # an event has the fitness read now
        if not (watching or (want_processes and monitor.due(forced))):
            gpus = self._backend.poll(want_processes)
        else:
            gpus = self._backend.poll(want_processes, True) if reads else self._backend.poll(want_processes)
            monitor.update(gpus)
        monitor.apply(gpus)
        return gpus

    def _memory_moved(self, gpus: list[dict[str, Any]], now_mono: float) -> bool:
        """Whether some GPU's used memory differs from what it was at the last process list (and the list
        is at least ``CHANGED_PROCESS_INTERVAL_S`` old, or less while the memory interval is longer)."""
        gap = min(self.process_interval_s, max(self.memory_interval_s, CHANGED_PROCESS_INTERVAL_S))
        if now_mono - self._processes_mono < gap:
            return False
        listed = self._listed_used_mib
        return any(
            isinstance(gpu.get("memory_used_mib"), int)
            and listed.get(gpu.get("uuid") or gpu.get("index")) != gpu["memory_used_mib"]
            for gpu in gpus
        )

    def _process_interval_now(self, now_mono: float) -> float:
        """The process interval, shortened while some GPU drains: who still holds memory matters then."""
        if now_mono < self._draining_until_mono:
            return min(self.process_interval_s, max(self.memory_interval_s, DRAIN_PROCESS_INTERVAL_S))
        return self.process_interval_s

    def _note_drain(self, gpus: list[dict[str, Any]], now_mono: float) -> None:
        used: dict[Any, int] = {}
        for gpu in gpus:
            mib = gpu.get("memory_used_mib")
            if isinstance(mib, int):
                key = gpu.get("uuid") or gpu.get("index")
                used[key] = mib
                before = self._last_used_mib.get(key)
                if before is not None and before - mib > DRAIN_DROP_MIB:
                    self._draining_until_mono = now_mono + DRAIN_WINDOW_S
        self._last_used_mib = used

    @property
    def watching(self) -> bool:
        """Whether ``pause`` waits on the GPU holders' exits: a clean-slate check asked for it
        (``watch_exits``), or a kill is under way."""
        return self.watch_exits or self.escalations_pending()

    def pause(self, seconds: float, wake: threading.Event) -> bool:
        """Wait up to ``seconds`` for the next sample, less once ``wake`` is set; while ``watching``, also
        until a process that holds GPU memory exits.

        Returns:
            True when a GPU holder exited: the caller samples now, with a fresh process list
            (``sample(force_processes=True)``), so that memory coming back is seen, and confirmed, at once.
        """
        if not self.watching:
            self._exits.watch(())
            wake.wait(max(0.0, seconds))
            return False
        with self._lock:
            pids = [
                proc["pid"]
                for listed in self.processes.gpu_processes.values()
                for proc in listed
                if proc.get("visible")
            ]
        self._exits.watch(pids)
        return self._exits.wait(seconds, wake)

    @property
    def draining(self) -> bool:
        """Whether some GPU's memory fell within the last ``DRAIN_WINDOW_S`` (process lists come faster)."""
        return time.monotonic() < self._draining_until_mono

    def error_snapshot(self, error: str) -> dict[str, Any]:
        """A snapshot that carries only this host's identity and an error."""
        return snapshot(
            self.target,
            self.hostname,
            self.boot_id,
            time.time(),
            self.mode,
            error=wire_text(error, 1024),
            agent_version=VERSION,
            agent_pid=self.pid,
            health=self._health_samples(),
        )

    def set_intervals(
        self,
        memory_interval_s: float | None,
        process_interval_s: float | None,
        watch_exits: bool | None = None,
    ) -> None:
        """Change the sample intervals and whether ``pause`` watches exits (None: leave one as it is)."""
        with self._lock:
            if watch_exits is not None:
                self.watch_exits = watch_exits
            if memory_interval_s is not None:
                self.memory_interval_s = memory_interval_s
                if self.mode == MODE_SMI:
                    self._backend.interval_s = memory_interval_s
            if process_interval_s is not None:
                self.process_interval_s = process_interval_s

    # -- commands and kills ---------------------------------------------------------------------------------

    def handle(self, command: Any) -> dict[str, Any]:
        """Run one protocol command; returns the reply message (never raises)."""
        if isinstance(command, dict) and command.get("cmd") in KILL_COMMANDS:
            self.fitness_monitor.request()
        return answers.handle(self, command)

    @property
    def kills(self) -> KillOperations:
        """The kill operations, made (the kill modules loaded) by the first kill command."""
        with self._kills_lock:  # not the sampling lock: a kill never waits for a sample
            if self._kills is None:
                from gputui.agent.kill.operation import KillContext
                from gputui.agent.kill.operations import KillOperations

                facts = (self.read_only, self.boot_id, self.pid, self.use_psutil, self.processes.gpu_mib_of)
                self._kills = KillOperations(KillContext(*facts), keeper=self.kill_keeper)
            return self._kills

    def probe(
        self, words: list[str] | None, deadline_s: float, buffer_mib: int, force: bool
    ) -> dict[str, Any]:
        """The readiness probe of the GPUs named (every GPU: None), after any kill under way has ended
        (``gpu.probe``): ``{"probes": [...], "deadline_s", "buffer_mib", "kill_pending", "lock_problem"}``.
        Its children are never listed. The wait for a kill and for GPUs another gputui is probing share one
        ``deadline_s``; a kill still under way after it is said (``kill_pending``), the probe runs anyway."""
        from gputui.agent.args import CommandError
        from gputui.agent.gpu import probe as readiness
        from gputui.agent.gpu.probelock import ProbeLocks

        waited = time.monotonic() + deadline_s
        while self.escalations_pending() and time.monotonic() < waited:
            time.sleep(0.05)
        kill_pending = self.escalations_pending()
        gpus = self.sample(force_processes=True)["gpus"]
        mig_devices = getattr(self._backend, "mig_devices", None)  # NVML's alone: a GPU's MIG devices
        with self._lock:
            mig = mig_devices() if mig_devices is not None else None
        try:
            targets = readiness.probe_targets(gpus, words, force, mig)
        except ValueError as exc:
            raise CommandError(str(exc)) from None

        def seen(index: int, pid: int) -> bool | None:
            """Whether the driver lists ``pid`` on GPU ``index`` now (its process list alone, no /proc)."""
            with self._lock:
                polled = self._backend.poll(True)
            for gpu in polled:
                if gpu.get("index") == index:
                    return any(p.get("pid") == pid for p in gpu.get("processes") or ())
            return None

        def hide(pids: frozenset[int]) -> None:
            self.processes.hidden_pids = pids

        locks = ProbeLocks()
        try:
            probes = readiness.run_probes(targets, deadline_s, buffer_mib, seen, hide, locks, waited)
        except RuntimeError as exc:
            raise CommandError(str(exc)) from None
        self._wait_for_drain({g.get("index"): g.get("memory_used_mib") for g in gpus})
        return {
            "probes": probes,
            "deadline_s": deadline_s,
            "buffer_mib": buffer_mib,
            "time": time.time(),
            "kill_pending": kill_pending,
            "lock_problem": locks.problem,
        }

    def _wait_for_drain(self, before: dict[Any, Any], bound_s: float = PROBE_DRAIN_MAX_S) -> None:
        """Until every GPU's used memory is back to what it was before the probe (the driver frees a dead
        process's memory a moment after it exits), at most ``bound_s``."""
        end = time.monotonic() + bound_s
        while time.monotonic() < end:
            with self._lock:
                polled = self._backend.poll(True)
                self.processes.leave_out_probes(polled, time.time())  # another gputui's probe is its own
            now = {g.get("index"): g.get("memory_used_mib") for g in polled}
            if all(
                not isinstance(used, int) or not isinstance(now.get(index), int) or now[index] <= used
                for index, used in before.items()
            ):
                return
            time.sleep(0.05)

    def escalations_pending(self) -> bool:
        """Whether a kill operation is still waiting, escalating or confirming."""
        return self._kills is not None and self._kills.pending()  # made once, never unset

    def wait_for_escalations(self, timeout_s: float | None = None) -> bool:
        """Wait until every kill operation is done (``KillOperations.wait``); True when they are."""
        return self._kills is None or self._kills.wait(timeout_s)

    # -- GPU resets: the collector lets go of the devices while the steps run ----------------------------

    @property
    def uses_nvml(self) -> bool:
        """Whether this collector may read the GPUs through NVML (its ``use_pynvml`` setting)."""
        return self._backend_args[0]

    def step_aside(self, reason: str) -> None:
        """Close the GPU backend (NVML handles, or the nvidia-smi loop); samples carry ``reason`` as the host
        error until ``come_back``."""
        from gputui.agent.gpu.none import NoBackend

        with self._lock:
            backend, self._backend = self._backend, NoBackend(reason)
        backend.close()

    def come_back(self) -> None:
        """Open the GPU backend again after ``step_aside``."""
        use_pynvml, deadline_s, telemetry_s = self._backend_args
        backend = open_backend(use_pynvml, self.memory_interval_s, deadline_s, telemetry_s)
        with self._lock:
            self._backend = backend

    def close(self) -> None:
        if self._kills is not None:
            self._kills.close()
        if self._endpoints is not None:
            self._endpoints.close()
        self._backend.close()
        self.fitness_monitor.close()
        with self._lock:
            self.processes.close()
            self._exits.close()
