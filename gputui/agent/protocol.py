"""The collector's protocol: the one source of its versions, names and message shapes.

The collector (this package), the client's model and analysis, the kill planner, the simulator, the reduced
(no python3) mode and the UI all take these names from here; nothing else spells them. A message is one JSON
object per line: the collector writes ``hello`` once, then ``snapshot`` lines, and a ``reply`` to each
command it reads (``{"cmd": NAME, "id": N, ...}``). The builders below make every dict of a given kind the
same shape, whichever side builds it.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

VERSION = "0.1.0"
"""The release: the package's version (``pyproject.toml`` reads it from here) and the collector's."""
PROTOCOL_VERSION = 1
"""Version of the JSON-lines protocol; a client refuses a collector that speaks another one."""

# ----------------------------------------------------------------------------------------------------------
# Messages and commands

MSG_HELLO = "hello"
MSG_SNAPSHOT = "snapshot"
MSG_REPLY = "reply"

CMD_HELLO = "hello"
CMD_CONFIGURE = "configure"
"""``{"cmd": "configure", "memory_interval_s", "process_interval_s", "fitness_interval_s", "watch_exits",
"health_urls", "metrics_urls", "discover_health", "health_generate"}``, every key optional: a bad value
changes nothing."""
CMD_SAMPLE = "sample"
"""A full snapshot now (process list included): ``{"snapshot": {...}}``."""
CMD_CALIBRATE = "calibrate"
"""Each GPU's used memory by key (uuid, else ``index:N``): ``{"memory_used_mib": {...}}``."""
CMD_PROCESS = "process"
"""``{"cmd": "process", "pid": P, "start_ticks": T}``: one process's whole command line, which snapshots
cut."""
CMD_HEALTH = "health"
"""``{"cmd": "health", "urls": [...], "metrics_urls": [...], "generate": bool, "discover": bool,
"interval_s": S, "deadline_s": S, "discover_now": bool}``, every key optional: changes what is probed;
answers ``{"config", "samples"}``. A metrics URL is read beside the health URL of the same origin."""
CMD_QUIT = "quit"

KILL_COMMAND = "kill"
"""``{"cmd": "kill", "targets": [{"pid", "start_ticks"}], "members": [...], "boot_id", "signal", "tree",
"escalate_s", "wait_s", "detach"}``: checks and signals at once; the wait, the escalation and the
confirmation then run in the collector whether or not the client stays. ``members``: the trees' processes as
the client listed them (signalled too, should their root be gone by now). ``detach`` answers right after the
signals, else at the end."""
KILL_WAIT_COMMAND = "kill_wait"
"""``{"cmd": "kill_wait", "op": N, "since": I, "timeout_s": S}``: operation N's outcomes from index I on, once
it is done or after S seconds, whichever comes first."""
KILL_ABANDON_COMMAND = "kill_abandon"
"""``{"cmd": "kill_abandon", "op": N, "since": I}``: cancel N's escalation if it is not under way yet; every
process it leaves is reported as abandoned."""
KILL_COMMANDS = (KILL_COMMAND, KILL_WAIT_COMMAND, KILL_ABANDON_COMMAND)
"""The commands that may take seconds: the remote loop runs each on a thread of its own."""
RESET_PLAN_COMMAND = "reset_plan"
"""``{"cmd": "reset_plan", "gpus": ["0", "GPU-…"] or null (every GPU)}``: what blocks a reset of those GPUs
and the steps that would do it (``agent.reset``): ``{"plan": {...}}``. Reads only."""
RESET_RUN_COMMAND = "reset_run"
"""``{"cmd": "reset_run", "gpus": [...], "steps": [[argv], ...]}``: plan again, refuse unless the verdict is
"go" and the steps are the ones the client confirmed, step aside (close this collector's NVML), run them with
bounded time, restore what was on, come back and verify: ``{"plan", "steps", "verified", "after", ...}``."""
RESET_COMMANDS = (RESET_PLAN_COMMAND, RESET_RUN_COMMAND)
LEFTOVERS_SCAN_COMMAND = "leftovers_scan"
"""``{"cmd": "leftovers_scan", "pids": [...]}``: what a job about to be killed has open or mapped in /dev/shm
and its users' MPS control daemons (``agent.proc.leftovers.scan``)."""
LEFTOVERS_CHECK_COMMAND = "leftovers_check"
"""``{"cmd": "leftovers_check", "segments": [...], "mps": [...], "reports": [...]}``: which recorded leftovers
still exist (``reports``: killed profilers' unfinished reports, ``agent.proc.profiler``)."""
LEFTOVERS_REMOVE_COMMAND = "leftovers_remove"
"""``{"cmd": "leftovers_remove", "segments": [...], "reports": [...]}``: unlink the segments and the
unfinished reports' raw streams still the same and used by none (the reports first)."""
LEFTOVERS_COMMANDS = (LEFTOVERS_SCAN_COMMAND, LEFTOVERS_CHECK_COMMAND, LEFTOVERS_REMOVE_COMMAND)
PROBE_COMMAND = "probe"
"""``{"cmd": "probe", "gpus": ["0", "GPU-…"] or null, "deadline_s", "buffer_mib", "force"}``: does each GPU
take work (``gpu.probe``): ``{"probes": [{"index", "uuid", "pci_bus_id", "result", "steps", "ms", "step",
"error", "code", "visible", "skip", "detail"}, ...], "deadline_s", "buffer_mib"}``. Runs on a thread of its
own, after any kill under way."""
COMMANDS = (
    (
        CMD_HELLO,
        CMD_CONFIGURE,
        CMD_SAMPLE,
        CMD_CALIBRATE,
        CMD_PROCESS,
        CMD_HEALTH,
        CMD_QUIT,
    )
    + KILL_COMMANDS
    + RESET_COMMANDS
    + (PROBE_COMMAND,)
)

