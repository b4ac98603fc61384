"""Simulated hosts for ``--demo`` and tests: the wedged-sglang story, replayed deterministically.

``SimLink`` speaks the ``HostLink`` interface exactly like a real link, so the UI and the commands have no
demo special cases. Two scenarios exist:

* the wedge (any target except ``gpu-node-08``): eight 48 GiB "NVIDIA RTX PRO 6000 Blackwell" GPUs, an sglang
  launcher started under ``nsys`` with eight scheduler workers (~40 GiB each) and a detokenizer. After
  ``wedged_at_s`` seconds of serving, the schedulers turn defunct (``Z``) while their GPU memory stays held,
  and ``/health`` answers 503. Killing the launcher reaps the zombies; their memory drains to the 3 MiB idle
  baseline over ``DRAIN_S`` seconds.
* the healthy host (``gpu-node-08``): a vLLM server on four of eight GPUs, plus a process whose name and
  arguments are hostile text (markup, terminal escapes, a bidi override, a 100 KB argument) to keep every
  renderer honest.

Every pid, name and time is deterministic; times come from an injectable clock (``ManualClock`` in tests), so
frozen-clock snapshots are byte-for-byte stable. The kill commands follow the agent's protocol and speak
its vocabulary (``gputui.agent``'s kill block): identity check (pid + start ticks + boot id), trees children
first, zombies of the tree reaped with their parent, refusals (pid 1, read-only, a zombie asked for by
itself), and the TERM → KILL escalation, due on the real clock and answered by ``kill_wait`` and
``kill_abandon``. This module must not import textual or rich.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gputui.agent import (
    KILL_ABANDON_COMMAND,
    KILL_COMMAND,
    KILL_WAIT_COMMAND,
    RESULT_ABANDONED,
    RESULT_CHANGED,
    RESULT_EXITED,
    RESULT_GONE,
    RESULT_KILLED,
    RESULT_REAPED,
    RESULT_REFUSED,
    RESULT_SENT,
    RESULT_STILL_ALIVE,
    STAGE_ABANDON,
    STAGE_CHECK,
    STAGE_CONFIRM,
    STAGE_ESCALATE,
    STAGE_SIGNAL,
    STAGE_WAIT,
)
from gputui.core.model import Gpu, GpuProcess, HealthSample, HostSnapshot, Proc
from gputui.transports.base import HostLink, LinkError, LinkOptions

Clock = Callable[[], float]
"""Returns wall-clock epoch seconds."""

HEALTHY_TARGET = "gpu-node-08"
"""The demo host that stays healthy; every other simulated target replays the wedge."""

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell"
GPU_TOTAL_MIB = 49152
IDLE_MIB = 3
"""What an idle GPU reports as used: the driver's own footprint."""
DRAIN_S = 2.0
"""Seconds within which a dead holder's GPU memory is back with the driver (GPU 7 takes this long)."""


def drain_s(gpu_index: int) -> float:
    """Seconds GPU ``gpu_index`` takes to release a dead holder's memory: GPU 0 is quickest (1.3 s), GPU 7
    takes ``DRAIN_S``, so a clean-slate check sees the GPUs come back one after another."""
    return DRAIN_S * (0.65 + 0.05 * min(gpu_index, 7))
GPU_COUNT = 8
HEALTH_PROBE_S = 2.0
"""Seconds between the simulated agent's health probes."""
POWER_LIMIT_W = 600.0
CLOCK_TICKS_PER_S = 100
BOOT_EPOCH_S = 1_780_000_000.0
"""Epoch seconds at which the simulated hosts booted (start ticks count from here)."""

SGLANG_CMDLINE = (
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/models/GLM-5-NVFP4",
    "--tp",
    "8",
    "--port",
    "30000",
    "--enable-layerwise-nvtx-marker",
)
NSYS_CMDLINE = (
    "nsys",
    "profile",
    "--trace=cuda,nvtx",
    "--cuda-graph-trace=node",
    "-o",
    "/tmp/glm5_decode",  # noqa: S108 (a string shown, never a path used)
    *SGLANG_CMDLINE,
)
VLLM_CMDLINE = (
    "python3",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "/models/Qwen3-32B",
    "--tensor-parallel-size",
    "4",
    "--port",
    "8000",
)

