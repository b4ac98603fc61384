"""The host sample: GPUs, processes, device holders and ports as a collector reported them, and their JSON.

Everything a collector reports, everything the analysis derives and everything the UI shows is a record
(``record``). Units are in the field names; a value that could not be read is ``None`` (never a fake zero).
The JSON form is the wire format between the collector and the client (``HostSnapshot.to_dict`` /
``from_dict``; the collector's side of it is ``gputui.agent.protocol``) and the output of ``gputui snapshot
--json``. This module imports nothing outside the standard library, that protocol module and its siblings in
``model`` (the records of a GPU's fitness, an endpoint's sample, an owner, the verdict, figures no card can
have, typed wire values) and ``text`` (strings made safe).
"""

from __future__ import annotations

import json

from gputui.agent.protocol import (
    GPU_FITNESS,
    GPU_MEMORY_UNREPORTED,
    GPU_TIMEOUTS_IN_ROW,
    GPU_UNREACHABLE,
    KERNEL_LOG,
    LISTENING_PORTS,
    MODE_LABELS,
    PROBE,
    PROCESS_CPU_PCT,
    PROCESS_LISTEN_PORTS,
    PROCESS_LIVE_THREADS,
    PROCESS_OWNER,
    PROCESS_PROFILER,
    PROCESS_WAITS,
    PROCESSES_SAME,
    REMEMBERED,
    UNREACHABLE_STATES,
)
from gputui.core.model import figures
from gputui.core.model.endpoint import EndpointSample
from gputui.core.model.fitness import GpuFitness, KernelLogNote
from gputui.core.model.owner import Owner
from gputui.core.model.probe import ProbeReport
from gputui.core.model.profiler import ProfilerMark
from gputui.core.model.record import Record, field, fields, replace
from gputui.core.model.remembered import Remembered
from gputui.core.model.verdict import Finding, Verdict
from gputui.core.model.waits import ThreadWait, thread_waits
from gputui.core.model.wire import (
    opt_float,
    opt_int,
    opt_safe,
    plain,
    plain_value,
    ports_of,
    safe,
    safe_list,
)
from gputui.core.text import SafeText

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, ClassVar

# Process state letters as /proc/<pid>/stat reports them.
STATE_ZOMBIE = "Z"
STATE_UNINTERRUPTIBLE = "D"


_PER_GPU_PCT = ("gpu_sm_pct", "gpu_mem_bw_pct", "gpu_enc_pct", "gpu_dec_pct")
"""Process fields of GPU index -> percent (``Proc``)."""


def _pct_float(value: Any) -> float | None:
    """A CPU percent: None for what no process can use (negative, NaN, infinite)."""
    number = opt_float(value)
    return number if number is not None and 0.0 <= number < 1e6 else None


def _per_gpu_pct(value: Any) -> dict[int, int]:
    """GPU index -> percent from a collector: the entries that are one (0..100), others dropped."""
    if not value or not isinstance(value, dict):
        return {}
    out: dict[int, int] = {}
    for key, pct in value.items():
        index, number = opt_int(key), opt_int(pct)
        if index is not None and index >= 0 and number is not None and 0 <= number <= 100:
            out[index] = number
    return dict(sorted(out.items()))


class GpuProcess(Record):
    """One process as NVML (or nvidia-smi) lists it on one GPU.

    Attributes:
        pid: Process id as the driver reports it (may be from another PID namespace).
        used_mib: GPU memory the driver attributes to it, or None when the driver will not say.
        type: "compute" or "graphics".
        visible: Whether this pid exists in the collector's PID namespace (False: a container's view).
    """

    pid: int
    used_mib: int | None = None
    type: str = "compute"
    visible: bool = True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuProcess:
        return cls(
            pid=int(data["pid"]),
            used_mib=opt_int(data.get("used_mib")),
            type=safe(data.get("type"), "compute"),
            visible=bool(data.get("visible", True)),
        )