# GPU resets (``agent.reset``): the verdict of a plan, the kinds of device holders and steps, blocker codes.
RESET_GO = "go"
"""Every blocker has a step of the plan: the reset can go ahead."""
RESET_BLOCKED = "blocked"
"""Something only the user can clear blocks it (a process to kill, MIG mode, a partial NVSwitch baseboard)."""
RESET_REBOOT = "reboot"
"""A reset cannot work here: only a reboot clears it (a holder stuck in the driver, a display, a lost GPU)."""
RESET_UNKNOWN = "unknown"
"""It cannot tell (processes whose open files cannot be read, GPU modes that cannot be read)."""
RESET_VERDICTS = (RESET_GO, RESET_BLOCKED, RESET_REBOOT, RESET_UNKNOWN)
HOLDER_OWN = "own"
"""The collector that plans the reset: it steps aside before the steps run."""
HOLDER_GPUTUI = "gputui"
"""Another gputui process (a TUI, its collector, a gputui exporter run by hand): known by its command line
(``is_gputui_command``), never by a substring of a path."""
BOOT_NAME = "gputui-boot"
"""The ``__name__`` the remote collector's first stage runs its second under: the mark of a collector that
was sent over ssh, on its ``python3 -c`` command line."""


def is_gputui_command(cmdline: list[str]) -> bool:
    """Whether a command line is gputui's own: the ``gputui`` script (run directly or by a python), a
    ``python -m gputui…``, or a collector's ``python3 -c`` first stage (``BOOT_NAME``). A checkout or venv
    under a folder named ``gputui…``, or a user's ``gputui-experiments/train.py``, is not."""
    if not cmdline:
        return False
    first = cmdline[0].rsplit("/", 1)[-1]
    if first == "gputui":
        return True
    if not first.startswith("python"):
        return False
    words = cmdline[1:8]
    for at, word in enumerate(words):
        following = words[at + 1] if at + 1 < len(words) else ""
        if word == "-m":
            return following == "gputui" or following.startswith("gputui.")
        if word == "-c":
            return f'"__name__":"{BOOT_NAME}"' in following
        if not word.startswith("-"):
            return word.rsplit("/", 1)[-1] == "gputui"
    return False