HOSTILE_TEXTS = (
    "[bold]x[/]",
    "[@click=app.quit]x[/]",
    "\x1b]0;t\x07",
    "\x1b[2J",
    "\u202eexe.txt",
    "[Bold]",
    "[$x]",
    "[/]",
    "\x9bJ",
)
"""Markup, terminal escapes and a bidi override, as machines may report them in names and arguments."""
HOSTILE_LONG_ARG_CHARS = 100_000

SCHEDULER_PID_BASE = 4240
"""Scheduler TP<i> has pid SCHEDULER_PID_BASE + i."""
LAUNCHER_PID = 4200
VLLM_PID = 5100
"""The healthy host's server: its /health answers while it lives."""
NSYS_PID = 4100
DETOKENIZER_PID = 4250
SCHEDULER_HELD_MIB = (41236, 41228, 41236, 41236, 41240, 41236, 41232, 41236)


@dataclass
class _SimProc:
    """A simulated process. Mutable: the scenario and kills change it."""

    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...]
    user: str = "root"
    uid: int = 0
    state: str = "S"
    gpu_mib: dict[int, int] = field(default_factory=dict)
    ignores_term: bool = False
    defunct_on_wedge: bool = False
    start_offset_s: float = 1000.0
    state_since: float | None = None
    rss_kib: int = 1_048_576

    @property
    def start_ticks(self) -> int:
        return int(self.start_offset_s * CLOCK_TICKS_PER_S)


class ManualClock:
    """A clock that moves only when told to: for deterministic tests and snapshots.

    Args:
        start_s: Epoch seconds it reads at first.
    """

    def __init__(self, start_s: float = BOOT_EPOCH_S + 86_400.0) -> None:
        self._now_s = start_s
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now_s

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        with self._lock:
            self._now_s += seconds


def _wedge_processes() -> list[_SimProc]:
    procs = [
        _SimProc(NSYS_PID, 3811, "nsys", NSYS_CMDLINE, start_offset_s=80_000.0, rss_kib=412_000),
        _SimProc(
            LAUNCHER_PID,
            NSYS_PID,
            "python3",
            SGLANG_CMDLINE,
            start_offset_s=80_001.0,
            rss_kib=3_200_000,
        ),
    ]
    for tp in range(GPU_COUNT):
        procs.append(
            _SimProc(
                SCHEDULER_PID_BASE + tp,
                LAUNCHER_PID,
                f"sglang::scheduler_TP{tp}",
                (),
                gpu_mib={tp: SCHEDULER_HELD_MIB[tp]},
                defunct_on_wedge=True,
                start_offset_s=80_009.0 + tp / 10,
                rss_kib=9_800_000,
            )
        )
    procs.append(
        _SimProc(
            DETOKENIZER_PID,
            LAUNCHER_PID,
            "sglang::detokenizer",
            (),
            ignores_term=True,
            start_offset_s=80_010.0,
            rss_kib=640_000,
        )
    )
    return procs