class Gpu(Record):
    """One GPU's figures in one sample.

    ``memory_used_mib`` is what ``nvidia-smi --query-gpu=memory.used`` prints: with NVML's v2 memory info the
    driver's reserved memory is reported apart in ``memory_reserved_mib`` and is not included in used.
    """

    index: int
    name: SafeText | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    memory_reserved_mib: int | None = None
    utilization_pct: int | None = None
    memory_utilization_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    error: SafeText | None = None
    unreachable: str | None = None
    """Why the GPU could not be read, as a fact with an action (``protocol.UNREACHABLE_STATES``); None while
    it answers. ``error`` says it in the driver's words."""
    timeouts_in_row: int = 0
    """Samples in a row whose NVML calls on this GPU timed out."""
    memory_unreported: bool = False
    """The driver does not report this GPU's memory (unified memory, e.g. GB10): the memory figures are None
    and no error; the clean slate judges it by its processes. Its JSON key is ``GPU_MEMORY_UNREPORTED``."""
    processes: tuple[GpuProcess, ...] = ()
    fitness: GpuFitness | None = None
    """The GPU's own fitness figures and Xid history (``model.fitness``); None where none was read. Its JSON
    key is the protocol's ``GPU_FITNESS``."""
    JSON_KEYS: ClassVar[dict[str, str] | None] = {"fitness": GPU_FITNESS}

    def __post_init__(self) -> None:
        """Figures no card can have are dropped and named in ``error``: that GPU cannot tell (``figures``)."""
        for name, value in figures.dropped(self).items():
            object.__setattr__(self, name, value)

    @property
    def key(self) -> str:
        """A stable identity for baselines: the UUID when known, else the index."""
        return self.uuid or f"index:{self.index}"

    @classmethod
    def from_dict(cls, data: dict[str, Any], processes: tuple[GpuProcess, ...] | None = None) -> Gpu:
        """``processes``: the list to use instead of the data's (a stream line that left it out)."""
        return cls(
            index=int(data["index"]),
            name=opt_safe(data.get("name")),
            uuid=opt_safe(data.get("uuid")),
            pci_bus_id=opt_safe(data.get("pci_bus_id")),
            memory_used_mib=opt_int(data.get("memory_used_mib")),
            memory_total_mib=opt_int(data.get("memory_total_mib")),
            memory_reserved_mib=opt_int(data.get("memory_reserved_mib")),
            utilization_pct=opt_int(data.get("utilization_pct")),
            memory_utilization_pct=opt_int(data.get("memory_utilization_pct")),
            temperature_c=opt_int(data.get("temperature_c")),
            power_w=opt_float(data.get("power_w")),
            power_limit_w=opt_float(data.get("power_limit_w")),
            error=opt_safe(data.get("error")),
            unreachable=_unreachable(data.get(GPU_UNREACHABLE)),
            timeouts_in_row=min(max(opt_int(data.get(GPU_TIMEOUTS_IN_ROW)) or 0, 0), 1 << 30),
            memory_unreported=data.get(GPU_MEMORY_UNREPORTED) is True,
            processes=(
                processes
                if processes is not None
                else tuple(p for p in map(GpuProcess.from_dict, data.get("processes") or ()) if p.pid >= 0)
            ),
            fitness=GpuFitness.from_dict(data.get(GPU_FITNESS)),
        )


def _unreachable(value: Any) -> str | None:
    return value if isinstance(value, str) and value in UNREACHABLE_STATES else None


class LiveThreads(Record):
    """The threads of a zombie-state process that have not exited (``protocol.live_threads``).

    Attributes:
        live: How many (leader excluded). 0: a true zombie, whose memory is already freed.
        states: State letter -> how many of them are in it (``D``: uninterruptible, usually in a driver).
        omitted: Thread entries the collector did not read (over its cap).
    """

    live: int
    states: dict[str, int] = field(default_factory=dict)
    omitted: int = 0

    @classmethod
    def from_dict(cls, data: Any) -> LiveThreads | None:
        if not isinstance(data, dict):
            return None
        states = data.get("states")
        pairs = states.items() if isinstance(states, dict) else ()
        return cls(
            live=max(0, opt_int(data.get("live")) or 0),
            states={safe(k): max(0, opt_int(v) or 0) for k, v in pairs},
            omitted=max(0, opt_int(data.get("omitted")) or 0),
        )