GPU_STACK_SERVICES = {
    "nv-fabricmanager": "the NVSwitch fabric manager",
    "nv-hostengine": "the DCGM host engine",
    "nvidia-persistenced": "the persistence daemon",
    "nvidia-device-plugin": "the Kubernetes device plugin",
    "dcgm-exporter": "DCGM's Prometheus exporter",
    "nvidia-imex": "the IMEX daemon",
}
"""The GPU stack's own services by their binaries' names, and what each is. The GPU operator runs them in
pods, a site may run them in containers or by hand: wherever they run they keep the node's GPUs working, so
they are never a kill target, and a reset plan names them as what they are."""
_COMM_BYTES = 15
"""The kernel keeps a process name (comm) in 16 bytes: ``nv-fabricmanager`` is ``nv-fabricmanage`` there."""


def gpu_stack_service(cmdline: list[str] | None, name: str | None = None) -> str | None:
    """The GPU-stack service a process is (a ``GPU_STACK_SERVICES`` key), by its first argument's file name
    or, when its command line is unreadable, by its process name; None for any other process."""
    if cmdline:
        first = cmdline[0].rsplit("/", 1)[-1]
        return first if first in GPU_STACK_SERVICES else None
    if name:
        for binary in GPU_STACK_SERVICES:
            if name == binary[:_COMM_BYTES]:
                return binary
    return None


HOLDER_SERVICE = "service"
"""A process of a systemd service unit: stopped by a ``systemctl stop`` step, never signalled."""
HOLDER_GPU_SERVICE = "gpu_service"
"""A GPU-stack service (``GPU_STACK_SERVICES``) outside a systemd unit, in a pod or a container: never
signalled; it blocks the reset until it is stopped where it runs."""
HOLDER_PROCESS = "process"
"""Any other process: it blocks the reset until the user kills it (``gputui kill``)."""
HOLDER_STUCK = "stuck"
"""A holder in uninterruptible sleep or a defunct leader with live threads: it may never let go."""
HOLDER_KINDS = (HOLDER_OWN, HOLDER_GPUTUI, HOLDER_SERVICE, HOLDER_GPU_SERVICE, HOLDER_PROCESS, HOLDER_STUCK)
STEP_STOP_SERVICE = "stop_service"
STEP_PERSISTENCE_OFF = "persistence_off"
STEP_RESET = "reset"
STEP_PERSISTENCE_ON = "persistence_on"
STEP_START_SERVICE = "start_service"
UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.@-]{0,200}\.service")
"""A systemd service unit's name as a reset plan may stop and start it."""
RESET_STEP_KINDS = (
    STEP_STOP_SERVICE,
    STEP_PERSISTENCE_OFF,
    STEP_RESET,
    STEP_PERSISTENCE_ON,
    STEP_START_SERVICE,
)
STEP_OK = "ok"
STEP_FAILED = "failed"
STEP_TIMEOUT = "timeout"
STEP_NOT_RUN = "not_run"
"""A step after a failed one (the restoring steps always run)."""
STEP_RESULTS = (STEP_OK, STEP_FAILED, STEP_TIMEOUT, STEP_NOT_RUN)
BLOCK_HOLDER = "holder"
BLOCK_PERSISTENCE = "persistence"
BLOCK_MIG = "mig"
BLOCK_DISPLAY = "display"
BLOCK_NVSWITCH = "nvswitch"
BLOCK_NO_SMI = "no_smi"
BLOCK_NO_SYSTEMCTL = "no_systemctl"
BLOCK_UNREADABLE = "unreadable"
BLOCK_GPU_ERROR = "gpu_error"
BLOCK_MODES_UNKNOWN = "modes_unknown"
BLOCK_READ_ONLY = "read_only"
BLOCK_CODES = (
    BLOCK_HOLDER,
    BLOCK_PERSISTENCE,
    BLOCK_MIG,
    BLOCK_DISPLAY,
    BLOCK_NVSWITCH,
    BLOCK_NO_SMI,
    BLOCK_NO_SYSTEMCTL,
    BLOCK_UNREADABLE,
    BLOCK_GPU_ERROR,
    BLOCK_MODES_UNKNOWN,
    BLOCK_READ_ONLY,
)
"""What a reset plan's blockers say (``core.actions.reset_plan`` words each one)."""