def _healthy_processes() -> list[_SimProc]:
    procs = [
        _SimProc(VLLM_PID, 2901, "python3", VLLM_CMDLINE, user="svc-llm", uid=1001, start_offset_s=40_000.0),
        _SimProc(5110, 5100, "VLLM::EngineCore", (), user="svc-llm", uid=1001, start_offset_s=40_004.0),
    ]
    for tp in range(4):
        procs.append(
            _SimProc(
                5120 + tp,
                5110,
                f"VLLM::Worker_TP{tp}",
                (),
                user="svc-llm",
                uid=1001,
                gpu_mib={tp: 44236},
                start_offset_s=40_006.0 + tp / 10,
                rss_kib=7_400_000,
            )
        )
    hostile_argv = ("python3", *HOSTILE_TEXTS, "A" * HOSTILE_LONG_ARG_CHARS)
    procs.append(
        _SimProc(
            5400,
            3000,
            "[bold]x[/]",
            hostile_argv,
            user="[@click=app.quit]x[/]",
            uid=1002,
            gpu_mib={6: 1024},
            start_offset_s=60_000.0,
            rss_kib=300_000,
        )
    )
    procs.append(
        _SimProc(
            5401,
            5400,
            "\x1b]0;t\x07\x1b[2J",
            ("\u202eexe.txt", "[$x]"),
            user="[Bold]",
            uid=1003,
            start_offset_s=60_001.0,
            rss_kib=20_000,
        )
    )
    return procs