class Proc(Record):
    """One host process: a GPU process, one of their ancestors or descendants, or a zombie/D-state process.

    Attributes:
        start_ticks: Start time in clock ticks since boot (field 22 of /proc/<pid>/stat). With the host's
            boot id and the pid it identifies the process across pid reuse and wall-clock changes.
        state: The state letter from /proc (R, S, D, Z, T, ...).
        state_since: Wall-clock time (epoch seconds) at which the collector first saw the current state.
        gpu_memory_mib: GPU index -> MiB this process holds there (empty when it holds none).
        cmdline: The argv list; may be empty (kernel threads, zombies).
        cmdline_truncated: The collector cut ``cmdline`` to keep its stream lines small (a process may carry
            megabytes of argv); the whole text is one ``process`` command away
            (``gputui.core.link.process_text``).
        pgid: Its process group id (field 5 of /proc/<pid>/stat), None when the collector did not say. A tree
            kill also signals the members of groups led by tree members, so a double-forked grandchild whose
            middle parent died still belongs to its launcher's tree through this.
        sid: Its session id (field 6 of /proc/<pid>/stat), None when the collector did not say.
        cgroup: The cgroup that tells its job apart (``gputui.agent.proc.procfs.parse_cgroup``), None when
            unknown.
        live_threads: For a zombie-state process, its threads still alive (a defunct leader's); None for any
            other process, or when they could not be read.
        listen_ports: The TCP ports it has in LISTEN, sorted (read for the processes of GPU jobs only).
        owner: Whose job it is (``gputui.core.model.owner.Owner``), None when the collector did not say.
        cpu_pct: CPU % since the collector's last process sample (100 = one core), None when unknown.
        gpu_sm_pct: GPU index -> the SM utilisation of this process there, percent, over the driver's last
            sampling interval (``nvmlDeviceGetProcessUtilization``); only GPUs with a sample.
        gpu_mem_bw_pct, gpu_enc_pct, gpu_dec_pct: The same for memory bandwidth, encoder and decoder.
        waits: Its stuck threads and where each waits in the kernel (``ThreadWait``): for a process in D, a
            defunct leader, or a job's process whose threads run in the kernel without returning; () for any
            other process.
        profiler: For a process of a GPU job: whether it is a profiler, carries one's injection, or could
            not be looked at (``ProfilerMark``); None for any other process, or where the collector did not
            say.
    """

    pid: int
    ppid: int | None = None
    user: SafeText | None = None
    uid: int | None = None
    state: str | None = None
    name: SafeText | None = None
    cmdline: tuple[SafeText, ...] = ()
    cmdline_truncated: bool = False
    start_ticks: int | None = None
    create_time: float | None = None
    state_since: float | None = None
    rss_kib: int | None = None
    gpu_memory_mib: dict[int, int] = field(default_factory=dict)
    pgid: int | None = None
    sid: int | None = None
    cgroup: SafeText | None = None
    live_threads: LiveThreads | None = None
    listen_ports: tuple[int, ...] = ()
    owner: Owner | None = None
    cpu_pct: float | None = None
    gpu_sm_pct: dict[int, int] = field(default_factory=dict)
    gpu_mem_bw_pct: dict[int, int] = field(default_factory=dict)
    gpu_enc_pct: dict[int, int] = field(default_factory=dict)
    gpu_dec_pct: dict[int, int] = field(default_factory=dict)
    waits: tuple[ThreadWait, ...] = ()
    profiler: ProfilerMark | None = None

    @property
    def is_zombie(self) -> bool:
        return self.state == STATE_ZOMBIE

    @property
    def is_defunct_leader(self) -> bool:
        """State Z with threads still alive: the process has not exited (it holds its files and GPU memory)
        and can be signalled, unlike a true zombie."""
        threads = self.live_threads
        alive = threads is not None and (threads.live > 0 or threads.omitted > 0)
        return self.state == STATE_ZOMBIE and alive

    @property
    def is_uninterruptible(self) -> bool:
        return self.state == STATE_UNINTERRUPTIBLE

    @property
    def gpu_total_mib(self) -> int:
        return sum(self.gpu_memory_mib.values())

    def to_dict(self) -> dict[str, Any]:
        """The wire entry (``plain``'s shape, keys in field order); a job lists hundreds of processes, so
        the fields that are plain values already are copied, not converted."""
        data: dict[str, Any] = {}
        for name in _PROC_FIELDS:
            value = getattr(self, name)
            if name in _PROC_CONVERTED:
                if name in _PER_GPU_KEYED:
                    value = {str(k): v for k, v in value.items()}
                elif name == PROCESS_OWNER:
                    value = None if value is None else value.to_dict()
                else:
                    value = plain_value(value)
            data[name] = value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Proc:
        return cls(
            pid=int(data["pid"]),
            ppid=opt_int(data.get("ppid")),
            user=opt_safe(data.get("user")),
            uid=opt_int(data.get("uid")),
            state=opt_safe(data.get("state")),
            name=opt_safe(data.get("name")),
            cmdline=safe_list(data.get("cmdline")),
            cmdline_truncated=data.get("cmdline_truncated") is True,
            start_ticks=opt_int(data.get("start_ticks")),
            create_time=opt_float(data.get("create_time")),
            state_since=opt_float(data.get("state_since")),
            rss_kib=opt_int(data.get("rss_kib")),
            gpu_memory_mib={
                int(k): int(v)
                for k, v in (data.get("gpu_memory_mib") or {}).items()
                if 0 <= int(v) <= figures.MEMORY_MAX_MIB  # a negative figure is no figure: never shown
            },
            pgid=opt_int(data.get("pgid")),
            sid=opt_int(data.get("sid")),
            cgroup=opt_safe(data.get("cgroup")),
            live_threads=LiveThreads.from_dict(data.get(PROCESS_LIVE_THREADS)),
            listen_ports=ports_of(data.get(PROCESS_LISTEN_PORTS)) or (),
            owner=Owner.from_dict(data.get(PROCESS_OWNER)),
            cpu_pct=_pct_float(data.get(PROCESS_CPU_PCT)),
            waits=thread_waits(data.get(PROCESS_WAITS)),
            **{key: _per_gpu_pct(data.get(key)) for key in _PER_GPU_PCT},
            profiler=ProfilerMark.from_dict(data.get(PROCESS_PROFILER)),
        )