SIGNAL_NAMES = ("TERM", "INT", "KILL")
"""The signals a kill may ask for."""

PROCESS_LIVE_THREADS = "live_threads"
"""The key of a process dict that holds, for a zombie-state (Z) process, its threads still alive
(:func:`live_threads`); null for every other process and where they could not be read."""

PROCESS_WAITS = "waits"
"""The key of a process dict that holds, for a process the collector found stuck (its leader in state D, a
defunct leader whose threads live on, a GPU job's process whose user time stood still while it ran in the
kernel), where its stuck threads wait in the kernel (:func:`thread_wait`, at most a few); null for every other
process."""

PROCESS_OWNER = "owner"
"""The key of a process dict that holds whose job it is (``gputui.agent.proc.owners``): ``{"kind", "id",
"name", ...}``, ``kind`` one of ``owners.OWNER_KINDS`` (slurm, pod, container, unit, user)."""
PROCESS_CPU_PCT = "cpu_pct"
"""The key of a process dict that holds its CPU % since the last process sample (100 = one core); null on its
first."""

PROCESS_LISTEN_PORTS = "listen_ports"
"""The key of a process dict that holds the TCP ports it has in LISTEN, sorted (read for the processes of
GPU jobs only; empty for every other process)."""

NSYS, NCU, CUPTI, TOOL = "nsys", "ncu", "cupti", "tool"
TOOLS = (NSYS, NCU, CUPTI, TOOL)
"""What a profiler mark (``PROCESS_PROFILER``) names, most specific first: Nsight Systems, Nsight Compute, a
CUPTI library, a tool library the injection variable names that is none of them."""
VIA_ARGV, VIA_ENVIRON, VIA_UNREADABLE = "argv", "environ", "unreadable"
"""How a mark was found: the process is the profiler (its argv), it carries one's injection (its
environment), or its environment cannot be read (nothing known)."""
DAEMON = "daemon"
"""The ``command`` of a profiler's helper process (an agent, a launcher): no options of its own."""

PROCESS_PROFILER = "profiler"
"""The key of a process dict that says whether it is a profiler or carries one's injection
(``gputui.agent.proc.profiler``), read for the processes of GPU jobs only: ``{"tool", "via", ...}`` with
``via`` "argv" (it is ``nsys profile …``, ``ncu …``: ``command``, ``trace``, ``cuda_graph_trace``,
``output``, ``capture_range`` where given), "environ" (its environment carries a profiler's injection:
``keys``, ``library``) or "unreadable" (its environment cannot be read: ``tool`` null); null for a process
that is neither, and for every process outside GPU jobs."""

LISTENING_PORTS = "listening_ports"
"""The key of a snapshot that holds every TCP port in LISTEN on the host, sorted and distinct (IPv4 and
IPv6); null where they could not be read or were too many to list (``ports.MAX_LISTENING_SOCKETS``)."""

PROCESSES_SAME = "processes_same"
"""A stream snapshot line marked with this (true) left out its process lists and listening ports: they are
the ones of the line before it, which has the same ``processes_time``."""

KERNEL_LOG = "kernel_log"
"""The key of a snapshot that says where the host's Xid history was read (``source``), why it could not be
(``error``), and the Xids for PCI addresses no GPU has (``unmatched``); null before the first fitness read.
Each GPU's own fitness figures and Xids are its ``health`` key (``gpu.fitness``)."""

REMEMBERED = "remembered"
"""The key of a snapshot that holds what the collector remembers of its host since boot
(``proc.jobmemory``): the jobs whose GPU memory is gone (``jobs``: each with its members still there,
``remaining``, those of them that are its profilers, ``profilers``, and the reports they left unfinished,
``reports``), the GPUs listed before and not now (``gpus_gone``), how many jobs it saw (``jobs_seen``),
since when (``since``) and why the record is not kept (``warning``); null from a collector that does not
remember (the simulator, before the first process sample)."""