class SimLink(HostLink):
    """A simulated host, driven by the same commands as a real agent.

    Args:
        target: The host's name; ``gpu-node-08`` is the healthy host, anything else replays the wedge.
        options: Intervals and read-only mode, as for any link.
        clock: Epoch seconds source for every time in the snapshots (default ``time.time``).
        wedged_at_s: Scenario seconds of serving before the schedulers wedge (0: wedged from the start).
    """

    def __init__(
        self,
        target: str,
        options: LinkOptions | None = None,
        clock: Clock | None = None,
        wedged_at_s: float = 0.0,
    ) -> None:
        self.target = target
        self._options = options or LinkOptions()
        self._clock: Clock = clock or time.time
        self._wedged_at_s = wedged_at_s
        self._memory_interval_s = self._options.memory_interval_s
        self._process_interval_s = self._options.process_interval_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._opened = False
        self._next_due_monotonic = 0.0
        self._start_s = self._clock()
        self._healthy = target == HEALTHY_TARGET
        self._procs: dict[int, _SimProc] = {
            p.pid: p for p in (_healthy_processes() if self._healthy else _wedge_processes())
        }
        self._draining: list[tuple[int, int, float]] = []
        """(gpu index, MiB, epoch seconds the holder died): memory on its way back to the driver."""
        self._server_pid = VLLM_PID if self._healthy else LAUNCHER_PID
        self._server_dead_at: float | None = None
        """When the process serving the host's /health died: from then on it is DOWN."""
        self._ops: dict[int, _SimKill] = {}
        self._next_op = 0
        self.boot_id = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"boot.{target}.gputui.transports.sim"))
        self.agent_pid = 4999 if not self._healthy else 5999

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

    def request(self, command: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._closed.is_set():
            raise LinkError(f"{self.target}: link closed")
        name = command.get("cmd")
        if name == "configure":
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
        if name == "sample":
            with self._lock:
                return {"snapshot": self._snapshot().to_dict()}
        if name == "calibrate":
            with self._lock:
                snap = self._snapshot()
            return {"memory_used_mib": {g.key: g.memory_used_mib for g in snap.gpus}}
        if name == KILL_COMMAND:
            return self._kill(command)
        if name == KILL_WAIT_COMMAND:
            op = self._op(command)
            self._wait_op(op, _seconds(command.get("timeout_s")))
            return self._reply(op, command.get("since"))
        if name == KILL_ABANDON_COMMAND:
            op = self._op(command)
            with self._lock:
                self._settle()
                if not op.done:
                    self._finish(op, self._clock(), abandoned=True)
            return self._reply(op, command.get("since"))
        if name == "quit":
            return {}
        raise LinkError(f"{self.target}: unknown command {name!r}")

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
        if self._healthy:
            return
        wedge_s = self._start_s + self._wedged_at_s
        if now_s >= wedge_s:
            for proc in self._procs.values():
                if proc.defunct_on_wedge and proc.state != "Z":
                    proc.state = "Z"
                    proc.state_since = wedge_s
                    proc.rss_kib = 0

    def _gpu_used_mib(self, index: int, now_s: float) -> int:
        used = float(IDLE_MIB)
        for proc in self._procs.values():
            used += proc.gpu_mib.get(index, 0)
        for gpu, mib, died_s in self._draining:
            if gpu == index:
                used += mib * max(0.0, 1.0 - (now_s - died_s) / drain_s(gpu))
        return int(round(used))

    def _gpu(self, index: int, now_s: float) -> Gpu:
        used_mib = self._gpu_used_mib(index, now_s)
        holders = tuple(
            GpuProcess(pid=p.pid, used_mib=p.gpu_mib[index])
            for p in sorted(self._procs.values(), key=lambda p: p.pid)
            if index in p.gpu_mib
        )
        busy = any(p.state != "Z" for p in self._procs.values() if index in p.gpu_mib)
        scenario_s = int(now_s - self._start_s)
        if busy:
            util_pct = 78 + (index * 7 + scenario_s * 3) % 19
            power_w = 310.0 + (index * 13 + scenario_s * 5) % 70
            temp_c = 66 + (index * 3 + scenario_s) % 9
        elif used_mib > IDLE_MIB + 64:
            util_pct, power_w, temp_c = 0, 96.0 + index, 51 + index % 3
        else:
            util_pct, power_w, temp_c = 0, 21.0 + index % 4, 34 + index % 4
        return Gpu(
            index=index,
            name=GPU_NAME,
            uuid="GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"gpu{index}.{self.target}.gputui.sim")),
            pci_bus_id=f"00000000:{0x18 + index * 0x10:02X}:00.0",
            memory_used_mib=used_mib,
            memory_total_mib=GPU_TOTAL_MIB,
            memory_reserved_mib=476,
            utilization_pct=util_pct,
            memory_utilization_pct=util_pct // 2 if busy else 0,
            temperature_c=temp_c,
            power_w=power_w,
            power_limit_w=POWER_LIMIT_W,
            processes=holders,
        )

    def _health(self, now_s: float) -> tuple[HealthSample, ...]:
        # The agent probes every few seconds, not on every sample: checked_at says which probe this is.
        probed_s = self._start_s + HEALTH_PROBE_S * ((now_s - self._start_s) // HEALTH_PROBE_S)
        samples = self._health_at(now_s)
        return tuple(replace(sample, checked_at=probed_s) for sample in samples)

    def _health_at(self, now_s: float) -> tuple[HealthSample, ...]:
        url = "http://127.0.0.1:8000/health" if self._healthy else "http://127.0.0.1:30000/health"
        wedge_s = now_s if self._healthy else self._start_s + self._wedged_at_s
        if self._server_dead_at is not None:
            # Nothing listens on the port any more, whichever way the server went.
            return (
                HealthSample(
                    url=url,
                    state="DOWN",
                    since=self._server_dead_at,
                    last_ok=min(wedge_s, self._server_dead_at),
                    consecutive_failures=1,
                    detail="connection refused",
                    discovered=True,
                    checked_at=now_s,
                ),
            )
        if not self._healthy and now_s >= wedge_s:
            return (
                HealthSample(
                    url=url,
                    state="UNHEALTHY",
                    code=503,
                    latency_ms=20_004.0,
                    since=wedge_s,
                    last_ok=wedge_s,
                    consecutive_failures=1 + int((now_s - wedge_s) // 5),
                    detail="503 Service Unavailable",
                    discovered=True,
                    checked_at=now_s,
                ),
            )
        return (
            HealthSample(
                url=url,
                state="UP",
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
        procs = tuple(
            Proc(
                pid=p.pid,
                ppid=p.ppid,
                user=p.user,
                uid=p.uid,
                state=p.state,
                name=p.name,
                cmdline=() if p.state == "Z" else p.cmdline,
                start_ticks=p.start_ticks,
                create_time=BOOT_EPOCH_S + p.start_offset_s,
                state_since=p.state_since,
                rss_kib=p.rss_kib,
                gpu_memory_mib=dict(p.gpu_mib),
            )
            for p in sorted(self._procs.values(), key=lambda p: p.pid)
        )
        return HostSnapshot(
            target=self.target,
            hostname=self.target,
            boot_id=self.boot_id,
            time=now_s,
            driver_version="580.82.07",
            cuda_driver_version="13.0",
            mode="sim",
            agent_version="sim",
            agent_pid=self.agent_pid,
            processes_time=now_s,
            gpus=tuple(self._gpu(i, now_s) for i in range(GPU_COUNT)),
            processes=procs,
            health=self._health(now_s),
        )

    # -- kill --------------------------------------------------------------------------------------------

    def _outcome(
        self,
        proc: _SimProc | None,
        pid: int,
        ticks: Any,
        stage: str,
        signal: str | None,
        result: str,
        detail: str = "",
    ) -> dict[str, Any]:
        return {
            "pid": pid,
            "start_ticks": proc.start_ticks if proc else ticks,
            "name": proc.name if proc else None,
            "user": proc.user if proc else None,
            "cmdline": list(proc.cmdline) if proc else [],
            "gpu_mib": sum(proc.gpu_mib.values()) if proc else None,
            "stage": stage,
            "signal": signal,
            "result": result,
            "detail": detail,
        }

    def _say(
        self, op: _SimKill, proc: _SimProc, stage: str, signal: str | None, result: str, detail: str = ""
    ) -> None:
        op.add(self._outcome(proc, proc.pid, proc.start_ticks, stage, signal, result, detail))

    def _descendants(self, pid: int) -> list[_SimProc]:
        """Descendants of ``pid`` by ppid, deepest first (children are signalled before parents)."""
        found: list[_SimProc] = []
        frontier = [pid]
        while frontier:
            children = [p for p in self._procs.values() if p.ppid in frontier and p.pid not in frontier]
            found.extend(children)
            frontier = [c.pid for c in children]
        return list(reversed(found))

    def _die(self, proc: _SimProc, now_s: float) -> None:
        """Remove a process: its memory starts draining, its zombie children are reaped, the rest orphaned."""
        self._procs.pop(proc.pid, None)
        for gpu, mib in proc.gpu_mib.items():
            self._draining.append((gpu, mib, now_s))
        if proc.pid == self._server_pid:
            self._server_dead_at = now_s
        for child in list(self._procs.values()):
            if child.ppid == proc.pid:
                if child.state == "Z":
                    self._die(child, now_s)
                else:
                    child.ppid = 1

    def _deliver(self, proc: _SimProc, signal: str, now_s: float) -> None:
        """A signal reaches a live process: KILL always ends it, TERM and INT unless it ignores them."""
        if signal == "KILL" or not proc.ignores_term:
            self._die(proc, now_s)

    def _kill(self, command: dict[str, Any]) -> dict[str, Any]:
        """Checks and signals now; the wait and escalation become due on the real clock (``_settle``)."""
        signal = str(command.get("signal") or "TERM")
        if signal not in ("TERM", "INT", "KILL"):
            raise LinkError(f"{self.target}: unknown signal {signal!r}")
        escalate_s = _seconds(command.get("escalate_s"))
        wait_s = _seconds(command.get("wait_s"))
        if signal == "KILL" and escalate_s is not None:
            wait_s, escalate_s = (wait_s if wait_s is not None else escalate_s), None
        with self._lock:
            now_s = self._clock()
            self._advance(now_s)
            self._next_op += 1
            op = _SimKill(self._next_op, signal, escalate_s, wait_s, time.monotonic())
            self._ops[op.op] = op
            self._check_and_signal(op, command, now_s)
            if not op.done and (op.delay_s is None or not (op.watched or op.zombies)):
                self._finish(op, now_s)  # nothing to wait for: zombies are reaped or not, right now
        if not command.get("detach"):
            self._wait_op(op, None)
        return self._reply(op, 0)

    def _check_and_signal(self, op: _SimKill, command: dict[str, Any], now_s: float) -> None:
        tree = bool(command.get("tree"))
        members: list[_SimProc] = []
        asked_zombies: list[_SimProc] = []
        # The trees' members as listed come after the roots: signalled too, should their root be gone.
        listed = list(command.get("members") or ()) if tree else []
        for entry in list(command.get("targets") or ()) + listed:
            pid = int(entry.get("pid"))
            ticks = entry.get("start_ticks")
            proc = self._procs.get(pid)
            if proc is not None and proc in members + asked_zombies:
                continue
            refusal = self._refusal(command, pid, ticks, proc)
            if refusal is not None:
                op.add(self._outcome(proc, pid, ticks, STAGE_CHECK, None, *refusal))
            elif proc is not None and proc.state == "Z":
                asked_zombies.append(proc)
            elif proc is not None:
                for member in (self._descendants(pid) if tree else []) + [proc]:
                    if member not in members:
                        members.append(member)
        signalled = {m.pid for m in members if m.state != "Z"}
        for zombie in asked_zombies:
            if zombie.ppid in signalled:
                members.append(zombie)
            else:
                parent = f"zombie: cannot be killed; signal its parent {zombie.ppid}"
                self._say(op, zombie, STAGE_CHECK, None, RESULT_REFUSED, parent)
        for member in members:
            if member.state == "Z":
                op.zombies.append((member, member.ppid))
                continue
            self._say(op, member, STAGE_SIGNAL, op.signal, RESULT_SENT)
            op.watched.append(member)
            if member.pid in self._procs:
                self._deliver(member, op.signal, now_s)
        if op.delay_s is not None and all(m.pid not in self._procs for m in op.watched):
            self._finish(op, now_s)  # everything went at once: the wait ends early, as the agent's does

    def _refusal(
        self, command: dict[str, Any], pid: int, ticks: Any, proc: _SimProc | None
    ) -> tuple[str, str] | None:
        """(result, detail) when a target is not signalled, as the agent's checks would say."""
        if self._options.read_only:
            return RESULT_REFUSED, "read-only: nothing is signalled"
        if command.get("boot_id") != self.boot_id:
            return RESULT_CHANGED, "process changed: the host rebooted since it was listed (boot id differs)"
        if pid == 1:
            return RESULT_REFUSED, "pid 1 (init) is never signalled"
        if pid == self.agent_pid:
            return RESULT_REFUSED, "this is the gputui agent itself"
        if proc is None:
            return RESULT_GONE, "no such process"
        if ticks is not None and int(ticks) != proc.start_ticks:
            return RESULT_CHANGED, f"process changed: pid {pid} now belongs to another process"
        return None

    def _finish(self, op: _SimKill, now_s: float, abandoned: bool = False) -> None:
        """The end of an operation: what went, then the escalation (or the look) for what did not."""
        alive = [m for m in op.watched if m.pid in self._procs]
        if op.delay_s is not None:
            for member in op.watched:
                if member.pid not in self._procs:
                    self._say(op, member, STAGE_WAIT, None, RESULT_EXITED, f"gone after {op.signal}")
        self._report_zombies(op, STAGE_WAIT, final=False)
        for member in alive:
            if abandoned and op.escalate_s is not None:
                detail = f"alive after {op.signal}; KILL not sent: the escalation was abandoned"
                self._say(op, member, STAGE_ABANDON, None, RESULT_ABANDONED, detail)
            elif abandoned:
                self._say(op, member, STAGE_WAIT, None, RESULT_STILL_ALIVE, f"still alive after {op.signal}")
            elif op.escalate_s is not None:
                escalated = f"still alive after {op.escalate_s:g} s: escalated"
                self._say(op, member, STAGE_ESCALATE, "KILL", RESULT_SENT, escalated)
                self._deliver(member, "KILL", now_s)
            elif op.delay_s is not None:
                detail = f"still alive {op.delay_s:g} s after {op.signal}"
                self._say(op, member, STAGE_WAIT, None, RESULT_STILL_ALIVE, detail)
        if op.escalate_s is not None and not abandoned:
            for member in alive:
                self._say(op, member, STAGE_CONFIRM, "KILL", RESULT_KILLED, "gone after KILL")
            self._report_zombies(op, STAGE_CONFIRM, final=True)
        self._report_zombies(op, STAGE_ABANDON if abandoned else STAGE_WAIT, final=True)
        op.watched = [m for m in alive if m.pid in self._procs]
        op.done = True

    def _report_zombies(self, op: _SimKill, stage: str, final: bool) -> None:
        """Zombies of the operation that were reaped; with ``final``, those left too."""
        remaining = []
        for zombie, parent in op.zombies:
            if zombie.pid not in self._procs:
                self._say(op, zombie, stage, None, RESULT_REAPED, f"reaped with its parent {parent}")
            elif final:
                left = f"still a zombie: its parent {zombie.ppid} has not reaped it"
                self._say(op, zombie, stage, None, RESULT_STILL_ALIVE, left)
            else:
                remaining.append((zombie, parent))
        op.zombies = remaining

    def _settle(self) -> None:
        """Finish every operation whose delay is up (with the lock held: on every command and sample)."""
        now_mono = time.monotonic()
        for op in self._ops.values():
            if not op.done and op.due_mono is not None and now_mono >= op.due_mono:
                self._finish(op, self._clock())

    def _wait_op(self, op: _SimKill, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._lock:
                self._settle()
                if op.done:
                    return
                due = op.due_mono if op.due_mono is not None else time.monotonic()
            until = due if deadline is None else min(due, deadline)
            if self._closed.wait(max(0.0, until - time.monotonic())) or (
                deadline is not None and time.monotonic() >= deadline
            ):
                with self._lock:
                    self._settle()
                return

    def _op(self, command: dict[str, Any]) -> _SimKill:
        op = self._ops.get(command.get("op"))  # type: ignore[arg-type]
        if op is None:
            raise LinkError(f"{self.target}: kill_wait failed: no kill operation {command.get('op')!r} here")
        return op

    def _reply(self, op: _SimKill, since: Any) -> dict[str, Any]:
        with self._lock:
            outcomes = list(op.outcomes)
            now_mono = time.monotonic()
            pending = [] if op.done else [
                {
                    "pid": m.pid,
                    "start_ticks": m.start_ticks,
                    "name": m.name,
                    "signal": "KILL" if op.escalate_s is not None else None,
                    "due_in_s": None if op.due_mono is None else max(0.0, op.due_mono - now_mono),
                }
                for m in op.watched
                if m.pid in self._procs
            ]
            return {
                "op": op.op,
                "outcomes": outcomes[int(since or 0):],
                "count": len(outcomes),
                "done": op.done,
                "pending": pending,
                "escalate_s": op.escalate_s,
                "wait_s": op.wait_s,
                "elapsed_s": round((op.finished_mono or now_mono) - op.started_mono, 3),
            }


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass
class _SimKill:
    """One simulated kill operation: its outcomes, and what it still watches until ``due_mono``."""

    op: int
    signal: str
    escalate_s: float | None
    wait_s: float | None
    started_mono: float
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    watched: list[_SimProc] = field(default_factory=list)
    zombies: list[tuple[_SimProc, int]] = field(default_factory=list)
    finished_mono: float | None = None
    _done: bool = False

    @property
    def delay_s(self) -> float | None:
        return self.escalate_s if self.escalate_s is not None else self.wait_s

    @property
    def due_mono(self) -> float | None:
        return None if self.delay_s is None else self.started_mono + self.delay_s

    @property
    def done(self) -> bool:
        return self._done

    @done.setter
    def done(self, value: bool) -> None:
        self._done = value
        if value and self.finished_mono is None:
            self.finished_mono = time.monotonic()

    def add(self, outcome: dict[str, Any]) -> None:
        self.outcomes.append(outcome)