_PROC_FIELDS = fields(Proc)
_PER_GPU_KEYED = frozenset({"gpu_memory_mib", *_PER_GPU_PCT})
"""``Proc`` fields keyed by GPU index: JSON keys are strings."""
_PROC_CONVERTED = _PER_GPU_KEYED | {
    "cmdline",
    "listen_ports",
    "live_threads",
    PROCESS_OWNER,
    "waits",
    "profiler",
}
"""``Proc`` fields whose values are not JSON values as they are (tuples, records, int keys); every other field
holds a str, a number, a bool or None (``tests/unit/test_model.py`` holds that)."""


class ProcMemo:
    """The processes of one stream's sample before, by pid, each with the entry it was read from.

    A collector lists every process of a job each sample, and hundreds of idle members come with the same
    entry every time: an entry equal to the one its pid had the sample before is that same ``Proc``, not read
    again. Only the last sample is kept.
    """

    def __init__(self) -> None:
        self._last: dict[int, tuple[Any, Proc]] = {}

    def decode(self, entries: Iterable[Any]) -> list[Proc]:
        """``Proc.from_dict`` of each entry (its errors too), in order."""
        last = self._last
        kept: dict[int, tuple[Any, Proc]] = {}
        out: list[Proc] = []
        for entry in entries:
            pid = entry.get("pid") if isinstance(entry, dict) else None
            seen = last.get(pid) if type(pid) is int else None
            same = seen is not None and (seen[0] is entry or seen[0] == entry)
            proc = seen[1] if same and seen is not None else Proc.from_dict(entry)
            kept[proc.pid] = (entry, proc)
            out.append(proc)
        self._last = kept
        return out