PROBE = "probe"
"""The key of a snapshot that holds the readiness probe's report (the ``probe`` command's ``probes``,
``buffer_mib``, ``deadline_s``, ``time``); null where no probe was asked for. A collector's own snapshots
carry null: the client puts the probe it asked for beside the sample it took after it."""

GPU_FITNESS = "health"
"""The key of a GPU dict that holds its fitness figures and Xid history (``gpu.fitness.read_gpu_fitness`` and
``FitnessMonitor``); absent where nothing was read."""

GPU_UNREACHABLE = "unreachable"
"""The key of a GPU dict that says why the collector could not read it, as a fact with an action: one of
``UNREACHABLE_STATES``; absent while the GPU answers."""
UNREACHABLE_LOST = "lost"
"""The driver says the GPU is lost (NVML GPU_IS_LOST, nvidia-smi "GPU is lost"): a reboot brings it back."""
UNREACHABLE_RESET_REQUIRED = "reset_required"
"""NVML answered the GPU's own reads with RESET_REQUIRED."""
UNREACHABLE_TIMED_OUT = "timed_out"
"""The GPU's NVML calls did not return within the sample's deadline."""
UNREACHABLE_STATES = (UNREACHABLE_LOST, UNREACHABLE_RESET_REQUIRED, UNREACHABLE_TIMED_OUT)

GPU_TIMEOUTS_IN_ROW = "timeouts_in_row"
"""The key of a GPU dict that counts the samples in a row whose NVML calls on it timed out (absent at 0):
every GPU of a host timing out sample after sample is a wedged driver, not a slow one."""

GPU_MEMORY_UNREPORTED = "memory_unreported"
"""The key of a GPU dict (true) whose driver does not report its memory: a unified-memory GPU (GB10) answers
NVML's memory info with NOT_SUPPORTED and prints ``[N/A]`` in nvidia-smi; its memory figures are null and it
is judged by its processes. Absent where the memory is reported."""

FITNESS_INTERVAL_KEY = "fitness_interval_s"
"""The ``configure`` key that sets how often the GPUs' fitness is read (``FitnessMonitor.interval_s``): the
TUI's clean-slate check reads it with every memory sample while it waits."""

# ----------------------------------------------------------------------------------------------------------
# Limits the collector holds its commands and arguments to

PROBE_OK = "ok"
PROBE_FAILED = "failed"
PROBE_HUNG = "hung"
PROBE_STUCK = "stuck"
PROBE_UNAVAILABLE = "unavailable"
PROBE_SKIPPED = "skipped"
PROBE_RESULTS = (PROBE_OK, PROBE_FAILED, PROBE_HUNG, PROBE_STUCK, PROBE_UNAVAILABLE, PROBE_SKIPPED)
"""What one GPU's probe ended with: took work; a step returned an error; past the deadline (killed); past the
deadline and not killable (stuck in the driver); the probe cannot run on this host (no NVIDIA libcuda.so.1);
not probed (the GPU lists a process)."""

PROBE_STEPS = ("load", "init", "device", "context", "alloc", "write", "read", "compare", "free", "destroy")

PROBE_DEADLINE_S = 20.0
PROBE_DEADLINE_MIN_S = 1.0
PROBE_DEADLINE_MAX_S = 300.0
"""The readiness probe's deadline (``probe``'s ``deadline_s``): every GPU's child is past it killed."""
PROBE_BUFFER_MIB = 64
PROBE_BUFFER_MIN_MIB = 1
PROBE_BUFFER_MAX_MIB = 4096
"""The buffer each probe child allocates, writes and reads back (``probe``'s ``buffer_mib``)."""
INTERVAL_MIN_S = 0.05
"""The shortest sample interval (``check --wait`` samples every 0.09 s): shorter would only spin the CPU."""
INTERVAL_MAX_S = 3600.0
MEMORY_INTERVAL_S = 2.0
"""The default period of memory samples (with utilisation, temperature and power), nvitop's and nvidia-smi's
own: a clean-slate check and a kill sample as fast as the holders exit (``agent.proc.exits``), whatever it is,
and a monitor that samples twice as often costs its host twice as much for a chart no one reads per second."""
PROCESS_INTERVAL_S = 6.0
"""The default slow period of process lists on a host whose GPU memory stands still (a new CUDA context
always allocates memory, so a GPU's list cannot change unseen; the collector reads it again when memory
moves): what changes without it (a zombie, a child that holds nothing) is seen within this period."""
ESCALATE_MAX_S = 3600.0
"""The longest escalation delay a kill may ask for."""
RESET_RUN_MAX_S = 3600.0
"""The longest a confirmed reset may keep the collector alive after its client went (every step bounded)."""

# ----------------------------------------------------------------------------------------------------------
# How a host is read (``mode`` in the hello and in every snapshot)

MODE_NVML = "nvml"
"""NVML through pynvml (the bindings installed there, else the ones shipped with the collector)."""
MODE_SMI = "smi"
"""The driver's ``nvidia-smi`` (the NVML library cannot be loaded there) and /proc."""
MODE_NONE = "none"
"""Neither: no GPU figures, the host error says why."""
MODE_REDUCED = "ps"
"""No python3 there: ``nvidia-smi`` and ``ps`` from a POSIX sh loop, monitoring only."""
MODE_SIM = "sim"
"""A simulated host (``--demo``)."""
MODE_PROMETHEUS = "prometheus"
"""A fleet host read from DCGM exporter metrics in Prometheus."""
MODE_LABELS = {
    MODE_NVML: "NVML",
    MODE_SMI: "nvidia-smi",
    MODE_NONE: "no NVML",
    MODE_REDUCED: "reduced",
}
"""How a host line names the way a collector reads its host (the simulator and the fleet source are not
collectors: they have no label)."""

# ----------------------------------------------------------------------------------------------------------
# Kills: stages and results of an outcome

STAGE_INTENT = "intent"
"""Audit log only: what the client asked for, written before the command is sent."""
STAGE_CHECK = "check"
"""Identity and safety checks: nothing was sent."""
STAGE_SIGNAL = "signal"
"""The requested signal (TERM, INT or KILL)."""
STAGE_WAIT = "wait"
"""Watching what was signalled go, for the escalation delay (or the wait of a kill without escalation)."""
STAGE_ESCALATE = "escalate"
"""KILL to what outlived the escalation delay."""
STAGE_CONFIRM = "confirm"
"""After the escalated KILL: gone, or not."""
STAGE_ABANDON = "abandon"
"""The client gave up on an escalation before it was under way."""
STAGE_REQUEST = "request"
"""Audit log only: a command whose reply never came."""
KILL_STAGES = (
    STAGE_INTENT,
    STAGE_CHECK,
    STAGE_SIGNAL,
    STAGE_WAIT,
    STAGE_ESCALATE,
    STAGE_CONFIRM,
    STAGE_ABANDON,
    STAGE_REQUEST,
)
SIGNALLING_STAGES = frozenset({STAGE_SIGNAL, STAGE_ESCALATE})
"""Stages whose outcome says what a signal did; in the others ``signal`` is null or only context."""

RESULT_REQUESTED = "requested"
"""Audit log only (stage intent): asked for, not sent yet."""
RESULT_SENT = "sent"
"""Delivered; whether the process went is told by a later stage."""
RESULT_EXITED = "exited"
"""Gone after the requested signal."""
RESULT_KILLED = "killed"
"""Gone after the escalated KILL."""
RESULT_REAPED = "reaped"
"""A zombie of the job, reaped once its parent (signalled in the same operation) was gone."""
RESULT_GONE = "gone"
"""It had already exited before its signal."""
RESULT_REFUSED = "refused"
RESULT_CHANGED = "changed"
"""The pid now names another process (reused, or the host rebooted): not signalled."""
RESULT_DENIED = "denied"
RESULT_UNINTERRUPTIBLE = "uninterruptible"
"""Still there in uninterruptible sleep (D): it may not die until its I/O or driver call returns."""
RESULT_STILL_ALIVE = "still_alive"
RESULT_ABANDONED = "abandoned"
"""Still alive when the client gave up on its escalation: the KILL was not sent."""
RESULT_ERROR = "error"
RESULT_UNKNOWN = "unknown"
"""Audit log only (stage request): no reply came, so a signal may or may not have been sent."""
KILL_RESULTS = (
    RESULT_REQUESTED,
    RESULT_SENT,
    RESULT_EXITED,
    RESULT_KILLED,
    RESULT_REAPED,
    RESULT_GONE,
    RESULT_REFUSED,
    RESULT_CHANGED,
    RESULT_DENIED,
    RESULT_UNINTERRUPTIBLE,
    RESULT_STILL_ALIVE,
    RESULT_ABANDONED,
    RESULT_ERROR,
    RESULT_UNKNOWN,
)
RESULTS_GONE = frozenset({RESULT_EXITED, RESULT_KILLED, RESULT_REAPED, RESULT_GONE})
"""Final results that mean the targeted process is no more."""