class DeviceHolder(Record):
    """A process that has a /dev/nvidia* node open (a ghost-memory suspect)."""

    pid: int
    name: SafeText | None = None
    device: SafeText | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceHolder:
        return cls(pid=int(data["pid"]), name=opt_safe(data.get("name")), device=opt_safe(data.get("device")))


class HostSnapshot(Record):
    """Everything one collector saw on one host at one moment.

    Attributes:
        target: The name the user gave for the host ("local", an ssh alias, user@host:port).
        time: Epoch seconds of the sample (the collector's clock).
        processes_time: Epoch seconds at which the process list was last sampled (it is sampled less often
            than memory); None when no process list was taken.
        mode: How the data was collected (``protocol.MODE_*``): "nvml", "smi" (nvidia-smi + /proc), "none",
            "ps" (reduced), "sim", "prometheus".
        error: Host-level error (no driver, unreachable, ...); GPUs may then be empty.
        processes_omitted: Processes the collector left out of ``processes`` to keep its lines small (it lists
            GPU process trees first, then zombie / D-state processes, up to a cap).
        listening_ports: Every TCP port in LISTEN on the host when the process list was taken, sorted; None
            when the collector could not tell.
        remembered: What the collector remembers of the host's GPU jobs and GPUs since boot; None from a
            collector that does not remember (the simulator, an older collector, the fleet).
    """

    target: str
    hostname: SafeText | None = None
    boot_id: str | None = None
    time: float | None = None
    error: SafeText | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    mode: str | None = None
    agent_version: str | None = None
    agent_pid: int | None = None
    processes_time: float | None = None
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[Proc, ...] = ()
    processes_omitted: int = 0
    device_holders: tuple[DeviceHolder, ...] | None = None
    listening_ports: tuple[int, ...] | None = None
    kernel_log: KernelLogNote | None = None
    remembered: Remembered | None = None
    probe: ProbeReport | None = None
    """The readiness probe asked for with this sample (``check --probe``), taken before it; None otherwise."""
    findings: tuple[Finding, ...] = ()
    endpoints: tuple[EndpointSample, ...] = ()
    """The inference-server endpoints the collector probed, each as last seen; JSON key ``health``."""
    verdict: Verdict | None = None
    JSON_KEYS: ClassVar[dict[str, str] | None] = {"endpoints": "health"}

    @property
    def mode_label(self) -> str | None:
        """How a host line names the way its collector reads the host ("NVML", "nvidia-smi", "reduced");
        None for the simulator, the fleet source and an unknown mode."""
        return MODE_LABELS.get(self.mode or "")

    def listener(self, port: int) -> Proc | None:
        """The listed process that listens on ``port``, if one does."""
        for proc in self.processes:
            if port in proc.listen_ports:
                return proc
        return None

    def process(self, pid: int) -> Proc | None:
        """The process with this pid in this snapshot, if listed."""
        for proc in self.processes:
            if proc.pid == pid:
                return proc
        return None

    def with_analysis(
        self, findings: tuple[Finding, ...] | list[Finding], verdict: Verdict | None
    ) -> HostSnapshot:
        return replace(self, findings=tuple(findings), verdict=verdict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        keys = self.JSON_KEYS or {}
        for name in fields(self):
            data[keys.get(name, name)] = getattr(self, name)
        data["gpus"] = [plain(g) for g in self.gpus]
        data["processes"] = [p.to_dict() for p in self.processes]
        data["device_holders"] = (
            None if self.device_holders is None else [plain(h) for h in self.device_holders]
        )
        data[LISTENING_PORTS] = None if self.listening_ports is None else list(self.listening_ports)
        data[KERNEL_LOG] = None if self.kernel_log is None else plain(self.kernel_log)
        data[REMEMBERED] = None if self.remembered is None else plain(self.remembered)
        data[PROBE] = None if self.probe is None else plain(self.probe)
        data["findings"] = [plain(f) for f in self.findings]
        data["health"] = [h.to_dict() for h in self.endpoints]
        data["verdict"] = None if self.verdict is None else self.verdict.to_dict()
        return data

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], previous: HostSnapshot | None = None, memo: ProcMemo | None = None
    ) -> HostSnapshot:
        """The snapshot in ``data``.

        A collector stream line may say ``"processes_same": true`` instead of repeating the process lists
        (``processes`` and each GPU's) it sent with the same ``processes_time`` before; ``previous`` is the
        snapshot parsed from the stream before it, whose lists are then taken over (the same objects).
        ``memo``: the stream's ``ProcMemo`` (a process entry equal to its entry of the sample before is not
        read again).

        Raises:
            ValueError: ``processes_same`` without a ``previous`` taken at the same ``processes_time``.
        """
        holders = data.get("device_holders")
        verdict = data.get("verdict")
        if data.get(PROCESSES_SAME) is True:
            listed_at = opt_float(data.get("processes_time"))
            if previous is None or listed_at is None or previous.processes_time != listed_at:
                raise ValueError("process lists marked unchanged, but no earlier list from that time")
            by_index = {gpu.index: gpu for gpu in previous.gpus}
            gpus = tuple(_same_lists(g, by_index.get(int(g["index"]))) for g in data.get("gpus") or ())
            processes = previous.processes
            listening = previous.listening_ports
            kernel_log = previous.kernel_log
            remembered = previous.remembered
        else:
            gpus = tuple(Gpu.from_dict(g) for g in data.get("gpus") or ())
            entries = data.get("processes") or ()
            decoded = map(Proc.from_dict, entries) if memo is None else memo.decode(entries)
            processes = tuple(p for p in decoded if p.pid > 0)
            listening = ports_of(data.get(LISTENING_PORTS))
            kernel_log = KernelLogNote.from_dict(data.get(KERNEL_LOG))
            remembered = Remembered.from_dict(data.get(REMEMBERED))
        return cls(
            target=safe(data.get("target")),
            hostname=opt_safe(data.get("hostname")),
            boot_id=opt_safe(data.get("boot_id")),
            time=opt_float(data.get("time")),
            error=opt_safe(data.get("error")),
            driver_version=opt_safe(data.get("driver_version")),
            cuda_driver_version=opt_safe(data.get("cuda_driver_version")),
            mode=opt_safe(data.get("mode")),
            agent_version=opt_safe(data.get("agent_version")),
            agent_pid=opt_int(data.get("agent_pid")),
            processes_time=opt_float(data.get("processes_time")),
            gpus=gpus,
            processes=processes,
            processes_omitted=max(0, opt_int(data.get("processes_omitted")) or 0),
            device_holders=(
                None
                if holders is None
                else tuple(h for h in map(DeviceHolder.from_dict, holders) if h.pid > 0)
            ),
            listening_ports=listening,
            kernel_log=kernel_log,
            remembered=remembered,
            probe=ProbeReport.from_dict(data.get(PROBE)),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings") or ()),
            endpoints=tuple(EndpointSample.from_dict(h) for h in data.get("health") or ()),
            verdict=None if verdict is None else Verdict.from_dict(verdict),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> HostSnapshot:
        return cls.from_dict(json.loads(text))


def _same_lists(data: dict[str, Any], previous: Gpu | None) -> Gpu:
    """A GPU of a line marked ``processes_same``: its process list and fitness are the previous line's."""
    gpu = Gpu.from_dict(data, () if previous is None else previous.processes)
    if GPU_FITNESS in data or previous is None:
        return gpu
    return replace(gpu, fitness=previous.fitness)


def snapshots_document(snapshots: list[HostSnapshot] | tuple[HostSnapshot, ...]) -> dict[str, Any]:
    """The top-level JSON document of ``gputui snapshot --json``: ``{"hosts": [...]}``."""
    return {"hosts": [s.to_dict() for s in snapshots]}