# ----------------------------------------------------------------------------------------------------------
# Health endpoints: the state of a probe

ENDPOINT_STATE_UP = "UP"
"""A 2xx answer with its whole body (up to the read cap) inside the deadline."""
ENDPOINT_STATE_UNHEALTHY = "UNHEALTHY"
"""A 5xx answer (sglang answers 503 when its scheduler is wedged), and 429 (shedding load)."""
ENDPOINT_STATE_DOWN = "DOWN"
"""Connection refused: nothing listens on the port."""
ENDPOINT_STATE_TIMEOUT = "TIMEOUT"
"""The total deadline (lookup + connect + TLS + headers + body) passed."""
ENDPOINT_STATE_ERROR = "ERROR"
"""The probe cannot tell: bad URL, unresolvable name, TLS failure, a connection closed or reset without an
answer (a prohibited SSH forward), a redirect, or a 4xx other than 429 (a configuration problem)."""
ENDPOINT_STATES = (
    ENDPOINT_STATE_UP,
    ENDPOINT_STATE_UNHEALTHY,
    ENDPOINT_STATE_DOWN,
    ENDPOINT_STATE_TIMEOUT,
    ENDPOINT_STATE_ERROR,
)
"""The states the collector's probe sends."""

# Server states the collector does not send: the client derives them from health, the server's metrics and
# its launcher's age (``gputui.core.servers``). They belong beside the five above.
ENDPOINT_STATE_STARTING = "STARTING"
"""Refused or 503 while the launcher is young and has not served yet: loading weights, compiling, warming."""
ENDPOINT_STATE_BUSY = "BUSY"
"""Health failing (503, timeout) while tokens are being generated: working, not dead. Do not kill."""
ENDPOINT_STATE_STALLED = "STALLED"
"""Requests running or waiting and no token generated for the stall window, whatever /health says."""

# ----------------------------------------------------------------------------------------------------------
# Builders: every message and dict of one kind, one shape


def hello(mode: str, boot_id: str | None, hostname: str | None, **details: Any) -> dict[str, Any]:
    """The first line a collector writes: protocol version, how it reads the host, which host and boot.

    ``details`` are the collector's own (agent_version, error, python, pid, ...); a reader ignores what it
    does not know.
    """
    message = {
        "t": MSG_HELLO,
        "protocol": PROTOCOL_VERSION,
        "mode": mode,
        "boot_id": boot_id,
        "hostname": hostname,
    }
    message.update(details)
    return message


AUDIT_KEYS = (
    "time",
    "host",
    "boot_id",
    "local_user",
    "pid",
    "start_ticks",
    "name",
    "command",
    "signal",
    "requested_signal",
    "stage",
    "result",
    "detail",
)
"""The fields of a kill's audit line, in order: the client writes them, and a local kill's keeper writes those
the client was gone for."""


def audit_line(when: float, base: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """One audit line: ``base`` (host, boot_id, local_user, requested_signal) and ``fields`` (pid,
    start_ticks, name, command, signal, stage, result, detail) in ``AUDIT_KEYS`` order."""
    given = dict(base, **fields, time=when)
    return {key: given.get(key) for key in AUDIT_KEYS}


def reply(command_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    """The answer to a command that succeeded."""
    return {"t": MSG_REPLY, "id": command_id, "ok": True, "result": result}


def error_reply(command_id: Any, error: str) -> dict[str, Any]:
    """The answer to a command that was refused or failed: one line of ``error``."""
    return {"t": MSG_REPLY, "id": command_id, "ok": False, "error": error}


SNAPSHOT_FIELDS = (
    "target",
    "hostname",
    "boot_id",
    "time",
    "error",
    "driver_version",
    "cuda_driver_version",
    "mode",
    "agent_version",
    "agent_pid",
    "processes_time",
    "gpus",
    "processes",
    "processes_omitted",
    "device_holders",
    LISTENING_PORTS,
    KERNEL_LOG,
    REMEMBERED,
    PROBE,
    "findings",
    "health",
    "verdict",
)
"""The keys of a snapshot dict (``model.HostSnapshot``'s fields, in its order)."""


def snapshot(
    target: str,
    hostname: str | None,
    boot_id: str | None,
    time: float | None,
    mode: str,
    gpus: Iterable[dict[str, Any]] = (),
    processes: Iterable[dict[str, Any]] = (),
    error: str | None = None,
    driver_version: str | None = None,
    cuda_driver_version: str | None = None,
    agent_version: str | None = None,
    agent_pid: int | None = None,
    processes_time: float | None = None,
    processes_omitted: int = 0,
    device_holders: list[dict[str, Any]] | None = None,
    health: Iterable[dict[str, Any]] = (),
    listening_ports: list[int] | None = None,
    kernel_log: dict[str, Any] | None = None,
    remembered: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One host's snapshot as a dict: what a collector saw, with no findings or verdict (the client's)."""
    return {
        "target": target,
        "hostname": hostname,
        "boot_id": boot_id,
        "time": time,
        "error": error,
        "driver_version": driver_version,
        "cuda_driver_version": cuda_driver_version,
        "mode": mode,
        "agent_version": agent_version,
        "agent_pid": agent_pid,
        "processes_time": processes_time,
        "gpus": list(gpus),
        "processes": list(processes),
        "processes_omitted": processes_omitted,
        "device_holders": device_holders,
        LISTENING_PORTS: listening_ports,
        KERNEL_LOG: kernel_log,
        REMEMBERED: remembered,
        PROBE: None,
        "findings": [],
        "health": list(health),
        "verdict": None,
    }


def live_threads(live: int, states: dict[str, int], omitted: int) -> dict[str, Any]:
    """The threads of a zombie-state process that have not exited, leader excluded: how many, how many in
    each state letter (``D``: uninterruptible, usually in a driver), and how many thread entries were not
    read (over the collector's cap). ``live == 0``: a true zombie, which holds no memory."""
    return {"live": live, "states": dict(sorted(states.items())), "omitted": omitted}


def thread_wait(
    tid: int,
    state: str,
    symbol: str | None,
    module: str | None,
    stack: bool,
    since: float,
    killed: bool | None,
) -> dict[str, Any]:
    """Where one stuck thread waits in the kernel (``agent.proc.waits``).

    Args:
        tid: The thread.
        state: Its state letter: ``D`` (uninterruptible sleep), or ``R`` for a thread that runs in the kernel
            and has not returned to its program since ``since``.
        symbol: The kernel function it is in; None: unknown (no wait channel, no readable stack).
        module: The kernel module that function belongs to (``nvidia_uvm``); None: the kernel itself when
            ``stack``, else unknown.
        stack: Whether the place was read from the thread's kernel stack (root only), else from its wait
            channel (which names no module).
        since: Epoch seconds since when the collector has seen it so (in D, or with its user time still).
        killed: Whether a SIGKILL waits for it (it was killed and is still there); None: unknown.
    """
    return {
        "tid": tid,
        "state": state,
        "symbol": symbol,
        "module": module,
        "stack": stack,
        "since": since,
        "killed": killed,
    }


def snapshot_message(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {"t": MSG_SNAPSHOT, "snapshot": snapshot}
